/* Implementation of hf_metadata.h. Key names and value types follow the
 * files llama.cpp's convert_hf_to_gguf.py writes (u32 sizes, f32 floats). */
#include "convert/hf_metadata.h"

#include "convert/convert.h"
#include "models/model_internal.h"
#include "rbee/json_config.h"
#include "rbee/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *cv_gguf_arch(const rb_model_config *c) {
    /* llama.cpp writes Mistral and Mixtral as llama (Mixtral: llama with experts) */
    return c->arch == RB_ARCH_MISTRAL || c->arch == RB_ARCH_MIXTRAL ? "llama" : rb_arch_name(c->arch);
}

typedef struct kvw {
    rb_gguf_writer *w;
    const char *arch;
    rb_status st;
    char failed[160];
} kvw;

static void note(kvw *k, rb_status s, const char *key) {
    if (s != RB_OK && k->st == RB_OK) {
        k->st = s;
        snprintf(k->failed, sizeof k->failed, "%s", key);
    }
}
static void u32k(kvw *k, const char *sfx, int64_t v) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", k->arch, sfx);
    note(k, v < 0 || v > UINT32_MAX ? RB_E_RANGE : rb_gguf_writer_set_u32(k->w, key, (uint32_t)v), key);
}
static void f32k(kvw *k, const char *sfx, float v) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", k->arch, sfx);
    note(k, rb_gguf_writer_set_f32(k->w, key, v), key);
}
static void strk(kvw *k, const char *sfx, const char *v) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", k->arch, sfx);
    note(k, rb_gguf_writer_set_str(k->w, key, v), key);
}
static void boolk(kvw *k, const char *sfx, bool v) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", k->arch, sfx);
    note(k, rb_gguf_writer_set_bool(k->w, key, v), key);
}

static bool is_gemma(const rb_model_config *c) {
    return c->arch == RB_ARCH_GEMMA || c->arch == RB_ARCH_GEMMA2 || c->arch == RB_ARCH_GEMMA3;
}

/* The sliding-window layout a GGUF loader infers without a pattern key:
 * gemma2 and gpt-oss alternate (period 2), gemma3 five local then one
 * global (6), the others use the window everywhere (0). */
static int implied_swa_pattern(const rb_model_config *c) {
    switch (c->arch) {
    case RB_ARCH_GEMMA2:
    case RB_ARCH_GPTOSS: return 2;
    case RB_ARCH_GEMMA3: return 6;
    default: return 0;
    }
}

/* What GGUF metadata cannot say: sliding-window layouts other than the
 * implied one (gemma3 has a pattern key), yarn variants the loader would
 * not reproduce. */
static rb_status check_expressible(const rb_model_config *c, rb_error *err) {
    if (c->sliding_window > 0 && c->swa_pattern != implied_swa_pattern(c) && c->arch != RB_ARCH_GEMMA3)
        return rb_error_set(err, RB_E_UNSUPPORTED,
                            "this layout of sliding-window layers cannot be expressed in %s GGUF metadata",
                            cv_gguf_arch(c));
    if (c->rope_yarn_factor > 0) {
        rb_model_config d = *c;
        d.rope_yarn_truncate = c->arch != RB_ARCH_GPTOSS; /* what the GGUF loader assumes */
        float f[1], attn = 0;
        d.n_rot = 2; /* only the attention factor is wanted */
        rb_rope_yarn_factors(&d, f, &attn);
        if (d.rope_yarn_truncate != c->rope_yarn_truncate)
            return rb_error_set(err, RB_E_UNSUPPORTED, "yarn with truncate %s cannot be expressed in %s GGUF metadata",
                                c->rope_yarn_truncate ? "true" : "false", cv_gguf_arch(c));
        if (attn != c->rope_attn_factor)
            return rb_error_set(err, RB_E_UNSUPPORTED,
                                "an explicit yarn attention_factor (%g) cannot be expressed in GGUF metadata",
                                (double)c->rope_attn_factor);
    }
    return RB_OK;
}

/* llama.cpp's converter writes head_dim where the HF config states it (these
 * architectures' configs do), and it is needed wherever it is not n_embd / n_head. */
static bool writes_head_dim(const rb_model_config *c) {
    return is_gemma(c) || c->arch == RB_ARCH_QWEN3 || c->arch == RB_ARCH_QWEN3MOE || c->arch == RB_ARCH_GPTOSS ||
           c->head_dim * c->n_head != c->n_embd;
}

static void write_rope(kvw *k, const rb_model_config *c) {
    u32k(k, "rope.dimension_count", c->n_rot);
    f32k(k, "rope.freq_base", c->rope_theta);
    if (c->rope_theta_swa > 0) f32k(k, "rope.freq_base_swa", c->rope_theta_swa); /* gemma3's local base */
    if (c->rope_freq_scale > 0 && c->rope_freq_scale != 1.0f) {
        strk(k, "rope.scaling.type", "linear");
        f32k(k, "rope.scaling.factor", 1.0f / c->rope_freq_scale);
    }
    if (c->rope_yarn_factor > 0) {
        strk(k, "rope.scaling.type", "yarn");
        f32k(k, "rope.scaling.factor", c->rope_yarn_factor);
        u32k(k, "rope.scaling.original_context_length", c->rope_orig_ctx);
        f32k(k, "rope.scaling.yarn_beta_fast", c->rope_yarn_beta_fast);
        f32k(k, "rope.scaling.yarn_beta_slow", c->rope_yarn_beta_slow);
    }
    if (c->has_rope_long) {
        f32k(k, "rope.scaling.attn_factor", c->rope_attn_factor);
        u32k(k, "rope.scaling.original_context_length", c->rope_orig_ctx);
    }
}

static void write_experts(kvw *k, const rb_model_config *c) {
    if (c->n_expert <= 0) return;
    u32k(k, "expert_count", c->n_expert);
    u32k(k, "expert_used_count", c->n_expert_used);
    if (c->arch != RB_ARCH_MIXTRAL) u32k(k, "expert_feed_forward_length", c->n_ff_exp);
    /* llama.cpp renormalizes qwen3moe's top-k weights; say so where the model does not */
    if (c->arch == RB_ARCH_QWEN3MOE && !c->moe_norm_topk) boolk(k, "expert_weights_norm", false);
}

rb_status cv_write_model_kv(rb_gguf_writer *w, const rb_model_config *c, const char *name, rb_dtype type,
                            rb_error *err) {
    rb_status s = check_expressible(c, err);
    if (s != RB_OK) return s;
    kvw k = {.w = w, .arch = cv_gguf_arch(c), .st = RB_OK};
    note(&k, rb_gguf_writer_set_str(w, "general.architecture", k.arch), "general.architecture");
    note(&k, rb_gguf_writer_set_str(w, "general.name", name), "general.name");
    note(&k, rb_gguf_writer_set_u32(w, "general.file_type", rb_convert_file_type(type)), "general.file_type");
    note(&k, rb_gguf_writer_set_u32(w, "general.quantization_version", 2), "general.quantization_version");
    u32k(&k, "vocab_size", c->n_vocab);
    if (c->n_ctx_train > 0) u32k(&k, "context_length", c->n_ctx_train);
    u32k(&k, "embedding_length", c->n_embd);
    u32k(&k, "block_count", c->n_layer);
    u32k(&k, "feed_forward_length", c->n_ff);
    u32k(&k, "attention.head_count", c->n_head);
    u32k(&k, "attention.head_count_kv", c->n_head_kv);
    if (writes_head_dim(c)) {
        u32k(&k, "attention.key_length", c->head_dim);
        u32k(&k, "attention.value_length", c->head_dim);
    }
    f32k(&k, "attention.layer_norm_rms_epsilon", c->norm_eps);
    write_rope(&k, c);
    if (c->sliding_window > 0) {
        u32k(&k, "attention.sliding_window", c->sliding_window);
        if (c->swa_pattern != implied_swa_pattern(c)) u32k(&k, "attention.sliding_window_pattern", c->swa_pattern);
    }
    if (c->attn_softcap > 0) f32k(&k, "attn_logit_softcapping", c->attn_softcap);
    if (c->final_softcap > 0) f32k(&k, "final_logit_softcapping", c->final_softcap);
    if (c->arch == RB_ARCH_GEMMA2 || c->arch == RB_ARCH_GEMMA3)
        f32k(&k, "attention.scale", c->attn_scale); /* query_pre_attn_scalar^-1/2 */
    write_experts(&k, c);
    if (k.st != RB_OK) return rb_error_set(err, k.st, "cannot write metadata key '%s'", k.failed);
    return RB_OK;
}

static bool file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* chat template without a tokenizer.json: tokenizer_config.json's string, else chat_template.jinja */
static rb_status write_template_only(rb_gguf_writer *w, const char *hf_dir, rb_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", hf_dir);
    if (file_exists(path)) {
        rb_json_config *j = NULL;
        rb_status s = rb_json_config_load(path, &j, err);
        if (s != RB_OK) return s;
        const char *tpl = NULL;
        if (rb_json_config_str(j, "chat_template", &tpl) == RB_OK) {
            s = rb_gguf_writer_set_str(w, "tokenizer.chat_template", tpl);
            rb_json_config_free(j);
            return s == RB_OK ? RB_OK : rb_error_set(err, s, "cannot write tokenizer.chat_template");
        }
        rb_json_config_free(j);
    }
    snprintf(path, sizeof path, "%s/chat_template.jinja", hf_dir);
    if (!file_exists(path)) return RB_OK;
    FILE *f = fopen(path, "rb");
    if (!f) return rb_error_set(err, RB_E_IO, "cannot open %s", path);
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n < (64L << 20) && fseek(f, 0, SEEK_SET) == 0)
        buf = malloc((size_t)n + 1);
    rb_status s = RB_OK;
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) s = rb_error_set(err, RB_E_IO, "cannot read %s", path);
    fclose(f);
    if (s == RB_OK) {
        buf[n] = '\0';
        if (strlen(buf) != (size_t)n) s = rb_error_set(err, RB_E_FORMAT, "%s contains a NUL byte", path);
        else if (rb_gguf_writer_set_str(w, "tokenizer.chat_template", buf) != RB_OK)
            s = rb_error_set(err, RB_E_NOMEM, "cannot write tokenizer.chat_template");
    }
    free(buf);
    return s;
}

rb_status cv_write_tokenizer_kv(rb_gguf_writer *w, const char *hf_dir, FILE *log, rb_error *err) {
    char tj[4096], tc[4096];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", hf_dir);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", hf_dir);
    if (!file_exists(tj)) {
        if (log) fprintf(log, "note: %s has no tokenizer.json; the GGUF will have no tokenizer\n", hf_dir);
        return write_template_only(w, hf_dir, err);
    }
    rb_tokenizer *t = NULL;
    rb_status s = rb_tokenizer_load_hf(tj, file_exists(tc) ? tc : NULL, &t, err);
    if (s != RB_OK) {
        rb_error_prefix(err, "tokenizer: ");
        return s;
    }
    s = rb_tokenizer_write_gguf(t, w, err);
    bool had_template = rb_tokenizer_chat_template(t) != NULL;
    rb_tokenizer_free(t);
    if (s != RB_OK) {
        rb_error_prefix(err, "tokenizer: ");
        return s;
    }
    if (!had_template) {
        char jp[4096];
        snprintf(jp, sizeof jp, "%s/chat_template.jinja", hf_dir);
        if (file_exists(jp)) return write_template_only(w, hf_dir, err);
    }
    return RB_OK;
}

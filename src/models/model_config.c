/* Model hyper-parameters: reads them from GGUF metadata (the keys llama.cpp
 * writes, prefixed by general.architecture) or from a Hugging Face
 * config.json, into one rb_model_config the forward pass uses. */
#include "models/model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_arch_names[RB_ARCH_COUNT_] = {
    [RB_ARCH_LLAMA] = "llama", [RB_ARCH_MISTRAL] = "mistral", [RB_ARCH_QWEN2] = "qwen2",
    [RB_ARCH_GEMMA] = "gemma", [RB_ARCH_GEMMA2] = "gemma2",   [RB_ARCH_PHI3] = "phi3",
    [RB_ARCH_QWEN3] = "qwen3", [RB_ARCH_QWEN3MOE] = "qwen3moe", [RB_ARCH_GEMMA3] = "gemma3",
    [RB_ARCH_OLMO2] = "olmo2", [RB_ARCH_GPTOSS] = "gpt-oss",   [RB_ARCH_MIXTRAL] = "mixtral",
};

/* Hugging Face model_type values that differ from the GGUF names. */
static const struct {
    const char *hf;
    rb_arch arch;
} k_hf_aliases[] = {
    {"qwen3_moe", RB_ARCH_QWEN3MOE}, {"gemma3_text", RB_ARCH_GEMMA3}, {"gpt_oss", RB_ARCH_GPTOSS},
};

const char *rb_arch_name(rb_arch a) { return (unsigned)a < RB_ARCH_COUNT_ ? k_arch_names[a] : "?"; }
const char *rb_arch_supported_list(void) {
    return "llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gemma, gemma2, gemma3_text, phi3, olmo2, gpt_oss";
}

static bool arch_from_hf_name(const char *s, rb_arch *out) {
    for (size_t i = 0; i < sizeof k_hf_aliases / sizeof k_hf_aliases[0]; i++)
        if (strcmp(s, k_hf_aliases[i].hf) == 0) {
            *out = k_hf_aliases[i].arch;
            return true;
        }
    for (int i = 0; i < RB_ARCH_COUNT_; i++)
        if (strcmp(s, k_arch_names[i]) == 0 && i != RB_ARCH_QWEN3MOE && i != RB_ARCH_GPTOSS) {
            *out = (rb_arch)i;
            return true;
        }
    return false;
}

static bool arch_from_name(const char *s, rb_arch *out) {
    for (int i = 0; i < RB_ARCH_COUNT_; i++)
        if (strcmp(s, k_arch_names[i]) == 0) {
            *out = (rb_arch)i;
            return true;
        }
    return false;
}

#define RB_MAX_HEAD_DIM 1024

/* What each architecture fixes (the files may override some: sizes, windows, rope). */
static void apply_arch_defaults(rb_model_config *c) {
    c->rope_mode = RB_ROPE_NEOX;
    c->gelu_act = false;
    c->embd_scale = false;
    c->post_norms = false;
    c->pre_norms = true;
    switch (c->arch) {
    case RB_ARCH_QWEN3:
    case RB_ARCH_QWEN3MOE: c->qk_norm = 1; break;
    case RB_ARCH_GEMMA3:
        c->gelu_act = true;
        c->embd_scale = true;
        c->post_norms = true;
        c->qk_norm = 1;
        c->swa_pattern = 6;
        c->rope_theta_swa = 10000.0f;
        break;
    case RB_ARCH_OLMO2:
        c->qk_norm = 2;
        c->post_norms = true;
        c->pre_norms = false;
        break;
    case RB_ARCH_GPTOSS:
        c->attn_sinks = true;
        c->swa_pattern = 2;
        c->moe_topk_softmax = true;
        c->moe_bias = true;
        c->swiglu_alpha = 1.702f; /* transformers' GptOssExperts */
        c->swiglu_limit = 7.0f;
        c->rope_yarn_beta_fast = 32.0f;
        c->rope_yarn_beta_slow = 1.0f;
        c->rope_yarn_truncate = false;
        break;
    case RB_ARCH_MIXTRAL: c->moe_norm_topk = true; break;
    case RB_ARCH_GEMMA:
        c->gelu_act = true;
        c->embd_scale = true;
        break;
    case RB_ARCH_GEMMA2:
        c->gelu_act = true;
        c->embd_scale = true;
        c->post_norms = true;
        c->swa_pattern = 2;
        break;
    case RB_ARCH_PHI3:
        c->fused_qkv = true;
        c->fused_gate_up = true;
        break;
    default: break;
    }
}

static rb_status check_config(rb_model_config *c, rb_error *err) {
    if (c->n_embd <= 0 || c->n_layer <= 0 || c->n_head <= 0 || c->n_head_kv <= 0 || c->n_ff <= 0 ||
        c->n_vocab <= 0)
        return rb_error_set(err, RB_E_FORMAT,
                            "model config: sizes must be positive (embd %lld, layers %lld, heads %lld/%lld, "
                            "ff %lld, vocab %lld)",
                            (long long)c->n_embd, (long long)c->n_layer, (long long)c->n_head,
                            (long long)c->n_head_kv, (long long)c->n_ff, (long long)c->n_vocab);
    if (c->n_layer > 4096 || c->n_head > 4096 || c->n_embd > (1 << 20) || c->n_ff > (1 << 22) ||
        c->n_vocab > (1 << 24))
        return rb_error_set(err, RB_E_FORMAT, "model config: implausibly large sizes");
    if (c->n_head % c->n_head_kv != 0)
        return rb_error_set(err, RB_E_FORMAT, "model config: %lld heads not a multiple of %lld kv heads",
                            (long long)c->n_head, (long long)c->n_head_kv);
    if (c->head_dim <= 0) {
        if (c->n_embd % c->n_head != 0)
            return rb_error_set(err, RB_E_FORMAT, "model config: embedding %lld not divisible by %lld heads",
                                (long long)c->n_embd, (long long)c->n_head);
        c->head_dim = c->n_embd / c->n_head;
    }
    if (c->head_dim > RB_MAX_HEAD_DIM)
        return rb_error_set(err, RB_E_FORMAT, "model config: head_dim %lld too large (at most %d)",
                            (long long)c->head_dim, RB_MAX_HEAD_DIM);
    if (c->n_rot <= 0) c->n_rot = (int)c->head_dim;
    if (c->n_rot > c->head_dim || c->n_rot % 2)
        return rb_error_set(err, RB_E_FORMAT, "model config: rotary dims %d invalid for head_dim %lld", c->n_rot,
                            (long long)c->head_dim);
    if (!(c->norm_eps > 0) || !(c->rope_theta > 0))
        return rb_error_set(err, RB_E_FORMAT, "model config: norm epsilon and rope theta must be positive");
    if (c->attn_scale <= 0) c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    if (c->rope_freq_scale <= 0) c->rope_freq_scale = 1.0f;
    if (c->rope_attn_factor <= 0) c->rope_attn_factor = 1.0f;
    if (c->sliding_window < 0) c->sliding_window = 0;
    if (c->swa_pattern < 0 || c->swa_pattern > c->n_layer) c->swa_pattern = 0;
    if (c->n_expert != 0) {
        if (c->n_expert < 1 || c->n_expert > 4096 || c->n_expert_used < 1 || c->n_expert_used > c->n_expert ||
            c->n_ff_exp <= 0 || c->n_ff_exp > (1 << 22))
            return rb_error_set(err, RB_E_FORMAT, "model config: %lld experts, %lld used, expert ff %lld are invalid",
                                (long long)c->n_expert, (long long)c->n_expert_used, (long long)c->n_ff_exp);
    }
    if (c->rope_yarn_factor != 0.0f && (!(c->rope_yarn_factor > 0.0f) || c->rope_orig_ctx <= 0 ||
                                        !(c->rope_yarn_beta_fast > 0.0f) || !(c->rope_yarn_beta_slow > 0.0f)))
        return rb_error_set(err, RB_E_FORMAT, "model config: invalid yarn rope parameters");
    return RB_OK;
}

bool rb_layer_uses_window(const rb_model_config *c, int64_t il) {
    if (c->sliding_window <= 0) return false;
    return c->swa_pattern == 0 || il % c->swa_pattern < c->swa_pattern - 1;
}

/* transformers' _compute_yarn_parameters as divisors of theta_i: inv_freq_i =
 * base^(-2i/d) / out[i]; the attention factor comes back in *attn. */
void rb_rope_yarn_factors(const rb_model_config *c, float *out, float *attn) {
    const double d = c->n_rot, base = c->rope_theta, f = c->rope_yarn_factor, orig = (double)c->rope_orig_ctx;
    double lo = d * log(orig / (c->rope_yarn_beta_fast * 2.0 * M_PI)) / (2.0 * log(base));
    double hi = d * log(orig / (c->rope_yarn_beta_slow * 2.0 * M_PI)) / (2.0 * log(base));
    if (c->rope_yarn_truncate) {
        lo = floor(lo);
        hi = ceil(hi);
    }
    lo = lo > 0 ? lo : 0;
    hi = hi < d - 1 ? hi : d - 1;
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < c->n_rot / 2; i++) {
        /* in f32 as torch computes them */
        const float pos = powf((float)base, (float)(2 * i) / (float)c->n_rot);
        const float extra = 1.0f / pos, inter = 1.0f / ((float)f * pos);
        float ramp = (float)(((double)i - lo) / (hi - lo));
        ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
        const float keep = 1.0f - ramp; /* extrapolation share */
        const float inv = inter * (1.0f - keep) + extra * keep;
        out[i] = (float)(1.0 / pow(base, (2.0 * i) / d) / (double)inv);
    }
    *attn = f <= 1.0 ? 1.0f : (float)(0.1 * log(f) + 1.0);
}

static void config_init(rb_model_config *c) {
    memset(c, 0, sizeof *c);
    c->bos_id = -1;
    c->rope_theta = 10000.0f;
    c->norm_eps = 1e-5f;
}

/* ---------------- GGUF ---------------- */

static rb_status gguf_int(const rb_gguf *g, const char *arch, const char *suffix, int64_t *out, bool required,
                          rb_error *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    rb_status s = rb_gguf_get_i64(g, key, out);
    if (s == RB_E_NOT_FOUND && !required) return RB_OK;
    if (s != RB_OK) return rb_error_set(err, RB_E_FORMAT, "GGUF metadata '%s' %s", key,
                                        s == RB_E_NOT_FOUND ? "is missing" : "has a wrong type");
    return RB_OK;
}

static rb_status gguf_float(const rb_gguf *g, const char *arch, const char *suffix, float *out, rb_error *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    rb_status s = rb_gguf_get_f32(g, key, out);
    if (s == RB_E_NOT_FOUND) return RB_OK;
    if (s != RB_OK) return rb_error_set(err, RB_E_FORMAT, "GGUF metadata '%s' has a wrong type", key);
    return RB_OK;
}

/* llama.cpp's gemma2 / gemma3 files carry no attention scale: their 27B
 * models (46 / 62 layers) scale by query_pre_attn_scalar = n_embd / n_head
 * (144, 168), the others by head_dim (check_config's default). 0: not those. */
static float gemma_27b_attn_scale(const rb_model_config *c) {
    const bool is27b = (c->arch == RB_ARCH_GEMMA2 && c->n_layer == 46) || (c->arch == RB_ARCH_GEMMA3 && c->n_layer == 62);
    return is27b && c->n_head > 0 ? 1.0f / sqrtf((float)c->n_embd / (float)c->n_head) : 0.0f;
}

rb_status rb_model_config_from_gguf(const rb_gguf *g, rb_model_config *c, rb_error *err) {
    config_init(c);
    char *arch = NULL;
    if (rb_gguf_get_str(g, "general.architecture", &arch) != RB_OK)
        return rb_error_set(err, RB_E_FORMAT, "GGUF has no general.architecture string");
    if (strcmp(arch, "mixtral") == 0 || !arch_from_name(arch, &c->arch)) {
        rb_error_set(err, RB_E_UNSUPPORTED, "architecture '%s' is not supported (supported: %s)", arch,
                     rb_arch_supported_list());
        free(arch);
        return RB_E_UNSUPPORTED;
    }
    apply_arch_defaults(c);
    /* llama.cpp stores llama/mistral q,k permuted for the adjacent-pair rope layout */
    if (c->arch == RB_ARCH_LLAMA || c->arch == RB_ARCH_MISTRAL) c->rope_mode = RB_ROPE_NORMAL;
    rb_status s = RB_OK;
    int64_t v = 0;
#define REQ(sfx, field)                                                                                         \
    do {                                                                                                        \
        v = 0;                                                                                                  \
        if ((s = gguf_int(g, arch, sfx, &v, true, err)) != RB_OK) goto done;                                    \
        c->field = v;                                                                                           \
    } while (0)
#define OPT(sfx, field)                                                                                         \
    do {                                                                                                        \
        v = -1;                                                                                                 \
        if ((s = gguf_int(g, arch, sfx, &v, false, err)) != RB_OK) goto done;                                   \
        if (v > INT32_MAX) {                                                                                    \
            s = rb_error_set(err, RB_E_FORMAT, "GGUF metadata '%s.%s' = %lld is out of range", arch, sfx,       \
                             (long long)v);                                                                     \
            goto done;                                                                                          \
        }                                                                                                       \
        if (v >= 0) c->field = (int)v;                                                                          \
    } while (0)
    REQ("embedding_length", n_embd);
    REQ("block_count", n_layer);
    REQ("feed_forward_length", n_ff);
    REQ("attention.head_count", n_head);
    c->n_head_kv = c->n_head;
    OPT("attention.head_count_kv", n_head_kv);
    OPT("context_length", n_ctx_train);
    OPT("attention.key_length", head_dim);
    OPT("rope.dimension_count", n_rot);
    OPT("attention.sliding_window", sliding_window);
    OPT("rope.scaling.original_context_length", rope_orig_ctx);
    OPT("attention.sliding_window_pattern", swa_pattern);
    {
        int64_t ne = 0, nu = 0, nf = 0;
        if ((s = gguf_int(g, arch, "expert_count", &ne, false, err)) != RB_OK) goto done;
        if ((s = gguf_int(g, arch, "expert_used_count", &nu, false, err)) != RB_OK) goto done;
        if ((s = gguf_int(g, arch, "expert_feed_forward_length", &nf, false, err)) != RB_OK) goto done;
        if (ne > 0) {
            c->n_expert = ne;
            c->n_expert_used = nu;
            c->n_ff_exp = nf > 0 ? nf : c->n_ff;
            if (c->arch == RB_ARCH_LLAMA) { /* llama.cpp's Mixtral */
                c->arch = RB_ARCH_MIXTRAL;
                c->moe_norm_topk = true;
            }
            if (c->arch == RB_ARCH_QWEN3MOE) c->moe_norm_topk = true; /* llama.cpp's default */
            bool nw = c->moe_norm_topk;
            char key[160];
            snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
            if (rb_gguf_get_bool(g, key, &nw) == RB_OK) c->moe_norm_topk = nw;
        }
    }
#undef REQ
#undef OPT
    if ((s = gguf_float(g, arch, "attention.layer_norm_rms_epsilon", &c->norm_eps, err)) != RB_OK) goto done;
    if ((s = gguf_float(g, arch, "rope.freq_base", &c->rope_theta, err)) != RB_OK) goto done;
    if ((s = gguf_float(g, arch, "attn_logit_softcapping", &c->attn_softcap, err)) != RB_OK) goto done;
    if ((s = gguf_float(g, arch, "final_logit_softcapping", &c->final_softcap, err)) != RB_OK) goto done;
    if ((s = gguf_float(g, arch, "attention.scale", &c->attn_scale, err)) != RB_OK) goto done;
    if ((s = gguf_float(g, arch, "rope.scaling.attn_factor", &c->rope_attn_factor, err)) != RB_OK) goto done;
    if ((s = gguf_float(g, arch, "rope.freq_base_swa", &c->rope_theta_swa, err)) != RB_OK) goto done;
    if ((s = gguf_float(g, arch, "rope.scaling.yarn_beta_fast", &c->rope_yarn_beta_fast, err)) != RB_OK) goto done;
    if ((s = gguf_float(g, arch, "rope.scaling.yarn_beta_slow", &c->rope_yarn_beta_slow, err)) != RB_OK) goto done;
    {
        char key[160];
        char *stype = NULL;
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        if (rb_gguf_get_str(g, key, &stype) == RB_OK) {
            float factor = 1.0f;
            if ((s = gguf_float(g, arch, "rope.scaling.factor", &factor, err)) != RB_OK) {
                free(stype);
                goto done;
            }
            if (strcmp(stype, "linear") == 0 && factor > 0) c->rope_freq_scale = 1.0f / factor;
            else if (strcmp(stype, "yarn") == 0) {
                c->rope_yarn_factor = factor;
                if (c->rope_yarn_beta_fast <= 0) c->rope_yarn_beta_fast = 32.0f;
                if (c->rope_yarn_beta_slow <= 0) c->rope_yarn_beta_slow = 1.0f;
                c->rope_yarn_truncate = c->arch != RB_ARCH_GPTOSS;
                c->has_rope_factors = true;
            } else if (strcmp(stype, "none") != 0 && strcmp(stype, "linear") != 0) {
                s = rb_error_set(err, RB_E_UNSUPPORTED, "rope scaling type '%s' is not supported", stype);
                free(stype);
                goto done;
            }
            free(stype);
        }
    }
    {
        const rb_gguf_tensor_info *te = rb_gguf_find_tensor(g, "token_embd.weight");
        if (!te) {
            s = rb_error_set(err, RB_E_FORMAT, "GGUF has no tensor 'token_embd.weight'");
            goto done;
        }
        c->n_vocab = te->ne[1];
        c->tied_embeddings = rb_gguf_find_tensor(g, "output.weight") == NULL;
        c->qkv_bias = rb_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL ||
                      rb_gguf_find_tensor(g, "blk.0.attn_qkv.bias") != NULL;
        c->fused_qkv = rb_gguf_find_tensor(g, "blk.0.attn_qkv.weight") != NULL;
        c->fused_gate_up = c->arch == RB_ARCH_PHI3 && rb_gguf_find_tensor(g, "blk.0.ffn_gate.weight") == NULL;
        c->has_rope_factors = c->rope_yarn_factor > 0 || /* yarn: computed from the metadata by the loader */
                              rb_gguf_find_tensor(g, "rope_freqs.weight") != NULL ||
                              rb_gguf_find_tensor(g, "rope_factors_short.weight") != NULL;
        c->has_rope_long = rb_gguf_find_tensor(g, "rope_factors_long.weight") != NULL;
    }
    {
        uint32_t id;
        if (rb_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &id) == RB_OK) c->bos_id = (int32_t)id;
        if (rb_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &id) == RB_OK) c->eos_ids[c->n_eos++] = (int32_t)id;
        if (rb_gguf_get_u32(g, "tokenizer.ggml.eot_token_id", &id) == RB_OK && c->n_eos < 4 &&
            (c->n_eos == 0 || c->eos_ids[0] != (int32_t)id))
            c->eos_ids[c->n_eos++] = (int32_t)id;
    }
    if ((c->arch == RB_ARCH_GEMMA2 || c->arch == RB_ARCH_GEMMA3 || c->arch == RB_ARCH_GPTOSS) &&
        c->sliding_window == 0)
        c->swa_pattern = 0;
    if (c->attn_scale <= 0) c->attn_scale = gemma_27b_attn_scale(c);
    s = check_config(c, err);
done:
    if (s != RB_OK && err && err->msg[0] == '\0') rb_error_set(err, s, "invalid GGUF model metadata");
    free(arch);
    return s;
}

/* ---------------- Hugging Face config.json ---------------- */

static rb_status hf_int(const rb_json_config *j, const char *key, int64_t *out, bool required, rb_error *err) {
    rb_status s = rb_json_config_int(j, key, out);
    if (s == RB_E_NOT_FOUND && !required) return RB_OK;
    if (s != RB_OK)
        return rb_error_set(err, RB_E_FORMAT, "config.json: '%s' %s", key,
                            s == RB_E_NOT_FOUND ? "is missing" : "is not an integer");
    return RB_OK;
}

static rb_status hf_num(const rb_json_config *j, const char *key, float *out, rb_error *err) {
    double d;
    rb_status s = rb_json_config_num(j, key, &d);
    if (s == RB_E_NOT_FOUND) return RB_OK;
    if (s != RB_OK) return rb_error_set(err, RB_E_FORMAT, "config.json: '%s' is not a number", key);
    *out = (float)d;
    return RB_OK;
}

/* eos_token_id may be an int or a list of ints */
static void hf_eos(const rb_json_config *j, rb_model_config *c) {
    int64_t v;
    size_t n;
    if (rb_json_config_int(j, "eos_token_id", &v) == RB_OK) {
        c->n_eos = 0;
        c->eos_ids[c->n_eos++] = (int32_t)v;
    } else if (rb_json_config_arr_len(j, "eos_token_id", &n) == RB_OK) {
        c->n_eos = 0;
        for (size_t i = 0; i < n && c->n_eos < 4; i++)
            if (rb_json_config_arr_int(j, "eos_token_id", i, &v) == RB_OK) c->eos_ids[c->n_eos++] = (int32_t)v;
    }
    if (rb_json_config_int(j, "bos_token_id", &v) == RB_OK) c->bos_id = (int32_t)v;
}

/* rope settings live in "rope_scaling" (transformers 4) or "rope_parameters" (5) */
static rb_status hf_factor_array(const rb_json_config *j, const char *key, int n, float **out, rb_error *err) {
    size_t len = 0;
    if (rb_json_config_arr_len(j, key, &len) != RB_OK || len != (size_t)n)
        return rb_error_set(err, RB_E_FORMAT, "config.json: '%s' must be an array of %d numbers", key, n);
    float *f = malloc(sizeof(float) * len);
    if (!f) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (size_t i = 0; i < len; i++) {
        double d;
        if (rb_json_config_arr_num(j, key, i, &d) != RB_OK || !(d > 0)) {
            free(f);
            return rb_error_set(err, RB_E_FORMAT, "config.json: '%s'[%zu] must be a positive number", key, i);
        }
        f[i] = (float)d;
    }
    *out = f;
    return RB_OK;
}

static rb_status hf_rope_group(const rb_json_config *j, rb_model_config *c, const char *grp, const char *type,
                               float **factors, float **factors_long, rb_error *err);

static rb_status hf_rope(const rb_json_config *j, rb_model_config *c, float **factors, float **factors_long,
                         rb_error *err) {
    const char *grp = NULL;
    const char *type = NULL;
    char key[96];
    static const char *const groups[] = {"rope_parameters", "rope_scaling"};
    for (int i = 0; i < 2 && !grp; i++) {
        snprintf(key, sizeof key, "%s.rope_type", groups[i]);
        if (rb_json_config_str(j, key, &type) == RB_OK) { grp = groups[i]; break; }
        snprintf(key, sizeof key, "%s.type", groups[i]);
        if (rb_json_config_str(j, key, &type) == RB_OK) { grp = groups[i]; break; }
    }
    rb_status s;
    if (!grp) { /* transformers 5, per layer type: the full layers' group; the window layers' base */
        const char *t2 = NULL;
        if (rb_json_config_str(j, "rope_parameters.full_attention.rope_type", &t2) == RB_OK) {
            if ((s = hf_num(j, "rope_parameters.full_attention.rope_theta", &c->rope_theta, err)) != RB_OK) return s;
            if ((s = hf_num(j, "rope_parameters.sliding_attention.rope_theta", &c->rope_theta_swa, err)) != RB_OK)
                return s;
            const char *ts = NULL;
            if (rb_json_config_str(j, "rope_parameters.sliding_attention.rope_type", &ts) == RB_OK &&
                strcmp(ts, "default") != 0)
                return rb_error_set(err, RB_E_UNSUPPORTED, "config.json: rope scaling on sliding-window layers");
            return hf_rope_group(j, c, "rope_parameters.full_attention", t2, factors, factors_long, err);
        }
    }
    if (grp) {
        snprintf(key, sizeof key, "%s.rope_theta", grp);
        if ((s = hf_num(j, key, &c->rope_theta, err)) != RB_OK) return s;
    }
    return hf_rope_group(j, c, grp, type, factors, factors_long, err);
}

/* One rope parameter group (grp: "rope_parameters", "rope_scaling" or a
 * per-layer-type "rope_parameters.full_attention") of the given type. */
static rb_status hf_rope_group(const rb_json_config *j, rb_model_config *c, const char *grp, const char *type,
                               float **factors, float **factors_long, rb_error *err) {
    char key[128];
    rb_status s;
    if (!type || strcmp(type, "default") == 0) return RB_OK;
    float factor = 1.0f;
    snprintf(key, sizeof key, "%s.factor", grp);
    if ((s = hf_num(j, key, &factor, err)) != RB_OK) return s;
    if (strcmp(type, "yarn") == 0) {
        int64_t orig = 0;
        snprintf(key, sizeof key, "%s.original_max_position_embeddings", grp);
        if ((s = hf_int(j, key, &orig, false, err)) != RB_OK) return s;
        if (orig <= 0) orig = c->n_ctx_train;
        if (!(factor > 0)) { /* transformers: max_position_embeddings / original */
            if (orig <= 0) return rb_error_set(err, RB_E_FORMAT, "config.json: yarn needs a factor");
            factor = (float)((double)c->n_ctx_train / (double)orig);
        }
        c->rope_yarn_factor = factor;
        c->rope_orig_ctx = orig;
        c->rope_yarn_beta_fast = 32.0f;
        c->rope_yarn_beta_slow = 1.0f;
        snprintf(key, sizeof key, "%s.beta_fast", grp);
        if ((s = hf_num(j, key, &c->rope_yarn_beta_fast, err)) != RB_OK) return s;
        snprintf(key, sizeof key, "%s.beta_slow", grp);
        if ((s = hf_num(j, key, &c->rope_yarn_beta_slow, err)) != RB_OK) return s;
        bool trunc = true;
        snprintf(key, sizeof key, "%s.truncate", grp);
        if (rb_json_config_bool(j, key, &trunc) == RB_E_FORMAT)
            return rb_error_set(err, RB_E_FORMAT, "config.json: '%s' is not a boolean", key);
        c->rope_yarn_truncate = trunc;
        float mscale = 0, mscale_all = 0, af = 0;
        snprintf(key, sizeof key, "%s.mscale", grp);
        if ((s = hf_num(j, key, &mscale, err)) != RB_OK) return s;
        snprintf(key, sizeof key, "%s.mscale_all_dim", grp);
        if ((s = hf_num(j, key, &mscale_all, err)) != RB_OK) return s;
        if (mscale != 0 || mscale_all != 0)
            return rb_error_set(err, RB_E_UNSUPPORTED, "config.json: yarn mscale / mscale_all_dim are not supported");
        if (!(c->rope_yarn_beta_fast > 0) || !(c->rope_yarn_beta_slow > 0) || !(factor > 0))
            return rb_error_set(err, RB_E_FORMAT, "config.json: invalid yarn parameters");
        float *f = malloc(sizeof(float) * (size_t)(c->n_rot / 2));
        if (!f) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        rb_rope_yarn_factors(c, f, &c->rope_attn_factor);
        snprintf(key, sizeof key, "%s.attention_factor", grp);
        if ((s = hf_num(j, key, &af, err)) != RB_OK) {
            free(f);
            return s;
        }
        if (af > 0) c->rope_attn_factor = af;
        *factors = f;
        c->has_rope_factors = true;
        return RB_OK;
    }
    if (strcmp(type, "linear") == 0) {
        if (!(factor > 0)) return rb_error_set(err, RB_E_FORMAT, "config.json: rope factor must be positive");
        c->rope_freq_scale = 1.0f / factor;
        return RB_OK;
    }
    if (strcmp(type, "llama3") == 0) {
        float lo = 1.0f, hi = 4.0f;
        int64_t orig = 8192;
        snprintf(key, sizeof key, "%s.low_freq_factor", grp);
        if ((s = hf_num(j, key, &lo, err)) != RB_OK) return s;
        snprintf(key, sizeof key, "%s.high_freq_factor", grp);
        if ((s = hf_num(j, key, &hi, err)) != RB_OK) return s;
        snprintf(key, sizeof key, "%s.original_max_position_embeddings", grp);
        if ((s = hf_int(j, key, &orig, false, err)) != RB_OK) return s;
        if (!(factor > 0) || !(hi > lo) || orig <= 0)
            return rb_error_set(err, RB_E_FORMAT, "config.json: invalid llama3 rope scaling parameters");
        float *f = malloc(sizeof(float) * (size_t)(c->n_rot / 2));
        if (!f) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        rb_rope_llama3_factors(c->rope_theta, c->n_rot, factor, lo, hi, orig, f);
        *factors = f;
        c->has_rope_factors = true;
        return RB_OK;
    }
    if (strcmp(type, "longrope") == 0 || strcmp(type, "su") == 0) {
        int64_t orig = c->n_ctx_train;
        if ((s = hf_int(j, "original_max_position_embeddings", &orig, false, err)) != RB_OK) return s;
        snprintf(key, sizeof key, "%s.original_max_position_embeddings", grp);
        if ((s = hf_int(j, key, &orig, false, err)) != RB_OK) return s;
        snprintf(key, sizeof key, "%s.short_factor", grp);
        if ((s = hf_factor_array(j, key, c->n_rot / 2, factors, err)) != RB_OK) return s;
        snprintf(key, sizeof key, "%s.long_factor", grp);
        if ((s = hf_factor_array(j, key, c->n_rot / 2, factors_long, err)) != RB_OK) {
            free(*factors);
            *factors = NULL;
            return s;
        }
        float *f = *factors;
        c->has_rope_long = true;
        c->rope_orig_ctx = orig;
        if (orig <= 0) {
            free(*factors_long);
            *factors_long = NULL;
            free(f);
            *factors = NULL;
            return rb_error_set(err, RB_E_FORMAT, "config.json: longrope needs original_max_position_embeddings");
        }
        c->has_rope_factors = true;
        /* transformers: attention_factor = sqrt(1 + ln(s) / ln(orig)), s = max_pos / orig */
        double scale = orig > 0 ? (double)c->n_ctx_train / (double)orig : 1.0;
        float af = 0;
        snprintf(key, sizeof key, "%s.attention_factor", grp);
        if ((s = hf_num(j, key, &af, err)) != RB_OK) {
            free(f);
            *factors = NULL;
            free(*factors_long);
            *factors_long = NULL;
            return s;
        }
        if (af > 0) c->rope_attn_factor = af;
        else c->rope_attn_factor = scale <= 1.0 ? 1.0f : (float)sqrt(1.0 + log(scale) / log((double)orig));
        return RB_OK;
    }
    return rb_error_set(err, RB_E_UNSUPPORTED, "config.json: rope scaling type '%s' is not supported", type);
}

/* transformers' "layer_types": which layers use the sliding window. Supported
 * layouts: every layer, or even layers only (gemma2). */
static rb_status hf_layer_types(const rb_json_config *j, rb_model_config *c, rb_error *err) {
    size_t n = 0;
    if (rb_json_config_arr_len(j, "layer_types", &n) != RB_OK) return RB_OK;
    if (n != (size_t)c->n_layer)
        return rb_error_set(err, RB_E_FORMAT, "config.json: layer_types has %zu entries for %lld layers", n,
                            (long long)c->n_layer);
    bool all = true, any = false;
    bool *sl = calloc(n ? n : 1, sizeof *sl);
    if (!sl) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *t = NULL;
        if (rb_json_config_arr_str(j, "layer_types", i, &t) != RB_OK) {
            free(sl);
            return rb_error_set(err, RB_E_FORMAT, "config.json: layer_types[%zu] is not a string", i);
        }
        bool sliding = strcmp(t, "sliding_attention") == 0;
        if (!sliding && strcmp(t, "full_attention") != 0) {
            free(sl);
            return rb_error_set(err, RB_E_UNSUPPORTED, "config.json: layer type '%s' is not supported", t);
        }
        sl[i] = sliding;
        any |= sliding;
        all &= sliding;
    }
    if (!any || c->sliding_window == 0) {
        free(sl);
        c->sliding_window = 0;
        return RB_OK;
    }
    int found = all ? 0 : -1; /* the period n of llama.cpp's rule that gives this layout */
    for (int64_t p = 2; p <= c->n_layer && found < 0; p++) {
        bool ok = true;
        for (size_t i = 0; i < n && ok; i++) ok = sl[i] == ((int64_t)i % p < p - 1);
        if (ok) found = (int)p;
    }
    free(sl);
    if (found < 0)
        return rb_error_set(err, RB_E_UNSUPPORTED, "config.json: this layout of sliding-window layers is not supported");
    c->swa_pattern = found;
    return RB_OK;
}

/* Mixture-of-experts sizes: mixtral and gpt_oss (num_local_experts, the
 * experts' width in intermediate_size), qwen3_moe (num_experts or
 * num_local_experts, moe_intermediate_size, norm_topk_prob). */
static rb_status hf_moe(const rb_json_config *j, rb_model_config *c, rb_error *err) {
    rb_status s;
    if (c->arch != RB_ARCH_MIXTRAL && c->arch != RB_ARCH_QWEN3MOE && c->arch != RB_ARCH_GPTOSS) return RB_OK;
    const bool qwen = c->arch == RB_ARCH_QWEN3MOE;
    /* published Qwen3-MoE configs say num_experts; transformers 5 writes num_local_experts for all three */
    if ((s = hf_int(j, "num_local_experts", &c->n_expert, false, err)) != RB_OK) return s;
    if (c->n_expert <= 0 && (s = hf_int(j, "num_experts", &c->n_expert, true, err)) != RB_OK) return s;
    if ((s = hf_int(j, "num_experts_per_tok", &c->n_expert_used, false, err)) != RB_OK) return s;
    if (c->n_expert_used <= 0 && (s = hf_int(j, "experts_per_token", &c->n_expert_used, true, err)) != RB_OK)
        return s;
    c->n_ff_exp = c->n_ff;
    if (qwen && (s = hf_int(j, "moe_intermediate_size", &c->n_ff_exp, true, err)) != RB_OK) return s;
    if (qwen) {
        bool norm = false;
        if (rb_json_config_bool(j, "norm_topk_prob", &norm) == RB_E_FORMAT)
            return rb_error_set(err, RB_E_FORMAT, "config.json: norm_topk_prob is not a boolean");
        c->moe_norm_topk = norm;
    }
    return RB_OK;
}

rb_status rb_model_config_from_hf(const rb_json_config *j, const rb_json_config *gen, rb_model_config *c,
                                  float **rope_factors, float **rope_factors_long, rb_error *err) {
    config_init(c);
    *rope_factors = NULL;
    *rope_factors_long = NULL;
    const char *mt = NULL;
    if (rb_json_config_str(j, "model_type", &mt) != RB_OK)
        return rb_error_set(err, RB_E_FORMAT, "config.json has no \"model_type\" string");
    if (!arch_from_hf_name(mt, &c->arch))
        return rb_error_set(err, RB_E_UNSUPPORTED, "model_type '%s' is not supported (supported: %s)", mt,
                            rb_arch_supported_list());
    apply_arch_defaults(c);
    rb_status s;
    if ((s = hf_int(j, "vocab_size", &c->n_vocab, true, err)) != RB_OK) return s;
    if ((s = hf_int(j, "hidden_size", &c->n_embd, true, err)) != RB_OK) return s;
    if ((s = hf_int(j, "num_hidden_layers", &c->n_layer, true, err)) != RB_OK) return s;
    if ((s = hf_int(j, "num_attention_heads", &c->n_head, true, err)) != RB_OK) return s;
    if ((s = hf_int(j, "intermediate_size", &c->n_ff, true, err)) != RB_OK) return s;
    c->n_head_kv = c->n_head;
    if ((s = hf_int(j, "num_key_value_heads", &c->n_head_kv, false, err)) != RB_OK) return s;
    if ((s = hf_int(j, "head_dim", &c->head_dim, false, err)) != RB_OK) return s;
    if ((s = hf_int(j, "max_position_embeddings", &c->n_ctx_train, false, err)) != RB_OK) return s;
    if ((s = hf_num(j, "rms_norm_eps", &c->norm_eps, err)) != RB_OK) return s;
    if ((s = hf_num(j, "rope_theta", &c->rope_theta, err)) != RB_OK) return s;
    if ((s = hf_moe(j, c, err)) != RB_OK) return s;
    bool tied = c->arch == RB_ARCH_GEMMA || c->arch == RB_ARCH_GEMMA2 || c->arch == RB_ARCH_GEMMA3;
    if (rb_json_config_bool(j, "tie_word_embeddings", &tied) == RB_E_FORMAT)
        return rb_error_set(err, RB_E_FORMAT, "config.json: tie_word_embeddings is not a boolean");
    c->tied_embeddings = tied;
    /* sliding window: mistral, gemma2 (qwen2 only with use_sliding_window) */
    int64_t sw = 0;
    if ((s = hf_int(j, "sliding_window", &sw, false, err)) != RB_OK) return s;
    if (c->arch == RB_ARCH_QWEN2 || c->arch == RB_ARCH_QWEN3 || c->arch == RB_ARCH_QWEN3MOE) {
        bool use = false;
        rb_json_config_bool(j, "use_sliding_window", &use);
        if (!use) sw = 0;
        else return rb_error_set(err, RB_E_UNSUPPORTED, "qwen use_sliding_window is not supported");
    }
    if (c->arch == RB_ARCH_LLAMA || c->arch == RB_ARCH_GEMMA || c->arch == RB_ARCH_OLMO2) sw = 0; /* not used */
    c->sliding_window = sw > 0 && sw < INT32_MAX ? (int)sw : 0;
    if ((c->arch == RB_ARCH_GEMMA2 || c->arch == RB_ARCH_GEMMA3 || c->arch == RB_ARCH_GPTOSS) &&
        c->sliding_window == 0)
        c->swa_pattern = 0;
    if ((s = hf_layer_types(j, c, err)) != RB_OK) return s;
    if (c->arch == RB_ARCH_GEMMA3 && (s = hf_num(j, "rope_local_base_freq", &c->rope_theta_swa, err)) != RB_OK)
        return s;
    if ((s = hf_num(j, "attn_logit_softcapping", &c->attn_softcap, err)) != RB_OK) return s;
    if ((s = hf_num(j, "final_logit_softcapping", &c->final_softcap, err)) != RB_OK) return s;
    if (c->arch == RB_ARCH_GEMMA2 || c->arch == RB_ARCH_GEMMA3) {
        float qpas = 0;
        if ((s = hf_num(j, "query_pre_attn_scalar", &qpas, err)) != RB_OK) return s;
        if (qpas > 0) c->attn_scale = 1.0f / sqrtf(qpas);
    }
    const char *act = NULL;
    if (rb_json_config_str(j, "hidden_activation", &act) == RB_OK ||
        rb_json_config_str(j, "hidden_act", &act) == RB_OK) {
        if (strcmp(act, "silu") == 0) c->gelu_act = false;
        else if (strcmp(act, "gelu_pytorch_tanh") == 0 || strcmp(act, "gelu_tanh") == 0 ||
                 (strcmp(act, "gelu") == 0 && (c->arch == RB_ARCH_GEMMA || c->arch == RB_ARCH_GEMMA2 ||
                                                c->arch == RB_ARCH_GEMMA3)))
            c->gelu_act = true;
        else return rb_error_set(err, RB_E_UNSUPPORTED, "config.json: activation '%s' is not supported", act);
    }
    bool attn_bias = c->arch == RB_ARCH_QWEN2 || c->arch == RB_ARCH_GPTOSS;
    rb_json_config_bool(j, "attention_bias", &attn_bias);
    c->qkv_bias = attn_bias;
    /* head_dim / rotary dims needed before rope factors */
    if (c->head_dim <= 0 && c->n_head > 0 && c->n_embd % c->n_head == 0) c->head_dim = c->n_embd / c->n_head;
    float prf = 1.0f;
    if ((s = hf_num(j, "partial_rotary_factor", &prf, err)) != RB_OK) return s;
    if (!(prf > 0.0f && prf <= 1.0f))
        return rb_error_set(err, RB_E_FORMAT, "config.json: partial_rotary_factor %g is not in (0, 1]", (double)prf);
    if (c->head_dim > RB_MAX_HEAD_DIM)
        return rb_error_set(err, RB_E_FORMAT, "model config: head_dim %lld too large (at most %d)",
                            (long long)c->head_dim, RB_MAX_HEAD_DIM);
    if (c->head_dim > 0) c->n_rot = (int)((float)c->head_dim * prf);
    if (c->n_rot <= 0 || c->n_rot > (int)c->head_dim || c->n_rot % 2)
        return rb_error_set(err, RB_E_FORMAT, "config.json: partial_rotary_factor gives %d rotary dims", c->n_rot);
    if ((s = hf_rope(j, c, rope_factors, rope_factors_long, err)) != RB_OK) return s;
    hf_eos(j, c);
    if (gen) hf_eos(gen, c);
    s = check_config(c, err);
    if (s != RB_OK) {
        free(*rope_factors);
        *rope_factors = NULL;
        free(*rope_factors_long);
        *rope_factors_long = NULL;
    }
    return s;
}

void rb_rope_llama3_factors(float theta, int n_rot, float factor, float low_freq_factor, float high_freq_factor,
                            int64_t orig_ctx, float *out) {
    /* transformers' _compute_llama3_parameters, expressed as divisors of theta_i */
    const double lo_wavelen = (double)orig_ctx / low_freq_factor;
    const double hi_wavelen = (double)orig_ctx / high_freq_factor;
    for (int i = 0; i < n_rot / 2; i++) {
        double inv = 1.0 / pow((double)theta, (2.0 * i) / n_rot);
        double wavelen = 2.0 * M_PI / inv;
        double f;
        if (wavelen < hi_wavelen) f = 1.0;
        else if (wavelen > lo_wavelen) f = factor;
        else {
            double smooth = ((double)orig_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            double new_inv = (1.0 - smooth) * inv / factor + smooth * inv;
            f = inv / new_inv;
        }
        out[i] = (float)f;
    }
}

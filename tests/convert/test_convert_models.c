/* `rbee convert` on every tiny transformers model of tests/data/models:
 * the f32 GGUF must reproduce transformers' float64 logits (1e-4 relative)
 * and greedy tokens, carry llama.cpp's metadata keys and tensor names, and
 * store q/k rows permuted (llama/mistral/mixtral) and gemma norms as 1 + w
 * exactly, expert stacks holding each HF expert's values exactly (per-expert
 * files, gpt-oss's interleaved ones), routers in f32;
 * f16/bf16/q8_0/q4_0/q4_k/q6_k/mxfp4 files stay within measured per-format bounds,
 * with the f16 fallback checked where rows are not whole blocks. A synthetic
 * hidden-256 llama exercises real k-quant blocks against its HF folder. */
#include "convert_testutil.h"

#include "convert/convert.h"
#include "rbee/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- helpers ---------------- */

static void convert_ok(const char *dir, const char *out, rb_dtype type, rb_convert_stats *st) {
    rb_convert_opts o = {.type = type};
    rb_error err;
    rb_error_clear(&err);
    if (rb_convert_hf_to_gguf(dir, out, &o, st, &err) != RB_OK) fail_msg("convert %s: %s", dir, err.msg);
}

static double worst_position(const float *got, const float *want, size_t nt, int64_t V) {
    double worst = 0;
    for (size_t t = 0; t < nt; t++) {
        double e = tu_rel_l2_f(got + t * (size_t)V, want + t * (size_t)V, (size_t)V);
        if (e > worst) worst = e;
    }
    return worst;
}

static uint32_t kv_u32(const rb_gguf *g, const char *arch, const char *sfx) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, sfx);
    const rb_gguf_kv *kv = rb_gguf_find_kv(g, key);
    if (!kv) fail_msg("key %s missing", key);
    if (kv->type != RB_GGUF_UINT32) fail_msg("key %s has type %d, llama.cpp writes u32", key, (int)kv->type);
    uint32_t v;
    memcpy(&v, kv->data, 4);
    return v;
}

static float kv_f32(const rb_gguf *g, const char *arch, const char *sfx) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, sfx);
    const rb_gguf_kv *kv = rb_gguf_find_kv(g, key);
    if (!kv) fail_msg("key %s missing", key);
    if (kv->type != RB_GGUF_FLOAT32) fail_msg("key %s has type %d, llama.cpp writes f32", key, (int)kv->type);
    float v;
    memcpy(&v, kv->data, 4);
    return v;
}

static bool has_kv(const rb_gguf *g, const char *arch, const char *sfx) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, sfx);
    return rb_gguf_find_kv(g, key) != NULL;
}

static int64_t cfg_int(const rb_json_config *c, const char *key, int64_t dflt) {
    int64_t v;
    return rb_json_config_int(c, key, &v) == RB_OK ? v : dflt;
}

/* f32 copy of an HF tensor (any float dtype; all its elements, ne[2] included) */
static float *hf_f32(const rb_st_set *st, const char *name, int64_t *ne0, int64_t *ne1) {
    const rb_st_tensor *t = rb_st_find(st, name);
    if (!t) fail_msg("HF tensor %s missing", name);
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2];
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *p = t->data;
        if (t->dtype == RB_F32) memcpy(&x[i], p + 4 * i, 4);
        else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            x[i] = t->dtype == RB_F16 ? rb_f16_to_f32(h) : rb_bf16_to_f32(h);
        }
    }
    *ne0 = t->ne[0];
    *ne1 = t->ne[1];
    return x;
}

static const float *gguf_f32(const rb_gguf *g, const char *name, int64_t ne0, int64_t ne1) {
    const rb_gguf_tensor_info *ti = rb_gguf_find_tensor(g, name);
    if (!ti) fail_msg("GGUF tensor %s missing", name);
    assert_int_equal(ti->dtype, RB_F32);
    assert_int_equal(ti->ne[0], ne0);
    assert_int_equal(ti->ne[1], ne1);
    return ti->data;
}

/* llama.cpp's general.architecture for an HF model_type */
static const char *gguf_arch_of(const char *mt) {
    static const char *const map[][2] = {{"mistral", "llama"},      {"mixtral", "llama"}, {"qwen3_moe", "qwen3moe"},
                                         {"gemma3_text", "gemma3"}, {"gpt_oss", "gpt-oss"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(mt, map[i][0]) == 0) return map[i][1];
    return mt;
}

/* The GGUF vector name must equal the HF one (+1 for gemma norms) element for element. */
static void check_vector(const rb_gguf *g, const rb_st_set *st, const char *gname, const char *hname, float plus) {
    int64_t ne0, ne1;
    float *w = hf_f32(st, hname, &ne0, &ne1);
    const float *gw = gguf_f32(g, gname, ne0, 1);
    for (int64_t i = 0; i < ne0; i++)
        if (gw[i] != w[i] + plus) fail_msg("%s[%lld] is not %s + %g", gname, (long long)i, hname, (double)plus);
    free(w);
}

/* Expert e of GGUF stack gname ([ne0, ne1, E], f32): element (r, k) must be
 * HF value hf[off + e * s2 + r * s1 + k * s0] (per-expert names: hfmt with the
 * expert index, s2 unused). */
static void check_stack(const rb_gguf *g, const rb_st_set *st, const char *gname, const char *hname, const char *hsfx,
                        int64_t off, int64_t s0, int64_t s1, int64_t s2) {
    const rb_gguf_tensor_info *ti = rb_gguf_find_tensor(g, gname);
    if (!ti) fail_msg("GGUF tensor %s missing", gname);
    assert_int_equal(ti->dtype, RB_F32);
    assert_int_equal(ti->n_dims, 3);
    const int64_t ne0 = ti->ne[0], ne1 = ti->ne[1], E = ti->ne[2];
    const float *gw = ti->data;
    for (int64_t e = 0; e < E; e++) {
        char hn[256];
        int64_t a, b;
        if (hsfx) snprintf(hn, sizeof hn, "%s%lld%s", hname, (long long)e, hsfx);
        else snprintf(hn, sizeof hn, "%s", hname);
        float *w = hf_f32(st, hn, &a, &b);
        const int64_t base = off + (hsfx ? 0 : e * s2);
        for (int64_t r = 0; r < ne1; r++)
            for (int64_t k = 0; k < ne0; k++)
                if (gw[(e * ne1 + r) * ne0 + k] != w[base + r * s1 + k * s0])
                    fail_msg("%s expert %lld [%lld, %lld] is not the HF value", gname, (long long)e, (long long)r,
                             (long long)k);
        free(w);
    }
}

/* Routers stay f32 and equal; the expert stacks hold each HF expert's matrix. */
static void check_experts(const rb_gguf *g, const rb_st_set *st, const char *mt, const rb_json_config *c) {
    const int64_t H = cfg_int(c, "hidden_size", -1), E = cfg_int(c, "num_local_experts", -1);
    const bool mix = strcmp(mt, "mixtral") == 0, oss = strcmp(mt, "gpt_oss") == 0;
    const int64_t F = cfg_int(c, "moe_intermediate_size", cfg_int(c, "intermediate_size", -1));
    assert_int_equal(kv_u32(g, gguf_arch_of(mt), "expert_count"), E);
    assert_int_equal(kv_u32(g, gguf_arch_of(mt), "expert_used_count"), cfg_int(c, "num_experts_per_tok", -1));
    if (mix) assert_false(has_kv(g, "llama", "expert_feed_forward_length"));
    else assert_int_equal(kv_u32(g, gguf_arch_of(mt), "expert_feed_forward_length"), F);
    const char *mod = mix ? "model.layers.0.block_sparse_moe" : "model.layers.0.mlp";
    char hn[160];
    snprintf(hn, sizeof hn, "%s.%s.weight", mod, oss ? "router" : "gate");
    int64_t a, b;
    float *w = hf_f32(st, hn, &a, &b);
    assert_memory_equal(gguf_f32(g, "blk.0.ffn_gate_inp.weight", H, E), w, sizeof(float) * (size_t)(H * E));
    free(w);
    if (oss) { /* gate_up_proj [E, H, 2F]: gate = even columns, up = odd; down_proj [E, F, H] */
        check_stack(g, st, "blk.0.ffn_gate_exps.weight", "model.layers.0.mlp.experts.gate_up_proj", NULL, 0, 2 * F, 2,
                    H * 2 * F);
        check_stack(g, st, "blk.0.ffn_up_exps.weight", "model.layers.0.mlp.experts.gate_up_proj", NULL, 1, 2 * F, 2,
                    H * 2 * F);
        check_stack(g, st, "blk.0.ffn_down_exps.weight", "model.layers.0.mlp.experts.down_proj", NULL, 0, H, 1, F * H);
        check_vector(g, st, "blk.0.ffn_gate_inp.bias", "model.layers.0.mlp.router.bias", 0.0f);
        check_vector(g, st, "blk.0.attn_sinks.weight", "model.layers.0.self_attn.sinks", 0.0f);
        check_vector(g, st, "blk.0.post_attention_norm.weight", "model.layers.0.post_attention_layernorm.weight", 0.0f);
        assert_null(rb_gguf_find_tensor(g, "blk.0.ffn_norm.weight"));
        const float *gb = gguf_f32(g, "blk.1.ffn_up_exps.bias", F, E);
        w = hf_f32(st, "model.layers.1.mlp.experts.gate_up_proj_bias", &a, &b);
        for (int64_t e = 0; e < E; e++)
            for (int64_t f = 0; f < F; f++) assert_true(gb[e * F + f] == w[e * 2 * F + 2 * f + 1]);
        free(w);
        return;
    }
    snprintf(hn, sizeof hn, "%s.experts.", mod);
    check_stack(g, st, "blk.0.ffn_gate_exps.weight", hn, mix ? ".w1.weight" : ".gate_proj.weight", 0, 1, H, 0);
    check_stack(g, st, "blk.0.ffn_up_exps.weight", hn, mix ? ".w3.weight" : ".up_proj.weight", 0, 1, H, 0);
    check_stack(g, st, "blk.0.ffn_down_exps.weight", hn, mix ? ".w2.weight" : ".down_proj.weight", 0, 1, F, 0);
}

/* Row r of the GGUF q/k weight must be HF row perm(r): within each head of D
 * rows, GGUF row 2i+j = HF row j*D/2 + i (llama.cpp's permute), or the
 * identity for the rotate-half architectures. */
static void check_rows(const rb_gguf *g, const rb_st_set *st, const char *gname, const char *hname, int64_t D,
                       bool permuted) {
    int64_t ne0, ne1;
    float *hf = hf_f32(st, hname, &ne0, &ne1);
    const float *gg = gguf_f32(g, gname, ne0, ne1);
    for (int64_t r = 0; r < ne1; r++) {
        int64_t h = r / D, k = r % D;
        int64_t src = permuted ? h * D + (k % 2) * (D / 2) + k / 2 : r;
        if (memcmp(gg + r * ne0, hf + src * ne0, sizeof(float) * (size_t)ne0) != 0)
            fail_msg("%s row %lld is not HF row %lld", gname, (long long)r, (long long)src);
    }
    free(hf);
}

/* ---------------- f32: exact conversion ---------------- */

static void check_metadata(const char *name, const char *dir, const char *gguf_path) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    rb_json_config *c = NULL;
    TU_OK(rb_json_config_load(path, &c, NULL));
    rb_gguf *g = ct_gguf_open(gguf_path);
    const char *mt = NULL;
    TU_OK(rb_json_config_str(c, "model_type", &mt));
    const char *arch = gguf_arch_of(mt);
    char *ga = NULL;
    TU_OK(rb_gguf_get_str(g, "general.architecture", &ga));
    assert_string_equal(ga, arch);
    free(ga);
    char *gn = NULL;
    TU_OK(rb_gguf_get_str(g, "general.name", &gn));
    assert_string_equal(gn, name);
    free(gn);
    uint32_t ft = 99;
    TU_OK(rb_gguf_get_u32(g, "general.file_type", &ft));
    assert_int_equal(ft, 0);

    const int64_t E = cfg_int(c, "hidden_size", -1), H = cfg_int(c, "num_attention_heads", -1);
    const int64_t Hkv = cfg_int(c, "num_key_value_heads", H), D = cfg_int(c, "head_dim", E / H);
    assert_int_equal(kv_u32(g, arch, "embedding_length"), E);
    assert_int_equal(kv_u32(g, arch, "block_count"), cfg_int(c, "num_hidden_layers", -1));
    assert_int_equal(kv_u32(g, arch, "feed_forward_length"), cfg_int(c, "intermediate_size", -1));
    assert_int_equal(kv_u32(g, arch, "attention.head_count"), H);
    assert_int_equal(kv_u32(g, arch, "attention.head_count_kv"), Hkv);
    assert_int_equal(kv_u32(g, arch, "context_length"), cfg_int(c, "max_position_embeddings", -1));
    double eps = 0, prf = 1.0, theta = 10000.0;
    TU_OK(rb_json_config_num(c, "rms_norm_eps", &eps));
    /* transformers 5 keeps gemma3's bases per layer type only: the full layers' is the main one */
    if (rb_json_config_num(c, "rope_theta", &theta) != RB_OK)
        TU_OK(rb_json_config_num(c, "rope_parameters.full_attention.rope_theta", &theta));
    rb_json_config_num(c, "partial_rotary_factor", &prf);
    assert_true(kv_f32(g, arch, "attention.layer_norm_rms_epsilon") == (float)eps);
    assert_true(kv_f32(g, arch, "rope.freq_base") == (float)theta);
    assert_int_equal(kv_u32(g, arch, "rope.dimension_count"), (int64_t)((double)D * prf));
    bool gemma = strncmp(mt, "gemma", 5) == 0, qwen3 = strncmp(mt, "qwen3", 5) == 0, oss = strcmp(mt, "gpt_oss") == 0;
    if (gemma || qwen3 || oss || D * H != E) { /* llama.cpp writes head_dim where these configs state it */
        assert_int_equal(kv_u32(g, arch, "attention.key_length"), D);
        assert_int_equal(kv_u32(g, arch, "attention.value_length"), D);
    } else {
        assert_false(has_kv(g, arch, "attention.key_length"));
    }
    int64_t sw = cfg_int(c, "sliding_window", 0);
    if (sw > 0 && strcmp(mt, "qwen2") != 0) assert_int_equal(kv_u32(g, arch, "attention.sliding_window"), sw);
    else assert_false(has_kv(g, arch, "attention.sliding_window"));
    if (strcmp(mt, "gemma3_text") == 0) { /* the period of the local/global layers, where not llama.cpp's 6 */
        size_t nl = 0;
        TU_OK(rb_json_config_arr_len(c, "layer_types", &nl));
        int64_t period = 0;
        for (size_t i = 0; i < nl && !period; i++) {
            const char *t = NULL;
            TU_OK(rb_json_config_arr_str(c, "layer_types", i, &t));
            if (strcmp(t, "full_attention") == 0) period = (int64_t)i + 1;
        }
        assert_true(period > 0 && period != 6);
        assert_int_equal(kv_u32(g, arch, "attention.sliding_window_pattern"), period);
        double base = 0;
        TU_OK(rb_json_config_num(c, "rope_parameters.sliding_attention.rope_theta", &base));
        assert_true(kv_f32(g, arch, "rope.freq_base_swa") == (float)base);
    } else {
        assert_false(has_kv(g, arch, "attention.sliding_window_pattern"));
        assert_false(has_kv(g, arch, "rope.freq_base_swa"));
    }

    const char *rt = NULL;
    double factor = 0;
    if (rb_json_config_str(c, "rope_scaling.rope_type", &rt) == RB_OK) {
        rb_json_config_num(c, "rope_scaling.factor", &factor);
    } else if (rb_json_config_str(c, "rope_parameters.full_attention.rope_type", &rt) == RB_OK) {
        rb_json_config_num(c, "rope_parameters.full_attention.factor", &factor);
        if (strcmp(rt, "default") == 0) rt = NULL;
    }
    if (rt && strcmp(rt, "linear") == 0) {
        char *st = NULL;
        char key[128];
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        TU_OK(rb_gguf_get_str(g, key, &st));
        assert_string_equal(st, "linear");
        free(st);
        assert_true(kv_f32(g, arch, "rope.scaling.factor") == (float)factor);
    } else if (rt && strcmp(rt, "yarn") == 0) { /* gpt-oss: the loader recomputes transformers' yarn from these */
        char *st = NULL;
        char key[128];
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        TU_OK(rb_gguf_get_str(g, key, &st));
        assert_string_equal(st, "yarn");
        free(st);
        assert_true(kv_f32(g, arch, "rope.scaling.factor") == (float)factor);
        assert_int_equal(kv_u32(g, arch, "rope.scaling.original_context_length"),
                         cfg_int(c, "rope_scaling.original_max_position_embeddings", -1));
        double beta = 0;
        TU_OK(rb_json_config_num(c, "rope_scaling.beta_fast", &beta));
        assert_true(kv_f32(g, arch, "rope.scaling.yarn_beta_fast") == (float)beta);
        TU_OK(rb_json_config_num(c, "rope_scaling.beta_slow", &beta));
        assert_true(kv_f32(g, arch, "rope.scaling.yarn_beta_slow") == (float)beta);
        assert_false(has_kv(g, arch, "rope.scaling.attn_factor"));
    } else {
        assert_false(has_kv(g, arch, "rope.scaling.type"));
    }
    bool llama3 = rt && strcmp(rt, "llama3") == 0, longrope = rt && strcmp(rt, "longrope") == 0;
    assert_int_equal(rb_gguf_find_tensor(g, "rope_freqs.weight") != NULL, llama3);
    assert_int_equal(rb_gguf_find_tensor(g, "rope_factors_long.weight") != NULL, longrope);
    assert_int_equal(rb_gguf_find_tensor(g, "rope_factors_short.weight") != NULL, longrope);
    if (longrope) {
        /* llama.cpp: sqrt(1 + ln(max_pos / orig) / ln(orig)) */
        int64_t orig = cfg_int(c, "original_max_position_embeddings", -1), maxp = cfg_int(c, "max_position_embeddings", -1);
        assert_int_equal(kv_u32(g, arch, "rope.scaling.original_context_length"), orig);
        double af = sqrt(1.0 + log((double)maxp / (double)orig) / log((double)orig));
        assert_true(fabs(kv_f32(g, arch, "rope.scaling.attn_factor") - af) < 1e-6);
        const rb_gguf_tensor_info *lf = rb_gguf_find_tensor(g, "rope_factors_long.weight");
        double v0 = 0;
        TU_OK(rb_json_config_arr_num(c, "rope_scaling.long_factor", 0, &v0));
        float f0;
        memcpy(&f0, lf->data, 4);
        assert_true(f0 == (float)v0);
    }
    if (strcmp(mt, "gemma3_text") == 0) {
        double q = 0, cap = 0;
        TU_OK(rb_json_config_num(c, "query_pre_attn_scalar", &q));
        assert_true(fabsf(kv_f32(g, arch, "attention.scale") - (float)(1.0 / sqrt(q))) < 1e-7f);
        assert_false(has_kv(g, arch, "attn_logit_softcapping"));
        if (rb_json_config_num(c, "final_logit_softcapping", &cap) == RB_OK)
            assert_true(kv_f32(g, arch, "final_logit_softcapping") == (float)cap);
        else assert_false(has_kv(g, arch, "final_logit_softcapping"));
    }
    if (strcmp(mt, "gemma2") == 0) {
        double q = 0;
        TU_OK(rb_json_config_num(c, "query_pre_attn_scalar", &q));
        assert_true(fabsf(kv_f32(g, arch, "attention.scale") - (float)(1.0 / sqrt(q))) < 1e-7f);
        double cap = 0;
        TU_OK(rb_json_config_num(c, "attn_logit_softcapping", &cap));
        assert_true(kv_f32(g, arch, "attn_logit_softcapping") == (float)cap);
        TU_OK(rb_json_config_num(c, "final_logit_softcapping", &cap));
        assert_true(kv_f32(g, arch, "final_logit_softcapping") == (float)cap);
        assert_non_null(rb_gguf_find_tensor(g, "blk.0.post_attention_norm.weight"));
        assert_non_null(rb_gguf_find_tensor(g, "blk.0.post_ffw_norm.weight"));
    }

    bool tied = gemma;
    rb_json_config_bool(c, "tie_word_embeddings", &tied);
    assert_int_equal(rb_gguf_find_tensor(g, "output.weight") == NULL, tied);
    assert_non_null(rb_gguf_find_tensor(g, "token_embd.weight"));
    assert_non_null(rb_gguf_find_tensor(g, "output_norm.weight"));
    bool phi3 = strcmp(mt, "phi3") == 0;
    for (int64_t i = 0; i < rb_gguf_n_tensors(g); i++) {
        const rb_gguf_tensor_info *ti = rb_gguf_tensor_at(g, i);
        assert_int_equal(ti->dtype, RB_F32);
        /* llama.cpp names only */
        assert_true(ti->name.len < 64);
        assert_true(memcmp(ti->name.ptr, "model.", 6) != 0 && memcmp(ti->name.ptr, "lm_head", 7) != 0);
    }

    rb_st_set *st = NULL;
    TU_OK(rb_st_open(dir, &st, NULL));
    if (phi3) {
        assert_null(rb_gguf_find_tensor(g, "blk.0.attn_q.weight"));
        assert_null(rb_gguf_find_tensor(g, "blk.0.ffn_gate.weight"));
        check_rows(g, st, "blk.0.attn_qkv.weight", "model.layers.0.self_attn.qkv_proj.weight", D, false);
        check_rows(g, st, "blk.1.ffn_up.weight", "model.layers.1.mlp.gate_up_proj.weight", D, false);
    } else {
        bool perm = strcmp(arch, "llama") == 0;
        check_rows(g, st, "blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", D, perm);
        check_rows(g, st, "blk.1.attn_k.weight", "model.layers.1.self_attn.k_proj.weight", D, perm);
        check_rows(g, st, "blk.1.attn_v.weight", "model.layers.1.self_attn.v_proj.weight", D, false);
        if (strcmp(mt, "qwen2") == 0) {
            check_rows(g, st, "blk.0.attn_q.bias", "model.layers.0.self_attn.q_proj.bias", 1, false);
        }
    }
    if (qwen3 || strcmp(mt, "gemma3_text") == 0) /* per-head q/k norms; gemma3's as 1 + w */
        check_vector(g, st, "blk.1.attn_k_norm.weight", "model.layers.1.self_attn.k_norm.weight", gemma ? 1.0f : 0.0f);
    if (strcmp(mt, "olmo2") == 0) { /* norms after the sublayers only; q/k norms over the whole projection */
        assert_null(rb_gguf_find_tensor(g, "blk.0.attn_norm.weight"));
        assert_null(rb_gguf_find_tensor(g, "blk.0.ffn_norm.weight"));
        check_vector(g, st, "blk.0.post_attention_norm.weight", "model.layers.0.post_attention_layernorm.weight", 0.0f);
        check_vector(g, st, "blk.1.post_ffw_norm.weight", "model.layers.1.post_feedforward_layernorm.weight", 0.0f);
        check_vector(g, st, "blk.0.attn_q_norm.weight", "model.layers.0.self_attn.q_norm.weight", 0.0f);
        assert_int_equal(rb_gguf_find_tensor(g, "blk.0.attn_k_norm.weight")->ne[0], Hkv * D);
    }
    if (cfg_int(c, "num_local_experts", 0) > 0) check_experts(g, st, mt, c);
    else assert_null(rb_gguf_find_tensor(g, "blk.0.ffn_gate_inp.weight"));
    if (strcmp(mt, "qwen3_moe") == 0) { /* mlp_only_layers stay dense; norm_topk_prob false is stated */
        size_t nd = 0;
        TU_OK(rb_json_config_arr_len(c, "mlp_only_layers", &nd));
        for (size_t i = 0; i < nd; i++) {
            int64_t l = -1;
            TU_OK(rb_json_config_arr_int(c, "mlp_only_layers", i, &l));
            char nm[64];
            snprintf(nm, sizeof nm, "blk.%lld.ffn_gate.weight", (long long)l);
            assert_non_null(rb_gguf_find_tensor(g, nm));
            snprintf(nm, sizeof nm, "blk.%lld.ffn_gate_exps.weight", (long long)l);
            assert_null(rb_gguf_find_tensor(g, nm));
        }
        bool norm = true;
        TU_OK(rb_json_config_bool(c, "norm_topk_prob", &norm));
        const rb_gguf_kv *kv = rb_gguf_find_kv(g, "qwen3moe.expert_weights_norm");
        if (norm) assert_null(kv);
        else assert_true(kv && kv->type == RB_GGUF_BOOL && *(const uint8_t *)kv->data == 0);
    }
    if (gemma) { /* llama.cpp stores (1 + w) */
        int64_t ne0, ne1;
        float *w = hf_f32(st, "model.layers.0.input_layernorm.weight", &ne0, &ne1);
        const float *gw = gguf_f32(g, "blk.0.attn_norm.weight", ne0, 1);
        for (int64_t i = 0; i < ne0; i++) assert_true(gw[i] == w[i] + 1.0f);
        free(w);
        w = hf_f32(st, "model.norm.weight", &ne0, &ne1);
        gw = gguf_f32(g, "output_norm.weight", ne0, 1);
        for (int64_t i = 0; i < ne0; i++) assert_true(gw[i] == w[i] + 1.0f);
        free(w);
    }
    rb_st_close(st);
    rb_gguf_close(g);
    rb_json_config_free(c);
}

static void test_f32_every_model(void **state) {
    (void)state;
    char *names[64];
    int n = tu_model_names(names, 64);
    assert_true(n >= 15);
    char tmp[1024];
    ct_tmpdir(tmp, sizeof tmp);
    for (int i = 0; i < n; i++) {
        char dir[1024], out[2048], path[2048];
        ct_model_dir(dir, sizeof dir, names[i]);
        snprintf(out, sizeof out, "%s/%s.gguf", tmp, names[i]);
        rb_convert_stats st;
        convert_ok(dir, out, RB_F32, &st);
        assert_int_equal(st.n_fallback, 0);
        check_metadata(names[i], dir, out);

        snprintf(path, sizeof path, "%s/ref.json", dir);
        rb_json_config *ref = NULL;
        TU_OK(rb_json_config_load(path, &ref, NULL));
        size_t nt, np, ng, nbytes;
        int32_t *tokens = ct_ids(ref, "tokens", &nt);
        int32_t *prompt = ct_ids(ref, "greedy_prompt", &np);
        int32_t *greedy = ct_ids(ref, "greedy_tokens", &ng);
        snprintf(path, sizeof path, "%s/logits.f32", dir);
        float *want = tu_read_file(path, &nbytes);
        int64_t V = 0;
        float *got = ct_logits(out, tokens, nt, &V);
        assert_int_equal(nbytes, sizeof(float) * nt * (size_t)V);
        double e = tu_rel_l2_f(got, want, nt * (size_t)V), w = worst_position(got, want, nt, V);
        print_message("%-24s f32 GGUF vs transformers: rel L2 %.2g (worst position %.2g)\n", names[i], e, w);
        if (e > 1e-4 || w > 1e-4) fail_msg("%s: converted logits differ: %.3g / %.3g", names[i], e, w);
        if (!ct_greedy_matches(out, prompt, np, greedy, ng)) fail_msg("%s: greedy tokens differ", names[i]);
        remove(out);
        free(got);
        free(want);
        free(tokens);
        free(prompt);
        free(greedy);
        rb_json_config_free(ref);
        free(names[i]);
    }
    ct_rmtree(tmp);
}

/* ---------------- lossy formats ---------------- */

typedef struct lossy_case {
    rb_dtype type;
    double bound; /* max rel L2 of all logits vs transformers, ~1.5x the worst measured */
} lossy_case;

/* Measured worst rel L2 over the 26 models (the test prints the table): f16
 * 1.2e-3 and bf16 1.0e-2 (llama_tied), q8_0 5.0e-2 and q4_0 0.52 (gpt_oss;
 * these random-init models are sensitive: llama.cpp's own q8_0/q4_0 files of
 * its fixture are at 1.8e-2/2.2e-1), mxfp4 0.32 (gpt_oss, whose experts then
 * hold 4-bit values: transformers' own MXFP4-vs-f32 gap on it is 0.3175;
 * models without experts get q8_0 everywhere under mxfp4, as llama.cpp's
 * MXFP4_MOE does). Bounds ~1.5x. Rows of these models (48..160 wide) never
 * hold whole 256-blocks, so q4_k / q6_k are entirely the f16 fallback,
 * checked byte-identical to the f16 file. */
static const lossy_case k_cases[] = {
    {RB_F16, 1.8e-3}, {RB_BF16, 1.5e-2}, {RB_Q8_0, 7.5e-2}, {RB_Q4_0, 0.78}, {RB_Q4_K, 1.8e-3}, {RB_Q6_K, 1.8e-3},
    {RB_MXFP4, 0.49},
};

static bool ends_with(const rb_gguf_tensor_info *ti, const char *sfx) {
    const size_t n = strlen(sfx);
    return ti->name.len >= n && memcmp(ti->name.ptr + ti->name.len - n, sfx, n) == 0;
}

/* Vectors and expert routers f32; matrices in the type (mxfp4: expert stacks
 * mxfp4, other matrices q8_0), or f16 where rows are not whole blocks. */
static void check_dtypes_and_fallback(const char *path, const char *f16_path, rb_dtype type, int64_t *n_fb) {
    rb_gguf *g = ct_gguf_open(path), *h = ct_gguf_open(f16_path);
    uint32_t ft = 0;
    TU_OK(rb_gguf_get_u32(g, "general.file_type", &ft));
    assert_int_equal(ft, rb_convert_file_type(type));
    for (int64_t i = 0; i < rb_gguf_n_tensors(g); i++) {
        const rb_gguf_tensor_info *ti = rb_gguf_tensor_at(g, i);
        if (ti->n_dims == 1 || ends_with(ti, "ffn_gate_inp.weight")) {
            assert_int_equal(ti->dtype, RB_F32);
            continue;
        }
        const rb_dtype intended = type == RB_MXFP4 && ti->n_dims != 3 ? RB_Q8_0 : type;
        const int64_t bs = rb_dtype_info((int)intended)->block_size;
        rb_dtype want = ti->ne[0] % bs == 0 ? intended : RB_F16;
        if (ti->dtype != want)
            fail_msg("%.*s: %s, expected %s", (int)ti->name.len, ti->name.ptr, rb_dtype_name(ti->dtype),
                     rb_dtype_name(want));
        if (want == RB_F16 && intended != RB_F16) {
            (*n_fb)++;
            char nm[128];
            snprintf(nm, sizeof nm, "%.*s", (int)ti->name.len, ti->name.ptr);
            const rb_gguf_tensor_info *hi = rb_gguf_find_tensor(h, nm);
            assert_non_null(hi);
            assert_int_equal(hi->nbytes, ti->nbytes);
            assert_memory_equal(hi->data, ti->data, ti->nbytes);
        }
    }
    rb_gguf_close(g);
    rb_gguf_close(h);
}

static void test_lossy_formats(void **state) {
    (void)state;
    char *names[64];
    int n = tu_model_names(names, 64);
    char tmp[1024];
    ct_tmpdir(tmp, sizeof tmp);
    const size_t nc = sizeof k_cases / sizeof k_cases[0];
    double worst[8] = {0};
    int64_t fallbacks[8] = {0};
    for (int i = 0; i < n; i++) {
        char dir[1024], path[2048], f16p[2048];
        ct_model_dir(dir, sizeof dir, names[i]);
        snprintf(path, sizeof path, "%s/ref.json", dir);
        rb_json_config *ref = NULL;
        TU_OK(rb_json_config_load(path, &ref, NULL));
        size_t nt, nbytes;
        int32_t *tokens = ct_ids(ref, "tokens", &nt);
        snprintf(path, sizeof path, "%s/logits.f32", dir);
        float *want = tu_read_file(path, &nbytes);
        snprintf(f16p, sizeof f16p, "%s/%s-f16.gguf", tmp, names[i]);
        convert_ok(dir, f16p, RB_F16, NULL);
        print_message("%-24s", names[i]);
        for (size_t k = 0; k < nc; k++) {
            char out[2048];
            snprintf(out, sizeof out, "%s/%s-%s.gguf", tmp, names[i], rb_dtype_name(k_cases[k].type));
            rb_convert_stats st;
            convert_ok(dir, out, k_cases[k].type, &st);
            fallbacks[k] += st.n_fallback;
            int64_t fb = 0;
            check_dtypes_and_fallback(out, f16p, k_cases[k].type, &fb);
            assert_int_equal(fb, st.n_fallback);
            int64_t V = 0;
            float *got = ct_logits(out, tokens, nt, &V);
            assert_int_equal(nbytes, sizeof(float) * nt * (size_t)V);
            double e = tu_rel_l2_f(got, want, nt * (size_t)V);
            print_message(" %s %.2g", rb_dtype_name(k_cases[k].type), e);
            if (e > worst[k]) worst[k] = e;
            if (e > k_cases[k].bound)
                fail_msg("%s as %s: rel L2 %.3g above bound %.3g", names[i], rb_dtype_name(k_cases[k].type), e,
                         k_cases[k].bound);
            if (k_cases[k].type != RB_F16) remove(out);
            free(got);
        }
        print_message("\n");
        remove(f16p);
        free(want);
        free(tokens);
        rb_json_config_free(ref);
        free(names[i]);
    }
    for (size_t k = 0; k < nc; k++)
        print_message("worst %-5s rel L2 %.3g (bound %.3g), f16 fallbacks %lld\n", rb_dtype_name(k_cases[k].type),
                      worst[k], k_cases[k].bound, (long long)fallbacks[k]);
    /* q4_0's 32-blocks fit most rows; only gemma's 48-wide rows fall back */
    assert_true(fallbacks[3] > 0);
    assert_true(worst[3] > worst[2] && worst[2] > worst[0]); /* coarser formats lose more */
    ct_rmtree(tmp);
}

/* ---------------- synthetic hidden-256 llama: real k-quant blocks ---------------- */

typedef struct synth {
    char dir[1024];
    float *bufs[64];
    int nbufs;
    ct_st_entry e[64];
    int n;
    char names[64][96];
} synth;

static void synth_add(synth *s, tu_rng *r, const char *name, int64_t rows, int64_t cols, float lo, float hi) {
    int64_t n = rows * (cols > 0 ? cols : 1);
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    tu_fill_uniform(r, x, (size_t)n, lo, hi);
    s->bufs[s->nbufs++] = x;
    snprintf(s->names[s->n], sizeof s->names[0], "%s", name);
    ct_st_entry *e = &s->e[s->n++];
    e->name = s->names[s->n - 1];
    e->dtype = "F32";
    e->n_dims = cols > 0 ? 2 : 1;
    e->shape[0] = rows;
    e->shape[1] = cols;
    e->data = x;
    e->nbytes = sizeof(float) * (size_t)n;
}

static void make_synthetic(synth *s) {
    const int E = 256, H = 4, Hkv = 2, D = 64, F = 512, V = 300, L = 2;
    ct_tmpdir(s->dir, sizeof s->dir);
    char path[2048];
    snprintf(path, sizeof path, "%s/config.json", s->dir);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"llama\", \"hidden_size\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d, "
             "\"vocab_size\": %d, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-5, "
             "\"rope_theta\": 10000.0, \"tie_word_embeddings\": false, \"hidden_act\": \"silu\"}",
             E, H, Hkv, F, L, V);
    ct_write_text(path, cfg);
    tu_rng r;
    tu_rng_seed(&r, 20240611);
    synth_add(s, &r, "model.embed_tokens.weight", V, E, -1.0f, 1.0f);
    for (int l = 0; l < L; l++) {
        char nm[96];
#define W(sfx, rows, cols, lo, hi) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, sfx), synth_add(s, &r, nm, rows, cols, lo, hi))
        W("input_layernorm.weight", E, 0, 0.8f, 1.2f);
        W("self_attn.q_proj.weight", H * D, E, -0.12f, 0.12f);
        W("self_attn.k_proj.weight", Hkv * D, E, -0.12f, 0.12f);
        W("self_attn.v_proj.weight", Hkv * D, E, -0.08f, 0.08f);
        W("self_attn.o_proj.weight", E, H * D, -0.08f, 0.08f);
        W("post_attention_layernorm.weight", E, 0, 0.8f, 1.2f);
        W("mlp.gate_proj.weight", F, E, -0.08f, 0.08f);
        W("mlp.up_proj.weight", F, E, -0.08f, 0.08f);
        W("mlp.down_proj.weight", E, F, -0.06f, 0.06f);
#undef W
    }
    synth_add(s, &r, "model.norm.weight", E, 0, 0.8f, 1.2f);
    synth_add(s, &r, "lm_head.weight", V, E, -0.1f, 0.1f);
    snprintf(path, sizeof path, "%s/model.safetensors", s->dir);
    ct_write_safetensors(path, s->e, (size_t)s->n);
}

static void test_kquant_synthetic(void **state) {
    (void)state;
    synth s;
    memset(&s, 0, sizeof s);
    make_synthetic(&s);
    tu_rng r;
    tu_rng_seed(&r, 77);
    int32_t tokens[19];
    for (int i = 0; i < 19; i++) tokens[i] = (int32_t)(tu_rng_u64(&r) % 300);
    int64_t V = 0;
    float *want = ct_logits(s.dir, tokens, 19, &V); /* the HF folder, checked against transformers elsewhere */
    /* measured: f32 2.3e-7, q8_0 1.27e-2, q6_k 3.15e-2, q4_k 1.26e-1, q4_0 1.42e-1; bounds ~1.5x */
    static const lossy_case cases[] = {
        {RB_F32, 1e-5}, {RB_Q8_0, 1.9e-2}, {RB_Q6_K, 4.7e-2}, {RB_Q4_K, 0.19}, {RB_Q4_0, 0.21},
    };
    double errs[8];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char out[2048];
        snprintf(out, sizeof out, "%s/out.gguf", s.dir);
        rb_convert_stats st;
        convert_ok(s.dir, out, cases[k].type, &st);
        assert_int_equal(st.n_fallback, 0);
        assert_int_equal(st.n_quantized, 2 + 2 * 7);
        rb_gguf *g = ct_gguf_open(out);
        assert_int_equal(rb_gguf_find_tensor(g, "blk.1.ffn_down.weight")->dtype, cases[k].type);
        assert_int_equal(rb_gguf_find_tensor(g, "token_embd.weight")->dtype, cases[k].type);
        rb_gguf_close(g);
        float *got = ct_logits(out, tokens, 19, &V);
        errs[k] = tu_rel_l2_f(got, want, 19 * (size_t)V);
        print_message("synthetic hidden-256 llama as %-5s: rel L2 vs HF folder %.3g (bound %.3g)\n",
                      rb_dtype_name(cases[k].type), errs[k], cases[k].bound);
        if (errs[k] > cases[k].bound) fail_msg("%s above bound", rb_dtype_name(cases[k].type));
        free(got);
        remove(out);
    }
    assert_true(errs[1] < errs[2] && errs[2] < errs[3]); /* q8_0 < q6_K < q4_K */
    free(want);
    for (int i = 0; i < s.nbufs; i++) free(s.bufs[i]);
    ct_rmtree(s.dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_every_model),
        cmocka_unit_test(test_lossy_formats),
        cmocka_unit_test(test_kquant_synthetic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

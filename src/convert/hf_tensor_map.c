/* Implementation of hf_tensor_map.h for everything but the experts
 * (hf_expert_map.c): the Hugging Face -> llama.cpp name table of the
 * embeddings, attention, norms and dense MLP, with shapes from the config.
 * Architectures differ only through the config's flags (q/k permutation,
 * fused projections, q/k norms, pre/post norms, sinks) and the few names
 * below. */
#include "convert/hf_tensor_map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rb_status cv_hf_map_add(cv_hf_map *m, const char *gguf, const char *hf, int n_dims, int64_t ne0, int64_t ne1,
                        int64_t ne2, bool required, cv_xform xf, rb_error *err) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        cv_hf_tensor *t = realloc(m->t, cap * sizeof *t);
        if (!t) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        m->t = t;
        m->cap = cap;
    }
    cv_hf_tensor *e = &m->t[m->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->gguf_name, sizeof e->gguf_name, "%s", gguf);
    snprintf(e->hf_name, sizeof e->hf_name, "%s", hf ? hf : "");
    e->kind = CV_SRC_ONE;
    e->n_dims = n_dims;
    e->ne[0] = ne0;
    e->ne[1] = n_dims > 1 ? ne1 : 1;
    e->ne[2] = n_dims > 2 ? ne2 : 1;
    e->required = required;
    e->xf = xf;
    return RB_OK;
}

void cv_hf_map_free(cv_hf_map *map) {
    free(map->t);
    memset(map, 0, sizeof *map);
}

static bool is_gemma(const rb_model_config *c) {
    return c->arch == RB_ARCH_GEMMA || c->arch == RB_ARCH_GEMMA2 || c->arch == RB_ARCH_GEMMA3;
}

/* llama.cpp stores q/k of these in the adjacent-pair rope layout. */
static bool permutes_qk(const rb_model_config *c) {
    return c->arch == RB_ARCH_LLAMA || c->arch == RB_ARCH_MISTRAL || c->arch == RB_ARCH_MIXTRAL;
}

/* One layer's tensor: blk.IL.<g> from model.layers.IL.<h>. */
static rb_status lay(cv_hf_map *m, int64_t il, const char *g, const char *h, int nd, int64_t a, int64_t b,
                     bool req, cv_xform xf, rb_error *err) {
    char gn[64], hn[128];
    snprintf(gn, sizeof gn, "blk.%lld.%s", (long long)il, g);
    snprintf(hn, sizeof hn, "model.layers.%lld.%s", (long long)il, h);
    return cv_hf_map_add(m, gn, hn, nd, a, b, 1, req, xf, err);
}

/* L(...): lay() one tensor of layer il, returning the failure (the map builders below) */
#define L(g, h, nd, a, b, req, xf)                                                                              \
    do {                                                                                                        \
        if ((s = lay(m, il, (g), (h), (nd), (a), (b), (req), (xf), err)) != RB_OK) return s;                    \
    } while (0)

static rb_status map_attention(cv_hf_map *m, const rb_model_config *c, int64_t il, rb_error *err) {
    const int64_t E = c->n_embd, D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv;
    const cv_xform norm = is_gemma(c) ? CV_XF_PLUS_ONE : CV_XF_NONE;
    const cv_xform pq = permutes_qk(c) ? CV_XF_PERMUTE_Q : CV_XF_NONE, pk = permutes_qk(c) ? CV_XF_PERMUTE_K : CV_XF_NONE;
    rb_status s = RB_OK;
    if (c->pre_norms) L("attn_norm.weight", "input_layernorm.weight", 1, E, 1, true, norm);
    if (c->fused_qkv) {
        L("attn_qkv.weight", "self_attn.qkv_proj.weight", 2, E, (Hq + 2 * Hkv) * D, true, CV_XF_NONE);
        L("attn_qkv.bias", "self_attn.qkv_proj.bias", 1, (Hq + 2 * Hkv) * D, 1, false, CV_XF_NONE);
    } else {
        L("attn_q.weight", "self_attn.q_proj.weight", 2, E, Hq * D, true, pq);
        L("attn_k.weight", "self_attn.k_proj.weight", 2, E, Hkv * D, true, pk);
        L("attn_v.weight", "self_attn.v_proj.weight", 2, E, Hkv * D, true, CV_XF_NONE);
        L("attn_q.bias", "self_attn.q_proj.bias", 1, Hq * D, 1, c->qkv_bias, pq);
        L("attn_k.bias", "self_attn.k_proj.bias", 1, Hkv * D, 1, c->qkv_bias, pk);
        L("attn_v.bias", "self_attn.v_proj.bias", 1, Hkv * D, 1, c->qkv_bias, CV_XF_NONE);
    }
    if (c->qk_norm) { /* per head, or over the whole projection (olmo2) */
        L("attn_q_norm.weight", "self_attn.q_norm.weight", 1, c->qk_norm == 1 ? D : Hq * D, 1, true, norm);
        L("attn_k_norm.weight", "self_attn.k_norm.weight", 1, c->qk_norm == 1 ? D : Hkv * D, 1, true, norm);
    }
    if (c->attn_sinks) L("attn_sinks.weight", "self_attn.sinks", 1, Hq, 1, true, CV_XF_NONE);
    L("attn_output.weight", "self_attn.o_proj.weight", 2, Hq * D, E, true, CV_XF_NONE);
    L("attn_output.bias", "self_attn.o_proj.bias", 1, E, 1, false, CV_XF_NONE);
    return RB_OK;
}

/* The norms around the MLP: gemma2/3 pre and post, olmo2 post only, the
 * others one input norm (HF post_attention_layernorm; llama.cpp's gpt-oss
 * keeps that HF name as post_attention_norm). */
static rb_status map_mlp_norms(cv_hf_map *m, const rb_model_config *c, int64_t il, rb_error *err) {
    const int64_t E = c->n_embd;
    const cv_xform norm = is_gemma(c) ? CV_XF_PLUS_ONE : CV_XF_NONE;
    rb_status s = RB_OK;
    if (c->post_norms) {
        L("post_attention_norm.weight", "post_attention_layernorm.weight", 1, E, 1, true, norm);
        if (c->pre_norms) L("ffn_norm.weight", "pre_feedforward_layernorm.weight", 1, E, 1, true, norm);
        L("post_ffw_norm.weight", "post_feedforward_layernorm.weight", 1, E, 1, true, norm);
    } else {
        const char *g = c->arch == RB_ARCH_GPTOSS ? "post_attention_norm.weight" : "ffn_norm.weight";
        L(g, "post_attention_layernorm.weight", 1, E, 1, true, norm);
    }
    return RB_OK;
}

static rb_status map_dense_mlp(cv_hf_map *m, const rb_model_config *c, int64_t il, rb_error *err) {
    const int64_t E = c->n_embd, F = c->n_ff;
    rb_status s = RB_OK;
    if (c->fused_gate_up) {
        L("ffn_up.weight", "mlp.gate_up_proj.weight", 2, E, 2 * F, true, CV_XF_NONE);
    } else {
        L("ffn_gate.weight", "mlp.gate_proj.weight", 2, E, F, true, CV_XF_NONE);
        L("ffn_up.weight", "mlp.up_proj.weight", 2, E, F, true, CV_XF_NONE);
    }
    L("ffn_down.weight", "mlp.down_proj.weight", 2, F, E, true, CV_XF_NONE);
#undef L
    return RB_OK;
}

rb_status cv_hf_map_build(const rb_model_config *c, const float *rope_factors, const float *rope_factors_long,
                          cv_has_tensor_fn has, void *ud, cv_hf_map *m, rb_error *err) {
    memset(m, 0, sizeof *m);
    const int64_t E = c->n_embd, V = c->n_vocab;
    const cv_xform norm = is_gemma(c) ? CV_XF_PLUS_ONE : CV_XF_NONE;
    rb_status s;
#define ADD(g, h, nd, a, b, req, xf)                                                                            \
    do {                                                                                                        \
        if ((s = cv_hf_map_add(m, (g), (h), (nd), (a), (b), 1, (req), (xf), err)) != RB_OK) goto fail;          \
    } while (0)
    ADD("token_embd.weight", "model.embed_tokens.weight", 2, E, V, true, CV_XF_NONE);
    if (c->rope_yarn_factor > 0) rope_factors = rope_factors_long = NULL; /* the metadata describes them */
    if (rope_factors) {
        ADD(rope_factors_long ? "rope_factors_short.weight" : "rope_freqs.weight", NULL, 1, c->n_rot / 2, 1, true,
            CV_XF_NONE);
        m->t[m->n - 1].kind = CV_SRC_GENERATED;
        m->t[m->n - 1].gen = rope_factors;
    }
    if (rope_factors_long) {
        ADD("rope_factors_long.weight", NULL, 1, c->n_rot / 2, 1, true, CV_XF_NONE);
        m->t[m->n - 1].kind = CV_SRC_GENERATED;
        m->t[m->n - 1].gen = rope_factors_long;
    }
    for (int64_t il = 0; il < c->n_layer; il++) {
        bool moe = false;
        if ((s = map_attention(m, c, il, err)) != RB_OK) goto fail;
        if ((s = map_mlp_norms(m, c, il, err)) != RB_OK) goto fail;
        if ((s = cv_hf_map_experts(m, c, il, has, ud, &moe, err)) != RB_OK) goto fail;
        if (!moe && (s = map_dense_mlp(m, c, il, err)) != RB_OK) goto fail;
    }
    ADD("output_norm.weight", "model.norm.weight", 1, E, 1, true, norm);
    if (!c->tied_embeddings) ADD("output.weight", "lm_head.weight", 2, E, V, true, CV_XF_NONE);
#undef ADD
    return RB_OK;
fail:
    cv_hf_map_free(m);
    return s;
}

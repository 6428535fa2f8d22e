/* Implementation of hf_tensor_map.h: the Hugging Face -> llama.cpp tensor
 * name table of the supported architectures, with shapes from the config. */
#include "convert/hf_tensor_map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rb_status add(cv_hf_map *m, const char *gguf, const char *hf, int n_dims, int64_t ne0, int64_t ne1,
                     bool required, cv_xform xf, rb_error *err) {
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
    e->n_dims = n_dims;
    e->ne[0] = ne0;
    e->ne[1] = n_dims > 1 ? ne1 : 1;
    e->required = required;
    e->xf = xf;
    return RB_OK;
}

void cv_hf_map_free(cv_hf_map *map) {
    free(map->t);
    memset(map, 0, sizeof *map);
}

rb_status cv_hf_map_build(const rb_model_config *c, const float *rope_factors, const float *rope_factors_long,
                          cv_hf_map *m, rb_error *err) {
    memset(m, 0, sizeof *m);
    if (c->arch >= RB_ARCH_QWEN3) /* q/k norms, post-norm layouts, sinks and experts are not mapped yet */
        return rb_error_set(err, RB_E_UNSUPPORTED, "converting %s to GGUF is not implemented yet", rb_arch_name(c->arch));
    const int64_t E = c->n_embd, D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv, F = c->n_ff, V = c->n_vocab;
    const bool permute = c->arch == RB_ARCH_LLAMA || c->arch == RB_ARCH_MISTRAL;
    const bool gemma = c->arch == RB_ARCH_GEMMA || c->arch == RB_ARCH_GEMMA2;
    const cv_xform norm = gemma ? CV_XF_PLUS_ONE : CV_XF_NONE;
    const cv_xform pq = permute ? CV_XF_PERMUTE_Q : CV_XF_NONE, pk = permute ? CV_XF_PERMUTE_K : CV_XF_NONE;
    rb_status s;
#define ADD(g, h, nd, a, b, req, xf)                                                                            \
    do {                                                                                                        \
        if ((s = add(m, (g), (h), (nd), (a), (b), (req), (xf), err)) != RB_OK) goto fail;                       \
    } while (0)
    ADD("token_embd.weight", "model.embed_tokens.weight", 2, E, V, true, CV_XF_NONE);
    if (rope_factors) {
        ADD(rope_factors_long ? "rope_factors_short.weight" : "rope_freqs.weight", NULL, 1, c->n_rot / 2, 1, true,
            CV_XF_NONE);
        m->t[m->n - 1].gen = rope_factors;
    }
    if (rope_factors_long) {
        ADD("rope_factors_long.weight", NULL, 1, c->n_rot / 2, 1, true, CV_XF_NONE);
        m->t[m->n - 1].gen = rope_factors_long;
    }
    for (int64_t il = 0; il < c->n_layer; il++) {
        char g[64], h[128];
#define L(gs, hs, nd, a, b, req, xf)                                                                            \
    do {                                                                                                        \
        snprintf(g, sizeof g, "blk.%lld.%s", (long long)il, (gs));                                              \
        snprintf(h, sizeof h, "model.layers.%lld.%s", (long long)il, (hs));                                     \
        ADD(g, h, nd, a, b, req, xf);                                                                           \
    } while (0)
        L("attn_norm.weight", "input_layernorm.weight", 1, E, 1, true, norm);
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
        L("attn_output.weight", "self_attn.o_proj.weight", 2, Hq * D, E, true, CV_XF_NONE);
        L("attn_output.bias", "self_attn.o_proj.bias", 1, E, 1, false, CV_XF_NONE);
        if (c->post_norms) {
            L("post_attention_norm.weight", "post_attention_layernorm.weight", 1, E, 1, true, norm);
            L("ffn_norm.weight", "pre_feedforward_layernorm.weight", 1, E, 1, true, norm);
            L("post_ffw_norm.weight", "post_feedforward_layernorm.weight", 1, E, 1, true, norm);
        } else {
            L("ffn_norm.weight", "post_attention_layernorm.weight", 1, E, 1, true, norm);
        }
        if (c->fused_gate_up) {
            L("ffn_up.weight", "mlp.gate_up_proj.weight", 2, E, 2 * F, true, CV_XF_NONE);
        } else {
            L("ffn_gate.weight", "mlp.gate_proj.weight", 2, E, F, true, CV_XF_NONE);
            L("ffn_up.weight", "mlp.up_proj.weight", 2, E, F, true, CV_XF_NONE);
        }
        L("ffn_down.weight", "mlp.down_proj.weight", 2, F, E, true, CV_XF_NONE);
#undef L
    }
    ADD("output_norm.weight", "model.norm.weight", 1, E, 1, true, norm);
    if (!c->tied_embeddings) ADD("output.weight", "lm_head.weight", 2, E, V, true, CV_XF_NONE);
#undef ADD
    return RB_OK;
fail:
    cv_hf_map_free(m);
    return s;
}

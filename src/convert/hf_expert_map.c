/* The mixture-of-experts part of the HF -> llama.cpp tensor table: each MoE
 * layer's router (ffn_gate_inp, kept f32 as llama.cpp's converter does) and
 * its experts as llama.cpp's stacks ffn_{gate,up}_exps [n_embd, n_ff_exp, E]
 * and ffn_down_exps [n_ff_exp, n_embd, E], from whichever layout the folder
 * has:
 *   per expert: <module>.experts.E.{w1,w3,w2}.weight (Mixtral, module
 *     block_sparse_moe) or mlp.experts.E.{gate,up,down}_proj.weight
 *     (Qwen3-MoE), stacked;
 *   stacked (transformers 5's layout in memory, module mlp for all):
 *     mlp.experts.gate_up_proj [E, 2F, H] (gate rows first), down_proj [E, H, F];
 *   gpt-oss: mlp.experts.gate_up_proj [E, H, 2F] with gate and up columns
 *     interleaved, down_proj [E, F, H], biases [E, 2F] / [E, H], router
 *     mlp.router with a bias: de-interleaved and transposed.
 * Shapes in brackets are HF's (outermost first). */
#include "convert/hf_tensor_map.h"

#include <stdio.h>
#include <string.h>

/* Mixtral's published checkpoints keep layer il's router and experts in
 * block_sparse_moe, the others (and transformers 5's own Mixtral layout) in mlp. */
static const char *module_of(const rb_model_config *c, int64_t il, cv_has_tensor_fn has, void *ud) {
    char n[160];
    snprintf(n, sizeof n, "model.layers.%lld.block_sparse_moe.gate.weight", (long long)il);
    return c->arch == RB_ARCH_MIXTRAL && has(ud, n) ? "block_sparse_moe" : "mlp";
}

/* A CV_SRC_GATHER entry over the HF tensor hf (ggml-order shape src_ne of src_dims dims). */
static rb_status gather(cv_hf_map *m, const char *g, const char *hf, int nd, const int64_t ne[3], int src_dims,
                        const int64_t src_ne[3], int64_t off, int64_t s0, int64_t s1, int64_t s2, rb_error *err) {
    rb_status s = cv_hf_map_add(m, g, hf, nd, ne[0], ne[1], ne[2], true, CV_XF_NONE, err);
    if (s != RB_OK) return s;
    cv_hf_tensor *e = &m->t[m->n - 1];
    e->kind = CV_SRC_GATHER;
    e->src_dims = src_dims;
    memcpy(e->src_ne, src_ne, sizeof e->src_ne);
    e->off = off;
    e->s[0] = s0;
    e->s[1] = s1;
    e->s[2] = s2;
    return RB_OK;
}

static rb_status gptoss_experts(cv_hf_map *m, const rb_model_config *c, const char *blk, const char *hf,
                                rb_error *err) {
    const int64_t H = c->n_embd, F = c->n_ff_exp, E = c->n_expert;
    char g[64], h[128];
    rb_status s;
    const int64_t gu_ne[3] = {2 * F, H, E}, gub_ne[3] = {2 * F, E, 1}, dn_ne[3] = {H, F, E};
    const int64_t w_ne[3] = {H, F, E}, b_ne[3] = {F, E, 1}, d_ne[3] = {F, H, E};
    for (int part = 0; part < 2; part++) { /* gate: even columns, up: odd ones */
        snprintf(g, sizeof g, "%s.%s.weight", blk, part ? "ffn_up_exps" : "ffn_gate_exps");
        snprintf(h, sizeof h, "%s.experts.gate_up_proj", hf);
        /* out (e, f, k) = gu[e][k][2f + part] */
        if ((s = gather(m, g, h, 3, w_ne, 3, gu_ne, part, 2 * F, 2, H * 2 * F, err)) != RB_OK) return s;
        snprintf(g, sizeof g, "%s.%s.bias", blk, part ? "ffn_up_exps" : "ffn_gate_exps");
        snprintf(h, sizeof h, "%s.experts.gate_up_proj_bias", hf);
        if ((s = gather(m, g, h, 2, b_ne, 2, gub_ne, part, 2, 2 * F, 0, err)) != RB_OK) return s;
    }
    snprintf(g, sizeof g, "%s.ffn_down_exps.weight", blk);
    snprintf(h, sizeof h, "%s.experts.down_proj", hf);
    /* out (e, k, f) = dn[e][f][k] */
    if ((s = gather(m, g, h, 3, d_ne, 3, dn_ne, 0, H, 1, F * H, err)) != RB_OK) return s;
    snprintf(g, sizeof g, "%s.ffn_down_exps.bias", blk);
    snprintf(h, sizeof h, "%s.experts.down_proj_bias", hf);
    return cv_hf_map_add(m, g, h, 2, H, E, 1, true, CV_XF_NONE, err);
}

static rb_status stacked_experts(cv_hf_map *m, const rb_model_config *c, const char *blk, const char *hf,
                                 rb_error *err) {
    const int64_t H = c->n_embd, F = c->n_ff_exp, E = c->n_expert;
    char g[64], h[128];
    rb_status s;
    const int64_t gu_ne[3] = {H, 2 * F, E}, w_ne[3] = {H, F, E};
    for (int part = 0; part < 2; part++) { /* gate: the first F rows of each expert, up: the next F */
        snprintf(g, sizeof g, "%s.%s.weight", blk, part ? "ffn_up_exps" : "ffn_gate_exps");
        snprintf(h, sizeof h, "%s.experts.gate_up_proj", hf);
        if ((s = gather(m, g, h, 3, w_ne, 3, gu_ne, part * F * H, 1, H, 2 * F * H, err)) != RB_OK) return s;
    }
    snprintf(g, sizeof g, "%s.ffn_down_exps.weight", blk);
    snprintf(h, sizeof h, "%s.experts.down_proj", hf);
    return cv_hf_map_add(m, g, h, 3, F, H, E, true, CV_XF_NONE, err);
}

static rb_status per_expert(cv_hf_map *m, const rb_model_config *c, const char *blk, const char *hf,
                            rb_error *err) {
    const int64_t H = c->n_embd, F = c->n_ff_exp, E = c->n_expert;
    const bool mix = c->arch == RB_ARCH_MIXTRAL;
    const struct {
        const char *g, *h;
        int64_t ne0, ne1;
    } parts[3] = {
        {"ffn_gate_exps", mix ? "w1" : "gate_proj", H, F},
        {"ffn_up_exps", mix ? "w3" : "up_proj", H, F},
        {"ffn_down_exps", mix ? "w2" : "down_proj", F, H},
    };
    for (int i = 0; i < 3; i++) {
        char g[64], h[128];
        snprintf(g, sizeof g, "%s.%s.weight", blk, parts[i].g);
        snprintf(h, sizeof h, "%s.experts.", hf);
        rb_status s = cv_hf_map_add(m, g, h, 3, parts[i].ne0, parts[i].ne1, E, true, CV_XF_NONE, err);
        if (s != RB_OK) return s;
        cv_hf_tensor *e = &m->t[m->n - 1];
        e->kind = CV_SRC_EXPERTS;
        e->n_expert = E;
        snprintf(e->hf_suffix, sizeof e->hf_suffix, ".%s.weight", parts[i].h);
    }
    return RB_OK;
}

rb_status cv_hf_map_experts(cv_hf_map *m, const rb_model_config *c, int64_t il, cv_has_tensor_fn has, void *ud,
                            bool *is_moe, rb_error *err) {
    *is_moe = false;
    if (c->n_expert <= 0) return RB_OK;
    const int64_t H = c->n_embd, E = c->n_expert;
    const bool gptoss = c->arch == RB_ARCH_GPTOSS;
    char blk[32], hf[96], g[64], h[128];
    snprintf(blk, sizeof blk, "blk.%lld", (long long)il);
    snprintf(hf, sizeof hf, "model.layers.%lld.%s", (long long)il, module_of(c, il, has, ud));
    snprintf(h, sizeof h, "%s.%s.weight", hf, gptoss ? "router" : "gate");
    /* qwen3_moe's mlp_only_layers are dense; elsewhere a missing router is reported as missing */
    if (c->arch == RB_ARCH_QWEN3MOE && !has(ud, h)) return RB_OK;
    *is_moe = true;
    rb_status s;
    snprintf(g, sizeof g, "%s.ffn_gate_inp.weight", blk);
    if ((s = cv_hf_map_add(m, g, h, 2, H, E, 1, true, CV_XF_NONE, err)) != RB_OK) return s;
    m->t[m->n - 1].keep_f32 = true;
    if (c->moe_bias) {
        snprintf(g, sizeof g, "%s.ffn_gate_inp.bias", blk);
        snprintf(h, sizeof h, "%s.router.bias", hf);
        if ((s = cv_hf_map_add(m, g, h, 1, E, 1, 1, true, CV_XF_NONE, err)) != RB_OK) return s;
    }
    if (gptoss) return gptoss_experts(m, c, blk, hf, err);
    snprintf(h, sizeof h, "%s.experts.gate_up_proj", hf);
    if (has(ud, h)) return stacked_experts(m, c, blk, hf, err);
    return per_expert(m, c, blk, hf, err);
}

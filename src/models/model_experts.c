/* Binds a mixture-of-experts layer's router and expert weights, stacked as
 * rb_matmul_id takes them ([n_embd, n_ff_exp, E] for gate and up,
 * [n_ff_exp, n_embd, E] for down), from each layout the files use:
 *   GGUF (llama.cpp): blk.N.ffn_{gate,up,down}_exps (+ .bias), ffn_gate_inp
 *   HF per expert: block_sparse_moe.experts.E.{w1,w3,w2} (Mixtral, router
 *     block_sparse_moe.gate) or mlp.experts.E.{gate,up,down}_proj
 *     (Qwen3-MoE, router mlp.gate): copied into one stack
 *   HF stacked (transformers 5 without the checkpoint conversion):
 *     mlp.experts.gate_up_proj [E, 2F, H] (gate rows first) and down_proj
 *     [E, H, F]: used in place as strided views
 *   gpt-oss: mlp.experts.gate_up_proj [E, H, 2F] with gate and up columns
 *     interleaved, down_proj [E, F, H], biases [E, 2F] / [E, H]: transposed
 *     (and de-interleaved) once by rb_cast of strided views. */
#include "models/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct exp_src {
    rb_dtype dtype;
    int64_t ne[4];
    const void *data;
    size_t nbytes;
} exp_src;

static bool find3(const rb_model *m, const char *name, exp_src *o) {
    if (m->gguf) {
        const rb_gguf_tensor_info *t = rb_gguf_find_tensor(m->gguf, name);
        if (!t) return false;
        *o = (exp_src){t->dtype, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}, t->data, t->nbytes};
        return true;
    }
    const rb_st_tensor *t = rb_st_find(m->st, name);
    if (!t) return false;
    *o = (exp_src){t->dtype, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}, t->data, t->nbytes};
    return true;
}

static rb_status bad_shape(const char *name, const exp_src *s, int64_t a, int64_t b, int64_t c, rb_error *err) {
    return rb_error_set(err, RB_E_FORMAT, "tensor '%s' has shape [%lld,%lld,%lld,%lld], expected [%lld,%lld,%lld]", name,
                        (long long)s->ne[0], (long long)s->ne[1], (long long)s->ne[2], (long long)s->ne[3],
                        (long long)a, (long long)b, (long long)c);
}

static bool weight_dtype(rb_dtype t) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t);
    return tr && (tr->is_quant || t == RB_F32 || t == RB_F16 || t == RB_BF16) && t != RB_Q8_K && t != RB_Q8_1;
}

/* A tensor over the file's bytes (wrapped on the CPU, uploaded elsewhere), ne given. */
static rb_status place3(rb_model *m, const char *name, const exp_src *s, const int64_t ne[3], rb_tensor *out,
                        rb_error *err) {
    if (!weight_dtype(s->dtype))
        return rb_error_set(err, RB_E_UNSUPPORTED, "tensor '%s' has unsupported dtype %s", name, rb_dtype_name(s->dtype));
    rb_buffer *buf = NULL;
    rb_status st = rb_buffer_from_host(m->be, (void *)s->data, s->nbytes, &buf);
    if (st != RB_OK) return rb_error_set(err, st, "cannot place '%s': %s", name, rb_backend_last_error(m->be));
    if ((st = rb_model_own_buffer(m, buf)) != RB_OK) {
        rb_buffer_free(buf);
        return rb_error_set(err, st, "out of memory");
    }
    if (rb_tensor_init(out, s->dtype, 3, ne, buf, 0) != RB_OK || rb_tensor_nbytes_contig(out) > s->nbytes)
        return rb_error_set(err, RB_E_FORMAT, "tensor '%s': bad shape", name);
    m->weight_bytes += s->nbytes;
    return RB_OK;
}

/* Exactly [a, b, c] (c = 1 for matrices, b = c = 1 for vectors). */
static rb_status bind_exact(rb_model *m, const char *name, int64_t a, int64_t b, int64_t c, bool required,
                            rb_tensor *out, bool *present, rb_error *err) {
    exp_src s;
    if (present) *present = false;
    if (!find3(m, name, &s)) return required ? rb_error_set(err, RB_E_FORMAT, "missing tensor '%s'", name) : RB_OK;
    if (s.ne[0] != a || s.ne[1] != b || s.ne[2] != c || s.ne[3] != 1) return bad_shape(name, &s, a, b, c, err);
    const int64_t ne[3] = {a, b, c};
    rb_status st = place3(m, name, &s, ne, out, err);
    if (st == RB_OK && present) *present = true;
    return st;
}

/* The HF module holding layer il's router and experts: Mixtral's published
 * checkpoints say block_sparse_moe, the others (and transformers 5's own
 * layout of Mixtral) mlp. */
static const char *hf_moe_module(const rb_model *m, int il) {
    char n[160];
    snprintf(n, sizeof n, "model.layers.%d.block_sparse_moe.gate.weight", il);
    return m->cfg.arch == RB_ARCH_MIXTRAL && rb_st_find(m->st, n) ? "block_sparse_moe" : "mlp";
}

/* E per-expert matrices model.layers.IL.<module>.experts.E.<part>.weight copied into one [a, b, E] stack. */
static rb_status stack_experts(rb_model *m, const char *part, int il, int64_t a, int64_t b, rb_tensor *out,
                               rb_error *err) {
    const int64_t E = m->cfg.n_expert;
    char name[256];
    exp_src s0;
    const char *mod = hf_moe_module(m, il);
    snprintf(name, sizeof name, "model.layers.%d.%s.experts.%d.%s.weight", il, mod, 0, part);
    if (!find3(m, name, &s0)) return rb_error_set(err, RB_E_FORMAT, "missing tensor '%s'", name);
    if (!weight_dtype(s0.dtype)) return rb_error_set(err, RB_E_UNSUPPORTED, "tensor '%s' has dtype %s", name,
                                                    rb_dtype_name(s0.dtype));
    const size_t per = rb_dtype_row_size(s0.dtype, a) * (size_t)b;
    if (per == 0 || (size_t)E > SIZE_MAX / per) return rb_error_set(err, RB_E_FORMAT, "tensor '%s': bad shape", name);
    const int64_t ne[3] = {a, b, E};
    rb_status st = rb_tensor_alloc(m->be, s0.dtype, 3, ne, out);
    if (st != RB_OK) return rb_error_set(err, st, "cannot allocate the experts of '%s'", name);
    if ((st = rb_model_own_buffer(m, out->buf)) != RB_OK) {
        rb_tensor_free(out);
        return rb_error_set(err, st, "out of memory");
    }
    for (int64_t e = 0; e < E; e++) {
        exp_src s;
        snprintf(name, sizeof name, "model.layers.%d.%s.experts.%d.%s.weight", il, mod, (int)e, part);
        if (!find3(m, name, &s)) return rb_error_set(err, RB_E_FORMAT, "missing tensor '%s'", name);
        if (s.ne[0] != a || s.ne[1] != b || s.ne[2] != 1 || s.ne[3] != 1) return bad_shape(name, &s, a, b, 1, err);
        if (s.dtype != s0.dtype || s.nbytes != per)
            return rb_error_set(err, RB_E_FORMAT, "tensor '%s' (%s) differs in dtype from expert 0", name,
                                rb_dtype_name(s.dtype));
        if ((st = rb_buffer_set(out->buf, (size_t)e * per, s.data, per)) != RB_OK)
            return rb_error_set(err, st, "cannot upload '%s': %s", name, rb_backend_last_error(m->be));
    }
    m->weight_bytes += per * (size_t)E;
    return RB_OK;
}

/* A contiguous copy (same dtype) of a strided view v, made on the backend. */
static rb_status materialize(rb_model *m, const rb_tensor *v, const char *name, rb_tensor *out, rb_error *err) {
    rb_status st = rb_tensor_alloc(m->be, v->dtype, 3, v->ne, out);
    if (st == RB_OK && (st = rb_model_own_buffer(m, out->buf)) != RB_OK) rb_tensor_free(out);
    if (st == RB_OK) st = rb_cast(m->be, out, v);
    if (st == RB_OK) st = rb_backend_sync(m->be);
    if (st != RB_OK) return rb_error_set(err, st, "cannot rearrange '%s': %s", name, rb_backend_last_error(m->be));
    m->weight_bytes += rb_tensor_nbytes_contig(out);
    return RB_OK;
}

static rb_status gguf_experts(rb_model *m, int il, rb_layer_weights *L, rb_error *err) {
    const int64_t H = m->cfg.n_embd, F = m->cfg.n_ff_exp, E = m->cfg.n_expert;
    char n[160];
    rb_status s;
#define NM(sfx) (snprintf(n, sizeof n, "blk.%d.%s", il, (sfx)), n)
    if ((s = bind_exact(m, NM("ffn_gate_exps.weight"), H, F, E, true, &L->gate_exps, NULL, err)) != RB_OK) return s;
    if ((s = bind_exact(m, NM("ffn_up_exps.weight"), H, F, E, true, &L->up_exps, NULL, err)) != RB_OK) return s;
    if ((s = bind_exact(m, NM("ffn_down_exps.weight"), F, H, E, true, &L->down_exps, NULL, err)) != RB_OK) return s;
    if (!m->cfg.moe_bias) return RB_OK;
    if ((s = bind_exact(m, NM("ffn_gate_inp.bias"), E, 1, 1, true, &L->router_b, NULL, err)) != RB_OK) return s;
    if ((s = bind_exact(m, NM("ffn_gate_exps.bias"), F, E, 1, true, &L->gate_exps_b, NULL, err)) != RB_OK) return s;
    if ((s = bind_exact(m, NM("ffn_up_exps.bias"), F, E, 1, true, &L->up_exps_b, NULL, err)) != RB_OK) return s;
    if ((s = bind_exact(m, NM("ffn_down_exps.bias"), H, E, 1, true, &L->down_exps_b, NULL, err)) != RB_OK) return s;
    L->has_exp_bias = true;
    return RB_OK;
#undef NM
}

/* gpt-oss's HF layout, rearranged once into the stacked one. */
static rb_status gptoss_experts(rb_model *m, int il, rb_layer_weights *L, rb_error *err) {
    const int64_t H = m->cfg.n_embd, F = m->cfg.n_ff_exp, E = m->cfg.n_expert;
    char n[160];
    rb_status s;
    rb_tensor gu, gub, dn;
#define NM(sfx) (snprintf(n, sizeof n, "model.layers.%d.mlp.%s", il, (sfx)), n)
    if ((s = bind_exact(m, NM("router.bias"), E, 1, 1, true, &L->router_b, NULL, err)) != RB_OK) return s;
    if ((s = bind_exact(m, NM("experts.gate_up_proj"), 2 * F, H, E, true, &gu, NULL, err)) != RB_OK) return s;
    if ((s = bind_exact(m, NM("experts.gate_up_proj_bias"), 2 * F, E, 1, true, &gub, NULL, err)) != RB_OK) return s;
    if ((s = bind_exact(m, NM("experts.down_proj"), H, F, E, true, &dn, NULL, err)) != RB_OK) return s;
    if ((s = bind_exact(m, NM("experts.down_proj_bias"), H, E, 1, true, &L->down_exps_b, NULL, err)) != RB_OK)
        return s;
    if (gu.dtype != RB_F32 && gu.dtype != RB_F16 && gu.dtype != RB_BF16)
        return rb_error_set(err, RB_E_UNSUPPORTED, "gpt-oss experts in %s: only float HF weights are read",
                            rb_dtype_name(gu.dtype));
    const size_t es = rb_dtype_info((int)gu.dtype)->type_size;
    for (int part = 0; part < 2; part++) { /* gate: even columns, up: odd ones; x @ W -> rows of H */
        rb_tensor v = gu;
        v.offs = gu.offs + (size_t)part * es;
        v.ne[0] = H;
        v.ne[1] = F;
        v.nb[0] = 2 * F * es;
        v.nb[1] = 2 * es;
        if ((s = materialize(m, &v, NM("experts.gate_up_proj"), part ? &L->up_exps : &L->gate_exps, err)) != RB_OK)
            return s;
        rb_tensor bv = gub;
        bv.offs = gub.offs + (size_t)part * es;
        bv.ne[0] = F;
        bv.nb[0] = 2 * es;
        if ((s = materialize(m, &bv, NM("experts.gate_up_proj_bias"), part ? &L->up_exps_b : &L->gate_exps_b, err)) !=
            RB_OK)
            return s;
    }
    rb_tensor dv = dn; /* [H, F, E] (rows of H per f) -> [F, H, E] */
    dv.ne[0] = F;
    dv.ne[1] = H;
    dv.nb[0] = dn.nb[1];
    dv.nb[1] = dn.nb[0];
    if ((s = materialize(m, &dv, NM("experts.down_proj"), &L->down_exps, err)) != RB_OK) return s;
    L->has_exp_bias = true;
    return RB_OK;
#undef NM
}

static rb_status hf_experts(rb_model *m, int il, rb_layer_weights *L, rb_error *err) {
    const int64_t H = m->cfg.n_embd, F = m->cfg.n_ff_exp, E = m->cfg.n_expert;
    if (m->cfg.arch == RB_ARCH_GPTOSS) return gptoss_experts(m, il, L, err);
    char n[160];
    rb_status s;
    exp_src gs;
    snprintf(n, sizeof n, "model.layers.%d.mlp.experts.gate_up_proj", il);
    if (find3(m, n, &gs)) { /* transformers 5's stacked layout: strided views in place */
        rb_tensor gu, dn;
        if ((s = bind_exact(m, n, H, 2 * F, E, true, &gu, NULL, err)) != RB_OK) return s;
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.down_proj", il);
        if ((s = bind_exact(m, n, F, H, E, true, &dn, NULL, err)) != RB_OK) return s;
        L->gate_exps = gu;
        L->gate_exps.ne[1] = F;
        L->up_exps = L->gate_exps;
        L->up_exps.offs = gu.offs + (size_t)F * gu.nb[1];
        L->down_exps = dn;
        return RB_OK;
    }
    const bool mix = m->cfg.arch == RB_ARCH_MIXTRAL;
    const char *g = mix ? "w1" : "gate_proj", *u = mix ? "w3" : "up_proj", *d = mix ? "w2" : "down_proj";
    if ((s = stack_experts(m, g, il, H, F, &L->gate_exps, err)) != RB_OK) return s;
    if ((s = stack_experts(m, u, il, H, F, &L->up_exps, err)) != RB_OK) return s;
    return stack_experts(m, d, il, F, H, &L->down_exps, err);
}

rb_status rb_model_bind_experts(rb_model *m, bool hf, int il, rb_layer_weights *L, bool *is_moe, rb_error *err) {
    const int64_t H = m->cfg.n_embd, E = m->cfg.n_expert;
    char n[160];
    *is_moe = false;
    if (E <= 0) return RB_OK;
    if (!hf) snprintf(n, sizeof n, "blk.%d.ffn_gate_inp.weight", il);
    else
        snprintf(n, sizeof n, "model.layers.%d.%s.%s.weight", il, hf_moe_module(m, il),
                 m->cfg.arch == RB_ARCH_GPTOSS ? "router" : "gate");
    exp_src s0;
    if (!find3(m, n, &s0)) {
        /* qwen3_moe's mlp_only_layers are dense; the other archs have experts everywhere */
        if (m->cfg.arch == RB_ARCH_QWEN3MOE) return RB_OK;
        return rb_error_set(err, RB_E_FORMAT, "missing tensor '%s'", n);
    }
    rb_status s = bind_exact(m, n, H, E, 1, true, &L->router, NULL, err);
    if (s == RB_OK) s = hf ? hf_experts(m, il, L, err) : gguf_experts(m, il, L, err);
    if (s == RB_OK) *is_moe = true;
    return s;
}

/* The forward pass shared by every supported architecture: embeddings, then
 * per layer attention (rope, KV-cache write, grouped-query attention with
 * optional sliding window and soft-capping) and gated MLP, then the output
 * head. Written only against ops.h, so it runs on any backend. Activations
 * live in a per-sequence arena sized for one micro-batch. */
#include "models/kv_cache_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RB_MAX_UBATCH 512

typedef struct fwd_bufs {
    rb_tensor ids, pos, x, h, qkv, qr, kr, att, o, g, u, logits;
} fwd_bufs;

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Lays out every activation tensor of a T-token micro-batch at offsets of
 * buf (NULL: only computes the total size). */
static size_t layout(const rb_model_config *c, int64_t T, bool all_logits, rb_buffer *buf, fwd_bufs *fb) {
    const int64_t E = c->n_embd, D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv, F = c->n_ff;
    size_t off = 0;
    fwd_bufs tmp;
    if (!fb) fb = &tmp;
#define PLACE(t, dt, a, b, cc)                                                                                   \
    do {                                                                                                       \
        rb_tensor_init4(&fb->t, dt, a, b, cc, 1, buf, off);                                                    \
        off = align64(off + rb_tensor_nbytes_contig(&fb->t));                                                  \
    } while (0)
    PLACE(ids, RB_I32, T, 1, 1);
    PLACE(pos, RB_I32, T, 1, 1);
    PLACE(x, RB_F32, E, T, 1);
    PLACE(h, RB_F32, E, T, 1);
    PLACE(qkv, RB_F32, (Hq + 2 * Hkv) * D, T, 1);
    PLACE(qr, RB_F32, D, Hq, T);
    PLACE(kr, RB_F32, D, Hkv, T);
    PLACE(att, RB_F32, D, Hq, T);
    PLACE(o, RB_F32, E, T, 1);
    PLACE(g, RB_F32, (c->fused_gate_up ? 2 : 1) * F, T, 1);
    PLACE(u, RB_F32, F, T, 1);
    PLACE(logits, RB_F32, c->n_vocab, all_logits ? T : 1, 1);
#undef PLACE
    return off;
}

static rb_status ensure_arena(rb_kv_cache *kv, int64_t T, rb_error *err) {
    const rb_model_config *c = &kv->m->cfg;
    size_t need = layout(c, T, true, NULL, NULL);
    if (kv->arena && kv->arena_size >= need) return RB_OK;
    if (kv->arena) rb_buffer_free(kv->arena);
    kv->arena = NULL;
    rb_status s = rb_buffer_alloc(kv->m->be, need, &kv->arena);
    if (s != RB_OK)
        return rb_error_set(err, s, "cannot allocate %.1f MiB of activations: %s", (double)need / 1048576.0,
                            rb_backend_last_error(kv->m->be));
    kv->arena_size = need;
    kv->arena_tokens = T;
    return RB_OK;
}

/* A [ne0, ne1, ne2] view of t's memory at byte offset offs with the given strides. */
static rb_tensor view3(const rb_tensor *t, size_t offs, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1,
                       size_t nb2) {
    rb_tensor v = *t;
    v.offs = t->offs + offs;
    v.ne[0] = ne0;
    v.ne[1] = ne1;
    v.ne[2] = ne2;
    v.ne[3] = 1;
    v.nb[1] = nb1;
    v.nb[2] = nb2;
    v.nb[3] = nb2 * (size_t)ne2;
    return v;
}

#define CK(expr)                                                                                               \
    do {                                                                                                       \
        rb_status s_ = (expr);                                                                                 \
        if (s_ != RB_OK)                                                                                       \
            return rb_error_set(err, s_, "%s (layer %d): %s", #expr, il, rb_backend_last_error(be));           \
    } while (0)

static rb_status forward_ubatch(rb_model *m, rb_kv_cache *kv, const int32_t *tokens, int64_t T, bool all_logits,
                                float *logits, rb_error *err) {
    const rb_model_config *c = &m->cfg;
    rb_backend *be = m->be;
    const int64_t E = c->n_embd, D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv, F = c->n_ff, V = c->n_vocab;
    const int64_t p0 = kv->used;
    int il = -1;
    fwd_bufs b;
    layout(c, T, all_logits, kv->arena, &b);

    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T);
    if (!pos) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < T; i++) pos[i] = (int32_t)(p0 + i);
    rb_status st = rb_tensor_set(&b.pos, pos, sizeof(int32_t) * (size_t)T);
    free(pos);
    if (st != RB_OK) return rb_error_set(err, st, "cannot upload positions: %s", rb_backend_last_error(be));
    CK(rb_tensor_set(&b.ids, tokens, sizeof(int32_t) * (size_t)T));

    CK(rb_get_rows(be, &b.x, &m->tok_embd, &b.ids));
    if (c->embd_scale) CK(rb_affine(be, &b.x, &b.x, (float)sqrt((double)E), 0.0f));

    rb_rope_params rp = {
        .n_rot = c->n_rot,
        .mode = c->rope_mode,
        .freq_base = c->rope_theta,
        .freq_scale = c->rope_freq_scale,
        .attn_factor = c->rope_attn_factor,
        .freq_factors = c->has_rope_factors ? &m->rope_factors : NULL,
    };
    /* longrope (transformers' dynamic rule): long factors once this batch
     * reaches positions beyond the original context */
    if (c->has_rope_long && p0 + T > c->rope_orig_ctx) rp.freq_factors = &m->rope_factors_long;
    const size_t es = rb_dtype_info((int)kv->dtype)->type_size;
    const int64_t kvrow = D * Hkv;
    const size_t qkv_row = (size_t)((Hq + 2 * Hkv) * D) * sizeof(float);

    for (il = 0; il < c->n_layer; il++) {
        const rb_layer_weights *L = &m->layers[il];
        CK(rb_rms_norm(be, &b.h, &b.x, &L->attn_norm, c->norm_eps));

        /* projections into the qkv region: q | k | v per token row */
        rb_tensor q, k, v;
        if (c->fused_qkv) {
            CK(rb_matmul(be, &b.qkv, &L->wqkv, &b.h));
            if (L->has_bqkv) CK(rb_binary(be, RB_BINARY_ADD, &b.qkv, &b.qkv, &L->bqkv));
            q = view3(&b.qkv, 0, D, Hq, T, D * sizeof(float), qkv_row);
            k = view3(&b.qkv, (size_t)(Hq * D) * sizeof(float), D, Hkv, T, D * sizeof(float), qkv_row);
            v = view3(&b.qkv, (size_t)((Hq + Hkv) * D) * sizeof(float), kvrow, T, 1, qkv_row, qkv_row * (size_t)T);
        } else {
            rb_tensor q2 = view3(&b.qkv, 0, Hq * D, T, 1, (size_t)(Hq * D) * sizeof(float), 0);
            rb_tensor k2 = view3(&b.qkv, (size_t)(Hq * D * T) * sizeof(float), kvrow, T, 1,
                                 (size_t)kvrow * sizeof(float), 0);
            rb_tensor v2 = view3(&b.qkv, (size_t)((Hq * D + kvrow) * T) * sizeof(float), kvrow, T, 1,
                                 (size_t)kvrow * sizeof(float), 0);
            q2.nb[2] = q2.nb[3] = q2.nb[1] * (size_t)T;
            k2.nb[2] = k2.nb[3] = k2.nb[1] * (size_t)T;
            v2.nb[2] = v2.nb[3] = v2.nb[1] * (size_t)T;
            CK(rb_matmul(be, &q2, &L->wq, &b.h));
            CK(rb_matmul(be, &k2, &L->wk, &b.h));
            CK(rb_matmul(be, &v2, &L->wv, &b.h));
            if (L->has_bq) CK(rb_binary(be, RB_BINARY_ADD, &q2, &q2, &L->bq));
            if (L->has_bk) CK(rb_binary(be, RB_BINARY_ADD, &k2, &k2, &L->bk));
            if (L->has_bv) CK(rb_binary(be, RB_BINARY_ADD, &v2, &v2, &L->bv));
            q = view3(&q2, 0, D, Hq, T, D * sizeof(float), q2.nb[1]);
            k = view3(&k2, 0, D, Hkv, T, D * sizeof(float), k2.nb[1]);
            v = v2;
        }
        CK(rb_rope(be, &b.qr, &q, &b.pos, &rp));
        CK(rb_rope(be, &b.kr, &k, &b.pos, &rp));

        /* append this batch's keys and values at rows p0.. of the cache */
        rb_tensor kdst = view3(&kv->k[il], (size_t)p0 * (size_t)kvrow * es, D, Hkv, T, D * es, (size_t)kvrow * es);
        rb_tensor vdst = view3(&kv->v[il], (size_t)p0 * (size_t)kvrow * es, kvrow, T, 1, (size_t)kvrow * es,
                               (size_t)kvrow * es * (size_t)T);
        CK(rb_cast(be, &kdst, &b.kr));
        CK(rb_cast(be, &vdst, &v));

        /* attention over positions 0..p0+T-1 */
        const int64_t Tk = p0 + T;
        rb_tensor qa = view3(&b.qr, 0, D, T, Hq, (size_t)(D * Hq) * sizeof(float), (size_t)D * sizeof(float));
        rb_tensor ka = view3(&kv->k[il], 0, D, Tk, Hkv, (size_t)kvrow * es, (size_t)D * es);
        rb_tensor va = view3(&kv->v[il], 0, D, Tk, Hkv, (size_t)kvrow * es, (size_t)D * es);
        const bool swa = c->sliding_window > 0 && (c->swa_pattern == 0 || il % c->swa_pattern == 0);
        rb_attn_params ap = {
            .scale = c->attn_scale,
            .softcap = c->attn_softcap,
            .causal = true,
            .window = swa ? c->sliding_window : 0,
            .q_pos0 = p0,
            .mask = NULL,
        };
        CK(rb_attention(be, &b.att, &qa, &ka, &va, &ap));

        rb_tensor att2 = view3(&b.att, 0, Hq * D, T, 1, (size_t)(Hq * D) * sizeof(float),
                               (size_t)(Hq * D * T) * sizeof(float));
        CK(rb_matmul(be, &b.o, &L->wo, &att2));
        if (L->has_bo) CK(rb_binary(be, RB_BINARY_ADD, &b.o, &b.o, &L->bo));
        if (c->post_norms) CK(rb_rms_norm(be, &b.o, &b.o, &L->post_attn_norm, c->norm_eps));
        CK(rb_binary(be, RB_BINARY_ADD, &b.x, &b.x, &b.o));

        /* gated MLP */
        CK(rb_rms_norm(be, &b.h, &b.x, &L->ffn_norm, c->norm_eps));
        rb_tensor gate, up;
        if (c->fused_gate_up) {
            CK(rb_matmul(be, &b.g, &L->w_gate_up, &b.h));
            gate = view3(&b.g, 0, F, T, 1, (size_t)(2 * F) * sizeof(float), (size_t)(2 * F * T) * sizeof(float));
            up = view3(&b.g, (size_t)F * sizeof(float), F, T, 1, (size_t)(2 * F) * sizeof(float),
                       (size_t)(2 * F * T) * sizeof(float));
            CK(rb_unary(be, c->gelu_act ? RB_UNARY_GELU_TANH : RB_UNARY_SILU, &b.u, &gate));
            CK(rb_binary(be, RB_BINARY_MUL, &b.u, &b.u, &up));
            CK(rb_matmul(be, &b.o, &L->w_down, &b.u));
        } else {
            rb_tensor g1 = view3(&b.g, 0, F, T, 1, (size_t)F * sizeof(float), (size_t)(F * T) * sizeof(float));
            CK(rb_matmul(be, &g1, &L->w_gate, &b.h));
            CK(rb_matmul(be, &b.u, &L->w_up, &b.h));
            CK(rb_unary(be, c->gelu_act ? RB_UNARY_GELU_TANH : RB_UNARY_SILU, &g1, &g1));
            CK(rb_binary(be, RB_BINARY_MUL, &g1, &g1, &b.u));
            CK(rb_matmul(be, &b.o, &L->w_down, &g1));
        }
        if (c->post_norms) CK(rb_rms_norm(be, &b.o, &b.o, &L->post_ffn_norm, c->norm_eps));
        CK(rb_binary(be, RB_BINARY_ADD, &b.x, &b.x, &b.o));
    }
    il = -1;

    kv->used = p0 + T;
    if (!logits) return RB_OK; /* an inner micro-batch of a longer prompt */

    /* output head: every row, or only the last one */
    rb_tensor xin = b.x, hout = b.h;
    if (!all_logits) {
        xin = view3(&b.x, (size_t)((T - 1) * E) * sizeof(float), E, 1, 1, (size_t)E * sizeof(float),
                    (size_t)E * sizeof(float));
        hout = view3(&b.h, 0, E, 1, 1, (size_t)E * sizeof(float), (size_t)E * sizeof(float));
    }
    CK(rb_rms_norm(be, &hout, &xin, &m->out_norm, c->norm_eps));
    CK(rb_matmul(be, &b.logits, &m->output, &hout));
    if (c->final_softcap > 0) {
        CK(rb_affine(be, &b.logits, &b.logits, 1.0f / c->final_softcap, 0.0f));
        CK(rb_unary(be, RB_UNARY_TANH, &b.logits, &b.logits));
        CK(rb_affine(be, &b.logits, &b.logits, c->final_softcap, 0.0f));
    }
    CK(rb_tensor_get(&b.logits, logits, sizeof(float) * (size_t)(V * (all_logits ? T : 1))));
    return RB_OK;
}

rb_status rb_model_forward(rb_model *m, rb_kv_cache *kv, const int32_t *tokens, int64_t n, bool all_logits,
                           float *logits, rb_error *err) {
    if (!m || !kv || kv->m != m || (!tokens && n > 0))
        return rb_error_set(err, RB_E_INVALID, "rb_model_forward: bad arguments");
    if (n <= 0) return rb_error_set(err, RB_E_INVALID, "rb_model_forward: no tokens");
    if (kv->used + n > kv->n_ctx)
        return rb_error_set(err, RB_E_RANGE, "%lld tokens do not fit: context %lld, %lld already used", (long long)n,
                            (long long)kv->n_ctx, (long long)kv->used);
    const int64_t V = m->cfg.n_vocab;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return rb_error_set(err, RB_E_RANGE, "token id %d at index %lld is outside the vocabulary (0..%lld)",
                                tokens[i], (long long)i, (long long)V - 1);
    int64_t ub = n < RB_MAX_UBATCH ? n : RB_MAX_UBATCH;
    if (kv->arena_tokens > ub) ub = kv->arena_tokens < RB_MAX_UBATCH ? kv->arena_tokens : RB_MAX_UBATCH;
    rb_status s = ensure_arena(kv, ub, err);
    if (s != RB_OK) return s;
    for (int64_t done = 0; done < n;) {
        int64_t T = n - done < kv->arena_tokens ? n - done : kv->arena_tokens;
        bool last = done + T == n;
        float *out = NULL;
        if (all_logits) out = logits ? logits + done * V : NULL;
        else if (last) out = logits;
        s = forward_ubatch(m, kv, tokens + done, T, all_logits, out, err);
        if (s != RB_OK) return s;
        done += T;
    }
    return RB_OK;
}

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

/* Rows of a micro-batch that belong to one sequence: consecutive tokens at
 * positions p0.. appended to kv. A prefill chunk is one group of T rows; a
 * batched decode step is n groups of one row each. */
typedef struct seq_group {
    rb_kv_cache *kv;
    int64_t row0, n, p0;
} seq_group;

static rb_status forward_rows(rb_model *m, rb_buffer *arena, const int32_t *tokens, int64_t T,
                              const seq_group *grp, int64_t n_grp, bool all_logits, float *logits, rb_error *err) {
    const rb_model_config *c = &m->cfg;
    rb_backend *be = m->be;
    const int64_t E = c->n_embd, D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv, F = c->n_ff, V = c->n_vocab;
    int il = -1;
    fwd_bufs b;
    layout(c, T, all_logits, arena, &b);

    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T);
    if (!pos) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (int64_t gi = 0; gi < n_grp; gi++)
        for (int64_t i = 0; i < grp[gi].n; i++) pos[grp[gi].row0 + i] = (int32_t)(grp[gi].p0 + i);
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
    const int64_t kvrow = D * Hkv;
    const size_t qkv_row = (size_t)((Hq + 2 * Hkv) * D) * sizeof(float);

    for (il = 0; il < c->n_layer; il++) {
        const rb_layer_weights *L = &m->layers[il];
        CK(rb_rms_norm(be, &b.h, &b.x, &L->attn_norm, c->norm_eps));

        /* projections into the qkv region */
        rb_tensor q, k, v;
        if (c->fused_qkv) {
            CK(rb_matmul(be, &b.qkv, &L->wqkv, &b.h));
            if (L->has_bqkv) CK(rb_binary(be, RB_BINARY_ADD, &b.qkv, &b.qkv, &L->bqkv));
            q = view3(&b.qkv, 0, D, Hq, T, D * sizeof(float), qkv_row);
            k = view3(&b.qkv, (size_t)(Hq * D) * sizeof(float), D, Hkv, T, D * sizeof(float), qkv_row);
            v = view3(&b.qkv, (size_t)((Hq + Hkv) * D) * sizeof(float), kvrow, T, 1, qkv_row, qkv_row * (size_t)T);
        } else {
            rb_tensor q2 = view3(&b.qkv, 0, Hq * D, T, 1, (size_t)(Hq * D) * sizeof(float),
                                 (size_t)(Hq * D * T) * sizeof(float));
            rb_tensor k2 = view3(&b.qkv, (size_t)(Hq * D * T) * sizeof(float), kvrow, T, 1,
                                 (size_t)kvrow * sizeof(float), (size_t)(kvrow * T) * sizeof(float));
            rb_tensor v2 = view3(&b.qkv, (size_t)((Hq * D + kvrow) * T) * sizeof(float), kvrow, T, 1,
                                 (size_t)kvrow * sizeof(float), (size_t)(kvrow * T) * sizeof(float));
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
        if (!c->has_rope_long) {
            CK(rb_rope(be, &b.qr, &q, &b.pos, &rp));
            CK(rb_rope(be, &b.kr, &k, &b.pos, &rp));
        } else { /* longrope (transformers' dynamic rule): long factors once a
                  * sequence's batch reaches past the original context */
            for (int64_t gi = 0; gi < n_grp; gi++) {
                const seq_group *g = &grp[gi];
                rb_rope_params rpg = rp;
                if (g->p0 + g->n > c->rope_orig_ctx) rpg.freq_factors = &m->rope_factors_long;
                rb_tensor qs, ks, qd, kd, ps;
                CK(rb_tensor_slice(&q, 2, g->row0, g->n, &qs));
                CK(rb_tensor_slice(&k, 2, g->row0, g->n, &ks));
                CK(rb_tensor_slice(&b.qr, 2, g->row0, g->n, &qd));
                CK(rb_tensor_slice(&b.kr, 2, g->row0, g->n, &kd));
                CK(rb_tensor_slice(&b.pos, 0, g->row0, g->n, &ps));
                CK(rb_rope(be, &qd, &qs, &ps, &rpg));
                CK(rb_rope(be, &kd, &ks, &ps, &rpg));
            }
        }
        const bool swa = c->sliding_window > 0 && (c->swa_pattern == 0 || il % c->swa_pattern == 0);
        for (int64_t gi = 0; gi < n_grp; gi++) {
            const seq_group *g = &grp[gi];
            rb_kv_cache *kv = g->kv;
            const size_t es = rb_dtype_info((int)kv->dtype)->type_size;
            /* append this group's keys and values at rows p0.. of its cache */
            rb_tensor kdst = view3(&kv->k[il], (size_t)g->p0 * (size_t)kvrow * es, D, Hkv, g->n, D * es,
                                   (size_t)kvrow * es);
            rb_tensor vdst = view3(&kv->v[il], (size_t)g->p0 * (size_t)kvrow * es, kvrow, g->n, 1,
                                   (size_t)kvrow * es, (size_t)kvrow * es * (size_t)g->n);
            rb_tensor ksrc, vsrc;
            CK(rb_tensor_slice(&b.kr, 2, g->row0, g->n, &ksrc));
            CK(rb_tensor_slice(&v, 1, g->row0, g->n, &vsrc));
            CK(rb_cast(be, &kdst, &ksrc));
            CK(rb_cast(be, &vdst, &vsrc));

            /* attention over positions 0..p0+n-1 of this sequence */
            const int64_t Tk = g->p0 + g->n;
            rb_tensor qa = view3(&b.qr, (size_t)(g->row0 * D * Hq) * sizeof(float), D, g->n, Hq,
                                 (size_t)(D * Hq) * sizeof(float), (size_t)D * sizeof(float));
            rb_tensor ka = view3(&kv->k[il], 0, D, Tk, Hkv, (size_t)kvrow * es, (size_t)D * es);
            rb_tensor va = view3(&kv->v[il], 0, D, Tk, Hkv, (size_t)kvrow * es, (size_t)D * es);
            rb_tensor ad = view3(&b.att, (size_t)(g->row0 * D * Hq) * sizeof(float), D, Hq, g->n,
                                 (size_t)D * sizeof(float), (size_t)(D * Hq) * sizeof(float));
            rb_attn_params ap = {
                .scale = c->attn_scale,
                .softcap = c->attn_softcap,
                .causal = true,
                .window = swa ? c->sliding_window : 0,
                .q_pos0 = g->p0,
                .mask = NULL,
            };
            CK(rb_attention(be, &ad, &qa, &ka, &va, &ap));
        }

        rb_tensor att2 = view3(&b.att, 0, Hq * D, T, 1, (size_t)(Hq * D) * sizeof(float),
                               (size_t)(Hq * D * T) * sizeof(float));
        CK(rb_matmul(be, &b.o, &L->wo, &att2));
        if (L->has_bo) CK(rb_binary(be, RB_BINARY_ADD, &b.o, &b.o, &L->bo));
        if (c->post_norms) CK(rb_rms_norm(be, &b.o, &b.o, &L->post_attn_norm, c->norm_eps));
        CK(rb_binary(be, RB_BINARY_ADD, &b.x, &b.x, &b.o));

        /* gated MLP */
        CK(rb_rms_norm(be, &b.h, &b.x, &L->ffn_norm, c->norm_eps));
        const rb_unary_op act = c->gelu_act ? RB_UNARY_GELU_TANH : RB_UNARY_SILU;
        if (c->fused_gate_up) {
            CK(rb_matmul(be, &b.g, &L->w_gate_up, &b.h));
            rb_tensor gate = view3(&b.g, 0, F, T, 1, (size_t)(2 * F) * sizeof(float),
                                   (size_t)(2 * F * T) * sizeof(float));
            rb_tensor up = view3(&b.g, (size_t)F * sizeof(float), F, T, 1, (size_t)(2 * F) * sizeof(float),
                                 (size_t)(2 * F * T) * sizeof(float));
            CK(rb_unary(be, act, &b.u, &gate));
            CK(rb_binary(be, RB_BINARY_MUL, &b.u, &b.u, &up));
            CK(rb_matmul(be, &b.o, &L->w_down, &b.u));
        } else {
            rb_tensor g1 = view3(&b.g, 0, F, T, 1, (size_t)F * sizeof(float), (size_t)(F * T) * sizeof(float));
            CK(rb_matmul(be, &g1, &L->w_gate, &b.h));
            CK(rb_matmul(be, &b.u, &L->w_up, &b.h));
            CK(rb_unary(be, act, &g1, &g1));
            CK(rb_binary(be, RB_BINARY_MUL, &g1, &g1, &b.u));
            CK(rb_matmul(be, &b.o, &L->w_down, &g1));
        }
        if (c->post_norms) CK(rb_rms_norm(be, &b.o, &b.o, &L->post_ffn_norm, c->norm_eps));
        CK(rb_binary(be, RB_BINARY_ADD, &b.x, &b.x, &b.o));
    }
    il = -1;
    for (int64_t gi = 0; gi < n_grp; gi++) grp[gi].kv->used = grp[gi].p0 + grp[gi].n;
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
    if (n > kv->n_ctx - kv->used) /* not used + n: n comes from the caller and may be huge */
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
        seq_group g = {.kv = kv, .row0 = 0, .n = T, .p0 = kv->used};
        s = forward_rows(m, kv->arena, tokens + done, T, &g, 1, all_logits, out, err);
        if (s != RB_OK) return s;
        done += T;
    }
    return RB_OK;
}

rb_status rb_model_forward_batch(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, int64_t n,
                                 float *logits, rb_error *err) {
    if (!m || !kvs || !tokens || !logits || n <= 0)
        return rb_error_set(err, RB_E_INVALID, "rb_model_forward_batch: bad arguments");
    const int64_t V = m->cfg.n_vocab;
    seq_group *g = malloc(sizeof(seq_group) * (size_t)n);
    if (!g) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    rb_status s = RB_OK;
    for (int64_t i = 0; i < n && s == RB_OK; i++) {
        rb_kv_cache *kv = kvs[i];
        if (!kv || kv->m != m) s = rb_error_set(err, RB_E_INVALID, "sequence %lld: KV cache of another model", (long long)i);
        else if (kv->used + 1 > kv->n_ctx)
            s = rb_error_set(err, RB_E_RANGE, "sequence %lld: context of %lld is full", (long long)i, (long long)kv->n_ctx);
        else if (tokens[i] < 0 || tokens[i] >= V)
            s = rb_error_set(err, RB_E_RANGE, "sequence %lld: token id %d is outside the vocabulary", (long long)i, tokens[i]);
        for (int64_t j = 0; j < i && s == RB_OK; j++)
            if (kvs[j] == kv) s = rb_error_set(err, RB_E_INVALID, "the same KV cache appears twice in one batch");
        g[i] = (seq_group){.kv = kv, .row0 = i, .n = 1, .p0 = kv ? kv->used : 0};
    }
    for (int64_t done = 0; s == RB_OK && done < n; done += RB_MAX_UBATCH) {
        const int64_t T = n - done < RB_MAX_UBATCH ? n - done : RB_MAX_UBATCH;
        if ((s = ensure_arena(kvs[0], T, err)) != RB_OK) break;
        for (int64_t i = 0; i < T; i++) g[done + i].row0 = i;
        s = forward_rows(m, kvs[0]->arena, tokens + done, T, g + done, T, true, logits + done * V, err);
    }
    free(g);
    return s;
}

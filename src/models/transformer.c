/* The forward pass of every supported architecture, written once against
 * ops.h so it runs on any backend. rb_fwd_run reads like the Llama paper:
 * the token embeddings, then per layer an attention block and a
 * feed-forward block, each adding its output to the residual stream x and
 * leaving the norm of x that the next block reads in h, then the output
 * head. The other architectures differ in data of rb_model_config (biases,
 * q/k norms, norms after the sublayers instead of before, sliding windows
 * with their own rope base, soft-capping, experts, one qkv or gate_up
 * matrix) that the small steps below consult; longrope and the forms below
 * are the only other branches.
 * Decode-sized micro-batches (at most RB_FUSE_ROWS rows, where the model
 * allows: fusable) fold the norms, the gate and the residual adds into the
 * products (rb_matmul_fused: 5 instead of 11 ops a layer where a backend
 * fuses them) and, with one qkv matrix, the rope and in the
 * position-independent form the KV-cache write into the qkv product.
 * Activations live in a per-sequence arena sized for one micro-batch
 * (rb_fwd_layout). The entry points, micro-batching and the decode graphs
 * are in forward.c. */
#include "models/forward_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t rb_fwd_inputs_span(const fwd_bufs *b) {
    return b->lastrow.offs + rb_tensor_nbytes_contig(&b->lastrow) - b->ids.offs;
}

/* The inputs (ids, pos, kvrow, kvslot, lastrow) come first and next to each other: one upload fills them. */
size_t rb_fwd_layout(const rb_model_config *c, int64_t T, bool all_logits, rb_buffer *buf, fwd_bufs *fb) {
    const int64_t E = c->n_embd, D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv, F = c->n_ff;
    size_t off = 0;
    fwd_bufs tmp;
    if (!fb) fb = &tmp;
    fb->in_host = NULL;
#define PLACE(t, dt, a, b, cc)                                                                                   \
    do {                                                                                                       \
        rb_tensor_init4(&fb->t, dt, a, b, cc, 1, buf, off);                                                    \
        off = align64(off + rb_tensor_nbytes_contig(&fb->t));                                                  \
    } while (0)
    PLACE(ids, RB_I32, T, 1, 1);
    PLACE(pos, RB_I32, T, 1, 1);
    PLACE(kvrow, RB_I32, T, 1, 1);
    PLACE(kvslot, RB_I32, T, 1, 1);
    PLACE(lastrow, RB_I32, T, 1, 1);
    PLACE(x, RB_F32, E, T, 1);
    PLACE(h, RB_F32, E, T, 1);
    PLACE(qkv, RB_F32, (Hq + 2 * Hkv) * D, T, 1);
    PLACE(att, RB_F32, D, Hq, T);
    PLACE(o, RB_F32, E, T, 1);
    PLACE(g, RB_F32, (c->fused_gate_up ? 2 : 1) * F, T, 1);
    PLACE(u, RB_F32, F, T, 1);
    PLACE(logits, RB_F32, c->n_vocab, all_logits ? T : 1, 1);
    const int64_t NE = c->n_expert > 0 ? c->n_expert : 1, K = c->n_expert > 0 ? c->n_expert_used : 1;
    const int64_t FX = c->n_expert > 0 ? c->n_ff_exp : 1, HX = c->n_expert > 0 ? E : 1;
    PLACE(rl, RB_F32, NE, T, 1);
    PLACE(tw, RB_F32, K, T, 1);
    PLACE(ti, RB_I32, K, T, 1);
    PLACE(eg, RB_F32, FX, K, T);
    PLACE(eu, RB_F32, FX, K, T);
    PLACE(ey, RB_F32, HX, K, T);
    PLACE(eb, RB_F32, FX > HX ? FX : HX, K * T, 1);
    PLACE(es, RB_F32, 1, T, 1);
#undef PLACE
    return off;
}

rb_status rb_fwd_ensure_arena(rb_kv_cache *kv, int64_t T, rb_error *err) {
    const rb_model_config *c = &kv->m->cfg;
    size_t need = rb_fwd_layout(c, T, true, NULL, NULL);
    if (kv->arena && kv->arena_size >= need) return RB_OK;
    rb_kv_cache_drop_graph(kv); /* it addresses the old arena */
    if (kv->arena) rb_buffer_free(kv->arena);
    kv->arena = NULL;
    rb_backend_host_free(kv->m->be, kv->in_host);
    kv->in_host = NULL;
    kv->arena_gen++;
    rb_status s = rb_buffer_alloc(kv->m->be, need, &kv->arena);
    if (s != RB_OK)
        return rb_error_set(err, s, "cannot allocate %.1f MiB of activations: %s", (double)need / 1048576.0,
                            rb_backend_last_error(kv->m->be));
    kv->arena_size = need;
    kv->arena_tokens = T;
    fwd_bufs b;
    rb_fwd_layout(c, T, true, kv->arena, &b);
    kv->in_host = rb_backend_host_alloc(kv->m->be, rb_fwd_inputs_span(&b)); /* NULL: uploaded before each step */
    return RB_OK;
}

rb_status rb_fwd_upload_inputs(rb_backend *be, const fwd_bufs *b, const int32_t *tokens, int64_t T,
                               const seq_group *grp, int64_t n_grp, rb_error *err) {
    const size_t lo = b->ids.offs, n = rb_fwd_inputs_span(b);
    const size_t pos_at = b->pos.offs - lo, row_at = b->kvrow.offs - lo, slot_at = b->kvslot.offs - lo;
    const size_t last_at = b->lastrow.offs - lo;
    char *tmp = b->in_host ? memset(b->in_host, 0, n) : calloc(1, n);
    if (!tmp) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    memcpy(tmp, tokens, sizeof(int32_t) * (size_t)T);
    for (int64_t gi = 0; gi < n_grp; gi++) {
        const rb_kv_cache *kv = grp[gi].kv;
        const int32_t last = (int32_t)(grp[gi].row0 + grp[gi].n - 1);
        memcpy(tmp + last_at + sizeof(int32_t) * (size_t)gi, &last, sizeof last);
        for (int64_t i = 0; i < grp[gi].n; i++) {
            const size_t at = sizeof(int32_t) * (size_t)(grp[gi].row0 + i);
            const int32_t p = (int32_t)(grp[gi].p0 + i), slot = (int32_t)kv->slot;
            const int32_t row = (int32_t)(kv->slot * kv->pool->n_ctx + grp[gi].p0 + i); /* < 2^31: create_many */
            memcpy(tmp + pos_at + at, &p, sizeof p);
            memcpy(tmp + row_at + at, &row, sizeof row);
            memcpy(tmp + slot_at + at, &slot, sizeof slot);
        }
    }
    if (b->in_host) return RB_OK;
    rb_status s = rb_buffer_set(b->ids.buf, lo, tmp, n);
    free(tmp);
    if (s != RB_OK) return rb_error_set(err, s, "cannot upload token ids and positions: %s", rb_backend_last_error(be));
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

/* ---- one micro-batch's pass: what its steps share ---- */

typedef struct fwd {
    rb_model *m;
    const rb_model_config *c;
    rb_backend *be;
    fwd_bufs b;            /* the activations */
    int64_t T;             /* rows of the micro-batch */
    const seq_group *grp;  /* the sequences they belong to */
    int64_t n_grp;
    bool fixed;            /* position-independent form (rb_fwd_run) */
    bool pooled;           /* a fixed batch of one row a sequence, all caches of one pool: one op a layer */
    bool fuse;             /* decode-sized: norms, gate and residual adds inside the products */
    bool head_norm_early;  /* the last layer's residual add applies the output norm too (into h) */
    rb_tensor *in;         /* a sublayer's input: the normed x in h, or x itself (olmo2 norms only outputs) */
    rb_rope_params rope;   /* the model's rope (layer_rope: a window layer's own) */
    int il;                /* the layer being queued (-1: none), for messages */
    rb_error *err;
} fwd;

/* An op that failed: its expression and layer in the message. */
#define CK(expr)                                                                                               \
    do {                                                                                                       \
        rb_status s_ = (expr);                                                                                 \
        if (s_ != RB_OK)                                                                                       \
            return rb_error_set(f->err, s_, "%s (layer %d): %s", #expr, f->il, rb_backend_last_error(f->be));  \
    } while (0)
/* A step that failed (it set the message). */
#define TRY(expr)                                                                                              \
    do {                                                                                                       \
        rb_status s_ = (expr);                                                                                 \
        if (s_ != RB_OK) return s_;                                                                            \
    } while (0)

/* The fused decode form applies: norms before the sublayers only, no q/k
 * norms and no experts (none of those has a fused kernel). */
static bool fusable(const rb_model_config *c) {
    return !c->post_norms && c->pre_norms && !c->qk_norm && c->n_expert == 0;
}

static rb_unary_op ffn_act(const rb_model_config *c) { return c->gelu_act ? RB_UNARY_GELU_TANH : RB_UNARY_SILU; }

/* Bytes of one token's row of qkv with one qkv matrix ([q heads | k heads | v heads]). */
static size_t qkv_row_bytes(const rb_model_config *c) {
    return (size_t)((c->n_head + 2 * c->n_head_kv) * c->head_dim) * sizeof(float);
}

/* x = the token embeddings (times sqrt(n_embd): gemma), after queueing the
 * inputs' copy where they were written to host memory. */
static rb_status embed(fwd *f) {
    fwd_bufs *b = &f->b;
    if (b->in_host) CK(rb_buffer_set_queued(b->ids.buf, b->ids.offs, b->in_host, rb_fwd_inputs_span(b)));
    CK(rb_get_rows(f->be, &b->x, &f->m->tok_embd, &b->ids));
    if (f->c->embd_scale) CK(rb_affine(f->be, &b->x, &b->x, (float)sqrt((double)f->c->n_embd), 0.0f));
    return RB_OK;
}

/* x += o, the residual add, fused with the norm of whatever reads x next
 * (into h; norm_w NULL: no norm). */
static rb_status residual_add(fwd *f, const rb_tensor *norm_w) {
    fwd_bufs *b = &f->b;
    if (norm_w) CK(rb_add_rms_norm(f->be, &b->x, &b->o, norm_w, f->c->norm_eps, &b->h));
    else CK(rb_binary(f->be, RB_BINARY_ADD, &b->x, &b->x, &b->o));
    return RB_OK;
}

/* ---- attention block ---- */

/* The layer being queued has one qkv matrix (its q, k and v rows side by
 * side in each token's row of the qkv buffer). */
static bool layer_qkv_one(const fwd *f) { return f->m->layers[f->il].qkv_one; }

/* What a fused decode qkv product (one qkv matrix) does besides the norm. */
typedef struct qkv_fusion {
    bool rope; /* rotates the q and k heads (no bias to add between the product and the rope) */
    bool kv;   /* and, for one sequence in a fixed cache, writes its k and v rows at the positions */
} qkv_fusion;

static qkv_fusion qkv_fusion_of(const fwd *f, const rb_layer_weights *L) {
    const rb_model_config *c = f->c;
    qkv_fusion q = {.rope = L->qkv_one && f->fuse && !L->has_bqkv && !c->has_rope_long};
    q.kv = q.rope && f->fixed && (f->pooled || (f->n_grp == 1 && f->grp[0].row0 == 0 && f->grp[0].n == f->T));
    return q;
}

/* The micro-batch is a fixed step of one row per sequence (row i: group i)
 * whose caches share one pool: their keys and values go to the pool's rows
 * at kvrow, and attention reads the pool's slices at kvslot, one op a layer
 * for the whole batch. */
static bool pooled_batch(const fwd *f) {
    if (!f->fixed || f->n_grp < 2) return false;
    for (int64_t gi = 0; gi < f->n_grp; gi++)
        if (f->grp[gi].kv->pool != f->grp[0].kv->pool || f->grp[gi].n != 1 || f->grp[gi].row0 != gi) return false;
    return true;
}

/* The layer's cache rows as one [2 kv row, n_ctx] view (k and v adjacent). */
static rb_tensor cache_kv_rows(const rb_kv_cache *kv, int il) {
    const int64_t kvrow = kv->m->cfg.head_dim * kv->m->cfg.n_head_kv;
    const size_t kvs = kv->k[il].nb[1];
    return view3(&kv->k[il], 0, 2 * kvrow, kv->n_ctx, 1, kvs, kvs * (size_t)kv->n_ctx);
}

/* The fused decode qkv product: qkv = wqkv rms_norm(x), rotated and stored
 * as qf says (the model's rope). */
static rb_status qkv_fused_product(fwd *f, const rb_layer_weights *L, const qkv_fusion *qf) {
    const rb_model_config *c = f->c;
    fwd_bufs *b = &f->b;
    rb_tensor kvdst = {0};
    if (qf->kv) kvdst = f->pooled ? rb_kv_pool_rows(f->grp[0].kv, f->il) : cache_kv_rows(f->grp[0].kv, f->il);
    const rb_matmul_fusion fu = {.norm = true, .norm_w = &L->attn_norm, .eps = c->norm_eps,
                                 .rope = qf->rope ? &f->rope : NULL, .rope_pos = &b->pos,
                                 .rope_head_dim = c->head_dim, .rope_heads = c->n_head + c->n_head_kv,
                                 .store_dst = qf->kv ? &kvdst : NULL, .store_ids = f->pooled ? &b->kvrow : &b->pos,
                                 .store_row0 = c->n_head * c->head_dim, .tmp_in = &b->h};
    CK(rb_matmul_fused(f->be, &b->qkv, &L->wqkv, &b->x, &fu));
    return RB_OK;
}

/* q [D, Hq, T], k [D, Hkv, T], v [Hkv D, T] of the sublayer input, biases
 * added: from one qkv matrix (each token's row [q | k | v]; in the fused
 * form from x, normed by the product), or from three (q, k, v regions of
 * qkv one after the other). */
static rb_status project_qkv(fwd *f, const rb_layer_weights *L, const qkv_fusion *qf, rb_tensor *q, rb_tensor *k,
                             rb_tensor *v) {
    const rb_model_config *c = f->c;
    fwd_bufs *b = &f->b;
    const int64_t D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv, T = f->T, kvrow = D * Hkv;
    if (L->qkv_one) {
        if (f->fuse) TRY(qkv_fused_product(f, L, qf));
        else CK(rb_matmul(f->be, &b->qkv, &L->wqkv, f->in));
        if (L->has_bqkv) CK(rb_binary(f->be, RB_BINARY_ADD, &b->qkv, &b->qkv, &L->bqkv));
        const size_t row = qkv_row_bytes(c);
        *q = view3(&b->qkv, 0, D, Hq, T, D * sizeof(float), row);
        *k = view3(&b->qkv, (size_t)(Hq * D) * sizeof(float), D, Hkv, T, D * sizeof(float), row);
        *v = view3(&b->qkv, (size_t)((Hq + Hkv) * D) * sizeof(float), kvrow, T, 1, row, row * (size_t)T);
        return RB_OK;
    }
    if (f->fuse) CK(rb_rms_norm(f->be, &b->h, &b->x, &L->attn_norm, c->norm_eps)); /* the input norm, alone */
    rb_tensor q2 = view3(&b->qkv, 0, Hq * D, T, 1, (size_t)(Hq * D) * sizeof(float),
                         (size_t)(Hq * D * T) * sizeof(float));
    rb_tensor k2 = view3(&b->qkv, (size_t)(Hq * D * T) * sizeof(float), kvrow, T, 1, (size_t)kvrow * sizeof(float),
                         (size_t)(kvrow * T) * sizeof(float));
    rb_tensor v2 = view3(&b->qkv, (size_t)((Hq * D + kvrow) * T) * sizeof(float), kvrow, T, 1,
                         (size_t)kvrow * sizeof(float), (size_t)(kvrow * T) * sizeof(float));
    CK(rb_matmul(f->be, &q2, &L->wq, f->in));
    CK(rb_matmul(f->be, &k2, &L->wk, f->in));
    CK(rb_matmul(f->be, &v2, &L->wv, f->in));
    if (L->has_bq) CK(rb_binary(f->be, RB_BINARY_ADD, &q2, &q2, &L->bq));
    if (L->has_bk) CK(rb_binary(f->be, RB_BINARY_ADD, &k2, &k2, &L->bk));
    if (L->has_bv) CK(rb_binary(f->be, RB_BINARY_ADD, &v2, &v2, &L->bv));
    *q = view3(&q2, 0, D, Hq, T, D * sizeof(float), q2.nb[1]);
    *k = view3(&k2, 0, D, Hkv, T, D * sizeof(float), k2.nb[1]);
    *v = v2;
    return RB_OK;
}

/* RMSNorm of q and k before the rope: per head (rows of head_dim) or over
 * each token's whole projection (qk_norm 2, olmo2). q [D, Hq, T], k [D, Hkv, T]. */
static rb_status qk_norm(fwd *f, const rb_layer_weights *L, rb_tensor *q, rb_tensor *k) {
    const rb_model_config *c = f->c;
    if (c->qk_norm == 1) {
        CK(rb_rms_norm(f->be, q, q, &L->q_norm, c->norm_eps));
        CK(rb_rms_norm(f->be, k, k, &L->k_norm, c->norm_eps));
        return RB_OK;
    }
    const int64_t T = f->T;
    rb_tensor qw = view3(q, 0, q->ne[0] * q->ne[1], T, 1, q->nb[2], q->nb[2] * (size_t)T);
    rb_tensor kw = view3(k, 0, k->ne[0] * k->ne[1], T, 1, k->nb[2], k->nb[2] * (size_t)T);
    CK(rb_rms_norm(f->be, &qw, &qw, &L->q_norm, c->norm_eps));
    CK(rb_rms_norm(f->be, &kw, &kw, &L->k_norm, c->norm_eps));
    return RB_OK;
}

/* This layer's rope: window layers may have their own base, unscaled (gemma3). */
static rb_rope_params layer_rope(const fwd *f) {
    rb_rope_params rp = f->rope;
    if (rb_layer_uses_window(f->c, f->il) && f->c->rope_theta_swa > 0) {
        rp.freq_base = f->c->rope_theta_swa;
        rp.freq_scale = 1.0f;
        rp.attn_factor = 1.0f;
        rp.freq_factors = NULL;
    }
    return rp;
}

/* Longrope (transformers' dynamic rule, the model's rope): the long factors
 * for a sequence once its batch reaches past the original context. */
static rb_status rotate_qk_longrope(fwd *f, rb_tensor *q, rb_tensor *k) {
    for (int64_t gi = 0; gi < f->n_grp; gi++) {
        const seq_group *g = &f->grp[gi];
        rb_rope_params rpg = f->rope;
        if (g->p0 + g->n > f->c->rope_orig_ctx) rpg.freq_factors = &f->m->rope_factors_long;
        rb_tensor qs, ks, ps;
        CK(rb_tensor_slice(q, 2, g->row0, g->n, &qs));
        CK(rb_tensor_slice(k, 2, g->row0, g->n, &ks));
        CK(rb_tensor_slice(&f->b.pos, 0, g->row0, g->n, &ps));
        CK(rb_rope(f->be, &qs, &qs, &ps, &rpg));
        CK(rb_rope(f->be, &ks, &ks, &ps, &rpg));
    }
    return RB_OK;
}

/* The rotary embedding of q and k, in place, at each row's position. */
static rb_status rotate_qk(fwd *f, rb_tensor *q, rb_tensor *k) {
    const rb_model_config *c = f->c;
    if (c->has_rope_long) return rotate_qk_longrope(f, q, k);
    const rb_rope_params rp = layer_rope(f);
    if (layer_qkv_one(f)) { /* q and k heads are adjacent in each qkv row: one launch */
        const int64_t D = c->head_dim;
        rb_tensor qk = view3(&f->b.qkv, 0, D, c->n_head + c->n_head_kv, f->T, D * sizeof(float), qkv_row_bytes(c));
        CK(rb_rope(f->be, &qk, &qk, &f->b.pos, &rp));
        return RB_OK;
    }
    CK(rb_rope(f->be, q, q, &f->b.pos, &rp));
    CK(rb_rope(f->be, k, k, &f->b.pos, &rp));
    return RB_OK;
}

/* Appends a sequence's keys and values to its cache: at rows p0.. (cast into
 * the cache's dtype), or in the fixed form at the rows its positions name on
 * the device (ps: its slice of the positions) - one write of both where k
 * and v are adjacent in each qkv row. */
static rb_status append_kv(fwd *f, const seq_group *g, const rb_tensor *ps, const rb_tensor *k, const rb_tensor *v) {
    const rb_model_config *c = f->c;
    rb_kv_cache *kv = g->kv;
    const int il = f->il;
    const int64_t D = c->head_dim, Hkv = c->n_head_kv, kvrow = D * Hkv;
    const size_t kvs = kv->k[il].nb[1]; /* cache row stride (k and v rows interleaved) */
    if (f->fixed && layer_qkv_one(f)) {
        const size_t row = qkv_row_bytes(c);
        rb_tensor kvsrc = view3(&f->b.qkv, (size_t)g->row0 * row + (size_t)(c->n_head * D) * sizeof(float), 2 * kvrow,
                                g->n, 1, row, row * (size_t)g->n);
        rb_tensor kvdst = cache_kv_rows(kv, il);
        CK(rb_set_rows(f->be, &kvdst, &kvsrc, ps));
    } else if (f->fixed) {
        rb_tensor ks = view3(k, (size_t)g->row0 * k->nb[2], kvrow, g->n, 1, k->nb[2], k->nb[2] * (size_t)g->n);
        rb_tensor vs = view3(v, (size_t)g->row0 * v->nb[1], kvrow, g->n, 1, v->nb[1], v->nb[1] * (size_t)g->n);
        CK(rb_set_rows(f->be, &kv->k[il], &ks, ps));
        CK(rb_set_rows(f->be, &kv->v[il], &vs, ps));
    } else {
        const size_t es = rb_dtype_info((int)kv->dtype)->type_size;
        rb_tensor kdst = view3(&kv->k[il], (size_t)g->p0 * kvs, D, Hkv, g->n, D * es, kvs);
        rb_tensor vdst = view3(&kv->v[il], (size_t)g->p0 * kvs, kvrow, g->n, 1, kvs, kvs * (size_t)g->n);
        rb_tensor ksrc, vsrc;
        CK(rb_tensor_slice(k, 2, g->row0, g->n, &ksrc));
        CK(rb_tensor_slice(v, 1, g->row0, g->n, &vsrc));
        CK(rb_cast(f->be, &kdst, &ksrc));
        CK(rb_cast(f->be, &vdst, &vsrc));
    }
    return RB_OK;
}

/* A sequence's rows of att = softmax(scale q k^T + causal / window masks) v
 * over its positions 0..p0+n-1 (fixed: over the whole cache, later rows
 * invisible through q_pos), with the layer's window, soft-cap and sinks. */
static rb_status attend(fwd *f, const rb_layer_weights *L, const seq_group *g, const rb_tensor *ps,
                        const rb_tensor *q) {
    const rb_model_config *c = f->c;
    rb_kv_cache *kv = g->kv;
    const int il = f->il;
    const int64_t D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv;
    const size_t es = rb_dtype_info((int)kv->dtype)->type_size, kvs = kv->k[il].nb[1];
    const int64_t Tk = f->fixed ? kv->n_ctx : g->p0 + g->n;
    rb_tensor qa = view3(q, (size_t)g->row0 * q->nb[2], D, g->n, Hq, q->nb[2], q->nb[1]);
    rb_tensor ka = view3(&kv->k[il], 0, D, Tk, Hkv, kvs, (size_t)D * es);
    rb_tensor va = view3(&kv->v[il], 0, D, Tk, Hkv, kvs, (size_t)D * es);
    rb_tensor ad = view3(&f->b.att, (size_t)(g->row0 * D * Hq) * sizeof(float), D, Hq, g->n, (size_t)D * sizeof(float),
                         (size_t)(D * Hq) * sizeof(float));
    const rb_attn_params ap = {
        .scale = c->attn_scale,
        .softcap = c->attn_softcap,
        .causal = true,
        .window = rb_layer_uses_window(c, il) ? c->sliding_window : 0,
        .q_pos0 = f->fixed ? 0 : g->p0,
        .mask = NULL,
        .q_pos = f->fixed ? ps : NULL,
        .keys_settled = f->fixed, /* this step writes rows at its own positions only */
        .sinks = L->has_sinks ? &L->sinks : NULL,
    };
    CK(rb_attention(f->be, &ad, &qa, &ka, &va, &ap));
    return RB_OK;
}

/* A pooled batch's keys and values into its pool at the rows kvrow names:
 * one write of both where k and v are adjacent in each qkv row. */
static rb_status append_kv_pooled(fwd *f, const rb_tensor *k, const rb_tensor *v) {
    const rb_model_config *c = f->c;
    const int64_t D = c->head_dim, kvrow = D * c->n_head_kv, T = f->T;
    rb_tensor rows = rb_kv_pool_rows(f->grp[0].kv, f->il);
    if (layer_qkv_one(f)) {
        const size_t row = qkv_row_bytes(c);
        rb_tensor kvsrc =
            view3(&f->b.qkv, (size_t)(c->n_head * D) * sizeof(float), 2 * kvrow, T, 1, row, row * (size_t)T);
        CK(rb_set_rows(f->be, &rows, &kvsrc, &f->b.kvrow));
        return RB_OK;
    }
    const size_t rs = rows.nb[1], half = rb_dtype_row_size(rows.dtype, kvrow);
    rb_tensor kd = view3(&rows, 0, kvrow, rows.ne[1], 1, rs, rs * (size_t)rows.ne[1]);
    rb_tensor vd = view3(&rows, half, kvrow, rows.ne[1], 1, rs, rs * (size_t)rows.ne[1]);
    rb_tensor ks = view3(k, 0, kvrow, T, 1, k->nb[2], k->nb[2] * (size_t)T);
    rb_tensor vs = view3(v, 0, kvrow, T, 1, v->nb[1], v->nb[1] * (size_t)T);
    CK(rb_set_rows(f->be, &kd, &ks, &f->b.kvrow));
    CK(rb_set_rows(f->be, &vd, &vs, &f->b.kvrow));
    return RB_OK;
}

/* attend() for a whole pooled batch in one op: batch item i is row i's
 * query, at position pos[i], over its cache's slice kvslot[i] of the pool. */
static rb_status attend_pooled(fwd *f, const rb_layer_weights *L, const rb_tensor *q) {
    const rb_model_config *c = f->c;
    const rb_kv_cache *kv0 = f->grp[0].kv;
    const int il = f->il;
    const int64_t D = c->head_dim, Hq = c->n_head, T = f->T;
    rb_tensor qa = view3(q, 0, D, 1, Hq, q->nb[2], q->nb[1]);
    qa.ne[3] = T;
    qa.nb[3] = q->nb[2];
    rb_tensor ad = view3(&f->b.att, 0, D, Hq, 1, (size_t)D * sizeof(float), (size_t)(D * Hq) * sizeof(float));
    ad.ne[3] = T;
    ad.nb[3] = (size_t)(D * Hq) * sizeof(float);
    rb_tensor qp = view3(&f->b.pos, 0, 1, T, 1, sizeof(int32_t), sizeof(int32_t) * (size_t)T);
    const rb_tensor ka = rb_kv_pool_heads(kv0, il, false), va = rb_kv_pool_heads(kv0, il, true);
    const rb_attn_params ap = {
        .scale = c->attn_scale,
        .softcap = c->attn_softcap,
        .causal = true,
        .window = rb_layer_uses_window(c, il) ? c->sliding_window : 0,
        .q_pos = &qp,
        .kv_index = &f->b.kvslot,
        .keys_settled = true, /* this step writes rows at its own positions only */
        .sinks = L->has_sinks ? &L->sinks : NULL,
    };
    CK(rb_attention(f->be, &ad, &qa, &ka, &va, &ap));
    return RB_OK;
}

/* x += wo att (+ bo): in the fused form inside the product; else o = wo att,
 * normed after the sublayer where the model does (gemma2, olmo2), added to x
 * together with the feed-forward block's input norm. */
static rb_status attention_output(fwd *f, const rb_layer_weights *L) {
    const rb_model_config *c = f->c;
    fwd_bufs *b = &f->b;
    const int64_t HD = c->n_head * c->head_dim;
    rb_tensor att2 = view3(&b->att, 0, HD, f->T, 1, (size_t)HD * sizeof(float), (size_t)(HD * f->T) * sizeof(float));
    if (f->fuse) {
        const rb_matmul_fusion fu = {.accumulate = true, .tmp_out = &b->o};
        CK(rb_matmul_fused(f->be, &b->x, &L->wo, &att2, &fu));
        if (L->has_bo) CK(rb_binary(f->be, RB_BINARY_ADD, &b->x, &b->x, &L->bo));
        return RB_OK;
    }
    CK(rb_matmul(f->be, &b->o, &L->wo, &att2));
    if (L->has_bo) CK(rb_binary(f->be, RB_BINARY_ADD, &b->o, &b->o, &L->bo));
    if (c->post_norms) CK(rb_rms_norm(f->be, &b->o, &b->o, &L->post_attn_norm, c->norm_eps));
    return residual_add(f, c->pre_norms ? &L->ffn_norm : NULL);
}

/* Self-attention of layer f->il over each sequence's cache:
 *   q, k, v = projections of the normed x (h), biases added
 *   q, k    = rms_norm (qwen3, gemma3, olmo2), then rotated at the positions
 *   cache  += k, v (each sequence's own)
 *   att     = attention(q, cache) per sequence (a pooled batch: all at once)
 *   x      += wo att; h = the feed-forward block's norm of x */
static rb_status attention_block(fwd *f) {
    const rb_layer_weights *L = &f->m->layers[f->il];
    const qkv_fusion qf = qkv_fusion_of(f, L);
    rb_tensor q, k, v;
    TRY(project_qkv(f, L, &qf, &q, &k, &v));
    if (L->has_qk_norm) TRY(qk_norm(f, L, &q, &k));
    if (!qf.rope) TRY(rotate_qk(f, &q, &k));
    if (f->pooled) {
        if (!qf.kv) TRY(append_kv_pooled(f, &k, &v));
        TRY(attend_pooled(f, L, &q));
        return attention_output(f, L);
    }
    for (int64_t gi = 0; gi < f->n_grp; gi++) {
        const seq_group *g = &f->grp[gi];
        rb_tensor ps;
        CK(rb_tensor_slice(&f->b.pos, 0, g->row0, g->n, &ps));
        if (!qf.kv) TRY(append_kv(f, g, &ps, &k, &v));
        TRY(attend(f, L, g, &ps, &q));
    }
    return attention_output(f, L);
}

/* ---- feed-forward block ---- */

/* A mixture-of-experts feed-forward of in [H, T] into out [H, T]: route
 * (softmax then top-k, optionally renormalized; or gpt-oss's softmax over
 * the top-k logits), run the selected experts' gated MLPs grouped per expert
 * (rb_matmul_id), weight and sum their outputs. */
static rb_status moe_ffn(fwd *f, const rb_layer_weights *L, const rb_tensor *in, rb_tensor *out) {
    const rb_model_config *c = f->c;
    const fwd_bufs *b = &f->b;
    rb_backend *be = f->be;
    const int64_t E = c->n_expert, K = c->n_expert_used, F = c->n_ff_exp, H = c->n_embd, T = f->T;
    rb_tensor rl = view3(&b->rl, 0, E, T, 1, (size_t)E * sizeof(float), (size_t)(E * T) * sizeof(float));
    rb_tensor tw = view3(&b->tw, 0, K, T, 1, (size_t)K * sizeof(float), (size_t)(K * T) * sizeof(float));
    rb_tensor ti = view3(&b->ti, 0, K, T, 1, (size_t)K * sizeof(int32_t), (size_t)(K * T) * sizeof(int32_t));
    CK(rb_matmul(be, &rl, &L->router, in));
    if (L->has_exp_bias) CK(rb_binary(be, RB_BINARY_ADD, &rl, &rl, &L->router_b));
    if (c->moe_topk_softmax) {
        CK(rb_topk(be, &tw, &ti, &rl, (int)K));
        CK(rb_softmax(be, &tw, &tw, NULL, 1.0f));
    } else {
        CK(rb_softmax(be, &rl, &rl, NULL, 1.0f));
        CK(rb_topk(be, &tw, &ti, &rl, (int)K));
        if (c->moe_norm_topk) {
            rb_tensor ws = view3(&b->es, 0, 1, T, 1, sizeof(float), (size_t)T * sizeof(float));
            CK(rb_reduce(be, RB_REDUCE_SUM, &ws, &tw));
            CK(rb_binary(be, RB_BINARY_DIV, &tw, &tw, &ws));
        }
    }
    const size_t fs = sizeof(float);
    rb_tensor x3 = view3(in, 0, H, 1, T, in->nb[1], in->nb[1]);
    rb_tensor eg = view3(&b->eg, 0, F, K, T, (size_t)F * fs, (size_t)(F * K) * fs);
    rb_tensor eu = view3(&b->eu, 0, F, K, T, (size_t)F * fs, (size_t)(F * K) * fs);
    rb_tensor ey = view3(&b->ey, 0, H, K, T, (size_t)H * fs, (size_t)(H * K) * fs);
    rb_tensor ids1 = view3(&ti, 0, K * T, 1, 1, (size_t)(K * T) * sizeof(int32_t), (size_t)(K * T) * sizeof(int32_t));
    CK(rb_matmul_id(be, &eg, &L->gate_exps, &x3, &ti));
    CK(rb_matmul_id(be, &eu, &L->up_exps, &x3, &ti));
    if (L->has_exp_bias) { /* each slot's expert bias, gathered by id */
        rb_tensor gb = view3(&b->eb, 0, F, K * T, 1, (size_t)F * fs, (size_t)(F * K * T) * fs);
        rb_tensor eg2 = view3(&eg, 0, F, K * T, 1, (size_t)F * fs, (size_t)(F * K * T) * fs);
        rb_tensor eu2 = view3(&eu, 0, F, K * T, 1, (size_t)F * fs, (size_t)(F * K * T) * fs);
        CK(rb_get_rows(be, &gb, &L->gate_exps_b, &ids1));
        CK(rb_binary(be, RB_BINARY_ADD, &eg2, &eg2, &gb));
        CK(rb_get_rows(be, &gb, &L->up_exps_b, &ids1));
        CK(rb_binary(be, RB_BINARY_ADD, &eu2, &eu2, &gb));
    }
    if (c->swiglu_limit > 0) CK(rb_swiglu_clamp(be, &eg, &eg, &eu, c->swiglu_alpha, c->swiglu_limit));
    else CK(rb_glu(be, &eg, &eg, &eu, ffn_act(c)));
    CK(rb_matmul_id(be, &ey, &L->down_exps, &eg, &ti));
    if (L->has_exp_bias) {
        rb_tensor db = view3(&b->eb, 0, H, K * T, 1, (size_t)H * fs, (size_t)(H * K * T) * fs);
        rb_tensor ey2 = view3(&ey, 0, H, K * T, 1, (size_t)H * fs, (size_t)(H * K * T) * fs);
        CK(rb_get_rows(be, &db, &L->down_exps_b, &ids1));
        CK(rb_binary(be, RB_BINARY_ADD, &ey2, &ey2, &db));
    }
    rb_tensor w3 = view3(&tw, 0, 1, K, T, (size_t)fs, (size_t)K * fs);
    CK(rb_binary(be, RB_BINARY_MUL, &ey, &ey, &w3));
    /* sum over the k slots: reduce a [k, H, T] view into out seen as [1, H, T] */
    rb_tensor yp = view3(&ey, 0, K, H, T, fs, (size_t)(H * K) * fs);
    yp.nb[0] = (size_t)H * fs;
    rb_tensor o1 = view3(out, 0, 1, H, T, fs, out->nb[1]);
    CK(rb_reduce(be, RB_REDUCE_SUM, &o1, &yp));
    return RB_OK;
}

/* The gated MLP from one gate_up matrix (each token's row [gate | up]):
 * fused, the product norms x and writes act(gate) * up, and the down
 * product adds to x; else o = w_down (act(gate) * up) of the input. */
static rb_status ffn_gate_up_matrix(fwd *f, const rb_layer_weights *L) {
    const rb_model_config *c = f->c;
    fwd_bufs *b = &f->b;
    const int64_t F = c->n_ff, T = f->T;
    if (f->fuse) {
        const rb_matmul_fusion fu = {.norm = true, .norm_w = &L->ffn_norm, .eps = c->norm_eps,
                                     .glu_out = true, .act = ffn_act(c), .tmp_in = &b->h, .tmp_out = &b->g};
        CK(rb_matmul_fused(f->be, &b->u, &L->w_gate_up, &b->x, &fu));
        const rb_matmul_fusion fd = {.accumulate = true, .tmp_out = &b->o};
        CK(rb_matmul_fused(f->be, &b->x, &L->w_down, &b->u, &fd));
        return RB_OK;
    }
    CK(rb_matmul(f->be, &b->g, &L->w_gate_up, f->in));
    rb_tensor gate = view3(&b->g, 0, F, T, 1, (size_t)(2 * F) * sizeof(float), (size_t)(2 * F * T) * sizeof(float));
    rb_tensor up = view3(&b->g, (size_t)F * sizeof(float), F, T, 1, (size_t)(2 * F) * sizeof(float),
                         (size_t)(2 * F * T) * sizeof(float));
    CK(rb_glu(f->be, &b->u, &gate, &up, ffn_act(c)));
    CK(rb_matmul(f->be, &b->o, &L->w_down, &b->u));
    return RB_OK;
}

/* The gated MLP from separate gate and up matrices: act(w_gate in) * w_up in,
 * then w_down of it into o (fused: the norm alone first, and the down
 * product adds to x). */
static rb_status ffn_gate_up_separate(fwd *f, const rb_layer_weights *L) {
    const rb_model_config *c = f->c;
    fwd_bufs *b = &f->b;
    const int64_t F = c->n_ff, T = f->T;
    rb_tensor g1 = view3(&b->g, 0, F, T, 1, (size_t)F * sizeof(float), (size_t)(F * T) * sizeof(float));
    if (f->fuse) CK(rb_rms_norm(f->be, &b->h, &b->x, &L->ffn_norm, c->norm_eps));
    CK(rb_matmul(f->be, &g1, &L->w_gate, f->in));
    CK(rb_matmul(f->be, &b->u, &L->w_up, f->in));
    CK(rb_glu(f->be, &g1, &g1, &b->u, ffn_act(c)));
    if (f->fuse) {
        const rb_matmul_fusion fu = {.accumulate = true, .tmp_out = &b->o};
        CK(rb_matmul_fused(f->be, &b->x, &L->w_down, &g1, &fu));
    } else {
        CK(rb_matmul(f->be, &b->o, &L->w_down, &g1));
    }
    return RB_OK;
}

/* The feed-forward block of layer f->il:
 *   o  = w_down (act(w_gate h) * w_up h), or the routed experts' sum
 *   x += o; h = the next layer's attention norm of x (the last layer: the
 *        output norm, where the head reads every row or the only one) */
static rb_status ffn_block(fwd *f) {
    const rb_model_config *c = f->c;
    const rb_layer_weights *L = &f->m->layers[f->il];
    if (L->moe) TRY(moe_ffn(f, L, f->in, &f->b.o)); /* never fused: see fusable */
    else if (c->fused_gate_up) TRY(ffn_gate_up_matrix(f, L));
    else TRY(ffn_gate_up_separate(f, L));
    if (f->fuse) return RB_OK; /* the residual add was the down product's */
    if (c->post_norms) CK(rb_rms_norm(f->be, &f->b.o, &f->b.o, &L->post_ffn_norm, c->norm_eps));
    const bool last = f->il + 1 == c->n_layer;
    if (!last) return residual_add(f, c->pre_norms ? &f->m->layers[f->il + 1].attn_norm : NULL);
    return residual_add(f, f->head_norm_early ? &f->m->out_norm : NULL);
}

/* ---- output head ---- */

/* logits = output rms_norm(x) of every row or the last one (fused: the
 * norm inside the product), soft-capped where the model does (gemma2). */
static rb_status output_head(fwd *f, bool all_logits, rb_fwd_head head) {
    const rb_model_config *c = f->c;
    fwd_bufs *b = &f->b;
    const int64_t E = c->n_embd;
    rb_tensor hout = b->h, xin = b->x, logits = b->logits;
    if (head == RB_FWD_HEAD_GROUP_LAST) { /* each group's last row of x, gathered into o */
        const int64_t G = f->n_grp;
        const size_t rs = (size_t)E * sizeof(float);
        rb_tensor ids = view3(&b->lastrow, 0, G, 1, 1, sizeof(int32_t) * (size_t)G, sizeof(int32_t) * (size_t)G);
        xin = view3(&b->o, 0, E, G, 1, rs, rs * (size_t)G);
        hout = view3(&b->h, 0, E, G, 1, rs, rs * (size_t)G);
        logits = view3(&b->logits, 0, c->n_vocab, G, 1, b->logits.nb[1], b->logits.nb[1] * (size_t)G);
        CK(rb_get_rows(f->be, &xin, &b->x, &ids));
    } else if (!all_logits) {
        hout = view3(&b->h, 0, E, 1, 1, (size_t)E * sizeof(float), (size_t)E * sizeof(float));
        xin = view3(&b->x, (size_t)((f->T - 1) * E) * sizeof(float), E, 1, 1, (size_t)E * sizeof(float),
                    (size_t)E * sizeof(float));
    }
    if (f->fuse) {
        const rb_matmul_fusion fu = {.norm = true, .norm_w = &f->m->out_norm, .eps = c->norm_eps, .tmp_in = &hout};
        CK(rb_matmul_fused(f->be, &logits, &f->m->output, &xin, &fu));
    } else {
        if (!f->head_norm_early) CK(rb_rms_norm(f->be, &hout, &xin, &f->m->out_norm, c->norm_eps));
        CK(rb_matmul(f->be, &logits, &f->m->output, &hout));
    }
    if (c->final_softcap > 0) {
        CK(rb_affine(f->be, &logits, &logits, 1.0f / c->final_softcap, 0.0f));
        CK(rb_unary(f->be, RB_UNARY_TANH, &logits, &logits));
        CK(rb_affine(f->be, &logits, &logits, c->final_softcap, 0.0f));
    }
    return RB_OK;
}

/* ---- the pass ---- */

rb_status rb_fwd_run(rb_model *m, const fwd_bufs *bufs, int64_t T, const seq_group *grp, int64_t n_grp,
                     bool all_logits, rb_fwd_head head, bool fixed, rb_error *err) {
    const rb_model_config *c = &m->cfg;
    fwd pass = {
        .m = m, .c = c, .be = m->be, .b = *bufs, .T = T, .grp = grp, .n_grp = n_grp, .fixed = fixed,
        .fuse = T <= RB_FUSE_ROWS && fusable(c), .il = -1, .err = err,
        .rope = {.n_rot = c->n_rot, .mode = c->rope_mode, .freq_base = c->rope_theta,
                 .freq_scale = c->rope_freq_scale, .attn_factor = c->rope_attn_factor,
                 .freq_factors = c->has_rope_factors ? &m->rope_factors : NULL},
    };
    fwd *f = &pass;
    f->pooled = pooled_batch(f);
    f->head_norm_early = !f->fuse && head != RB_FWD_HEAD_NONE && head != RB_FWD_HEAD_GROUP_LAST && (all_logits || T == 1);
    f->in = c->pre_norms ? &f->b.h : &f->b.x;

    TRY(embed(f));
    f->il = 0;
    if (!f->fuse && c->pre_norms) /* the first attention norm; later ones come with the residual adds */
        CK(rb_rms_norm(f->be, &f->b.h, &f->b.x, &m->layers[0].attn_norm, c->norm_eps));
    for (f->il = 0; f->il < c->n_layer; f->il++) {
        TRY(attention_block(f));
        TRY(ffn_block(f));
    }
    f->il = -1;
    if (head == RB_FWD_HEAD_NONE) return RB_OK; /* an inner micro-batch of a longer prompt */
    if (head == RB_FWD_HEAD_HIDDEN) { /* every row's output norm, unless the last residual add applied it */
        if (!f->head_norm_early) CK(rb_rms_norm(f->be, &f->b.h, &f->b.x, &m->out_norm, c->norm_eps));
        return RB_OK;
    }
    return output_head(f, all_logits, head);
}

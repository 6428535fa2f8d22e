/* The forward pass shared by every supported architecture: embeddings, then
 * per layer attention (rope, KV-cache write, grouped-query attention with
 * optional sliding window and soft-capping) and gated MLP, then the output
 * head. Written only against ops.h, so it runs on any backend. Activations
 * live in a per-sequence arena sized for one micro-batch. Decode-sized
 * micro-batches fold norms, gate and residual adds into the projections,
 * and the rope and KV-cache write into the qkv projection (rb_matmul_fused:
 * 5 instead of 11 ops a layer where a backend fuses them).
 *
 * One-token decode on a backend with graphs runs "position-independent":
 * the position is only read on the device (rope's pos tensor, KV rows
 * written at that position by rb_set_rows or the qkv projection's store,
 * attention over the whole cache
 * with q_pos), so every step queues the same ops on the same memory. The
 * first such step runs eagerly (it also sizes the backend's scratch), the
 * second is captured into a graph kept in the KV cache, and later steps only
 * write token and position into host memory of the backend's (kv->in_host),
 * replay the graph, which fetches them itself (rb_buffer_set_queued: no
 * separate upload before the launch; 1B q4_0 tg128 +2%), and read the logits. The
 * graph is rebuilt when the arena is reallocated and freed with the cache.
 * Longrope models (factors chosen by position) stay eager; RBEE_NO_GRAPH=1
 * keeps the per-step shapes of before, for comparison. */
#include "models/kv_cache_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RB_MAX_UBATCH 512
/* Micro-batches of at most this many rows (decode) run the norms, the gate
 * and the residual adds inside the projections (rb_matmul_fused): on a GPU
 * each separate op over a few rows costs a kernel launch and its gap. */
#define RB_FUSE_ROWS 4

/* q and k are rotated in place in qkv (no separate roped copies). */
typedef struct fwd_bufs {
    rb_tensor ids, pos, x, h, qkv, att, o, g, u, logits;
    /* mixture of experts: router logits [E, T], top-k weights and ids [k, T],
     * gate/up [F, k, T], down [H, k, T], gathered biases [max(F, H), k T], sums [1, T] */
    rb_tensor rl, tw, ti, eg, eu, ey, eb, es;
    /* non-NULL: ids and pos are written here (host memory of
     * rb_backend_host_alloc) and run_ops queues their copy as its first op */
    void *in_host;
} fwd_bufs;

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Bytes from the ids to the end of the positions: what one copy fills. */
static size_t inputs_span(const fwd_bufs *b) { return b->pos.offs + rb_tensor_nbytes_contig(&b->pos) - b->ids.offs; }

/* Lays out every activation tensor of a T-token micro-batch at offsets of
 * buf (NULL: only computes the total size). ids and pos come first and next
 * to each other: one upload fills both. */
static size_t layout(const rb_model_config *c, int64_t T, bool all_logits, rb_buffer *buf, fwd_bufs *fb) {
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

static rb_status ensure_arena(rb_kv_cache *kv, int64_t T, rb_error *err) {
    const rb_model_config *c = &kv->m->cfg;
    size_t need = layout(c, T, true, NULL, NULL);
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
    layout(c, T, true, kv->arena, &b);
    kv->in_host = rb_backend_host_alloc(kv->m->be, inputs_span(&b)); /* NULL: uploaded before each step */
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

/* Token ids and positions of the micro-batch into the arena, in one copy
 * (with b->in_host: written there, for run_ops to queue the copy). */
static rb_status upload_inputs(rb_backend *be, const fwd_bufs *b, const int32_t *tokens, int64_t T,
                               const seq_group *grp, int64_t n_grp, rb_error *err) {
    const size_t lo = b->ids.offs, pos_at = b->pos.offs - lo, n = inputs_span(b);
    char *tmp = b->in_host ? memset(b->in_host, 0, n) : calloc(1, n);
    if (!tmp) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    memcpy(tmp, tokens, sizeof(int32_t) * (size_t)T);
    for (int64_t gi = 0; gi < n_grp; gi++)
        for (int64_t i = 0; i < grp[gi].n; i++) {
            const int32_t p = (int32_t)(grp[gi].p0 + i);
            memcpy(tmp + pos_at + sizeof(int32_t) * (size_t)(grp[gi].row0 + i), &p, sizeof p);
        }
    if (b->in_host) return RB_OK;
    rb_status s = rb_buffer_set(b->ids.buf, lo, tmp, n);
    free(tmp);
    if (s != RB_OK) return rb_error_set(err, s, "cannot upload token ids and positions: %s", rb_backend_last_error(be));
    return RB_OK;
}

#define CKM(expr)                                                                                              \
    do {                                                                                                       \
        rb_status s_ = (expr);                                                                                 \
        if (s_ != RB_OK)                                                                                       \
            return rb_error_set(err, s_, "%s (layer %d): %s", #expr, il, rb_backend_last_error(be));           \
    } while (0)

/* RMSNorm of q and k before the rope: per head (rows of head_dim) or over
 * each token's whole projection (qk_norm 2, olmo2). q [D, Hq, T], k [D, Hkv, T]. */
static rb_status qk_norm(rb_backend *be, const rb_model_config *c, const rb_layer_weights *L, rb_tensor *q,
                         rb_tensor *k, int64_t T, int il, rb_error *err) {
    if (c->qk_norm == 1) {
        CKM(rb_rms_norm(be, q, q, &L->q_norm, c->norm_eps));
        CKM(rb_rms_norm(be, k, k, &L->k_norm, c->norm_eps));
        return RB_OK;
    }
    rb_tensor qw = view3(q, 0, q->ne[0] * q->ne[1], T, 1, q->nb[2], q->nb[2] * (size_t)T);
    rb_tensor kw = view3(k, 0, k->ne[0] * k->ne[1], T, 1, k->nb[2], k->nb[2] * (size_t)T);
    CKM(rb_rms_norm(be, &qw, &qw, &L->q_norm, c->norm_eps));
    CKM(rb_rms_norm(be, &kw, &kw, &L->k_norm, c->norm_eps));
    return RB_OK;
}

/* A mixture-of-experts feed-forward of in [H, T] into out [H, T]: route
 * (softmax then top-k, optionally renormalized; or gpt-oss's softmax over
 * the top-k logits), run the selected experts' gated MLPs grouped per expert
 * (rb_matmul_id), weight and sum their outputs. */
static rb_status moe_ffn(rb_backend *be, const rb_model_config *c, const rb_layer_weights *L, const fwd_bufs *b,
                         const rb_tensor *in, rb_tensor *out, int64_t T, int il, rb_error *err) {
    const int64_t E = c->n_expert, K = c->n_expert_used, F = c->n_ff_exp, H = c->n_embd;
    rb_tensor rl = view3(&b->rl, 0, E, T, 1, (size_t)E * sizeof(float), (size_t)(E * T) * sizeof(float));
    rb_tensor tw = view3(&b->tw, 0, K, T, 1, (size_t)K * sizeof(float), (size_t)(K * T) * sizeof(float));
    rb_tensor ti = view3(&b->ti, 0, K, T, 1, (size_t)K * sizeof(int32_t), (size_t)(K * T) * sizeof(int32_t));
    CKM(rb_matmul(be, &rl, &L->router, in));
    if (L->has_exp_bias) CKM(rb_binary(be, RB_BINARY_ADD, &rl, &rl, &L->router_b));
    if (c->moe_topk_softmax) {
        CKM(rb_topk(be, &tw, &ti, &rl, (int)K));
        CKM(rb_softmax(be, &tw, &tw, NULL, 1.0f));
    } else {
        CKM(rb_softmax(be, &rl, &rl, NULL, 1.0f));
        CKM(rb_topk(be, &tw, &ti, &rl, (int)K));
        if (c->moe_norm_topk) {
            rb_tensor ws = view3(&b->es, 0, 1, T, 1, sizeof(float), (size_t)T * sizeof(float));
            CKM(rb_reduce(be, RB_REDUCE_SUM, &ws, &tw));
            CKM(rb_binary(be, RB_BINARY_DIV, &tw, &tw, &ws));
        }
    }
    const size_t fs = sizeof(float);
    rb_tensor x3 = view3(in, 0, H, 1, T, in->nb[1], in->nb[1]);
    rb_tensor eg = view3(&b->eg, 0, F, K, T, (size_t)F * fs, (size_t)(F * K) * fs);
    rb_tensor eu = view3(&b->eu, 0, F, K, T, (size_t)F * fs, (size_t)(F * K) * fs);
    rb_tensor ey = view3(&b->ey, 0, H, K, T, (size_t)H * fs, (size_t)(H * K) * fs);
    rb_tensor ids1 = view3(&ti, 0, K * T, 1, 1, (size_t)(K * T) * sizeof(int32_t), (size_t)(K * T) * sizeof(int32_t));
    CKM(rb_matmul_id(be, &eg, &L->gate_exps, &x3, &ti));
    CKM(rb_matmul_id(be, &eu, &L->up_exps, &x3, &ti));
    if (L->has_exp_bias) { /* each slot's expert bias, gathered by id */
        rb_tensor gb = view3(&b->eb, 0, F, K * T, 1, (size_t)F * fs, (size_t)(F * K * T) * fs);
        rb_tensor eg2 = view3(&eg, 0, F, K * T, 1, (size_t)F * fs, (size_t)(F * K * T) * fs);
        rb_tensor eu2 = view3(&eu, 0, F, K * T, 1, (size_t)F * fs, (size_t)(F * K * T) * fs);
        CKM(rb_get_rows(be, &gb, &L->gate_exps_b, &ids1));
        CKM(rb_binary(be, RB_BINARY_ADD, &eg2, &eg2, &gb));
        CKM(rb_get_rows(be, &gb, &L->up_exps_b, &ids1));
        CKM(rb_binary(be, RB_BINARY_ADD, &eu2, &eu2, &gb));
    }
    if (c->swiglu_limit > 0) CKM(rb_swiglu_clamp(be, &eg, &eg, &eu, c->swiglu_alpha, c->swiglu_limit));
    else CKM(rb_glu(be, &eg, &eg, &eu, c->gelu_act ? RB_UNARY_GELU_TANH : RB_UNARY_SILU));
    CKM(rb_matmul_id(be, &ey, &L->down_exps, &eg, &ti));
    if (L->has_exp_bias) {
        rb_tensor db = view3(&b->eb, 0, H, K * T, 1, (size_t)H * fs, (size_t)(H * K * T) * fs);
        rb_tensor ey2 = view3(&ey, 0, H, K * T, 1, (size_t)H * fs, (size_t)(H * K * T) * fs);
        CKM(rb_get_rows(be, &db, &L->down_exps_b, &ids1));
        CKM(rb_binary(be, RB_BINARY_ADD, &ey2, &ey2, &db));
    }
    rb_tensor w3 = view3(&tw, 0, 1, K, T, (size_t)fs, (size_t)K * fs);
    CKM(rb_binary(be, RB_BINARY_MUL, &ey, &ey, &w3));
    /* sum over the k slots: reduce a [k, H, T] view into out seen as [1, H, T] */
    rb_tensor yp = view3(&ey, 0, K, H, T, fs, (size_t)(H * K) * fs);
    yp.nb[0] = (size_t)H * fs;
    rb_tensor o1 = view3(out, 0, 1, H, T, fs, out->nb[1]);
    CKM(rb_reduce(be, RB_REDUCE_SUM, &o1, &yp));
    return RB_OK;
}

/* What a micro-batch ends with: nothing (an inner micro-batch of a longer
 * prompt), the logits, or the normed final hidden states of every row in h. */
typedef enum fwd_head { HEAD_NONE = 0, HEAD_LOGITS, HEAD_HIDDEN } fwd_head;

/* Queues every op of a micro-batch whose inputs are uploaded, up to what
 * head asks for on the device. fixed: the position-independent
 * form (KV rows written at b->pos, attention over each whole cache with
 * q_pos), so the queued ops do not depend on the positions. */
static rb_status run_ops(rb_model *m, const fwd_bufs *bufs, int64_t T, const seq_group *grp, int64_t n_grp,
                         bool all_logits, fwd_head head, bool fixed, rb_error *err) {
    const rb_model_config *c = &m->cfg;
    rb_backend *be = m->be;
    const int64_t E = c->n_embd, D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv, F = c->n_ff;
    int il = -1;
    fwd_bufs b = *bufs;

    if (b.in_host) CK(rb_buffer_set_queued(b.ids.buf, b.ids.offs, b.in_host, inputs_span(&b)));
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
    bool out_normed = false; /* the last layer's residual add also applied the output norm */
    /* fused: x is the residual stream at each layer's start (not yet
     * normed: the projections norm it as they read it), and every residual
     * add happens inside the projection that produces it. Else h holds the
     * normed x at each layer's start. */
    const bool fuse = T <= RB_FUSE_ROWS && !c->post_norms && c->pre_norms && !c->qk_norm && c->n_expert == 0;
    /* the sublayers' input: the normed x in h, or x itself (olmo2 norms only sublayer outputs) */
    rb_tensor *ain = c->pre_norms ? &b.h : &b.x;

    il = 0;
    if (!fuse && c->pre_norms) CK(rb_rms_norm(be, &b.h, &b.x, &m->layers[0].attn_norm, c->norm_eps));
    for (il = 0; il < c->n_layer; il++) {
        const rb_layer_weights *L = &m->layers[il];

        /* projections into the qkv region */
        rb_tensor q, k, v;
        /* fused decode: the qkv projection also rotates the q and k heads
         * (no bias to add between the product and the rope) */
        const bool rope_in_qkv = c->fused_qkv && fuse && !L->has_bqkv && !c->has_rope_long;
        /* ... and, for one sequence in a fixed cache, writes its k and v rows
         * into the cache (rows past the q heads, at the positions) */
        const bool kv_in_qkv = rope_in_qkv && fixed && n_grp == 1 && grp[0].row0 == 0 && grp[0].n == T;
        if (c->fused_qkv && fuse) {
            rb_tensor kvdst = {0};
            if (kv_in_qkv) {
                const rb_kv_cache *kv = grp[0].kv;
                const size_t kvs = kv->k[il].nb[1];
                kvdst = view3(&kv->k[il], 0, 2 * kvrow, kv->n_ctx, 1, kvs, kvs * (size_t)kv->n_ctx);
            }
            const rb_matmul_fusion fu = {.norm = true, .norm_w = &L->attn_norm, .eps = c->norm_eps,
                                         .rope = rope_in_qkv ? &rp : NULL, .rope_pos = &b.pos,
                                         .rope_head_dim = D, .rope_heads = Hq + Hkv,
                                         .store_dst = kv_in_qkv ? &kvdst : NULL, .store_ids = &b.pos,
                                         .store_row0 = Hq * D, .tmp_in = &b.h};
            CK(rb_matmul_fused(be, &b.qkv, &L->wqkv, &b.x, &fu));
        } else if (fuse) {
            CK(rb_rms_norm(be, &b.h, &b.x, &L->attn_norm, c->norm_eps));
        }
        if (c->fused_qkv) {
            if (!fuse) CK(rb_matmul(be, &b.qkv, &L->wqkv, ain));
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
            CK(rb_matmul(be, &q2, &L->wq, ain));
            CK(rb_matmul(be, &k2, &L->wk, ain));
            CK(rb_matmul(be, &v2, &L->wv, ain));
            if (L->has_bq) CK(rb_binary(be, RB_BINARY_ADD, &q2, &q2, &L->bq));
            if (L->has_bk) CK(rb_binary(be, RB_BINARY_ADD, &k2, &k2, &L->bk));
            if (L->has_bv) CK(rb_binary(be, RB_BINARY_ADD, &v2, &v2, &L->bv));
            q = view3(&q2, 0, D, Hq, T, D * sizeof(float), q2.nb[1]);
            k = view3(&k2, 0, D, Hkv, T, D * sizeof(float), k2.nb[1]);
            v = v2;
        }
        if (L->has_qk_norm) {
            rb_status sq = qk_norm(be, c, L, &q, &k, T, il, err);
            if (sq != RB_OK) return sq;
        }
        /* this layer's rope: window layers may have their own base, unscaled (gemma3) */
        const bool swa = rb_layer_uses_window(c, il);
        rb_rope_params rpl = rp;
        if (swa && c->rope_theta_swa > 0) {
            rpl.freq_base = c->rope_theta_swa;
            rpl.freq_scale = 1.0f;
            rpl.attn_factor = 1.0f;
            rpl.freq_factors = NULL;
        }
        /* rotary embedding, in place */
        if (rope_in_qkv) {
            /* done by the projection */
        } else if (!c->has_rope_long) {
            if (c->fused_qkv) { /* q and k heads are adjacent in each qkv row: one launch */
                rb_tensor qk = view3(&b.qkv, 0, D, Hq + Hkv, T, D * sizeof(float), qkv_row);
                CK(rb_rope(be, &qk, &qk, &b.pos, &rpl));
            } else {
                CK(rb_rope(be, &q, &q, &b.pos, &rpl));
                CK(rb_rope(be, &k, &k, &b.pos, &rpl));
            }
        } else { /* longrope (transformers' dynamic rule): long factors once a
                  * sequence's batch reaches past the original context */
            for (int64_t gi = 0; gi < n_grp; gi++) {
                const seq_group *g = &grp[gi];
                rb_rope_params rpg = rp;
                if (g->p0 + g->n > c->rope_orig_ctx) rpg.freq_factors = &m->rope_factors_long;
                rb_tensor qs, ks, ps;
                CK(rb_tensor_slice(&q, 2, g->row0, g->n, &qs));
                CK(rb_tensor_slice(&k, 2, g->row0, g->n, &ks));
                CK(rb_tensor_slice(&b.pos, 0, g->row0, g->n, &ps));
                CK(rb_rope(be, &qs, &qs, &ps, &rpg));
                CK(rb_rope(be, &ks, &ks, &ps, &rpg));
            }
        }
        for (int64_t gi = 0; gi < n_grp; gi++) {
            const seq_group *g = &grp[gi];
            rb_kv_cache *kv = g->kv;
            const size_t es = rb_dtype_info((int)kv->dtype)->type_size;
            rb_tensor ps;
            CK(rb_tensor_slice(&b.pos, 0, g->row0, g->n, &ps));
            /* append this group's keys and values at rows p0.. of its cache */
            const size_t kvs = kv->k[il].nb[1]; /* cache row stride (k and v rows interleaved) */
            if (kv_in_qkv) {
                /* written by the projection */
            } else if (fixed && c->fused_qkv) { /* k and v adjacent in each qkv row: one write of both */
                rb_tensor kvsrc = view3(&b.qkv, (size_t)g->row0 * qkv_row + (size_t)(Hq * D) * sizeof(float),
                                        2 * kvrow, g->n, 1, qkv_row, qkv_row * (size_t)g->n);
                rb_tensor kvdst = view3(&kv->k[il], 0, 2 * kvrow, kv->n_ctx, 1, kvs, kvs * (size_t)kv->n_ctx);
                CK(rb_set_rows(be, &kvdst, &kvsrc, &ps));
            } else if (fixed) { /* rows named by the positions on the device */
                rb_tensor ks = view3(&k, (size_t)g->row0 * k.nb[2], kvrow, g->n, 1, k.nb[2], k.nb[2] * (size_t)g->n);
                rb_tensor vs = view3(&v, (size_t)g->row0 * v.nb[1], kvrow, g->n, 1, v.nb[1], v.nb[1] * (size_t)g->n);
                CK(rb_set_rows(be, &kv->k[il], &ks, &ps));
                CK(rb_set_rows(be, &kv->v[il], &vs, &ps));
            } else {
                rb_tensor kdst = view3(&kv->k[il], (size_t)g->p0 * kvs, D, Hkv, g->n, D * es, kvs);
                rb_tensor vdst = view3(&kv->v[il], (size_t)g->p0 * kvs, kvrow, g->n, 1, kvs, kvs * (size_t)g->n);
                rb_tensor ksrc, vsrc;
                CK(rb_tensor_slice(&k, 2, g->row0, g->n, &ksrc));
                CK(rb_tensor_slice(&v, 1, g->row0, g->n, &vsrc));
                CK(rb_cast(be, &kdst, &ksrc));
                CK(rb_cast(be, &vdst, &vsrc));
            }

            /* attention over positions 0..p0+n-1 of this sequence (fixed:
             * over the whole cache, later rows invisible through q_pos) */
            const int64_t Tk = fixed ? kv->n_ctx : g->p0 + g->n;
            rb_tensor qa = view3(&q, (size_t)g->row0 * q.nb[2], D, g->n, Hq, q.nb[2], q.nb[1]);
            rb_tensor ka = view3(&kv->k[il], 0, D, Tk, Hkv, kvs, (size_t)D * es);
            rb_tensor va = view3(&kv->v[il], 0, D, Tk, Hkv, kvs, (size_t)D * es);
            rb_tensor ad = view3(&b.att, (size_t)(g->row0 * D * Hq) * sizeof(float), D, Hq, g->n,
                                 (size_t)D * sizeof(float), (size_t)(D * Hq) * sizeof(float));
            rb_attn_params ap = {
                .scale = c->attn_scale,
                .softcap = c->attn_softcap,
                .causal = true,
                .window = swa ? c->sliding_window : 0,
                .q_pos0 = fixed ? 0 : g->p0,
                .mask = NULL,
                .q_pos = fixed ? &ps : NULL,
                .keys_settled = fixed, /* this step writes rows at its own positions only */
                .sinks = L->has_sinks ? &L->sinks : NULL,
            };
            CK(rb_attention(be, &ad, &qa, &ka, &va, &ap));
        }

        rb_tensor att2 = view3(&b.att, 0, Hq * D, T, 1, (size_t)(Hq * D) * sizeof(float),
                               (size_t)(Hq * D * T) * sizeof(float));
        if (fuse) { /* x += wo att (+ bo) */
            const rb_matmul_fusion fu = {.accumulate = true, .tmp_out = &b.o};
            CK(rb_matmul_fused(be, &b.x, &L->wo, &att2, &fu));
            if (L->has_bo) CK(rb_binary(be, RB_BINARY_ADD, &b.x, &b.x, &L->bo));
        } else {
            CK(rb_matmul(be, &b.o, &L->wo, &att2));
            if (L->has_bo) CK(rb_binary(be, RB_BINARY_ADD, &b.o, &b.o, &L->bo));
            if (c->post_norms) CK(rb_rms_norm(be, &b.o, &b.o, &L->post_attn_norm, c->norm_eps));
            /* residual add fused with the MLP's input norm */
            if (c->pre_norms) CK(rb_add_rms_norm(be, &b.x, &b.o, &L->ffn_norm, c->norm_eps, &b.h));
            else CK(rb_binary(be, RB_BINARY_ADD, &b.x, &b.x, &b.o));
        }

        /* gated MLP: act(gate) * up in one op (fused: the gate_up product
         * writes act(gate) * up of the normed x, and the down projection
         * adds its product to x) */
        const rb_unary_op act = c->gelu_act ? RB_UNARY_GELU_TANH : RB_UNARY_SILU;
        if (L->moe) { /* never fused: see fuse */
            rb_status sm = moe_ffn(be, c, L, &b, ain, &b.o, T, il, err);
            if (sm != RB_OK) return sm;
        } else if (c->fused_gate_up && fuse) {
            const rb_matmul_fusion fu = {.norm = true, .norm_w = &L->ffn_norm, .eps = c->norm_eps,
                                         .glu_out = true, .act = act, .tmp_in = &b.h, .tmp_out = &b.g};
            CK(rb_matmul_fused(be, &b.u, &L->w_gate_up, &b.x, &fu));
            const rb_matmul_fusion fd = {.accumulate = true, .tmp_out = &b.o};
            CK(rb_matmul_fused(be, &b.x, &L->w_down, &b.u, &fd));
        } else if (c->fused_gate_up) {
            CK(rb_matmul(be, &b.g, &L->w_gate_up, ain));
            rb_tensor gate = view3(&b.g, 0, F, T, 1, (size_t)(2 * F) * sizeof(float),
                                   (size_t)(2 * F * T) * sizeof(float));
            rb_tensor up = view3(&b.g, (size_t)F * sizeof(float), F, T, 1, (size_t)(2 * F) * sizeof(float),
                                 (size_t)(2 * F * T) * sizeof(float));
            CK(rb_glu(be, &b.u, &gate, &up, act));
            CK(rb_matmul(be, &b.o, &L->w_down, &b.u));
        } else {
            rb_tensor g1 = view3(&b.g, 0, F, T, 1, (size_t)F * sizeof(float), (size_t)(F * T) * sizeof(float));
            if (fuse) CK(rb_rms_norm(be, &b.h, &b.x, &L->ffn_norm, c->norm_eps));
            CK(rb_matmul(be, &g1, &L->w_gate, fuse ? &b.h : ain));
            CK(rb_matmul(be, &b.u, &L->w_up, fuse ? &b.h : ain));
            CK(rb_glu(be, &g1, &g1, &b.u, act));
            if (fuse) {
                const rb_matmul_fusion fu = {.accumulate = true, .tmp_out = &b.o};
                CK(rb_matmul_fused(be, &b.x, &L->w_down, &g1, &fu));
            } else {
                CK(rb_matmul(be, &b.o, &L->w_down, &g1));
            }
        }
        if (fuse) continue; /* the residual add is done */
        if (c->post_norms) CK(rb_rms_norm(be, &b.o, &b.o, &L->post_ffn_norm, c->norm_eps));
        /* residual add fused with the next norm: the next layer's attention
         * norm, or the output norm when every row's logits are wanted */
        if (il + 1 < c->n_layer && c->pre_norms) {
            CK(rb_add_rms_norm(be, &b.x, &b.o, &m->layers[il + 1].attn_norm, c->norm_eps, &b.h));
        } else if (il + 1 < c->n_layer) {
            CK(rb_binary(be, RB_BINARY_ADD, &b.x, &b.x, &b.o));
        } else if (head != HEAD_NONE && (all_logits || T == 1)) {
            CK(rb_add_rms_norm(be, &b.x, &b.o, &m->out_norm, c->norm_eps, &b.h));
            out_normed = true;
        } else {
            CK(rb_binary(be, RB_BINARY_ADD, &b.x, &b.x, &b.o));
        }
    }
    il = -1;
    if (head == HEAD_NONE) return RB_OK; /* an inner micro-batch of a longer prompt */
    if (head == HEAD_HIDDEN) { /* all_logits: every row's norm, unless fused away */
        if (!out_normed) CK(rb_rms_norm(be, &b.h, &b.x, &m->out_norm, c->norm_eps));
        return RB_OK;
    }

    /* output head: every row, or only the last one */
    rb_tensor hout = b.h, xin = b.x;
    if (!all_logits) {
        hout = view3(&b.h, 0, E, 1, 1, (size_t)E * sizeof(float), (size_t)E * sizeof(float));
        xin = view3(&b.x, (size_t)((T - 1) * E) * sizeof(float), E, 1, 1, (size_t)E * sizeof(float),
                    (size_t)E * sizeof(float));
    }
    if (fuse) {
        const rb_matmul_fusion fu = {.norm = true, .norm_w = &m->out_norm, .eps = c->norm_eps, .tmp_in = &hout};
        CK(rb_matmul_fused(be, &b.logits, &m->output, &xin, &fu));
    } else {
        if (!out_normed) CK(rb_rms_norm(be, &hout, &xin, &m->out_norm, c->norm_eps));
        CK(rb_matmul(be, &b.logits, &m->output, &hout));
    }
    if (c->final_softcap > 0) {
        CK(rb_affine(be, &b.logits, &b.logits, 1.0f / c->final_softcap, 0.0f));
        CK(rb_unary(be, RB_UNARY_TANH, &b.logits, &b.logits));
        CK(rb_affine(be, &b.logits, &b.logits, c->final_softcap, 0.0f));
    }
    return RB_OK;
}

/* One micro-batch: logits (of every row, or the last one) into logits, or
 * with hidden set the normed final hidden states of every row into hidden,
 * or neither when both are NULL. */
static rb_status forward_rows(rb_model *m, rb_buffer *arena, const int32_t *tokens, int64_t T,
                              const seq_group *grp, int64_t n_grp, bool all_logits, float *logits, float *hidden,
                              rb_error *err) {
    const rb_model_config *c = &m->cfg;
    rb_backend *be = m->be;
    fwd_bufs b;
    if (hidden) all_logits = true;
    layout(c, T, all_logits, arena, &b);
    const fwd_head head = hidden ? HEAD_HIDDEN : logits ? HEAD_LOGITS : HEAD_NONE;
    rb_status s = upload_inputs(be, &b, tokens, T, grp, n_grp, err);
    if (s == RB_OK) s = run_ops(m, &b, T, grp, n_grp, all_logits, head, false, err);
    if (s != RB_OK) return s;
    for (int64_t gi = 0; gi < n_grp; gi++) grp[gi].kv->used = grp[gi].p0 + grp[gi].n;
    if (hidden) {
        s = rb_tensor_get(&b.h, hidden, sizeof(float) * (size_t)(c->n_embd * T));
        return s == RB_OK ? RB_OK : rb_error_set(err, s, "reading the hidden states: %s", rb_backend_last_error(be));
    }
    if (!logits) return RB_OK;
    s = rb_tensor_get(&b.logits, logits, sizeof(float) * (size_t)(c->n_vocab * (all_logits ? T : 1)));
    if (s != RB_OK) return rb_error_set(err, s, "reading the logits: %s", rb_backend_last_error(be));
    return RB_OK;
}

/* ---- decode steps: position-independent, captured into graphs ---- */

/* The position-independent form is used for this cache's decode steps. */
static bool decode_fixed(const rb_model *m, const rb_kv_cache *kv) {
    if (m->cfg.has_rope_long) return false; /* the rope factors depend on the position */
    switch (kv->decode_mode) {
    case RB_DECODE_AUTO: return rb_backend_graphs_supported(m->be);
    case RB_DECODE_FIXED:
    case RB_DECODE_GRAPH_NOWARM: return true;
    default: return false;
    }
}

/* ... and captured into a graph (else run eagerly every step). */
static bool decode_graphs(const rb_model *m, const rb_kv_cache *kv) {
    return decode_fixed(m, kv) && kv->decode_mode != RB_DECODE_FIXED && rb_backend_graphs_supported(m->be);
}

/* Records what a slot's state refers to: the caches of the step and the
 * owner's arena. false: no memory for the key (the slot stays as it was). */
static bool slot_mark(rb_decode_graph *dg, rb_graph_state state, const uint64_t *key, int64_t n_key, uint64_t gen,
                      const void *out) {
    if (!dg->key || dg->n_key != n_key) {
        uint64_t *k = malloc(sizeof(uint64_t) * (size_t)n_key);
        if (!k) return false;
        free(dg->key);
        dg->key = k;
        dg->n_key = n_key;
    }
    memcpy(dg->key, key, sizeof(uint64_t) * (size_t)n_key);
    dg->gen = gen;
    dg->out = out;
    dg->state = state;
    return true;
}

static rb_status launch(rb_backend *be, rb_graph *g, rb_error *err) {
    rb_status s = rb_graph_launch(g);
    return s == RB_OK ? RB_OK : rb_error_set(err, s, "replaying a decode graph: %s", rb_backend_last_error(be));
}

/* Queues the ops of a position-independent step (inputs uploaded) through
 * dg, a graph slot of owner's: replays its graph when it was captured for
 * the same caches (key) and arena; else runs the ops eagerly, and when the
 * previous step was such an eager warm-up with the same key (or nowarm),
 * captures them into dg first. A capture that fails leaves the slot eager
 * until its key or the arena changes. */
static rb_status graph_step(rb_model *m, rb_kv_cache *owner, rb_decode_graph *dg, const uint64_t *key, int64_t n_key,
                            const void *out, bool want, bool nowarm, const fwd_bufs *b, int64_t T,
                            const seq_group *grp, int64_t n_grp, rb_error *err) {
    rb_backend *be = m->be;
    const bool same = dg->state != RB_GRAPH_NONE && dg->gen == owner->arena_gen && dg->n_key == n_key &&
                      dg->out == out && memcmp(dg->key, key, sizeof(uint64_t) * (size_t)n_key) == 0;
    if (!same && dg->state != RB_GRAPH_NONE) rb_decode_graph_drop(dg);
    if (dg->graph) return launch(be, dg->graph, err);
    if (want && (dg->state == RB_GRAPH_WARM || (dg->state == RB_GRAPH_NONE && nowarm))) {
        rb_error cerr;
        rb_error_clear(&cerr);
        rb_status s = rb_backend_capture_begin(be);
        if (s != RB_OK) {
            rb_error_set(&cerr, s, "begin: %s", rb_backend_last_error(be));
        } else {
            s = run_ops(m, b, T, grp, n_grp, true, HEAD_LOGITS, true, &cerr);
            rb_graph *gr = NULL;
            const rb_status se = rb_backend_capture_end(be, &gr); /* discards it when an op failed */
            if (s == RB_OK && se != RB_OK) rb_error_set(&cerr, se, "end: %s", rb_backend_last_error(be));
            if (s == RB_OK && se == RB_OK) {
                dg->graph = gr;
                dg->state = RB_GRAPH_READY;
                return launch(be, gr, err);
            }
        }
        /* eager from now on, until the key or the arena changes (without
         * memory for the key: retried after the next warm-up) */
        if (!slot_mark(dg, RB_GRAPH_FAILED, key, n_key, owner->arena_gen, out)) dg->state = RB_GRAPH_NONE;
        snprintf(dg->error, sizeof dg->error, "%s", cerr.msg);
    }
    rb_status s = run_ops(m, b, T, grp, n_grp, true, HEAD_LOGITS, true, err);
    /* warmed up (the backend's scratch is sized): the next such step captures */
    if (s == RB_OK && want && dg->state == RB_GRAPH_NONE)
        (void)slot_mark(dg, RB_GRAPH_WARM, key, n_key, owner->arena_gen, out);
    return s;
}

/* The logits of a position-independent step of T rows written by the output
 * head straight into the caller's memory, where the backend can write it in
 * place (rb_backend_host_alloc's page-locked memory on a GPU: no read-back
 * queued after the step; 1B tg128 +1%, 7B +0.3%): points b->logits at kv's
 * wrapper of it. A graph's ops then write that memory, so where the logits
 * go is part of what a graph was captured for (graph_step's out: the
 * caller's pointer, or NULL for the arena), and the memory is wrapped only
 * once it comes a second step in a row (a caller that moves its buffer
 * every step keeps the read-back and its graphs). Another pointer, or more
 * rows, wraps again and drops the cache's graphs that wrote through the old
 * wrapper. Memory that cannot be wrapped is remembered and read back as
 * before. Not with a final soft-cap (its ops would read the logits back
 * over the bus) nor for more rows than the matrix-vector products take. */
static bool direct_logits(rb_kv_cache *kv, float *logits, int64_t T, fwd_bufs *b) {
    const rb_model_config *c = &kv->m->cfg;
    if (c->final_softcap > 0 || T > RB_FUSE_ROWS) return false;
    const size_t n = sizeof(float) * (size_t)(c->n_vocab * T);
    const bool again = kv->out_seen == logits && kv->out_seen_size >= n;
    kv->out_seen = logits;
    kv->out_seen_size = n;
    const bool known = kv->out_ptr == logits && kv->out_size >= n; /* wrapped, or found not wrappable */
    if (!known) {
        if (!again) return false;
        if (kv->out_wrap) {
            rb_kv_cache_drop_graph(kv); /* they write through the old wrapper */
            rb_buffer_free(kv->out_wrap);
            kv->out_wrap = NULL;
        }
        kv->out_ptr = logits;
        kv->out_size = n;
        if (rb_buffer_wrap_host(kv->m->be, logits, n, &kv->out_wrap) != RB_OK) kv->out_wrap = NULL;
    }
    if (!kv->out_wrap) return false;
    rb_tensor_init4(&b->logits, RB_F32, c->n_vocab, T, 1, 1, kv->out_wrap, 0);
    return true;
}

static rb_status decode_step(rb_model *m, rb_kv_cache *kv, int32_t token, float *logits, rb_error *err) {
    rb_backend *be = m->be;
    fwd_bufs b;
    layout(&m->cfg, 1, true, kv->arena, &b);
    b.in_host = kv->in_host;
    const bool direct = direct_logits(kv, logits, 1, &b);
    seq_group g = {.kv = kv, .row0 = 0, .n = 1, .p0 = kv->used};
    rb_status s = upload_inputs(be, &b, &token, 1, &g, 1, err);
    if (s == RB_OK)
        s = graph_step(m, kv, &kv->dec, &kv->serial, 1, direct ? logits : NULL, decode_graphs(m, kv),
                       kv->decode_mode == RB_DECODE_GRAPH_NOWARM, &b, 1, &g, 1, err);
    if (s != RB_OK) return s;
    /* a replay's device-side id checks report here */
    s = direct ? rb_backend_sync(be) : rb_tensor_get(&b.logits, logits, sizeof(float) * (size_t)m->cfg.n_vocab);
    if (s != RB_OK) return rb_error_set(err, s, "decode step: %s", rb_backend_last_error(be));
    kv->used = g.p0 + 1;
    return RB_OK;
}

/* One token for each of n sequences (n <= RB_MAX_UBATCH, checked), in the
 * position-independent form through kvs[0]'s batch graph slot. */
static rb_status decode_batch(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, int64_t n,
                              seq_group *grp, float *logits, rb_error *err) {
    rb_backend *be = m->be;
    rb_kv_cache *lead = kvs[0];
    rb_status s = ensure_arena(lead, n, err);
    if (s != RB_OK) return s;
    uint64_t *key = malloc(sizeof(uint64_t) * (size_t)n);
    if (!key) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    bool want = true;
    for (int64_t i = 0; i < n; i++) {
        key[i] = kvs[i]->serial;
        want = want && decode_graphs(m, kvs[i]);
    }
    fwd_bufs b;
    layout(&m->cfg, n, true, lead->arena, &b);
    b.in_host = lead->in_host;
    const bool direct = direct_logits(lead, logits, n, &b);
    s = upload_inputs(be, &b, tokens, n, grp, n, err);
    if (s == RB_OK) s = graph_step(m, lead, &lead->bat, key, n, direct ? logits : NULL, want, false, &b, n, grp, n, err);
    free(key);
    if (s != RB_OK) return s;
    s = direct ? rb_backend_sync(be) : rb_tensor_get(&b.logits, logits, sizeof(float) * (size_t)(m->cfg.n_vocab * n));
    if (s != RB_OK) return rb_error_set(err, s, "batched decode step: %s", rb_backend_last_error(be));
    for (int64_t i = 0; i < n; i++) kvs[i]->used = grp[i].p0 + 1;
    return RB_OK;
}

rb_status rb_model_decode_token(rb_model *m, rb_kv_cache *kv, int32_t token, float *logits, rb_error *err) {
    if (!m || !kv || kv->m != m || !logits || !decode_fixed(m, kv))
        return rb_error_set(err, RB_E_INVALID, "rb_model_decode_token: bad arguments or not a fixed decode");
    if (kv->used >= kv->n_ctx) return rb_error_set(err, RB_E_RANGE, "context of %lld is full", (long long)kv->n_ctx);
    int64_t ub = kv->arena_tokens > 1 ? kv->arena_tokens : 1;
    rb_status s = ensure_arena(kv, ub, err);
    return s == RB_OK ? decode_step(m, kv, token, logits, err) : s;
}

/* The checks of rb_model_forward's arguments, and its arena. */
static rb_status forward_prepare(rb_model *m, rb_kv_cache *kv, const int32_t *tokens, int64_t n, rb_error *err) {
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
    return ensure_arena(kv, ub, err);
}

rb_status rb_model_forward(rb_model *m, rb_kv_cache *kv, const int32_t *tokens, int64_t n, bool all_logits,
                           float *logits, rb_error *err) {
    rb_status s = forward_prepare(m, kv, tokens, n, err);
    if (s != RB_OK) return s;
    const int64_t V = m->cfg.n_vocab;
    if (n == 1 && logits && decode_fixed(m, kv)) return decode_step(m, kv, tokens[0], logits, err);
    for (int64_t done = 0; done < n;) {
        int64_t T = n - done < kv->arena_tokens ? n - done : kv->arena_tokens;
        bool last = done + T == n;
        float *out = NULL;
        if (all_logits) out = logits ? logits + done * V : NULL;
        else if (last) out = logits;
        seq_group g = {.kv = kv, .row0 = 0, .n = T, .p0 = kv->used};
        s = forward_rows(m, kv->arena, tokens + done, T, &g, 1, all_logits, out, NULL, err);
        if (s != RB_OK) return s;
        done += T;
    }
    return RB_OK;
}

rb_status rb_model_forward_hidden(rb_model *m, rb_kv_cache *kv, const int32_t *tokens, int64_t n, float *hidden,
                                  rb_error *err) {
    if (!hidden) return rb_error_set(err, RB_E_INVALID, "rb_model_forward_hidden: NULL output");
    rb_status s = forward_prepare(m, kv, tokens, n, err);
    const int64_t E = m->cfg.n_embd;
    for (int64_t done = 0; s == RB_OK && done < n;) {
        const int64_t T = n - done < kv->arena_tokens ? n - done : kv->arena_tokens;
        seq_group g = {.kv = kv, .row0 = 0, .n = T, .p0 = kv->used};
        s = forward_rows(m, kv->arena, tokens + done, T, &g, 1, true, NULL, hidden + done * E, err);
        done += T;
    }
    return s;
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
    bool fixed = n <= RB_MAX_UBATCH;
    for (int64_t i = 0; i < n && s == RB_OK && fixed; i++) fixed = decode_fixed(m, kvs[i]);
    if (s == RB_OK && fixed) {
        s = decode_batch(m, kvs, tokens, n, g, logits, err);
        free(g);
        return s;
    }
    for (int64_t done = 0; s == RB_OK && done < n; done += RB_MAX_UBATCH) {
        const int64_t T = n - done < RB_MAX_UBATCH ? n - done : RB_MAX_UBATCH;
        if ((s = ensure_arena(kvs[0], T, err)) != RB_OK) break;
        for (int64_t i = 0; i < T; i++) g[done + i].row0 = i;
        s = forward_rows(m, kvs[0]->arena, tokens + done, T, g + done, T, true, logits + done * V, NULL, err);
    }
    free(g);
    return s;
}

/* The entry points of the forward pass (transformer.c): rb_model_forward
 * runs a prompt in micro-batches of the arena's size and a single token as a
 * decode step; rb_model_forward_batch runs one token of each of n sequences
 * as one micro-batch (whose attention is one op a layer where the caches
 * share a pool: rb_kv_cache_create_many). On a backend created batch-invariant, a batch gives
 * each sequence the bits its step alone would: products of up to
 * RB_BATCH_INVARIANT_ROWS rows keep rows apart on a backend whose products
 * honour that (larger batches run in chunks of that size), and on another
 * backend the sequences run one at a time (see batch_invariant_step).
 *
 * One-token decode on a backend with graphs runs "position-independent":
 * the position is only read on the device (rope's pos tensor, KV rows
 * written at that position by rb_set_rows or the qkv projection's store,
 * attention over the whole cache with q_pos), so every step queues the same
 * ops on the same memory. The first such step runs eagerly (it also sizes
 * the backend's scratch), the second is captured into a graph kept in the
 * KV cache, and later steps only write token and position into host memory
 * of the backend's (kv->in_host), replay the graph, which fetches them
 * itself (rb_buffer_set_queued: no separate upload before the launch; 1B
 * q4_0 tg128 +2%), and read the logits. The graph is rebuilt when the arena
 * is reallocated and freed with the cache (a batched step's: one of a few
 * per leading cache, for the batch sizes a server moves between). Longrope models (factors chosen
 * by position) stay eager; an eager model (rb_model_set_eager_decode,
 * RBEE_NO_GRAPH=1) keeps the per-step shapes, for comparison. */
#include "models/forward_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One micro-batch of rows through the pass, appended to their caches, and
 * its logits (of every row, or the last one) read back into logits, or
 * with hidden set the normed final hidden states of every row into hidden,
 * or neither when both are NULL (an inner chunk of a longer prompt). */
static rb_status forward_rows(rb_model *m, rb_buffer *arena, const int32_t *tokens, int64_t T,
                              const seq_group *grp, int64_t n_grp, bool all_logits, float *logits, float *hidden,
                              rb_error *err) {
    const rb_model_config *c = &m->cfg;
    rb_backend *be = m->be;
    fwd_bufs b;
    if (hidden) all_logits = true;
    rb_fwd_layout(c, T, all_logits, arena, &b);
    const rb_fwd_head head = hidden ? RB_FWD_HEAD_HIDDEN : logits ? RB_FWD_HEAD_LOGITS : RB_FWD_HEAD_NONE;
    rb_status s = rb_fwd_upload_inputs(be, &b, tokens, T, grp, n_grp, err);
    if (s == RB_OK) s = rb_fwd_run(m, &b, T, grp, n_grp, all_logits, head, false, err);
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

/* dg holds a step of owner's captured or warmed up for key and out. */
static bool slot_is(const rb_decode_graph *dg, const rb_kv_cache *owner, const uint64_t *key, int64_t n_key,
                    const void *out) {
    return dg->state != RB_GRAPH_NONE && dg->gen == owner->arena_gen && dg->n_key == n_key && dg->out == out &&
           memcmp(dg->key, key, sizeof(uint64_t) * (size_t)n_key) == 0;
}

/* The batch slot of lead's for a step of key: the one that holds it, else
 * an empty one, else the least recently used (graph_step drops what it
 * held). */
static rb_decode_graph *batch_slot(rb_kv_cache *lead, const uint64_t *key, int64_t n_key, const void *out) {
    int pick = -1;
    for (int i = 0; i < RB_BATCH_GRAPHS && pick < 0; i++)
        if (slot_is(&lead->bat[i], lead, key, n_key, out)) pick = i;
    for (int i = 0; i < RB_BATCH_GRAPHS && pick < 0; i++)
        if (lead->bat[i].state == RB_GRAPH_NONE) pick = i;
    if (pick < 0) {
        pick = 0;
        for (int i = 1; i < RB_BATCH_GRAPHS; i++)
            if (lead->bat_used[i] < lead->bat_used[pick]) pick = i;
    }
    lead->bat_used[pick] = ++lead->bat_clock;
    lead->bat_last = pick;
    return &lead->bat[pick];
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
    const bool same = slot_is(dg, owner, key, n_key, out);
    if (!same && dg->state != RB_GRAPH_NONE) rb_decode_graph_drop(dg);
    if (dg->graph) return launch(be, dg->graph, err);
    if (want && (dg->state == RB_GRAPH_WARM || (dg->state == RB_GRAPH_NONE && nowarm))) {
        rb_error cerr;
        rb_error_clear(&cerr);
        rb_status s = rb_backend_capture_begin(be);
        if (s != RB_OK) {
            rb_error_set(&cerr, s, "begin: %s", rb_backend_last_error(be));
        } else {
            s = rb_fwd_run(m, b, T, grp, n_grp, true, RB_FWD_HEAD_LOGITS, true, &cerr);
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
    rb_status s = rb_fwd_run(m, b, T, grp, n_grp, true, RB_FWD_HEAD_LOGITS, true, err);
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
    rb_fwd_layout(&m->cfg, 1, true, kv->arena, &b);
    b.in_host = kv->in_host;
    const bool direct = direct_logits(kv, logits, 1, &b);
    seq_group g = {.kv = kv, .row0 = 0, .n = 1, .p0 = kv->used};
    rb_status s = rb_fwd_upload_inputs(be, &b, &token, 1, &g, 1, err);
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
    rb_status s = rb_fwd_ensure_arena(lead, n, err);
    if (s != RB_OK) return s;
    uint64_t *key = malloc(sizeof(uint64_t) * (size_t)(n > 3 ? n : 3));
    if (!key) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    bool want = true, pooled = n > 1;
    for (int64_t i = 0; i < n; i++) {
        key[i] = kvs[i]->serial;
        want = want && decode_graphs(m, kvs[i]);
        pooled = pooled && kvs[i]->pool == lead->pool;
    }
    /* caches of one pool: the step's ops name the pool and read which of its
     * caches from the inputs, so its graph serves any n of them (key: 0,
     * which no cache has, the pool, n) */
    int64_t n_key = n;
    if (pooled) {
        key[0] = 0;
        key[1] = lead->pool->serial;
        key[2] = (uint64_t)n;
        n_key = 3;
    }
    fwd_bufs b;
    rb_fwd_layout(&m->cfg, n, true, lead->arena, &b);
    b.in_host = lead->in_host;
    const bool direct = direct_logits(lead, logits, n, &b);
    s = rb_fwd_upload_inputs(be, &b, tokens, n, grp, n, err);
    if (s == RB_OK)
        s = graph_step(m, lead, batch_slot(lead, key, n_key, direct ? logits : NULL), key, n_key,
                       direct ? logits : NULL, want, false, &b, n, grp, n, err);
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
    rb_status s = rb_fwd_ensure_arena(kv, ub, err);
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
    return rb_fwd_ensure_arena(kv, ub, err);
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

/* A batch on a batch-invariant backend: in chunks of RB_BATCH_INVARIANT_ROWS
 * sequences where the products keep rows apart, else one sequence at a time
 * through the path a single decode step takes (its own graph slot). */
static rb_status batch_invariant_step(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, int64_t n,
                                      float *logits, rb_error *err) {
    const int64_t V = m->cfg.n_vocab;
    const int64_t chunk = rb_backend_row_exact_products(m->be) ? RB_BATCH_INVARIANT_ROWS : 1;
    for (int64_t i = 0; i < n; i += chunk) {
        const int64_t k = n - i < chunk ? n - i : chunk;
        rb_status s = k == 1 ? rb_model_forward(m, kvs[i], &tokens[i], 1, false, logits + i * V, err)
                             : rb_model_forward_batch(m, kvs + i, tokens + i, k, logits + i * V, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

/* Sequence i of a batch (rb_model_forward_batch: step, one token each;
 * rb_model_forward_seqs): a cache of m's that appears once in the batch,
 * with room for its count tokens, each inside the vocabulary. */
static rb_status check_seq(const rb_model *m, rb_kv_cache *const *kvs, int64_t i, const int32_t *toks, int64_t count,
                           bool step, rb_error *err) {
    const rb_kv_cache *kv = kvs[i];
    if (!kv || kv->m != m) return rb_error_set(err, RB_E_INVALID, "sequence %lld: KV cache of another model", (long long)i);
    if (step && kv->used + 1 > kv->n_ctx)
        return rb_error_set(err, RB_E_RANGE, "sequence %lld: context of %lld is full", (long long)i, (long long)kv->n_ctx);
    if (count > kv->n_ctx - kv->used)
        return rb_error_set(err, RB_E_RANGE, "sequence %lld: %lld tokens do not fit: context %lld, %lld used",
                            (long long)i, (long long)count, (long long)kv->n_ctx, (long long)kv->used);
    for (int64_t j = 0; j < count; j++)
        if (toks[j] < 0 || toks[j] >= m->cfg.n_vocab)
            return rb_error_set(err, RB_E_RANGE, "sequence %lld: token id %d is outside the vocabulary", (long long)i,
                                toks[j]);
    for (int64_t j = 0; j < i; j++)
        if (kvs[j] == kv) return rb_error_set(err, RB_E_INVALID, "the same KV cache appears twice in one batch");
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
        s = check_seq(m, kvs, i, tokens + i, 1, true, err);
        g[i] = (seq_group){.kv = kvs[i], .row0 = i, .n = 1, .p0 = kvs[i] ? kvs[i]->used : 0};
    }
    if (s == RB_OK && n > 1 && rb_backend_batch_invariant(m->be) &&
        (!rb_backend_row_exact_products(m->be) || n > RB_BATCH_INVARIANT_ROWS)) {
        free(g);
        return batch_invariant_step(m, kvs, tokens, n, logits, err);
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
        if ((s = rb_fwd_ensure_arena(kvs[0], T, err)) != RB_OK) break;
        for (int64_t i = 0; i < T; i++) g[done + i].row0 = i;
        s = forward_rows(m, kvs[0]->arena, tokens + done, T, g + done, T, true, logits + done * V, NULL, err);
    }
    free(g);
    return s;
}

/* Sequences one at a time (a batch-invariant backend whose products do not
 * keep rows apart: each gets the bits of its own pass). */
static rb_status seqs_one_by_one(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, const int64_t *counts,
                                 int64_t n, float *logits, rb_error *err) {
    const int64_t V = m->cfg.n_vocab;
    for (int64_t i = 0, at = 0; i < n; at += counts[i], i++) {
        rb_status s = rb_model_forward(m, kvs[i], tokens + at, counts[i], false, logits + i * V, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

rb_status rb_model_forward_seqs(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, const int64_t *counts,
                                int64_t n, float *logits, rb_error *err) {
    if (!m || !kvs || !tokens || !counts || !logits || n <= 0)
        return rb_error_set(err, RB_E_INVALID, "rb_model_forward_seqs: bad arguments");
    const int64_t V = m->cfg.n_vocab;
    int64_t T = 0;
    bool ones = true;
    for (int64_t i = 0; i < n; i++) {
        if (counts[i] <= 0 || counts[i] > RB_MODEL_MAX_STEP_TOKENS)
            return rb_error_set(err, RB_E_INVALID, "sequence %lld: %lld tokens (1..%d)", (long long)i,
                                (long long)counts[i], RB_MODEL_MAX_STEP_TOKENS);
        T += counts[i];
        ones = ones && counts[i] == 1;
        if (T > RB_MODEL_MAX_STEP_TOKENS)
            return rb_error_set(err, RB_E_RANGE, "more than %d tokens in one pass", RB_MODEL_MAX_STEP_TOKENS);
    }
    if (ones) return rb_model_forward_batch(m, kvs, tokens, n, logits, err);
    seq_group *g = malloc(sizeof(seq_group) * (size_t)n);
    if (!g) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    rb_status s = RB_OK;
    for (int64_t i = 0, row = 0; i < n && s == RB_OK; row += counts[i], i++) {
        s = check_seq(m, kvs, i, tokens + row, counts[i], false, err);
        if (s == RB_OK) g[i] = (seq_group){.kv = kvs[i], .row0 = row, .n = counts[i], .p0 = kvs[i]->used};
    }
    if (s == RB_OK && rb_backend_batch_invariant(m->be)) {
        free(g);
        return seqs_one_by_one(m, kvs, tokens, counts, n, logits, err);
    }
    if (s == RB_OK) s = rb_fwd_ensure_arena(kvs[0], T, err);
    if (s == RB_OK) {
        fwd_bufs b;
        rb_fwd_layout(&m->cfg, T, true, kvs[0]->arena, &b);
        s = rb_fwd_upload_inputs(m->be, &b, tokens, T, g, n, err);
        if (s == RB_OK) s = rb_fwd_run(m, &b, T, g, n, false, RB_FWD_HEAD_GROUP_LAST, false, err);
        if (s == RB_OK) {
            rb_tensor rows = b.logits; /* the first n rows: one per sequence */
            rows.ne[1] = n;
            s = rb_tensor_get(&rows, logits, sizeof(float) * (size_t)(V * n));
            if (s != RB_OK) s = rb_error_set(err, s, "reading the logits: %s", rb_backend_last_error(m->be));
        }
        if (s == RB_OK)
            for (int64_t i = 0; i < n; i++) kvs[i]->used = g[i].p0 + g[i].n;
    }
    free(g);
    return s;
}


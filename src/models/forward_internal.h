/* Internal to the models layer: what the forward pass (transformer.c) and
 * its entry points (forward.c) share - the activation arena of a
 * micro-batch, the sequences its rows belong to, and the call that queues
 * the ops of one micro-batch. */
#ifndef RBEE_FORWARD_INTERNAL_H
#define RBEE_FORWARD_INTERNAL_H

#include "models/kv_cache_internal.h"

#define RB_MAX_UBATCH 512
/* Micro-batches of at most this many rows (decode) run the norms, the gate
 * and the residual adds inside the projections (rb_matmul_fused): on a GPU
 * each separate op over a few rows costs a kernel launch and its gap. */
#define RB_FUSE_ROWS 4

/* The activations of a micro-batch, at offsets of one arena buffer. q and k
 * are rotated in place in qkv (no separate roped copies). */
typedef struct fwd_bufs {
    /* inputs (one upload): token ids, positions, and each row's pool row
     * (slot n_ctx + position: where its keys and values go in its cache's
     * pool) and slot (rb_kv_pool_rows, kv_cache_internal.h) */
    rb_tensor ids, pos, kvrow, kvslot;
    rb_tensor lastrow; /* input: the last row of each sequence group (RB_FWD_HEAD_GROUP_LAST) */
    rb_tensor x, h, qkv, att, o, g, u, logits;
    /* mixture of experts: router logits [E, T], top-k weights and ids [k, T],
     * gate/up [F, k, T], down [H, k, T], gathered biases [max(F, H), k T], sums [1, T] */
    rb_tensor rl, tw, ti, eg, eu, ey, eb, es;
    /* non-NULL: ids and pos are written here (host memory of
     * rb_backend_host_alloc) and the pass queues their copy as its first op */
    void *in_host;
} fwd_bufs;

/* Rows of a micro-batch that belong to one sequence: consecutive tokens at
 * positions p0.. appended to kv. A prefill chunk is one group of T rows; a
 * batched decode step is n groups of one row each. */
typedef struct seq_group {
    rb_kv_cache *kv;
    int64_t row0, n, p0;
} seq_group;

/* Lays out every activation tensor of a T-token micro-batch at offsets of
 * buf (NULL: only computes the total size); returns the size. */
size_t rb_fwd_layout(const rb_model_config *c, int64_t T, bool all_logits, rb_buffer *buf, fwd_bufs *fb);
/* Bytes from the ids to the end of lastrow: what one copy fills. */
size_t rb_fwd_inputs_span(const fwd_bufs *b);
/* Makes kv's arena hold a micro-batch of T tokens (reallocating drops its graphs). */
rb_status rb_fwd_ensure_arena(rb_kv_cache *kv, int64_t T, rb_error *err);
/* Token ids, positions, pool rows, slots and the groups' last rows of the micro-batch into the arena, in one copy
 * (with b->in_host: written there, for the pass to queue the copy). */
rb_status rb_fwd_upload_inputs(rb_backend *be, const fwd_bufs *b, const int32_t *tokens, int64_t T,
                               const seq_group *grp, int64_t n_grp, rb_error *err);

/* What a micro-batch ends with: nothing (an inner micro-batch of a longer
 * prompt), the logits, the normed final hidden states of every row in
 * the arena's h (embeddings), or the logits of each sequence's last row (a
 * batch of decode steps and prompt chunks). */
typedef enum rb_fwd_head {
    RB_FWD_HEAD_NONE = 0,
    RB_FWD_HEAD_LOGITS,
    RB_FWD_HEAD_HIDDEN,
    RB_FWD_HEAD_GROUP_LAST, /* the logits of each group's last row (n_grp rows), all_logits false */
} rb_fwd_head;

/* Queues every op of a micro-batch whose inputs are uploaded, up to what
 * head asks for on the device (the logits: for every row with all_logits,
 * else the last; the hidden states: every row, with all_logits). fixed: the
 * position-independent form (KV rows written at b->pos, attention over each
 * whole cache with q_pos), so the queued ops do not depend on the
 * positions. */
rb_status rb_fwd_run(rb_model *m, const fwd_bufs *bufs, int64_t T, const seq_group *grp, int64_t n_grp,
                     bool all_logits, rb_fwd_head head, bool fixed, rb_error *err);

#endif

/* Internal layout of rb_kv_cache, shared by kv_cache.c and the forward pass,
 * and the internal switches of its one-token decode (tests use them). */
#ifndef RBEE_KV_CACHE_INTERNAL_H
#define RBEE_KV_CACHE_INTERNAL_H

#include "models/model_internal.h"

/* How rb_model_forward runs a one-token step of this cache. */
typedef enum rb_decode_mode {
    RB_DECODE_AUTO = 0,     /* graphs where the backend has them, else as LEGACY */
    RB_DECODE_LEGACY,       /* per-step shapes (attention over used keys): rb_model_set_eager_decode */
    RB_DECODE_FIXED,        /* position-independent ops, always eager */
    RB_DECODE_GRAPH_NOWARM, /* test: capture on the first step, without the eager warm-up */
} rb_decode_mode;

typedef enum rb_graph_state {
    RB_GRAPH_NONE = 0, /* no position-independent step run yet (for this arena) */
    RB_GRAPH_WARM,     /* one ran eagerly: the next one captures */
    RB_GRAPH_READY,    /* captured: steps replay it */
    RB_GRAPH_FAILED,   /* capture failed (graph_error says why): eager until the arena changes */
} rb_graph_state;

/* A captured position-independent step, with what it was captured for. */
typedef struct rb_decode_graph {
    rb_graph_state state;
    uint64_t gen;  /* the owner's arena_gen that state refers to */
    uint64_t *key; /* serials of the caches of the step (one, or a batch's) */
    int64_t n_key;
    const void *out; /* the caller's logits memory its ops write in place (forward.c direct_logits), NULL: the arena */
    rb_graph *graph;
    char error[RB_ERROR_MSG_MAX];
} rb_decode_graph;

/* Captured batched steps a cache keeps (of different batch sizes). */
#define RB_BATCH_GRAPHS 4

/* The memory of caches made together (rb_kv_cache_create_many; a lone cache
 * has a pool of one): per layer, the slots' blocks of n_ctx [k row | v row]
 * pairs one after another, so one layer of every slot is a single tensor
 * (rb_kv_pool_layer) that a batched step writes by pool row (slot n_ctx +
 * position) and attends to with kv_index = slot. */
typedef struct rb_kv_pool {
    rb_buffer *buf;
    int64_t n_slots, n_ctx;
    size_t slot_bytes; /* one slot's block of a layer: 2 row sizes x n_ctx */
    uint64_t serial;   /* unique among the pools of this process */
    _Atomic int refs;  /* caches alive */
} rb_kv_pool;

struct rb_kv_cache {
    rb_model *m;
    int64_t n_ctx;
    int64_t used;
    rb_dtype dtype;
    rb_tensor *k, *v; /* per layer [head_dim * n_kv_heads, n_ctx], rows interleaved: k, v, k, v, ... */
    rb_kv_pool *pool;
    int64_t slot; /* this cache's block in each layer of the pool */
    size_t bytes;
    /* activation scratch for forward passes of up to arena_tokens tokens */
    rb_buffer *arena;
    size_t arena_size;
    int64_t arena_tokens;
    uint64_t arena_gen; /* bumped whenever the arena is reallocated */
    /* host memory (rb_backend_host_alloc) for the token ids and positions of
     * a position-independent step, sized like the arena's: the step's ops
     * read it from a queued copy (rb_buffer_set_queued), so a captured step
     * fetches its inputs itself */
    void *in_host;
    /* the caller's logits memory of the last position-independent step,
     * wrapped (rb_buffer_wrap_host) so the output head writes it in place;
     * out_wrap NULL with out_ptr set: that memory cannot be wrapped */
    rb_buffer *out_wrap;
    void *out_ptr;
    size_t out_size;
    void *out_seen; /* the previous step's logits memory (wrapped once it comes twice in a row) */
    size_t out_seen_size;
    uint64_t serial;    /* unique among the caches of this process */
    /* captured decode steps (see forward.c): this cache's one-token step,
     * and the batched steps (rb_model_forward_batch) whose first cache it
     * is: a few of them, since a server's batch size moves up and down by
     * one as requests end and start (bat_used: when each slot last ran, for
     * the least recently used one to give way) */
    rb_decode_mode decode_mode;
    rb_decode_graph dec, bat[RB_BATCH_GRAPHS];
    uint64_t bat_used[RB_BATCH_GRAPHS], bat_clock;
    int bat_last; /* the slot of the last batched step */
};

/* Layer il of every cache of kv's pool: rows [2 head_dim n_kv_heads] of
 * [k | v], n_ctx rows a slot (slot s at rows s n_ctx ..). */
rb_tensor rb_kv_pool_rows(const rb_kv_cache *kv, int il);
/* Its keys (at element 0 of a row) or values (at head_dim n_kv_heads) as
 * [head_dim, n_ctx, n_kv_heads, n_slots]: rb_attention's k / v with kv_index. */
rb_tensor rb_kv_pool_heads(const rb_kv_cache *kv, int il, bool values);

/* Frees the captured graphs (if any) and forgets the warm-ups. */
void rb_kv_cache_drop_graph(rb_kv_cache *kv);
void rb_decode_graph_drop(rb_decode_graph *dg);
/* Switches the decode mode (drops any graph). */
void rb_kv_cache_set_decode_mode(rb_kv_cache *kv, rb_decode_mode mode);
rb_graph_state rb_kv_cache_graph_state(const rb_kv_cache *kv);
/* The same for the last batched step this cache led, and that step's graph (NULL: none). */
rb_graph_state rb_kv_cache_batch_graph_state(const rb_kv_cache *kv);
const rb_graph *rb_kv_cache_batch_graph(const rb_kv_cache *kv);
/* Why the last capture of the one-token step failed ("" if none did). */
const char *rb_kv_cache_graph_error(const rb_kv_cache *kv);
/* Test hook: one position-independent decode step of token without the
 * host-side vocabulary check (so the device-side check of a graph replay
 * can be seen). RB_E_INVALID unless the cache decodes that way. */
rb_status rb_model_decode_token(rb_model *m, rb_kv_cache *kv, int32_t token, float *logits, rb_error *err);

#endif

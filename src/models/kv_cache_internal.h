/* Internal layout of rb_kv_cache, shared by kv_cache.c and the forward pass. */
#ifndef RBEE_KV_CACHE_INTERNAL_H
#define RBEE_KV_CACHE_INTERNAL_H

#include "models/model_internal.h"

struct rb_kv_cache {
    rb_model *m;
    int64_t n_ctx;
    int64_t used;
    rb_dtype dtype;
    rb_tensor *k, *v; /* per layer [head_dim * n_kv_heads, n_ctx] */
    rb_buffer *buf;
    size_t bytes;
    /* activation scratch for forward passes of up to arena_tokens tokens */
    rb_buffer *arena;
    size_t arena_size;
    int64_t arena_tokens;
};

#endif

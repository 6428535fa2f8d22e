/* One sequence's KV cache: per layer, keys and values as [head_dim * n_kv_heads,
 * n_ctx] tensors (one row per position) in f16, bf16 or f32, plus the scratch
 * arena the forward pass uses for activations of this sequence and the graph
 * of its captured decode step. Caches made together share one buffer (their
 * pool, kv_cache_internal.h), laid out so that a layer of all of them is one
 * tensor a batched step addresses at once. A layer's key and value rows of one position
 * are adjacent ([k row | v row], so k[il] and v[il] are views with a row
 * stride of two rows): a decode step writes both with one rb_set_rows when
 * the projection put k and v side by side (fused qkv). */
#include "models/kv_cache_internal.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint_fast64_t g_next_serial = 1;

/* A cache of the pool at slot (its fields but the layer views). */
static rb_kv_cache *cache_new(rb_model *m, rb_kv_pool *pool, int64_t slot, rb_dtype dtype) {
    const rb_model_config *c = &m->cfg;
    rb_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return NULL;
    kv->m = m;
    kv->n_ctx = pool->n_ctx;
    kv->dtype = dtype;
    kv->pool = pool;
    kv->slot = slot;
    kv->serial = (uint64_t)atomic_fetch_add(&g_next_serial, 1);
    kv->decode_mode = m->eager_decode ? RB_DECODE_LEGACY : RB_DECODE_AUTO; /* eager: for comparisons */
    kv->k = calloc((size_t)c->n_layer, sizeof *kv->k);
    kv->v = calloc((size_t)c->n_layer, sizeof *kv->v);
    if (!kv->k || !kv->v) {
        free(kv->k);
        free(kv->v);
        free(kv);
        return NULL;
    }
    const int64_t row = c->head_dim * c->n_head_kv, n_ctx = pool->n_ctx;
    const size_t rb = rb_dtype_row_size(dtype, row), layer = pool->slot_bytes * (size_t)pool->n_slots;
    kv->bytes = pool->slot_bytes * (size_t)c->n_layer;
    for (int64_t il = 0; il < c->n_layer; il++) {
        const size_t at = (size_t)il * layer + (size_t)slot * pool->slot_bytes;
        rb_tensor_init4(&kv->k[il], dtype, row, n_ctx, 1, 1, pool->buf, at);
        rb_tensor_init4(&kv->v[il], dtype, row, n_ctx, 1, 1, pool->buf, at + rb);
        kv->k[il].nb[1] = kv->v[il].nb[1] = 2 * rb;
        kv->k[il].nb[2] = kv->v[il].nb[2] = kv->k[il].nb[3] = kv->v[il].nb[3] = pool->slot_bytes;
    }
    atomic_fetch_add(&pool->refs, 1);
    return kv;
}

rb_status rb_kv_cache_create_many(rb_model *m, int64_t n, int64_t n_ctx, rb_dtype dtype, rb_kv_cache **out,
                                  rb_error *err) {
    if (!m || !out) return rb_error_set(err, RB_E_INVALID, "rb_kv_cache_create: NULL argument");
    if (dtype != RB_F16 && dtype != RB_F32 && dtype != RB_BF16)
        return rb_error_set(err, RB_E_INVALID, "KV cache dtype must be f16, bf16 or f32 (got %s)", rb_dtype_name(dtype));
    if (n_ctx <= 0 || n_ctx > (1 << 24)) return rb_error_set(err, RB_E_RANGE, "context size %lld out of range",
                                                           (long long)n_ctx);
    if (n <= 0 || n > 65535 || n * n_ctx > INT32_MAX) /* pool rows are i32 on the device */
        return rb_error_set(err, RB_E_RANGE, "%lld caches of %lld positions: out of range", (long long)n,
                            (long long)n_ctx);
    const rb_model_config *c = &m->cfg;
    rb_kv_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    pool->n_slots = n;
    pool->n_ctx = n_ctx;
    pool->serial = (uint64_t)atomic_fetch_add(&g_next_serial, 1);
    atomic_init(&pool->refs, 0);
    pool->slot_bytes = 2 * rb_dtype_row_size(dtype, c->head_dim * c->n_head_kv) * (size_t)n_ctx;
    const size_t bytes = pool->slot_bytes * (size_t)n * (size_t)c->n_layer;
    rb_status s = rb_buffer_alloc(m->be, bytes, &pool->buf);
    if (s != RB_OK) {
        free(pool);
        return rb_error_set(err, s, "cannot allocate %s of %.1f MiB on %s: %s", n > 1 ? "KV caches" : "a KV cache",
                            (double)bytes / 1048576.0, rb_backend_name(m->be), rb_backend_last_error(m->be));
    }
    for (int64_t i = 0; i < n; i++) {
        out[i] = cache_new(m, pool, i, dtype);
        if (!out[i]) {
            for (int64_t j = 0; j < i; j++) rb_kv_cache_free(out[j]); /* the last one frees the pool */
            if (i == 0) {
                rb_buffer_free(pool->buf);
                free(pool);
            }
            for (int64_t j = 0; j < n; j++) out[j] = NULL;
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
    }
    return RB_OK;
}

rb_status rb_kv_cache_create(rb_model *m, int64_t n_ctx, rb_dtype dtype, rb_kv_cache **out, rb_error *err) {
    return rb_kv_cache_create_many(m, 1, n_ctx, dtype, out, err);
}

rb_tensor rb_kv_pool_rows(const rb_kv_cache *kv, int il) {
    const rb_kv_pool *pool = kv->pool;
    const rb_model_config *c = &kv->m->cfg;
    rb_tensor t;
    rb_tensor_init4(&t, kv->dtype, 2 * c->head_dim * c->n_head_kv, pool->n_ctx * pool->n_slots, 1, 1, pool->buf,
                    kv->k[il].offs - (size_t)kv->slot * pool->slot_bytes);
    return t;
}

rb_tensor rb_kv_pool_heads(const rb_kv_cache *kv, int il, bool values) {
    const rb_kv_pool *pool = kv->pool;
    const rb_model_config *c = &kv->m->cfg;
    const size_t es = rb_dtype_info((int)kv->dtype)->type_size;
    const rb_tensor *src = values ? &kv->v[il] : &kv->k[il];
    rb_tensor t;
    rb_tensor_init4(&t, kv->dtype, c->head_dim, pool->n_ctx, c->n_head_kv, pool->n_slots, pool->buf,
                    src->offs - (size_t)kv->slot * pool->slot_bytes);
    t.nb[1] = src->nb[1];
    t.nb[2] = (size_t)c->head_dim * es;
    t.nb[3] = pool->slot_bytes;
    return t;
}

void rb_decode_graph_drop(rb_decode_graph *dg) {
    rb_graph_free(dg->graph);
    free(dg->key);
    memset(dg, 0, sizeof *dg);
}

void rb_kv_cache_drop_graph(rb_kv_cache *kv) { /* before the buffers they address */
    rb_decode_graph_drop(&kv->dec);
    for (int i = 0; i < RB_BATCH_GRAPHS; i++) rb_decode_graph_drop(&kv->bat[i]);
}

void rb_kv_cache_set_decode_mode(rb_kv_cache *kv, rb_decode_mode mode) {
    rb_kv_cache_drop_graph(kv);
    kv->decode_mode = mode;
}

rb_graph_state rb_kv_cache_graph_state(const rb_kv_cache *kv) { return kv->dec.state; }
rb_graph_state rb_kv_cache_batch_graph_state(const rb_kv_cache *kv) { return kv->bat[kv->bat_last].state; }
const rb_graph *rb_kv_cache_batch_graph(const rb_kv_cache *kv) { return kv->bat[kv->bat_last].graph; }
const char *rb_kv_cache_graph_error(const rb_kv_cache *kv) { return kv->dec.error; }

void rb_kv_cache_free(rb_kv_cache *kv) {
    if (!kv) return;
    rb_kv_cache_drop_graph(kv);
    if (atomic_fetch_sub(&kv->pool->refs, 1) == 1) { /* the pool's last cache */
        rb_buffer_free(kv->pool->buf);
        free(kv->pool);
    }
    if (kv->arena) rb_buffer_free(kv->arena);
    rb_backend_host_free(kv->m->be, kv->in_host);
    rb_buffer_free(kv->out_wrap);
    free(kv->k);
    free(kv->v);
    free(kv);
}

int64_t rb_kv_cache_size(const rb_kv_cache *kv) { return kv->n_ctx; }
int64_t rb_kv_cache_used(const rb_kv_cache *kv) { return kv->used; }
void rb_kv_cache_truncate(rb_kv_cache *kv, int64_t n) {
    if (n >= 0 && n < kv->used) kv->used = n;
}
size_t rb_kv_cache_bytes(const rb_kv_cache *kv) { return kv->bytes; }

rb_status rb_kv_cache_copy_prefix(rb_kv_cache *dst, const rb_kv_cache *src, int64_t n, rb_error *err) {
    if (!dst || !src || dst->m != src->m || dst->n_ctx != src->n_ctx || dst->dtype != src->dtype)
        return rb_error_set(err, RB_E_INVALID, "rb_kv_cache_copy: the caches differ in model, size or dtype");
    if (n < 0 || n > src->used)
        return rb_error_set(err, RB_E_INVALID, "rb_kv_cache_copy_prefix: %lld positions asked, the source holds %lld",
                            (long long)n, (long long)src->used);
    if (dst == src) {
        rb_kv_cache_truncate(dst, n);
        return RB_OK;
    }
    const rb_model_config *c = &src->m->cfg;
    const size_t rb = rb_dtype_row_size(src->dtype, c->head_dim * c->n_head_kv);
    /* a layer's k and v rows alternate, so its first n positions are one run of bytes */
    const size_t bytes = 2 * rb * (size_t)n;
    for (int64_t il = 0; il < c->n_layer && bytes > 0; il++) {
        rb_status s = rb_buffer_copy(dst->pool->buf, dst->k[il].offs, src->pool->buf, src->k[il].offs, bytes);
        if (s != RB_OK) {
            dst->used = 0; /* some layers copied, others not: nothing of dst is known */
            return rb_error_set(err, s, "copying layer %lld of a KV cache: %s", (long long)il,
                                rb_backend_last_error(src->m->be));
        }
    }
    dst->used = n;
    return RB_OK;
}

rb_status rb_kv_cache_copy(rb_kv_cache *dst, const rb_kv_cache *src, rb_error *err) {
    return rb_kv_cache_copy_prefix(dst, src, src ? src->used : 0, err);
}

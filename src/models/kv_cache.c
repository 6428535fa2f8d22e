/* One sequence's KV cache: per layer, keys and values as [head_dim * n_kv_heads,
 * n_ctx] tensors (one row per position) in f16, bf16 or f32, plus the scratch
 * arena the forward pass uses for activations of this sequence and the graph
 * of its captured decode step. A layer's key and value rows of one position
 * are adjacent ([k row | v row], so k[il] and v[il] are views with a row
 * stride of two rows): a decode step writes both with one rb_set_rows when
 * the projection put k and v side by side (fused qkv). */
#include "models/kv_cache_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint_fast64_t g_next_serial = 1;

rb_status rb_kv_cache_create(rb_model *m, int64_t n_ctx, rb_dtype dtype, rb_kv_cache **out, rb_error *err) {
    if (!m || !out) return rb_error_set(err, RB_E_INVALID, "rb_kv_cache_create: NULL argument");
    if (dtype != RB_F16 && dtype != RB_F32 && dtype != RB_BF16)
        return rb_error_set(err, RB_E_INVALID, "KV cache dtype must be f16, bf16 or f32 (got %s)", rb_dtype_name(dtype));
    if (n_ctx <= 0 || n_ctx > (1 << 24)) return rb_error_set(err, RB_E_RANGE, "context size %lld out of range",
                                                           (long long)n_ctx);
    const rb_model_config *c = &m->cfg;
    rb_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    kv->m = m;
    kv->n_ctx = n_ctx;
    kv->dtype = dtype;
    kv->serial = (uint64_t)atomic_fetch_add(&g_next_serial, 1);
    kv->decode_mode = m->eager_decode ? RB_DECODE_LEGACY : RB_DECODE_AUTO; /* eager: for comparisons */
    kv->k = calloc((size_t)c->n_layer, sizeof *kv->k);
    kv->v = calloc((size_t)c->n_layer, sizeof *kv->v);
    if (!kv->k || !kv->v) {
        rb_kv_cache_free(kv);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    const int64_t row = c->head_dim * c->n_head_kv;
    const size_t per = rb_dtype_row_size(dtype, row) * (size_t)n_ctx;
    kv->bytes = per * 2 * (size_t)c->n_layer;
    rb_status s = rb_buffer_alloc(m->be, kv->bytes, &kv->buf);
    if (s != RB_OK) {
        const double mib = (double)kv->bytes / 1048576.0;
        rb_kv_cache_free(kv);
        return rb_error_set(err, s, "cannot allocate a KV cache of %.1f MiB on %s: %s", mib, rb_backend_name(m->be),
                            rb_backend_last_error(m->be));
    }
    const size_t rb = rb_dtype_row_size(dtype, row);
    for (int64_t il = 0; il < c->n_layer; il++) {
        rb_tensor_init4(&kv->k[il], dtype, row, n_ctx, 1, 1, kv->buf, (size_t)(2 * il) * per);
        rb_tensor_init4(&kv->v[il], dtype, row, n_ctx, 1, 1, kv->buf, (size_t)(2 * il) * per + rb);
        kv->k[il].nb[1] = kv->v[il].nb[1] = 2 * rb;
        kv->k[il].nb[2] = kv->v[il].nb[2] = kv->k[il].nb[3] = kv->v[il].nb[3] = 2 * rb * (size_t)n_ctx;
    }
    *out = kv;
    return RB_OK;
}

void rb_decode_graph_drop(rb_decode_graph *dg) {
    rb_graph_free(dg->graph);
    free(dg->key);
    memset(dg, 0, sizeof *dg);
}

void rb_kv_cache_drop_graph(rb_kv_cache *kv) { /* before the buffers they address */
    rb_decode_graph_drop(&kv->dec);
    rb_decode_graph_drop(&kv->bat);
}

void rb_kv_cache_set_decode_mode(rb_kv_cache *kv, rb_decode_mode mode) {
    rb_kv_cache_drop_graph(kv);
    kv->decode_mode = mode;
}

rb_graph_state rb_kv_cache_graph_state(const rb_kv_cache *kv) { return kv->dec.state; }
rb_graph_state rb_kv_cache_batch_graph_state(const rb_kv_cache *kv) { return kv->bat.state; }
const char *rb_kv_cache_graph_error(const rb_kv_cache *kv) { return kv->dec.error; }

void rb_kv_cache_free(rb_kv_cache *kv) {
    if (!kv) return;
    rb_kv_cache_drop_graph(kv);
    if (kv->buf) rb_buffer_free(kv->buf);
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

rb_status rb_kv_cache_copy(rb_kv_cache *dst, const rb_kv_cache *src, rb_error *err) {
    if (!dst || !src || dst->m != src->m || dst->n_ctx != src->n_ctx || dst->dtype != src->dtype)
        return rb_error_set(err, RB_E_INVALID, "rb_kv_cache_copy: the caches differ in model, size or dtype");
    if (dst == src) return RB_OK;
    const rb_model_config *c = &src->m->cfg;
    const size_t rb = rb_dtype_row_size(src->dtype, c->head_dim * c->n_head_kv);
    const size_t per = rb * (size_t)src->n_ctx; /* one of a layer's k or v */
    /* a layer's k and v rows alternate, so its first `used` positions are one run of bytes */
    const size_t n = 2 * rb * (size_t)src->used;
    for (int64_t il = 0; il < c->n_layer && n > 0; il++) {
        rb_status s = rb_buffer_copy(dst->buf, (size_t)(2 * il) * per, src->buf, (size_t)(2 * il) * per, n);
        if (s != RB_OK)
            return rb_error_set(err, s, "copying layer %lld of a KV cache: %s", (long long)il,
                                rb_backend_last_error(src->m->be));
    }
    dst->used = src->used;
    return RB_OK;
}

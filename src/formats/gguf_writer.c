/* GGUF v3 writer (see include/rbee/gguf.h): collects metadata (stored as
 * already-encoded value bytes) and tensor copies; rb_gguf_writer_write then
 * hands them to the one serialiser (gguf_stream.c, which the streaming
 * converters use too) and writes the copies as the tensor data. */
#include "formats/gguf_writer_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- growable byte buffer for encoding values ---- */
typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} bytes;

static void put(bytes *b, const void *src, size_t n) {
    if (b->oom || n == 0) return;
    if (n > SIZE_MAX - b->len) {
        b->oom = true;
        return;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n) cap = cap > SIZE_MAX / 2 ? b->len + n : cap * 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void put_u32(bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(bytes *b, uint64_t v) { put(b, &v, 8); }
static void put_str(bytes *b, const char *s, uint64_t len) {
    put_u64(b, len);
    put(b, s, (size_t)len);
}

rb_status rb_gguf_writer_create(rb_gguf_writer **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "gguf writer: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return rb_error_set(err, RB_E_NOMEM, "gguf writer: out of memory");
    return RB_OK;
}

void rb_gguf_writer_free(rb_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->kvs);
    free(w->tensors);
    rb_name_index_free(&w->kv_index);
    rb_name_index_free(&w->tensor_index);
    free(w);
}

/* Takes ownership of enc->p on success and on failure. */
static rb_status add_kv_len(rb_gguf_writer *w, const char *key, size_t key_len, rb_gguf_type type, bytes *enc) {
    rb_status st = RB_E_INVALID;
    char *k = NULL;
    if (!w || !key || key_len == 0 || memchr(key, 0, key_len)) goto fail;
    st = RB_E_NOMEM;
    if (enc->oom) goto fail;
    if (rb_name_index_find(&w->kv_index, key, key_len) >= 0) {
        st = RB_E_INVALID; /* keys must be unique */
        goto fail;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *q = realloc(w->kvs, cap * sizeof *q);
        if (!q) goto fail;
        w->kvs = q;
        w->cap_kv = cap;
    }
    k = malloc(key_len + 1);
    if (!k) goto fail;
    memcpy(k, key, key_len);
    k[key_len] = '\0';
    if (rb_name_index_insert(&w->kv_index, k, key_len, (int64_t)w->n_kv, NULL) != RB_OK) goto fail;
    w->kvs[w->n_kv++] = (wkv){k, type, enc->p, enc->len};
    return RB_OK;
fail:
    free(k);
    free(enc->p);
    enc->p = NULL;
    return st;
}

static rb_status add_kv(rb_gguf_writer *w, const char *key, rb_gguf_type type, bytes *enc) {
    if (!key) {
        free(enc->p);
        return RB_E_INVALID;
    }
    return add_kv_len(w, key, strlen(key), type, enc);
}

static rb_status set_scalar(rb_gguf_writer *w, const char *key, rb_gguf_type type, const void *v) {
    bytes b = {0};
    put(&b, v, rb_gguf_type_size(type));
    return add_kv(w, key, type, &b);
}

rb_status rb_gguf_writer_set_u8(rb_gguf_writer *w, const char *key, uint8_t v) {
    return set_scalar(w, key, RB_GGUF_UINT8, &v);
}
rb_status rb_gguf_writer_set_i8(rb_gguf_writer *w, const char *key, int8_t v) {
    return set_scalar(w, key, RB_GGUF_INT8, &v);
}
rb_status rb_gguf_writer_set_u16(rb_gguf_writer *w, const char *key, uint16_t v) {
    return set_scalar(w, key, RB_GGUF_UINT16, &v);
}
rb_status rb_gguf_writer_set_i16(rb_gguf_writer *w, const char *key, int16_t v) {
    return set_scalar(w, key, RB_GGUF_INT16, &v);
}
rb_status rb_gguf_writer_set_u32(rb_gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar(w, key, RB_GGUF_UINT32, &v);
}
rb_status rb_gguf_writer_set_i32(rb_gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, RB_GGUF_INT32, &v);
}
rb_status rb_gguf_writer_set_u64(rb_gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, RB_GGUF_UINT64, &v);
}
rb_status rb_gguf_writer_set_i64(rb_gguf_writer *w, const char *key, int64_t v) {
    return set_scalar(w, key, RB_GGUF_INT64, &v);
}
rb_status rb_gguf_writer_set_f32(rb_gguf_writer *w, const char *key, float v) {
    return set_scalar(w, key, RB_GGUF_FLOAT32, &v);
}
rb_status rb_gguf_writer_set_f64(rb_gguf_writer *w, const char *key, double v) {
    return set_scalar(w, key, RB_GGUF_FLOAT64, &v);
}
rb_status rb_gguf_writer_set_bool(rb_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, RB_GGUF_BOOL, &b);
}

rb_status rb_gguf_writer_set_str(rb_gguf_writer *w, const char *key, const char *v) {
    if (!v) return RB_E_INVALID;
    bytes b = {0};
    put_str(&b, v, strlen(v));
    return add_kv(w, key, RB_GGUF_STRING, &b);
}

rb_status rb_gguf_writer_set_arr(rb_gguf_writer *w, const char *key, rb_gguf_type elem_type, const void *data,
                                 uint64_t n) {
    size_t sz = rb_gguf_type_size(elem_type);
    if (sz == 0 || (n > 0 && !data) || n > SIZE_MAX / sz) return RB_E_INVALID;
    bytes b = {0};
    put_u32(&b, (uint32_t)elem_type);
    put_u64(&b, n);
    put(&b, data, (size_t)n * sz);
    return add_kv(w, key, RB_GGUF_ARRAY, &b);
}

rb_status rb_gguf_writer_set_arr_str(rb_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    if (n > 0 && !strs) return RB_E_INVALID;
    for (uint64_t i = 0; i < n; i++)
        if (!strs[i]) return RB_E_INVALID;
    bytes b = {0};
    put_u32(&b, RB_GGUF_STRING);
    put_u64(&b, n);
    for (uint64_t i = 0; i < n; i++) put_str(&b, strs[i], strlen(strs[i]));
    return add_kv(w, key, RB_GGUF_ARRAY, &b);
}

rb_status rb_gguf_writer_copy_kv(rb_gguf_writer *w, const rb_gguf *src, const char *skip_prefix) {
    if (!w || !src) return RB_E_INVALID;
    size_t skip_len = skip_prefix ? strlen(skip_prefix) : 0;
    for (int64_t i = 0; i < rb_gguf_n_kv(src); i++) {
        const rb_gguf_kv *kv = rb_gguf_kv_at(src, i);
        if (skip_len && kv->key.len >= skip_len && memcmp(kv->key.ptr, skip_prefix, skip_len) == 0) continue;
        bytes b = {0};
        if (kv->type == RB_GGUF_STRING) {
            const rb_gguf_str *s = kv->data;
            put_str(&b, s->ptr, s->len);
        } else if (kv->type == RB_GGUF_ARRAY) {
            put_u32(&b, (uint32_t)kv->arr_type);
            put_u64(&b, kv->arr_len);
            if (kv->arr_type == RB_GGUF_STRING) {
                for (uint64_t j = 0; j < kv->arr_len; j++) {
                    rb_gguf_str s = rb_gguf_arr_str(kv, j);
                    put_str(&b, s.ptr, s.len);
                }
            } else {
                put(&b, kv->data, (size_t)kv->arr_len * rb_gguf_type_size(kv->arr_type));
            }
        } else {
            put(&b, kv->data, rb_gguf_type_size(kv->type));
        }
        rb_status st = add_kv_len(w, kv->key.ptr, (size_t)kv->key.len, kv->type, &b);
        if (st != RB_OK) return st;
    }
    return RB_OK;
}

rb_status rb_gguf_writer_add_tensor(rb_gguf_writer *w, const char *name, rb_dtype dtype, int n_dims,
                                    const int64_t *ne, const void *data, size_t nbytes) {
    if (!w || !name || !*name || !ne || n_dims < 1 || n_dims > RB_MAX_DIMS || !rb_dtype_valid((int)dtype))
        return RB_E_INVALID;
    int64_t full[RB_MAX_DIMS] = {1, 1, 1, 1};
    uint64_t rows = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return RB_E_INVALID;
        full[d] = ne[d];
    }
    size_t row = rb_dtype_row_size(dtype, full[0]);
    if (row == 0 && full[0] != 0) return RB_E_INVALID; /* not whole blocks */
    for (int d = 1; d < RB_MAX_DIMS; d++) {
        if (full[d] != 0 && rows > UINT64_MAX / (uint64_t)full[d]) return RB_E_RANGE;
        rows *= (uint64_t)full[d];
    }
    if (row != 0 && rows > SIZE_MAX / row) return RB_E_RANGE;
    size_t expect = row * (size_t)rows;
    if (nbytes != expect || (nbytes > 0 && !data)) return RB_E_INVALID;
    if (rb_name_index_find(&w->tensor_index, name, strlen(name)) >= 0) return RB_E_INVALID;

    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
        wtensor *q = realloc(w->tensors, cap * sizeof *q);
        if (!q) return RB_E_NOMEM;
        w->tensors = q;
        w->cap_tensors = cap;
    }
    wtensor t = {.dtype = dtype, .n_dims = n_dims, .nbytes = nbytes};
    memcpy(t.ne, full, sizeof full);
    t.name = strdup(name);
    t.data = malloc(nbytes ? nbytes : 1);
    if (!t.name || !t.data) goto oom;
    if (nbytes) memcpy(t.data, data, nbytes);
    if (rb_name_index_insert(&w->tensor_index, t.name, strlen(t.name), (int64_t)w->n_tensors, NULL) != RB_OK)
        goto oom;
    w->tensors[w->n_tensors++] = t;
    return RB_OK;
oom:
    free(t.name);
    free(t.data);
    return RB_E_NOMEM;
}

/* ---- serialisation: through the stream (gguf_stream.c), straight to path ---- */

rb_status rb_gguf_writer_write(rb_gguf_writer *w, const char *path, size_t alignment, rb_error *err) {
    if (!w || !path) return rb_error_set(err, RB_E_INVALID, "gguf writer: writer or path is NULL");
    const size_t n = w->n_tensors;
    rb_gguf_tensor_desc *desc = calloc(n ? n : 1, sizeof *desc);
    size_t *nbytes = calloc(n ? n : 1, sizeof *nbytes);
    if (!desc || !nbytes) {
        free(desc);
        free(nbytes);
        return rb_error_set(err, RB_E_NOMEM, "gguf writer: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const wtensor *t = &w->tensors[i];
        desc[i].name = t->name;
        desc[i].dtype = t->dtype;
        desc[i].n_dims = t->n_dims;
        memcpy(desc[i].ne, t->ne, sizeof t->ne);
        nbytes[i] = t->nbytes;
    }
    rb_gguf_stream *s = NULL;
    rb_status st = rb_gguf_stream_open(w, path, NULL, alignment, desc, nbytes, n, &s, err);
    free(desc);
    free(nbytes);
    for (size_t i = 0; st == RB_OK && i < n; i++)
        st = rb_gguf_stream_write(s, w->tensors[i].data, w->tensors[i].nbytes, err);
    if (st == RB_OK) return rb_gguf_stream_finish(s, NULL, err);
    rb_gguf_stream_abort(s);
    return st;
}

/* Implementation of gguf_stream.h. The metadata is serialised once through
 * rb_gguf_writer_write into a temporary file, read back with the validating
 * reader and re-emitted key by key in front of the declared tensor infos; the
 * tensor data section is then appended tensor by tensor with the alignment
 * padding GGUF requires. */
#include "convert/gguf_stream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cv_stream {
    FILE *f;
    char *path, *part;
    size_t align;
    size_t n, next;
    size_t *nbytes;
    size_t written; /* bytes of tensor `next` written so far */
    uint64_t pos;
    int io_err;
};

static void emit(cv_stream *s, const void *p, size_t n) {
    if (s->io_err || n == 0) return;
    if (fwrite(p, 1, n, s->f) != n) s->io_err = errno ? errno : EIO;
    s->pos += n;
}
static void emit_u32(cv_stream *s, uint32_t v) { emit(s, &v, 4); }
static void emit_u64(cv_stream *s, uint64_t v) { emit(s, &v, 8); }
static void emit_str(cv_stream *s, const char *p, uint64_t n) {
    emit_u64(s, n);
    emit(s, p, (size_t)n);
}
static void emit_pad(cv_stream *s) {
    static const uint8_t zeros[64];
    size_t pad = (size_t)((s->align - s->pos % s->align) % s->align);
    while (pad > 0) {
        size_t k = pad < sizeof zeros ? pad : sizeof zeros;
        emit(s, zeros, k);
        pad -= k;
    }
}

static size_t scalar_size(rb_gguf_type t) {
    switch (t) {
    case RB_GGUF_UINT8: case RB_GGUF_INT8: case RB_GGUF_BOOL: return 1;
    case RB_GGUF_UINT16: case RB_GGUF_INT16: return 2;
    case RB_GGUF_UINT32: case RB_GGUF_INT32: case RB_GGUF_FLOAT32: return 4;
    case RB_GGUF_UINT64: case RB_GGUF_INT64: case RB_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static rb_status emit_kv(cv_stream *s, const rb_gguf_kv *kv, rb_error *err) {
    emit_str(s, kv->key.ptr, kv->key.len);
    emit_u32(s, (uint32_t)kv->type);
    if (kv->type == RB_GGUF_STRING) {
        rb_gguf_str v;
        memcpy(&v, kv->data, sizeof v);
        emit_str(s, v.ptr, v.len);
        return RB_OK;
    }
    if (kv->type != RB_GGUF_ARRAY) {
        size_t sz = scalar_size(kv->type);
        if (!sz) return rb_error_set(err, RB_E_UNSUPPORTED, "metadata key '%.*s' has type %d", (int)kv->key.len,
                                     kv->key.ptr, (int)kv->type);
        emit(s, kv->data, sz);
        return RB_OK;
    }
    emit_u32(s, (uint32_t)kv->arr_type);
    emit_u64(s, kv->arr_len);
    if (kv->arr_type == RB_GGUF_STRING) {
        for (uint64_t i = 0; i < kv->arr_len; i++) {
            rb_gguf_str v = rb_gguf_arr_str(kv, i);
            emit_str(s, v.ptr, v.len);
        }
        return RB_OK;
    }
    size_t sz = scalar_size(kv->arr_type);
    if (!sz) return rb_error_set(err, RB_E_UNSUPPORTED, "metadata key '%.*s': nested arrays are not supported",
                                 (int)kv->key.len, kv->key.ptr);
    emit(s, kv->data, (size_t)kv->arr_len * sz);
    return RB_OK;
}

static char *concat(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *r = malloc(la + lb + 1);
    if (!r) return NULL;
    memcpy(r, a, la);
    memcpy(r + la, b, lb + 1);
    return r;
}

/* Serialises meta and reads it back (the temporary file is unlinked at once;
 * the mapping stays valid). */
static rb_status read_back_meta(const char *path, rb_gguf_writer *meta, rb_gguf **g, rb_error *err) {
    char *tmp = concat(path, ".meta.tmp");
    if (!tmp) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    rb_status st = rb_gguf_writer_write(meta, tmp, 0, err);
    if (st == RB_OK) {
        st = rb_gguf_open(tmp, g, err);
        remove(tmp);
    }
    free(tmp);
    if (st == RB_OK && rb_gguf_n_tensors(*g) != 0) {
        rb_gguf_close(*g);
        *g = NULL;
        st = rb_error_set(err, RB_E_INVALID, "gguf stream: metadata writer must not hold tensors");
    }
    return st;
}

rb_status cv_stream_begin(const char *path, rb_gguf_writer *meta, const cv_tensor_desc *tensors, size_t n,
                          cv_stream **out, rb_error *err) {
    *out = NULL;
    if (!path || !meta || (n && !tensors)) return rb_error_set(err, RB_E_INVALID, "gguf stream: bad arguments");
    rb_gguf *g = NULL;
    rb_status st = read_back_meta(path, meta, &g, err);
    if (st != RB_OK) return st;
    cv_stream *s = calloc(1, sizeof *s);
    if (!s) {
        rb_gguf_close(g);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    s->align = rb_gguf_alignment(g);
    s->n = n;
    s->nbytes = calloc(n ? n : 1, sizeof *s->nbytes);
    s->path = strdup(path);
    s->part = concat(path, ".part");
    if (!s->nbytes || !s->path || !s->part) {
        st = rb_error_set(err, RB_E_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        const cv_tensor_desc *t = &tensors[i];
        uint64_t rows = 1;
        if (!t->name || !*t->name || t->n_dims < 1 || t->n_dims > RB_MAX_DIMS) {
            st = rb_error_set(err, RB_E_INVALID, "gguf stream: tensor %zu has no name or bad rank", i);
            goto fail;
        }
        for (int d = 1; d < t->n_dims; d++) rows *= (uint64_t)t->ne[d];
        size_t row = rb_dtype_row_size(t->dtype, t->ne[0]);
        if (row == 0 || rows > SIZE_MAX / row) {
            st = rb_error_set(err, RB_E_INVALID, "gguf stream: tensor '%s' rows of %lld are not whole %s blocks",
                              t->name, (long long)t->ne[0], rb_dtype_name(t->dtype));
            goto fail;
        }
        s->nbytes[i] = row * (size_t)rows;
    }
    s->f = fopen(s->part, "wb");
    if (!s->f) {
        st = rb_error_set(err, RB_E_IO, "cannot create '%s': %s", s->part, strerror(errno));
        goto fail;
    }
    setvbuf(s->f, NULL, _IOFBF, 1 << 20);
    emit(s, "GGUF", 4);
    emit_u32(s, 3);
    emit_u64(s, n);
    emit_u64(s, (uint64_t)rb_gguf_n_kv(g));
    for (int64_t i = 0; i < rb_gguf_n_kv(g); i++)
        if ((st = emit_kv(s, rb_gguf_kv_at(g, i), err)) != RB_OK) goto fail;
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        const cv_tensor_desc *t = &tensors[i];
        emit_str(s, t->name, strlen(t->name));
        emit_u32(s, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) emit_u64(s, (uint64_t)t->ne[d]);
        emit_u32(s, (uint32_t)t->dtype);
        emit_u64(s, offset);
        offset += s->nbytes[i] + (s->align - s->nbytes[i] % s->align) % s->align;
    }
    emit_pad(s);
    if (s->io_err) {
        st = rb_error_set(err, RB_E_IO, "writing '%s' failed: %s", s->part, strerror(s->io_err));
        goto fail;
    }
    rb_gguf_close(g);
    *out = s;
    return RB_OK;
fail:
    rb_gguf_close(g);
    cv_stream_abort(s);
    return st;
}

size_t cv_stream_tensor_bytes(const cv_stream *s, size_t i) { return i < s->n ? s->nbytes[i] : 0; }

rb_status cv_stream_write_part(cv_stream *s, const void *data, size_t nbytes, rb_error *err) {
    if (s->next >= s->n) return rb_error_set(err, RB_E_INVALID, "gguf stream: more tensors than declared");
    if (nbytes > s->nbytes[s->next] - s->written)
        return rb_error_set(err, RB_E_INVALID, "gguf stream: tensor %zu gets %zu more bytes, declared %zu in all",
                            s->next, s->written + nbytes, s->nbytes[s->next]);
    emit(s, data, nbytes);
    s->written += nbytes;
    if (s->written == s->nbytes[s->next]) {
        emit_pad(s);
        s->next++;
        s->written = 0;
    }
    if (s->io_err) return rb_error_set(err, RB_E_IO, "writing '%s' failed: %s", s->part, strerror(s->io_err));
    return RB_OK;
}

rb_status cv_stream_write(cv_stream *s, const void *data, size_t nbytes, rb_error *err) {
    if (s->next >= s->n) return rb_error_set(err, RB_E_INVALID, "gguf stream: more tensors than declared");
    if (s->written != 0 || nbytes != s->nbytes[s->next])
        return rb_error_set(err, RB_E_INVALID, "gguf stream: tensor %zu has %zu bytes, declared %zu", s->next,
                            nbytes, s->nbytes[s->next]);
    if (nbytes == 0) { /* nothing to write: the tensor is complete */
        emit_pad(s);
        s->next++;
        return RB_OK;
    }
    return cv_stream_write_part(s, data, nbytes, err);
}

static void stream_free(cv_stream *s) {
    free(s->nbytes);
    free(s->path);
    free(s->part);
    free(s);
}

rb_status cv_stream_finish(cv_stream *s, uint64_t *bytes_out, rb_error *err) {
    if (s->next != s->n) {
        rb_status st = rb_error_set(err, RB_E_INVALID, "gguf stream: %zu of %zu tensors written", s->next, s->n);
        cv_stream_abort(s);
        return st;
    }
    int e = s->io_err;
    if (fclose(s->f) != 0 && !e) e = errno ? errno : EIO;
    s->f = NULL;
    if (!e && rename(s->part, s->path) != 0) e = errno;
    if (e) {
        rb_status st = rb_error_set(err, RB_E_IO, "writing '%s' failed: %s", s->path, strerror(e));
        remove(s->part);
        stream_free(s);
        return st;
    }
    if (bytes_out) *bytes_out = s->pos;
    stream_free(s);
    return RB_OK;
}

void cv_stream_abort(cv_stream *s) {
    if (!s) return;
    if (s->f) {
        fclose(s->f);
        remove(s->part);
    }
    stream_free(s);
}

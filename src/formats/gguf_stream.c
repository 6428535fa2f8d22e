/* The GGUF serialiser: header, metadata and tensor infos of an
 * rb_gguf_writer, then the tensor data section tensor by tensor (or in
 * slices of one) with the alignment padding GGUF requires. Converters stream
 * through it (rb_gguf_stream_*: declared tensors, data written later, to
 * PATH.part renamed at the end), so a conversion never holds more than one
 * tensor; rb_gguf_writer_write writes its in-memory copies through it to
 * PATH. general.alignment is always written consistently with the alignment
 * the data is laid out with. */
#include "formats/gguf_writer_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rb_gguf_stream {
    FILE *f;
    char *path, *part; /* part NULL: writing path itself (rb_gguf_writer_write) */
    size_t align;
    size_t n, next;
    size_t *nbytes;
    size_t written; /* bytes of tensor `next` written so far */
    uint64_t pos;
    int io_err;
};

static void emit(rb_gguf_stream *s, const void *p, size_t n) {
    if (s->io_err || n == 0) return;
    if (fwrite(p, 1, n, s->f) != n) s->io_err = errno ? errno : EIO;
    s->pos += n;
}
static void emit_u32(rb_gguf_stream *s, uint32_t v) { emit(s, &v, 4); }
static void emit_u64(rb_gguf_stream *s, uint64_t v) { emit(s, &v, 8); }
static void emit_str(rb_gguf_stream *s, const char *p, uint64_t n) {
    emit_u64(s, n);
    emit(s, p, (size_t)n);
}
static void emit_pad(rb_gguf_stream *s) {
    static const uint8_t zeros[64];
    size_t pad = (size_t)((s->align - s->pos % s->align) % s->align);
    while (pad > 0) {
        size_t k = pad < sizeof zeros ? pad : sizeof zeros;
        emit(s, zeros, k);
        pad -= k;
    }
}

/* The file being written, and how its I/O errors are worded. */
static const char *file_of(const rb_gguf_stream *s) { return s->part ? s->part : s->path; }
static const char *prefix_of(const rb_gguf_stream *s) { return s->part ? "" : "gguf writer: "; }

/* The data alignment: requested, else a copied general.alignment, else 32;
 * need_key: the key must be added to the metadata. */
static rb_status choose_alignment(const rb_gguf_writer *w, size_t requested, size_t *align, bool *need_key,
                                  rb_error *err) {
    int64_t ki = rb_name_index_find(&w->kv_index, RB_GGUF_ALIGNMENT_KEY, strlen(RB_GGUF_ALIGNMENT_KEY));
    size_t a = requested;
    if (a == 0 && ki >= 0) { /* keep the alignment of a copied header */
        const wkv *kv = &w->kvs[ki];
        uint32_t v = 0;
        if (kv->type == RB_GGUF_UINT32 && kv->val_len == 4) memcpy(&v, kv->val, 4);
        a = v;
        if (a == 0) return rb_error_set(err, RB_E_INVALID, "gguf writer: %s must be a non-zero uint32",
                                        RB_GGUF_ALIGNMENT_KEY);
    }
    if (a == 0) a = RB_GGUF_DEFAULT_ALIGNMENT;
    if ((a & (a - 1)) != 0 || a > UINT32_MAX)
        return rb_error_set(err, RB_E_INVALID, "gguf writer: alignment %zu is not a power of two <= 2^31", a);
    *align = a;
    *need_key = ki < 0 && a != RB_GGUF_DEFAULT_ALIGNMENT;
    return RB_OK;
}

/* Header, metadata (general.alignment as the data is aligned) and tensor infos. */
static void emit_head(rb_gguf_stream *s, const rb_gguf_writer *w, bool need_key, const rb_gguf_tensor_desc *desc) {
    emit(s, RB_GGUF_MAGIC, 4);
    emit_u32(s, 3);
    emit_u64(s, s->n);
    emit_u64(s, w->n_kv + (need_key ? 1 : 0));
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *kv = &w->kvs[i];
        emit_str(s, kv->key, strlen(kv->key));
        if (strcmp(kv->key, RB_GGUF_ALIGNMENT_KEY) == 0) {
            emit_u32(s, RB_GGUF_UINT32);
            emit_u32(s, (uint32_t)s->align);
            continue;
        }
        emit_u32(s, (uint32_t)kv->type);
        emit(s, kv->val, kv->val_len);
    }
    if (need_key) {
        emit_str(s, RB_GGUF_ALIGNMENT_KEY, strlen(RB_GGUF_ALIGNMENT_KEY));
        emit_u32(s, RB_GGUF_UINT32);
        emit_u32(s, (uint32_t)s->align);
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < s->n; i++) {
        const rb_gguf_tensor_desc *t = &desc[i];
        emit_str(s, t->name, strlen(t->name));
        emit_u32(s, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) emit_u64(s, (uint64_t)t->ne[d]);
        emit_u32(s, (uint32_t)t->dtype);
        emit_u64(s, offset);
        offset += s->nbytes[i] + (s->align - s->nbytes[i] % s->align) % s->align;
    }
    emit_pad(s);
}

static void stream_free(rb_gguf_stream *s) {
    free(s->nbytes);
    free(s->path);
    free(s->part);
    free(s);
}

rb_status rb_gguf_stream_open(const rb_gguf_writer *w, const char *path, const char *part, size_t alignment,
                              const rb_gguf_tensor_desc *desc, const size_t *nbytes, size_t n, rb_gguf_stream **out,
                              rb_error *err) {
    *out = NULL;
    size_t align = 0;
    bool need_key = false;
    rb_status st = choose_alignment(w, alignment, &align, &need_key, err);
    if (st != RB_OK) return st;
    rb_gguf_stream *s = calloc(1, sizeof *s);
    if (!s) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    s->align = align;
    s->n = n;
    s->nbytes = malloc(sizeof *s->nbytes * (n ? n : 1));
    s->path = strdup(path);
    s->part = part ? strdup(part) : NULL;
    if (!s->nbytes || !s->path || (part && !s->part)) {
        stream_free(s);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    if (n) memcpy(s->nbytes, nbytes, sizeof *s->nbytes * n);
    s->f = fopen(file_of(s), "wb");
    if (!s->f) {
        st = rb_error_set(err, RB_E_IO, "%scannot create '%s': %s", prefix_of(s), file_of(s), strerror(errno));
        stream_free(s);
        return st;
    }
    if (part) setvbuf(s->f, NULL, _IOFBF, 1 << 20);
    emit_head(s, w, need_key, desc);
    if (s->io_err) {
        st = rb_error_set(err, RB_E_IO, "%swriting '%s' failed: %s", prefix_of(s), file_of(s), strerror(s->io_err));
        rb_gguf_stream_abort(s);
        return st;
    }
    *out = s;
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

rb_status rb_gguf_stream_begin(const char *path, rb_gguf_writer *meta, const rb_gguf_tensor_desc *tensors, size_t n,
                               rb_gguf_stream **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "gguf stream: out is NULL");
    *out = NULL;
    if (!path || !meta || (n && !tensors)) return rb_error_set(err, RB_E_INVALID, "gguf stream: bad arguments");
    if (meta->n_tensors != 0)
        return rb_error_set(err, RB_E_INVALID, "gguf stream: metadata writer must not hold tensors");
    size_t *nbytes = calloc(n ? n : 1, sizeof *nbytes);
    char *part = concat(path, ".part");
    rb_status st = RB_OK;
    if (!nbytes || !part) st = rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (size_t i = 0; st == RB_OK && i < n; i++) {
        const rb_gguf_tensor_desc *t = &tensors[i];
        uint64_t rows = 1;
        if (!t->name || !*t->name || t->n_dims < 1 || t->n_dims > RB_MAX_DIMS) {
            st = rb_error_set(err, RB_E_INVALID, "gguf stream: tensor %zu has no name or bad rank", i);
            break;
        }
        for (int d = 1; d < t->n_dims; d++) rows *= (uint64_t)t->ne[d];
        size_t row = rb_dtype_row_size(t->dtype, t->ne[0]);
        if (row == 0 || rows > SIZE_MAX / row) {
            st = rb_error_set(err, RB_E_INVALID, "gguf stream: tensor '%s' rows of %lld are not whole %s blocks",
                              t->name, (long long)t->ne[0], rb_dtype_name(t->dtype));
            break;
        }
        nbytes[i] = row * (size_t)rows;
    }
    if (st == RB_OK) st = rb_gguf_stream_open(meta, path, part, 0, tensors, nbytes, n, out, err);
    free(nbytes);
    free(part);
    return st;
}

size_t rb_gguf_stream_tensor_bytes(const rb_gguf_stream *s, size_t i) { return i < s->n ? s->nbytes[i] : 0; }

rb_status rb_gguf_stream_write_part(rb_gguf_stream *s, const void *data, size_t nbytes, rb_error *err) {
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
    if (s->io_err)
        return rb_error_set(err, RB_E_IO, "%swriting '%s' failed: %s", prefix_of(s), file_of(s), strerror(s->io_err));
    return RB_OK;
}

rb_status rb_gguf_stream_write(rb_gguf_stream *s, const void *data, size_t nbytes, rb_error *err) {
    if (s->next >= s->n) return rb_error_set(err, RB_E_INVALID, "gguf stream: more tensors than declared");
    if (s->written != 0 || nbytes != s->nbytes[s->next])
        return rb_error_set(err, RB_E_INVALID, "gguf stream: tensor %zu has %zu bytes, declared %zu", s->next,
                            nbytes, s->nbytes[s->next]);
    if (nbytes == 0) { /* nothing to write: the tensor is complete */
        emit_pad(s);
        s->next++;
        return RB_OK;
    }
    return rb_gguf_stream_write_part(s, data, nbytes, err);
}

rb_status rb_gguf_stream_finish(rb_gguf_stream *s, uint64_t *bytes_out, rb_error *err) {
    if (s->next != s->n) {
        rb_status st = rb_error_set(err, RB_E_INVALID, "gguf stream: %zu of %zu tensors written", s->next, s->n);
        rb_gguf_stream_abort(s);
        return st;
    }
    int e = s->io_err;
    if (fclose(s->f) != 0 && !e) e = errno ? errno : EIO;
    s->f = NULL;
    if (!e && s->part && rename(s->part, s->path) != 0) e = errno;
    if (e) {
        rb_status st = rb_error_set(err, RB_E_IO, "%swriting '%s' failed: %s", prefix_of(s), s->path, strerror(e));
        remove(file_of(s));
        stream_free(s);
        return st;
    }
    if (bytes_out) *bytes_out = s->pos;
    stream_free(s);
    return RB_OK;
}

void rb_gguf_stream_abort(rb_gguf_stream *s) {
    if (!s) return;
    if (s->f) {
        fclose(s->f);
        remove(file_of(s));
    }
    stream_free(s);
}

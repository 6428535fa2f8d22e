/* Memory front-ends of include/rbee/backend.h: they check every argument
 * (NULLs, ranges, ownership) and then call the backend's vtable, so backend
 * implementations only ever see valid requests. Also the small accessors
 * (name, kind, last error), rb_backend_fail, the error recorder, the host
 * memory a backend copies fastest (rb_backend_host_alloc), and the graph
 * capture front-ends (which refuse host copies during a capture). */
#include "core/backend_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rb_status rb_backend_fail(rb_backend *be, rb_status code, const char *fmt, ...) {
    if (!be) return code;
    if (be->capturing && be->capture_status == RB_OK) be->capture_status = code; /* the graph is incomplete */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(be->last_error, sizeof be->last_error, fmt, ap);
    va_end(ap);
    return code;
}

void rb_backend_destroy(rb_backend *be) {
    if (be && be->vt && be->vt->destroy) be->vt->destroy(be);
}

const char *rb_backend_name(const rb_backend *be) { return be ? be->name : "(null)"; }

rb_device_kind rb_backend_kind(const rb_backend *be) { return be ? be->kind : RB_DEVICE_CPU; }

const char *rb_backend_last_error(const rb_backend *be) { return be ? be->last_error : "no backend"; }

rb_status rb_backend_device_info(rb_backend *be, rb_device_info *info) {
    if (!be) return RB_E_INVALID;
    if (!info) return rb_backend_fail(be, RB_E_INVALID, "rb_backend_device_info: info is NULL");
    return be->vt->device_info(be, info);
}

/* Host-side memory calls would break a graph capture (they synchronize or
 * copy from pageable memory): refuse them with a clear message instead. */
static rb_status not_capturing(rb_backend *be, const char *fn) {
    if (!be->capturing) return RB_OK;
    return rb_backend_fail(be, RB_E_INVALID, "%s is not allowed while a graph is being captured on %s", fn,
                           be->name);
}

rb_status rb_backend_sync(rb_backend *be) {
    if (!be) return RB_E_INVALID;
    rb_status s = not_capturing(be, "rb_backend_sync");
    if (s != RB_OK) return s;
    return be->vt->sync(be);
}

/* ---- host memory ---- */

/* rb_backend_host_alloc's blocks start with this header, one alignment unit
 * long, saying who frees them. */
#define HOST_ALIGN 64
#define HOST_MAGIC 0x72626565686f7374ull /* "rbeehost" */
typedef struct host_hdr {
    uint64_t magic;
    uint64_t pinned; /* from the backend's host_alloc: its host_free frees it */
} host_hdr;

void *rb_backend_host_alloc(rb_backend *be, size_t size) {
    if (!be || size > SIZE_MAX - 2 * HOST_ALIGN) return NULL;
    const size_t n = (size + 2 * HOST_ALIGN - 1) & ~(size_t)(HOST_ALIGN - 1); /* header + size, whole units */
    char *raw = NULL;
    bool pinned = false;
    /* page-locked allocation is not a stream operation, but it may
     * synchronize the device: not while capturing */
    if (be->vt->host_alloc && be->vt->host_free && !be->capturing) {
        raw = be->vt->host_alloc(be, n);
        pinned = raw != NULL;
    }
    if (!raw) raw = aligned_alloc(HOST_ALIGN, n);
    if (!raw) return NULL;
    host_hdr *h = (host_hdr *)raw;
    h->magic = HOST_MAGIC;
    h->pinned = pinned;
    return raw + HOST_ALIGN;
}

void rb_backend_host_free(rb_backend *be, void *p) {
    if (!p) return;
    char *raw = (char *)p - HOST_ALIGN;
    host_hdr *h = (host_hdr *)raw;
    if (h->magic != HOST_MAGIC) { /* not ours: leaking is safer than freeing it */
        fprintf(stderr, "rbee: rb_backend_host_free: %p was not allocated by rb_backend_host_alloc\n", p);
        return;
    }
    h->magic = 0;
    if (h->pinned && be && be->vt->host_free) be->vt->host_free(be, raw);
    else if (!h->pinned) free(raw);
}

/* ---- graphs ---- */

bool rb_backend_graphs_supported(const rb_backend *be) { return be && be->graph_vt; }
bool rb_backend_batch_invariant(const rb_backend *be) { return be && be->batch_invariant; }
bool rb_backend_row_exact_products(const rb_backend *be) { return be && be->row_exact; }

rb_status rb_backend_capture_begin(rb_backend *be) {
    if (!be) return RB_E_INVALID;
    if (!be->graph_vt)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "graph capture is not supported on the %s backend", be->name);
    if (be->capturing) { /* refused, but the capture under way lost nothing: it stays valid */
        const rb_status keep = be->capture_status;
        rb_backend_fail(be, RB_E_INVALID, "rb_backend_capture_begin: a capture is already under way on %s", be->name);
        be->capture_status = keep;
        return RB_E_INVALID;
    }
    rb_status s = be->graph_vt->capture_begin(be);
    if (s == RB_OK) {
        be->capturing = true;
        be->capture_status = RB_OK;
    }
    return s;
}

rb_status rb_backend_capture_end(rb_backend *be, rb_graph **out) {
    if (!be) return RB_E_INVALID;
    if (out) *out = NULL;
    if (!be->capturing)
        return rb_backend_fail(be, RB_E_INVALID, "rb_backend_capture_end: no capture under way on %s", be->name);
    rb_graph *g = calloc(1, sizeof *g);
    if (g) g->backend = be;
    /* an op failed while capturing: the graph would miss it, so it is discarded */
    const rb_status failed = be->capture_status;
    char why[RB_ERROR_MSG_MAX];
    snprintf(why, sizeof why, "%s", be->last_error);
    /* always end the backend's capture, even when the graph cannot be kept */
    rb_status s = be->graph_vt->capture_end(be, failed == RB_OK ? g : NULL);
    be->capturing = false;
    if (!g) return rb_backend_fail(be, RB_E_NOMEM, "out of host memory for a graph");
    if (failed != RB_OK) {
        free(g);
        return rb_backend_fail(be, failed, "graph capture on %s discarded: an op failed during it (%s)", be->name,
                               why);
    }
    if (s == RB_OK && !out) {
        be->graph_vt->free(be, g);
        s = rb_backend_fail(be, RB_E_INVALID, "rb_backend_capture_end: out is NULL");
    }
    if (s != RB_OK) {
        free(g);
        return s;
    }
    *out = g;
    return RB_OK;
}

rb_status rb_graph_launch(rb_graph *g) {
    if (!g) return RB_E_INVALID;
    rb_backend *be = g->backend;
    rb_status s = not_capturing(be, "rb_graph_launch");
    if (s != RB_OK) return s;
    return be->graph_vt->launch(be, g);
}

void rb_graph_free(rb_graph *g) {
    if (!g) return;
    g->backend->graph_vt->free(g->backend, g);
    free(g);
}

/* ---- buffers ---- */

static rb_status new_buffer(rb_backend *be, size_t size, rb_buffer **out) {
    rb_buffer *buf = calloc(1, sizeof *buf);
    if (!buf) return rb_backend_fail(be, RB_E_NOMEM, "out of host memory for a buffer descriptor");
    buf->backend = be;
    buf->size = size;
    *out = buf;
    return RB_OK;
}

rb_status rb_buffer_alloc(rb_backend *be, size_t size, rb_buffer **out) {
    if (!be) return RB_E_INVALID;
    if (!out) return rb_backend_fail(be, RB_E_INVALID, "rb_buffer_alloc: out is NULL");
    *out = NULL;
    rb_status s = not_capturing(be, "rb_buffer_alloc");
    if (s != RB_OK) return s;
    rb_buffer *buf = NULL;
    s = new_buffer(be, size, &buf);
    if (s != RB_OK) return s;
    buf->owned = true;
    s = be->vt->buffer_alloc(be, buf, size);
    if (s != RB_OK) {
        free(buf);
        return s;
    }
    *out = buf;
    return RB_OK;
}

/* A buffer over caller memory ptr: fill is the backend's buffer_from_host
 * (a copy on GPUs) or buffer_wrap_host (in place; ptr required). */
typedef rb_status (*host_fill_fn)(rb_backend *be, rb_buffer *buf, void *ptr, size_t size);
static rb_status host_buffer(rb_backend *be, void *ptr, size_t size, rb_buffer **out, host_fill_fn fill, bool wrap,
                             const char *what) {
    if (!be) return RB_E_INVALID;
    if (!out) return rb_backend_fail(be, RB_E_INVALID, "%s: out is NULL", what);
    *out = NULL;
    if (!ptr && (wrap || size > 0)) return rb_backend_fail(be, RB_E_INVALID, "%s: ptr is NULL", what);
    if (!fill) return rb_backend_fail(be, RB_E_UNSUPPORTED, "%s: %s cannot address host memory", what, be->name);
    rb_status s = not_capturing(be, what);
    if (s != RB_OK) return s;
    rb_buffer *buf = NULL;
    s = new_buffer(be, size, &buf);
    if (s != RB_OK) return s;
    s = fill(be, buf, ptr, size);
    if (s != RB_OK) {
        free(buf);
        return s;
    }
    if (wrap) buf->owned = false;
    *out = buf;
    return RB_OK;
}

rb_status rb_buffer_from_host(rb_backend *be, void *ptr, size_t size, rb_buffer **out) {
    return host_buffer(be, ptr, size, out, be ? be->vt->buffer_from_host : NULL, false, "rb_buffer_from_host");
}

rb_status rb_buffer_wrap_host(rb_backend *be, void *ptr, size_t size, rb_buffer **out) {
    return host_buffer(be, ptr, size, out, be ? be->vt->buffer_wrap_host : NULL, true, "rb_buffer_wrap_host");
}

void rb_buffer_free(rb_buffer *buf) {
    if (!buf) return;
    buf->backend->vt->buffer_free(buf->backend, buf);
    free(buf);
}

size_t rb_buffer_size(const rb_buffer *buf) { return buf ? buf->size : 0; }
rb_backend *rb_buffer_backend(const rb_buffer *buf) { return buf ? buf->backend : NULL; }
void *rb_buffer_host_ptr(const rb_buffer *buf) { return buf ? buf->host_ptr : NULL; }

/* offs + n within size, without overflow. */
static bool range_ok(size_t size, size_t offs, size_t n) { return offs <= size && n <= size - offs; }

/* The checks of a write of n bytes from src into buf at offs. */
static rb_status set_ok(const rb_buffer *buf, size_t offs, const void *src, size_t n, const char *what) {
    rb_backend *be = buf->backend;
    if (!src && n > 0) return rb_backend_fail(be, RB_E_INVALID, "%s: src is NULL", what);
    if (!range_ok(buf->size, offs, n))
        return rb_backend_fail(be, RB_E_RANGE, "%s: bytes [%zu, +%zu) outside buffer of %zu bytes", what, offs, n,
                               buf->size);
    if (buf->constant) return rb_backend_fail(be, RB_E_INVALID, "%s: the buffer is constant", what);
    return RB_OK;
}

rb_status rb_buffer_set(rb_buffer *buf, size_t offs, const void *src, size_t n) {
    if (!buf) return RB_E_INVALID;
    rb_backend *be = buf->backend;
    rb_status s = set_ok(buf, offs, src, n, "rb_buffer_set");
    if (s != RB_OK || n == 0) return s;
    s = not_capturing(be, "rb_buffer_set");
    if (s != RB_OK) return s;
    return be->vt->buffer_set(be, buf, offs, src, n);
}

rb_status rb_buffer_set_queued(rb_buffer *buf, size_t offs, const void *src, size_t n) {
    if (!buf) return RB_E_INVALID;
    rb_backend *be = buf->backend;
    rb_status s = set_ok(buf, offs, src, n, "rb_buffer_set_queued");
    if (s != RB_OK || n == 0) return s;
    if (be->vt->buffer_set_queued) return be->vt->buffer_set_queued(be, buf, offs, src, n);
    s = not_capturing(be, "rb_buffer_set_queued");
    if (s != RB_OK) return s;
    return be->vt->buffer_set(be, buf, offs, src, n);
}

rb_status rb_buffer_set_constant(rb_buffer *buf) {
    if (!buf) return RB_E_INVALID;
    buf->constant = true;
    return RB_OK;
}

bool rb_buffer_is_constant(const rb_buffer *buf) { return buf && buf->constant; }

rb_status rb_buffer_get(const rb_buffer *buf, size_t offs, void *dst, size_t n) {
    if (!buf) return RB_E_INVALID;
    rb_backend *be = buf->backend;
    if (!dst && n > 0) return rb_backend_fail(be, RB_E_INVALID, "rb_buffer_get: dst is NULL");
    if (!range_ok(buf->size, offs, n))
        return rb_backend_fail(be, RB_E_RANGE, "rb_buffer_get: bytes [%zu, +%zu) outside buffer of %zu bytes",
                               offs, n, buf->size);
    if (n == 0) return RB_OK;
    rb_status s = not_capturing(be, "rb_buffer_get");
    if (s != RB_OK) return s;
    return be->vt->buffer_get(be, buf, offs, dst, n);
}

rb_status rb_buffer_copy(rb_buffer *dst, size_t dst_offs, const rb_buffer *src, size_t src_offs, size_t n) {
    if (!dst || !src) return RB_E_INVALID;
    rb_backend *be = dst->backend;
    if (dst->constant) return rb_backend_fail(be, RB_E_INVALID, "rb_buffer_copy: the destination buffer is constant");
    if (!range_ok(dst->size, dst_offs, n) || !range_ok(src->size, src_offs, n))
        return rb_backend_fail(be, RB_E_RANGE,
                               "rb_buffer_copy: %zu bytes from offset %zu (of %zu) to offset %zu (of %zu) out of range",
                               n, src_offs, src->size, dst_offs, dst->size);
    if (n == 0) return RB_OK;
    if (src->backend == be) return be->vt->buffer_copy(be, dst, dst_offs, src, src_offs, n);
    /* across backends: go through host memory */
    rb_status s = not_capturing(be, "rb_buffer_copy across backends");
    if (s == RB_OK) s = not_capturing(src->backend, "rb_buffer_copy across backends");
    if (s != RB_OK) return s;
    if (src->host_ptr) return be->vt->buffer_set(be, dst, dst_offs, (const char *)src->host_ptr + src_offs, n);
    if (dst->host_ptr)
        return src->backend->vt->buffer_get(src->backend, src, src_offs, (char *)dst->host_ptr + dst_offs, n);
    void *tmp = malloc(n);
    if (!tmp) return rb_backend_fail(be, RB_E_NOMEM, "rb_buffer_copy: no host memory for %zu bytes", n);
    s = src->backend->vt->buffer_get(src->backend, src, src_offs, tmp, n);
    if (s == RB_OK) s = be->vt->buffer_set(be, dst, dst_offs, tmp, n);
    free(tmp);
    return s;
}

/* ---- whole tensors ---- */

rb_status rb_tensor_alloc(rb_backend *be, rb_dtype dtype, int ndim, const int64_t *ne, rb_tensor *out) {
    if (!be) return RB_E_INVALID;
    if (!out) return rb_backend_fail(be, RB_E_INVALID, "rb_tensor_alloc: out is NULL");
    rb_tensor t;
    if (rb_tensor_init(&t, dtype, ndim, ne, NULL, 0) != RB_OK)
        return rb_backend_fail(be, RB_E_INVALID,
                               "rb_tensor_alloc: bad shape for dtype %s (ndim %d, extents must be >= 0 and "
                               "ne[0] a multiple of the block size)",
                               rb_dtype_name(dtype), ndim);
    size_t bytes = rb_tensor_nbytes_contig(&t);
    rb_status s = rb_buffer_alloc(be, bytes, &t.buf);
    if (s != RB_OK) return s;
    *out = t;
    return RB_OK;
}

void rb_tensor_free(rb_tensor *t) {
    if (!t) return;
    rb_buffer_free(t->buf);
    t->buf = NULL;
}

static rb_status check_whole(const rb_tensor *t, size_t n, const char *fn) {
    if (!t || !t->buf) return RB_E_INVALID;
    rb_backend *be = t->buf->backend;
    if (!rb_dtype_info((int)t->dtype)) return rb_backend_fail(be, RB_E_INVALID, "%s: invalid dtype", fn);
    char d[96];
    if (!rb_tensor_is_contiguous(t))
        return rb_backend_fail(be, RB_E_INVALID, "%s: tensor %s is not contiguous", fn,
                               rb_tensor_describe(t, d, sizeof d));
    size_t bytes = rb_tensor_nbytes_contig(t);
    if (n != bytes)
        return rb_backend_fail(be, RB_E_INVALID, "%s: %zu bytes given, tensor %s holds %zu", fn, n,
                               rb_tensor_describe(t, d, sizeof d), bytes);
    if (!range_ok(t->buf->size, t->offs, bytes))
        return rb_backend_fail(be, RB_E_RANGE, "%s: tensor %s at offset %zu lies outside its buffer of %zu bytes",
                               fn, rb_tensor_describe(t, d, sizeof d), t->offs, t->buf->size);
    return RB_OK;
}

rb_status rb_tensor_set(rb_tensor *t, const void *src, size_t n) {
    rb_status s = check_whole(t, n, "rb_tensor_set");
    if (s != RB_OK) return s;
    return rb_buffer_set(t->buf, t->offs, src, n);
}

rb_status rb_tensor_get(const rb_tensor *t, void *dst, size_t n) {
    rb_status s = check_whole(t, n, "rb_tensor_get");
    if (s != RB_OK) return s;
    return rb_buffer_get(t->buf, t->offs, dst, n);
}

/* Tensor descriptors and views (see include/rbee/tensor.h): shape/stride
 * bookkeeping only; no memory is touched here. */
#include "rbee/tensor.h"

#include <stdio.h>
#include <string.h>

static bool mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

rb_status rb_tensor_init(rb_tensor *t, rb_dtype dtype, int ndim, const int64_t *ne, rb_buffer *buf, size_t offs) {
    const rb_dtype_traits *tr = rb_dtype_info((int)dtype);
    if (!t || !tr || ndim < 1 || ndim > RB_MAX_DIMS || !ne) return RB_E_INVALID;
    rb_tensor r;
    memset(&r, 0, sizeof r);
    r.dtype = dtype;
    for (int i = 0; i < RB_MAX_DIMS; i++) r.ne[i] = i < ndim ? ne[i] : 1;
    for (int i = 0; i < RB_MAX_DIMS; i++)
        if (r.ne[i] < 0) return RB_E_INVALID;
    if (r.ne[0] % tr->block_size != 0) return RB_E_INVALID;
    r.nb[0] = tr->type_size;
    size_t row = 0;
    if (!mul_ok(tr->type_size, (size_t)(r.ne[0] / tr->block_size), &row)) return RB_E_INVALID;
    r.nb[1] = row;
    for (int i = 2; i < RB_MAX_DIMS; i++)
        if (!mul_ok(r.nb[i - 1], (size_t)r.ne[i - 1], &r.nb[i])) return RB_E_INVALID;
    size_t total;
    if (!mul_ok(r.nb[3], (size_t)r.ne[3], &total)) return RB_E_INVALID;
    r.buf = buf;
    r.offs = offs;
    *t = r;
    return RB_OK;
}

rb_status rb_tensor_init4(rb_tensor *t, rb_dtype dtype, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                          rb_buffer *buf, size_t offs) {
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    return rb_tensor_init(t, dtype, 4, ne, buf, offs);
}

int64_t rb_tensor_nelements(const rb_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }
int64_t rb_tensor_nrows(const rb_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

int rb_tensor_ndim(const rb_tensor *t) {
    for (int i = RB_MAX_DIMS - 1; i > 0; i--)
        if (t->ne[i] > 1) return i + 1;
    return 1;
}

size_t rb_tensor_span(const rb_tensor *t) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t->dtype);
    if (!tr) return 0;
    for (int i = 0; i < RB_MAX_DIMS; i++)
        if (t->ne[i] == 0) return 0;
    /* last element's offset + its size */
    size_t last = (size_t)(t->ne[0] / tr->block_size - 1) * t->nb[0];
    for (int i = 1; i < RB_MAX_DIMS; i++) last += (size_t)(t->ne[i] - 1) * t->nb[i];
    return last + tr->type_size;
}

size_t rb_tensor_nbytes_contig(const rb_tensor *t) {
    size_t row = rb_dtype_row_size(t->dtype, t->ne[0]);
    return row * (size_t)rb_tensor_nrows(t);
}

bool rb_tensor_rows_contiguous(const rb_tensor *t) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t->dtype);
    return tr && (t->nb[0] == tr->type_size || t->ne[0] == tr->block_size);
}

bool rb_tensor_is_contiguous(const rb_tensor *t) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t->dtype);
    if (!tr) return false;
    size_t expect = tr->type_size;
    int64_t n = t->ne[0] / tr->block_size;
    /* dims of extent 1 may carry any stride */
    if (n > 1 && t->nb[0] != expect) return false;
    expect *= (size_t)n;
    for (int i = 1; i < RB_MAX_DIMS; i++) {
        if (t->ne[i] > 1 && t->nb[i] != expect) return false;
        expect *= (size_t)t->ne[i];
    }
    return true;
}

bool rb_tensor_same_shape(const rb_tensor *a, const rb_tensor *b) {
    for (int i = 0; i < RB_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i]) return false;
    return true;
}

bool rb_tensor_can_broadcast(const rb_tensor *b, const rb_tensor *a) {
    for (int i = 0; i < RB_MAX_DIMS; i++)
        if (b->ne[i] != a->ne[i] && b->ne[i] != 1) return false;
    return true;
}

rb_status rb_tensor_slice(const rb_tensor *src, int dim, int64_t start, int64_t len, rb_tensor *out) {
    if (!src || !out || dim < 0 || dim >= RB_MAX_DIMS || start < 0 || len < 0 || start > src->ne[dim] ||
        len > src->ne[dim] - start)
        return RB_E_INVALID;
    const rb_dtype_traits *tr = rb_dtype_info((int)src->dtype);
    if (!tr) return RB_E_INVALID;
    rb_tensor r = *src;
    if (dim == 0) {
        if (start % tr->block_size || len % tr->block_size) return RB_E_INVALID;
        r.offs += (size_t)(start / tr->block_size) * src->nb[0];
    } else {
        r.offs += (size_t)start * src->nb[dim];
    }
    r.ne[dim] = len;
    *out = r;
    return RB_OK;
}

rb_status rb_tensor_permute(const rb_tensor *src, const int perm[RB_MAX_DIMS], rb_tensor *out) {
    if (!src || !perm || !out) return RB_E_INVALID;
    int seen[RB_MAX_DIMS] = {0};
    for (int i = 0; i < RB_MAX_DIMS; i++) {
        if (perm[i] < 0 || perm[i] >= RB_MAX_DIMS || seen[perm[i]]) return RB_E_INVALID;
        seen[perm[i]] = 1;
    }
    const rb_dtype_traits *tr = rb_dtype_info((int)src->dtype);
    if (!tr) return RB_E_INVALID;
    if (tr->block_size > 1 && perm[0] != 0) return RB_E_INVALID;
    rb_tensor r = *src;
    for (int i = 0; i < RB_MAX_DIMS; i++) {
        r.ne[i] = src->ne[perm[i]];
        r.nb[i] = src->nb[perm[i]];
    }
    *out = r;
    return RB_OK;
}

rb_status rb_tensor_transpose(const rb_tensor *src, rb_tensor *out) {
    static const int perm[RB_MAX_DIMS] = {1, 0, 2, 3};
    return rb_tensor_permute(src, perm, out);
}

rb_status rb_tensor_reshape(const rb_tensor *src, int ndim, const int64_t *ne, rb_tensor *out) {
    if (!src || !out || !rb_tensor_is_contiguous(src)) return RB_E_INVALID;
    rb_tensor r;
    rb_status s = rb_tensor_init(&r, src->dtype, ndim, ne, src->buf, src->offs);
    if (s != RB_OK) return s;
    if (rb_tensor_nelements(&r) != rb_tensor_nelements(src)) return RB_E_INVALID;
    *out = r;
    return RB_OK;
}

const char *rb_tensor_describe(const rb_tensor *t, char *buf, size_t len) {
    if (!buf || len == 0) return "";
    snprintf(buf, len, "%s[%lld,%lld,%lld,%lld]", rb_dtype_name(t->dtype), (long long)t->ne[0],
             (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    return buf;
}

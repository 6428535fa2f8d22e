/* Tensors: a typed, strided view into a backend buffer. Up to 4 dimensions in
 * ggml order: ne[0] is the innermost (fastest-varying) dimension, so a matrix
 * of R rows and C columns has ne = {C, R, 1, 1}. nb[] are byte strides; for
 * block-quantized dtypes nb[0] is the block size in bytes and rows must be
 * whole blocks. A tensor is a small value type that does not own memory;
 * views (slices, permutes, reshapes) are new rb_tensor values over the same
 * buffer. */
#ifndef RBEE_TENSOR_H
#define RBEE_TENSOR_H

#include "rbee/dtype.h"
#include "rbee/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RB_MAX_DIMS 4

typedef struct rb_buffer rb_buffer;   /* backend memory, see backend.h */
typedef struct rb_backend rb_backend; /* see backend.h */

typedef struct rb_tensor {
    rb_dtype dtype;
    int64_t ne[RB_MAX_DIMS]; /* extent of each dim; unused dims are 1 */
    size_t nb[RB_MAX_DIMS];  /* byte stride of each dim */
    rb_buffer *buf;          /* NULL for a shape-only descriptor */
    size_t offs;             /* byte offset of element 0 in buf */
} rb_tensor;

/* Fills t as a contiguous tensor of the given shape (ndim 1..4, trailing dims
 * set to 1) at byte offset offs of buf. Fails (RB_E_INVALID) on a bad dtype,
 * negative extent, ne[0] not a multiple of the block size, or overflow. buf
 * may be NULL to describe a shape only. */
rb_status rb_tensor_init(rb_tensor *t, rb_dtype dtype, int ndim, const int64_t *ne, rb_buffer *buf,
                         size_t offs);
/* Convenience for ndim <= 4 given as separate extents (pass 1 for unused). */
rb_status rb_tensor_init4(rb_tensor *t, rb_dtype dtype, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                          rb_buffer *buf, size_t offs);

int64_t rb_tensor_nelements(const rb_tensor *t);
int64_t rb_tensor_nrows(const rb_tensor *t); /* ne1*ne2*ne3 */
int rb_tensor_ndim(const rb_tensor *t);      /* index of last dim > 1, plus one (>= 1) */
/* Bytes from the first to one past the last element (the span a view touches). */
size_t rb_tensor_span(const rb_tensor *t);
/* Bytes of a contiguous tensor of this shape. */
size_t rb_tensor_nbytes_contig(const rb_tensor *t);
bool rb_tensor_is_contiguous(const rb_tensor *t);
/* Rows (dim 0) are contiguous, i.e. nb[0] == element/block size. */
bool rb_tensor_rows_contiguous(const rb_tensor *t);
bool rb_tensor_same_shape(const rb_tensor *a, const rb_tensor *b);
/* b can be broadcast to a: for each dim, b->ne[i] == a->ne[i] or b->ne[i] == 1. */
bool rb_tensor_can_broadcast(const rb_tensor *b, const rb_tensor *a);

/* Views. Each writes *out and leaves src unchanged; RB_E_INVALID on bad args. */
/* Elements [start, start+len) of dimension dim. For quantized dtypes and
 * dim 0, start and len must be multiples of the block size. */
rb_status rb_tensor_slice(const rb_tensor *src, int dim, int64_t start, int64_t len, rb_tensor *out);
/* out->ne[i] = src->ne[perm[i]] (and strides likewise); perm is a permutation of 0..3.
 * Quantized tensors cannot move dim 0. */
rb_status rb_tensor_permute(const rb_tensor *src, const int perm[RB_MAX_DIMS], rb_tensor *out);
/* Swaps dims 0 and 1 (plain dtypes only). */
rb_status rb_tensor_transpose(const rb_tensor *src, rb_tensor *out);
/* New shape with the same element count; src must be contiguous. */
rb_status rb_tensor_reshape(const rb_tensor *src, int ndim, const int64_t *ne, rb_tensor *out);

/* Formats "f32[4,3,1,1]" (ggml order) into buf; returns buf. */
const char *rb_tensor_describe(const rb_tensor *t, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif

/* The per-tensor transforms llama.cpp's converter applies, as plain
 * functions on f32 rows: the q/k row permutation that turns Hugging Face's
 * rotate-half rope layout into adjacent pairs, gemma's (1 + w) norms, and
 * the final encode of f32 rows into the output type. */
#ifndef RBEE_CONVERT_TENSOR_XFORM_H
#define RBEE_CONVERT_TENSOR_XFORM_H

#include "rbee/dtype.h"
#include "rbee/status.h"

#include <stddef.h>
#include <stdint.h>

/* Reorders the rows of w (n_head heads of head_dim rows, each row ne0 floats):
 * within every head, row 2i+j of the result is row j*n_rot/2 + i of the input
 * for i < n_rot/2 (rows >= n_rot stay). tmp holds head_dim * ne0 floats. */
rb_status cv_permute_rope_rows(float *w, int64_t ne0, int64_t n_head, int64_t head_dim, int64_t n_rot, float *tmp);

/* x[i] += 1 for the n values. */
void cv_add_one(float *x, int64_t n);

/* Encodes rows of f32 into dtype t (dst holds rb_dtype_row_size(t, ne0) * rows). */
rb_status cv_encode_rows(rb_dtype t, const float *src, int64_t ne0, int64_t rows, void *dst);

/* A growable scratch buffer. */
typedef struct cv_buf {
    void *p;
    size_t cap;
} cv_buf;
/* Ensures at least n bytes; RB_E_NOMEM on failure. */
rb_status cv_buf_reserve(cv_buf *b, size_t n);
void cv_buf_free(cv_buf *b);

#endif

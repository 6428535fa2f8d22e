/* Implementation of tensor_xform.h. */
#include "convert/tensor_xform.h"

#include "rbee/quant.h"

#include <stdlib.h>
#include <string.h>

rb_status cv_permute_rope_rows(float *w, int64_t ne0, int64_t n_head, int64_t head_dim, int64_t n_rot, float *tmp) {
    if (ne0 <= 0 || n_head <= 0 || head_dim <= 0 || n_rot <= 0 || n_rot > head_dim || n_rot % 2) return RB_E_INVALID;
    const int64_t half = n_rot / 2;
    const size_t row = sizeof(float) * (size_t)ne0;
    for (int64_t h = 0; h < n_head; h++) {
        float *head = w + (size_t)(h * head_dim) * (size_t)ne0;
        memcpy(tmp, head, row * (size_t)n_rot);
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++)
                memcpy(head + (size_t)(2 * i + j) * (size_t)ne0, tmp + (size_t)(j * half + i) * (size_t)ne0, row);
    }
    return RB_OK;
}

void cv_add_one(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += 1.0f;
}

rb_status cv_encode_rows(rb_dtype t, const float *src, int64_t ne0, int64_t rows, void *dst) {
    if (t == RB_F32) {
        memcpy(dst, src, sizeof(float) * (size_t)ne0 * (size_t)rows);
        return RB_OK;
    }
    return rb_quantize_rows(t, src, dst, rows, ne0);
}

rb_status cv_buf_reserve(cv_buf *b, size_t n) {
    if (n <= b->cap) return RB_OK;
    void *p = realloc(b->p, n);
    if (!p) return RB_E_NOMEM;
    b->p = p;
    b->cap = n;
    return RB_OK;
}

void cv_buf_free(cv_buf *b) {
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}

/* Implementation of mm_testlib.h. */
#include "mm_testlib.h"

#include <math.h>
#include <stdlib.h>

const rb_dtype mm_weight_dtypes[] = {RB_F32,  RB_F16,  RB_BF16, RB_Q4_0, RB_Q4_1, RB_Q5_0, RB_Q5_1,
                                     RB_Q8_0, RB_Q2_K, RB_Q3_K, RB_Q4_K, RB_Q5_K, RB_Q6_K, RB_MXFP4};
const int mm_n_weight_dtypes = (int)(sizeof mm_weight_dtypes / sizeof mm_weight_dtypes[0]);

void mm_fill(tu_rng *r, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) {
        float v = tu_rng_normal(r) * scale;
        if (tu_rng_u64(r) % 61 == 0) v *= 4.0f;
        x[i] = v;
    }
}

void *mm_encode(rb_dtype t, const float *x, int64_t rows, int64_t n) {
    size_t rs = rb_dtype_row_size(t, n);
    assert_true(rs > 0);
    void *q = malloc(rs * (size_t)rows);
    assert_non_null(q);
    TU_OK(rb_quantize_rows(t, x, q, rows, n));
    return q;
}

float *mm_decode(rb_dtype t, const void *q, int64_t rows, int64_t n) {
    size_t rs = rb_dtype_row_size(t, n);
    float *x = malloc(sizeof(float) * (size_t)(rows * n));
    assert_non_null(x);
    for (int64_t r = 0; r < rows; r++) TU_OK(rb_dequantize_row(t, (const char *)q + (size_t)r * rs, x + r * n, n));
    return x;
}

double mm_dot_ref(const float *x, const float *y, int64_t n, double *abs_sum) {
    double s = 0, a = 0;
    for (int64_t i = 0; i < n; i++) {
        double p = (double)x[i] * (double)y[i];
        s += p;
        a += fabs(p);
    }
    if (abs_sum) *abs_sum = a;
    return s;
}

bool mm_small_block(rb_dtype t) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t);
    return tr && tr->block_size <= 32;
}

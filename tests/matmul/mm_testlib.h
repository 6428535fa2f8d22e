/* Helpers shared by the matmul tests: the weight dtypes under test, random
 * data, and the naive double-precision reference dot products. */
#ifndef RBEE_TEST_MM_TESTLIB_H
#define RBEE_TEST_MM_TESTLIB_H

#include "testutil.h"

#include "rbee/dtype.h"
#include "rbee/quant.h"

#include <stdbool.h>

extern const rb_dtype mm_weight_dtypes[];
extern const int mm_n_weight_dtypes;

/* Random f32 values: normal * scale, with a few larger outliers. */
void mm_fill(tu_rng *r, float *x, size_t n, float scale);
/* Quantizes/converts rows x rows of n f32 into a new buffer of dtype t (rb_quantize_rows). */
void *mm_encode(rb_dtype t, const float *x, int64_t rows, int64_t n);
/* Decodes rows of dtype t back to f32 (new buffer). */
float *mm_decode(rb_dtype t, const void *q, int64_t rows, int64_t n);
/* sum_i x[i] * y[i] in double, and sum_i |x[i] * y[i]| */
double mm_dot_ref(const float *x, const float *y, int64_t n, double *abs_sum);
/* Whether t is a 32-element legacy format (or a plain float type). */
bool mm_small_block(rb_dtype t);

#endif

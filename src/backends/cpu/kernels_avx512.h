/* Internal: the AVX-512 VNNI quantized kernels (vec_dot_vnni_avx512.c) that the
 * AVX-512 table (kernels_avx512.c) refers to. */
#ifndef RBEE_CPU_KERNELS_AVX512_H
#define RBEE_CPU_KERNELS_AVX512_H

#include "backends/cpu/cpu_kernels.h"

void rb_vd_q4_0_avx512(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q8_0_avx512(int64_t n, float *s, const void *x, const void *y);
void rb_gemm_q4_0_avx512(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                         size_t ldd);
void rb_gemm_q8_0_avx512(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                         size_t ldd);

#endif

/* Internal: AVX2+FMA+F16C kernels exported for reuse by the AVX-512 table
 * (kernels_avx512.c) where no wider version exists. Only declarations here;
 * the code lives in files compiled with -mavx2 -mfma -mf16c. */
#ifndef RBEE_CPU_KERNELS_AVX2_H
#define RBEE_CPU_KERNELS_AVX2_H

#include "backends/cpu/cpu_kernels.h"

void rb_vd_f32_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_f16_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_bf16_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q4_0_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q4_1_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q5_0_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q5_1_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q2_K_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q3_K_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q4_K_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q5_K_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q6_K_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_mxfp4_avx2(int64_t n, float *s, const void *x, const void *y);
void rb_vd_iq4_nl_avx2(int64_t n, float *s, const void *x, const void *y); /* against q8_0 */
void rb_vd_iq4_xs_avx2(int64_t n, float *s, const void *x, const void *y); /* against q8_K */
void rb_gemm_q4_K_avx2(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                       size_t ldd);
void rb_q8_0_from_f32_avx2(const float *x, void *y, int64_t n);
void rb_q8_1_from_f32_avx2(const float *x, void *y, int64_t n);
void rb_q8_K_from_f32_avx2(const float *x, void *y, int64_t n);
void rb_f16_to_f32_avx2(const rb_f16 *src, float *dst, int64_t n);
void rb_f32_to_f16_avx2(const float *src, rb_f16 *dst, int64_t n);
void rb_bf16_to_f32_avx2(const rb_bf16 *src, float *dst, int64_t n);

#endif

/* AVX2 dot products of the legacy 32-element block formats against q8_0 /
 * q8_1 activations (compiled with -mavx2 -mfma -mf16c). */
#include "backends/cpu/kernels_avx2.h"
#include "backends/cpu/simd_avx2_util.h"

void rb_vd_q4_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q4_0 *x = vx;
    const rb_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    const __m256i off = _mm256_set1_epi8(8);
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i qx = _mm256_sub_epi8(rb_nibbles32(x[b].qs), off);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[b].qs);
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[b].d) * _cvtsh_ss(y[b].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rb_dot_i8_i32(qx, qy)), acc);
    }
    *s = rb_hsum_ps256(acc);
}

void rb_vd_q4_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q4_1 *x = vx;
    const rb_block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i qx = rb_nibbles32(x[b].qs);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[b].qs);
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[b].d) * _cvtsh_ss(y[b].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rb_dot_u8_i32(qx, qy)), acc);
        summ += _cvtsh_ss(x[b].m) * _cvtsh_ss(y[b].s);
    }
    *s = rb_hsum_ps256(acc) + summ;
}

void rb_vd_q5_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q5_0 *x = vx;
    const rb_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        /* q - 16 == nibble | 0xF0 (as int8) where the high bit is clear */
        __m256i hi = _mm256_andnot_si256(rb_bits32(x[b].qh), _mm256_set1_epi8((char)0xF0));
        __m256i qx = _mm256_or_si256(rb_nibbles32(x[b].qs), hi);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[b].qs);
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[b].d) * _cvtsh_ss(y[b].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rb_dot_i8_i32(qx, qy)), acc);
    }
    *s = rb_hsum_ps256(acc);
}

void rb_vd_q5_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q5_1 *x = vx;
    const rb_block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i hi = _mm256_and_si256(rb_bits32(x[b].qh), _mm256_set1_epi8(0x10));
        __m256i qx = _mm256_or_si256(rb_nibbles32(x[b].qs), hi);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[b].qs);
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[b].d) * _cvtsh_ss(y[b].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rb_dot_u8_i32(qx, qy)), acc);
        summ += _cvtsh_ss(x[b].m) * _cvtsh_ss(y[b].s);
    }
    *s = rb_hsum_ps256(acc) + summ;
}

void rb_vd_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q8_0 *x = vx;
    const rb_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[b].qs);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[b].qs);
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[b].d) * _cvtsh_ss(y[b].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rb_dot_i8_i32(qx, qy)), acc);
    }
    *s = rb_hsum_ps256(acc);
}

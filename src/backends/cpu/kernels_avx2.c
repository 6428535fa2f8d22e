/* AVX2+FMA+F16C kernel table and its float kernels (dots, conversions).
 * Compiled with -mavx2 -mfma -mf16c; selected at run time only on CPUs that
 * have them (cpu_isa.c). */
#include "backends/cpu/kernels_avx2.h"
#include "backends/cpu/kernels_scalar.h"

#include <immintrin.h>

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 load_bf16x8(const rb_bf16 *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

void rb_vd_f32_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float sum = hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

void rb_vd_f16_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_f16 *x = vx;
    const float *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8))),
                             _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 16))),
                             _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 24))),
                             _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))), _mm256_loadu_ps(y + i), a0);
    float sum = hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += _cvtsh_ss(x[i]) * y[i];
    *s = sum;
}

void rb_vd_bf16_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_bf16 *x = vx;
    const float *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(load_bf16x8(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(load_bf16x8(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_bf16x8(x + i), _mm256_loadu_ps(y + i), a0);
    float sum = hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) sum += rb_bf16_to_f32(x[i]) * y[i];
    *s = sum;
}

void rb_f16_to_f32_avx2(const rb_f16 *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

void rb_f32_to_f16_avx2(const float *src, rb_f16 *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = rb_f32_to_f16(src[i]);
}

void rb_bf16_to_f32_avx2(const rb_bf16 *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_bf16x8(src + i));
    for (; i < n; i++) dst[i] = rb_bf16_to_f32(src[i]);
}

const struct rb_cpu_kernels rb_cpu_kernels_avx2 = {
    .isa = RB_CPU_ISA_AVX2,
    .vec_dot_type = RB_CPU_VEC_DOT_TYPES,
    .vec_dot = {
        [RB_F32] = rb_vd_f32_avx2, [RB_F16] = rb_vd_f16_avx2, [RB_BF16] = rb_vd_bf16_avx2,
        [RB_Q4_0] = rb_vd_q4_0_avx2, [RB_Q4_1] = rb_vd_q4_1_avx2, [RB_Q5_0] = rb_vd_q5_0_avx2,
        [RB_Q5_1] = rb_vd_q5_1_avx2, [RB_Q8_0] = rb_vd_q8_0_avx2,
        [RB_Q2_K] = rb_vd_q2_K_avx2, [RB_Q3_K] = rb_vd_q3_K_avx2, [RB_Q4_K] = rb_vd_q4_K_avx2,
        [RB_Q5_K] = rb_vd_q5_K_avx2, [RB_Q6_K] = rb_vd_q6_K_avx2, [RB_MXFP4] = rb_vd_mxfp4_avx2,
        [RB_IQ4_NL] = rb_vd_iq4_nl_avx2, [RB_IQ4_XS] = rb_vd_iq4_xs_avx2,
        [RB_IQ3_XXS] = rb_vd_iq3_xxs_scalar, [RB_IQ3_S] = rb_vd_iq3_s_scalar,
        [RB_IQ2_XXS] = rb_vd_iq2_xxs_scalar, [RB_IQ2_XS] = rb_vd_iq2_xs_scalar,
        [RB_IQ2_S] = rb_vd_iq2_s_scalar, [RB_IQ1_S] = rb_vd_iq1_s_scalar, [RB_IQ1_M] = rb_vd_iq1_m_scalar,
    },
    .gemm_tile = {[RB_Q4_K] = rb_gemm_q4_K_avx2},
    .from_f32 = {
        [RB_Q8_0] = rb_q8_0_from_f32_avx2, [RB_Q8_1] = rb_q8_1_from_f32_avx2, [RB_Q8_K] = rb_q8_K_from_f32_avx2,
    },
    .f16_to_f32 = rb_f16_to_f32_avx2,
    .f32_to_f16 = rb_f32_to_f16_avx2,
    .bf16_to_f32 = rb_bf16_to_f32_avx2,
};

/* The portable C kernel table (always available; the reference the SIMD
 * tables are tested against) and its float dot products and conversions. */
#include "backends/cpu/kernels_scalar.h"

void rb_vd_f32_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    /* four partial sums keep the dependency chain short and the rounding close to the SIMD versions */
    double acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) acc[j] += (double)x[i + j] * y[i + j];
    for (; i < n; i++) acc[0] += (double)x[i] * y[i];
    *s = (float)(acc[0] + acc[1] + acc[2] + acc[3]);
}

void rb_vd_f16_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_f16 *x = vx;
    const float *y = vy;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)rb_f16_to_f32(x[i]) * y[i];
    *s = (float)acc;
}

void rb_vd_bf16_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_bf16 *x = vx;
    const float *y = vy;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)rb_bf16_to_f32(x[i]) * y[i];
    *s = (float)acc;
}

void rb_f16_to_f32_scalar(const rb_f16 *src, float *dst, int64_t n) { rb_f16_to_f32_row(src, dst, n); }
void rb_f32_to_f16_scalar(const float *src, rb_f16 *dst, int64_t n) { rb_f32_to_f16_row(src, dst, n); }
void rb_bf16_to_f32_scalar(const rb_bf16 *src, float *dst, int64_t n) { rb_bf16_to_f32_row(src, dst, n); }

const struct rb_cpu_kernels rb_cpu_kernels_scalar = {
    .isa = RB_CPU_ISA_SCALAR,
    .vec_dot_type = RB_CPU_VEC_DOT_TYPES,
    .vec_dot = {
        [RB_F32] = rb_vd_f32_scalar, [RB_F16] = rb_vd_f16_scalar, [RB_BF16] = rb_vd_bf16_scalar,
        [RB_Q4_0] = rb_vd_q4_0_scalar, [RB_Q4_1] = rb_vd_q4_1_scalar, [RB_Q5_0] = rb_vd_q5_0_scalar,
        [RB_Q5_1] = rb_vd_q5_1_scalar, [RB_Q8_0] = rb_vd_q8_0_scalar,
        [RB_Q2_K] = rb_vd_q2_K_scalar, [RB_Q3_K] = rb_vd_q3_K_scalar, [RB_Q4_K] = rb_vd_q4_K_scalar,
        [RB_Q5_K] = rb_vd_q5_K_scalar, [RB_Q6_K] = rb_vd_q6_K_scalar, [RB_MXFP4] = rb_vd_mxfp4_scalar,
        [RB_IQ4_NL] = rb_vd_iq4_nl_scalar, [RB_IQ4_XS] = rb_vd_iq4_xs_scalar,
        [RB_IQ3_XXS] = rb_vd_iq3_xxs_scalar, [RB_IQ3_S] = rb_vd_iq3_s_scalar,
        [RB_IQ2_XXS] = rb_vd_iq2_xxs_scalar, [RB_IQ2_XS] = rb_vd_iq2_xs_scalar,
        [RB_IQ2_S] = rb_vd_iq2_s_scalar, [RB_IQ1_S] = rb_vd_iq1_s_scalar, [RB_IQ1_M] = rb_vd_iq1_m_scalar,
    },
    .gemm_tile = {0},
    .from_f32 = {
        [RB_Q8_0] = rb_q8_0_from_f32_scalar, [RB_Q8_1] = rb_q8_1_from_f32_scalar,
        [RB_Q8_K] = rb_q8_K_from_f32_scalar,
    },
    .f16_to_f32 = rb_f16_to_f32_scalar,
    .f32_to_f16 = rb_f32_to_f16_scalar,
    .bf16_to_f32 = rb_bf16_to_f32_scalar,
};

/* Internal: the portable C kernels. They form the scalar table and are the
 * fallback entries of the SIMD tables for kernels without a SIMD version. */
#ifndef RBEE_CPU_KERNELS_SCALAR_H
#define RBEE_CPU_KERNELS_SCALAR_H

#include "backends/cpu/cpu_kernels.h"

/* float dots (y is f32) */
void rb_vd_f32_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_f16_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_bf16_scalar(int64_t n, float *s, const void *x, const void *y);
/* legacy quants (vec_dot_legacy_scalar.c) */
void rb_vd_q4_0_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q4_1_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q5_0_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q5_1_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q8_0_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_mxfp4_scalar(int64_t n, float *s, const void *x, const void *y); /* against q8_0 */
/* k-quants against q8_K (vec_dot_kquant_scalar.c) */
void rb_vd_q2_K_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q3_K_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q4_K_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q5_K_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q6_K_scalar(int64_t n, float *s, const void *x, const void *y);
/* iq4_nl against q8_0, iq4_xs against q8_K (vec_dot_iq4_scalar.c) */
void rb_vd_iq4_nl_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_iq4_xs_scalar(int64_t n, float *s, const void *x, const void *y);
/* iq3_xxs and iq3_s against q8_K (vec_dot_iq3_scalar.c; also the SIMD tables' entries) */
void rb_vd_iq3_xxs_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_iq3_s_scalar(int64_t n, float *s, const void *x, const void *y);
/* iq2_xxs, iq2_xs and iq2_s against q8_K (vec_dot_iq2_scalar.c; also the SIMD tables' entries) */
void rb_vd_iq2_xxs_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_iq2_xs_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_iq2_s_scalar(int64_t n, float *s, const void *x, const void *y);
/* iq1_s and iq1_m against q8_K (vec_dot_iq1_scalar.c; also the SIMD tables' entries) */
void rb_vd_iq1_s_scalar(int64_t n, float *s, const void *x, const void *y);
void rb_vd_iq1_m_scalar(int64_t n, float *s, const void *x, const void *y);
/* activation quantizers (quantize_act_scalar.c) */
void rb_q8_0_from_f32_scalar(const float *x, void *y, int64_t n);
void rb_q8_1_from_f32_scalar(const float *x, void *y, int64_t n);
void rb_q8_K_from_f32_scalar(const float *x, void *y, int64_t n);
/* conversions */
void rb_f16_to_f32_scalar(const rb_f16 *src, float *dst, int64_t n);
void rb_f32_to_f16_scalar(const float *src, rb_f16 *dst, int64_t n);
void rb_bf16_to_f32_scalar(const rb_bf16 *src, float *dst, int64_t n);

/* k-quant scale unpacking shared by the scalar and SIMD k-quant kernels */
static inline void rb_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}
/* the 16 signed 6-bit scales of a q3_K block */
static inline void rb_q3_K_scales(const uint8_t *s, int8_t out[16]) {
    for (int i = 0; i < 16; i++) {
        int lo = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
        int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[i] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

#endif

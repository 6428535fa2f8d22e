/* Portable integer dot products of the legacy 32-element block formats
 * against quantized activations: q4_0/q5_0/q8_0 x q8_0 and q4_1/q5_1 x q8_1.
 * They read the ggml blocks directly; the SIMD versions must match them to
 * float rounding. */
#include "backends/cpu/kernels_scalar.h"

#include <string.h>

void rb_vd_q4_0_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q4_0 *x = vx;
    const rb_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        int acc = 0;
        for (int j = 0; j < 16; j++) {
            acc += ((x[b].qs[j] & 0xF) - 8) * y[b].qs[j];
            acc += ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + 16];
        }
        sum += (float)acc * (rb_f16_to_f32(x[b].d) * rb_f16_to_f32(y[b].d));
    }
    *s = sum;
}

void rb_vd_q4_1_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q4_1 *x = vx;
    const rb_block_q8_1 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        int acc = 0;
        for (int j = 0; j < 16; j++) {
            acc += (x[b].qs[j] & 0xF) * y[b].qs[j];
            acc += (x[b].qs[j] >> 4) * y[b].qs[j + 16];
        }
        sum += (float)acc * (rb_f16_to_f32(x[b].d) * rb_f16_to_f32(y[b].d)) +
               rb_f16_to_f32(x[b].m) * rb_f16_to_f32(y[b].s);
    }
    *s = sum;
}

void rb_vd_q5_0_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q5_0 *x = vx;
    const rb_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        uint32_t qh;
        memcpy(&qh, x[b].qh, 4);
        int acc = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (x[b].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int hi = (x[b].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            acc += (lo - 16) * y[b].qs[j] + (hi - 16) * y[b].qs[j + 16];
        }
        sum += (float)acc * (rb_f16_to_f32(x[b].d) * rb_f16_to_f32(y[b].d));
    }
    *s = sum;
}

void rb_vd_q5_1_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q5_1 *x = vx;
    const rb_block_q8_1 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        uint32_t qh;
        memcpy(&qh, x[b].qh, 4);
        int acc = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (x[b].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int hi = (x[b].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            acc += lo * y[b].qs[j] + hi * y[b].qs[j + 16];
        }
        sum += (float)acc * (rb_f16_to_f32(x[b].d) * rb_f16_to_f32(y[b].d)) +
               rb_f16_to_f32(x[b].m) * rb_f16_to_f32(y[b].s);
    }
    *s = sum;
}

void rb_vd_q8_0_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q8_0 *x = vx;
    const rb_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        int acc = 0;
        for (int j = 0; j < 32; j++) acc += x[b].qs[j] * y[b].qs[j];
        sum += (float)acc * (rb_f16_to_f32(x[b].d) * rb_f16_to_f32(y[b].d));
    }
    *s = sum;
}

/* mxfp4 against q8_0 (same 32-element blocks): per block, the block scales
 * 2^(e-128) * d_y times the integer dot of table values and activation quants. */
void rb_vd_mxfp4_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_mxfp4 *x = vx;
    const rb_block_q8_0 *y = vy;
    const int64_t nb = n / RB_QK_MXFP4;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t acc = 0;
        for (int j = 0; j < RB_QK_MXFP4 / 2; j++) {
            acc += (int32_t)rb_mxfp4_values[x[b].qs[j] & 0x0F] * y[b].qs[j];
            acc += (int32_t)rb_mxfp4_values[x[b].qs[j] >> 4] * y[b].qs[j + RB_QK_MXFP4 / 2];
        }
        sum += rb_e8m0_half_to_f32(x[b].e) * rb_f16_to_f32(y[b].d) * (float)acc;
    }
    *s = sum;
}

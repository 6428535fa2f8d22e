/* Portable dot products of the non-linear 4-bit weights: iq4_nl against
 * q8_0 activations (same 32-element blocks) and iq4_xs against q8_K (256).
 * Each 32-value group's integer dot of table levels and activation quants
 * is exact in int32; iq4_nl scales it by d_x * d_y per block, iq4_xs first
 * weights each group by its 6-bit scale minus 32 (still exact: at most
 * 32 * 127 * 127 * 256 in magnitude) and scales the block's sum once. */
#include "backends/cpu/kernels_scalar.h"

static int32_t dot32(const uint8_t *qs, const int8_t *y) {
    int32_t acc = 0;
    for (int j = 0; j < 16; j++) {
        acc += (int32_t)rb_iq4nl_values[qs[j] & 0x0F] * y[j];
        acc += (int32_t)rb_iq4nl_values[qs[j] >> 4] * y[j + 16];
    }
    return acc;
}

void rb_vd_iq4_nl_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq4_nl *x = vx;
    const rb_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK4_NL; b++)
        sum += rb_f16_to_f32(x[b].d) * rb_f16_to_f32(y[b].d) * (float)dot32(x[b].qs, y[b].qs);
    *s = sum;
}

void rb_vd_iq4_xs_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq4_xs *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        int32_t acc = 0;
        for (int i = 0; i < RB_QK_K / 32; i++)
            acc += (rb_iq4_xs_scale(&x[b], i) - 32) * dot32(x[b].qs + 16 * i, y[b].qs + 32 * i);
        sum += rb_f16_to_f32(x[b].d) * y[b].d * (float)acc;
    }
    *s = sum;
}

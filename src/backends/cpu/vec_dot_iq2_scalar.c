/* Dot products of the 2-bit lattice weights iq2_xxs, iq2_xs and iq2_s against q8_K
 * activations, in portable C (every ISA's table uses them: no SIMD version
 * yet). Each run of 8 values is expanded from its grid point (levels 8, 25,
 * 43) with its signs; the integer dot with the activation quants is exact
 * per scale group (32 values for iq2_xxs, 16 for iq2_xs and iq2_s), and that group's
 * f32 scale (d_x d_y (s + 1/2) / 4) weights it. Layouts: core/quant_iq2.c. */
#include "backends/cpu/kernels_scalar.h"

static int32_t dot8(uint16_t code, unsigned signs, const int8_t *y) {
    int32_t acc = 0;
    for (int j = 0; j < 8; j++) {
        const int v = rb_iq2_levels[(code >> (2 * j)) & 3];
        acc += ((signs >> j) & 1 ? -v : v) * y[j];
    }
    return acc;
}

void rb_vd_iq2_xxs_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq2_xxs *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        const float d = rb_f16_to_f32(x[b].d) * y[b].d;
        for (int g = 0; g < RB_QK_K / 32; g++) {
            const uint8_t *q = x[b].qs + 8 * g;
            const uint32_t w = (uint32_t)q[4] | (uint32_t)q[5] << 8 | (uint32_t)q[6] << 16 | (uint32_t)q[7] << 24;
            int32_t acc = 0;
            for (int l = 0; l < 4; l++)
                acc += dot8(rb_iq2xxs_grid[q[l]], rb_iq_signs8((w >> (7 * l)) & 127), y[b].qs + 32 * g + 8 * l);
            sum += d * (0.5f + (float)(w >> 28)) * 0.25f * (float)acc;
        }
    }
    *s = sum;
}

void rb_vd_iq2_xs_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq2_xs *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        const float d = rb_f16_to_f32(x[b].d) * y[b].d;
        for (int g = 0; g < RB_QK_K / 32; g++) {
            int32_t acc[2] = {0, 0};
            for (int l = 0; l < 4; l++) {
                const unsigned w = x[b].qs[4 * g + l];
                acc[l / 2] += dot8(rb_iq2xs_grid[w & 511], rb_iq_signs8(w >> 9), y[b].qs + 32 * g + 8 * l);
            }
            sum += d * (0.5f + (float)(x[b].scales[g] & 15u)) * 0.25f * (float)acc[0] +
                   d * (0.5f + (float)(x[b].scales[g] >> 4)) * 0.25f * (float)acc[1];
        }
    }
    *s = sum;
}

void rb_vd_iq2_s_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq2_s *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        const float d = rb_f16_to_f32(x[b].d) * y[b].d;
        for (int g = 0; g < RB_QK_K / 32; g++) {
            int32_t acc[2] = {0, 0};
            for (int l = 0; l < 4; l++) {
                const unsigned idx = x[b].qs[4 * g + l] | (((unsigned)x[b].qh[g] >> (2 * l)) & 3u) << 8;
                acc[l / 2] += dot8(rb_iq2s_grid[idx], x[b].qs[RB_QK_K / 8 + 4 * g + l], y[b].qs + 32 * g + 8 * l);
            }
            sum += d * (0.5f + (float)(x[b].scales[g] & 15u)) * 0.25f * (float)acc[0] +
                   d * (0.5f + (float)(x[b].scales[g] >> 4)) * 0.25f * (float)acc[1];
        }
    }
    *s = sum;
}

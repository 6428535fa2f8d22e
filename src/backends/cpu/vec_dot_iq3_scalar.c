/* Dot products of the 3-bit lattice weights iq3_xxs and iq3_s against q8_K
 * activations, in portable C (every ISA's table uses them: no SIMD version
 * yet). Each 32-value group is expanded to signed int8 magnitudes from the
 * grid (at most 62), its integer dot with the activation quants is exact,
 * and the group's f32 scale times d_y weights it. */
#include "backends/cpu/kernels_scalar.h"

#include <string.h>

static int32_t dot4(uint16_t code, const uint8_t *levels, unsigned signs, const int8_t *y) {
    int32_t acc = 0;
    for (int j = 0; j < 4; j++) {
        const int v = levels[(code >> (3 * j)) & 7];
        acc += ((signs >> j) & 1 ? -v : v) * y[j];
    }
    return acc;
}

void rb_vd_iq3_xxs_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq3_xxs *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        const float d = rb_f16_to_f32(x[b].d) * y[b].d;
        for (int g = 0; g < RB_QK_K / 32; g++) {
            uint32_t w;
            memcpy(&w, x[b].qs + RB_QK_K / 4 + 4 * g, 4);
            const int8_t *q = y[b].qs + 32 * g;
            int32_t acc = 0;
            for (int l = 0; l < 4; l++) {
                const unsigned sg = rb_iq_signs8((w >> (7 * l)) & 127);
                acc += dot4(rb_iq3xxs_grid[x[b].qs[8 * g + 2 * l]], rb_iq3xxs_levels, sg, q + 8 * l);
                acc += dot4(rb_iq3xxs_grid[x[b].qs[8 * g + 2 * l + 1]], rb_iq3xxs_levels, sg >> 4, q + 8 * l + 4);
            }
            sum += d * (0.5f + (float)(w >> 28)) * 0.5f * (float)acc;
        }
    }
    *s = sum;
}

void rb_vd_iq3_s_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq3_s *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        const float d = rb_f16_to_f32(x[b].d) * y[b].d;
        for (int g = 0; g < RB_QK_K / 32; g++) {
            int32_t acc = 0;
            for (int i = 0; i < 8; i++) {
                const unsigned idx = x[b].qs[8 * g + i] | (((unsigned)x[b].qh[g] >> i) & 1) << 8;
                acc += dot4(rb_iq3s_grid[idx], rb_iq3s_levels, (unsigned)x[b].signs[4 * g + i / 2] >> (4 * (i % 2)),
                            y[b].qs + 32 * g + 4 * i);
            }
            sum += d * (float)(1 + 2 * ((x[b].scales[g / 2] >> (4 * (g % 2))) & 15)) * (float)acc;
        }
    }
    *s = sum;
}

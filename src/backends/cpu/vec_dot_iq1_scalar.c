/* Dot products of the 1-bit lattice weights iq1_s and iq1_m against q8_K
 * activations, in portable C (every ISA's table uses them: no SIMD version
 * yet). A run of 8 weights is scale * (v_j + delta) with v_j in {-1, 0, +1}
 * from the shared grid and delta = +-1/8, so its dot with the activation
 * quants q_j is scale * (sum v_j q_j + delta sum q_j): both sums are exact
 * integers, and the run's f32 scale (d_x d_y (2s + 1)) weights them.
 * Layouts: core/quant_iq1.c. */
#include "backends/cpu/kernels_scalar.h"

/* sum v_j q_j over the 8 values of grid point idx, and sum q_j into *sq. */
static int32_t dot8(unsigned idx, const int8_t *q, int32_t *sq) {
    const unsigned code = rb_iq1s_grid[idx];
    int32_t acc = 0, s = 0;
    for (int j = 0; j < 8; j++) {
        acc += ((int)((code >> (2 * j)) & 3u) - 1) * q[j];
        s += q[j];
    }
    *sq = s;
    return acc;
}

void rb_vd_iq1_s_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq1_s *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        const float d = rb_f16_to_f32(x[b].d) * y[b].d;
        for (int g = 0; g < RB_QK_K / 32; g++) {
            const unsigned h = x[b].qh[g];
            int32_t acc = 0, sq = 0;
            for (int l = 0; l < 4; l++) {
                int32_t s8;
                acc += dot8(x[b].qs[4 * g + l] | ((h >> (3 * l)) & 7u) << 8, y[b].qs + 32 * g + 8 * l, &s8);
                sq += s8;
            }
            const float delta = h & 0x8000u ? -0.125f : 0.125f;
            sum += d * (float)(2u * ((h >> 12) & 7u) + 1u) * ((float)acc + delta * (float)sq);
        }
    }
    *s = sum;
}

void rb_vd_iq1_m_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq1_m *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        unsigned w[4], dbits = 0;
        for (int k = 0; k < 4; k++) {
            w[k] = (unsigned)x[b].scales[2 * k] | (unsigned)x[b].scales[2 * k + 1] << 8;
            dbits |= (w[k] >> 12) << (4 * k);
        }
        const float d = rb_f16_to_f32((rb_f16)dbits) * y[b].d;
        for (int g = 0; g < RB_QK_K / 32; g++) {
            const unsigned s6 = (w[g / 2] >> (6 * (g % 2))) & 63u;
            int32_t acc[2] = {0, 0}, sq[2] = {0, 0}; /* per half: sum v q, sum of +-q by each run's shift sign */
            for (int l = 0; l < 4; l++) {
                const unsigned h = (unsigned)x[b].qh[2 * g + l / 2] >> (4 * (l % 2));
                int32_t s8;
                acc[l / 2] += dot8(x[b].qs[4 * g + l] | (h & 7u) << 8, y[b].qs + 32 * g + 8 * l, &s8);
                sq[l / 2] += h & 8u ? -s8 : s8;
            }
            sum += d * (float)(2u * (s6 & 7u) + 1u) * ((float)acc[0] + 0.125f * (float)sq[0]) +
                   d * (float)(2u * (s6 >> 3) + 1u) * ((float)acc[1] + 0.125f * (float)sq[1]);
        }
    }
    *s = sum;
}

/* Decoders of the 2-bit lattice formats iq2_xxs, iq2_xs and iq2_s (256-value
 * blocks, an f16 scale d). Each group of 32 values is 4 runs of 8
 * magnitudes, each run one point of the format's grid (quant_iq_tables.c:
 * eight levels from 8, 25, 43), with a 7-bit sign field per run whose
 * eighth sign makes the count of minus signs even (rb_iq_signs8):
 *  - iq2_xxs (66 bytes): d, then 8 bytes per group g: 4 grid indices (one
 *    per run) and a little-endian 32-bit word holding the four runs' sign
 *    fields (bits 7l..7l+6) and a 4-bit scale s in bits 28-31; the group's
 *    scale is d (s + 1/2) / 4.
 *  - iq2_xs (74 bytes): d, 32 little-endian 16-bit words (run r of group g
 *    is word 4g + r: grid index in bits 0-8 of 512 points, sign field in
 *    bits 9-15), then a scale byte per group: the low nibble s scales runs
 *    0 and 1, the high nibble runs 2 and 3, each as d (s + 1/2) / 4.
 *  - iq2_s (82 bytes): d, 32 bytes with the low 8 bits of each run's grid
 *    index (run r of group g is byte 4g + r; 1024 points), 32 sign bytes in
 *    the same order (all 8 signs stored, bit j for value j), a byte per group
 *    holding the high 2 index bits of run r at bits 2r..2r+1, and a scale
 *    byte per group as iq2_xs's.
 * A value is (scale * level) negated where its sign bit is set, in f32 with
 * the scale formed first, so the results equal ggml's to_float bit for bit.
 * No encoders: these formats are read, not written. */
#include "quant_internal.h"

/* The 8 values of grid point `code` (eight 2-bit level indices) at o. */
static void put8(uint16_t code, float scale, unsigned signs, float *o) {
    for (int j = 0; j < 8; j++) {
        const float v = scale * (float)rb_iq2_levels[(code >> (2 * j)) & 3];
        o[j] = (signs >> j) & 1 ? -v : v;
    }
}

static float group_scale(float d, unsigned s) { return d * (0.5f + (float)s) * 0.25f; }

void rb_iq2_xxs_decode(const rb_block_iq2_xxs *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const float d = rb_f16_to_f32(x[b].d);
        for (int g = 0; g < RB_QK_K / 32; g++) {
            const uint8_t *q = x[b].qs + 8 * g;
            const uint32_t w = (uint32_t)q[4] | (uint32_t)q[5] << 8 | (uint32_t)q[6] << 16 | (uint32_t)q[7] << 24;
            const float scale = group_scale(d, w >> 28);
            for (int l = 0; l < 4; l++)
                put8(rb_iq2xxs_grid[q[l]], scale, rb_iq_signs8((w >> (7 * l)) & 127), y + b * RB_QK_K + 32 * g + 8 * l);
        }
    }
}

void rb_iq2_xs_decode(const rb_block_iq2_xs *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const float d = rb_f16_to_f32(x[b].d);
        for (int g = 0; g < RB_QK_K / 32; g++) {
            const float scale[2] = {group_scale(d, x[b].scales[g] & 15u), group_scale(d, x[b].scales[g] >> 4)};
            for (int l = 0; l < 4; l++) {
                const unsigned w = x[b].qs[4 * g + l];
                put8(rb_iq2xs_grid[w & 511], scale[l / 2], rb_iq_signs8(w >> 9), y + b * RB_QK_K + 32 * g + 8 * l);
            }
        }
    }
}

void rb_iq2_s_decode(const rb_block_iq2_s *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const float d = rb_f16_to_f32(x[b].d);
        for (int g = 0; g < RB_QK_K / 32; g++) {
            const float scale[2] = {group_scale(d, x[b].scales[g] & 15u), group_scale(d, x[b].scales[g] >> 4)};
            for (int l = 0; l < 4; l++) {
                const unsigned idx = x[b].qs[4 * g + l] | (((unsigned)x[b].qh[g] >> (2 * l)) & 3u) << 8;
                const unsigned signs = x[b].qs[RB_QK_K / 8 + 4 * g + l];
                put8(rb_iq2s_grid[idx], scale[l / 2], signs, y + b * RB_QK_K + 32 * g + 8 * l);
            }
        }
    }
}

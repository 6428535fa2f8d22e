/* Decoders of the 3-bit lattice formats iq3_xxs and iq3_s (256-value
 * blocks, an f16 scale d). Each group of 32 values has its own scale and is
 * made of 8 runs of 4 magnitudes, each run one point of the format's grid
 * (quant_iq_tables.c), with one sign bit per value:
 *  - iq3_xxs (98 bytes): d, 64 grid indices (8 per group), then a 32-bit
 *    word per group: four 7-bit sign fields (bits 7l..7l+6 for the group's
 *    8 values 8l..8l+7; the 8th sign makes the count of minus signs even)
 *    and a 4-bit scale s in bits 28-31: the group's scale is d (s + 1/2) / 2.
 *  - iq3_s (110 bytes): d, 64 low index bytes, 8 bytes of ninth index bits
 *    (byte g for group g, bit i for its index i), 32 sign bytes (4 per group,
 *    bit j of byte l for value 8l + j), 4 bytes of 4-bit scales s (low then
 *    high nibble for groups 2p, 2p + 1): the group's scale is d (1 + 2 s).
 * A value is (scale * magnitude) negated where its sign bit is set, in f32
 * with the scale formed first, so the results equal ggml's to_float bit for
 * bit. No encoders: these formats are read, not written. */
#include "quant_internal.h"

#include <string.h>

/* 4 values of grid point `code` (four 3-bit level indices) at o. */
static void put4(uint16_t code, const uint8_t *levels, float scale, unsigned signs, float *o) {
    for (int j = 0; j < 4; j++) {
        const float v = scale * (float)levels[(code >> (3 * j)) & 7];
        o[j] = (signs >> j) & 1 ? -v : v;
    }
}

void rb_iq3_xxs_decode(const rb_block_iq3_xxs *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const float d = rb_f16_to_f32(x[b].d);
        for (int g = 0; g < RB_QK_K / 32; g++) {
            uint32_t w;
            memcpy(&w, x[b].qs + RB_QK_K / 4 + 4 * g, 4);
            const float scale = d * (0.5f + (float)(w >> 28)) * 0.5f;
            float *o = y + b * RB_QK_K + 32 * g;
            for (int l = 0; l < 4; l++) {
                const unsigned s = rb_iq_signs8((w >> (7 * l)) & 127);
                put4(rb_iq3xxs_grid[x[b].qs[8 * g + 2 * l]], rb_iq3xxs_levels, scale, s, o + 8 * l);
                put4(rb_iq3xxs_grid[x[b].qs[8 * g + 2 * l + 1]], rb_iq3xxs_levels, scale, s >> 4, o + 8 * l + 4);
            }
        }
    }
}

void rb_iq3_s_decode(const rb_block_iq3_s *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const float d = rb_f16_to_f32(x[b].d);
        for (int g = 0; g < RB_QK_K / 32; g++) {
            const float scale = d * (float)(1 + 2 * ((x[b].scales[g / 2] >> (4 * (g % 2))) & 15));
            float *o = y + b * RB_QK_K + 32 * g;
            for (int i = 0; i < 8; i++) {
                const unsigned idx = x[b].qs[8 * g + i] | (((unsigned)x[b].qh[g] >> i) & 1) << 8;
                put4(rb_iq3s_grid[idx], rb_iq3s_levels, scale, (unsigned)x[b].signs[4 * g + i / 2] >> (4 * (i % 2)),
                     o + 4 * i);
            }
        }
    }
}

/* Decoders of the 1-bit lattice formats iq1_s and iq1_m (256-value blocks
 * of 8 groups of 32, each group 4 runs of 8). Every run is one point of a
 * shared grid of 2048 runs of values in {-1, 0, +1} (quant_iq_tables.c),
 * picked by an 11-bit index, and shifted by a delta of +1/8 or -1/8; a
 * value is scale * (grid value + delta), in f32 with the scale formed
 * first, so the results equal ggml's to_float bit for bit.
 *  - iq1_s (50 bytes): an f16 d, 32 bytes holding the low 8 index bits of
 *    each run (run r of group g is byte 4g + r), then a little-endian
 *    16-bit word per group: the high 3 index bits of run r at bits
 *    3r..3r+2, a 3-bit scale s at bits 12-14 (the group's scale is
 *    d (2s + 1)) and the delta's sign at bit 15 (set: -1/8).
 *  - iq1_m (56 bytes): 32 low index bytes as iq1_s, then 2 bytes per group
 *    (byte 2g + h for runs 2h and 2h + 1: the high 3 index bits of the first
 *    run at bits 0-2 and its delta sign at bit 3, the second's at bits 4-6
 *    and 7), then four little-endian 16-bit scale words. Word k holds the
 *    3-bit scales of groups 2k and 2k + 1 at bits 0-5 and 6-11 (in each 6
 *    bits, the low 3 for runs 0-1, the high 3 for runs 2-3; the scale is
 *    d (2s + 1)); the top nibbles of words 0..3 are the bits 0-3, 4-7,
 *    8-11, 12-15 of the block's f16 d.
 * No encoders: these formats are read, not written. */
#include "quant_internal.h"

#define IQ1_DELTA 0.125f

/* The 8 values of grid point `idx` at o: scale * (v + delta). */
static void put8(unsigned idx, float scale, float delta, float *o) {
    const unsigned code = rb_iq1s_grid[idx];
    for (int j = 0; j < 8; j++) o[j] = scale * ((float)((int)((code >> (2 * j)) & 3u) - 1) + delta);
}

void rb_iq1_s_decode(const rb_block_iq1_s *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const float d = rb_f16_to_f32(x[b].d);
        for (int g = 0; g < RB_QK_K / 32; g++) {
            const unsigned h = x[b].qh[g];
            const float scale = d * (float)(2u * ((h >> 12) & 7u) + 1u);
            const float delta = h & 0x8000u ? -IQ1_DELTA : IQ1_DELTA;
            for (int l = 0; l < 4; l++)
                put8(x[b].qs[4 * g + l] | ((h >> (3 * l)) & 7u) << 8, scale, delta, y + b * RB_QK_K + 32 * g + 8 * l);
        }
    }
}

/* The 16-bit scale word k (0..3) of an iq1_m block. */
static unsigned m_word(const rb_block_iq1_m *x, int k) {
    return (unsigned)x->scales[2 * k] | (unsigned)x->scales[2 * k + 1] << 8;
}

void rb_iq1_m_decode(const rb_block_iq1_m *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        unsigned w[4], dbits = 0;
        for (int k = 0; k < 4; k++) {
            w[k] = m_word(&x[b], k);
            dbits |= (w[k] >> 12) << (4 * k);
        }
        const float d = rb_f16_to_f32((rb_f16)dbits);
        for (int g = 0; g < RB_QK_K / 32; g++) {
            const unsigned s6 = (w[g / 2] >> (6 * (g % 2))) & 63u;
            const float scale[2] = {d * (float)(2u * (s6 & 7u) + 1u), d * (float)(2u * (s6 >> 3) + 1u)};
            for (int l = 0; l < 4; l++) {
                const unsigned h = (unsigned)x[b].qh[2 * g + l / 2] >> (4 * (l % 2));
                const float delta = h & 8u ? -IQ1_DELTA : IQ1_DELTA;
                put8(x[b].qs[4 * g + l] | (h & 7u) << 8, scale[l / 2], delta, y + b * RB_QK_K + 32 * g + 8 * l);
            }
        }
    }
}

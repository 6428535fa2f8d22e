/* Decoders of the non-linear 4-bit formats iq4_nl (32-value blocks, one f16
 * scale) and iq4_xs (256-value blocks: an f16 scale and a 6-bit offset
 * scale per 32). Each value is the f32 product scale * level, level from
 * rb_iq4nl_values, with the sub-block scale formed first in f32 (d * (ls -
 * 32)), so the results equal ggml's to_float bit for bit. No encoder: these
 * formats are read, not written. */
#include "quant_internal.h"

/* 16 bytes of nibbles -> 32 values (low nibbles first, then high ones). */
static void decode_nibbles(const uint8_t *qs, float scale, float *o) {
    for (int j = 0; j < 16; j++) {
        o[j] = scale * (float)rb_iq4nl_values[qs[j] & 0x0F];
        o[j + 16] = scale * (float)rb_iq4nl_values[qs[j] >> 4];
    }
}

void rb_iq4_nl_decode(const rb_block_iq4_nl *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) decode_nibbles(x[b].qs, rb_f16_to_f32(x[b].d), y + b * RB_QK4_NL);
}

void rb_iq4_xs_decode(const rb_block_iq4_xs *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const float d = rb_f16_to_f32(x[b].d);
        for (int i = 0; i < RB_QK_K / 32; i++)
            decode_nibbles(x[b].qs + 16 * i, d * (float)(rb_iq4_xs_scale(&x[b], i) - 32), y + b * RB_QK_K + 32 * i);
    }
}

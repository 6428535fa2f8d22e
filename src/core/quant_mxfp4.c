/* MXFP4 blocks (ggml's block_mxfp4): 32 values as 4-bit indices into the
 * doubled E2M1 table, one E8M0 exponent per block. Decoding is exact
 * (table value times a power of two); the encoder follows ggml's reference
 * quantizer step for step: the block's largest magnitude picks the exponent
 * floor(log2(amax)) - 2 (so amax lands in the table's top octave), then
 * each value takes the first table entry nearest to it, errors computed in
 * f32. The two differ from ggml only where ggml's float-to-byte cast is
 * undefined (amax below 2^-125): the exponent is clamped to 0 there. */
#include "quant_internal.h"

#include <math.h>

const int8_t rb_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static int nearest_index(float x, float d) {
    int best = 0;
    float best_err = fabsf((float)rb_mxfp4_values[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf((float)rb_mxfp4_values[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

void rb_mxfp4_encode(const float *x, rb_block_mxfp4 *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const float *v = x + b * RB_QK_MXFP4;
        float amax = 0.0f;
        for (int j = 0; j < RB_QK_MXFP4; j++)
            if (amax < fabsf(v[j])) amax = fabsf(v[j]);
        float ef = amax > 0.0f ? floorf(log2f(amax)) - 2.0f + 127.0f : 0.0f;
        if (!(ef >= 0.0f)) ef = 0.0f; /* also NaN */
        if (ef > 255.0f) ef = 255.0f;
        const uint8_t e = (uint8_t)ef;
        const float d = rb_e8m0_half_to_f32(e);
        y[b].e = e;
        for (int j = 0; j < RB_QK_MXFP4 / 2; j++) {
            const int lo = nearest_index(v[j], d), hi = nearest_index(v[j + RB_QK_MXFP4 / 2], d);
            y[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void rb_mxfp4_decode(const rb_block_mxfp4 *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const float d = rb_e8m0_half_to_f32(x[b].e);
        float *o = y + b * RB_QK_MXFP4;
        for (int j = 0; j < RB_QK_MXFP4 / 2; j++) {
            o[j] = (float)rb_mxfp4_values[x[b].qs[j] & 0x0F] * d;
            o[j + RB_QK_MXFP4 / 2] = (float)rb_mxfp4_values[x[b].qs[j] >> 4] * d;
        }
    }
}

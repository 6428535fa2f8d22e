/* Portable activation quantizers: f32 rows -> q8_0 / q8_1 / q8_K blocks, the
 * formats the quantized dot products consume, and the model the SIMD
 * quantizers are tested against. q8_K produces the same bytes as
 * rb_quantize_row. q8_0/q8_1 follow ggml's x86 activation quantizer (what
 * llama.cpp runs on x86): q = nearest-even(x * (127 / amax)), d = amax / 127,
 * instead of the reference rule of rb_quantize_row (roundf(x * (1 / d))),
 * which weight files use. The two differ only where x * scale lies on or
 * within an ulp of a .5 tie; ties are not rare in practice (x = amax / 2 is
 * one), so llama.cpp's logits are only reproduced with its rule. */
#include "backends/cpu/kernels_scalar.h"

#include <math.h>
#include <string.h>

/* round to nearest, ties to even (valid for |v| < 2^22) */
static inline int nearest_even(float v) {
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static void q8_block(const float *x, int8_t *qs, float *d_out, int *sum_out) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        if (a > amax) amax = a;
    }
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; j++) {
        qs[j] = (int8_t)nearest_even(x[j] * id);
        sum += qs[j];
    }
    *d_out = d;
    *sum_out = sum;
}

void rb_q8_0_from_f32_scalar(const float *x, void *vy, int64_t n) {
    rb_block_q8_0 *y = vy;
    for (int64_t b = 0; b < n / 32; b++) {
        float d;
        int sum;
        q8_block(x + b * 32, y[b].qs, &d, &sum);
        y[b].d = rb_f32_to_f16(d);
    }
}

void rb_q8_1_from_f32_scalar(const float *x, void *vy, int64_t n) {
    rb_block_q8_1 *y = vy;
    for (int64_t b = 0; b < n / 32; b++) {
        float d;
        int sum;
        q8_block(x + b * 32, y[b].qs, &d, &sum);
        y[b].d = rb_f32_to_f16(d);
        y[b].s = rb_f32_to_f16((float)sum * d);
    }
}

void rb_q8_K_from_f32_scalar(const float *x, void *vy, int64_t n) {
    rb_block_q8_K *y = vy;
    for (int64_t b = 0; b < n / RB_QK_K; b++, x += RB_QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < RB_QK_K; j++) {
            float a = fabsf(x[j]);
            if (a > amax) {
                amax = a;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < RB_QK_K; j++) {
            int v = nearest_even(iscale * x[j]);
            y[b].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < RB_QK_K / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += y[b].qs[g * 16 + j];
            y[b].bsums[g] = (int16_t)s;
        }
        y[b].d = 1.0f / iscale;
    }
}

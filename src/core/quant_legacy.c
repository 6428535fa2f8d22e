/* Encoders and decoders for ggml's legacy 32-element block formats (q4_0,
 * q4_1, q5_0, q5_1, q8_0, q8_1). The arithmetic follows ggml's reference
 * quantizers operation for operation (same float expressions, same rounding,
 * same clamping) so the produced bytes are identical to ggml's, and the
 * decoders reproduce ggml's to_float results bit for bit. */
#include "quant_internal.h"

#include <float.h>
#include <math.h>

/* float -> int by truncation toward zero, saturated to [lo, hi] and with NaN
 * mapped to 0, so that non-finite input cannot trigger an undefined cast. For
 * in-range finite values this is exactly a C cast. */
static inline int trunc_sat(float v, int lo, int hi) {
    if (v != v) return 0;
    if (v <= (float)lo) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

static inline int imin(int a, int b) { return a < b ? a : b; }

/* value of largest magnitude in a block (first one wins on ties) */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

void rb_q4_0_encode(const float *x, rb_block_q4_0 *y, int64_t nb) {
    const int qk = RB_QK4_0;
    for (int64_t i = 0; i < nb; i++, x += qk) {
        const float d = signed_absmax(x, qk) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = rb_f32_to_f16(d);
        for (int j = 0; j < qk / 2; j++) {
            const float v0 = x[j] * id;
            const float v1 = x[j + qk / 2] * id;
            const int lo = imin(15, trunc_sat(v0 + 8.5f, -128, 127));
            const int hi = imin(15, trunc_sat(v1 + 8.5f, -128, 127));
            y[i].qs[j] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
        }
    }
}

void rb_q4_1_encode(const float *x, rb_block_q4_1 *y, int64_t nb) {
    const int qk = RB_QK4_1;
    for (int64_t i = 0; i < nb; i++, x += qk) {
        float mn, mx;
        min_max(x, qk, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = rb_f32_to_f16(d);
        y[i].m = rb_f32_to_f16(mn);
        for (int j = 0; j < qk / 2; j++) {
            const float v0 = (x[j] - mn) * id;
            const float v1 = (x[j + qk / 2] - mn) * id;
            const int lo = imin(15, trunc_sat(v0 + 0.5f, -128, 127));
            const int hi = imin(15, trunc_sat(v1 + 0.5f, -128, 127));
            y[i].qs[j] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
        }
    }
}

/* packs 32 five-bit values: low nibbles into qs, fifth bits into qh */
static void pack5(const int *q, uint8_t qs[16], uint8_t qh_out[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int b = 0; b < 4; b++) qh_out[b] = (uint8_t)(qh >> (8 * b)); /* little-endian like ggml */
}

void rb_q5_0_encode(const float *x, rb_block_q5_0 *y, int64_t nb) {
    const int qk = RB_QK5_0;
    for (int64_t i = 0; i < nb; i++, x += qk) {
        const float d = signed_absmax(x, qk) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = rb_f32_to_f16(d);
        int q[RB_QK5_0];
        for (int j = 0; j < qk; j++) {
            const float v = x[j] * id;
            q[j] = imin(31, trunc_sat(v + 16.5f, -128, 127)) & 0xFF;
        }
        pack5(q, y[i].qs, y[i].qh);
    }
}

void rb_q5_1_encode(const float *x, rb_block_q5_1 *y, int64_t nb) {
    const int qk = RB_QK5_1;
    for (int64_t i = 0; i < nb; i++, x += qk) {
        float mn, mx;
        min_max(x, qk, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = rb_f32_to_f16(d);
        y[i].m = rb_f32_to_f16(mn);
        int q[RB_QK5_1];
        for (int j = 0; j < qk; j++) {
            const float v = (x[j] - mn) * id;
            q[j] = trunc_sat(v + 0.5f, 0, 255);
        }
        pack5(q, y[i].qs, y[i].qh);
    }
}

/* shared by q8_0 and q8_1: scale and rounded quants of one block; returns d */
static float encode8(const float *x, int8_t *qs) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) {
        const float r = roundf(x[j] * id);
        qs[j] = (int8_t)(r != r ? 0 : (r >= 127.0f ? 127 : (r <= -128.0f ? -128 : (int)r)));
    }
    return d;
}

void rb_q8_0_encode(const float *x, rb_block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RB_QK8_0) y[i].d = rb_f32_to_f16(encode8(x, y[i].qs));
}

void rb_q8_1_encode(const float *x, rb_block_q8_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RB_QK8_1) {
        const float d = encode8(x, y[i].qs);
        int sum = 0;
        for (int j = 0; j < RB_QK8_1; j++) sum += y[i].qs[j];
        y[i].d = rb_f32_to_f16(d);
        y[i].s = rb_f32_to_f16((float)sum * d);
    }
}

void rb_q4_0_decode(const rb_block_q4_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RB_QK4_0) {
        const float d = rb_f16_to_f32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void rb_q4_1_decode(const rb_block_q4_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RB_QK4_1) {
        const float d = rb_f16_to_f32(x[i].d);
        const float m = rb_f16_to_f32(x[i].m);
        for (int j = 0; j < 16; j++) {
            const float v0 = (float)(x[i].qs[j] & 0x0F) * d;
            const float v1 = (float)(x[i].qs[j] >> 4) * d;
            y[j] = v0 + m;
            y[j + 16] = v1 + m;
        }
    }
}

static uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) | ((uint32_t)qh[3] << 24);
}

void rb_q5_0_decode(const rb_block_q5_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RB_QK5_0) {
        const float d = rb_f16_to_f32(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < 16; j++) {
            const int lo = (int)((x[i].qs[j] & 0x0F) | (((qh >> j) & 1u) << 4)) - 16;
            const int hi = (int)((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
            y[j] = (float)lo * d;
            y[j + 16] = (float)hi * d;
        }
    }
}

void rb_q5_1_decode(const rb_block_q5_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RB_QK5_1) {
        const float d = rb_f16_to_f32(x[i].d);
        const float m = rb_f16_to_f32(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < 16; j++) {
            const int lo = (int)((x[i].qs[j] & 0x0F) | (((qh >> j) & 1u) << 4));
            const int hi = (int)((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
            const float v0 = (float)lo * d;
            const float v1 = (float)hi * d;
            y[j] = v0 + m;
            y[j + 16] = v1 + m;
        }
    }
}

void rb_q8_0_decode(const rb_block_q8_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RB_QK8_0) {
        const float d = rb_f16_to_f32(x[i].d);
        for (int j = 0; j < RB_QK8_0; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

void rb_q8_1_decode(const rb_block_q8_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RB_QK8_1) {
        const float d = rb_f16_to_f32(x[i].d);
        for (int j = 0; j < RB_QK8_1; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

/* Reference encoders of the k-quant super-block formats (q2_K, q3_K, q4_K,
 * q5_K, q6_K) and of q8_K (the activation format of k-quant dot products).
 * Each follows ggml's quantize_row_<t>_ref without importance matrix: search
 * per-group scales, quantize the scales themselves, then re-quantize the
 * values against the rounded scales, and pack. Results are byte-identical to
 * ggml's for finite input. */
#include "quant_internal.h"

#include <math.h>

/* packs 256 2-bit levels: byte l of each 32-byte chunk holds levels l, l+32,
 * l+64, l+96 of the corresponding 128-value half */
static void pack2_256(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < RB_QK_K; h += 128) {
        for (int l = 0; l < 32; l++) {
            qs[h / 4 + l] = (uint8_t)((L[h + l] & 3) | ((L[h + l + 32] & 3) << 2) | ((L[h + l + 64] & 3) << 4) |
                                      ((L[h + l + 96] & 3) << 6));
        }
    }
}

/* q4_K / q5_K: 8 groups of 32, 6-bit scale and min per group packed into 12
 * bytes (groups 0-3 plain in the low 6 bits, groups 4-7 split 4+2 bits) */
static void pack_scale_min_k4(const uint8_t ls[8], const uint8_t lm[8], uint8_t out[RB_K_SCALE_SIZE]) {
    for (int j = 0; j < 4; j++) {
        out[j] = ls[j];
        out[j + 4] = lm[j];
    }
    for (int j = 4; j < 8; j++) {
        out[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
        out[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
        out[j] |= (uint8_t)((lm[j] >> 4) << 6);
    }
}

/* first stage of q4_K / q5_K: per-group asymmetric fits with weights
 * sqrt(mean x^2) + |x|, then 6-bit scales/mins relative to the largest */
static void kx_scales(const float *x, int nmax, float rmin, float rdelta, int nstep, uint8_t *L,
                      rb_f16 *d_out, rb_f16 *dmin_out, uint8_t packed[RB_K_SCALE_SIZE]) {
    float scales[8], mins[8], w[32];
    uint8_t Laux[32];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        const float *g = x + 32 * j;
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; l++) {
            const float sq = g[l] * g[l];
            sum_x2 += sq;
        }
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(g[l]);
        scales[j] = rb_kq_make_qkx2_quants(32, nmax, g, w, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        const uint8_t s = (uint8_t)rb_kq_nearest_int(inv_scale * scales[j]);
        const uint8_t m = (uint8_t)rb_kq_nearest_int(inv_min * mins[j]);
        ls[j] = s < 63 ? s : 63;
        lm[j] = m < 63 ? m : 63;
    }
    pack_scale_min_k4(ls, lm, packed);
    *d_out = rb_f32_to_f16(max_scale / 63.f);
    *dmin_out = rb_f32_to_f16(max_min / 63.f);
}

/* second stage of q4_K / q5_K: levels against the rounded scales */
static void kx_requantize(const float *x, int nmax, rb_f16 d16, rb_f16 dmin16, const uint8_t *packed, uint8_t *L) {
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        rb_kq_scale_min_k4(j, packed, &sc, &m);
        const float d = rb_f16_to_f32(d16) * (float)sc;
        if (d == 0.0f) continue;
        const float dm = rb_f16_to_f32(dmin16) * (float)m;
        for (int i = 0; i < 32; i++) {
            const float t = x[32 * j + i] + dm;
            L[32 * j + i] = (uint8_t)rb_kq_clampi(rb_kq_nearest_int(t / d), 0, nmax);
        }
    }
}

void rb_q2_K_encode(const float *x, rb_block_q2_K *y, int64_t nb) {
    const float q4scale = 15.f;
    for (int64_t i = 0; i < nb; i++, x += RB_QK_K) {
        uint8_t L[RB_QK_K], Laux[16];
        float w[16], mins[16], scales[16];
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            scales[j] = rb_kq_make_qkx2_quants(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)rb_kq_nearest_int(iscale * scales[j]);
            y[i].d = rb_f32_to_f16(max_scale / q4scale);
        } else {
            for (int j = 0; j < 16; j++) y[i].scales[j] = 0;
            y[i].d = rb_f32_to_f16(0.0f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < 16; j++) {
                const int l = rb_kq_nearest_int(iscale * mins[j]);
                y[i].scales[j] = (uint8_t)(y[i].scales[j] | (l << 4));
            }
            y[i].dmin = rb_f32_to_f16(max_min / q4scale);
        } else {
            y[i].dmin = rb_f32_to_f16(0.0f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = rb_f16_to_f32(y[i].d) * (float)(y[i].scales[j] & 0xF);
            if (d == 0.0f) continue;
            const float dm = rb_f16_to_f32(y[i].dmin) * (float)(y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) {
                const float t = x[16 * j + l] + dm;
                L[16 * j + l] = (uint8_t)rb_kq_clampi(rb_kq_nearest_int(t / d), 0, 3);
            }
        }
        pack2_256(L, y[i].qs);
    }
}

/* 6-bit signed scale j (stored +32) of a q3_K block */
static int q3_scale(const uint8_t *s, int j) {
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

void rb_q3_K_encode(const float *x, rb_block_q3_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RB_QK_K) {
        int8_t L[RB_QK_K];
        float scales[16];
        float max_scale = 0.0f, amax = 0.0f;
        for (int j = 0; j < 16; j++) {
            scales[j] = rb_kq_make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            const float a = fabsf(scales[j]);
            if (a > amax) {
                amax = a;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale != 0.0f) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                /* ggml stores this through an int8_t; the value is in [-32, 32] */
                const int l = rb_kq_clampi(rb_kq_nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) {
                    y[i].scales[j] = (uint8_t)(l & 0xF);
                } else {
                    y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                }
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = rb_f32_to_f16(1 / iscale);
        } else {
            y[i].d = rb_f32_to_f16(0.0f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = rb_f16_to_f32(y[i].d) * (float)q3_scale(y[i].scales, j);
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; l++) {
                const int q = rb_kq_clampi(rb_kq_nearest_int(x[16 * j + l] / d), -4, 3);
                L[16 * j + l] = (int8_t)(q + 4);
            }
        }
        /* high bit of level k goes to hmask[k % 32], bit k / 32 */
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t low[RB_QK_K];
        for (int k = 0; k < RB_QK_K; k++) {
            int q = L[k];
            if (q > 3) {
                y[i].hmask[k % 32] |= (uint8_t)(1u << (k / 32));
                q -= 4;
            }
            low[k] = (uint8_t)q;
        }
        pack2_256(low, y[i].qs);
    }
}

void rb_q4_K_encode(const float *x, rb_block_q4_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RB_QK_K) {
        uint8_t L[RB_QK_K];
        kx_scales(x, 15, -1.f, 0.1f, 20, L, &y[i].d, &y[i].dmin, y[i].scales);
        kx_requantize(x, 15, y[i].d, y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < RB_QK_K; j += 64, q += 32) {
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        }
    }
}

void rb_q5_K_encode(const float *x, rb_block_q5_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RB_QK_K) {
        uint8_t L[RB_QK_K];
        kx_scales(x, 31, -0.5f, 0.1f, 15, L, &y[i].d, &y[i].dmin, y[i].scales);
        kx_requantize(x, 31, y[i].d, y[i].dmin, y[i].scales, L);
        /* low nibbles as in q4_K; fifth bits of chunk c (64 values) in qh bits 2c, 2c+1 */
        memset(y[i].qh, 0, sizeof y[i].qh);
        uint8_t *ql = y[i].qs;
        for (int c = 0; c < 4; c++, ql += 32) {
            for (int l = 0; l < 32; l++) {
                const int a = L[64 * c + l], b = L[64 * c + l + 32];
                y[i].qh[l] |= (uint8_t)(((a >> 4) & 1) << (2 * c));
                y[i].qh[l] |= (uint8_t)(((b >> 4) & 1) << (2 * c + 1));
                ql[l] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
            }
        }
    }
}

void rb_q6_K_encode(const float *x, rb_block_q6_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RB_QK_K) {
        int8_t L[RB_QK_K];
        float scales[16];
        float max_scale = 0.0f, max_abs = 0.0f;
        for (int j = 0; j < 16; j++) {
            scales[j] = rb_kq_make_qx_quants(16, 32, x + 16 * j, L + 16 * j);
            const float a = fabsf(scales[j]);
            if (a > max_abs) {
                max_abs = a;
                max_scale = scales[j];
            }
        }
        if (max_abs < RB_KQ_GROUP_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = rb_f32_to_f16(1 / iscale);
        for (int j = 0; j < 16; j++) {
            const int s = rb_kq_nearest_int(iscale * scales[j]);
            y[i].scales[j] = (int8_t)(s < 127 ? s : 127);
        }
        for (int j = 0; j < 16; j++) {
            const float d = rb_f16_to_f32(y[i].d) * (float)y[i].scales[j];
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; l++) {
                const int q = rb_kq_clampi(rb_kq_nearest_int(x[16 * j + l] / d), -32, 31);
                L[16 * j + l] = (int8_t)(q + 32);
            }
        }
        /* per 128 values: ql[l] = lo4(L[l]) | lo4(L[l+64]) << 4, ql[l+32] likewise
         * for L[l+32], L[l+96]; qh[l] holds the four high 2-bit pairs */
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int h = 0; h < RB_QK_K; h += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const int a = L[h + l], b = L[h + l + 32], c = L[h + l + 64], e = L[h + l + 96];
                ql[l] = (uint8_t)((a & 0xF) | ((c & 0xF) << 4));
                ql[l + 32] = (uint8_t)((b & 0xF) | ((e & 0xF) << 4));
                qh[l] = (uint8_t)((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
            }
        }
    }
}

void rb_q8_K_encode(const float *x, rb_block_q8_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RB_QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < RB_QK_K; j++) {
            const float a = fabsf(x[j]);
            if (a > amax) {
                amax = a;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            /* ggml leaves bsums untouched here; they are zero by definition */
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < RB_QK_K; j++) {
            const int v = rb_kq_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < RB_QK_K / 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[16 * g + l];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

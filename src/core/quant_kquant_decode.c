/* Decoders of the k-quant super-block formats (q2_K .. q6_K) and q8_K into
 * f32. Each value is computed with the same float operations in the same
 * order as ggml's dequantize_row_<t>, so the output matches ggml bit for bit
 * (checked against llama.cpp-written fixtures in tests/quant). */
#include "quant_internal.h"

void rb_q2_K_decode(const rb_block_q2_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = rb_f16_to_f32(x[i].d);
        const float dmin = rb_f16_to_f32(x[i].dmin);
        /* group g (16 values) uses scales[g]; its levels sit in byte
         * 32*(g/8) + 16*(g%2) + l at bit shift 2*((g/2)%4) */
        for (int g = 0; g < 16; g++) {
            const uint8_t sc = x[i].scales[g];
            const float dl = d * (float)(sc & 0xF);
            const float ml = dmin * (float)(sc >> 4);
            const uint8_t *q = x[i].qs + 32 * (g / 8) + 16 * (g % 2);
            const int shift = 2 * ((g / 2) % 4);
            for (int l = 0; l < 16; l++) {
                const float v = dl * (float)((q[l] >> shift) & 3);
                *y++ = v - ml;
            }
        }
    }
}

void rb_q3_K_decode(const rb_block_q3_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d_all = rb_f16_to_f32(x[i].d);
        const uint8_t *s = x[i].scales;
        for (int g = 0; g < 16; g++) {
            /* 6-bit scale: low 4 bits from s[g] or s[g-8] high nibble, top 2 bits from s[8 + g%4] */
            const int lo = g < 8 ? (s[g] & 0xF) : (s[g - 8] >> 4);
            const int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
            const float dl = d_all * (float)((lo | (hi << 4)) - 32);
            /* value k = 16*g + l: low bits like q2_K, high bit in hmask[k % 32] bit k / 32 */
            const uint8_t *q = x[i].qs + 32 * (g / 8) + 16 * (g % 2);
            const int shift = 2 * ((g / 2) % 4);
            for (int l = 0; l < 16; l++) {
                const int k = 16 * g + l;
                const int high = (x[i].hmask[k % 32] >> (k / 32)) & 1;
                const int v = ((q[l] >> shift) & 3) - (high ? 0 : 4);
                *y++ = dl * (float)v;
            }
        }
    }
}

static void decode_k4_pairs(const uint8_t *scales, float d, float dmin, const uint8_t *qs, const uint8_t *qh,
                            float *y) {
    /* 4 chunks of 64 values: first 32 from low nibbles, next 32 from high
     * nibbles of the same 32 bytes; q5_K adds bit 2c / 2c+1 of qh as the fifth bit */
    for (int c = 0; c < 4; c++) {
        uint8_t sc, m;
        rb_kq_scale_min_k4(2 * c, scales, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        rb_kq_scale_min_k4(2 * c + 1, scales, &sc, &m);
        const float d2 = d * (float)sc, m2 = dmin * (float)m;
        const uint8_t *q = qs + 32 * c;
        for (int l = 0; l < 32; l++) {
            const int hb = qh ? ((qh[l] >> (2 * c)) & 1) << 4 : 0;
            const float v = d1 * (float)((q[l] & 0xF) + hb);
            y[l] = v - m1;
        }
        for (int l = 0; l < 32; l++) {
            const int hb = qh ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0;
            const float v = d2 * (float)((q[l] >> 4) + hb);
            y[32 + l] = v - m2;
        }
        y += 64;
    }
}

void rb_q4_K_decode(const rb_block_q4_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RB_QK_K)
        decode_k4_pairs(x[i].scales, rb_f16_to_f32(x[i].d), rb_f16_to_f32(x[i].dmin), x[i].qs, NULL, y);
}

void rb_q5_K_decode(const rb_block_q5_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RB_QK_K)
        decode_k4_pairs(x[i].scales, rb_f16_to_f32(x[i].d), rb_f16_to_f32(x[i].dmin), x[i].qs, x[i].qh, y);
}

void rb_q6_K_decode(const rb_block_q6_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = rb_f16_to_f32(x[i].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h;
            const uint8_t *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h;
            /* quarter k (0..3) of these 128 values: nibble (k/2) of ql[l + 32*(k%2)], qh bits 2k..2k+1 */
            for (int k = 0; k < 4; k++) {
                for (int l = 0; l < 32; l++) {
                    const int lo = (ql[l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xF;
                    const int q = (lo | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
                    const float ds = d * (float)sc[l / 16 + 2 * k];
                    y[32 * k + l] = ds * (float)q;
                }
            }
            y += 128;
        }
    }
}

void rb_q8_K_decode(const rb_block_q8_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RB_QK_K) {
        for (int j = 0; j < RB_QK_K; j++) y[j] = x[i].d * (float)x[i].qs[j];
    }
}

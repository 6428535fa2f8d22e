/* Portable integer dot products of the k-quant super-block formats (256
 * elements) against q8_K activations. Each decodes the element -> (quant,
 * scale index) mapping of the ggml layout directly from the blocks; the SIMD
 * versions must match them to float rounding. */
#include "backends/cpu/kernels_scalar.h"

void rb_vd_q2_K_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q2_K *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        int part[16] = {0};
        for (int e = 0; e < RB_QK_K; e++) {
            int h = e / 128, j = (e % 128) / 32, l = e % 32;
            int q = (x[b].qs[h * 32 + l] >> (2 * j)) & 3;
            part[e / 16] += q * y[b].qs[e];
        }
        int isum = 0, summs = 0;
        for (int g = 0; g < 16; g++) {
            isum += (x[b].scales[g] & 0xF) * part[g];
            summs += (x[b].scales[g] >> 4) * y[b].bsums[g];
        }
        sum += y[b].d * (rb_f16_to_f32(x[b].d) * (float)isum - rb_f16_to_f32(x[b].dmin) * (float)summs);
    }
    *s = sum;
}

void rb_vd_q3_K_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q3_K *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        int8_t sc[16];
        rb_q3_K_scales(x[b].scales, sc);
        int part[16] = {0};
        for (int e = 0; e < RB_QK_K; e++) {
            int h = e / 128, j = (e % 128) / 32, l = e % 32;
            int q = (x[b].qs[h * 32 + l] >> (2 * j)) & 3;
            int hb = (x[b].hmask[l] >> (h * 4 + j)) & 1;
            part[e / 16] += (q - (hb ? 0 : 4)) * y[b].qs[e];
        }
        int isum = 0;
        for (int g = 0; g < 16; g++) isum += sc[g] * part[g];
        sum += y[b].d * rb_f16_to_f32(x[b].d) * (float)isum;
    }
    *s = sum;
}

/* shared by q4_K and q5_K: qh == NULL for q4_K */
static float dot_q45_K_block(const uint8_t *qs, const uint8_t *qh, const uint8_t *scales, float d, float dmin,
                             const rb_block_q8_K *y) {
    int part[8] = {0};
    for (int e = 0; e < RB_QK_K; e++) {
        int c = e / 64, w = e % 64;
        uint8_t byte = qs[c * 32 + w % 32];
        int q = w < 32 ? (byte & 0xF) : (byte >> 4);
        if (qh) q |= ((qh[e % 32] >> (e / 32)) & 1) << 4;
        part[e / 32] += q * y->qs[e];
    }
    int isum = 0, summ = 0;
    for (int sb = 0; sb < 8; sb++) {
        uint8_t sc, m;
        rb_k4_scale_min(sb, scales, &sc, &m);
        isum += sc * part[sb];
        summ += m * (y->bsums[2 * sb] + y->bsums[2 * sb + 1]);
    }
    return y->d * (d * (float)isum - dmin * (float)summ);
}

void rb_vd_q4_K_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q4_K *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++)
        sum += dot_q45_K_block(x[b].qs, NULL, x[b].scales, rb_f16_to_f32(x[b].d), rb_f16_to_f32(x[b].dmin), &y[b]);
    *s = sum;
}

void rb_vd_q5_K_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q5_K *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++)
        sum += dot_q45_K_block(x[b].qs, x[b].qh, x[b].scales, rb_f16_to_f32(x[b].d), rb_f16_to_f32(x[b].dmin),
                               &y[b]);
    *s = sum;
}

void rb_vd_q6_K_scalar(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q6_K *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        int part[16] = {0};
        for (int e = 0; e < RB_QK_K; e++) {
            int h = e / 128, k = (e % 128) / 32, l = e % 32;
            uint8_t lb = x[b].ql[h * 64 + l + (k & 1) * 32];
            int lo = k < 2 ? (lb & 0xF) : (lb >> 4);
            int hi = (x[b].qh[h * 32 + l] >> (2 * k)) & 3;
            part[e / 16] += ((lo | (hi << 4)) - 32) * y[b].qs[e];
        }
        int isum = 0;
        for (int g = 0; g < 16; g++) isum += x[b].scales[g] * part[g];
        sum += y[b].d * rb_f16_to_f32(x[b].d) * (float)isum;
    }
    *s = sum;
}

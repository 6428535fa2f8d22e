/* AVX2 dot products of the k-quant formats against q8_K activations
 * (compiled with -mavx2 -mfma -mf16c). Every format is unpacked into
 * unsigned byte quants 32 at a time; maddubs with the activations gives
 * pair sums, a madd with the per-16 (or per-32) scales accumulates int32 for
 * the whole super-block, and the constant offsets of the signed formats are
 * taken out through the activation group sums (bsums). */
#include "backends/cpu/kernels_avx2.h"
#include "backends/cpu/kernels_scalar.h"
#include "backends/cpu/simd_avx2_util.h"

/* acc += sum over the 32 bytes of q*y, scaled by sa (first 16) and sb (last 16) */
static inline __m256i chunk(__m256i acc, __m256i q, const int8_t *y, int sa, int sb) {
    __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)y));
    __m256i sc = _mm256_set_m128i(_mm_set1_epi16((short)sb), _mm_set1_epi16((short)sa));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, sc));
}

void rb_vd_q2_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q2_K *x = vx;
    const rb_block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        const uint8_t *sc = x[b].scales;
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[b].qs + h * 32));
            for (int j = 0; j < 4; j++) {
                int k = h * 4 + j;
                __m256i qj = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
                acc = chunk(acc, qj, y[b].qs + k * 32, sc[2 * k] & 0xF, sc[2 * k + 1] & 0xF);
            }
        }
        int summs = 0;
        for (int g = 0; g < 16; g++) summs += (sc[g] >> 4) * y[b].bsums[g];
        sum += y[b].d * (_cvtsh_ss(x[b].d) * (float)rb_hsum_epi32_256(acc) - _cvtsh_ss(x[b].dmin) * (float)summs);
    }
    *s = sum;
}

void rb_vd_q3_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q3_K *x = vx;
    const rb_block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        int8_t sc[16];
        rb_q3_K_scales(x[b].scales, sc);
        __m256i hm = _mm256_loadu_si256((const __m256i *)x[b].hmask);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[b].qs + h * 32));
            for (int j = 0; j < 4; j++) {
                int k = h * 4 + j;
                __m256i qj = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
                __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, k), m1), 2);
                acc = chunk(acc, _mm256_or_si256(qj, hb), y[b].qs + k * 32, sc[2 * k], sc[2 * k + 1]);
            }
        }
        /* quants were stored as q + 4 (0..7); take 4 * sum(scale * y) back out */
        int off = 0;
        for (int g = 0; g < 16; g++) off += sc[g] * y[b].bsums[g];
        sum += y[b].d * _cvtsh_ss(x[b].d) * (float)(rb_hsum_epi32_256(acc) - 4 * off);
    }
    *s = sum;
}

static inline float q45_K_block(const uint8_t *qs, const uint8_t *qh, const uint8_t *scales, float d, float dmin,
                                const rb_block_q8_K *y) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(1);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) rb_k4_scale_min(j, scales, &sc[j], &mn[j]);
    __m256i hv = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(qs + c * 32));
        __m256i lo = _mm256_and_si256(q, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (qh) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 2 * c), m1), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 2 * c + 1), m1), 4));
        }
        acc = chunk(acc, lo, y->qs + c * 64, sc[2 * c], sc[2 * c]);
        acc = chunk(acc, hi, y->qs + c * 64 + 32, sc[2 * c + 1], sc[2 * c + 1]);
    }
    int summ = 0;
    for (int j = 0; j < 8; j++) summ += mn[j] * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    return y->d * (d * (float)rb_hsum_epi32_256(acc) - dmin * (float)summ);
}

void rb_vd_q4_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q4_K *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++)
        sum += q45_K_block(x[b].qs, NULL, x[b].scales, _cvtsh_ss(x[b].d), _cvtsh_ss(x[b].dmin), &y[b]);
    *s = sum;
}

void rb_vd_q5_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q5_K *x = vx;
    const rb_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++)
        sum += q45_K_block(x[b].qs, x[b].qh, x[b].scales, _cvtsh_ss(x[b].d), _cvtsh_ss(x[b].dmin), &y[b]);
    *s = sum;
}

void rb_vd_q6_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_q6_K *x = vx;
    const rb_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        const int8_t *sc = x[b].scales;
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(x[b].ql + h * 64));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(x[b].ql + h * 64 + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)(x[b].qh + h * 32));
            __m256i lows[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                               _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
            for (int k = 0; k < 4; k++) {
                __m256i hk = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m3), 4);
                int c = h * 4 + k;
                acc = chunk(acc, _mm256_or_si256(lows[k], hk), y[b].qs + c * 32, sc[2 * c], sc[2 * c + 1]);
            }
        }
        int off = 0;
        for (int g = 0; g < 16; g++) off += sc[g] * y[b].bsums[g];
        sum += y[b].d * _cvtsh_ss(x[b].d) * (float)(rb_hsum_epi32_256(acc) - 32 * off);
    }
    *s = sum;
}

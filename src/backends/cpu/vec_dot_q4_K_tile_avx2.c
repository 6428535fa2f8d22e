/* AVX2 blocked q4_K x q8_K tile for prefill: each weight super-block is
 * unpacked once (eight 32-byte quant vectors, per-32 scales and mins) and
 * then multiplied with up to four activation rows, so the unpacking cost is
 * shared; the min terms use the activations' group sums (bsums).
 * Compiled with -mavx2 -mfma -mf16c. */
#include "backends/cpu/kernels_avx2.h"
#include "backends/cpu/kernels_scalar.h"
#include "backends/cpu/simd_avx2_util.h"

#define RB_AI static inline __attribute__((always_inline))

RB_AI void row_tile(int64_t nb, const rb_block_q4_K *x, const char *y, size_t ldb, float *dst, size_t ldd,
                    const int C) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 accf[4];
    for (int c = 0; c < C; c++) accf[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) rb_k4_scale_min(j, x[b].scales, &sc[j], &mn[j]);
        __m256i q[8], s16[8];
        for (int ch = 0; ch < 4; ch++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(x[b].qs + ch * 32));
            q[2 * ch] = _mm256_and_si256(v, m4);
            q[2 * ch + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        for (int j = 0; j < 8; j++) s16[j] = _mm256_set1_epi16((short)sc[j]);
        /* mins as int16 pairs lined up with bsums[0..15]: min j covers bsums 2j, 2j+1 */
        const __m256i mins = _mm256_setr_epi16((short)mn[0], (short)mn[0], (short)mn[1], (short)mn[1], (short)mn[2],
                                               (short)mn[2], (short)mn[3], (short)mn[3], (short)mn[4], (short)mn[4],
                                               (short)mn[5], (short)mn[5], (short)mn[6], (short)mn[6], (short)mn[7],
                                               (short)mn[7]);
        const float d = _cvtsh_ss(x[b].d), dmin = _cvtsh_ss(x[b].dmin);
        for (int c = 0; c < C; c++) {
            const rb_block_q8_K *yb = (const rb_block_q8_K *)(y + (size_t)c * ldb) + b;
            __m256i acc = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                __m256i p = _mm256_maddubs_epi16(q[j], _mm256_loadu_si256((const __m256i *)(yb->qs + 32 * j)));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, s16[j]));
            }
            __m256i mm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)yb->bsums), mins);
            accf[c] = _mm256_fmadd_ps(_mm256_set1_ps(yb->d * d), _mm256_cvtepi32_ps(acc), accf[c]);
            accf[c] = _mm256_fmadd_ps(_mm256_set1_ps(-yb->d * dmin), _mm256_cvtepi32_ps(mm), accf[c]);
        }
    }
    for (int c = 0; c < C; c++) dst[(size_t)c * ldd] = rb_hsum_ps256(accf[c]);
}

void rb_gemm_q4_K_avx2(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                       size_t ldd) {
    const int64_t nb = n / RB_QK_K;
    for (int r = 0; r < nr; r++) {
        const rb_block_q4_K *xr = (const rb_block_q4_K *)((const char *)x + (size_t)r * lda);
        for (int c0 = 0; c0 < nc; c0 += 4) {
            const char *yc = (const char *)y + (size_t)c0 * ldb;
            float *d = dst + (size_t)c0 * ldd + r;
            switch (nc - c0 < 4 ? nc - c0 : 4) {
            case 1: row_tile(nb, xr, yc, ldb, d, ldd, 1); break;
            case 2: row_tile(nb, xr, yc, ldb, d, ldd, 2); break;
            case 3: row_tile(nb, xr, yc, ldb, d, ldd, 3); break;
            default: row_tile(nb, xr, yc, ldb, d, ldd, 4); break;
            }
        }
    }
}

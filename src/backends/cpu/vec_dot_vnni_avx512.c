/* AVX-512 VNNI dot products and register-blocked tiles for q4_0 x q8_0 and
 * q8_0 x q8_0. A zmm register holds two consecutive 32-element blocks of one
 * row; vpdpbusd multiplies unsigned by signed bytes, so
 *   q4_0: nibbles (0..15, unsigned) x activations, minus 8 * sum(activations)
 *   q8_0: (activations + 128, unsigned) x weights, minus 128 * sum(weights)
 * where the correction is folded into the int32 accumulator's start value.
 * The per-block scales d_w * d_y are applied as [block0 x8 | block1 x8]
 * vectors. A tile of up to 4 weight rows x 4 activation rows reuses each
 * unpacked weight pair for all activation rows and vice versa.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c. */
#include "backends/cpu/kernels_avx512.h"

#include <immintrin.h>
#include <string.h>

#define RB_AI static inline __attribute__((always_inline))

/* [d(b0) x8 | d(b1) x8] from two f16 scales (h1 = 0 for a lone last block) */
RB_AI __m512 scale_pair(rb_f16 h0, rb_f16 h1) {
    __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)h0 | ((uint32_t)h1 << 16))));
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

/* 32 bytes of block b and, when two, of block b+1 into one zmm (upper half zero otherwise) */
RB_AI __m512i load_pair(const int8_t *q0, const int8_t *q1, int two) {
    __m512i v = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)q0));
    if (two) v = _mm512_inserti64x4(v, _mm256_loadu_si256((const __m256i *)q1), 1);
    return v;
}

/* q4_0 nibbles of blocks b, b+1 as [b lo16, b hi16, b+1 lo16, b+1 hi16] unsigned bytes */
RB_AI __m512i nibbles_pair(const uint8_t *q0, const uint8_t *q1, int two) {
    __m128i t0 = _mm_loadu_si128((const __m128i *)q0);
    __m256i a = _mm256_set_m128i(_mm_srli_epi16(t0, 4), t0);
    __m512i v = _mm512_zextsi256_si512(a);
    if (two) {
        __m128i t1 = _mm_loadu_si128((const __m128i *)q1);
        v = _mm512_inserti64x4(v, _mm256_set_m128i(_mm_srli_epi16(t1, 4), t1), 1);
    }
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
}

RB_AI void tile_q4_0(int64_t n, const char *x, size_t lda, const char *y, size_t ldb, float *dst, size_t ldd,
                     const int R, const int C) {
    const int64_t nb = n / 32;
    const rb_block_q4_0 *xr[4];
    const rb_block_q8_0 *yc[4];
    for (int r = 0; r < R; r++) xr[r] = (const rb_block_q4_0 *)(x + (size_t)r * lda);
    for (int c = 0; c < C; c++) yc[c] = (const rb_block_q8_0 *)(y + (size_t)c * ldb);
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
    const __m512i eight = _mm512_set1_epi8(8);
    for (int64_t b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        __m512i yv[4], neg[4];
        __m512 dy[4];
        for (int c = 0; c < C; c++) {
            yv[c] = load_pair(yc[c][b].qs, yc[c][b + two].qs, two);
            neg[c] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                      _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, yv[c]));
            dy[c] = scale_pair(yc[c][b].d, two ? yc[c][b + 1].d : 0);
        }
        for (int r = 0; r < R; r++) {
            __m512i w = nibbles_pair(xr[r][b].qs, xr[r][b + two].qs, two);
            __m512 dw = scale_pair(xr[r][b].d, two ? xr[r][b + 1].d : 0);
            for (int c = 0; c < C; c++) {
                __m512i d = _mm512_dpbusd_epi32(neg[c], w, yv[c]);
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, dy[c]), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) dst[c * ldd + r] = _mm512_reduce_add_ps(acc[r][c]);
}

RB_AI void tile_q8_0(int64_t n, const char *x, size_t lda, const char *y, size_t ldb, float *dst, size_t ldd,
                     const int R, const int C) {
    const int64_t nb = n / 32;
    const rb_block_q8_0 *xr[4];
    const rb_block_q8_0 *yc[4];
    for (int r = 0; r < R; r++) xr[r] = (const rb_block_q8_0 *)(x + (size_t)r * lda);
    for (int c = 0; c < C; c++) yc[c] = (const rb_block_q8_0 *)(y + (size_t)c * ldb);
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        __m512i yu[4];
        __m512 dy[4];
        for (int c = 0; c < C; c++) {
            /* y + 128 as unsigned bytes; for a lone last block the zeroed upper weight half cancels it */
            yu[c] = _mm512_xor_si512(load_pair(yc[c][b].qs, yc[c][b + two].qs, two), bias);
            dy[c] = scale_pair(yc[c][b].d, two ? yc[c][b + 1].d : 0);
        }
        for (int r = 0; r < R; r++) {
            __m512i w = load_pair(xr[r][b].qs, xr[r][b + two].qs, two);
            __m512i neg = _mm512_sub_epi32(_mm512_setzero_si512(),
                                           _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, w));
            __m512 dw = scale_pair(xr[r][b].d, two ? xr[r][b + 1].d : 0);
            for (int c = 0; c < C; c++) {
                __m512i d = _mm512_dpbusd_epi32(neg, yu[c], w);
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, dy[c]), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) dst[c * ldd + r] = _mm512_reduce_add_ps(acc[r][c]);
}

#define TILE_DISPATCH(NAME, FN)                                                                                   \
    void NAME(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,        \
              size_t ldd) {                                                                                       \
        for (int r0 = 0; r0 < nr; r0 += 4) {                                                                      \
            int rr = nr - r0 < 4 ? nr - r0 : 4;                                                                   \
            const char *xr = (const char *)x + (size_t)r0 * lda;                                                  \
            for (int c0 = 0; c0 < nc; c0 += 4) {                                                                  \
                int cc = nc - c0 < 4 ? nc - c0 : 4;                                                               \
                const char *yc = (const char *)y + (size_t)c0 * ldb;                                              \
                float *d = dst + (size_t)c0 * ldd + r0;                                                           \
                switch (rr * 4 + cc) {                                                                            \
                case 5: FN(n, xr, lda, yc, ldb, d, ldd, 1, 1); break;                                             \
                case 6: FN(n, xr, lda, yc, ldb, d, ldd, 1, 2); break;                                             \
                case 7: FN(n, xr, lda, yc, ldb, d, ldd, 1, 3); break;                                             \
                case 8: FN(n, xr, lda, yc, ldb, d, ldd, 1, 4); break;                                             \
                case 9: FN(n, xr, lda, yc, ldb, d, ldd, 2, 1); break;                                             \
                case 10: FN(n, xr, lda, yc, ldb, d, ldd, 2, 2); break;                                            \
                case 11: FN(n, xr, lda, yc, ldb, d, ldd, 2, 3); break;                                            \
                case 12: FN(n, xr, lda, yc, ldb, d, ldd, 2, 4); break;                                            \
                case 13: FN(n, xr, lda, yc, ldb, d, ldd, 3, 1); break;                                            \
                case 14: FN(n, xr, lda, yc, ldb, d, ldd, 3, 2); break;                                            \
                case 15: FN(n, xr, lda, yc, ldb, d, ldd, 3, 3); break;                                            \
                case 16: FN(n, xr, lda, yc, ldb, d, ldd, 3, 4); break;                                            \
                case 17: FN(n, xr, lda, yc, ldb, d, ldd, 4, 1); break;                                            \
                case 18: FN(n, xr, lda, yc, ldb, d, ldd, 4, 2); break;                                            \
                case 19: FN(n, xr, lda, yc, ldb, d, ldd, 4, 3); break;                                            \
                default: FN(n, xr, lda, yc, ldb, d, ldd, 4, 4); break;                                            \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
    }

static TILE_DISPATCH(gemm_q4_0_tiles, tile_q4_0)
static TILE_DISPATCH(gemm_q8_0_tiles, tile_q8_0)

/* One activation row (decode) goes to the streaming matvec kernels, so every
 * M = 1 product takes the same path whatever the row split. */
void rb_gemm_q4_0_avx512(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                         size_t ldd) {
    if (nc == 1 && n <= RB_MATVEC_MAX_K) rb_matvec_q4_0_avx512(n, nr, x, lda, y, dst);
    else gemm_q4_0_tiles(n, nr, nc, x, lda, y, ldb, dst, ldd);
}

void rb_gemm_q8_0_avx512(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                         size_t ldd) {
    if (nc == 1 && n <= RB_MATVEC_MAX_K) rb_matvec_q8_0_avx512(n, nr, x, lda, y, dst);
    else gemm_q8_0_tiles(n, nr, nc, x, lda, y, ldb, dst, ldd);
}

void rb_vd_q4_0_avx512(int64_t n, float *s, const void *x, const void *y) {
    if (n <= RB_MATVEC_MAX_K) rb_matvec_q4_0_avx512(n, 1, x, 0, y, s);
    else tile_q4_0(n, x, 0, y, 0, s, 1, 1, 1);
}

void rb_vd_q8_0_avx512(int64_t n, float *s, const void *x, const void *y) {
    if (n <= RB_MATVEC_MAX_K) rb_matvec_q8_0_avx512(n, 1, x, 0, y, s);
    else tile_q8_0(n, x, 0, y, 0, s, 1, 1, 1);
}

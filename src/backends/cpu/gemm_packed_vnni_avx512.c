/* AVX-512 VNNI prefill kernels for q4_0 and q8_0 weights against q8_0
 * activations, on weights repacked so one zmm lane is one weight row.
 *
 * Packing (once per 16 weight rows, reused for every activation row): each
 * 32-element block of 16 rows becomes 8 zmm of unsigned bytes where dword k of
 * lane r holds elements 4k..4k+3 of row r (q4_0: the nibbles 0..15; q8_0:
 * w + 128), followed by the 16 rows' block scales as floats.
 * Multiplying: for each activation row c, 4 activation bytes are broadcast to
 * all lanes and vpdpbusd accumulates 4 products into each row's lane, so 8
 * vpdpbusd give a whole block for 16 rows; the unsigned offset is removed by
 * starting the accumulator at -8 * sum(y) or -128 * sum(y) of the block (the
 * activation row's block sums, computed once per matmul). The float work -
 * convert, scale by d_w * d_y, accumulate - is then shared by 16 rows instead
 * of being paid per row.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c. */
#include "backends/cpu/kernels_avx512.h"

#include <immintrin.h>
#include <string.h>

_Static_assert(RB_CPU_PACK_BLOCK_BYTES == 8 * 64 + 16 * 4, "packed block layout");
_Static_assert(RB_CPU_PACK_ROWS == 16, "one zmm lane per packed row");

/* Transposes 16 rows of 32 unsigned bytes (tmp[r][32]) into the packed block. */
static inline void pack_block(const uint8_t tmp[16][32], const float *dw, char *out) {
    const __m512i rows = _mm512_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, 480);
    for (int k = 0; k < 8; k++) {
        const __m512i v = _mm512_i32gather_epi32(rows, (const void *)(&tmp[0][0] + 4 * k), 1);
        _mm512_storeu_si512(out + 64 * k, v);
    }
    _mm512_storeu_ps(out + 512, _mm512_loadu_ps(dw));
}

void rb_pack_q4_0_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    const int64_t nb = n / 32;
    _Alignas(64) uint8_t tmp[16][32];
    _Alignas(64) float dw[16];
    memset(tmp, 0, sizeof tmp);
    memset(dw, 0, sizeof dw);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        for (int r = 0; r < nr; r++) {
            const rb_block_q4_0 *blk = (const rb_block_q4_0 *)((const char *)x + (size_t)r * lda) + b;
            const __m128i q = _mm_loadu_si128((const __m128i *)blk->qs);
            _mm_store_si128((__m128i *)tmp[r], _mm_and_si128(q, m4));
            _mm_store_si128((__m128i *)(tmp[r] + 16), _mm_and_si128(_mm_srli_epi16(q, 4), m4));
            dw[r] = _cvtsh_ss(blk->d);
        }
        pack_block((const uint8_t(*)[32])tmp, dw, (char *)out + (size_t)b * RB_CPU_PACK_BLOCK_BYTES);
    }
}

void rb_pack_q8_0_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    const int64_t nb = n / 32;
    _Alignas(64) uint8_t tmp[16][32];
    _Alignas(64) float dw[16];
    memset(tmp, 0, sizeof tmp);
    memset(dw, 0, sizeof dw);
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++) {
        for (int r = 0; r < nr; r++) {
            const rb_block_q8_0 *blk = (const rb_block_q8_0 *)((const char *)x + (size_t)r * lda) + b;
            _mm256_store_si256((__m256i *)tmp[r], _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)blk->qs), bias));
            dw[r] = _cvtsh_ss(blk->d);
        }
        pack_block((const uint8_t(*)[32])tmp, dw, (char *)out + (size_t)b * RB_CPU_PACK_BLOCK_BYTES);
    }
}

/* C activation rows against one packed group of 16 rows. */
static inline __attribute__((always_inline)) void packed_cols(int64_t nb, int nr, const char *packed, const char *y,
                                                              size_t ldb, const rb_act_aux *aux, size_t ld_aux,
                                                              int32_t bias, float *dst, size_t ldd, const int C) {
    __m512 acc[8];
    const rb_block_q8_0 *yc[8];
    const rb_act_aux *ac[8];
    for (int c = 0; c < C; c++) {
        acc[c] = _mm512_setzero_ps();
        yc[c] = (const rb_block_q8_0 *)(y + (size_t)c * ldb);
        ac[c] = aux + (size_t)c * ld_aux;
    }
    for (int64_t b = 0; b < nb; b++) {
        const char *pb = packed + (size_t)b * RB_CPU_PACK_BLOCK_BYTES;
        __m512i w[8];
        for (int k = 0; k < 8; k++) w[k] = _mm512_load_si512(pb + 64 * k);
        const __m512 dw = _mm512_load_ps(pb + 512);
        for (int c = 0; c < C; c++) {
            const int8_t *q = yc[c][b].qs;
            __m512i a0 = _mm512_set1_epi32(-bias * ac[c][b].sum);
            __m512i a1 = _mm512_setzero_si512();
            for (int k = 0; k < 8; k += 2) {
                int32_t y0, y1;
                memcpy(&y0, q + 4 * k, 4);
                memcpy(&y1, q + 4 * k + 4, 4);
                a0 = _mm512_dpbusd_epi32(a0, w[k], _mm512_set1_epi32(y0));
                a1 = _mm512_dpbusd_epi32(a1, w[k + 1], _mm512_set1_epi32(y1));
            }
            const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(ac[c][b].d));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)), s, acc[c]);
        }
    }
    const __mmask16 m = (__mmask16)((1u << nr) - 1u);
    for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(dst + (size_t)c * ldd, m, acc[c]);
}

static void gemm_packed(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                        const rb_act_aux *aux, size_t ld_aux, int32_t bias, float *dst, size_t ldd) {
    const int64_t nb = n / 32;
    for (int c0 = 0; c0 < nc; c0 += 8) {
        const char *yc = (const char *)y + (size_t)c0 * ldb;
        const rb_act_aux *a = aux + (size_t)c0 * ld_aux;
        float *d = dst + (size_t)c0 * ldd;
        switch (nc - c0 < 8 ? nc - c0 : 8) {
        case 1: packed_cols(nb, nr, packed, yc, ldb, a, ld_aux, bias, d, ldd, 1); break;
        case 2: packed_cols(nb, nr, packed, yc, ldb, a, ld_aux, bias, d, ldd, 2); break;
        case 3: packed_cols(nb, nr, packed, yc, ldb, a, ld_aux, bias, d, ldd, 3); break;
        case 4: packed_cols(nb, nr, packed, yc, ldb, a, ld_aux, bias, d, ldd, 4); break;
        case 5: packed_cols(nb, nr, packed, yc, ldb, a, ld_aux, bias, d, ldd, 5); break;
        case 6: packed_cols(nb, nr, packed, yc, ldb, a, ld_aux, bias, d, ldd, 6); break;
        case 7: packed_cols(nb, nr, packed, yc, ldb, a, ld_aux, bias, d, ldd, 7); break;
        default: packed_cols(nb, nr, packed, yc, ldb, a, ld_aux, bias, d, ldd, 8); break;
        }
    }
}

void rb_gemm_packed_q4_0_avx512(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                                const rb_act_aux *aux, size_t ld_aux, float *dst, size_t ldd, rb_pack_prefetch *pf) {
    (void)pf; /* these packers read their rows straight from memory */
    gemm_packed(n, nr, nc, packed, y, ldb, aux, ld_aux, 8, dst, ldd);
}

void rb_gemm_packed_q8_0_avx512(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                                const rb_act_aux *aux, size_t ld_aux, float *dst, size_t ldd, rb_pack_prefetch *pf) {
    (void)pf; /* these packers read their rows straight from memory */
    gemm_packed(n, nr, nc, packed, y, ldb, aux, ld_aux, 128, dst, ldd);
}

/* AVX-512 prefill kernels for float weights (f16, bf16, f32) against f32
 * activations, on weights repacked so one zmm lane is one weight row: the
 * float counterpart of the packed VNNI kernels (gemm_packed_vnni_avx512.c).
 *
 * Packing (once per 16 weight rows, reused for every activation row) converts
 * the rows to f32 and transposes them, so element k of the 16 rows is one
 * 64-byte vector. Multiplying: for each k the weight vector is loaded once and
 * every activation row c adds w * y[c][k] with one FMA whose broadcast operand
 * comes straight from memory, into a register tile of 16 rows x up to 16
 * activation rows. The products stay FMA-bound: no conversion, reduction or
 * shuffle in the inner loop, one load per FMA that the broadcast folds in.
 * Every output sums its K products in order, in f32.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c. */
#include "backends/cpu/kernels_avx512.h"
#include "backends/cpu/pack_pull.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define RB_AI static inline __attribute__((always_inline))

/* 8 x 8 transpose of 64-bit pairs: out[p] gets pair p of rows a[0..7] */
RB_AI void transpose8_pd(const __m512d a[8], __m512d out[8]) {
    __m512d t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_pd(a[i], a[i + 1]);     /* lane L: a_i[2L], a_i+1[2L] */
        t[i + 1] = _mm512_unpackhi_pd(a[i], a[i + 1]); /* lane L: a_i[2L+1], a_i+1[2L+1] */
    }
    for (int i = 0; i < 8; i += 4) { /* 256-bit halves: rows i..i+3 */
        u[i + 0] = _mm512_shuffle_f64x2(t[i + 0], t[i + 2], 0x88); /* lanes 0, 2 of each: pairs 0, 4 | 0, 4 */
        u[i + 1] = _mm512_shuffle_f64x2(t[i + 1], t[i + 3], 0x88); /* pairs 1, 5 */
        u[i + 2] = _mm512_shuffle_f64x2(t[i + 0], t[i + 2], 0xDD); /* pairs 2, 6 */
        u[i + 3] = _mm512_shuffle_f64x2(t[i + 1], t[i + 3], 0xDD); /* pairs 3, 7 */
    }
    for (int j = 0; j < 4; j++) {
        out[j] = _mm512_shuffle_f64x2(u[j], u[4 + j], 0x88);
        out[4 + j] = _mm512_shuffle_f64x2(u[j], u[4 + j], 0xDD);
    }
}

/* up to 16 elements k0.. of a row (m selects them) as f32 */
RB_AI __m512 load_row16(rb_dtype t, const char *row, int64_t k0, __mmask16 m) {
    if (t == RB_F32) return _mm512_maskz_loadu_ps(m, (const float *)(const void *)row + k0);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)(const void *)row + k0);
    if (t == RB_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Layout, per pair of elements (k, k+1) with k even: two vectors, rows 0-7
 * then rows 8-15, lane 2r + j holding element k + j of row r; an odd last
 * element is one vector of the 16 rows. 64 bytes per element either way. */
RB_AI void pack_float(rb_dtype t, int64_t n, int nr, const void *x, size_t lda, void *out) {
    char *o = out;
    rb_cpu_pull_rows(x, nr, lda, (size_t)n * (t == RB_F32 ? 4 : 2));
    for (int64_t k0 = 0; k0 < n; k0 += 16) {
        const int64_t left = n - k0;
        const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
        __m512d a[16], p[16];
        for (int r = 0; r < 16; r++)
            a[r] = _mm512_castps_pd(r < nr ? load_row16(t, (const char *)x + (size_t)r * lda, k0, m)
                                           : _mm512_setzero_ps());
        transpose8_pd(a, p);
        transpose8_pd(a + 8, p + 8);
        const int64_t pairs = (left >= 16 ? 16 : left) / 2;
        for (int64_t q = 0; q < pairs; q++) {
            _mm512_store_pd(o + 64 * (k0 + 2 * q), p[q]);
            _mm512_store_pd(o + 64 * (k0 + 2 * q + 1), p[8 + q]);
        }
        if (left < 16 && left % 2) { /* the odd last element: lanes 0, 2, .. of pair (left-1)/2 */
            const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            const __m512 v = _mm512_permutex2var_ps(_mm512_castpd_ps(p[pairs]), even, _mm512_castpd_ps(p[8 + pairs]));
            _mm512_store_ps(o + 64 * (n - 1), v);
        }
    }
}

void rb_pack_f32_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    pack_float(RB_F32, n, nr, x, lda, out);
}
void rb_pack_f16_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    pack_float(RB_F16, n, nr, x, lda, out);
}
void rb_pack_bf16_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    pack_float(RB_BF16, n, nr, x, lda, out);
}

/* lanes 2r, 2r+1 of lo (rows 0-7) and hi (rows 8-15) summed: the 16 row sums */
RB_AI __m512 pair_sums(__m512 lo, __m512 hi) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return _mm512_add_ps(_mm512_permutex2var_ps(lo, even, hi), _mm512_permutex2var_ps(lo, odd, hi));
}

/* element pairs between two prefetch steps */
#define PF_PAIRS 16

/* C activation rows against one packed group of 16 rows: per element pair,
 * one 8-byte broadcast of each activation row feeds two FMAs */
RB_AI void f_cols(int64_t n, int nr, const char *pk, const char *y, size_t ldb, float *dst, size_t ldd,
                  rb_pack_prefetch *pf, size_t pf_per, const int C) {
    __m512 lo[8], hi[8];
    const char *yc[8];
    for (int c = 0; c < C; c++) {
        lo[c] = hi[c] = _mm512_setzero_ps();
        yc[c] = y + (size_t)c * ldb;
    }
    const int64_t np = n / 2;
    for (int64_t q = 0; q < np; q++) {
        if (!(q % PF_PAIRS)) rb_pack_prefetch_lines(pf, pf_per);
        const __m512 a = _mm512_load_ps(pk + 128 * q), b = _mm512_load_ps(pk + 128 * q + 64);
        for (int c = 0; c < C; c++) {
            double yy;
            memcpy(&yy, yc[c] + 8 * q, 8);
            const __m512 v = _mm512_castpd_ps(_mm512_set1_pd(yy));
            lo[c] = _mm512_fmadd_ps(a, v, lo[c]);
            hi[c] = _mm512_fmadd_ps(b, v, hi[c]);
        }
    }
    const __mmask16 m = (__mmask16)((1u << nr) - 1u);
    for (int c = 0; c < C; c++) {
        __m512 s = pair_sums(lo[c], hi[c]);
        if (n % 2) {
            float yl;
            memcpy(&yl, yc[c] + 4 * (n - 1), 4);
            s = _mm512_fmadd_ps(_mm512_load_ps(pk + 64 * (n - 1)), _mm512_set1_ps(yl), s);
        }
        _mm512_mask_storeu_ps(dst + (size_t)c * ldd, m, s);
    }
}

void rb_gemm_packed_float_avx512(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                                 const rb_act_aux *aux, size_t ld_aux, float *dst, size_t ldd, rb_pack_prefetch *pf) {
    (void)aux;
    (void)ld_aux;
    const size_t steps = (size_t)((nc + 7) / 8) * (size_t)((n / 2 + PF_PAIRS - 1) / PF_PAIRS);
    const size_t pf_per = rb_pack_prefetch_per_step(pf, steps);
    for (int c0 = 0; c0 < nc; c0 += 8) {
        const char *yc = (const char *)y + (size_t)c0 * ldb;
        float *d = dst + (size_t)c0 * ldd;
        switch (nc - c0 < 8 ? nc - c0 : 8) {
        case 1: f_cols(n, nr, packed, yc, ldb, d, ldd, pf, pf_per, 1); break;
        case 2: f_cols(n, nr, packed, yc, ldb, d, ldd, pf, pf_per, 2); break;
        case 3: f_cols(n, nr, packed, yc, ldb, d, ldd, pf, pf_per, 3); break;
        case 4: f_cols(n, nr, packed, yc, ldb, d, ldd, pf, pf_per, 4); break;
        case 5: f_cols(n, nr, packed, yc, ldb, d, ldd, pf, pf_per, 5); break;
        case 6: f_cols(n, nr, packed, yc, ldb, d, ldd, pf, pf_per, 6); break;
        case 7: f_cols(n, nr, packed, yc, ldb, d, ldd, pf, pf_per, 7); break;
        default: f_cols(n, nr, packed, yc, ldb, d, ldd, pf, pf_per, 8); break;
        }
    }
    rb_pack_prefetch_lines(pf, SIZE_MAX); /* what rounding left (or all, for n < 2) */
}

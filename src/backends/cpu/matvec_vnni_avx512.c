/* AVX-512 VNNI matrix-vector kernels for decode: q4_0 x q8_0 and q8_0 x q8_0
 * over many weight rows and one activation row. Decode is bound by how fast
 * the weights stream from memory, so the inner loops do as little per weight
 * byte as possible and prefetch ahead:
 *   - the activation row is laid out once per call in the order that the
 *     cheapest weight unpacking produces, together with its per-block scales
 *     and the integer correction terms, so nothing about y is redone per row;
 *   - four 32-element blocks per iteration, with their four f16 scales
 *     converted by one vcvtph2ps;
 *   - vpdpbusd multiplies unsigned by signed bytes: q4_0 uses the raw nibbles
 *     (0..15) against y and adds -8 * sum(y); q8_0 flips the weights to
 *     w + 128 (unsigned) and adds -128 * sum(y), both sums precomputed per
 *     block of y.
 * Blocks past the end of a row (a row of 1-3 trailing blocks) reuse the last
 * block's bytes against zeroed activations and scales, adding exactly zero.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c. */
#include "backends/cpu/kernels_avx512.h"

#include <immintrin.h>
#include <string.h>

#define MV_MAX_QUADS 128 /* K <= RB_MATVEC_MAX_K */
#define MV_PREFETCH 1024 /* bytes ahead of the weight stream */

/* Activation layout for 4 blocks: q4_0 uses lo = first 16 y of each block and
 * hi = last 16 (matching [b0 nib lo | b1 | b2 | b3] / nib hi); q8_0 uses
 * lo = blocks 0-1 and hi = blocks 2-3 (matching two 64-byte weight loads). */
typedef struct mv_quad {
    int8_t lo[64], hi[64];
    int32_t corr[16]; /* correction per lane (q4_0) */
    int32_t corr_hi[16]; /* q8_0: corrections of the hi half */
    float d_lo[16], d_hi[16]; /* activation scale per lane */
} mv_quad;

/* 4 f16 scales (blocks b..b+3, stride bytes apart) as 4 floats */
static inline __m128 scales4(const char *p, size_t stride) {
    uint16_t h0, h1, h2, h3;
    memcpy(&h0, p, 2);
    memcpy(&h1, p + stride, 2);
    memcpy(&h2, p + 2 * stride, 2);
    memcpy(&h3, p + 3 * stride, 2);
    uint64_t v = (uint64_t)h0 | (uint64_t)h1 << 16 | (uint64_t)h2 << 32 | (uint64_t)h3 << 48;
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)v));
}

static inline float f16f(rb_f16 h) { return _cvtsh_ss(h); }

static inline __m512i load4x16(const int8_t *p0, const int8_t *p1, const int8_t *p2, const int8_t *p3) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p0));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p1), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p2), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p3), 3);
}

static inline __m512i load2x32(const int8_t *p0, const int8_t *p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}

/* y blocks b..b+3 into q for the q4_0 layout; blocks >= nb become zeros */
static void prep_q4_0(const rb_block_q8_0 *y, int64_t b, int64_t nb, mv_quad *q) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512i lo, hi;
    __m128 f;
    if (b + 4 <= nb) {
        const rb_block_q8_0 *yb = y + b;
        lo = load4x16(yb[0].qs, yb[1].qs, yb[2].qs, yb[3].qs);
        hi = load4x16(yb[0].qs + 16, yb[1].qs + 16, yb[2].qs + 16, yb[3].qs + 16);
        f = scales4((const char *)yb, sizeof(rb_block_q8_0));
    } else {
        _Alignas(64) int8_t tl[64], th[64];
        float fd[4] = {0, 0, 0, 0};
        memset(tl, 0, sizeof tl);
        memset(th, 0, sizeof th);
        for (int j = 0; j < 4 && b + j < nb; j++) {
            memcpy(tl + 16 * j, y[b + j].qs, 16);
            memcpy(th + 16 * j, y[b + j].qs + 16, 16);
            fd[j] = f16f(y[b + j].d);
        }
        lo = _mm512_load_si512(tl);
        hi = _mm512_load_si512(th);
        f = _mm_loadu_ps(fd);
    }
    _mm512_store_si512(q->lo, lo);
    _mm512_store_si512(q->hi, hi);
    const __m512i eight = _mm512_set1_epi8(8);
    __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, lo);
    s = _mm512_dpbusd_epi32(s, eight, hi);
    _mm512_store_si512(q->corr, _mm512_sub_epi32(_mm512_setzero_si512(), s));
    _mm512_store_ps(q->d_lo, _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f)));
}

/* y blocks b..b+3 into q for the q8_0 layout; blocks >= nb become zeros */
static void prep_q8_0(const rb_block_q8_0 *y, int64_t b, int64_t nb, mv_quad *q) {
    const __m512i i01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i i23 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    __m512i lo, hi;
    __m128 f;
    if (b + 4 <= nb) {
        const rb_block_q8_0 *yb = y + b;
        lo = load2x32(yb[0].qs, yb[1].qs);
        hi = load2x32(yb[2].qs, yb[3].qs);
        f = scales4((const char *)yb, sizeof(rb_block_q8_0));
    } else {
        _Alignas(64) int8_t t[128];
        float fd[4] = {0, 0, 0, 0};
        memset(t, 0, sizeof t);
        for (int j = 0; j < 4 && b + j < nb; j++) {
            memcpy(t + 32 * j, y[b + j].qs, 32);
            fd[j] = f16f(y[b + j].d);
        }
        lo = _mm512_load_si512(t);
        hi = _mm512_load_si512(t + 64);
        f = _mm_loadu_ps(fd);
    }
    _mm512_store_si512(q->lo, lo);
    _mm512_store_si512(q->hi, hi);
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, lo);
    const __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, hi);
    _mm512_store_si512(q->corr, _mm512_sub_epi32(_mm512_setzero_si512(), s0));
    _mm512_store_si512(q->corr_hi, _mm512_sub_epi32(_mm512_setzero_si512(), s1));
    const __m512 fw = _mm512_castps128_ps512(f);
    _mm512_store_ps(q->d_lo, _mm512_permutexvar_ps(i01, fw));
    _mm512_store_ps(q->d_hi, _mm512_permutexvar_ps(i23, fw));
}

static inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

_Static_assert(RB_MATVEC_MAX_K == MV_MAX_QUADS * 128, "matvec scratch size");

void rb_matvec_q4_0_avx512(int64_t n, int nr, const void *x, size_t lda, const void *yv, float *dst) {
    const rb_block_q8_0 *y = yv;
    const int64_t nb = n / 32, nq = (nb + 3) / 4;
    _Alignas(64) mv_quad qb[MV_MAX_QUADS];
    for (int64_t q = 0; q < nq; q++) prep_q4_0(y, 4 * q, nb, &qb[q]);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const int64_t nfull = nb / 4;
    for (int r = 0; r < nr; r++) {
        const rb_block_q4_0 *xr = (const rb_block_q4_0 *)((const char *)x + (size_t)r * lda);
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        int64_t q = 0;
        for (; q < nfull; q++) {
            const rb_block_q4_0 *xb = xr + 4 * q;
            _mm_prefetch((const char *)xb + MV_PREFETCH, _MM_HINT_T0);
            const __m512i v = load4x16((const int8_t *)xb[0].qs, (const int8_t *)xb[1].qs,
                                       (const int8_t *)xb[2].qs, (const int8_t *)xb[3].qs);
            const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            __m512i d = _mm512_dpbusd_epi32(_mm512_load_si512(qb[q].corr), lo, _mm512_load_si512(qb[q].lo));
            d = _mm512_dpbusd_epi32(d, hi, _mm512_load_si512(qb[q].hi));
            const __m512 dw = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(scales4((const char *)xb, 18)));
            const __m512 s = _mm512_mul_ps(dw, _mm512_load_ps(qb[q].d_lo));
            if (q & 1) acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc1);
            else acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc0);
        }
        if (q < nq) { /* 1-3 trailing blocks */
            const int64_t b = 4 * q;
            const rb_block_q4_0 *xb[4];
            for (int j = 0; j < 4; j++) xb[j] = xr + (b + j < nb ? b + j : nb - 1);
            const __m512i v = load4x16((const int8_t *)xb[0]->qs, (const int8_t *)xb[1]->qs,
                                       (const int8_t *)xb[2]->qs, (const int8_t *)xb[3]->qs);
            const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            __m512i d = _mm512_dpbusd_epi32(_mm512_load_si512(qb[q].corr), lo, _mm512_load_si512(qb[q].lo));
            d = _mm512_dpbusd_epi32(d, hi, _mm512_load_si512(qb[q].hi));
            const __m128 f = _mm_setr_ps(f16f(xb[0]->d), f16f(xb[1]->d), f16f(xb[2]->d), f16f(xb[3]->d));
            const __m512 dw = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
            const __m512 s = _mm512_mul_ps(dw, _mm512_load_ps(qb[q].d_lo));
            if (q & 1) acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc1);
            else acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc0);
        }
        dst[r] = hsum(_mm512_add_ps(acc0, acc1));
    }
}

void rb_matvec_q8_0_avx512(int64_t n, int nr, const void *x, size_t lda, const void *yv, float *dst) {
    const rb_block_q8_0 *y = yv;
    const int64_t nb = n / 32, nq = (nb + 3) / 4;
    _Alignas(64) mv_quad qb[MV_MAX_QUADS];
    for (int64_t q = 0; q < nq; q++) prep_q8_0(y, 4 * q, nb, &qb[q]);
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512i i01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i i23 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const int64_t nfull = nb / 4;
    for (int r = 0; r < nr; r++) {
        const rb_block_q8_0 *xr = (const rb_block_q8_0 *)((const char *)x + (size_t)r * lda);
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        for (int64_t q = 0; q < nq; q++) {
            const int64_t b = 4 * q;
            const rb_block_q8_0 *xb[4];
            __m128 f;
            if (q < nfull) {
                for (int j = 0; j < 4; j++) xb[j] = xr + b + j;
                _mm_prefetch((const char *)xb[0] + MV_PREFETCH, _MM_HINT_T0);
                _mm_prefetch((const char *)xb[0] + MV_PREFETCH + 64, _MM_HINT_T0);
                f = scales4((const char *)xb[0], sizeof(rb_block_q8_0));
            } else {
                for (int j = 0; j < 4; j++) xb[j] = xr + (b + j < nb ? b + j : nb - 1);
                f = _mm_setr_ps(f16f(xb[0]->d), f16f(xb[1]->d), f16f(xb[2]->d), f16f(xb[3]->d));
            }
            const __m512i w01 = _mm512_xor_si512(load2x32(xb[0]->qs, xb[1]->qs), bias);
            const __m512i w23 = _mm512_xor_si512(load2x32(xb[2]->qs, xb[3]->qs), bias);
            const __m512i d01 = _mm512_dpbusd_epi32(_mm512_load_si512(qb[q].corr), w01, _mm512_load_si512(qb[q].lo));
            const __m512i d23 =
                _mm512_dpbusd_epi32(_mm512_load_si512(qb[q].corr_hi), w23, _mm512_load_si512(qb[q].hi));
            const __m512 fw = _mm512_castps128_ps512(f);
            const __m512 s01 = _mm512_mul_ps(_mm512_permutexvar_ps(i01, fw), _mm512_load_ps(qb[q].d_lo));
            const __m512 s23 = _mm512_mul_ps(_mm512_permutexvar_ps(i23, fw), _mm512_load_ps(qb[q].d_hi));
            acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d01), s01, acc0);
            acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d23), s23, acc1);
        }
        dst[r] = hsum(_mm512_add_ps(acc0, acc1));
    }
}

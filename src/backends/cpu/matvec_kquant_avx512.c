/* AVX-512 matrix-vector kernels for decode with k-quant weights (q4_K, q5_K,
 * q6_K) against one q8_K activation row. Decode streams every weight byte
 * once, so per 256-element super-block the kernels spend a fixed, small
 * number of vector instructions and never leave the integer domain until
 * the super-block's two float scales:
 *   - the quants are unpacked 64 at a time into unsigned bytes (nibbles, plus
 *     the high bits of q5_K / q6_K merged with one vpternlog);
 *   - vpmaddubsw multiplies them with the activations into int16 pair sums,
 *     and vpdpwssd multiplies those by the per-group scales (int16 lanes
 *     built from the packed scales with one vpshufb / vpermw each) and
 *     accumulates int32, so a scale costs nothing per element;
 *   - q4_K / q5_K take the mins out through the activation's 32-element sums
 *     (one vpmaddwd), q6_K its constant offset 32 through the 16-element sums.
 * The activation row is laid out once per call in the order the q4_K / q5_K
 * unpacking produces (q6_K's order is the natural one). Pair sums cannot
 * saturate: |q| <= 63 and |y| <= 127 give at most 2 * 63 * 127 = 16002.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c. */
#include "backends/cpu/kernels_avx2.h"
#include "backends/cpu/kernels_avx512.h"

#include <immintrin.h>
#include <string.h>

#define KQ_MAX_SB (RB_MATVEC_MAX_K / RB_QK_K)
/* bytes ahead of the weight stream: about memory latency x one thread's
 * bandwidth (100 ns x 35 GB/s); one thread's q4_K / q6_K rows streamed
 * ~15% faster than at 1 KiB on the Zen 5 dev VM */
#define KQ_PREFETCH 4096

/* One activation super-block for q4_K / q5_K: q[k] matches the k-th unpacked
 * weight vector (k = 0: elements 0-31 and 64-95, k = 1: 32-63 and 96-127,
 * k = 2: 128-159 and 192-223, k = 3: 160-191 and 224-255). */
typedef struct kq_y45 {
    int8_t q[4][64];
    int16_t ysum[8]; /* sums of the eight 32-element groups */
    float d;
    int32_t pad[11];
} kq_y45;
_Static_assert(sizeof(kq_y45) % 64 == 0, "kq_y45 keeps 64-byte alignment");

static void prep_y45(const rb_block_q8_K *y, int64_t nb, kq_y45 *out) {
    for (int64_t b = 0; b < nb; b++) {
        for (int k = 0; k < 4; k++) {
            const int e0 = (k >> 1) * 128 + (k & 1) * 32;
            memcpy(out[b].q[k], y[b].qs + e0, 32);
            memcpy(out[b].q[k] + 32, y[b].qs + e0 + 64, 32);
        }
        for (int j = 0; j < 8; j++) out[b].ysum[j] = (int16_t)(y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
        out[b].d = y[b].d;
    }
}

/* The eight 6-bit scales and mins of a q4_K / q5_K block, one byte each. */
static inline void unpack_scales(const uint8_t *s, uint64_t *sc, uint64_t *mn) {
    uint32_t a, b, c;
    memcpy(&a, s, 4);
    memcpy(&b, s + 4, 4);
    memcpy(&c, s + 8, 4);
    const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
    const uint32_t mn_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
    *sc = (uint64_t)(a & 0x3F3F3F3Fu) | (uint64_t)sc_hi << 32;
    *mn = (uint64_t)(b & 0x3F3F3F3Fu) | (uint64_t)mn_hi << 32;
}

/* pshufb index: int16 lanes of the first 256 bits take scale byte g0, of the
 * last 256 bits byte g1 (zero-extended) */
#define SC_IDX_Q(g) (0x8000800080008000ull | (g)*0x0001000100010001ull)
#define SC_IDX(g0, g1)                                                                                          \
    _mm512_set_epi64(SC_IDX_Q(g1), SC_IDX_Q(g1), SC_IDX_Q(g1), SC_IDX_Q(g1), SC_IDX_Q(g0), SC_IDX_Q(g0),      \
                     SC_IDX_Q(g0), SC_IDX_Q(g0))

static inline __m512i bcast256(const uint8_t *p) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
}

/* Shared body of q4_K (qh == NULL) and q5_K: one row, nb super-blocks. */
static inline __attribute__((always_inline)) float row_q45(const uint8_t *xr, size_t bstride, int64_t nb,
                                                           const kq_y45 *ya, int has_qh) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    const __m512i i0 = SC_IDX(0, 2), i1 = SC_IDX(1, 3), i2 = SC_IDX(4, 6), i3 = SC_IDX(5, 7);
    /* q5_K high bit b of qh[l] moves to bit 4 of the quant byte: left 4 - b or right b - 4 (16-bit lanes;
     * bits crossing from the neighbour byte never reach bit 4) */
    const __m512i sl0 = _mm512_set_epi64(0x0002000200020002ull, 0x0002000200020002ull, 0x0002000200020002ull,
                                         0x0002000200020002ull, 0x0004000400040004ull, 0x0004000400040004ull,
                                         0x0004000400040004ull, 0x0004000400040004ull);
    const __m512i sl1 = _mm512_set_epi64(0x0001000100010001ull, 0x0001000100010001ull, 0x0001000100010001ull,
                                         0x0001000100010001ull, 0x0003000300030003ull, 0x0003000300030003ull,
                                         0x0003000300030003ull, 0x0003000300030003ull);
    const __m512i sr2 = _mm512_set_epi64(0x0002000200020002ull, 0x0002000200020002ull, 0x0002000200020002ull,
                                         0x0002000200020002ull, 0, 0, 0, 0);
    const __m512i sr3 = _mm512_set_epi64(0x0003000300030003ull, 0x0003000300030003ull, 0x0003000300030003ull,
                                         0x0003000300030003ull, 0x0001000100010001ull, 0x0001000100010001ull,
                                         0x0001000100010001ull, 0x0001000100010001ull);
    __m512 accf = _mm512_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *xb = xr + (size_t)b * bstride;
        /* q4_K: d, dmin, scales[12], qs[128]; q5_K: d, dmin, scales[12], qh[32], qs[128] */
        const uint8_t *qs = xb + 16 + (has_qh ? 32 : 0);
        _mm_prefetch((const char *)xb + KQ_PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *)xb + KQ_PREFETCH + 64, _MM_HINT_T0);
        if (has_qh) _mm_prefetch((const char *)xb + KQ_PREFETCH + 128, _MM_HINT_T0);
        const __m512i v0 = _mm512_loadu_si512(qs), v1 = _mm512_loadu_si512(qs + 64);
        __m512i q0 = _mm512_and_si512(v0, m4), q1 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4);
        __m512i q2 = _mm512_and_si512(v1, m4), q3 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4);
        if (has_qh) {
            const __m512i h = bcast256(xb + 16);
            q0 = _mm512_ternarylogic_epi32(_mm512_sllv_epi16(h, sl0), q0, m10, 0xEC);
            q1 = _mm512_ternarylogic_epi32(_mm512_sllv_epi16(h, sl1), q1, m10, 0xEC);
            q2 = _mm512_ternarylogic_epi32(_mm512_srlv_epi16(h, sr2), q2, m10, 0xEC);
            q3 = _mm512_ternarylogic_epi32(_mm512_srlv_epi16(h, sr3), q3, m10, 0xEC);
        }
        uint64_t sc, mn;
        unpack_scales(xb + 4, &sc, &mn);
        const __m512i s8 = _mm512_set1_epi64((long long)sc);
        const kq_y45 *yb = ya + b;
        __m512i acc = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                          _mm512_maddubs_epi16(q0, _mm512_load_si512(yb->q[0])),
                                          _mm512_shuffle_epi8(s8, i0));
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q1, _mm512_load_si512(yb->q[1])),
                                  _mm512_shuffle_epi8(s8, i1));
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q2, _mm512_load_si512(yb->q[2])),
                                  _mm512_shuffle_epi8(s8, i2));
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q3, _mm512_load_si512(yb->q[3])),
                                  _mm512_shuffle_epi8(s8, i3));
        const __m128i msum =
            _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn)), _mm_load_si128((const __m128i *)yb->ysum));
        uint32_t dd;
        memcpy(&dd, xb, 4);
        const __m128 f = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd)), _mm_set1_ps(yb->d));
        accf = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_broadcastss_ps(f), accf);
        accm = _mm_fmadd_ps(_mm_cvtepi32_ps(msum), _mm_permute_ps(f, 0x55), accm);
    }
    return _mm512_reduce_add_ps(accf) - (accm[0] + accm[1] + accm[2] + accm[3]);
}

_Static_assert(sizeof(rb_block_q4_K) == 144 && sizeof(rb_block_q5_K) == 176, "k-quant layouts");

void rb_matvec_q4_K_avx512(int64_t n, int nr, const void *x, size_t lda, const void *y, float *dst) {
    const int64_t nb = n / RB_QK_K;
    _Alignas(64) kq_y45 ya[KQ_MAX_SB];
    prep_y45(y, nb, ya);
    for (int r = 0; r < nr; r++)
        dst[r] = row_q45((const uint8_t *)x + (size_t)r * lda, sizeof(rb_block_q4_K), nb, ya, 0);
}

void rb_matvec_q5_K_avx512(int64_t n, int nr, const void *x, size_t lda, const void *y, float *dst) {
    const int64_t nb = n / RB_QK_K;
    _Alignas(64) kq_y45 ya[KQ_MAX_SB];
    prep_y45(y, nb, ya);
    for (int r = 0; r < nr; r++)
        dst[r] = row_q45((const uint8_t *)x + (size_t)r * lda, sizeof(rb_block_q5_K), nb, ya, 1);
}

/* vpermw indices: 128-bit lane j takes int16 scale g + j */
#define SC4_IDX(g)                                                                                              \
    _mm512_set_epi64((g + 3) * 0x0001000100010001ull, (g + 3) * 0x0001000100010001ull,                          \
                     (g + 2) * 0x0001000100010001ull, (g + 2) * 0x0001000100010001ull,                          \
                     (g + 1) * 0x0001000100010001ull, (g + 1) * 0x0001000100010001ull,                          \
                     (g + 0) * 0x0001000100010001ull, (g + 0) * 0x0001000100010001ull)

void rb_matvec_q6_K_avx512(int64_t n, int nr, const void *x, size_t lda, const void *yv, float *dst) {
    const int64_t nb = n / RB_QK_K;
    const rb_block_q8_K *y = yv;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i i0 = SC4_IDX(0), i1 = SC4_IDX(4), i2 = SC4_IDX(8), i3 = SC4_IDX(12);
    /* qh[l] bits 2k, 2k+1 go to bits 4, 5: left 4 / 2 for the low nibbles (k = 0 | 1), right 0 / 2 for the
     * high nibbles (k = 2 | 3) */
    const __m512i sl = _mm512_set_epi64(0x0002000200020002ull, 0x0002000200020002ull, 0x0002000200020002ull,
                                        0x0002000200020002ull, 0x0004000400040004ull, 0x0004000400040004ull,
                                        0x0004000400040004ull, 0x0004000400040004ull);
    const __m512i sr = _mm512_set_epi64(0x0002000200020002ull, 0x0002000200020002ull, 0x0002000200020002ull,
                                        0x0002000200020002ull, 0, 0, 0, 0);
    for (int r = 0; r < nr; r++) {
        const rb_block_q6_K *xr = (const rb_block_q6_K *)((const char *)x + (size_t)r * lda);
        __m512 accf = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const rb_block_q6_K *xb = xr + b;
            _mm_prefetch((const char *)xb + KQ_PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)xb + KQ_PREFETCH + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)xb + KQ_PREFETCH + 128, _MM_HINT_T0);
            _mm_prefetch((const char *)xb + KQ_PREFETCH + 192, _MM_HINT_T0);
            const __m512i l0 = _mm512_loadu_si512(xb->ql), l1 = _mm512_loadu_si512(xb->ql + 64);
            const __m512i h0 = bcast256(xb->qh), h1 = bcast256(xb->qh + 32);
            const __m512i q0 = _mm512_ternarylogic_epi32(_mm512_sllv_epi16(h0, sl), _mm512_and_si512(l0, m4), m30, 0xEC);
            const __m512i q1 = _mm512_ternarylogic_epi32(_mm512_srlv_epi16(h0, sr),
                                                         _mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), m30, 0xEC);
            const __m512i q2 = _mm512_ternarylogic_epi32(_mm512_sllv_epi16(h1, sl), _mm512_and_si512(l1, m4), m30, 0xEC);
            const __m512i q3 = _mm512_ternarylogic_epi32(_mm512_srlv_epi16(h1, sr),
                                                         _mm512_and_si512(_mm512_srli_epi16(l1, 4), m4), m30, 0xEC);
            const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)xb->scales));
            const __m512i s = _mm512_castsi256_si512(s16);
            const rb_block_q8_K *yb = y + b;
            __m512i acc = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                              _mm512_maddubs_epi16(q0, _mm512_loadu_si512(yb->qs)),
                                              _mm512_permutexvar_epi16(i0, s));
            acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q1, _mm512_loadu_si512(yb->qs + 64)),
                                      _mm512_permutexvar_epi16(i1, s));
            acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q2, _mm512_loadu_si512(yb->qs + 128)),
                                      _mm512_permutexvar_epi16(i2, s));
            acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q3, _mm512_loadu_si512(yb->qs + 192)),
                                      _mm512_permutexvar_epi16(i3, s));
            /* quants were stored as q + 32: take 32 * sum(scale * group sum) back out */
            const __m256i off = _mm256_madd_epi16(s16, _mm256_loadu_si256((const __m256i *)yb->bsums));
            acc = _mm512_sub_epi32(acc, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
            const float d = _cvtsh_ss(xb->d) * yb->d;
            accf = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(d), accf);
        }
        dst[r] = _mm512_reduce_add_ps(accf);
    }
}

/* Kernel-table entries: one activation row goes to the streaming kernels
 * above; several (only when the packed prefill path does not apply) to the
 * AVX2 tiles or dot products. */
static void dots(rb_vec_dot_fn dot, int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb,
                 float *dst, size_t ldd) {
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++)
            dot(n, &dst[(size_t)c * ldd + (size_t)r], (const char *)x + (size_t)r * lda, (const char *)y + (size_t)c * ldb);
}

void rb_gemm_q4_K_avx512(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                         size_t ldd) {
    if (nc == 1 && n <= RB_MATVEC_MAX_K) rb_matvec_q4_K_avx512(n, nr, x, lda, y, dst);
    else rb_gemm_q4_K_avx2(n, nr, nc, x, lda, y, ldb, dst, ldd);
}

void rb_gemm_q5_K_avx512(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                         size_t ldd) {
    if (nc == 1 && n <= RB_MATVEC_MAX_K) rb_matvec_q5_K_avx512(n, nr, x, lda, y, dst);
    else dots(rb_vd_q5_K_avx2, n, nr, nc, x, lda, y, ldb, dst, ldd);
}

void rb_gemm_q6_K_avx512(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                         size_t ldd) {
    if (nc == 1 && n <= RB_MATVEC_MAX_K) rb_matvec_q6_K_avx512(n, nr, x, lda, y, dst);
    else dots(rb_vd_q6_K_avx2, n, nr, nc, x, lda, y, ldb, dst, ldd);
}

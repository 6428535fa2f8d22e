/* AVX-512 VNNI prefill kernels for the k-quant weights (q2_K..q6_K) against
 * q8_K activations, on weights repacked so one zmm lane is one weight row:
 * the design of the q4_0 / q8_0 packed kernels (gemm_packed_vnni_avx512.c)
 * extended to 256-element super-blocks with per-group scales.
 *
 * Packing (once per 16 weight rows, reused for every activation row) turns
 * every format into one form, w = S_g * q - DM * mi_h, with unsigned byte
 * quants q, g the element's scale group and h its 16-element group:
 *   - 64 zmm of quants: zmm k holds elements 4k..4k+3 of the 16 rows (dword r
 *     = row r), the order vpdpbusd with a broadcast activation dword needs;
 *   - S: per scale group g (32 elements for q4_K / q5_K, 16 for the others),
 *     16 floats d * scale_g;
 *   - MI: 8 zmm of int16 pairs (mi_2p, mi_2p+1) per row, the integer factors
 *     of the 16-element activation sums (q8_K's bsums): the mins of q2_K /
 *     q4_K / q5_K, or scale_g for the constant offsets of q3_K (4) and q6_K
 *     (32);
 *   - DM: 16 floats, dmin or offset * d.
 * Multiplying: per group and activation row, G/4 vpdpbusd (activation
 * dwords broadcast from memory) give the group's integer dot for 16 rows, one
 * convert and FMA with S_g scales it; 8 vpdpwssd against the bsum pairs give
 * the min / offset term; one FMA per super-block applies the activation scale.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c. */
#include "backends/cpu/kernels_avx512.h"
#include "backends/cpu/kernels_scalar.h"

#include <immintrin.h>
#include <string.h>

#define RB_AI static inline __attribute__((always_inline))

_Static_assert(RB_CPU_PACK_ROWS == 16, "one zmm lane per packed row");
_Static_assert(RB_CPU_PACK_KQ_BYTES(32) == 4096 + 8 * 64 + 8 * 64 + 64, "q4_K / q5_K packed layout");
_Static_assert(RB_CPU_PACK_KQ_BYTES(16) == 4096 + 16 * 64 + 8 * 64 + 64, "16-group packed layout");

/* One row's super-block in natural element order, before transposing. */
typedef struct kq_row {
    uint8_t q[16][RB_QK_K];
    float s[16][16];     /* [row][group] d * scale */
    int16_t mi[16][16];  /* [row][16-element group] */
    float dm[16];
} kq_row;

/* 16 x 16 dword transpose: out[k] = dword k of rows a[0..15] */
RB_AI void transpose16(__m512i a[16], char *out) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(a[i], a[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(a[i], a[i + 1]);
    }
    /* u[4R + j], 128-bit lane L: rows 4R..4R+3 at element 4L + j */
    for (int R = 0; R < 4; R++) {
        const __m512i *p = t + 4 * R;
        u[4 * R + 0] = _mm512_unpacklo_epi64(p[0], p[2]);
        u[4 * R + 1] = _mm512_unpackhi_epi64(p[0], p[2]);
        u[4 * R + 2] = _mm512_unpacklo_epi64(p[1], p[3]);
        u[4 * R + 3] = _mm512_unpackhi_epi64(p[1], p[3]);
    }
    for (int j = 0; j < 4; j++) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
        const __m512i v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
        _mm512_store_si512(out + 64 * (0 + j), _mm512_shuffle_i32x4(v0, v2, 0x88));
        _mm512_store_si512(out + 64 * (4 + j), _mm512_shuffle_i32x4(v0, v2, 0xDD));
        _mm512_store_si512(out + 64 * (8 + j), _mm512_shuffle_i32x4(v1, v3, 0x88));
        _mm512_store_si512(out + 64 * (12 + j), _mm512_shuffle_i32x4(v1, v3, 0xDD));
    }
}

/* Writes one packed super-block from t (rows >= nr of t are zero). */
static void store_packed(const kq_row *t, int ngroups, char *out) {
    for (int s = 0; s < 4; s++) {
        __m512i a[16];
        for (int r = 0; r < 16; r++) a[r] = _mm512_load_si512(t->q[r] + 64 * s);
        transpose16(a, out + 1024 * s);
    }
    float *S = (float *)(void *)(out + 4096);
    for (int g = 0; g < ngroups; g++)
        for (int r = 0; r < 16; r++) S[g * 16 + r] = t->s[r][g];
    uint32_t *MI = (uint32_t *)(void *)(out + 4096 + 64 * ngroups);
    for (int p = 0; p < 8; p++)
        for (int r = 0; r < 16; r++)
            MI[p * 16 + r] = (uint16_t)t->mi[r][2 * p] | (uint32_t)(uint16_t)t->mi[r][2 * p + 1] << 16;
    memcpy(out + 4096 + 64 * ngroups + 512, t->dm, 64);
}

/* ---- per-format row unpacking into natural order ---- */

RB_AI void nibbles_q45(const uint8_t *qs, const uint8_t *qh, uint8_t *q) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(1);
    const __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (qh) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c), m1), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c + 1), m1), 4));
        }
        _mm256_store_si256((__m256i *)(q + 64 * c), lo);
        _mm256_store_si256((__m256i *)(q + 64 * c + 32), hi);
    }
}

RB_AI void scales_q45(const uint8_t *scales, float d, float dmin, kq_row *t, int r) {
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        rb_k4_scale_min(j, scales, &sc, &m);
        t->s[r][j] = d * (float)sc;
        t->mi[r][2 * j] = t->mi[r][2 * j + 1] = m;
    }
    t->dm[r] = dmin;
}

static void unpack_q4_K(const void *x, kq_row *t, int r) {
    const rb_block_q4_K *b = x;
    nibbles_q45(b->qs, NULL, t->q[r]);
    scales_q45(b->scales, _cvtsh_ss(b->d), _cvtsh_ss(b->dmin), t, r);
}

static void unpack_q5_K(const void *x, kq_row *t, int r) {
    const rb_block_q5_K *b = x;
    nibbles_q45(b->qs, b->qh, t->q[r]);
    scales_q45(b->scales, _cvtsh_ss(b->d), _cvtsh_ss(b->dmin), t, r);
}

static void unpack_q6_K(const void *x, kq_row *t, int r) {
    const rb_block_q6_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        const __m256i lows[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                                 _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                 _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
        for (int k = 0; k < 4; k++) {
            const __m256i hk = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m3), 4);
            _mm256_store_si256((__m256i *)(t->q[r] + 128 * h + 32 * k), _mm256_or_si256(lows[k], hk));
        }
    }
    const float d = _cvtsh_ss(b->d);
    for (int g = 0; g < 16; g++) {
        t->s[r][g] = d * (float)b->scales[g];
        t->mi[r][g] = b->scales[g];
    }
    t->dm[r] = 32.0f * d;
}

/* q2_K / q3_K: element 128h + 32j + l is bits 2j..2j+1 of qs[32h + l] */
RB_AI void crumbs(const uint8_t *qs, const uint8_t *hmask, uint8_t *q) {
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    const __m256i hm = hmask ? _mm256_loadu_si256((const __m256i *)hmask) : _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
        for (int j = 0; j < 4; j++) {
            __m256i qj = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m3);
            if (hmask) /* the high bit (set: q, clear: q - 4), stored as q + 4 in 0..7 */
                qj = _mm256_or_si256(qj, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), m1), 2));
            _mm256_store_si256((__m256i *)(q + 128 * h + 32 * j), qj);
        }
    }
}

static void unpack_q2_K(const void *x, kq_row *t, int r) {
    const rb_block_q2_K *b = x;
    crumbs(b->qs, NULL, t->q[r]);
    const float d = _cvtsh_ss(b->d);
    for (int g = 0; g < 16; g++) {
        t->s[r][g] = d * (float)(b->scales[g] & 0xF);
        t->mi[r][g] = (int16_t)(b->scales[g] >> 4);
    }
    t->dm[r] = _cvtsh_ss(b->dmin);
}

static void unpack_q3_K(const void *x, kq_row *t, int r) {
    const rb_block_q3_K *b = x;
    crumbs(b->qs, b->hmask, t->q[r]);
    int8_t sc[16];
    rb_q3_K_scales(b->scales, sc);
    const float d = _cvtsh_ss(b->d);
    for (int g = 0; g < 16; g++) {
        t->s[r][g] = d * (float)sc[g];
        t->mi[r][g] = sc[g];
    }
    t->dm[r] = 4.0f * d;
}

typedef void (*unpack_fn)(const void *x, kq_row *t, int r);

static void pack_kq(int64_t n, int nr, const void *x, size_t lda, size_t bsize, int ngroups, unpack_fn unpack,
                    void *out) {
    const int64_t nsb = n / RB_QK_K;
    const size_t pbytes = RB_CPU_PACK_KQ_BYTES(RB_QK_K / ngroups);
    _Alignas(64) kq_row t;
    memset(&t, 0, sizeof t);
    for (int64_t b = 0; b < nsb; b++) {
        for (int r = 0; r < nr; r++) unpack((const char *)x + (size_t)r * lda + (size_t)b * bsize, &t, r);
        store_packed(&t, ngroups, (char *)out + (size_t)b * pbytes);
    }
}

void rb_pack_q2_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    pack_kq(n, nr, x, lda, sizeof(rb_block_q2_K), 16, unpack_q2_K, out);
}
void rb_pack_q3_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    pack_kq(n, nr, x, lda, sizeof(rb_block_q3_K), 16, unpack_q3_K, out);
}
void rb_pack_q4_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    pack_kq(n, nr, x, lda, sizeof(rb_block_q4_K), 8, unpack_q4_K, out);
}
void rb_pack_q5_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    pack_kq(n, nr, x, lda, sizeof(rb_block_q5_K), 8, unpack_q5_K, out);
}
void rb_pack_q6_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    pack_kq(n, nr, x, lda, sizeof(rb_block_q6_K), 16, unpack_q6_K, out);
}

/* ---- multiplying ---- */

RB_AI __m512i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* C activation rows against one packed group of 16 rows; G = scale group size. */
RB_AI void kq_cols(int64_t nsb, int nr, const char *packed, const char *y, size_t ldb, float *dst, size_t ldd,
                   const int C, const int G) {
    const int NG = RB_QK_K / G, CH = G / 4;
    const size_t pbytes = RB_CPU_PACK_KQ_BYTES(G);
    __m512 acc[8];
    const rb_block_q8_K *yc[8];
    for (int c = 0; c < C; c++) {
        acc[c] = _mm512_setzero_ps();
        yc[c] = (const rb_block_q8_K *)(const void *)(y + (size_t)c * ldb);
    }
    for (int64_t b = 0; b < nsb; b++) {
        const char *pb = packed + (size_t)b * pbytes;
        __m512 as[8];
        for (int c = 0; c < C; c++) as[c] = _mm512_setzero_ps();
        for (int g = 0; g < NG; g++) {
            /* one weight vector at a time against all C rows: C independent chains */
            __m512i a[8];
            for (int c = 0; c < C; c++) a[c] = _mm512_setzero_si512();
            for (int k = 0; k < CH; k++) {
                const __m512i w = _mm512_load_si512(pb + 64 * (g * CH + k));
                for (int c = 0; c < C; c++) a[c] = _mm512_dpbusd_epi32(a[c], w, bcast32(yc[c][b].qs + g * G + 4 * k));
            }
            const __m512 s = _mm512_load_ps(pb + 4096 + 64 * g);
            for (int c = 0; c < C; c++) as[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[c]), s, as[c]);
        }
        const char *pm = pb + 4096 + 64 * NG;
        __m512i mi[8];
        for (int p = 0; p < 8; p++) mi[p] = _mm512_load_si512(pm + 64 * p);
        const __m512 dm = _mm512_load_ps(pm + 512);
        for (int c = 0; c < C; c++) {
            __m512i m = _mm512_setzero_si512();
            for (int p = 0; p < 8; p++) m = _mm512_dpwssd_epi32(m, mi[p], bcast32(yc[c][b].bsums + 2 * p));
            as[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), dm, as[c]);
            acc[c] = _mm512_fmadd_ps(as[c], _mm512_set1_ps(yc[c][b].d), acc[c]);
        }
    }
    const __mmask16 msk = (__mmask16)((1u << nr) - 1u);
    for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(dst + (size_t)c * ldd, msk, acc[c]);
}

RB_AI void gemm_kq(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb, float *dst, size_t ldd,
                   const int G) {
    const int64_t nsb = n / RB_QK_K;
    for (int c0 = 0; c0 < nc; c0 += 8) {
        const char *yc = (const char *)y + (size_t)c0 * ldb;
        float *d = dst + (size_t)c0 * ldd;
        switch (nc - c0 < 8 ? nc - c0 : 8) {
        case 1: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, 1, G); break;
        case 2: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, 2, G); break;
        case 3: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, 3, G); break;
        case 4: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, 4, G); break;
        case 5: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, 5, G); break;
        case 6: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, 6, G); break;
        case 7: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, 7, G); break;
        default: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, 8, G); break;
        }
    }
}

/* aux / ld_aux (the q8_0 block sums) are not used: q8_K carries its bsums. */
void rb_gemm_packed_kq32_avx512(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                                const rb_act_aux *aux, size_t ld_aux, float *dst, size_t ldd) {
    (void)aux;
    (void)ld_aux;
    gemm_kq(n, nr, nc, packed, y, ldb, dst, ldd, 32);
}

void rb_gemm_packed_kq16_avx512(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                                const rb_act_aux *aux, size_t ld_aux, float *dst, size_t ldd) {
    (void)aux;
    (void)ld_aux;
    gemm_kq(n, nr, nc, packed, y, ldb, dst, ldd, 16);
}

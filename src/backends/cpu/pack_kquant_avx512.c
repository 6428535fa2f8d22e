/* AVX-512 packers of the k-quant weights (q2_K..q6_K) for the packed prefill
 * kernels (gemm_kquant_vnni_avx512.c, which describes the packed layout):
 * 16 weight rows become, per 256-element super-block, 64 zmm of unsigned
 * byte quants in lane-per-row order, the group scales S, the integer min /
 * offset factors MI and the float DM.
 *
 * The matmul packs every weight once per call and multiplies it with only
 * M activation rows (64 for a pp64 prompt), so packing must cost a small
 * fraction of the multiply. q4_K, q5_K and q6_K, the formats of the
 * llama-quantize mixes, are packed for all 16 rows at once without leaving
 * the vector registers: the rows' bytes are transposed as dwords (16 x 16
 * in-register transposes) and unpacked after the transpose, so one
 * instruction unpacks or decodes 16 rows.
 * q2_K and q3_K unpack one row at a time into natural order and transpose
 * that (simpler, slower; no default mix uses them for the big matrices).
 * Rows at or past nr are packed as zeros. */
#include "backends/cpu/kernels_avx512.h"
#include "backends/cpu/kernels_scalar.h"

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define RB_AI static inline __attribute__((always_inline))

_Static_assert(RB_CPU_PACK_ROWS == 16, "one zmm lane per packed row");
_Static_assert(sizeof(rb_block_q4_K) == 144 && sizeof(rb_block_q5_K) == 176 && sizeof(rb_block_q6_K) == 210,
               "k-quant block layouts");

/* 16 x 16 dword transpose: out[j] lane r = dword j of a[r] */
RB_AI void transpose16(const __m512i a[16], __m512i out[16]) {
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
        out[0 + j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        out[4 + j] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        out[8 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        out[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
}

/* The 64 bytes at offset off of the 16 rows' blocks as dwords, transposed
 * (t[j] lane r = dword j of row r); bytes < 64 loads only that many, zeros
 * the rest (which may lie past the tensor). */
RB_AI void load_t(const char *xb, size_t lda, int nr, size_t off, int bytes, __m512i t[16]) {
    __m512i a[16];
    const __mmask64 m = bytes >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << bytes) - 1);
    for (int r = 0; r < 16; r++) {
        const char *p = xb + (size_t)r * lda + off;
        a[r] = r >= nr ? _mm512_setzero_si512() : bytes >= 64 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(m, p);
    }
    transpose16(a, t);
}

/* f16 values in the low (hi == 0) or high half of each dword, as floats */
RB_AI __m512 half_ps(__m512i v, int hi) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hi ? _mm512_srli_epi32(v, 16) : v));
}

/* byte j (0..3) of each dword, zero-extended */
RB_AI __m512i byte_u(__m512i v, int j) { return _mm512_and_si512(_mm512_srli_epi32(v, 8 * j), _mm512_set1_epi32(0xFF)); }

/* Packed-super-block section offsets (see gemm_kquant_vnni_avx512.c). */
#define OFF_S 4096
#define OFF_MI(ng) (4096 + 64 * (ng))
#define OFF_DM(ng) (4096 + 64 * (ng) + 512)

/* qs chunk c (32 bytes, t[0..7] transposed): its low nibbles are elements
 * 64c + l, its high nibbles 64c + 32 + l; q5_K adds bit 2c (low) / 2c + 1
 * (high) of qh byte l (h[0..7] transposed) as bit 4. c is a constant at
 * every call, so the shifts take immediates. */
RB_AI void q45_chunk(const __m512i *t, const __m512i *h, const int c, const int q5, char *o) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    for (int k = 0; k < 8; k++) {
        __m512i lo = _mm512_and_si512(t[k], m4), hi = _mm512_and_si512(_mm512_srli_epi16(t[k], 4), m4);
        if (q5) {
            /* bit 2c to bit 4 (bits from the neighbour byte never reach bit 4 of a byte) */
            const __m512i bl = c <= 2 ? _mm512_slli_epi32(h[k], 4 - 2 * c) : _mm512_srli_epi32(h[k], 2 * c - 4);
            lo = _mm512_ternarylogic_epi32(lo, bl, m10, 0xF8); /* lo | (bl & m10) */
            hi = _mm512_ternarylogic_epi32(hi, _mm512_srli_epi32(bl, 1), m10, 0xF8);
        }
        _mm512_store_si512(o + 64 * (16 * c + k), lo);
        _mm512_store_si512(o + 64 * (16 * c + 8 + k), hi);
    }
}

/* q4_K (q5 == 0) and q5_K: 8 groups of 32 with 6-bit scales and mins. */
RB_AI void pack_q45(int64_t n, int nr, const char *x, size_t lda, char *out, const int q5) {
    const int64_t nsb = n / RB_QK_K;
    const size_t bsize = q5 ? sizeof(rb_block_q5_K) : sizeof(rb_block_q4_K);
    const size_t qs_off = q5 ? offsetof(rb_block_q5_K, qs) : offsetof(rb_block_q4_K, qs);
    const size_t pbytes = RB_CPU_PACK_KQ_BYTES(32);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i m3f = _mm512_set1_epi8(0x3F), m30 = _mm512_set1_epi8(0x30);
    for (int64_t b = 0; b < nsb; b++) {
        const char *xb = x + (size_t)b * bsize;
        char *o = out + (size_t)b * pbytes;
        __m512i h[16], t[16];
        if (q5) load_t(xb, lda, nr, offsetof(rb_block_q5_K, qh), 32, h); /* h[k] = qh bytes 4k..4k+3 */
        load_t(xb, lda, nr, qs_off, 64, t); /* qs dwords 0..15: chunks 0, 1 */
        q45_chunk(t, h, 0, q5, o);
        q45_chunk(t + 8, h, 1, q5, o);
        load_t(xb, lda, nr, qs_off + 64, 64, t); /* qs dwords 16..31: chunks 2, 3 */
        q45_chunk(t, h, 2, q5, o);
        q45_chunk(t + 8, h, 3, q5, o);
        /* header: d, dmin, then 12 bytes of scales / mins (dwords A, B, C) */
        __m512i hd[16];
        load_t(xb, lda, nr, 0, 16, hd);
        const __m512i D = hd[0], A = hd[1], B = hd[2], C = hd[3];
        const __m512 d = half_ps(D, 0), dmin = half_ps(D, 1);
        /* bytes g of sc_lo / sc_hi: scales 0-3 / 4-7; same for the mins */
        const __m512i sc_lo = _mm512_and_si512(A, m3f), mn_lo = _mm512_and_si512(B, m3f);
        const __m512i sc_hi = _mm512_ternarylogic_epi32(_mm512_and_si512(C, m4), _mm512_srli_epi32(A, 2), m30, 0xF8);
        const __m512i mn_hi =
            _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(C, 4), m4), _mm512_srli_epi32(B, 2), m30, 0xF8);
        for (int g = 0; g < 8; g++) {
            const __m512i sc = byte_u(g < 4 ? sc_lo : sc_hi, g % 4), mn = byte_u(g < 4 ? mn_lo : mn_hi, g % 4);
            _mm512_store_ps(o + OFF_S + 64 * g, _mm512_mul_ps(_mm512_cvtepi32_ps(sc), d));
            _mm512_store_si512(o + OFF_MI(8) + 64 * g, _mm512_or_si512(mn, _mm512_slli_epi32(mn, 16)));
        }
        _mm512_store_ps(o + OFF_DM(8), dmin);
    }
}

void rb_pack_q4_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    pack_q45(n, nr, x, lda, out, 0);
}
void rb_pack_q5_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    pack_q45(n, nr, x, lda, out, 1);
}

/* q6_K: 16 groups of 16 with signed 8-bit scales; quants stored as q + 32. */
void rb_pack_q6_K_avx512(int64_t n, int nr, const void *xv, size_t lda, void *outv) {
    const char *x = xv;
    char *out = outv;
    const int64_t nsb = n / RB_QK_K;
    const size_t pbytes = RB_CPU_PACK_KQ_BYTES(16);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* int16 pairs (scale 2p, scale 2p + 1) from the scale dword: bytes 2(p % 2), +1 to bytes 1, 3, then >> 8 */
    const __m512i pair_idx[2] = {
        _mm512_set4_epi32((int)0x0D800C80, (int)0x09800880, (int)0x05800480, (int)0x01800080),
        _mm512_set4_epi32((int)0x0F800E80, (int)0x0B800A80, (int)0x07800680, (int)0x03800280)};
    for (int64_t b = 0; b < nsb; b++) {
        const char *xb = x + (size_t)b * sizeof(rb_block_q6_K);
        char *o = out + (size_t)b * pbytes;
        __m512i qh[16], ql[16];
        load_t(xb, lda, nr, offsetof(rb_block_q6_K, qh), 64, qh); /* qh[j]: qh bytes 4j..4j+3 */
        for (int h = 0; h < 2; h++) {
            /* ql[k] (k < 8): ql bytes 64h + 4k..; ql[8 + k]: 64h + 32 + 4k.. */
            load_t(xb, lda, nr, offsetof(rb_block_q6_K, ql) + 64 * (size_t)h, 64, ql);
            for (int k = 0; k < 8; k++) {
                /* element 128h + 32s + 4k..: ql nibble (low for s < 2) | qh bits 2s, 2s+1 at bits 4, 5 */
                const __m512i hb = qh[8 * h + k];
                const __m512i l0 = ql[k], l1 = ql[8 + k];
                const __m512i v[4] = {
                    _mm512_ternarylogic_epi32(_mm512_and_si512(l0, m4), _mm512_slli_epi32(hb, 4), m30, 0xF8),
                    _mm512_ternarylogic_epi32(_mm512_and_si512(l1, m4), _mm512_slli_epi32(hb, 2), m30, 0xF8),
                    _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(l0, 4), m4), hb, m30, 0xF8),
                    _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(l1, 4), m4), _mm512_srli_epi32(hb, 2),
                                              m30, 0xF8)};
                for (int s = 0; s < 4; s++) _mm512_store_si512(o + 64 * (32 * h + 8 * s + k), v[s]);
            }
        }
        /* scales: 16 signed bytes (dwords 0-3 from offset 192), then d */
        __m512i hd[16];
        load_t(xb, lda, nr, offsetof(rb_block_q6_K, scales), 18, hd);
        const __m512 d = half_ps(hd[4], 0);
        for (int i = 0; i < 4; i++) {
            const __m512i sc = hd[i];
            for (int j = 0; j < 4; j++) {
                const __m512i s = _mm512_srai_epi32(_mm512_slli_epi32(sc, 24 - 8 * j), 24);
                _mm512_store_ps(o + OFF_S + 64 * (4 * i + j), _mm512_mul_ps(_mm512_cvtepi32_ps(s), d));
            }
            for (int p = 0; p < 2; p++)
                _mm512_store_si512(o + OFF_MI(16) + 64 * (2 * i + p),
                                   _mm512_srai_epi16(_mm512_shuffle_epi8(sc, pair_idx[p]), 8));
        }
        _mm512_store_ps(o + OFF_DM(16), _mm512_mul_ps(d, _mm512_set1_ps(32.0f)));
    }
}

/* ---- q2_K / q3_K: one row at a time into natural order, then transposed ---- */

/* One row's super-block in natural element order, before transposing. */
typedef struct kq_row {
    uint8_t q[16][RB_QK_K];
    float s[16][16];    /* [row][group] d * scale */
    int16_t mi[16][16]; /* [row][16-element group] */
    float dm[16];
} kq_row;

/* Writes one packed super-block of 16-element groups from t (rows >= nr of t are zero). */
static void store_packed16(const kq_row *t, char *out) {
    for (int s = 0; s < 4; s++) {
        __m512i a[16], v[16];
        for (int r = 0; r < 16; r++) a[r] = _mm512_load_si512(t->q[r] + 64 * s);
        transpose16(a, v);
        for (int j = 0; j < 16; j++) _mm512_store_si512(out + 1024 * s + 64 * j, v[j]);
    }
    float *S = (float *)(void *)(out + OFF_S);
    for (int g = 0; g < 16; g++)
        for (int r = 0; r < 16; r++) S[g * 16 + r] = t->s[r][g];
    uint32_t *MI = (uint32_t *)(void *)(out + OFF_MI(16));
    for (int p = 0; p < 8; p++)
        for (int r = 0; r < 16; r++)
            MI[p * 16 + r] = (uint16_t)t->mi[r][2 * p] | (uint32_t)(uint16_t)t->mi[r][2 * p + 1] << 16;
    memcpy(out + OFF_DM(16), t->dm, 64);
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

static void pack_rows16(int64_t n, int nr, const void *x, size_t lda, size_t bsize, unpack_fn unpack, void *out) {
    const int64_t nsb = n / RB_QK_K;
    const size_t pbytes = RB_CPU_PACK_KQ_BYTES(16);
    _Alignas(64) kq_row t;
    memset(&t, 0, sizeof t);
    for (int64_t b = 0; b < nsb; b++) {
        for (int r = 0; r < nr; r++) unpack((const char *)x + (size_t)r * lda + (size_t)b * bsize, &t, r);
        store_packed16(&t, (char *)out + (size_t)b * pbytes);
    }
}

void rb_pack_q2_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    pack_rows16(n, nr, x, lda, sizeof(rb_block_q2_K), unpack_q2_K, out);
}
void rb_pack_q3_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out) {
    pack_rows16(n, nr, x, lda, sizeof(rb_block_q3_K), unpack_q3_K, out);
}

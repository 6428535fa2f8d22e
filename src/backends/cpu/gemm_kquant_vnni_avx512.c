/* AVX-512 VNNI prefill kernels for the k-quant weights (q2_K..q6_K) against
 * q8_K activations, on weights repacked so one zmm lane is one weight row:
 * the design of the q4_0 / q8_0 packed kernels (gemm_packed_vnni_avx512.c)
 * extended to 256-element super-blocks with per-group scales.
 *
 * Packing (pack_kquant_avx512.c; once per 16 weight rows, reused for every
 * activation row) turns every format into one form, w = S_g * q - DM * mi_h, with unsigned byte
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
#include "backends/cpu/pack_pull.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define RB_AI static inline __attribute__((always_inline))

_Static_assert(RB_CPU_PACK_ROWS == 16, "one zmm lane per packed row");
_Static_assert(RB_CPU_PACK_KQ_BYTES(32) == 4096 + 8 * 64 + 8 * 64 + 64, "q4_K / q5_K packed layout");
_Static_assert(RB_CPU_PACK_KQ_BYTES(16) == 4096 + 16 * 64 + 8 * 64 + 64, "16-group packed layout");

/* ---- multiplying ---- */

RB_AI __m512i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

typedef int32_t __attribute__((may_alias, aligned(1))) rb_u32a;

/* acc += w . broadcast(4 bytes at p), the broadcast folded into vpdpbusd's
 * memory operand (gcc 12 emits a separate vpbroadcastd for the intrinsic) */
RB_AI __m512i dpbusd_bc(__m512i acc, __m512i w, const void *p) {
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const rb_u32a *)p));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(*(const rb_u32a *)p));
#endif
}

/* C activation rows against one packed group of 16 rows; G = scale group size. */
RB_AI void kq_cols(int64_t nsb, int nr, const char *packed, const char *y, size_t ldb, float *dst, size_t ldd,
                   rb_pack_prefetch *pf, size_t pf_per, const int C, const int G) {
    const int NG = RB_QK_K / G, CH = G / 4;
    const size_t pbytes = RB_CPU_PACK_KQ_BYTES(G);
    __m512 acc[8];
    const rb_block_q8_K *yc[8];
    for (int c = 0; c < C; c++) {
        acc[c] = _mm512_setzero_ps();
        yc[c] = (const rb_block_q8_K *)(const void *)(y + (size_t)c * ldb);
    }
    for (int64_t b = 0; b < nsb; b++) {
        rb_pack_prefetch_lines(pf, pf_per);
        const char *pb = packed + (size_t)b * pbytes;
        __m512 as[8];
        for (int c = 0; c < C; c++) as[c] = _mm512_setzero_ps();
        for (int g = 0; g < NG; g++) {
            /* one weight vector at a time against all C rows: C independent chains */
            __m512i a[8];
            for (int c = 0; c < C; c++) a[c] = _mm512_setzero_si512();
            for (int k = 0; k < CH; k++) {
                const __m512i w = _mm512_load_si512(pb + 64 * (g * CH + k));
                for (int c = 0; c < C; c++) a[c] = dpbusd_bc(a[c], w, yc[c][b].qs + g * G + 4 * k);
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
                   rb_pack_prefetch *pf, const int G) {
    const int64_t nsb = n / RB_QK_K;
    const size_t pf_per = rb_pack_prefetch_per_step(pf, (size_t)((nc + 7) / 8) * (size_t)nsb);
    for (int c0 = 0; c0 < nc; c0 += 8) {
        const char *yc = (const char *)y + (size_t)c0 * ldb;
        float *d = dst + (size_t)c0 * ldd;
        switch (nc - c0 < 8 ? nc - c0 : 8) {
        case 1: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, pf, pf_per, 1, G); break;
        case 2: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, pf, pf_per, 2, G); break;
        case 3: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, pf, pf_per, 3, G); break;
        case 4: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, pf, pf_per, 4, G); break;
        case 5: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, pf, pf_per, 5, G); break;
        case 6: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, pf, pf_per, 6, G); break;
        case 7: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, pf, pf_per, 7, G); break;
        default: kq_cols(nsb, nr, packed, yc, ldb, d, ldd, pf, pf_per, 8, G); break;
        }
    }
    rb_pack_prefetch_lines(pf, SIZE_MAX); /* what rounding left */
}

/* aux / ld_aux (the q8_0 block sums) are not used: q8_K carries its bsums. */
void rb_gemm_packed_kq32_avx512(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                                const rb_act_aux *aux, size_t ld_aux, float *dst, size_t ldd, rb_pack_prefetch *pf) {
    (void)aux;
    (void)ld_aux;
    gemm_kq(n, nr, nc, packed, y, ldb, dst, ldd, pf, 32);
}

void rb_gemm_packed_kq16_avx512(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                                const rb_act_aux *aux, size_t ld_aux, float *dst, size_t ldd, rb_pack_prefetch *pf) {
    (void)aux;
    (void)ld_aux;
    gemm_kq(n, nr, nc, packed, y, ldb, dst, ldd, pf, 16);
}

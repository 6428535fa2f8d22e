/* AVX-512 (F/BW/VL + VNNI) kernel table and its float kernels: f32/f16/bf16
 * dot products and register-blocked tiles for prefill. The quantized VNNI
 * kernels are in vec_dot_vnni_avx512.c; entries without a 512-bit version reuse
 * the AVX2 kernels (the CPU has AVX2 whenever it has AVX-512 F/BW/VL).
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c. */
#include "backends/cpu/kernels_avx2.h"
#include "backends/cpu/kernels_avx512.h"
#include "backends/cpu/kernels_scalar.h"

#include <immintrin.h>

#define RB_AI static inline __attribute__((always_inline))

RB_AI __m512 load16(rb_dtype t, const void *p, int64_t i) {
    if (t == RB_F32) return _mm512_loadu_ps((const float *)p + i);
    if (t == RB_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const rb_f16 *)p + i)));
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const rb_bf16 *)p + i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

RB_AI float load1(rb_dtype t, const void *p, int64_t i) {
    if (t == RB_F32) return ((const float *)p)[i];
    if (t == RB_F16) return _cvtsh_ss(((const rb_f16 *)p)[i]);
    return rb_bf16_to_f32(((const rb_bf16 *)p)[i]);
}

/* dst[c * ldd + r] = dot(x row r, y row c) for an R x C tile of float rows */
RB_AI void ftile(rb_dtype t, int64_t n, const char *x, size_t lda, const char *y, size_t ldb, float *dst, size_t ldd,
                 const int R, const int C) {
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 yv[4];
        for (int c = 0; c < C; c++) yv[c] = _mm512_loadu_ps((const float *)(y + (size_t)c * ldb) + i);
        for (int r = 0; r < R; r++) {
            __m512 xv = load16(t, x + (size_t)r * lda, i);
            for (int c = 0; c < C; c++) acc[r][c] = _mm512_fmadd_ps(xv, yv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            float s = _mm512_reduce_add_ps(acc[r][c]);
            for (int64_t j = i; j < n; j++)
                s += load1(t, x + (size_t)r * lda, j) * ((const float *)(y + (size_t)c * ldb))[j];
            dst[c * ldd + r] = s;
        }
}

/* Matrix-vector run of f16 rows: ftile's sums exactly (one 16-lane
 * accumulator per row, reduced, then the tail), four rows at a time, two
 * vectors an iteration. Each line read prefetches the same line of the next
 * four rows into L2, so their streams are under way when their turn comes
 * (one thread's f16 rows streamed at ~21 GB/s without, ~27 with; prefetches
 * past the matrix are harmless hints). */
RB_AI void mv_f16_4(int64_t n, const char *x, size_t lda, const float *y, float *dst) {
    __m512 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 y0 = _mm512_loadu_ps(y + i), y1 = _mm512_loadu_ps(y + i + 16);
        for (int r = 0; r < 4; r++) {
            const rb_f16 *xr = (const rb_f16 *)(const void *)(x + (size_t)r * lda);
            _mm_prefetch((const char *)(xr + i) + 4 * lda, _MM_HINT_T1);
            acc[r] = _mm512_fmadd_ps(load16(RB_F16, xr, i), y0, acc[r]);
            acc[r] = _mm512_fmadd_ps(load16(RB_F16, xr, i + 16), y1, acc[r]);
        }
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 y0 = _mm512_loadu_ps(y + i);
        for (int r = 0; r < 4; r++)
            acc[r] = _mm512_fmadd_ps(load16(RB_F16, x + (size_t)r * lda, i), y0, acc[r]);
    }
    for (int r = 0; r < 4; r++) {
        float s = _mm512_reduce_add_ps(acc[r]);
        for (int64_t j = i; j < n; j++) s += load1(RB_F16, x + (size_t)r * lda, j) * y[j];
        dst[r] = s;
    }
}

#define FTILE_DISPATCH(NAME, T)                                                                                   \
    static void NAME(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst, \
                     size_t ldd) {                                                                                \
        if (T == RB_F16 && nc == 1) {                                                                             \
            int r0 = 0;                                                                                           \
            for (; r0 + 4 <= nr; r0 += 4)                                                                         \
                mv_f16_4(n, (const char *)x + (size_t)r0 * lda, lda, (const float *)y, dst + r0);                 \
            for (; r0 < nr; r0++) ftile(T, n, (const char *)x + (size_t)r0 * lda, lda, y, ldb, dst + r0, ldd, 1, 1); \
            return;                                                                                               \
        }                                                                                                         \
        for (int r0 = 0; r0 < nr; r0 += 4) {                                                                      \
            int rr = nr - r0 < 4 ? nr - r0 : 4;                                                                   \
            const char *xr = (const char *)x + (size_t)r0 * lda;                                                  \
            for (int c0 = 0; c0 < nc; c0 += 4) {                                                                  \
                int cc = nc - c0 < 4 ? nc - c0 : 4;                                                               \
                const char *yc = (const char *)y + (size_t)c0 * ldb;                                              \
                float *d = dst + (size_t)c0 * ldd + r0;                                                           \
                switch (rr * 4 + cc) {                                                                            \
                case 5: ftile(T, n, xr, lda, yc, ldb, d, ldd, 1, 1); break;                                       \
                case 6: ftile(T, n, xr, lda, yc, ldb, d, ldd, 1, 2); break;                                       \
                case 7: ftile(T, n, xr, lda, yc, ldb, d, ldd, 1, 3); break;                                       \
                case 8: ftile(T, n, xr, lda, yc, ldb, d, ldd, 1, 4); break;                                       \
                case 9: ftile(T, n, xr, lda, yc, ldb, d, ldd, 2, 1); break;                                       \
                case 10: ftile(T, n, xr, lda, yc, ldb, d, ldd, 2, 2); break;                                      \
                case 11: ftile(T, n, xr, lda, yc, ldb, d, ldd, 2, 3); break;                                      \
                case 12: ftile(T, n, xr, lda, yc, ldb, d, ldd, 2, 4); break;                                      \
                case 13: ftile(T, n, xr, lda, yc, ldb, d, ldd, 3, 1); break;                                      \
                case 14: ftile(T, n, xr, lda, yc, ldb, d, ldd, 3, 2); break;                                      \
                case 15: ftile(T, n, xr, lda, yc, ldb, d, ldd, 3, 3); break;                                      \
                case 16: ftile(T, n, xr, lda, yc, ldb, d, ldd, 3, 4); break;                                      \
                case 17: ftile(T, n, xr, lda, yc, ldb, d, ldd, 4, 1); break;                                      \
                case 18: ftile(T, n, xr, lda, yc, ldb, d, ldd, 4, 2); break;                                      \
                case 19: ftile(T, n, xr, lda, yc, ldb, d, ldd, 4, 3); break;                                      \
                default: ftile(T, n, xr, lda, yc, ldb, d, ldd, 4, 4); break;                                      \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
    }

FTILE_DISPATCH(gemm_f32, RB_F32)
FTILE_DISPATCH(gemm_f16, RB_F16)
FTILE_DISPATCH(gemm_bf16, RB_BF16)

static void vd_f32(int64_t n, float *s, const void *x, const void *y) { ftile(RB_F32, n, x, 0, y, 0, s, 1, 1, 1); }
static void vd_f16(int64_t n, float *s, const void *x, const void *y) { ftile(RB_F16, n, x, 0, y, 0, s, 1, 1, 1); }
static void vd_bf16(int64_t n, float *s, const void *x, const void *y) { ftile(RB_BF16, n, x, 0, y, 0, s, 1, 1, 1); }

static void f16_to_f32(const rb_f16 *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

const struct rb_cpu_kernels rb_cpu_kernels_avx512 = {
    .isa = RB_CPU_ISA_AVX512,
    .vec_dot_type = RB_CPU_VEC_DOT_TYPES,
    .vec_dot = {
        [RB_F32] = vd_f32, [RB_F16] = vd_f16, [RB_BF16] = vd_bf16,
        [RB_Q4_0] = rb_vd_q4_0_avx512, [RB_Q4_1] = rb_vd_q4_1_avx2, [RB_Q5_0] = rb_vd_q5_0_avx2,
        [RB_Q5_1] = rb_vd_q5_1_avx2, [RB_Q8_0] = rb_vd_q8_0_avx512,
        [RB_Q2_K] = rb_vd_q2_K_avx2, [RB_Q3_K] = rb_vd_q3_K_avx2, [RB_Q4_K] = rb_vd_q4_K_avx2,
        [RB_Q5_K] = rb_vd_q5_K_avx2, [RB_Q6_K] = rb_vd_q6_K_avx2, [RB_MXFP4] = rb_vd_mxfp4_avx512,
        [RB_IQ4_NL] = rb_vd_iq4_nl_avx512, [RB_IQ4_XS] = rb_vd_iq4_xs_avx512,
        [RB_IQ3_XXS] = rb_vd_iq3_xxs_scalar, [RB_IQ3_S] = rb_vd_iq3_s_scalar,
        [RB_IQ2_XXS] = rb_vd_iq2_xxs_scalar, [RB_IQ2_XS] = rb_vd_iq2_xs_scalar,
        [RB_IQ2_S] = rb_vd_iq2_s_scalar, [RB_IQ1_S] = rb_vd_iq1_s_scalar, [RB_IQ1_M] = rb_vd_iq1_m_scalar,
    },
    .gemm_tile = {
        [RB_F32] = gemm_f32, [RB_F16] = gemm_f16, [RB_BF16] = gemm_bf16,
        [RB_Q4_0] = rb_gemm_q4_0_avx512, [RB_Q8_0] = rb_gemm_q8_0_avx512,
        [RB_Q4_K] = rb_gemm_q4_K_avx512, [RB_Q5_K] = rb_gemm_q5_K_avx512, [RB_Q6_K] = rb_gemm_q6_K_avx512,
    },
    .pack_rows = {
        [RB_Q4_0] = rb_pack_q4_0_avx512, [RB_Q8_0] = rb_pack_q8_0_avx512,
        [RB_Q2_K] = rb_pack_q2_K_avx512, [RB_Q3_K] = rb_pack_q3_K_avx512, [RB_Q4_K] = rb_pack_q4_K_avx512,
        [RB_Q5_K] = rb_pack_q5_K_avx512, [RB_Q6_K] = rb_pack_q6_K_avx512,
    },
    .gemm_packed = {
        [RB_Q4_0] = rb_gemm_packed_q4_0_avx512, [RB_Q8_0] = rb_gemm_packed_q8_0_avx512,
        [RB_Q2_K] = rb_gemm_packed_kq16_avx512, [RB_Q3_K] = rb_gemm_packed_kq16_avx512,
        [RB_Q4_K] = rb_gemm_packed_kq32_avx512, [RB_Q5_K] = rb_gemm_packed_kq32_avx512,
        [RB_Q6_K] = rb_gemm_packed_kq16_avx512,
    },
    /* f32 weights keep the 4 x 4 tiles: one FMA chain per output moved the f32
     * test models' logits away from llama.cpp's past their tests' bounds */
    .gemm_t = {[RB_F16] = rb_gemm_t_f16_avx512, [RB_BF16] = rb_gemm_t_bf16_avx512},
    .pack_bytes = {
        [RB_Q4_0] = RB_CPU_PACK_BLOCK_BYTES, [RB_Q8_0] = RB_CPU_PACK_BLOCK_BYTES,
        [RB_Q2_K] = RB_CPU_PACK_KQ_BYTES(16), [RB_Q3_K] = RB_CPU_PACK_KQ_BYTES(16),
        [RB_Q4_K] = RB_CPU_PACK_KQ_BYTES(32), [RB_Q5_K] = RB_CPU_PACK_KQ_BYTES(32),
        [RB_Q6_K] = RB_CPU_PACK_KQ_BYTES(16),
    },
    .from_f32 = {
        [RB_Q8_0] = rb_q8_0_from_f32_avx2, [RB_Q8_1] = rb_q8_1_from_f32_avx2, [RB_Q8_K] = rb_q8_K_from_f32_avx2,
    },
    .f16_to_f32 = f16_to_f32,
    .f32_to_f16 = rb_f32_to_f16_avx2,
    .bf16_to_f32 = rb_bf16_to_f32_avx2,
};

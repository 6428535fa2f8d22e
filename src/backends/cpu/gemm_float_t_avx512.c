/* AVX-512 prefill kernels for float weights (f16 and bf16 rows, read as they
 * are stored): activation rows sit in the lanes (the matmul stored a block of
 * up to RB_CPU_T_COLS rows k-major, yt[k * RB_CPU_T_COLS + c]) and each weight
 * value is broadcast from memory, so one FMA advances 16 activation rows and
 * no weight transposition is needed. The weights are converted exactly to
 * f32 16 values of k at a time into a small stack buffer, one chunk ahead of
 * the FMAs that use it, so the conversion's loads run under the previous
 * chunk's FMAs instead of stalling them (and no f32 copy of the weight rows
 * is ever written out). A call keeps R x 2 accumulators (R = RB_CPU_T_ROWS
 * = 14 weight rows x 32 activation rows; a last group of fewer rows runs as
 * calls of 4 and 1 rows, which keeps the code small) in registers for the
 * whole row, so every output is one f32 FMA chain in k order. */
#include "backends/cpu/kernels_avx512.h"

#include <immintrin.h>

#define RB_AI static inline __attribute__((always_inline))
#define CHUNK 16 /* values of k converted at a time: one zmm of f32 */

_Static_assert(RB_CPU_T_COLS == 32, "two zmm of activation rows");

/* 16 weight values at p, or with FULL == 0 those that mask m selects (a
 * masked load, which reads nothing past the row: slower on Zen 4, so only
 * for the last chunk), as exact f32 */
RB_AI __m512 load_w(const char *p, __mmask16 m, const int FULL, const int BF) {
    const __m256i h = FULL ? _mm256_loadu_si256((const __m256i *)(const void *)p) : _mm256_maskz_loadu_epi16(m, p);
    if (BF) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* acc[r][j] += b[r * CHUNK + k] * y[k * RB_CPU_T_COLS + 16 j] */
RB_AI void fma_step(__m512 acc[RB_CPU_T_ROWS][2], const float *b, const float *y, int k, const int R, const int MB) {
    const __m512 a0 = _mm512_loadu_ps(y + k * RB_CPU_T_COLS);
    const __m512 a1 = MB > 1 ? _mm512_loadu_ps(y + k * RB_CPU_T_COLS + 16) : a0;
    for (int r = 0; r < R; r++) {
        const __m512 bw = _mm512_set1_ps(b[r * CHUNK + k]);
        acc[r][0] = _mm512_fmadd_ps(bw, a0, acc[r][0]);
        if (MB > 1) acc[r][1] = _mm512_fmadd_ps(bw, a1, acc[r][1]);
    }
}

/* One full chunk of FMAs (k < CHUNK) whose step k < R also converts row k of
 * the next chunk (16 values at wn + k * lda) into nb[k * CHUNK]: the
 * conversion's loads and stores spread over the FMAs, and every accumulator
 * stays in a register. */
RB_AI void chunk(__m512 acc[RB_CPU_T_ROWS][2], const float *b, const float *y, const char *wn, size_t lda, float *nb,
                 const int R, const int MB, const int BF) {
#pragma GCC unroll 16
    for (int k = 0; k < CHUNK; k++) {
        if (k < R) {
            _mm512_store_ps(nb + k * CHUNK, load_w(wn, 0, 1, BF));
            wn += lda;
        }
        fma_step(acc, b, y, k, R, MB);
    }
}

/* Converts the first kc values of R rows (kc < 16: masked) into nb[r * CHUNK]. */
RB_AI void convert(const char *w, size_t lda, int kc, float *nb, const int R, const int BF) {
    const __mmask16 m = (__mmask16)(kc >= CHUNK ? 0xffffu : (1u << kc) - 1u);
    for (int r = 0; r < R; r++) _mm512_store_ps(nb + r * CHUNK, load_w(w + (size_t)r * lda, m, 0, BF));
}

/* R weight rows x (MB * 16) activation rows; out[r * 32 + c] */
RB_AI void tile_t(int64_t n, const char *w, size_t lda, const float *yt, float *out, const char *pf, size_t pf_lines,
                  const int R, const int MB, const int BF) {
    float buf[2][RB_CPU_T_ROWS * CHUNK] __attribute__((aligned(64)));
    __m512 acc[RB_CPU_T_ROWS][2];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < MB; j++) acc[r][j] = _mm512_setzero_ps();
    const int64_t nfull = n / CHUNK, nch = (n + CHUNK - 1) / CHUNK;
    size_t pf_acc = 0; /* the prefetches of the next rows, spread evenly over the chunks */
#define PREFETCH_SHARE()                                                                                     \
    for (pf_acc += pf_lines; pf_acc >= (size_t)nch; pf_acc -= (size_t)nch, pf += 64) _mm_prefetch(pf, _MM_HINT_T1)
    /* chunk 0 up front; each full chunk but the last converts the one after
     * it; the last chunk and the last full one go through a plain loop */
    convert(w, lda, n < CHUNK ? (int)n : CHUNK, buf[0], R, BF);
    int64_t c = 0;
    for (; c + 1 < nfull; c++) {
        PREFETCH_SHARE();
        chunk(acc, buf[c & 1], yt + c * CHUNK * RB_CPU_T_COLS, w + (c + 1) * CHUNK * 2, lda, buf[(c + 1) & 1], R, MB,
              BF);
    }
    for (; c < nch; c++) {
        PREFETCH_SHARE();
        const int kc = n - c * CHUNK < CHUNK ? (int)(n - c * CHUNK) : CHUNK;
        if (c + 1 < nch) convert(w + (c + 1) * CHUNK * 2, lda, (int)(n - (c + 1) * CHUNK), buf[(c + 1) & 1], R, BF);
        for (int k = 0; k < kc; k++) fma_step(acc, buf[c & 1], yt + c * CHUNK * RB_CPU_T_COLS, k, R, MB);
    }
#undef PREFETCH_SHARE
    for (int r = 0; r < R; r++)
        for (int j = 0; j < MB; j++) _mm512_storeu_ps(out + r * RB_CPU_T_COLS + j * 16, acc[r][j]);
}

/* Row counts the kernel is compiled for: a group of fewer than RB_CPU_T_ROWS
 * rows (the last of a matrix) runs as a few of these. */
#define TILE(R, BF)                                                                                          \
    do {                                                                                                     \
        if (mb == 2)                                                                                         \
            tile_t(n, w + (size_t)r0 * lda, lda, yt, out + r0 * RB_CPU_T_COLS, pf, pf_lines, R, 2, BF);      \
        else                                                                                                 \
            tile_t(n, w + (size_t)r0 * lda, lda, yt, out + r0 * RB_CPU_T_COLS, pf, pf_lines, R, 1, BF);      \
        r0 += R;                                                                                             \
        pf_lines = 0; /* all of them in the first call */                                                    \
    } while (0)

#define GEMM_T(NAME, BF)                                                                                     \
    void NAME(int64_t n, int nr, int nc, const void *wv, size_t lda, const float *yt, float *dst, size_t ldd, \
              const void *pfv, size_t pf_lines) {                                                            \
        float out[RB_CPU_T_ROWS * RB_CPU_T_COLS];                                                            \
        const char *w = wv, *pf = pfv;                                                                       \
        const int mb = nc > 16 ? 2 : 1;                                                                      \
        int r0 = 0;                                                                                          \
        if (nr >= RB_CPU_T_ROWS) TILE(RB_CPU_T_ROWS, BF);                                                    \
        while (nr - r0 >= 4) TILE(4, BF);                                                                    \
        while (nr - r0 >= 1) TILE(1, BF);                                                                    \
        for (int c = 0; c < nc; c++)                                                                         \
            for (int r = 0; r < nr; r++) dst[(size_t)c * ldd + (size_t)r] = out[r * RB_CPU_T_COLS + c];      \
    }

GEMM_T(rb_gemm_t_f16_avx512, 0)
GEMM_T(rb_gemm_t_bf16_avx512, 1)

/* AVX-512 prefill kernel for float weights (f32, and f16/bf16 rows the matmul
 * converted to f32 exactly): activation rows sit in the lanes (the matmul
 * stored a block of up to RB_CPU_T_COLS rows k-major, yt[k * RB_CPU_T_COLS + c]),
 * each weight value is broadcast from memory, so one FMA advances 16
 * activation rows and no weight transposition is needed. A call keeps
 * nr x 2 accumulators (nr <= RB_CPU_T_ROWS = 14 weight rows x 32 activation
 * rows) in registers for the whole row, so every output is one f32 FMA chain
 * in k order. */
#include "backends/cpu/kernels_avx512.h"

#include <immintrin.h>
#include <string.h>

#define RB_AI static inline __attribute__((always_inline))

_Static_assert(RB_CPU_T_COLS == 32, "two zmm of activation rows");

/* R weight rows x (MB * 16) activation rows; out[r * 32 + c] */
RB_AI void tile_t(int64_t n, const float *w, size_t ldw, const float *yt, float *out, const char *pf, size_t pf_lines,
                  const int R, const int MB) {
    __m512 acc[RB_CPU_T_ROWS][2];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < MB; j++) acc[r][j] = _mm512_setzero_ps();
    /* one prefetch every `step` values of k spreads pf_lines over the row */
    const int64_t step = pf_lines ? (n / (int64_t)pf_lines > 0 ? n / (int64_t)pf_lines : 1) : n + 1;
    int64_t next = step;
    for (int64_t k = 0; k < n; k++) {
        if (k == next && pf_lines) {
            _mm_prefetch(pf, _MM_HINT_T1);
            pf += 64;
            pf_lines--;
            next += step;
        }
        const float *y = yt + k * RB_CPU_T_COLS;
        __m512 a0 = _mm512_loadu_ps(y);
        __m512 a1 = MB > 1 ? _mm512_loadu_ps(y + 16) : a0;
        for (int r = 0; r < R; r++) {
            __m512 b = _mm512_set1_ps(w[(size_t)r * ldw + (size_t)k]);
            acc[r][0] = _mm512_fmadd_ps(b, a0, acc[r][0]);
            if (MB > 1) acc[r][1] = _mm512_fmadd_ps(b, a1, acc[r][1]);
        }
    }
    for (; pf_lines; pf_lines--, pf += 64) _mm_prefetch(pf, _MM_HINT_T1);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < MB; j++) _mm512_storeu_ps(out + r * RB_CPU_T_COLS + j * 16, acc[r][j]);
}

#define TILE_CASE(R)                                                  \
    case R:                                                           \
        if (mb == 2)                                                  \
            tile_t(n, w, ldw, yt, out, pf, pf_lines, R, 2);                         \
        else                                                          \
            tile_t(n, w, ldw, yt, out, pf, pf_lines, R, 1);                         \
        break;

void rb_gemm_t_f32_avx512(int64_t n, int nr, int nc, const float *w, size_t ldw, const float *yt, float *dst,
                          size_t ldd, const void *pf, size_t pf_lines) {
    float out[RB_CPU_T_ROWS * RB_CPU_T_COLS];
    const int mb = nc > 16 ? 2 : 1;
    switch (nr) {
        TILE_CASE(1) TILE_CASE(2) TILE_CASE(3) TILE_CASE(4) TILE_CASE(5) TILE_CASE(6) TILE_CASE(7)
        TILE_CASE(8) TILE_CASE(9) TILE_CASE(10) TILE_CASE(11) TILE_CASE(12) TILE_CASE(13)
    default:
        if (mb == 2)
            tile_t(n, w, ldw, yt, out, pf, pf_lines, RB_CPU_T_ROWS, 2);
        else
            tile_t(n, w, ldw, yt, out, pf, pf_lines, RB_CPU_T_ROWS, 1);
        break;
    }
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++) dst[(size_t)c * ldd + (size_t)r] = out[r * RB_CPU_T_COLS + c];
}

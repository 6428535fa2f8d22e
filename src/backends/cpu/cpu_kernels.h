/* The CPU backend's SIMD kernel table. One constant table exists per
 * instruction set (scalar C, AVX2+FMA+F16C, AVX-512 with VNNI); the backend
 * picks one at creation (rb_cpu_kernels_get) and stores it in
 * rb_cpu_backend.kern, so ops dispatch through it at run time and nothing
 * outside the ISA-specific files is compiled with -mavx2 / -mavx512*.
 *
 * Dot-product convention: x is a weight row (any weight dtype), y is an
 * activation row already converted to vec_dot_type[x's dtype] (q8_0, q8_1,
 * q8_K for the quantized formats; f32 for f32/f16/bf16). n is the row length
 * in elements and must be a multiple of the weight dtype's block size. */
#ifndef RBEE_CPU_KERNELS_H
#define RBEE_CPU_KERNELS_H

#include "backends/cpu/cpu_internal.h"
#include "rbee/dtype.h"
#include "rbee/quant.h"

#include <stddef.h>
#include <stdint.h>

/* *s = dot(x[0..n), y[0..n)). */
typedef void (*rb_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);
/* Converts one f32 row of n values into dtype-specific blocks: identical to
 * rb_quantize_row of quant.h for q8_K; q8_0/q8_1 use ggml's x86 activation
 * rounding (nearest-even of x * 127 / amax, see quantize_act_scalar.c). */
typedef void (*rb_from_f32_fn)(const float *x, void *y, int64_t n);
/* Tile of dot products: for r < nr and c < nc,
 *   dst[c * ldd + r] = dot(row r of x, row c of y)
 * rows of x are lda bytes apart, rows of y ldb bytes apart. nc is at most
 * RB_CPU_TILE_MAX and nr * nc at most RB_CPU_TILE_MAX^2, except that nc == 1
 * allows runs of up to RB_CPU_MATVEC_RUN rows (matrix-vector products); any
 * smaller size works. */
typedef void (*rb_gemm_tile_fn)(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb,
                                float *dst, size_t ldd);
#define RB_CPU_TILE_MAX 8
/* Most weight rows per call when nc == 1 (matrix-vector runs). */
#define RB_CPU_MATVEC_RUN 256
/* products of at most this many activation rows skip the packed kernels (matmul_plan.c) */
#define RB_CPU_PACKED_MIN_ROWS 4

/* Optional packed prefill path (used for several activation rows when both
 * entries exist): pack_rows stores nr <= RB_CPU_PACK_ROWS weight rows in an
 * ISA-specific layout of RB_CPU_PACK_BLOCK_BYTES per 32-element block (rows
 * past nr are zero); gemm_packed then computes dst[c * ldd + r] for r < nr,
 * c < nc (any nc) from it and q8_0 activation rows, using each activation
 * row's per-block scale and sum (rb_act_aux, ld_aux entries per row); the
 * k-quant entries take q8_K activations and no aux. */
typedef struct rb_act_aux {
    float d;     /* the block's scale as f32 */
    int32_t sum; /* sum of the block's 32 quants */
} rb_act_aux;
/* The weight rows the matmul packs next (rows of row_bytes, lda apart): a
 * packed kernel that takes it spreads prefetches of `lines` more of their
 * cache lines over its multiplications (pack_pull.h), so the next pack_rows
 * reads them from cache instead of waiting on memory with nothing else to
 * do. The caller splits the rows' lines over its calls. NULL, or rows == 0:
 * nothing to fetch. */
typedef struct rb_pack_prefetch {
    const char *p;
    size_t lda, row_bytes;
    int rows;
    size_t lines; /* lines this call issues */
    int row;      /* progress: the next line is row `row`, byte `off` */
    size_t off;
} rb_pack_prefetch;
typedef void (*rb_pack_rows_fn)(int64_t n, int nr, const void *x, size_t lda, void *out);
typedef void (*rb_gemm_packed_fn)(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                                  const rb_act_aux *aux, size_t ld_aux, float *dst, size_t ldd,
                                  rb_pack_prefetch *pf);
#define RB_CPU_PACK_ROWS 16
/* Optional prefill kernel for float weights (f16, bf16), by weight dtype: for
 * r < nr <= RB_CPU_T_ROWS and c < nc <= RB_CPU_T_COLS,
 *   dst[c * ldd + r] = sum over k in order of f32(w_r[k]) * yt[k * RB_CPU_T_COLS + c]
 * as one f32 FMA chain per output, where row w_r starts lda bytes after
 * w_(r-1) and holds the weights in the table entry's dtype (each converted
 * to f32 exactly), and yt holds the block's activation rows k-major (lanes
 * c >= nc are read but ignored). It spreads prefetches of the pf_lines cache
 * lines from pf (the weight rows the matmul multiplies next) over the row. */
typedef void (*rb_gemm_t_fn)(int64_t n, int nr, int nc, const void *w, size_t lda, const float *yt, float *dst,
                             size_t ldd, const void *pf, size_t pf_lines);
#define RB_CPU_T_ROWS 14
#define RB_CPU_T_COLS 32
#define RB_CPU_PACK_BLOCK_BYTES 576
/* k-quants (q8_K activations, aux unused): bytes per packed 256-element
 * super-block for scale groups of G elements (gemm_kquant_vnni_avx512.c) */
#define RB_CPU_PACK_KQ_BYTES(G) (4096 + (RB_QK_K / (G)) * 64 + 512 + 64)

/* Activation dtype per weight dtype; the same for every ISA (the quantized
 * dot products are defined on these pairs), so each kernel table uses this. */
#define RB_CPU_VEC_DOT_TYPES                                                                                   \
    {                                                                                                          \
        [RB_F32] = RB_F32, [RB_F16] = RB_F32, [RB_BF16] = RB_F32, [RB_Q4_0] = RB_Q8_0, [RB_Q4_1] = RB_Q8_1,    \
        [RB_Q5_0] = RB_Q8_0, [RB_Q5_1] = RB_Q8_1, [RB_Q8_0] = RB_Q8_0, [RB_Q2_K] = RB_Q8_K,                   \
        [RB_Q3_K] = RB_Q8_K, [RB_Q4_K] = RB_Q8_K, [RB_Q5_K] = RB_Q8_K, [RB_Q6_K] = RB_Q8_K,                   \
        [RB_MXFP4] = RB_Q8_0, [RB_IQ4_NL] = RB_Q8_0, [RB_IQ4_XS] = RB_Q8_K, [RB_IQ3_XXS] = RB_Q8_K,            \
        [RB_IQ3_S] = RB_Q8_K, [RB_IQ2_XXS] = RB_Q8_K, [RB_IQ2_XS] = RB_Q8_K, [RB_IQ2_S] = RB_Q8_K,             \
        [RB_IQ1_S] = RB_Q8_K, [RB_IQ1_M] = RB_Q8_K,                                                            \
    }

struct rb_cpu_kernels {
    rb_cpu_isa isa;
    /* Indexed by weight dtype; vec_dot[t] == NULL means t cannot be a weight. */
    rb_dtype vec_dot_type[RB_DTYPE_END_];
    rb_vec_dot_fn vec_dot[RB_DTYPE_END_];
    /* Optional blocked kernels for prefill (NULL: matmul loops vec_dot). */
    rb_gemm_tile_fn gemm_tile[RB_DTYPE_END_];
    /* Optional packed prefill kernels (see rb_pack_rows_fn). */
    rb_pack_rows_fn pack_rows[RB_DTYPE_END_];
    rb_gemm_packed_fn gemm_packed[RB_DTYPE_END_];
    /* Optional float-weight prefill kernel (see rb_gemm_t_fn), by weight dtype. */
    rb_gemm_t_fn gemm_t[RB_DTYPE_END_];
    /* Bytes pack_rows writes per weight block (of the weight dtype's block size). */
    uint32_t pack_bytes[RB_DTYPE_END_];
    /* Indexed by activation dtype (f32, q8_0, q8_1, q8_K). */
    rb_from_f32_fn from_f32[RB_DTYPE_END_];
    /* Row conversions usable by any op. */
    void (*f16_to_f32)(const rb_f16 *src, float *dst, int64_t n);
    void (*f32_to_f16)(const float *src, rb_f16 *dst, int64_t n);
    void (*bf16_to_f32)(const rb_bf16 *src, float *dst, int64_t n);
};

/* Kernel table for isa; falls back to the best supported table below isa if
 * that ISA was not compiled in. Never NULL. */
const struct rb_cpu_kernels *rb_cpu_kernels_get(rb_cpu_isa isa);

/* Per-ISA tables (kernels_scalar.c, kernels_avx2.c, kernels_avx512.c). */
extern const struct rb_cpu_kernels rb_cpu_kernels_scalar;
#if defined(RBEE_CPU_HAVE_AVX2)
extern const struct rb_cpu_kernels rb_cpu_kernels_avx2;
#endif
#if defined(RBEE_CPU_HAVE_AVX512)
extern const struct rb_cpu_kernels rb_cpu_kernels_avx512;
#endif

#endif

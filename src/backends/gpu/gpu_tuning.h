/* The GPU backend's internal alternatives to its own kernel choices, for
 * tests and benchmarks only: a test checks a second kernel or path against
 * the first by setting one of these on a backend it created. Users never
 * see them (not in include/rbee, not read from the environment); a
 * zero-initialized struct is what every backend runs with. Shared by C
 * (the registry, tests) and the CUDA/HIP sources. */
#ifndef RBEE_GPU_TUNING_H
#define RBEE_GPU_TUNING_H

#include "rbee/backend.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rb_gpu_tuning {
    bool tiled_gemm;        /* prefill products by the own tiled GEMM (gemm_tiled.cu) where cuBLAS exists too */
    bool rope_pairs_only;   /* fused rope products: every row of a group's range in pairs, no single-row share */
    bool upload_dma;        /* queued uploads from page-locked memory by the copy engine, not a copy kernel */
    bool narrow_decode_att; /* decode attention of head dims 64 and 128 by att_decode.cuh, not the wide kernel */
    bool generic_attention; /* every attention by the generic f32 kernel (no tensor-core or decode kernel) */
    bool own_conv;          /* every rb_conv2d by our kernels (ops_conv.cu), never cuDNN (conv_cudnn.cu) */
    bool no_gemm_q8;        /* quantized products as before gemm_q8.cuh (matrix-vector kernels to 32 rows, GEMM above) */
    bool gemm_q8_plain;     /* q4_0 / q8_0 products of 9..64 rows by the first, unpipelined kernel (gemm_q8_plain.cuh) */
    bool no_att_fa;         /* plain prefill attention (no mask, softcap, sinks) by att_tc.cuh, not att_fa.cuh */
    int mv_max_m;           /* > 0: the matrix-vector kernels take products of up to this many rows (<= 32) */
    bool no_lt_epilogue;    /* rb_linear's bias by our epilogue kernel after the GEMM, never in cuBLASLt's epilogue */
    int gemm_q8_min_m;      /* > 0: gemm_q8.cuh takes products from this many rows (else Q8_MIN_M) */
    int gemm_q8_max_m;      /* > 0: gemm_q8.cuh takes products of up to this many rows (<= 256; else Q8_MAX_M) */
    int gemm_q8_split;      /* > 0: gemm_q8.cuh splits K in this many parts (at most one a step), not by its rule */
    int moe_gemm;           /* rb_matmul_id by the expert GEMMs of moe_gemm.cuh (CUDA, eager calls): 0 where the
                             * backend chooses them (>= 16 tokens, >= 12 rows per used expert), > 0 always, < 0 never */
    int moe_gemm_chunk_mib; /* > 0: those GEMMs convert at most this many MiB of experts at a time (else 256) */
} rb_gpu_tuning;

/* What the backend's rb_conv2d calls ran on, for tests: whether cuDNN is
 * usable (the CUDA backend loaded libcudnn.so.9 at run time and, once a
 * convolution needed it, created its handle) and how many convolutions went
 * through cuDNN and through our kernels since the backend was created; and
 * how many rb_matmul_id calls went through the expert GEMMs (moe_gemm.cuh)
 * and through the matrix-vector kernels. */
typedef struct rb_gpu_conv_stats {
    bool cudnn_loaded;
    unsigned long long cudnn_convs, own_convs;
    unsigned long long moe_gemm_calls, moe_mv_calls;
} rb_gpu_conv_stats;

/* Sets the tuning of a CUDA or ROCm backend (RB_E_UNSUPPORTED for other
 * kinds or NULL arguments); ops queued after the call use it. Defined in
 * src/backends/registry.c, which dispatches to the backend kind's own. */
rb_status rb_gpu_backend_tune(rb_backend *be, const rb_gpu_tuning *t);
rb_status rb_cuda_backend_tune(rb_backend *be, const rb_gpu_tuning *t);
rb_status rb_rocm_backend_tune(rb_backend *be, const rb_gpu_tuning *t);
/* The convolution counters above (RB_E_UNSUPPORTED for other kinds or NULL
 * arguments); the ROCm backend never loads cuDNN. */
rb_status rb_gpu_backend_conv_stats(rb_backend *be, rb_gpu_conv_stats *out);
rb_status rb_cuda_backend_conv_stats(rb_backend *be, rb_gpu_conv_stats *out);
rb_status rb_rocm_backend_conv_stats(rb_backend *be, rb_gpu_conv_stats *out);

#ifdef __cplusplus
}
#endif

#endif

/* Internal to the GPU backend (CUDA and HIP builds alike): the backend struct,
 * the device view of a tensor that kernels receive by value, the error and
 * launch-check helpers, device scratch memory, and the host-side launchers
 * that each ops_*.cu file defines. Everything lives in a namespace chosen by
 * the vendor header (rbcuda / rbrocm), so both builds can link into one
 * binary. */
#ifndef RBEE_GPU_INTERNAL_H
#define RBEE_GPU_INTERNAL_H

#include "backends/gpu/gpu_vendor.h"

extern "C" {
#include "core/backend_impl.h"
}
#include "backends/gpu/gpu_tuning.h"

#if !defined(RBEE_GPU_HIP)
#include <cublasLt.h>
#include <cublas_v2.h>
#endif

#include <stdint.h>

namespace RB_GPU_NS {

/* row groups (query, batch, kv group, head chunk) the decode attention
 * kernel's counters cover; more fall back to the generic kernel */
#define ATT_DEC_COUNTERS 65536

#define GPU_PINNED_MAX 32

struct gpu_backend {
    rb_backend base; /* must be first */
    int device;
    int warp;            /* physical warp width of this device (host-side launch math) */
    int n_sm;
    cudaStream_t stream; /* every op and copy of this backend is ordered on it */
    void *staging[2];    /* pinned host buffers for uploads */
    cudaEvent_t staging_ev[2];
    size_t staging_cap;
    void *scratch; /* device scratch, used by one op at a time (stream-ordered) */
    size_t scratch_cap;
    struct gpu_scratch_blk *scratch_blk; /* owns scratch; captured graphs hold a reference too */
    void *scratch2; /* the second region (gpu_scratch_aux), kept apart from the first */
    size_t scratch2_cap;
    struct gpu_scratch_blk *scratch2_blk;
    int *ids_err;      /* graphs: device i32[4] {bad, op, id, limit} of the first out-of-range id */
    int *ids_err_host; /* pinned mirror read back after a replay */
    int *ids_err_host_dev; /* its device view (NULL: copied back by DMA) */
    bool ids_err_live; /* a graph ran since ids_err was last read */
    bool ids_err_exported; /* and its last kernel copies the flag to ids_err_host (no DMA to queue) */
    unsigned *att_cnt; /* decode attention: zeroed per-row-group counters (att_decode.cuh) */
    rb_gpu_tuning tune; /* a test's alternatives to the kernel choices (gpu_tuning.h); all off */
    bool pdl;           /* programmatic dependent launch usable (CUDA, sm_90+): gpu_pdl.h */
    struct gpu_trace *trace; /* RBEE_GPU_TRACE: decode-kernel timestamps (gpu_trace.h), else NULL */
    /* page-locked blocks of g_host_alloc the kernels can address (their
     * device view), so a read-back into one can be a kernel that writes it
     * directly (gpu_backend.cu: download) */
    struct gpu_pinned {
        char *host, *dev;
        size_t size;
    } pinned[GPU_PINNED_MAX];
    int n_pinned;
#if !defined(RBEE_GPU_HIP)
    cublasHandle_t blas;
    cublasLtHandle_t blas_lt; /* rb_linear's bias in the GEMM epilogue (ops_linear.cu); NULL: our kernel */
#endif
#if defined(RBEE_CUDNN)
    struct gpu_cudnn *dnn; /* cuDNN loaded at run time (conv_cudnn.cu); NULL only out of host memory */
#endif
    unsigned long long conv_dnn, conv_own; /* rb_conv2d calls run by cuDNN / by our kernels */
    unsigned long long moe_gemm, moe_mv;   /* rb_matmul_id calls run by the expert GEMMs / matrix-vector kernels */
    char arch[32];
};

static inline gpu_backend *gb(rb_backend *be) { return (gpu_backend *)be; }

/* Device view of a tensor: first element, dtype, extents, byte strides. */
struct gt {
    char *p;
    int dt;
    int host; /* p is host memory (rb_buffer_wrap_host), written across the bus */
    int64_t ne[4];
    int64_t nb[4];
};

static inline gt gview(const rb_tensor *t) {
    gt v;
    v.p = (char *)t->buf->impl + t->offs;
    v.dt = (int)t->dtype;
    v.host = !t->buf->owned;
    for (int i = 0; i < 4; i++) {
        v.ne[i] = t->ne[i];
        v.nb[i] = (int64_t)t->nb[i];
    }
    return v;
}

/* Records a CUDA/HIP error as an RB_E_BACKEND (or RB_E_NOMEM) failure. */
rb_status gpu_fail(rb_backend *be, cudaError_t e, const char *what);
/* Checks the launch that was just queued (cudaGetLastError). */
rb_status gpu_check_launch(rb_backend *be, const char *what);
/* Device scratch of at least bytes, valid until the next call. */
rb_status gpu_scratch(rb_backend *be, size_t bytes, void **out);
/* A second device scratch region under the same rules, for an op that
 * keeps an intermediate result there while the ops it calls use
 * gpu_scratch (rb_linear's product before its epilogue). */
rb_status gpu_scratch_aux(rb_backend *be, size_t bytes, void **out);
/* Copies an i32 index tensor to the host and checks 0 <= id < limit. */
rb_status gpu_check_ids(rb_backend *be, const rb_tensor *ids, int64_t limit, const char *op);
/* While capturing a graph ids cannot be read on the host: kernels check them
 * and report the first bad one into this device flag (NULL when eager). */
int *gpu_ids_guard(rb_backend *be);
/* Blocks for n items at `threads` per block, capped for grid-stride loops. */
static inline unsigned gpu_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535LL * 32) b = 65535LL * 32;
    return (unsigned)b;
}

/* Converting copy dst <- src of equal shape (plain dtypes with any strides,
 * or dequantizing a supported block format), queued on the stream. */
rb_status gpu_copy_view(rb_backend *be, const gt &dst, const gt &src);
/* A contiguous [ne0, ne1, ne2, ne3] view of device memory p. */
gt gpu_contig_view(void *p, rb_dtype dt, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);

/* Quantized rows at v are aligned for the unit decoder (dq_unit). */
bool gpu_units_aligned(rb_dtype dt, const gt &v);

/* Dtypes the kernels can load/store elementwise, and dequantize. */
bool gpu_plain_ok(rb_dtype t);
bool gpu_quant_ok(rb_dtype t);
/* The iq formats (a subset of gpu_quant_ok's): decoded by cast and get_rows,
 * but with no matrix-vector, fused or expert kernels; rb_matmul decodes them
 * to f16 for the GEMM at every M. */
static inline bool gpu_iq_dtype(rb_dtype t) {
    return t == RB_IQ4_NL || t == RB_IQ4_XS || t == RB_IQ3_XXS || t == RB_IQ3_S || t == RB_IQ2_XXS || t == RB_IQ2_XS ||
           t == RB_IQ2_S || t == RB_IQ1_S || t == RB_IQ1_M;
}

/* ---- ops (each returns RB_E_UNSUPPORTED with a message where it must) ---- */
rb_status gpu_fill(rb_backend *be, rb_tensor *dst, float value);
rb_status gpu_affine(rb_backend *be, rb_tensor *dst, const rb_tensor *src, float scale, float bias);
rb_status gpu_unary(rb_backend *be, rb_unary_op op, rb_tensor *dst, const rb_tensor *src);
rb_status gpu_binary(rb_backend *be, rb_binary_op op, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b);
rb_status gpu_where(rb_backend *be, rb_tensor *dst, const rb_tensor *cond, const rb_tensor *a, const rb_tensor *b);
rb_status gpu_glu(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, rb_unary_op act);
rb_status gpu_cast(rb_backend *be, rb_tensor *dst, const rb_tensor *src);
rb_status gpu_reduce(rb_backend *be, rb_reduce_op op, rb_tensor *dst, const rb_tensor *src);
rb_status gpu_softmax(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *mask, float scale);
rb_status gpu_rms_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w, float eps);
rb_status gpu_add_rms_norm(rb_backend *be, rb_tensor *x, const rb_tensor *delta, const rb_tensor *w, float eps,
                           rb_tensor *h);
rb_status gpu_layer_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w,
                         const rb_tensor *b, float eps);
rb_status gpu_layer_norm_mod(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *shift,
                             const rb_tensor *scale, float eps);
/* rb_linear (matmul/ops_linear.cu): the product by gpu_matmul, then its
 * epilogue in one pass */
rb_status gpu_linear(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                     const rb_linear_epilogue *ep);
rb_status gpu_get_rows(rb_backend *be, rb_tensor *dst, const rb_tensor *table, const rb_tensor *ids);
rb_status gpu_set_rows(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids);
rb_status gpu_rope(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *pos,
                   const rb_rope_params *p);
rb_status gpu_attention(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k, const rb_tensor *v,
                        const rb_attn_params *p);
rb_status gpu_matmul(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b);
/* The image ops of the diffusion networks: ops_conv.cu, ops_group_norm.cu, ops_upsample.cu. */
rb_status gpu_conv2d(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w, const rb_tensor *bias,
                     const int stride[2], const int pad[2], const int dilation[2], int groups);
#if defined(RBEE_CUDNN)
/* cuDNN (conv_cudnn.cu, CUDA builds with cudnn.h): loads libcudnn.so.9 when
 * the backend is created (where it is absent g->dnn records why and every
 * convolution runs our kernels), frees it with the backend, and runs a
 * convolution where it takes the case (*done true; false: the caller runs
 * its own kernel). */
void gpu_cudnn_open(gpu_backend *g);
void gpu_cudnn_close(gpu_backend *g);
rb_status gpu_cudnn_conv2d(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w,
                           const rb_tensor *bias, const int stride[2], const int pad[2], const int dilation[2],
                           int groups, bool *done);
/* Whether cuDNN is usable (loaded, and its handle created or not yet
 * needed); out (may be NULL) gets "cudnn-9.19.0" or "no-cudnn (why)" for
 * the device info's features. */
bool gpu_cudnn_describe(const gpu_backend *g, char *out, size_t size);
#endif
rb_status gpu_group_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups, const rb_tensor *w,
                         const rb_tensor *b, float eps);
rb_status gpu_group_norm_act(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups, const rb_tensor *w,
                             const rb_tensor *b, float eps, rb_unary_op act);
rb_status gpu_upsample(rb_backend *be, rb_tensor *dst, const rb_tensor *src, rb_upsample_mode mode);
rb_status gpu_matmul_fused(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                           const rb_matmul_fusion *f);
/* The mixture-of-experts ops: ops_matmul_id.cu (grouped expert products),
 * ops_swiglu_clamp.cu, ops_sort.cu (routing: topk, and argsort). */
rb_status gpu_matmul_id(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                        const rb_tensor *ids);
rb_status gpu_swiglu_clamp(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, float alpha,
                           float limit);
rb_status gpu_argsort(rb_backend *be, rb_tensor *dst, const rb_tensor *src, bool descending);
rb_status gpu_topk(rb_backend *be, rb_tensor *values, rb_tensor *indices, const rb_tensor *src, int k);
/* Own tiled GEMM (gemm_tiled.cu): C[m][n] = sum_k A[n][k] * B[m][k] on f16
 * (or f32) operands with row strides lda, ldb (elements), f32 out with row
 * stride ldc (floats). */
rb_status gpu_gemm_tiled(rb_backend *be, const void *A, int64_t lda, const void *B, int64_t ldb, bool f16, float *C,
                         int64_t N, int64_t M, int64_t K, int64_t ldc);

} // namespace RB_GPU_NS

#endif

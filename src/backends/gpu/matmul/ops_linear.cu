/* rb_linear on the GPU. On CUDA a bias alone (or with ReLU) on 16-bit
 * operands of a prefill-sized product goes into cuBLASLt's GEMM epilogue:
 * one launch (rb_gpu_tuning.no_lt_epilogue turns it off). Otherwise the
 * product by gpu_matmul (every path it has:
 * matrix-vector kernels, cuBLAS / the tiled GEMM), then the epilogue (bias,
 * activation, gate, residual) in one pass over the result, where the
 * separate ops took one launch each (the MMDiT's gated residual was four:
 * bias, mul, add, and the product's temporary).
 *  - in place: the product goes straight into dst and the epilogue reads it
 *    back from there (a 16-bit dst is rounded twice, as by the separate
 *    ops); used unless the residual is dst itself.
 *  - the residual in place (x += gate * (W a + b)): the product goes to an
 *    f32 buffer in the second scratch region (gpu_scratch_aux, so the
 *    product's own scratch use cannot clobber it), and the epilogue reads it
 *    and x and writes x, rounded once.
 * The epilogue kernel walks dst's rows (grid: column blocks x rows); rows of
 * contiguous 16-byte aligned f32/f16/bf16 (rows4_ok) take 4 elements a
 * thread with vector loads and stores. A dst contiguous along dim 1 (an
 * image seen as tokens, written in place) with the product in scratch takes
 * a tiled transposing kernel instead (k_linear_ep_tr). */
#include "backends/gpu/gpu_common.cuh"

#include <limits.h>
#include <string.h>

namespace RB_GPU_NS {

#define LIN_THREADS 256
/* gpu_matmul's matrix-vector and hi/lo split paths take up to MV_MAX_M = 32 rows (matvec.cuh): cuBLASLt
 * takes the bias only above, where gpu_matmul runs the plain GEMM too */
#define LIN_LT_MIN_ROWS 33

struct lin_ep {
    gt d, p;          /* destination, product (dst's shape; p may be d) */
    gt bias, gate, res; /* p == NULL where absent */
    int act, has_act;
};

__device__ __forceinline__ const char *lin_brow(const gt &v, int64_t c1, int64_t c2, int64_t c3) {
    return v.p + (v.ne[1] == 1 ? 0 : c1) * v.nb[1] + (v.ne[2] == 1 ? 0 : c2) * v.nb[2] +
           (v.ne[3] == 1 ? 0 : c3) * v.nb[3];
}

/* the epilogue of element i0 of a row: y the product, gr / rr the gate's
 * and the residual's row (NULL: none), r the residual's value when V4 */
__device__ __forceinline__ float lin_value(const lin_ep &e, float y, int64_t i0, const char *gr) {
    if (e.bias.p) y = y + ldf(e.bias.dt, e.bias.p + i0 * e.bias.nb[0]);
    if (e.has_act) y = apply_unary(e.act, y);
    if (gr) y = y * ldf(e.gate.dt, gr + i0 * e.gate.nb[0]);
    return y;
}

template <bool V4> __global__ void k_linear_ep(lin_ep e, int64_t nrows) {
    const int64_t n = e.d.ne[0];
    for (int64_t r = blockIdx.y; r < nrows; r += gridDim.y) {
        const int64_t c1 = r % e.d.ne[1], c2 = (r / e.d.ne[1]) % e.d.ne[2], c3 = r / (e.d.ne[1] * e.d.ne[2]);
        char *dr = e.d.p + c1 * e.d.nb[1] + c2 * e.d.nb[2] + c3 * e.d.nb[3];
        const char *pr = e.p.p + c1 * e.p.nb[1] + c2 * e.p.nb[2] + c3 * e.p.nb[3];
        const char *gr = e.gate.p ? lin_brow(e.gate, c1, c2, c3) : NULL;
        const char *rr = e.res.p ? e.res.p + c1 * e.res.nb[1] + c2 * e.res.nb[2] + c3 * e.res.nb[3] : NULL;
        if (V4) {
            for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n / 4;
                 j += (int64_t)gridDim.x * blockDim.x) {
                float v[4], x[4];
                ld4(e.p.dt, pr + j * 4 * e.p.nb[0], v);
                if (rr) ld4(e.res.dt, rr + j * 4 * e.res.nb[0], x);
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    v[t] = lin_value(e, v[t], 4 * j + t, gr);
                    if (rr) v[t] = x[t] + v[t];
                }
                st4(e.d.dt, dr + j * 4 * e.d.nb[0], v);
            }
        } else {
            for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
                float y = lin_value(e, ldf(e.p.dt, pr + i * e.p.nb[0]), i, gr);
                if (rr) y = ldf(e.res.dt, rr + i * e.res.nb[0]) + y;
                stf(e.d.dt, dr + i * e.d.nb[0], y);
            }
        }
    }
}

/* dst contiguous along dim 1 instead of dim 0 (the token view [C, W*H, B]
 * of an image [W, H, C, B]: a Transformer2DModel's proj_out adding into
 * the image), the product contiguous f32: 32 x 32 tiles of (n, m) through
 * shared memory, so the product is read along n and dst (and the residual,
 * laid out as dst) along m; blockIdx.z walks dims 2 and 3. */
#define LIN_TILE 32
__global__ void k_linear_ep_tr(lin_ep e) {
    __shared__ float t[LIN_TILE][LIN_TILE + 1];
    const int64_t n0 = (int64_t)blockIdx.x * LIN_TILE, m0 = (int64_t)blockIdx.y * LIN_TILE;
    const int64_t N = e.d.ne[0], M = e.d.ne[1], n23 = e.d.ne[2] * e.d.ne[3];
    for (int64_t z = blockIdx.z; z < n23; z += gridDim.z) {
        const int64_t c2 = z % e.d.ne[2], c3 = z / e.d.ne[2];
        for (int r = threadIdx.y; r < LIN_TILE; r += blockDim.y) { /* along n: contiguous in the product */
            const int64_t n = n0 + threadIdx.x, m = m0 + r;
            if (n < N && m < M) {
                const char *gr = e.gate.p ? lin_brow(e.gate, m, c2, c3) : NULL;
                const float p = ldf(e.p.dt, e.p.p + n * e.p.nb[0] + m * e.p.nb[1] + c2 * e.p.nb[2] + c3 * e.p.nb[3]);
                t[r][threadIdx.x] = lin_value(e, p, n, gr);
            }
        }
        __syncthreads();
        for (int r = threadIdx.y; r < LIN_TILE; r += blockDim.y) { /* along m: contiguous in dst */
            const int64_t m = m0 + threadIdx.x, n = n0 + r;
            if (n < N && m < M) {
                float y = t[threadIdx.x][r];
                if (e.res.p) y = ldf(e.res.dt, e.res.p + n * e.res.nb[0] + m * e.res.nb[1] + c2 * e.res.nb[2] +
                                                   c3 * e.res.nb[3]) + y;
                stf(e.d.dt, e.d.p + n * e.d.nb[0] + m * e.d.nb[1] + c2 * e.d.nb[2] + c3 * e.d.nb[3], y);
            }
        }
        __syncthreads();
    }
}

/* the k_linear_ep_tr case: dst (and the residual) contiguous along dim 1,
 * strided along dim 0, the product contiguous along dim 0 */
static bool lin_tr_ok(const lin_ep &e) {
    const int64_t es = e.d.dt == RB_F32 ? 4 : 2;
    const bool res_like = !e.res.p || (e.res.dt == e.d.dt && e.res.nb[0] == e.d.nb[0] && e.res.nb[1] == e.d.nb[1]);
    return e.d.nb[1] == es && e.d.nb[0] != es && e.d.ne[1] > 1 && e.d.ne[0] > 1 && e.p.nb[0] == 4 && res_like &&
           (e.d.ne[0] + LIN_TILE - 1) / LIN_TILE <= 0x7fffffffLL && (e.d.ne[1] + LIN_TILE - 1) / LIN_TILE <= 65535;
}

static gt lin_opt(const rb_tensor *t) {
    if (t) return gview(t);
    gt v = {};
    return v;
}

#if !defined(RBEE_GPU_HIP)
/* The bias alone (or with ReLU) in cuBLASLt's GEMM epilogue, one launch: 16-bit weights, activations and
 * dst of one dtype with contiguous rows, more rows than the matrix-vector and split paths take (so the
 * product's arithmetic is the plain GEMM's), a contiguous f32 or dst-typed bias, no batch broadcast of
 * the weights. *done = false (nothing queued) where this does not apply or cuBLASLt has no algorithm. */
static rb_status lt_linear(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                           const rb_linear_epilogue *ep, bool *done) {
    *done = false;
    gpu_backend *g = gb(be);
    const rb_dtype dt = a->dtype;
    const bool relu = ep->has_act && ep->act == RB_UNARY_RELU;
    if (!g->blas_lt || g->tune.no_lt_epilogue || g->tune.tiled_gemm || !ep->bias || ep->gate || ep->res ||
        (ep->has_act && !relu) || (dt != RB_F16 && dt != RB_BF16) || b->dtype != dt || dst->dtype != dt)
        return RB_OK;
    const int64_t K = a->ne[0], N = a->ne[1];
    int64_t M = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    const rb_tensor *bi = ep->bias;
    const bool bcast = a->ne[2] == 1 && a->ne[3] == 1; /* one weight matrix for every slice */
    if (!bcast && (a->ne[2] != B2 || a->ne[3] != B3)) return RB_OK;
    /* slices that continue each other's rows in b and dst: one GEMM over all of them */
    if (bcast && b->nb[2] == b->nb[1] * (size_t)M && b->nb[3] == b->nb[2] * (size_t)B2 &&
        dst->nb[2] == dst->nb[1] * (size_t)M && dst->nb[3] == dst->nb[2] * (size_t)B2) {
        M *= B2 * B3;
        B2 = B3 = 1;
    }
    if (b->ne[1] < LIN_LT_MIN_ROWS || a->nb[0] != 2 || b->nb[0] != 2 || dst->nb[0] != 2 ||
        bi->nb[0] != rb_dtype_info((int)bi->dtype)->type_size || (bi->dtype != RB_F32 && bi->dtype != dt) ||
        a->nb[1] % 16 || b->nb[1] % 16 || dst->nb[1] % 16 || N > INT_MAX || M > INT_MAX || K > INT_MAX ||
        B2 * B3 > 65535)
        return RB_OK;
    const gt av = gview(a), bv = gview(b), dv = gview(dst), biv = gview(bi);
    /* 16-byte aligned operands of every slice (the heuristic is told so below) */
    if ((uintptr_t)biv.p % 16 || (uintptr_t)av.p % 16 || (uintptr_t)bv.p % 16 || (uintptr_t)dv.p % 16 ||
        (B2 * B3 > 1 && (b->nb[2] % 16 || b->nb[3] % 16 || dst->nb[2] % 16 || dst->nb[3] % 16 ||
                         (!bcast && (a->nb[2] % 16 || a->nb[3] % 16)))))
        return RB_OK;
    const cudaDataType_t ct = dt == RB_F16 ? CUDA_R_16F : CUDA_R_16BF, bt = bi->dtype == RB_F32 ? CUDA_R_32F : ct;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const cublasLtEpilogue_t epi = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    /* workspace: the scratch as it is while capturing (it cannot grow then), else up to 32 MiB */
    void *ws = NULL;
    size_t wsz = be->capturing ? g->scratch_cap : ((size_t)32 << 20);
    if (wsz > ((size_t)32 << 20)) wsz = (size_t)32 << 20;
    if (wsz && gpu_scratch(be, wsz, &ws) != RB_OK) { /* none to give: cuBLASLt without a workspace */
        ws = NULL;
        wsz = 0;
    }
    bool ok = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) ==
                  CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) ==
                  CUBLAS_STATUS_SUCCESS &&
              cublasLtMatrixLayoutCreate(&la, ct, (uint64_t)K, (uint64_t)N, (int64_t)(a->nb[1] / 2)) ==
                  CUBLAS_STATUS_SUCCESS &&
              cublasLtMatrixLayoutCreate(&lb, ct, (uint64_t)K, (uint64_t)M, (int64_t)(b->nb[1] / 2)) ==
                  CUBLAS_STATUS_SUCCESS &&
              cublasLtMatrixLayoutCreate(&lc, ct, (uint64_t)N, (uint64_t)M, (int64_t)(dst->nb[1] / 2)) ==
                  CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz) ==
                  CUBLAS_STATUS_SUCCESS;
    const uint32_t al = 16;
    const cublasLtMatmulPreferenceAttributes_t als[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && ok; i++)
        ok = cublasLtMatmulPreferenceSetAttribute(pref, als[i], &al, sizeof al) == CUBLAS_STATUS_SUCCESS;
    const void *bptr = biv.p;
    ok = ok && cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bptr, sizeof bptr) ==
                   CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulHeuristicResult_t h;
    int nh = 0;
    ok = ok && cublasLtMatmulAlgoGetHeuristic(g->blas_lt, op, la, lb, lc, lc, pref, 1, &h, &nh) ==
                   CUBLAS_STATUS_SUCCESS && nh > 0;
    rb_status s = RB_OK;
    if (ok) {
        *done = true; /* from here on a failure is the op's */
        const float alpha = 1.0f, beta = 0.0f;
        for (int64_t i3 = 0; i3 < B3 && s == RB_OK; i3++)
            for (int64_t i2 = 0; i2 < B2 && s == RB_OK; i2++) {
                const char *A = bcast ? av.p : av.p + i2 * av.nb[2] + i3 * av.nb[3];
                const char *Bp = bv.p + i2 * bv.nb[2] + i3 * bv.nb[3];
                char *C = dv.p + i2 * dv.nb[2] + i3 * dv.nb[3];
                const cublasStatus_t st = cublasLtMatmul(g->blas_lt, op, &alpha, A, la, Bp, lb, &beta, C, lc, C, lc,
                                                         &h.algo, ws, wsz, g->stream);
                if (st != CUBLAS_STATUS_SUCCESS)
                    s = rb_backend_fail(be, RB_E_BACKEND, "rb_linear: cuBLASLt failed with status %d", (int)st);
            }
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return s;
}
#endif

rb_status gpu_linear(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                     const rb_linear_epilogue *ep) {
    if (!ep->bias && !ep->has_act && !ep->gate && !ep->res) return gpu_matmul(be, dst, a, b);
#if !defined(RBEE_GPU_HIP)
    bool lt_done = false;
    const rb_status ls = lt_linear(be, dst, a, b, ep, &lt_done);
    if (ls != RB_OK || lt_done) return ls;
#endif
    const int64_t N = dst->ne[0], M = dst->ne[1], B2 = dst->ne[2], B3 = dst->ne[3], nrows = M * B2 * B3;
    if (N == 0 || nrows == 0) return RB_OK;
    /* the residual is dst itself (the front-end allows only that view or none) */
    const bool res_in_dst = ep->res && ep->res->buf == dst->buf && ep->res->offs == dst->offs;
    lin_ep e;
    e.d = gview(dst);
    e.bias = lin_opt(ep->bias);
    e.gate = lin_opt(ep->gate);
    e.res = lin_opt(ep->res);
    e.act = (int)ep->act;
    e.has_act = ep->has_act ? 1 : 0;
    rb_status s;
    if (res_in_dst) { /* the product into f32 rows of the second scratch region */
        if ((size_t)N > SIZE_MAX / 4 / (size_t)nrows)
            return rb_backend_fail(be, RB_E_NOMEM, "rb_linear: a product of %lld x %lld is too large", (long long)N,
                                   (long long)nrows);
        void *sp = NULL;
        s = gpu_scratch_aux(be, (size_t)(N * nrows) * 4, &sp);
        if (s != RB_OK) return s;
        rb_buffer pb;
        memset(&pb, 0, sizeof pb);
        pb.backend = be;
        pb.size = (size_t)(N * nrows) * 4;
        pb.impl = sp;
        pb.owned = true;
        rb_tensor pt;
        const int64_t pne[4] = {N, M, B2, B3};
        s = rb_tensor_init(&pt, RB_F32, 4, pne, &pb, 0);
        if (s != RB_OK) return rb_backend_fail(be, s, "rb_linear: product view");
        s = gpu_matmul(be, &pt, a, b);
        if (s != RB_OK) return s;
        e.p = gview(&pt);
    } else {
        s = gpu_matmul(be, dst, a, b);
        if (s != RB_OK) return s;
        e.p = e.d;
    }
    if (e.p.dt == RB_F32 && lin_tr_ok(e)) {
        const int64_t n23 = B2 * B3;
        const dim3 grid((unsigned)((N + LIN_TILE - 1) / LIN_TILE), (unsigned)((M + LIN_TILE - 1) / LIN_TILE),
                        (unsigned)(n23 > 65535 ? 65535 : n23));
        k_linear_ep_tr<<<grid, dim3(LIN_TILE, 8), 0, gb(be)->stream>>>(e);
        return gpu_check_launch(be, "linear (transposing epilogue)");
    }
    const bool v4 = rows4_pair(e.d, e.p) && (!ep->res || rows4_pair(e.d, e.res));
    const int64_t cols = v4 ? N / 4 : N;
    int64_t bx = (cols + LIN_THREADS - 1) / LIN_THREADS;
    if (bx > 1024) bx = 1024;
    const dim3 grid((unsigned)bx, (unsigned)(nrows > 65535 ? 65535 : nrows));
    if (v4) k_linear_ep<true><<<grid, LIN_THREADS, 0, gb(be)->stream>>>(e, nrows);
    else k_linear_ep<false><<<grid, LIN_THREADS, 0, gb(be)->stream>>>(e, nrows);
    return gpu_check_launch(be, "linear (epilogue)");
}

} // namespace RB_GPU_NS

/* rb_matmul_id's prefill path on CUDA (included by ops_matmul_id.cu): with
 * many rows per selected expert, the expert products as tensor-core GEMMs,
 * the way rb_matmul runs a dense prefill product (weights decoded to f16,
 * cuBLAS with f32 accumulation):
 *   1. the host, which has read the ids to check them, sorts the k T (slot,
 *      token) rows r = t k + j by expert and lays the used experts out as
 *      column ranges of one activation matrix, each range padded to a bucket
 *      size (mg_bucket) so that experts of equal size share one batched
 *      GEMM; the column map (row r of each column, -1 for padding) and the
 *      GEMMs' pointer arrays go to the device in one copy;
 *   2. k_mg_gather fills the columns with those activation rows converted
 *      to the GEMM's type (padding columns zero): one launch;
 *   3. per chunk of used experts whose converted weights fit in the chunk
 *      bound (MG_CHUNK_MIB, rb_gpu_tuning.moe_gemm_chunk_mib; one expert at
 *      least), k_mg_weights decodes (q4_0, q8_0, q4_K, q5_K, q6_K, mxfp4:
 *      dq_unit) or converts them in one launch, then one cublasGemmBatchedEx
 *      per bucket size multiplies them into f32 result columns; float
 *      weights whose rows the GEMM can read in place are not copied (a
 *      single chunk);
 *   4. k_mg_scatter writes each result column to its (slot, token) place of
 *      dst: one launch.
 * Types as rb_matmul's GEMM: f16 for quantized and f16 weights, bf16 for
 * bf16, f32 for f32 (no TF32). cublasGemmGroupedBatchedEx (one call for
 * every size) takes 16-bit inputs only with 16-bit results, which a 16-bit
 * output would round and could overflow, hence one batched call per bucket.
 * Below MG_MIN_TOKENS tokens or MG_MIN_ROWS rows per used expert the
 * matrix-vector kernels are cheaper (they read each expert's quantized bytes
 * a few times; this path writes and reads an f16 copy): gpu_matmul_id keeps
 * them there, in graph captures (no ids on the host) and on HIP (no hipBLAS
 * here), where this file is empty. */
#ifndef RBEE_GPU_MOE_GEMM_CUH
#define RBEE_GPU_MOE_GEMM_CUH

#include "backends/gpu/gpu_quant.cuh"

#include <limits.h>
#include <stdlib.h>

#if !defined(RBEE_GPU_HIP)

namespace RB_GPU_NS {

#define MG_MIN_TOKENS 16  /* by default: tokens a call needs at least */
#define MG_MIN_ROWS 12    /* and (slot, token) rows per used expert on average */
#define MG_CHUNK_MIB 256  /* converted expert weights a chunk holds at most (MiB) */
#define MG_THREADS 256

/* Column c of the activation matrix xb (type ct, columns of ldb elements)
 * from the row of b [K, S, T] that map[c] names (r = t k + j: row S == 1 ?
 * 0 : j of token t), zeros where map[c] < 0. grid (x over K, columns). */
__global__ void __launch_bounds__(MG_THREADS)
    k_mg_gather(gt b, int k, const int *map, int64_t C, char *xb, int ct, int64_t ldb) {
    const int64_t K = b.ne[0];
    const int esz = ct == RB_F32 ? 4 : 2;
    for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
        const int r = map[c];
        const char *src = b.p + (int64_t)(r < 0 || b.ne[1] == 1 ? 0 : r % k) * b.nb[1] +
                          (int64_t)(r < 0 ? 0 : r / k) * b.nb[2];
        char *out = xb + c * ldb * esz;
        for (int64_t i = (int64_t)blockIdx.x * MG_THREADS + threadIdx.x; i < K; i += (int64_t)gridDim.x * MG_THREADS)
            stf(ct, out + i * esz, r < 0 ? 0.0f : ldf(b.dt, src + i * b.nb[0]));
    }
}

/* The experts eid[0..n-1] of a [K, N, E] in type ct into slots of ws bytes
 * at w, rows of lda elements: quantized rows a 32-element unit a thread
 * (dq_unit; lda == K, four 16-byte stores of f16), float rows an element a
 * thread. grid (x over the units or elements of an expert, experts). */
__global__ void __launch_bounds__(MG_THREADS)
    k_mg_weights(gt a, const int *eid, int n, char *w, int64_t ws, int ct, int64_t lda, int quant) {
    const int64_t K = a.ne[0], N = a.ne[1];
    const int esz = ct == RB_F32 ? 4 : 2;
    for (int s = blockIdx.y; s < n; s += gridDim.y) {
        const char *ae = a.p + (int64_t)eid[s] * a.nb[2];
        char *we = w + (int64_t)s * ws;
        if (quant) {
            const int64_t upr = K / 32, nu = upr * N;
            for (int64_t i = (int64_t)blockIdx.x * MG_THREADS + threadIdx.x; i < nu;
                 i += (int64_t)gridDim.x * MG_THREADS) {
                const int64_t u = i % upr, row = i / upr;
                float v[32];
                dq_unit(a.dt, ae + row * a.nb[1], u, v);
                uint4 *o = (uint4 *)(we + (row * lda + u * 32) * 2);
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    uint32_t p[4];
#pragma unroll
                    for (int t = 0; t < 4; t++)
                        p[t] = (uint32_t)f32_to_f16_bits(v[8 * q + 2 * t]) |
                               ((uint32_t)f32_to_f16_bits(v[8 * q + 2 * t + 1]) << 16);
                    o[q] = make_uint4(p[0], p[1], p[2], p[3]);
                }
            }
        } else {
            for (int64_t i = (int64_t)blockIdx.x * MG_THREADS + threadIdx.x; i < K * N;
                 i += (int64_t)gridDim.x * MG_THREADS) {
                const int64_t c = i % K, row = i / K;
                stf(ct, we + (row * lda + c) * esz, ldf(a.dt, ae + row * a.nb[1] + c * a.nb[0]));
            }
        }
    }
}

/* Result column c (f32, ldc apart) to dst [N, k, T] at the (slot, token)
 * place of row map[c]; padding columns (-1) are skipped. grid (x over N,
 * columns). */
__global__ void __launch_bounds__(MG_THREADS)
    k_mg_scatter(gt d, int k, const int *map, int64_t C, const float *y, int64_t ldc) {
    const int64_t N = d.ne[0];
    for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
        const int r = map[c];
        if (r < 0) continue;
        char *out = d.p + (int64_t)(r % k) * d.nb[1] + (int64_t)(r / k) * d.nb[2];
        const float *src = y + c * ldc;
        for (int64_t i = (int64_t)blockIdx.x * MG_THREADS + threadIdx.x; i < N; i += (int64_t)gridDim.x * MG_THREADS)
            stf(d.dt, out + i * d.nb[0], src[i]);
    }
}

/* Columns an expert of m rows takes: m rounded up to 16 up to 64 rows,
 * above to a quarter of the largest power of two <= m (at most a quarter
 * of padding), so experts of similar sizes share a batched GEMM. */
static int64_t mg_bucket(int64_t m) {
    if (m <= 64) return (m + 15) / 16 * 16;
    int64_t p = 64;
    while (p <= m / 2) p *= 2;
    const int64_t q = p / 4;
    return (m + q - 1) / q * q;
}

static int64_t mg_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
static size_t mg_up256(size_t n) { return (n + 255) & ~(size_t)255; }

/* one used expert's place: its id, rows, columns and first column */
struct mg_ent {
    int e;
    int64_t rows, cols, c0;
};

static int mg_by_cols(const void *x, const void *y) {
    const mg_ent *p = (const mg_ent *)x, *q = (const mg_ent *)y;
    if (p->cols != q->cols) return p->cols < q->cols ? -1 : 1;
    return p->e < q->e ? -1 : p->e > q->e;
}

/* Whether an eager call of T tokens, R rows and `used` distinct experts
 * takes this path (rb_gpu_tuning.moe_gemm: 0 as chosen here, > 0 always,
 * < 0 never), and whether its sizes fit cuBLAS's int arguments. */
static bool mg_wanted(const gpu_backend *g, const rb_tensor *a, int64_t T, int64_t R, int64_t used) {
    if (!g->blas || used < 1 || g->tune.moe_gemm < 0) return false;
    const int64_t K = a->ne[0], N = a->ne[1], lim = INT_MAX - 256;
    if (K > lim || N > lim || (int64_t)(a->nb[1] / 2) > lim) return false;
    if (g->tune.moe_gemm > 0) return true;
    return T >= MG_MIN_TOKENS && R >= MG_MIN_ROWS * used;
}

/* The expert products of gpu_matmul_id (its checks done: supported dtype,
 * ids valid, R, N, K > 0) through the GEMMs; hid: the ids on the host, row
 * r = t k + j at hid[r]; cnt[e]: expert e's rows; used: experts with rows. */
static rb_status moe_gemm(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b, const int32_t *hid,
                          const int64_t *cnt, int64_t used) {
    gpu_backend *g = gb(be);
    const int64_t K = a->ne[0], N = a->ne[1], E = a->ne[2], k = dst->ne[1], T = dst->ne[2], R = k * T;
    const rb_dtype dt = a->dtype;
    const bool quant = rb_dtype_info((int)dt)->is_quant;
    const rb_dtype ct = quant ? RB_F16 : dt; /* f16, bf16 or f32 */
    const size_t ces = ct == RB_F32 ? 4 : 2;
    const cudaDataType_t cdt = ct == RB_F32 ? CUDA_R_32F : ct == RB_F16 ? CUDA_R_16F : CUDA_R_16BF;
    const gt av = gview(a), bv = gview(b), dv = gview(dst);
    /* float weights in place: contiguous elements, 16-byte aligned rows and experts */
    const bool direct = !quant && av.nb[0] == (int64_t)ces && av.nb[1] % 16 == 0 && av.nb[2] % 16 == 0 &&
                        (uintptr_t)av.p % 16 == 0 && av.nb[1] >= K * (int64_t)ces;
    const int64_t lda = direct ? av.nb[1] / (int64_t)ces : mg_up(K, 8), ldb = mg_up(K, 8), ldc = mg_up(N, 4);
    const size_t ws = direct ? 0 : mg_up256((size_t)(N * lda) * ces); /* a converted expert's slot */
    const int64_t mib = g->tune.moe_gemm_chunk_mib > 0 ? g->tune.moe_gemm_chunk_mib : MG_CHUNK_MIB;
    int64_t per = direct ? used : (int64_t)((size_t)(mib << 20) / ws); /* experts a chunk */
    if (per < 1) per = 1;
    const int64_t nchunk = (used + per - 1) / per, nslot = per < used ? per : used;

    /* host plan: the used experts by chunk (ascending ids), within a chunk by columns */
    mg_ent *ent = (mg_ent *)malloc(sizeof(mg_ent) * (size_t)used);
    int64_t *cbase = (int64_t *)malloc(sizeof(int64_t) * (size_t)E);
    if (!ent || !cbase) {
        free(ent);
        free(cbase);
        return rb_backend_fail(be, RB_E_NOMEM, "rb_matmul_id: no host memory for the expert plan");
    }
    int64_t u = 0;
    for (int64_t e = 0; e < E; e++)
        if (cnt[e] > 0) {
            ent[u].e = (int)e;
            ent[u].rows = cnt[e];
            ent[u].cols = mg_bucket(cnt[e]);
            u++;
        }
    for (int64_t c = 0; c < nchunk; c++) {
        const int64_t n = c + 1 < nchunk ? per : used - c * per;
        qsort(ent + c * per, (size_t)n, sizeof(mg_ent), mg_by_cols);
    }
    int64_t C = 0;
    for (int64_t i = 0; i < used; i++) {
        ent[i].c0 = C;
        cbase[ent[i].e] = C;
        C += ent[i].cols;
    }
    /* the block the device gets: pointers A[used], B[used], Y[used], expert ids[used], map[C] */
    const size_t ptr_b = sizeof(void *) * 3 * (size_t)used, up_b = ptr_b + sizeof(int) * (size_t)(used + C);
    char *h = (char *)malloc(up_b);
    if (!h) {
        free(ent);
        free(cbase);
        return rb_backend_fail(be, RB_E_NOMEM, "rb_matmul_id: no host memory for the expert plan");
    }
    const size_t xb_b = mg_up256((size_t)(C * ldb) * ces), y_b = mg_up256((size_t)(C * ldc) * 4);
    void *sp = NULL;
    rb_status s = gpu_scratch(be, mg_up256(up_b) + xb_b + y_b + (size_t)nslot * ws, &sp);
    if (s != RB_OK) {
        free(ent);
        free(cbase);
        free(h);
        return s;
    }
    char *dev = (char *)sp, *xb = dev + mg_up256(up_b), *yb = xb + xb_b, *wb = yb + y_b;
    const void **hA = (const void **)h, **hB = hA + used;
    void **hY = (void **)(hB + used);
    int *heid = (int *)(h + ptr_b), *hmap = heid + used;
    for (int64_t i = 0; i < used; i++) {
        hA[i] = direct ? (const void *)(av.p + (int64_t)ent[i].e * av.nb[2]) : (const void *)(wb + (size_t)(i % per) * ws);
        hB[i] = xb + (size_t)(ent[i].c0 * ldb) * ces;
        hY[i] = yb + (size_t)(ent[i].c0 * ldc) * 4;
        heid[i] = ent[i].e;
        for (int64_t j = ent[i].rows; j < ent[i].cols; j++) hmap[ent[i].c0 + j] = -1;
    }
    for (int64_t r = 0; r < R; r++) hmap[cbase[hid[r]]++] = (int)r; /* each expert's rows in ascending r */
    free(cbase);
    const int *deid = (const int *)(dev + ptr_b), *dmap = deid + used;
    const void *const *dA = (const void *const *)dev, *const *dB = dA + used;
    void *const *dY = (void *const *)(dev + 2 * sizeof(void *) * (size_t)used);
    cudaStream_t st = g->stream;
    /* pageable source: the call returns once the bytes are staged, so h can go */
    cudaError_t err = cudaMemcpyAsync(dev, h, up_b, cudaMemcpyHostToDevice, st);
    free(h);
    if (err != cudaSuccess) {
        free(ent);
        return gpu_fail(be, err, "rb_matmul_id: uploading the expert plan");
    }
    g->moe_gemm++;

    const unsigned cy = (unsigned)(C < 65535 ? C : 65535);
    k_mg_gather<<<dim3((unsigned)((K + MG_THREADS - 1) / MG_THREADS < 16 ? (K + MG_THREADS - 1) / MG_THREADS : 16), cy),
                  MG_THREADS, 0, st>>>(bv, (int)k, dmap, C, xb, (int)ct, ldb);
    s = gpu_check_launch(be, "rb_matmul_id (gathering the activations)");
    const float alpha = 1.0f, beta = 0.0f;
    for (int64_t c = 0; c < nchunk && s == RB_OK; c++) {
        const int64_t i0 = c * per, n = c + 1 < nchunk ? per : used - i0;
        if (!direct) {
            const int64_t work = quant ? N * (K / 32) : N * K;
            int64_t bx = (work + MG_THREADS - 1) / MG_THREADS;
            if (bx > 4096) bx = 4096;
            k_mg_weights<<<dim3((unsigned)bx, (unsigned)(n < 65535 ? n : 65535)), MG_THREADS, 0, st>>>(
                av, deid + i0, (int)n, wb, (int64_t)ws, (int)ct, lda, quant ? 1 : 0);
            s = gpu_check_launch(be, "rb_matmul_id (expert weights to the GEMM's type)");
        }
        for (int64_t i = i0; i < i0 + n && s == RB_OK;) { /* one batched GEMM per column count */
            int64_t j = i + 1;
            while (j < i0 + n && ent[j].cols == ent[i].cols) j++;
            const cublasStatus_t bst =
                cublasGemmBatchedEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)ent[i].cols, (int)K, &alpha,
                                    dA + i, cdt, (int)lda, dB + i, cdt, (int)ldb, &beta, dY + i, CUDA_R_32F, (int)ldc,
                                    (int)(j - i), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (bst != CUBLAS_STATUS_SUCCESS)
                s = rb_backend_fail(be, RB_E_BACKEND, "rb_matmul_id: cuBLAS batched GEMM failed with status %d",
                                    (int)bst);
            i = j;
        }
    }
    free(ent);
    if (s != RB_OK) return s;
    k_mg_scatter<<<dim3((unsigned)((N + MG_THREADS - 1) / MG_THREADS < 16 ? (N + MG_THREADS - 1) / MG_THREADS : 16), cy),
                   MG_THREADS, 0, st>>>(dv, (int)k, dmap, C, (const float *)yb, ldc);
    return gpu_check_launch(be, "rb_matmul_id (results to their places)");
}

} // namespace RB_GPU_NS

#endif
#endif

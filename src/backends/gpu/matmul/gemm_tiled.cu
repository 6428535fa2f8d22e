/* The project's own GEMM, used for prefill on HIP (Debian ships no rocBLAS)
 * and on CUDA where a test asks for it (rb_gpu_tuning.tiled_gemm, so it is
 * tested on NVIDIA too):
 * C[m][n] = sum_k A[n][k] * B[m][k] with f16 or f32 operands and f32
 * accumulation. 64x64 output tiles, 16-deep k steps staged in shared memory
 * (converted to f32 on load), 256 threads each owning a 4x4 sub-tile; plain
 * FMA, no matrix units, so portable across every CUDA and AMD target. */
#include "backends/gpu/gpu_common.cuh"

namespace RB_GPU_NS {

#define GT_BM 64
#define GT_BN 64
#define GT_BK 16
#define GT_THREADS 256

__device__ __forceinline__ float ld_op(const void *p, int64_t i, bool f16) {
    return f16 ? f16_bits_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

__global__ void __launch_bounds__(GT_THREADS) k_gemm_tiled(const void *A, int64_t lda, const void *B, int64_t ldb,
                                                           bool f16, float *C, int64_t N, int64_t M, int64_t K,
                                                           int64_t ldc) {
    __shared__ float As[GT_BK][GT_BN + 4];
    __shared__ float Bs[GT_BK][GT_BM + 4];
    const int64_t n0 = (int64_t)blockIdx.x * GT_BN, m0 = (int64_t)blockIdx.y * GT_BM;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4];
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += GT_BK) {
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int e = threadIdx.x + GT_THREADS * r, row = e / GT_BK, kk = e % GT_BK;
            const int64_t k = k0 + kk, n = n0 + row, m = m0 + row;
            As[kk][row] = (k < K && n < N) ? ld_op(A, n * lda + k, f16) : 0.0f;
            Bs[kk][row] = (k < K && m < M) ? ld_op(B, m * ldb + k, f16) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GT_BK; kk++) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) av[i] = As[kk][tx + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) bv[j] = Bs[kk][ty + 16 * j];
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[j][i] += av[i] * bv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int64_t m = m0 + ty + 16 * j;
        if (m >= M) continue;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int64_t n = n0 + tx + 16 * i;
            if (n < N) C[m * ldc + n] = acc[j][i];
        }
    }
}

rb_status gpu_gemm_tiled(rb_backend *be, const void *A, int64_t lda, const void *B, int64_t ldb, bool f16, float *C,
                         int64_t N, int64_t M, int64_t K, int64_t ldc) {
    const int64_t gx = (N + GT_BN - 1) / GT_BN, gy = (M + GT_BM - 1) / GT_BM;
    if (gx > 0x7fffffffLL || gy > 65535)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_matmul: %lld x %lld output is too large for the tiled GEMM",
                               (long long)N, (long long)M);
    k_gemm_tiled<<<dim3((unsigned)gx, (unsigned)gy), GT_THREADS, 0, gb(be)->stream>>>(A, lda, B, ldb, f16, C, N, M, K,
                                                                                      ldc);
    return gpu_check_launch(be, "tiled gemm");
}

} // namespace RB_GPU_NS

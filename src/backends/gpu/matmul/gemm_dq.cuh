/* Products of quantized weights with 33..DQ_MAX_M activation rows (the
 * decode step of many streams at once), on tensor cores, included by
 * ops_matmul.cu. A block takes BN weight rows (16, 32 or 64: chosen so that
 * the grid fills the GPU) and DQ_BM = 64 activation rows (4 warps of 16) and
 * walks K DQ_KS = 64 at a time: its threads decode the weight rows' two
 * 32-element units into shared memory as f16 (dq_unit: every ggml format the
 * GPU reads), beside the activations (f16, contiguous: converted once by the
 * caller), then mma.m16n8k16 with f32 sums (mma_tile.cuh; plain FMA on the
 * same tiles where those instructions are missing). Each weight byte is read
 * once per 64 activation rows, where the GEMM path first writes the whole
 * matrix out as f16 and reads it back (4-7x the bytes of a q4_0 matrix).
 * The numerics are that path's: weights and activations rounded to f16,
 * products summed in f32. */
#ifndef RBEE_GPU_GEMM_DQ_CUH
#define RBEE_GPU_GEMM_DQ_CUH

#include "backends/gpu/gpu_quant.cuh"
#include "backends/gpu/mma_tile.cuh"

namespace RB_GPU_NS {

#define DQ_MAX_M 256 /* above: the GEMM path (prefill), whose larger tiles win */
#define DQ_BM 64
#define DQ_KS 64
#define DQ_LD (DQ_KS + 8) /* padded row stride in halves: ldmatrix rows fall in other banks */
#define DQ_THREADS 128

/* d[m][n] = sum_k w[n][k] x[m][k] for one (weight rows, activation rows)
 * tile of batch slice blockIdx.z. a: quantized weights (rows 32-element
 * units, K % 32 == 0), x: f16 activations, slice z's row m at x + (z M + m)
 * ldx; d: f32 / f16 / bf16, any strides. */
template <int BN>
__global__ void __launch_bounds__(DQ_THREADS) k_gemm_dq(gt d, gt a, const uint16_t *x, int64_t ldx, int64_t M,
                                                       int64_t r2, int64_t r3) {
    __shared__ __align__(16) uint16_t sA[DQ_BM * DQ_LD]; /* activations */
    __shared__ __align__(16) uint16_t sB[BN * DQ_LD];    /* weights */
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int64_t K = a.ne[0], N = a.ne[1];
    const int64_t n0 = (int64_t)blockIdx.x * BN, m0 = (int64_t)blockIdx.y * DQ_BM;
    const int64_t i2 = blockIdx.z % d.ne[2], i3 = blockIdx.z / d.ne[2];
    const char *ab = a.p + (i2 / r2) * a.nb[2] + (i3 / r3) * a.nb[3];
    const uint16_t *xb = x + (int64_t)blockIdx.z * M * ldx;
    const bool wlive = m0 + w * 16 < M; /* this warp has activation rows */
    float acc[BN / 8][4];
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;

    for (int64_t k0 = 0; k0 < K; k0 += DQ_KS) {
        /* activations: DQ_BM rows of 8 16-byte pieces (zeros past M and K) */
        for (int e = tid; e < DQ_BM * 8; e += DQ_THREADS) {
            const int r = e >> 3, c = (e & 7) * 8;
            uint16_t *s = sA + r * DQ_LD + c;
            if (m0 + r < M && k0 + c < K) tile_cp16(s, xb + (m0 + r) * ldx + k0 + c); /* K % 32: whole pieces */
            else tile_zero16(s);
        }
        tile_cp_commit();
        /* weights: BN rows of two units, decoded while the copies fly */
        for (int e = tid; e < BN * 2; e += DQ_THREADS) {
            const int r = e >> 1, h = e & 1;
            uint32_t *s = (uint32_t *)(sB + r * DQ_LD + h * 32);
            const int64_t u = k0 / 32 + h;
            if (n0 + r < N && u * 32 < K) {
                float v[32];
                dq_unit(a.dt, ab + (n0 + r) * a.nb[1], u, v);
#pragma unroll
                for (int i = 0; i < 16; i++) s[i] = pack2<false>(v[2 * i], v[2 * i + 1]);
            } else {
#pragma unroll
                for (int i = 0; i < 16; i++) s[i] = 0u;
            }
        }
        tile_cp_wait<0>();
        __syncthreads();
        if (wlive) {
            float t[BN / 8][4];
            tile_abt<false, DQ_KS, BN, DQ_LD>(t, sA + w * 16 * DQ_LD, sB, lane);
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[nt][j] += t[nt][j];
        }
        __syncthreads();
    }
    if (!wlive) return;
    /* the C fragment: lane l holds rows l/4 and l/4 + 8, columns 2 (l % 4) + {0, 1} of each 8-column slice */
    const int64_t ma = m0 + w * 16 + (lane >> 2), mb = ma + 8;
    char *db = d.p + i2 * d.nb[2] + i3 * d.nb[3];
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++) {
        const int64_t n = n0 + nt * 8 + 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < 2; j++) {
            if (n + j >= N) continue;
            if (ma < M) stf(d.dt, db + (n + j) * d.nb[0] + ma * d.nb[1], acc[nt][j]);
            if (mb < M) stf(d.dt, db + (n + j) * d.nb[0] + mb * d.nb[1], acc[nt][2 + j]);
        }
    }
}

/* Weight rows per block: the widest tile (fewest activation re-reads) whose
 * grid still gives every multiprocessor two blocks, else 16. */
static int gemm_dq_bn(int64_t N, int64_t mtiles, int64_t slices, int n_sm) {
    const int64_t want = 2 * (int64_t)n_sm;
    if (((N + 63) / 64) * mtiles * slices >= want) return 64;
    if (((N + 31) / 32) * mtiles * slices >= want) return 32;
    return 16;
}

} // namespace RB_GPU_NS

#endif

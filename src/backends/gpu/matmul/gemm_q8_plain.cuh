/* The first int8 tensor-core kernel for q4_0 / q8_0 weights at 9..64
 * activation rows, kept only as the "before" of bench_gpu's q8 comparison
 * and its test (rb_gpu_tuning.gemm_q8_plain; gemm_q8.cuh is what products
 * use): no software pipelining (each step's loads, then its tensor-core
 * work), the weights decoded to int8 in shared memory per 64 activation rows.
 * A block takes BN weight rows (16, 32 or 64) and Q8P_BM = 64 activation rows
 * (4 warps of 16) and walks K Q8P_KS = 128 at a time; per 32-element block
 * one mma.m16n8k32 (s8 x s8 -> s32) per 8 weight rows, each sum scaled by
 * its activation and weight scales into f32 accumulators. Activations as
 * mv_quant_acts quantizes them (q8_0 blocks). CUDA only. On CUDA GPUs before
 * sm_80 plain integer loops stand in for the tensor-core instructions. */
#ifndef RBEE_GPU_GEMM_Q8_PLAIN_CUH
#define RBEE_GPU_GEMM_Q8_PLAIN_CUH

#if !defined(RBEE_GPU_HIP)

#include "backends/gpu/gpu_quant.cuh"
#include "backends/gpu/mma_tile.cuh"

namespace RB_GPU_NS {

#define Q8P_BM 64
#define Q8P_KS 128                /* elements (bytes) of K a step: 4 blocks */
#define Q8P_LDB (Q8P_KS + 16)      /* shared row stride in bytes: ldmatrix rows 4 banks apart */
#define Q8P_LDH (Q8P_LDB / 2)      /* the same in 16-bit units */
#define Q8P_THREADS 128

/* The 16 x BN int32 sums of the warp's 16 activation rows (sA) and BN
 * weight rows (sB) over one 32-element block at byte kb of the rows, in the
 * C fragment layout: lane l holds rows l/4 and l/4 + 8, columns
 * 2 (l % 4) + {0, 1} of each 8-column slice. */
template <int BN>
__device__ __forceinline__ void q8p_block_sums(int c[BN / 8][4], const int8_t *sA, const int8_t *sB, int kb, int lane) {
#if defined(RB_TILE_MMA)
    /* int8 pairs as 16-bit elements: the m16n8k32 s8 fragments are those of m16n8k16 b16 */
    const uint16_t *a16 = (const uint16_t *)sA, *b16 = (const uint16_t *)sB;
    const int mi = lane >> 3, r8 = lane & 7, kh = kb / 2;
    uint32_t a[4];
    ldsm_x4(a, a16 + ((mi & 1) * 8 + r8) * Q8P_LDH + (mi >> 1) * 8 + kh);
#pragma unroll
    for (int np = 0; np < BN / 16; np++) {
        uint32_t b[4];
        ldsm_x4(b, b16 + (np * 16 + (mi >> 1) * 8 + r8) * Q8P_LDH + (mi & 1) * 8 + kh);
        mma_s8_k32(c[2 * np], a, b[0], b[1]);
        mma_s8_k32(c[2 * np + 1], a, b[2], b[3]);
    }
#else
    const int g = lane >> 2, t = lane & 3;
    const int8_t *a0 = sA + g * Q8P_LDB + kb, *a1 = sA + (g + 8) * Q8P_LDB + kb;
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++) {
        const int8_t *b0 = sB + (nt * 8 + 2 * t) * Q8P_LDB + kb, *b1 = b0 + Q8P_LDB;
        int s00 = 0, s01 = 0, s10 = 0, s11 = 0;
        for (int k = 0; k < 32; k++) {
            s00 += (int)a0[k] * (int)b0[k];
            s01 += (int)a0[k] * (int)b1[k];
            s10 += (int)a1[k] * (int)b0[k];
            s11 += (int)a1[k] * (int)b1[k];
        }
        c[nt][0] = s00;
        c[nt][1] = s01;
        c[nt][2] = s10;
        c[nt][3] = s11;
    }
#endif
}

/* d[m][n] = sum_k w[n][k] x[m][k] for one (weight rows, activation rows)
 * tile of batch slice blockIdx.z: a q4_0 / q8_0 weights (DT), xq / xs the
 * quantized activations of every slice (xq [slice][M][K] int8, xs
 * [slice][M][K / 32] with the f32 scale's bits in .x), d f32 / f16 / bf16 of
 * any strides. K % 32 == 0. */
template <int BN, int DT>
__global__ void __launch_bounds__(Q8P_THREADS) k_gemm_q8_plain(gt d, gt a, const int8_t *xq, const int2 *xs, int64_t M,
                                                       int64_t r2, int64_t r3) {
    __shared__ __align__(16) int8_t sA[Q8P_BM * Q8P_LDB];
    __shared__ __align__(16) int8_t sB[BN * Q8P_LDB];
    __shared__ float sAd[Q8P_BM][Q8P_KS / 32], sBd[BN][Q8P_KS / 32];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int64_t K = a.ne[0], N = a.ne[1], KB = K / 32;
    const int64_t n0 = (int64_t)blockIdx.x * BN, m0 = (int64_t)blockIdx.y * Q8P_BM;
    const int64_t i2 = blockIdx.z % d.ne[2], i3 = blockIdx.z / d.ne[2];
    const char *ab = a.p + (i2 / r2) * a.nb[2] + (i3 / r3) * a.nb[3];
    const int8_t *xb = xq + (int64_t)blockIdx.z * M * K;
    const int2 *sb = xs + (int64_t)blockIdx.z * M * KB;
    const bool wlive = m0 + w * 16 < M; /* this warp has activation rows */
    const int ra = w * 16 + (lane >> 2), rb = ra + 8;
    float acc[BN / 8][4];
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;

    for (int64_t k0 = 0; k0 < K; k0 += Q8P_KS) {
        /* activations: Q8P_BM rows of 8 16-byte pieces, and their scales (zeros past M and K) */
        for (int e = tid; e < Q8P_BM * (Q8P_KS / 16); e += Q8P_THREADS) {
            const int r = e / (Q8P_KS / 16), c = (e % (Q8P_KS / 16)) * 16;
            int8_t *s = sA + r * Q8P_LDB + c;
            if (m0 + r < M && k0 + c < K) tile_cp16(s, xb + (m0 + r) * K + k0 + c); /* K % 32: whole pieces */
            else tile_zero16(s);
        }
        tile_cp_commit();
        for (int e = tid; e < Q8P_BM * (Q8P_KS / 32); e += Q8P_THREADS) {
            const int r = e / (Q8P_KS / 32), j = e % (Q8P_KS / 32);
            const int64_t blk = k0 / 32 + j;
            sAd[r][j] = m0 + r < M && blk < KB ? __int_as_float(sb[(m0 + r) * KB + blk].x) : 0.0f;
        }
        /* weights: BN rows of 4 blocks decoded to int8, and their scales */
        for (int e = tid; e < BN * (Q8P_KS / 32); e += Q8P_THREADS) {
            const int r = e / (Q8P_KS / 32), j = e % (Q8P_KS / 32);
            const int64_t blk = k0 / 32 + j;
            uint32_t q[8];
            float dw = 0.0f;
            if (n0 + r < N && blk < KB) {
                const char *b = ab + (n0 + r) * a.nb[1];
                if (DT == RB_Q4_0) {
                    b += blk * fmt_q4_0::BYTES;
                    dw = ld_h(b + fmt_q4_0::D);
                    uint16_t h[8];
                    ld_u16<8>(b + fmt_q4_0::QS, h);
                    /* byte i: low nibble element i, high nibble element i + 16; q - 8 as int8
                     * bytes: x ^ 8 is x - 8 for x >= 8 and x + 8 below, where 0xf0 completes it */
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const uint32_t v = (uint32_t)h[2 * i] | ((uint32_t)h[2 * i + 1] << 16);
                        const uint32_t lo = v & 0x0f0f0f0fu, hi = (v >> 4) & 0x0f0f0f0fu;
                        q[i] = (lo ^ 0x08080808u) | ((~lo & 0x08080808u) * 0x1eu);
                        q[i + 4] = (hi ^ 0x08080808u) | ((~hi & 0x08080808u) * 0x1eu);
                    }
                } else {
                    b += blk * fmt_q8_0::BYTES;
                    dw = ld_h(b + fmt_q8_0::D);
                    uint16_t h[16];
                    ld_u16<16>(b + fmt_q8_0::QS, h);
#pragma unroll
                    for (int i = 0; i < 8; i++) q[i] = (uint32_t)h[2 * i] | ((uint32_t)h[2 * i + 1] << 16);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) q[i] = 0u;
            }
            uint4 *s = (uint4 *)(sB + r * Q8P_LDB + j * 32);
            s[0] = make_uint4(q[0], q[1], q[2], q[3]);
            s[1] = make_uint4(q[4], q[5], q[6], q[7]);
            sBd[r][j] = dw;
        }
        tile_cp_wait<0>();
        __syncthreads();
        if (wlive) {
#pragma unroll
            for (int j = 0; j < Q8P_KS / 32; j++) {
                int c[BN / 8][4];
                q8p_block_sums<BN>(c, sA + w * 16 * Q8P_LDB, sB, j * 32, lane);
                const float da = sAd[ra][j], db = sAd[rb][j];
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++) {
                    const int col = nt * 8 + 2 * (lane & 3);
                    const float w0 = sBd[col][j], w1 = sBd[col + 1][j];
                    acc[nt][0] += (float)c[nt][0] * (da * w0);
                    acc[nt][1] += (float)c[nt][1] * (da * w1);
                    acc[nt][2] += (float)c[nt][2] * (db * w0);
                    acc[nt][3] += (float)c[nt][3] * (db * w1);
                }
            }
        }
        __syncthreads();
    }
    if (!wlive) return;
    const int64_t ma = m0 + ra, mb = m0 + rb;
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
static inline int gemm_q8p_bn(int64_t N, int64_t mtiles, int64_t slices, int n_sm) {
    const int64_t want = 2 * (int64_t)n_sm;
    if (((N + 63) / 64) * mtiles * slices >= want) return 64;
    if (((N + 31) / 32) * mtiles * slices >= want) return 32;
    return 16;
}

} // namespace RB_GPU_NS

#endif /* !RBEE_GPU_HIP */

#endif

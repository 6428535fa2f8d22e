/* Warp-level tile products for the tensor-core attention kernel (att_tc.cuh),
 * written once for both vendors (att_fa.cuh, CUDA only, uses the ldmatrix,
 * mma and cp.async wrappers directly; so do, CUDA sm_80+ only, the int8 mma
 * instructions of the quantized GEMM, matmul/gemm_q8*.cuh). A "warp" here is always 32 threads (on a
 * 64-wide AMD wavefront, two of them): it owns 16 rows of a 16 x N f32
 * accumulator laid out like the C fragment of mma.m16n8k16 - lane l holds,
 * for each 8-column slice nt, x[nt][0..1] at row l/4, columns 2(l%4)+{0,1}
 * and x[nt][2..3] at row l/4 + 8 - so the softmax code that walks those
 * elements is the same everywhere. Operands are 16-bit (f16 or bf16 bits,
 * template flag BF) in shared memory, row-major with a padded row stride.
 *   - CUDA sm_80+: ldmatrix + mma.sync (f32 accumulate), cp.async copies.
 *   - Elsewhere (HIP, whose Debian 5.2 has no rocWMMA; or HIP on NVIDIA):
 *     plain FMA on the same shared tiles and the same fragment layout, and
 *     synchronous 16-byte copies. Its P V product stages P through shared
 *     memory and calls __syncthreads, so every thread of the block must make
 *     that call together. */
#ifndef RBEE_GPU_MMA_TILE_CUH
#define RBEE_GPU_MMA_TILE_CUH

#include "backends/gpu/gpu_common.cuh"

#if !defined(RBEE_GPU_HIP)
#include <cuda_bf16.h>
#endif

/* device code of this pass uses the tensor-core instructions */
#if !defined(RBEE_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define RB_TILE_MMA 1
#endif
/* host and device agree on the pipeline: CUDA double-buffers with cp.async */
#if defined(RBEE_GPU_HIP)
#define RB_TILE_STAGES 1
#else
#define RB_TILE_STAGES 2
#endif

namespace RB_GPU_NS {

/* logical 32-lane shuffles (two per wavefront on wave64) */
#if defined(RBEE_GPU_HIP)
#define RB_SHFL_XOR32(v, m) __shfl_xor((v), (m), 32)
#else
#define RB_SHFL_XOR32(v, m) __shfl_xor_sync(0xffffffffu, (v), (m), 32)
#endif

template <bool BF> __device__ __forceinline__ float h_to_f(uint32_t h) {
    return BF ? bf16_to_f32((uint16_t)h) : f16_bits_to_f32((uint16_t)h);
}

/* two 16-bit elements (low = first) of a 32-bit word as floats */
template <bool BF> __device__ __forceinline__ float2 unpack2(uint32_t w) {
    float2 r;
    if (BF) {
        r.x = __uint_as_float(w << 16);
        r.y = __uint_as_float(w & 0xffff0000u);
    } else {
        r.x = f16_bits_to_f32((uint16_t)(w & 0xffffu));
        r.y = f16_bits_to_f32((uint16_t)(w >> 16));
    }
    return r;
}

/* two floats rounded to nearest-even 16-bit elements, lo in the low half */
template <bool BF> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
#if !defined(RBEE_GPU_HIP)
    if (BF) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<const uint32_t *>(&v);
    }
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
#else
    if (BF) return (uint32_t)f32_to_bf16(lo) | ((uint32_t)f32_to_bf16(hi) << 16);
    return (uint32_t)f32_to_f16_bits(lo) | ((uint32_t)f32_to_f16_bits(hi) << 16);
#endif
}

/* ---- 16-byte global -> shared copies (asynchronous where possible) ---- */
__device__ __forceinline__ void tile_cp16(void *sdst, const void *gsrc) {
#if defined(RB_TILE_MMA)
    const unsigned s = (unsigned)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gsrc));
#else
    *(uint4 *)sdst = *(const uint4 *)gsrc;
#endif
}

__device__ __forceinline__ void tile_zero16(void *sdst) { *(uint4 *)sdst = make_uint4(0u, 0u, 0u, 0u); }

__device__ __forceinline__ void tile_cp_commit() {
#if defined(RB_TILE_MMA)
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/* waits until at most N committed copy groups are still in flight */
template <int N> __device__ __forceinline__ void tile_cp_wait() {
#if defined(RB_TILE_MMA)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

#if defined(RB_TILE_MMA)
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const uint16_t *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const uint16_t *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* Integer products from zero (the int8 GEMM, matmul/gemm_q8*.cuh): c (16x8
 * s32) = a (16 x 32 s8) b (32 x 8 s8); lane l = 4 g + t holds a's rows g
 * and g + 8 at k = 4t..4t+3 (a[0], a[1]) and 16+4t..16+4t+3 (a[2], a[3]),
 * b's column g at k = 4t.. (b0) and 16+4t.. (b1), and c's rows g (c[0],
 * c[1]) and g + 8 (c[2], c[3]) at columns 2t, 2t + 1. */
__device__ __forceinline__ void mma_s8_k32(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

/* The same over k = 16: a0, a1 = a's rows g, g + 8 at k = 4t..4t+3, b =
 * b's column g at k = 4t..4t+3. */
__device__ __forceinline__ void mma_s8_k16(int c[4], uint32_t a0, uint32_t a1, uint32_t b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%7,%7,%7,%7};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b), "r"(0));
}

/* c (16x8 f32) += a (16x16) * b (16x8) */
template <bool BF> __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if (BF)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

/* s[16][N] = A B^T: A = the warp's 16 rows (sA, row stride LD, K columns),
 * B = N rows of K columns (sB, row stride LD). Overwrites s. */
template <bool BF, int K, int N, int LD>
__device__ __forceinline__ void tile_abt(float s[N / 8][4], const uint16_t *sA, const uint16_t *sB, int lane) {
#pragma unroll
    for (int nt = 0; nt < N / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#if defined(RB_TILE_MMA)
    const int mi = lane >> 3, r8 = lane & 7;
    const uint16_t *pa = sA + ((mi & 1) * 8 + r8) * LD + (mi >> 1) * 8;
    const uint16_t *pb = sB + ((mi >> 1) * 8 + r8) * LD + (mi & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++) {
        uint32_t a[4];
        ldsm_x4(a, pa + kk * 16);
#pragma unroll
        for (int np = 0; np < N / 16; np++) {
            uint32_t b[4];
            ldsm_x4(b, pb + np * 16 * LD + kk * 16);
            mma16816<BF>(s[2 * np], a, b[0], b[1]);
            mma16816<BF>(s[2 * np + 1], a, b[2], b[3]);
        }
    }
#else
    const int g = lane >> 2, t = lane & 3;
    const uint16_t *a0 = sA + g * LD, *a1 = sA + (g + 8) * LD;
    for (int d = 0; d < K; d += 2) {
        const float2 x0 = unpack2<BF>(*(const uint32_t *)(a0 + d)), x1 = unpack2<BF>(*(const uint32_t *)(a1 + d));
#pragma unroll
        for (int nt = 0; nt < N / 8; nt++) {
            const uint16_t *b0 = sB + (nt * 8 + 2 * t) * LD + d;
            const float2 y0 = unpack2<BF>(*(const uint32_t *)b0), y1 = unpack2<BF>(*(const uint32_t *)(b0 + LD));
            s[nt][0] += x0.x * y0.x + x0.y * y0.y;
            s[nt][1] += x0.x * y1.x + x0.y * y1.y;
            s[nt][2] += x1.x * y0.x + x1.y * y0.y;
            s[nt][3] += x1.x * y1.x + x1.y * y1.y;
        }
    }
#endif
}

/* o[16][N] += P V with P the warp's 16 x K f32 fragment (rounded to the
 * operand type here) and V K rows of N columns (sV, row stride LD). The
 * fallback stages P in sP (the warp's 16 rows, row stride LDP) and syncs the
 * block: every thread must call this, with live = false where its warp has
 * nothing to add. */
template <bool BF, int K, int N, int LD, int LDP>
__device__ __forceinline__ void tile_pv(float o[N / 8][4], const float p[K / 8][4], const uint16_t *sV,
                                        uint16_t *sP, int lane, bool live) {
#if defined(RB_TILE_MMA)
    (void)sP;
    if (!live) return;
    const int mi = lane >> 3, r8 = lane & 7;
    const uint16_t *pv = sV + ((mi & 1) * 8 + r8) * LD + (mi >> 1) * 8;
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++) {
        const uint32_t a[4] = {pack2<BF>(p[2 * kk][0], p[2 * kk][1]), pack2<BF>(p[2 * kk][2], p[2 * kk][3]),
                               pack2<BF>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                               pack2<BF>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < N / 16; dp++) {
            uint32_t b[4];
            ldsm_x4_t(b, pv + kk * 16 * LD + dp * 16);
            mma16816<BF>(o[2 * dp], a, b[0], b[1]);
            mma16816<BF>(o[2 * dp + 1], a, b[2], b[3]);
        }
    }
#else
    const int g = lane >> 2, t = lane & 3;
    uint16_t *p0 = sP + g * LDP, *p1 = sP + (g + 8) * LDP;
    if (live)
#pragma unroll
        for (int nt = 0; nt < K / 8; nt++) {
            *(uint32_t *)(p0 + nt * 8 + 2 * t) = pack2<BF>(p[nt][0], p[nt][1]);
            *(uint32_t *)(p1 + nt * 8 + 2 * t) = pack2<BF>(p[nt][2], p[nt][3]);
        }
    __syncthreads();
    if (!live) return;
    for (int j = 0; j < K; j += 2) {
        const float2 w0 = unpack2<BF>(*(const uint32_t *)(p0 + j)), w1 = unpack2<BF>(*(const uint32_t *)(p1 + j));
#pragma unroll
        for (int nt = 0; nt < N / 8; nt++) {
            const uint16_t *v0 = sV + j * LD + nt * 8 + 2 * t;
            const float2 a = unpack2<BF>(*(const uint32_t *)v0), b = unpack2<BF>(*(const uint32_t *)(v0 + LD));
            o[nt][0] += w0.x * a.x + w0.y * b.x;
            o[nt][1] += w0.x * a.y + w0.y * b.y;
            o[nt][2] += w1.x * a.x + w1.y * b.x;
            o[nt][3] += w1.x * a.y + w1.y * b.y;
        }
    }
#endif
}

} // namespace RB_GPU_NS

#endif

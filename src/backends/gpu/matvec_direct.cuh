/* Direct matrix-vector kernels for decode (M = 1..4 activation rows),
 * included by matvec.cuh. Every 32-lane group (a warp; half or all of an AMD
 * wavefront) works alone on a balanced range of weight rows - no block-wide
 * barrier - and loads weights with plain coalesced 16-byte loads, several
 * per lane issued before any is used. The first loads are issued before
 * waiting on the kernel ahead (programmatic dependent launch, gpu_pdl.h), so
 * weights stream while the activations are being produced.
 *
 * Formats (F::consume_regs computes a float span from registers, F::consume a
 * quantized one from shared memory):
 *  - f32/f16/bf16: a lane loads U = 8 pieces of 16 bytes of the row (4 KiB
 *    per warp), then multiplies them with the f32 activations (read through
 *    L1, where all groups of a multiprocessor find them).
 *  - q4_0, q8_0: ggml blocks (18 and 34 bytes) do not fall on 16-byte
 *    boundaries, but a pair of blocks does on 4 bytes (36 = 9 words, 68 =
 *    17) and four pairs on 16 bytes; a span is up to 64 pairs of a row,
 *    loaded into registers with coalesced uint4 loads and stored into the
 *    group's shared-memory slot. Lane l then takes the 16-element half
 *    h = l & 1 of block s = (l >> 1) & 1 of pairs l / 4, l / 4 + 8, ...: h
 *    and s are fixed per lane, so the word offsets and shifts that decode its
 *    half are computed once, and the int8 activations a warp reads at once
 *    are 512 contiguous bytes. Activations are int8 blocks with an f32 scale
 *    and their sums, produced by k_mv_xquant exactly as the CPU backend
 *    quantizes them (matvec_fmt.cuh), so the integer dot products equal the
 *    CPU's.
 * Needs 16-byte aligned rows, and K a multiple of 256 (quantized) or of 16
 * bytes (float); matvec.cuh falls back to the staged kernel otherwise.
 *
 * Measured on an H100 (bench_gpu ops, 4096 x 11008, M = 1, graph replay,
 * fraction of the copy bandwidth): the staged kernel of matvec.cuh bf16
 * 0.74, q8_0 0.66, q4_0 0.51; these kernels bf16 0.80-0.83, q8_0 0.66, q4_0
 * 0.46-0.48. Tried and dropped: a per-warp cp.async ring of three shared-
 * memory slots for every format (bf16 0.73, q4_0 0.48, model decode 2-5%
 * slower), a lane per block pair for q4_0/q8_0 (64-byte activation stride,
 * L1-bound: q4_0 0.48). Nsight Compute on the float kernel: 72 registers,
 * 23 warps per multiprocessor, 80% of the stall time waiting on loads. */
#ifndef RBEE_GPU_MATVEC_DIRECT_CUH
#define RBEE_GPU_MATVEC_DIRECT_CUH

#include "backends/gpu/gpu_pdl.h"
#include "backends/gpu/matvec_fmt.cuh"

namespace RB_GPU_NS {

#define MVD_THREADS 256
#define MVD_GROUPS (MVD_THREADS / 32) /* 32-lane groups per block */
#define MVD_MAX_M 4

struct mvd_args {
    gt d, a;                  /* destination [N, M, B2, B3], weights [K, N, ...] */
    int64_t r2, r3;           /* broadcast of a's dims 2/3 over the activations' */
    const char *bp;           /* f32 activations (float weights) */
    int64_t bnb1, bnb2, bnb3; /* their byte strides */
    const int8_t *xq;         /* quantized activations [slice][M][K] (quantized weights) */
    const int2 *xs;           /* their records, one per 32 */
    int M;
};

/* The activations of the MT rows of one slice, as the formats read them. */
template <int MT> struct mvd_x {
    const float *f[MT];  /* float weights: f32 rows */
    const int8_t *q[MT]; /* quantized: int8 rows */
    const int2 *r[MT];   /* and their records */
};

/* ---- float weights: span = 4 KiB = 256 pieces of 16 bytes ---- */
template <int DT> struct mvd_float {
    static constexpr int EPU = DT == RB_F32 ? 4 : 8; /* elements per 16 bytes */
    static constexpr int SPAN_BYTES = 4096, SPAN_EL = SPAN_BYTES / 16 * EPU;
    static constexpr bool QUANT = false;
    __device__ static __forceinline__ int64_t row_bytes(int64_t K) { return K * (16 / EPU); }
    __device__ static __forceinline__ int64_t span_bytes(int64_t K, int64_t span) {
        const int64_t rest = row_bytes(K) - span * SPAN_BYTES;
        return rest < SPAN_BYTES ? rest : SPAN_BYTES;
    }
    template <int MT>
    __device__ static __forceinline__ void consume_regs(const uint4 (&v)[(SPAN_BYTES + 511) / 512], int nbytes, int64_t span,
                                                        int lane, const mvd_x<MT> &X, float (&acc)[MT]) {
        const int nu = nbytes >> 4;
        const int64_t e0 = span * SPAN_EL;
#pragma unroll
        for (int j = 0; j < (SPAN_BYTES + 511) / 512; j++) {
            const int u = lane + 32 * j;
            if (u < nu) {
                const uint32_t q[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
                float wv[EPU];
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    if (DT == RB_F32) {
                        wv[t] = __uint_as_float(q[t]);
                    } else if (DT == RB_BF16) {
                        wv[2 * t] = __uint_as_float(q[t] << 16);
                        wv[2 * t + 1] = __uint_as_float(q[t] & 0xffff0000u);
                    } else {
                        wv[2 * t] = f16_bits_to_f32((uint16_t)(q[t] & 0xffffu));
                        wv[2 * t + 1] = f16_bits_to_f32((uint16_t)(q[t] >> 16));
                    }
                }
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const float4 *x = (const float4 *)(X.f[m] + e0 + (int64_t)u * EPU);
                    float s = acc[m];
#pragma unroll
                    for (int t = 0; t < EPU / 4; t++) {
                        const float4 f = x[t];
                        s = fmaf(wv[4 * t], f.x, s);
                        s = fmaf(wv[4 * t + 1], f.y, s);
                        s = fmaf(wv[4 * t + 2], f.z, s);
                        s = fmaf(wv[4 * t + 3], f.w, s);
                    }
                    acc[m] = s;
                }
            }
        }
    }
};

/* ---- q4_0 / q8_0: span = 64 pairs of blocks ---- */

/* The per-lane decoding of a quantized format: the 16 quant bytes of this
 * lane's half as four words q[t] = funnel(W[o + t], W[o + t + 1]) >> sh
 * (q4_0: then >> nib & 0x0F0F0F0F), the scale in bits dsh.. of W[dw]. */
struct mvd_lane {
    int o, sh, dw, dsh, nib;
};

/* q4_0 pair (9 words): block 0 = {d: bytes 0-1, qs: 2-17}, block 1 = {d:
 * 18-19, qs: 20-35}; element e: low nibble of qs[e] (e < 16), high nibble of
 * qs[e - 16]. */
struct mvd_q4_0_fmt {
    static constexpr int PAIR_WORDS = 9;
    static constexpr bool OFFSET8 = true; /* value = nibble - 8 */
    __device__ static __forceinline__ mvd_lane lane_of(int s, int h) {
        return mvd_lane{s ? 5 : 0, s ? 0 : 16, s ? 4 : 0, s ? 16 : 0, h ? 4 : 0};
    }
};

/* q8_0 pair (17 words): block 0 = {d: bytes 0-1, qs: 2-33}, block 1 = {d:
 * 34-35, qs: 36-67}. */
struct mvd_q8_0_fmt {
    static constexpr int PAIR_WORDS = 17;
    static constexpr bool OFFSET8 = false;
    __device__ static __forceinline__ mvd_lane lane_of(int s, int h) {
        return mvd_lane{s ? 9 + 4 * h : 4 * h, s ? 0 : 16, s ? 8 : 0, s ? 16 : 0, 0};
    }
};

template <class Q> struct mvd_quant {
    static constexpr int SPAN_PAIRS = 64, SPAN_BYTES = SPAN_PAIRS * Q::PAIR_WORDS * 4;
    static constexpr bool QUANT = true;
    __device__ static __forceinline__ int64_t row_bytes(int64_t K) { return K / 64 * (Q::PAIR_WORDS * 4); }
    __device__ static __forceinline__ int64_t span_bytes(int64_t K, int64_t span) {
        const int64_t rest = row_bytes(K) - span * SPAN_BYTES;
        return rest < SPAN_BYTES ? rest : SPAN_BYTES;
    }
    template <int MT>
    __device__ static __forceinline__ void consume(const uint4 *sp, int nbytes, int64_t span, int lane,
                                                   const mvd_x<MT> &X, float (&acc)[MT]) {
        const int np = nbytes / (Q::PAIR_WORDS * 4);
        const int h = lane & 1, s = (lane >> 1) & 1, pl = lane >> 2;
        const mvd_lane L = Q::lane_of(s, h);
        const uint32_t *W0 = (const uint32_t *)sp + pl * Q::PAIR_WORDS;
        /* block index in the row of this lane's half in pair group j: 2 (8 j + pl) + s */
        const int64_t blk0 = span * (2 * SPAN_PAIRS) + 2 * pl + s;
#pragma unroll
        for (int j = 0; j < SPAN_PAIRS / 8; j++) {
            if (8 * j + pl < np) {
                const uint32_t *W = W0 + 8 * j * Q::PAIR_WORDS;
                uint32_t w[5];
#pragma unroll
                for (int t = 0; t < 5; t++) w[t] = W[L.o + t];
                int q[4];
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    const uint32_t v = (uint32_t)(((uint64_t)w[t + 1] << 32 | w[t]) >> L.sh);
                    q[t] = Q::OFFSET8 ? (int)((v >> L.nib) & 0x0F0F0F0Fu) : (int)v;
                }
                const float dwt = f16_bits_to_f32((uint16_t)(W[L.dw] >> L.dsh));
                const int64_t blk = blk0 + 16 * j;
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const int4 x = *(const int4 *)(X.q[m] + blk * 32 + 16 * h);
                    const int2 r = X.r[m][blk];
                    int si = Q::OFFSET8 ? -8 * (h ? mv_xs_hi(r) : mv_xs_lo(r)) : 0;
                    si = mv_dp4a(q[0], x.x, si);
                    si = mv_dp4a(q[1], x.y, si);
                    si = mv_dp4a(q[2], x.z, si);
                    si = mv_dp4a(q[3], x.w, si);
                    acc[m] = fmaf(dwt * mv_xd(r), (float)si, acc[m]);
                }
            }
        }
    }
};

/* rows [lo, hi) of group g of G (balanced) */
__device__ __forceinline__ void mvd_rows(int64_t N, int64_t g, int64_t G, int64_t *lo, int64_t *hi) {
    *lo = N * g / G;
    *hi = N * (g + 1) / G;
}

/* One kernel for every format: a group's work is its rows, each walked in
 * spans of F::SPAN_BYTES; a lane holds UL = SPAN_BYTES / 512 pieces of a span
 * in registers (loaded before any is used). Quantized spans go through the
 * group's shared-memory slot (pairs are not 16-byte aligned per lane); float
 * spans are used from registers. */
template <class F, int MT> __global__ void __launch_bounds__(MVD_THREADS) k_mvd(const mvd_args p) {
    rb_grid_dep_trigger();
    extern __shared__ int4 mvd_slot_mem[];
    constexpr int UL = (F::SPAN_BYTES + 511) / 512; /* uint4 per lane per full span */
    constexpr int SLOT_U = F::SPAN_BYTES / 16 + 1;
    const int lane = threadIdx.x & 31, gi = threadIdx.x >> 5;
    uint4 *slot = (uint4 *)mvd_slot_mem + gi * SLOT_U;
    const int64_t G = (int64_t)gridDim.x * MVD_GROUPS, g = (int64_t)blockIdx.x * MVD_GROUPS + gi;
    const int64_t N = p.a.ne[1], K = p.a.ne[0];
    const int64_t nsp = (F::row_bytes(K) + F::SPAN_BYTES - 1) / F::SPAN_BYTES; /* spans per row */
    const int64_t sl = blockIdx.y, i2 = sl % p.d.ne[2], i3 = sl / p.d.ne[2];
    const char *ab = p.a.p + (i2 / p.r2) * p.a.nb[2] + (i3 / p.r3) * p.a.nb[3];
    int64_t lo, hi;
    mvd_rows(N, g, G, &lo, &hi);

    uint4 v[UL];
    auto load = [&](int64_t r, int64_t span) {
        const int nu = (int)(F::span_bytes(K, span) >> 4);
        const uint4 *src = (const uint4 *)(ab + r * p.a.nb[1] + span * F::SPAN_BYTES);
#pragma unroll
        for (int j = 0; j < UL; j++) {
            const int u = lane + 32 * j;
            v[j] = u < nu ? RB_LD_STREAM(src + u) : make_uint4(0u, 0u, 0u, 0u);
        }
    };
    if (lo < hi) load(lo, 0);
    rb_grid_dep_wait(); /* activations come from the kernel before */

    mvd_x<MT> X;
#pragma unroll
    for (int m = 0; m < MT; m++) {
        const int mm = m < p.M ? m : p.M - 1;
        if constexpr (F::QUANT) {
            const int64_t off = (sl * p.M + mm) * K;
            X.q[m] = p.xq + off;
            X.r[m] = p.xs + (off >> 5);
            X.f[m] = NULL;
        } else {
            X.f[m] = (const float *)(p.bp + i2 * p.bnb2 + i3 * p.bnb3 + mm * p.bnb1);
            X.q[m] = NULL;
            X.r[m] = NULL;
        }
    }
    for (int64_t row = lo; row < hi; row++) {
        float acc[MT];
#pragma unroll
        for (int m = 0; m < MT; m++) acc[m] = 0.0f;
        for (int64_t span = 0; span < nsp; span++) {
            if (row != lo || span != 0) load(row, span);
            const int nbytes = (int)F::span_bytes(K, span);
            if constexpr (F::QUANT) {
                RB_GROUP_SYNC(); /* the previous span's reads of the slot are done */
#pragma unroll
                for (int j = 0; j < UL; j++) {
                    const int u = lane + 32 * j;
                    if (u < (nbytes >> 4)) slot[u] = v[j];
                }
                RB_GROUP_SYNC();
                F::template consume<MT>(slot, nbytes, span, lane, X, acc);
            } else {
                F::template consume_regs<MT>(v, nbytes, span, lane, X, acc);
            }
        }
#pragma unroll
        for (int m = 0; m < MT; m++) {
            float t = acc[m];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) t += MV_XOR32(t, o);
            if (lane == 0 && m < p.M)
                stf(p.d.dt, p.d.p + row * p.d.nb[0] + m * p.d.nb[1] + i2 * p.d.nb[2] + i3 * p.d.nb[3], t);
        }
    }
}

template <class F> static size_t mvd_smem() {
    return F::QUANT ? (size_t)MVD_GROUPS * (F::SPAN_BYTES / 16 + 1) * 16 : 0;
}

} // namespace RB_GPU_NS

#endif

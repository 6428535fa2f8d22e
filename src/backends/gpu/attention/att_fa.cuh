/* Tensor-core attention for the plain case the diffusion networks run
 * (included by ops_attention.cu; CUDA sm_80+ only, the HIP flavour keeps
 * att_tc.cuh): no mask, no causal or window mask, no soft-capping, no
 * sinks, no device positions, 16-bit K/V (f16 or bf16) with contiguous
 * 16-byte aligned rows, D = Dv in {40, 64, 80, 96, 128, 160} (D not a
 * multiple of 16 is padded in shared memory with zero columns, as in
 * att_tc.cuh), any R = Hq / Hkv (row r of a kv head is query r / R of query
 * head g R + r % R). Compared with att_tc.cuh, which serves every case:
 *  - a block of 4 warps takes 128 rows, a warp 32 (two m16 tiles), so each
 *    K or V fragment read from shared memory by ldmatrix feeds four mma
 *    instead of two (D = 160: 64 rows, 16 a warp, as att_tc.cuh);
 *  - Q is multiplied by scale * log2(e) and rounded to the K/V type once, in
 *    shared memory; for D = 64 and 160 the warp's Q fragments stay in
 *    registers for the whole key loop. Scores are then in base-2 units:
 *    p = 2^(s - m), one subtraction and one ex2.approx per element;
 *  - no per-element test except on the last key tile of a range (keys past
 *    its end); every row of the block sees every key;
 *  - an NST-stage cp.async ring (one barrier a tile) over padded shared rows
 *    (row strides of DP + 8 elements: ldmatrix rows land on distinct banks);
 *  - keys per tile (BN), stages and Q in registers chosen per D so that the
 *    sm_90 instantiations use no local memory and two or three blocks fit a
 *    multiprocessor (att_fa_bn, att_fa_stages, att_fa_qreg, att_fa_minb).
 * With nsplit > 1 the keys are split over blockIdx.z in whole tiles and the
 * partial (m, l, acc) rows go to k_att_merge as att_tc.cuh's do (m in
 * natural-log units there). Rows past the query rows compute on zero Q and
 * are not stored. */
#ifndef RBEE_GPU_ATT_FA_CUH
#define RBEE_GPU_ATT_FA_CUH

#if !defined(RBEE_GPU_HIP)

#include "backends/gpu/attention/att_common.cuh"
#include "backends/gpu/mma_tile.cuh"

namespace RB_GPU_NS {

#define ATT_FA_THREADS 128

/* head dims the kernel is instantiated for */
__host__ __device__ constexpr bool att_fa_dim(int64_t D) {
    return D == 40 || D == 64 || D == 80 || D == 96 || D == 128 || D == 160;
}

/* Per head dim, as ptxas (CUDA 13, sm_90) allocates them with no local
 * memory: m16 tiles a warp (MT; the O fragment holds 4 MT DP / 8 floats a
 * thread, the S fragment 4 MT BN / 8), keys a tile (BN), whether the warp's
 * Q fragments stay in registers (2 MT DP / 16 words a thread) or are read
 * from shared memory each tile, and the blocks a multiprocessor the launch
 * bounds ask for (registers: 166 for D = 40 at 3 blocks, 207..248 for the
 * others at 2). D = 160 takes 16 rows a warp (its O alone would be 160
 * registers at 32). */
__host__ __device__ constexpr int att_fa_mt(int D) { return D <= 128 ? 2 : 1; }
__host__ __device__ constexpr int att_fa_bn(int D) { return D <= 80 || D > 128 ? 64 : 32; }
__host__ __device__ constexpr bool att_fa_qreg(int D) { return D == 64 || D == 160; }
__host__ __device__ constexpr int att_fa_minb(int D) { return D == 40 ? 3 : 2; }

/* rows a block takes: 4 warps of 16 MT */
__host__ __device__ constexpr int att_fa_bm(int D) { return 4 * 16 * att_fa_mt(D); }

/* the head dim as the tile products see it: D rounded up to 16 */
__host__ __device__ constexpr int att_fa_dp(int D) { return (D + 15) / 16 * 16; }

/* shared memory of a block with ns stages: Q and ns (K, V) tiles */
__host__ __device__ constexpr size_t att_fa_smem_ns(int D, int ns) {
    return 2 * (size_t)(att_fa_dp(D) + 8) * ((size_t)att_fa_bm(D) + (size_t)2 * ns * att_fa_bn(D));
}

/* three stages where att_fa_minb blocks of them fit the 227 KiB of an sm_90
 * multiprocessor (1 KiB a block reserved), else two */
__host__ __device__ constexpr int att_fa_stages(int D) {
    return (att_fa_smem_ns(D, 3) + 1024) * att_fa_minb(D) <= 227 * 1024 ? 3 : 2;
}

__host__ __device__ constexpr size_t att_fa_smem(int D) { return att_fa_smem_ns(D, att_fa_stages(D)); }

/* Where a thread copies K and V rows: D / 8 16-byte chunks a row, 128 /
 * (D / 8) rows a pass (threads past them idle), BN rows in passes. The
 * global addresses are the thread's first chunk of the split's first key,
 * advanced a tile and a pass at a time; positions are relative to it (int:
 * the host keeps Tk within int range). */
template <int D, int BN, int LD> struct att_fa_copier {
    static constexpr int CPR = D / 8, RP = ATT_FA_THREADS / CPR, NP = (BN + RP - 1) / RP;
    const char *kp, *vp;
    int64_t knb, vnb;
    int r, soff; /* the thread's row within a pass (RP: idle), its chunk's offset in a stage */

    __device__ __forceinline__ void init(const char *kb, const char *vb, int64_t knb_, int64_t vnb_, int64_t lo) {
        const int tid = threadIdx.x, c = tid % CPR;
        r = tid < RP * CPR ? tid / CPR : RP;
        knb = knb_;
        vnb = vnb_;
        kp = kb + (lo + r) * knb + c * 16;
        vp = vb + (lo + r) * vnb + c * 16;
        soff = r * LD + c * 8;
    }

    /* keys j0 .. j0 + BN - 1 past the split's first (j0 a multiple of BN; n
     * keys in the split) into a stage, rows from n on zero */
    __device__ __forceinline__ void load(uint16_t *sk, uint16_t *sv, int j0, int n) const {
        if (r >= RP) return;
        const char *kr = kp + (int64_t)j0 * knb, *vr = vp + (int64_t)j0 * vnb;
        const int64_t ks = (int64_t)RP * knb, vs = (int64_t)RP * vnb;
        uint16_t *dk = sk + soff, *dv = sv + soff;
        int j = j0 + r;
#pragma unroll
        for (int p = 0; p < NP; p++) {
            if (BN % RP != 0 && p * RP + r >= BN) break;
            if (j < n) {
                tile_cp16(dk, kr);
                tile_cp16(dv, vr);
            } else {
                tile_zero16(dk);
                tile_zero16(dv);
            }
            kr += ks;
            vr += vs;
            dk += RP * LD;
            dv += RP * LD;
            j += RP;
        }
    }
};

#if defined(RB_TILE_MMA)
/* 2^x (approximate, flushes denormals; 2^-inf = 0) */
__device__ __forceinline__ float att_fa_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
#endif

/* grid (row tiles of att_fa_bm, Hkv * B, nsplit); q [D,Tq,Hq,B], k/v [D,Tk,Hkv,B], dst [D,Hq,Tq,B] */
template <bool BF, int D>
__global__ void __launch_bounds__(ATT_FA_THREADS, att_fa_minb(D)) k_att_fa(gt dst, gt q, gt k, gt v, att_args a) {
#if defined(RB_TILE_MMA)
    constexpr int MT = att_fa_mt(D), BM = att_fa_bm(D), BN = att_fa_bn(D), DP = att_fa_dp(D), LD = DP + 8,
                  NST = att_fa_stages(D);
    constexpr bool QREG = att_fa_qreg(D);
    constexpr int KT = DP / 16, NT = BN / 8, OT = DP / 8, CQ = DP / 8;
    static_assert(NST >= 2 && BN % 16 == 0 && DP % 16 == 0, "att_fa tiles");
    extern __shared__ __align__(16) unsigned char att_fa_sh[];
    uint16_t *sQ = (uint16_t *)att_fa_sh; /* [BM][LD] */
    uint16_t *sK = sQ + BM * LD;          /* [NST][BN][LD] */
    uint16_t *sV = sK + NST * BN * LD;    /* [NST][BN][LD] */

    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g8 = lane >> 2, t4 = lane & 3;
    const int mi = lane >> 3, r8 = lane & 7;
    const int64_t Tq = q.ne[1], Hq = q.ne[2], Tk = k.ne[1], Hkv = k.ne[2];
    const int64_t R = Hq / Hkv, nrows = Tq * R;
    const int64_t gk = blockIdx.y % Hkv, b = blockIdx.y / Hkv, row0 = (int64_t)blockIdx.x * BM;
    const int split = blockIdx.z;

    /* this split's keys [lo, hi): whole tiles (kchunk is a multiple of BN) */
    int64_t lo = 0, hi = Tk;
    if (a.nsplit > 1) {
        lo = (int64_t)split * a.kchunk;
        if (lo + a.kchunk < hi) hi = lo + a.kchunk;
    }
    const int ntk = hi > lo ? (int)((hi - lo + BN - 1) / BN) : 0;
    const int nk = (int)(hi - lo);
    att_fa_copier<D, BN, LD> cp;
    cp.init(k.p + gk * k.nb[2] + b * k.nb[3], v.p + gk * v.nb[2] + b * v.nb[3], k.nb[1], v.nb[1], lo);

    /* the first NST - 1 tiles on their way (a group each, empty or not) */
#pragma unroll
    for (int s = 0; s < NST - 1; s++) {
        if (s < ntk) cp.load(sK + s * BN * LD, sV + s * BN * LD, s * BN, nk);
        tile_cp_commit();
    }
    /* the padding columns of every stage: zero once (copies never write them) */
    if (DP != D) {
        constexpr int PADC = DP > D ? (DP - D) / 8 : 1;
        for (int e = tid; e < NST * BN * PADC; e += ATT_FA_THREADS) {
            const int r = e / PADC, c = D + (e % PADC) * 8;
            tile_zero16(sK + r * LD + c);
            tile_zero16(sV + r * LD + c);
        }
    }
    /* Q times scale log2(e), rounded to the K/V type, 8 elements a step; zero
     * past the rows and in the padding columns */
    const float qscale = a.scale * 1.4426950408889634f;
    for (int e = tid; e < BM * CQ; e += ATT_FA_THREADS) {
        const int r = e / CQ, c = (e % CQ) * 8;
        const int64_t gr = row0 + r;
        float x[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        if (gr < nrows && c < D) {
            const int64_t i = R == 1 ? gr : gr / R, h = R == 1 ? gk : gk * R + gr % R;
            const char *qr = q.p + i * q.nb[1] + h * q.nb[2] + b * q.nb[3] + c * q.nb[0];
#pragma unroll
            for (int j = 0; j < 8; j++) x[j] = ldf(q.dt, qr + j * q.nb[0]) * qscale;
        }
        *(uint4 *)(sQ + r * LD + c) =
            make_uint4(pack2<BF>(x[0], x[1]), pack2<BF>(x[2], x[3]), pack2<BF>(x[4], x[5]), pack2<BF>(x[6], x[7]));
    }
    __syncthreads();

    /* ldmatrix row addresses: A operands and transposed V (rows (mi & 1) * 8,
     * columns (mi >> 1) * 8), K as B operand (rows (mi >> 1) * 8, columns (mi & 1) * 8) */
    const int offA = ((mi & 1) * 8 + r8) * LD + (mi >> 1) * 8;
    const int offB = ((mi >> 1) * 8 + r8) * LD + (mi & 1) * 8;
    const uint16_t *qw = sQ + w * 16 * MT * LD + offA; /* the warp's first m16 tile; the next 16 rows on */
    uint32_t qf[QREG ? MT : 1][QREG ? KT : 1][4];
    if constexpr (QREG) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int kk = 0; kk < KT; kk++) ldsm_x4(qf[mt][kk], qw + mt * 16 * LD + kk * 16);
    }

    float o[MT][OT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < OT; nt++) o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.0f;
    /* running max (base-2 units) and this thread's part of the sum of rows
     * g8 (index 0) and g8 + 8 (index 1) of each m16 tile */
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    for (int t = 0; t < ntk; t++) {
        tile_cp_wait<NST - 2>(); /* this thread's copies of tile t landed */
        __syncthreads();          /* everyone's did, and tile t - 1's stage is consumed */
        {
            const int tn = t + NST - 1;
            if (tn < ntk) cp.load(sK + (tn % NST) * BN * LD, sV + (tn % NST) * BN * LD, tn * BN, nk);
            tile_cp_commit();
        }
        const uint16_t *tk = sK + (t % NST) * BN * LD, *tv = sV + (t % NST) * BN * LD;

        /* S = Q K^T for the warp's 16 MT rows */
        float s[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KT; kk++) {
            uint32_t qa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                if constexpr (QREG) {
#pragma unroll
                    for (int x = 0; x < 4; x++) qa[mt][x] = qf[mt][kk][x];
                } else {
                    ldsm_x4(qa[mt], qw + mt * 16 * LD + kk * 16);
                }
            }
#pragma unroll
            for (int np = 0; np < BN / 16; np++) {
                uint32_t bk[4];
                ldsm_x4(bk, tk + offB + np * 16 * LD + kk * 16);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<BF>(s[mt][2 * np], qa[mt], bk[0], bk[1]);
                    mma16816<BF>(s[mt][2 * np + 1], qa[mt], bk[2], bk[3]);
                }
            }
        }
        /* keys past the range: only in the last tile */
        if (t * BN + BN > nk) {
            const int nv = nk - t * BN; /* valid keys of the tile, 1 .. BN - 1 */
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (nt * 8 + 2 * t4 + (e & 1) >= nv)
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) s[mt][nt][e] = -INFINITY;
        }
        /* online softmax of the four rows (every tile has a valid key, so
         * the new max is finite; 2^(-inf - finite) = 0 rescales the first) */
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float xa = -INFINITY, xb = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                xa = fmaxf(xa, fmaxf(s[mt][nt][0], s[mt][nt][1]));
                xb = fmaxf(xb, fmaxf(s[mt][nt][2], s[mt][nt][3]));
            }
            xa = fmaxf(xa, RB_SHFL_XOR32(xa, 1));
            xa = fmaxf(xa, RB_SHFL_XOR32(xa, 2));
            xb = fmaxf(xb, RB_SHFL_XOR32(xb, 1));
            xb = fmaxf(xb, RB_SHFL_XOR32(xb, 2));
            const float na = fmaxf(m[mt][0], xa), nb = fmaxf(m[mt][1], xb);
            const float ca = att_fa_exp2(m[mt][0] - na), cb = att_fa_exp2(m[mt][1] - nb);
            m[mt][0] = na;
            m[mt][1] = nb;
            float sa = 0.0f, sb = 0.0f;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                s[mt][nt][0] = att_fa_exp2(s[mt][nt][0] - na);
                s[mt][nt][1] = att_fa_exp2(s[mt][nt][1] - na);
                s[mt][nt][2] = att_fa_exp2(s[mt][nt][2] - nb);
                s[mt][nt][3] = att_fa_exp2(s[mt][nt][3] - nb);
                sa += s[mt][nt][0] + s[mt][nt][1];
                sb += s[mt][nt][2] + s[mt][nt][3];
            }
            l[mt][0] = l[mt][0] * ca + sa;
            l[mt][1] = l[mt][1] * cb + sb;
#pragma unroll
            for (int nt = 0; nt < OT; nt++) {
                o[mt][nt][0] *= ca;
                o[mt][nt][1] *= ca;
                o[mt][nt][2] *= cb;
                o[mt][nt][3] *= cb;
            }
        }
        /* O += P V: P rounded to the K/V type as A fragments (the C layout of
         * two adjacent 8-key slices is the A layout of their 16 keys) */
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                pa[mt][0] = pack2<BF>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][1] = pack2<BF>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][2] = pack2<BF>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][3] = pack2<BF>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < DP / 16; dp++) {
                uint32_t bv[4];
                ldsm_x4_t(bv, tv + offA + kk * 16 * LD + dp * 16);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<BF>(o[mt][2 * dp], pa[mt], bv[0], bv[1]);
                    mma16816<BF>(o[mt][2 * dp + 1], pa[mt], bv[2], bv[3]);
                }
            }
        }
    }
    tile_cp_wait<0>(); /* nothing left in flight (the trailing groups are empty) */

    /* the four rows: sums over the quad, then out (or to the split merge) */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            float ls = l[mt][half];
            ls += RB_SHFL_XOR32(ls, 1);
            ls += RB_SHFL_XOR32(ls, 2);
            const int64_t gr = row0 + w * 16 * MT + mt * 16 + half * 8 + g8;
            if (gr >= nrows) continue;
            const int64_t i = R == 1 ? gr : gr / R, h = R == 1 ? gk : gk * R + gr % R;
            if (a.nsplit > 1) {
                float *pp = a.part + (((b * Tq + i) * Hq + h) * a.nsplit + split) * (D + 2);
                if (t4 == 0) {
                    pp[0] = ntk > 0 ? m[mt][half] * 0.6931471805599453f : -INFINITY; /* natural-log units */
                    pp[1] = ls;
                }
#pragma unroll
                for (int nt = 0; nt < D / 8; nt++) {
                    pp[2 + nt * 8 + 2 * t4] = o[mt][nt][2 * half];
                    pp[3 + nt * 8 + 2 * t4] = o[mt][nt][2 * half + 1];
                }
            } else {
                const float inv = ls > 0.0f ? 1.0f / ls : 0.0f;
                char *dr = dst.p + h * dst.nb[1] + i * dst.nb[2] + b * dst.nb[3];
#pragma unroll
                for (int nt = 0; nt < D / 8; nt++) {
                    const int64_t d = nt * 8 + 2 * t4;
                    stf(dst.dt, dr + d * dst.nb[0], o[mt][nt][2 * half] * inv);
                    stf(dst.dt, dr + (d + 1) * dst.nb[0], o[mt][nt][2 * half + 1] * inv);
                }
            }
        }
#elif defined(__CUDA_ARCH__)
    __trap(); /* the host launches this on sm_80+ only */
#endif
}

} // namespace RB_GPU_NS

#endif /* !RBEE_GPU_HIP */

#endif

/* Tensor-core flash attention for prefill (included by ops_attention.cu):
 * 16-bit K/V (f16 or bf16) with contiguous, 16-byte aligned rows and equal
 * head dims D = Dv (a multiple of 8; a D that is not a multiple of 16, as
 * 40, is padded to one in shared memory with zero columns, which add
 * nothing to Q K^T and give output columns that are not stored). A block of 4 warps takes 64 "rows" of one kv head - row
 * r is query r / R of query head g R + r % R (R = Hq / Hkv), so grouped
 * heads share every K/V tile - and walks the keys BN at a time: K and V
 * tiles are copied to shared memory (double-buffered with cp.async on
 * CUDA), each warp computes S = Q K^T for its 16 rows, applies soft-capping,
 * the additive mask and the causal / sliding-window masks (per element only
 * on tiles that straddle a border; tiles no row of the warp sees are
 * skipped, tiles no row of the block sees are never loaded), keeps an online
 * softmax in f32 and adds P V (P rounded to the K/V type). Q is scaled and
 * rounded to the K/V type once, in shared memory. Query positions come from
 * q_pos0 or from the device array q_pos. With nsplit > 1 the key range is
 * split over blockIdx.z and partial (m, l, acc) rows go to the merge kernel.
 * Tile products: mma_tile.cuh (mma.sync on CUDA sm_80+, FMA elsewhere). */
#ifndef RBEE_GPU_ATT_TC_CUH
#define RBEE_GPU_ATT_TC_CUH

#include "backends/gpu/attention/att_common.cuh"
#include "backends/gpu/mma_tile.cuh"

#include <limits.h>

namespace RB_GPU_NS {

#define ATT_TC_BM 64
#define ATT_TC_THREADS 128

/* keys per tile: large head dims take fewer keys so shared memory fits
 * (HIP: one stage plus the P staging tile within 48 KiB, the most a block
 * gets without an opt-in on NVIDIA, where the HIP flavour is tested) */
__host__ __device__ constexpr int att_tc_bn(int D) {
#if RB_TILE_STAGES == 1
    return D <= 64 ? 64 : D <= 128 ? 32 : 8;
#else
    return D <= 128 ? 64 : 32;
#endif
}

/* the head dim as the tile products see it: D rounded up to 16 */
__host__ __device__ constexpr int att_tc_dp(int D) { return (D + 15) / 16 * 16; }

/* dynamic shared memory of k_att_tc<.., D, ..> in bytes */
__host__ __device__ constexpr size_t att_tc_smem(int D) {
    return 2 * ((size_t)ATT_TC_BM * (att_tc_dp(D) + 8) +
                (size_t)2 * RB_TILE_STAGES * att_tc_bn(D) * (att_tc_dp(D) + 8) +
                (RB_TILE_STAGES == 1 ? (size_t)ATT_TC_BM * (att_tc_bn(D) + 8) : 0));
}

/* Copies keys j0 .. j0 + BN - 1 (zeros from hi on) of K and V into shared. */
template <int D, int BN, int LD>
__device__ __forceinline__ void att_tc_load(uint16_t *sk, uint16_t *sv, const char *kb, const char *vb, int64_t knb,
                                            int64_t vnb, int64_t j0, int64_t hi) {
    constexpr int CPR = D / 8; /* 16-byte chunks per row */
    for (int e = threadIdx.x; e < BN * CPR; e += ATT_TC_THREADS) {
        const int r = e / CPR, c = e % CPR;
        const int64_t j = j0 + r;
        uint16_t *dk = sk + r * LD + c * 8, *dv = sv + r * LD + c * 8;
        if (j < hi) {
            tile_cp16(dk, kb + j * knb + c * 16);
            tile_cp16(dv, vb + j * vnb + c * 16);
        } else {
            tile_zero16(dk);
            tile_zero16(dv);
        }
    }
}

__device__ __forceinline__ int min32(int v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
        const int o = RB_SHFL_XOR32(v, m);
        v = o < v ? o : v;
    }
    return v;
}

__device__ __forceinline__ int max32(int v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
        const int o = RB_SHFL_XOR32(v, m);
        v = o > v ? o : v;
    }
    return v;
}

/* grid (row tiles, Hkv * B, nsplit); q [D,Tq,Hq,B], k/v [D,Tk,Hkv,B] */
template <bool BF, int D>
__global__ void __launch_bounds__(ATT_TC_THREADS) k_att_tc(gt dst, gt q, gt k, gt v, gt mask, att_args a) {
#if !defined(RBEE_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap(); /* the host launches this on sm_80+ only */
#else
    constexpr int BM = ATT_TC_BM, BN = att_tc_bn(D), DP = att_tc_dp(D), LD = DP + 8, LDP = BN + 8,
                  NST = RB_TILE_STAGES;
    extern __shared__ __align__(16) unsigned char att_tc_sh[];
    uint16_t *sQ = (uint16_t *)att_tc_sh;
    uint16_t *sK = sQ + BM * LD;        /* [NST][BN][LD] */
    uint16_t *sV = sK + NST * BN * LD;  /* [NST][BN][LD] */
    uint16_t *sP = sV + NST * BN * LD;  /* fallback: [BM][LDP] */
    __shared__ int s_pos[BM];
    __shared__ int s_rng[2];

    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g8 = lane >> 2, t4 = lane & 3;
    const int64_t Tq = q.ne[1], Hq = q.ne[2], Tk = k.ne[1], Hkv = k.ne[2];
    const int64_t R = Hq / Hkv, nrows = Tq * R;
    const int64_t ntile = (nrows + BM - 1) / BM;
    const int64_t tile = a.causal ? ntile - 1 - (int64_t)blockIdx.x : (int64_t)blockIdx.x; /* long tiles first */
    const int64_t gk = blockIdx.y % Hkv, b = blockIdx.y / Hkv, row0 = tile * BM;
    const int split = blockIdx.z;

    /* the padding columns of the K and V stages: zero once (loads never write them) */
    constexpr int PADC = DP > D ? (DP - D) / 8 : 1; /* 16-byte pieces of padding a row */
    if (DP != D)
        for (int e = tid; e < NST * BN * PADC; e += ATT_TC_THREADS) {
            const int r = e / PADC, c = D + (e % PADC) * 8;
            tile_zero16(sK + r * LD + c);
            tile_zero16(sV + r * LD + c);
        }
    /* positions of the block's rows, and Q scaled into shared (zero padding columns) */
    if (tid < BM) s_pos[tid] = row0 + tid < nrows ? att_pos(a, (row0 + tid) / R, b) : 0;
    for (int e = tid; e < BM * (DP / 2); e += ATT_TC_THREADS) {
        const int r = e / (DP / 2), d = (e % (DP / 2)) * 2;
        const int64_t gr = row0 + r;
        float x0 = 0.0f, x1 = 0.0f;
        if (gr < nrows && d < D) {
            const int64_t i = gr / R, h = gk * R + gr % R;
            const char *qr = q.p + i * q.nb[1] + h * q.nb[2] + b * q.nb[3];
            x0 = ldf(q.dt, qr + d * q.nb[0]) * a.scale;
            x1 = ldf(q.dt, qr + (d + 1) * q.nb[0]) * a.scale;
        }
        *(uint32_t *)(sQ + r * LD + d) = pack2<BF>(x0, x1);
    }
    __syncthreads();
    if (w == 0) {
        int mn = INT_MAX, mx = INT_MIN;
        for (int r = lane; r < BM; r += 32)
            if (row0 + r < nrows) {
                mn = s_pos[r] < mn ? s_pos[r] : mn;
                mx = s_pos[r] > mx ? s_pos[r] : mx;
            }
        mn = min32(mn);
        mx = max32(mx);
        if (lane == 0) {
            s_rng[0] = mn;
            s_rng[1] = mx;
        }
    }
    /* this thread's two rows */
    const int ra = w * 16 + g8, rb = ra + 8;
    const bool va = row0 + ra < nrows, vb = row0 + rb < nrows;
    const int pa = s_pos[ra], pb = s_pos[rb];
    __syncthreads();
    const int bmin = s_rng[0], bmax = s_rng[1];
    /* the warp's rows */
    int mn = INT_MAX, mx = INT_MIN;
    if (va) mn = mx = pa;
    if (vb) {
        mn = pb < mn ? pb : mn;
        mx = pb > mx ? pb : mx;
    }
    const int wmin = min32(mn), wmax = max32(mx);
    const bool wany = wmin != INT_MAX, wall = min32(va && vb ? 1 : 0) == 1;

    /* keys the block may see, then this split's share */
    const int64_t kvs = att_kv_slice(a, b); /* -1: no keys */
    int64_t lo = 0, hi = kvs < 0 ? 0 : Tk;
    if (a.window > 0 && (int64_t)bmin - a.window + 1 > lo) lo = (int64_t)bmin - a.window + 1;
    if (a.causal && (int64_t)bmax + 1 < hi) hi = (int64_t)bmax + 1;
    if (a.nsplit > 1) {
        const int64_t s0 = (a.qpos ? 0 : lo) + split * a.kchunk;
        if (s0 > lo) lo = s0;
        if (s0 + a.kchunk < hi) hi = s0 + a.kchunk;
    }
    const int64_t ntk = hi > lo ? (hi - lo + BN - 1) / BN : 0;
    /* keys the warp may see */
    int64_t wlo = lo, whi = hi;
    if (a.window > 0 && (int64_t)wmin - a.window + 1 > wlo) wlo = (int64_t)wmin - a.window + 1;
    if (a.causal && (int64_t)wmax + 1 < whi) whi = (int64_t)wmax + 1;

    const char *kb = k.p + gk * k.nb[2] + (kvs < 0 ? 0 : kvs) * k.nb[3], *vb_ = v.p + gk * v.nb[2] + (kvs < 0 ? 0 : kvs) * v.nb[3];
    const int64_t ia = (row0 + ra) / R, ib = (row0 + rb) / R;
    float o[DP / 8][4];
#pragma unroll
    for (int nt = 0; nt < DP / 8; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;
    const float L2E = 1.4426950408889634f;

    if (NST == 2 && ntk > 0) {
        att_tc_load<D, BN, LD>(sK, sV, kb, vb_, k.nb[1], v.nb[1], lo, hi);
        tile_cp_commit();
    }
    for (int64_t t = 0; t < ntk; t++) {
        const int64_t j0 = lo + t * BN;
        int st = 0;
        if (NST == 2) {
            st = (int)(t & 1);
            if (t + 1 < ntk) {
                att_tc_load<D, BN, LD>(sK + (st ^ 1) * BN * LD, sV + (st ^ 1) * BN * LD, kb, vb_, k.nb[1], v.nb[1],
                                       j0 + BN, hi);
                tile_cp_commit();
                tile_cp_wait<1>();
            } else {
                tile_cp_wait<0>();
            }
        } else {
            __syncthreads(); /* the previous tile is consumed */
            att_tc_load<D, BN, LD>(sK, sV, kb, vb_, k.nb[1], v.nb[1], j0, hi);
        }
        __syncthreads();
        const uint16_t *tk = sK + st * BN * LD, *tv = sV + st * BN * LD;
        const bool live = wany && j0 < whi && j0 + BN > wlo;
        float s[BN / 8][4];
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
        if (live) {
            tile_abt<BF, DP, BN, LD>(s, sQ + w * 16 * LD, tk, lane);
            /* every element visible to every row of the warp: no per-element test */
            const bool full = wall && j0 + BN <= hi && (!a.causal || j0 + BN - 1 <= (int64_t)wmin) &&
                              (a.window <= 0 || j0 > (int64_t)wmax - a.window);
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int64_t j = j0 + nt * 8 + 2 * t4 + (e & 1);
                    float x = s[nt][e];
                    if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
                    if (!full) {
                        const bool vr = e < 2 ? va : vb;
                        const int64_t pr = e < 2 ? pa : pb;
                        if (!vr || j >= hi || (a.causal && j > pr) || (a.window > 0 && pr - j >= a.window))
                            x = -INFINITY;
                    }
                    if (mask.p && x != -INFINITY)
                        x += ldf(mask.dt, mask.p + j * mask.nb[0] + (e < 2 ? ia : ib) * mask.nb[1]);
                    s[nt][e] = x;
                }
            float xa = -INFINITY, xb = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++) {
                xa = fmaxf(xa, fmaxf(s[nt][0], s[nt][1]));
                xb = fmaxf(xb, fmaxf(s[nt][2], s[nt][3]));
            }
            xa = fmaxf(xa, RB_SHFL_XOR32(xa, 1));
            xa = fmaxf(xa, RB_SHFL_XOR32(xa, 2));
            xb = fmaxf(xb, RB_SHFL_XOR32(xb, 1));
            xb = fmaxf(xb, RB_SHFL_XOR32(xb, 2));
            const float na = fmaxf(ma, xa), nb = fmaxf(mb, xb);
            const float ra_ = na == -INFINITY ? 0.0f : na * L2E, rb_ = nb == -INFINITY ? 0.0f : nb * L2E;
            const float ca = exp2f(ma * L2E - ra_), cb = exp2f(mb * L2E - rb_);
            ma = na;
            mb = nb;
            la *= ca;
            lb *= cb;
#pragma unroll
            for (int nt = 0; nt < DP / 8; nt++) {
                o[nt][0] *= ca;
                o[nt][1] *= ca;
                o[nt][2] *= cb;
                o[nt][3] *= cb;
            }
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++) {
                s[nt][0] = exp2f(s[nt][0] * L2E - ra_);
                s[nt][1] = exp2f(s[nt][1] * L2E - ra_);
                s[nt][2] = exp2f(s[nt][2] * L2E - rb_);
                s[nt][3] = exp2f(s[nt][3] * L2E - rb_);
                la += s[nt][0] + s[nt][1];
                lb += s[nt][2] + s[nt][3];
            }
        }
        tile_pv<BF, BN, DP, LD, LDP>(o, s, tv, sP + w * 16 * LDP, lane, live);
        if (NST == 2) __syncthreads(); /* the stage is consumed before it is refilled */
    }
    la += RB_SHFL_XOR32(la, 1);
    la += RB_SHFL_XOR32(la, 2);
    lb += RB_SHFL_XOR32(lb, 1);
    lb += RB_SHFL_XOR32(lb, 2);

    /* write the two rows */
#pragma unroll
    for (int half = 0; half < 2; half++) {
        if (!(half ? vb : va)) continue;
        const int64_t gr = row0 + (half ? rb : ra), i = gr / R, h = gk * R + gr % R;
        const float m = half ? mb : ma, l = half ? lb : la;
        if (a.nsplit > 1) {
            float *pp = a.part + (((b * Tq + i) * Hq + h) * a.nsplit + split) * (D + 2);
            if (t4 == 0) {
                pp[0] = m;
                pp[1] = l;
            }
#pragma unroll
            for (int nt = 0; nt < D / 8; nt++) {
                pp[2 + nt * 8 + 2 * t4] = o[nt][2 * half];
                pp[3 + nt * 8 + 2 * t4] = o[nt][2 * half + 1];
            }
        } else {
            const float inv = att_out_scale(a.sinks, a.sinks_nb, h, m, l);
            char *dr = dst.p + h * dst.nb[1] + i * dst.nb[2] + b * dst.nb[3];
#pragma unroll
            for (int nt = 0; nt < D / 8; nt++) {
                const int64_t d = nt * 8 + 2 * t4;
                stf(dst.dt, dr + d * dst.nb[0], o[nt][2 * half] * inv);
                stf(dst.dt, dr + (d + 1) * dst.nb[0], o[nt][2 * half + 1] * inv);
            }
        }
    }
#endif
}

} // namespace RB_GPU_NS

#endif

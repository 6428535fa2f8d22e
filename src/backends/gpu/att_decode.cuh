/* Attention for few queries over many keys (decode), included by
 * ops_attention.cu: 16-bit K/V (f16 or bf16) with contiguous, 16-byte
 * aligned rows, D = Dv. One warp takes one (query, query head, key split);
 * the warps of a block are the heads of one kv group (or neighbouring
 * splits), so K/V rows fetched by one warp are found in L1 by the others.
 * Scores: each lane owns one key of a chunk of RB_WARP keys and reads its
 * whole row with 16-byte loads (D/8 loads in flight per lane) against the
 * scaled query in shared memory; online softmax over the chunk in f32 as in
 * the generic kernel. Values: the lanes split a row into 16-byte pieces, so
 * RB_WARP / (D/8) rows are read per step, each lane accumulating 8 columns;
 * the pieces of the same columns are summed over lanes at the end. Where
 * registers allow (D <= 128 on 32-wide warps) a chunk's value pieces are
 * requested together with its keys, so a chunk waits on memory once. The key
 * range is split (nsplit, from Tk and the number of rows) and the merge
 * kernel combines the partial results; a split wholly past the query's
 * position (q_pos on the device) writes an empty partial and returns. */
#ifndef RBEE_GPU_ATT_DECODE_CUH
#define RBEE_GPU_ATT_DECODE_CUH

#include "backends/gpu/att_common.cuh"
#include "backends/gpu/mma_tile.cuh"

namespace RB_GPU_NS {

#define ATT_DEC_THREADS 128

/* Task = ((((b Tq + i) Hkv + g) nsplit + split) R + hh); one per warp. */
template <bool BF, int D>
__global__ void __launch_bounds__(ATT_DEC_THREADS) k_att_dec(gt dst, gt q, gt k, gt v, gt mask, att_args a) {
    rb_grid_dep_trigger();
    rb_grid_dep_wait(); /* launched with gpu_pdl_small */
    constexpr int W = RB_WARP, NW = ATT_DEC_THREADS / W, CH = D / 8, KPW = W / CH, NSTEP = (W + KPW - 1) / KPW;
    constexpr int KG = CH <= 16 ? CH : 16;  /* key pieces loaded before use */
    constexpr bool VPRE = NSTEP <= 16;      /* value pieces prefetched with the keys */
    static_assert(CH % KG == 0, "decode kernel: key pieces in whole groups");
    static_assert(D % 8 == 0 && CH <= W, "decode kernel: D must be a multiple of 8 and at most 8 RB_WARP");
    __shared__ __align__(16) float qs_all[NW][D];
    const int lane = threadIdx.x % W, wid = threadIdx.x / W;
    const int64_t Tq = q.ne[1], Hq = q.ne[2], B = q.ne[3], Tk = k.ne[1], Hkv = k.ne[2];
    const int64_t R = Hq / Hkv, ntask = B * Tq * Hq * a.nsplit, task = (int64_t)blockIdx.x * NW + wid;
    const bool alive = task < ntask;
    const int64_t hh = task % R, t2 = task / R, split = t2 % a.nsplit, t3 = t2 / a.nsplit;
    const int64_t gk = t3 % Hkv, t4 = t3 / Hkv, i = t4 % Tq, b = t4 / Tq, h = gk * R + hh;
    int64_t lo = 0, hi = 0;
    if (alive) att_range(a, att_pos64(a, i), Tk, split, &lo, &hi);
    float *qs = qs_all[wid];
    if (hi > lo)
        for (int d = lane; d < D; d += W)
            qs[d] = ldf(q.dt, q.p + d * q.nb[0] + i * q.nb[1] + h * q.nb[2] + b * q.nb[3]) * a.scale;
    __syncthreads();
    if (!alive) return;

    const char *kb = k.p + gk * k.nb[2] + b * k.nb[3], *vb = v.p + gk * v.nb[2] + b * v.nb[3];
    const int c = lane % CH, kk = lane / CH;
    float m = -INFINITY, l = 0.0f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;
    for (int64_t j0 = lo; j0 < hi; j0 += W) {
        const int64_t j = j0 + lane, nk = hi - j0 < W ? hi - j0 : W;
        /* value pieces of this chunk, requested together with the keys */
        uint4 vv[VPRE ? NSTEP : 1];
        if (VPRE)
#pragma unroll
            for (int st = 0; st < NSTEP; st++) {
                const int src = st * KPW + kk;
                vv[st] = kk < KPW && src < nk ? *(const uint4 *)(vb + (j0 + src) * v.nb[1] + c * 16)
                                              : make_uint4(0u, 0u, 0u, 0u);
            }
        float s = -INFINITY;
        if (j < hi) {
            const uint4 *kr = (const uint4 *)(kb + j * k.nb[1]);
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
            for (int c0 = 0; c0 < CH; c0 += KG) {
                uint4 u[KG];
#pragma unroll
                for (int cc = 0; cc < KG; cc++) u[cc] = kr[c0 + cc];
#pragma unroll
                for (int cc = 0; cc < KG; cc++) {
                    const float4 qa = *(const float4 *)(qs + (c0 + cc) * 8), qb = *(const float4 *)(qs + (c0 + cc) * 8 + 4);
                    const float2 f0 = unpack2<BF>(u[cc].x), f1 = unpack2<BF>(u[cc].y), f2 = unpack2<BF>(u[cc].z),
                                 f3 = unpack2<BF>(u[cc].w);
                    s0 = fmaf(qa.x, f0.x, s0);
                    s1 = fmaf(qa.y, f0.y, s1);
                    s0 = fmaf(qa.z, f1.x, s0);
                    s1 = fmaf(qa.w, f1.y, s1);
                    s0 = fmaf(qb.x, f2.x, s0);
                    s1 = fmaf(qb.y, f2.y, s1);
                    s0 = fmaf(qb.z, f3.x, s0);
                    s1 = fmaf(qb.w, f3.y, s1);
                }
            }
            s = s0 + s1;
            if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
            if (mask.p) s += ldf(mask.dt, mask.p + j * mask.nb[0] + i * mask.nb[1]);
        }
        const float cmax = warp_max(s);
        if (cmax == -INFINITY) continue; /* uniform over the warp */
        const float mnew = fmaxf(m, cmax), corr = expf(m - mnew);
        l *= corr;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] *= corr;
        m = mnew;
        const float pj = s == -INFINITY ? 0.0f : expf(s - mnew);
        l += warp_sum(pj);
#pragma unroll
        for (int st = 0; st < NSTEP; st++) {
            const int src = st * KPW + kk; /* key of this chunk whose piece c this lane adds */
            const float wgt = RB_SHFL(pj, src < W ? src : 0);
            uint4 u = make_uint4(0u, 0u, 0u, 0u);
            if (VPRE) u = vv[VPRE ? st : 0];
            else if (kk < KPW && src < nk) u = *(const uint4 *)(vb + (j0 + src) * v.nb[1] + c * 16);
            const float2 f0 = unpack2<BF>(u.x), f1 = unpack2<BF>(u.y), f2 = unpack2<BF>(u.z), f3 = unpack2<BF>(u.w);
            acc[0] = fmaf(wgt, f0.x, acc[0]);
            acc[1] = fmaf(wgt, f0.y, acc[1]);
            acc[2] = fmaf(wgt, f1.x, acc[2]);
            acc[3] = fmaf(wgt, f1.y, acc[3]);
            acc[4] = fmaf(wgt, f2.x, acc[4]);
            acc[5] = fmaf(wgt, f2.y, acc[5]);
            acc[6] = fmaf(wgt, f3.x, acc[6]);
            acc[7] = fmaf(wgt, f3.y, acc[7]);
        }
    }
    /* sum the KPW lanes that hold the same 8 columns */
#pragma unroll
    for (int e = 0; e < 8; e++) {
        float tot = 0.0f;
#pragma unroll
        for (int k2 = 0; k2 < KPW; k2++) tot += RB_SHFL(acc[e], k2 * CH + c);
        acc[e] = tot;
    }
    if (a.nsplit > 1) {
        float *pp = a.part + (((b * Tq + i) * Hq + h) * a.nsplit + split) * (D + 2);
        if (lane == 0) {
            pp[0] = m;
            pp[1] = l;
        }
        if (hi > lo && lane < CH)
#pragma unroll
            for (int e = 0; e < 8; e++) pp[2 + c * 8 + e] = acc[e];
        return;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    if (lane < CH) {
        char *dr = dst.p + h * dst.nb[1] + i * dst.nb[2] + b * dst.nb[3];
#pragma unroll
        for (int e = 0; e < 8; e++) *(float *)(dr + (int64_t)(c * 8 + e) * dst.nb[0]) = acc[e] * inv;
    }
}

} // namespace RB_GPU_NS

#endif

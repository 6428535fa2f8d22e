/* Decode attention in wide blocks, included by ops_attention.cu: the
 * decode kernel's cases (few queries, 16-bit K/V with contiguous 16-byte
 * aligned rows) for head dims 64 and 128, with a block of 512 threads for
 * one query head.
 * Why a second decode kernel: att_decode.cuh's blocks have 4 warps (168
 * registers a thread at D = 128 hold a chunk of 32 keys and values), so at
 * the short contexts of a chat's decode a warp walks 16-32 keys as one
 * chain of dependent instructions, issued alone on its scheduler (7B trace
 * at 33 keys: 2.6 us from the query to the warps' partials). Here a warp
 * step is KPW = RB_WARP / (D / 8) keys, one 16-byte piece of a key row and
 * of its value row a lane, and the row's steps are spread over all 16 warps
 * (wave64: 8) of the block before a row takes a second block, so a warp
 * walks 1-4 steps up to 128 keys (D = 128). Each lane keeps its own online
 * softmax state (m, l, 8 value columns) for the key rows it sees; the
 * states are merged over the lanes of a warp, then over the warps in shared
 * memory, then (rows over ATT_DW_ONE steps a warp) over the row's blocks
 * by the last block to finish (att_split_last, att_decode.cuh). 64 registers a
 * thread at two blocks a multiprocessor, so the product after it keeps a
 * block's place beside it.
 * One query over a KV cache (a.early, rb_attn_params.keys_settled): the
 * position and each warp's first step of rows below it are read before the
 * dependency wait; the new row (at the position) after it.
 * A block takes one query head: the heads of a kv group read its rows from
 * L2 (two heads a block, their query in shared memory: 16 bytes of spills,
 * Llama-3.2-1B q4_0 tg128 1870 against 1976-1985 tok/s with one, and at
 * 4096 keys 16.0 against 15.4 us).
 * A test's rb_gpu_tuning.narrow_decode_att sends these cases to att_decode.cuh. */
#ifndef RBEE_GPU_ATT_DECODE_WIDE_CUH
#define RBEE_GPU_ATT_DECODE_WIDE_CUH

#include "backends/gpu/attention/att_common.cuh"
#include "backends/gpu/attention/att_decode.cuh"

namespace RB_GPU_NS {

#define ATT_DW_THREADS 512
/* A row keeps one block up to ATT_DW_ONE steps a warp; past that it takes
 * a block for every ATT_DW_MINST steps a warp, up to a.nsplit: the blocks'
 * merge (a count on a device counter, the partials read back by the last
 * block) costs about as much as 4-6 more steps a warp (tgd, 1B q4_0 at 256
 * cached tokens: 1723.8 tok/s with a second block past 4 steps, 1843.3 with
 * one block up to 8; at 768 1723.5 / 1752.3; 7B within 1%) */
#define ATT_DW_ONE 8
#define ATT_DW_MINST 1

/* Blocks a row of nst steps takes with nw warps a block (before the
 * launch's cap a.nsplit): the kernel's choice per row and the host's grid
 * bound (att_dw_run, at the longest row) both come from here. */
__host__ __device__ __forceinline__ int64_t att_dw_blocks(int64_t nst, int64_t nw) {
    return nst <= nw * ATT_DW_ONE ? 1 : (nst + nw * ATT_DW_MINST - 1) / (nw * ATT_DW_MINST);
}
#if defined(RBEE_GPU_HIP) && !defined(RBEE_HIP_NVIDIA)
#define ATT_DW_BOUNDS __launch_bounds__(ATT_DW_THREADS)
#else
#define ATT_DW_BOUNDS __launch_bounds__(ATT_DW_THREADS, 2)
#endif

/* Merges another online softmax state (m2, l2, a2) into (m, l, a). */
__device__ __forceinline__ void att_dw_join(float &m, float &l, float (&a)[8], float m2, float l2,
                                           const float (&a2)[8]) {
    const float mt = fmaxf(m, m2);
    const float c1 = m == -INFINITY ? 0.0f : expf(m - mt), c2 = m2 == -INFINITY ? 0.0f : expf(m2 - mt);
    l = l * c1 + l2 * c2;
#pragma unroll
    for (int e = 0; e < 8; e++) a[e] = a[e] * c1 + a2[e] * c2;
    m = mt;
}

/* blockIdx.x = ((b Tq + i) Hkv + g) R + head of the group; blockIdx.y = key split. */
template <bool BF, int D> __global__ void ATT_DW_BOUNDS k_att_dw(gt dst, gt q, gt k, gt v, gt mask, att_args a) {
    rb_grid_dep_trigger();
    gpu_trace_start(a.trace);
    constexpr int W = RB_WARP, NW = ATT_DW_THREADS / W, CH = D / 8, KPW = W / CH;
    static_assert(D == 64 || D == 128, "wide decode kernel: D = 64 or 128");
    static_assert(W % CH == 0, "wide decode kernel: a warp holds whole key rows");
    __shared__ __align__(16) float acc_sh[NW][D];
    __shared__ float ml_sh[NW][2];
    __shared__ int last_sh;
    const int lane = threadIdx.x % W, wid = threadIdx.x / W, c = lane % CH, kk = lane / CH;
    const int Tq = (int)q.ne[1], Hq = (int)q.ne[2], Tk = (int)k.ne[1], Hkv = (int)k.ne[2], R = Hq / Hkv;
    const unsigned grp = blockIdx.x;
    const int hr = (int)(grp % (unsigned)R);
    unsigned t = grp / (unsigned)R;
    const int gk = (int)(t % (unsigned)Hkv);
    t /= (unsigned)Hkv;
    const int i = (int)(t % (unsigned)Tq), b = (int)(t / (unsigned)Tq), h = gk * R + hr;
    /* this item's keys and values: set by range() (kv_index is read with
     * the position, before the dependency wait only in the early form) */
    int64_t kvs = 0;
    const char *kb = k.p, *vb = v.p;

    /* the keys [lo, hi) the query sees, in steps of KPW; this block's steps
     * [s0, s1); false when the row needs fewer blocks than this one's index */
    int pos = 0, lo = 0, hi = Tk, nbe = 1, s0 = 0, s1 = 0;
    auto range = [&]() {
        kvs = att_kv_slice(a, b); /* -1: no keys */
        kb = k.p + gk * k.nb[2] + (kvs < 0 ? 0 : kvs) * k.nb[3];
        vb = v.p + gk * v.nb[2] + (kvs < 0 ? 0 : kvs) * v.nb[3];
        pos = att_pos(a, i, b);
        if (a.causal && pos + 1 < hi) hi = pos + 1;
        if (a.window > 0 && pos - a.window + 1 > lo) lo = pos - a.window + 1;
        if (kvs < 0) hi = lo;
        const int nst = hi > lo ? (hi - lo + KPW - 1) / KPW : 0;
        nbe = (int)att_dw_blocks(nst, NW);
        if (nbe > a.nsplit) nbe = a.nsplit;
        if (nbe < 1) nbe = 1;
        s0 = (int)((int64_t)nst * blockIdx.y / nbe);
        s1 = (int)((int64_t)nst * (blockIdx.y + 1) / nbe);
        return (int)blockIdx.y < nbe;
    };
    /* piece c of key row lo + st KPW + kk and of its value row, where the
     * row is below `to` (zeros otherwise) */
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    auto load = [&](int st, int to, uint4 &ku, uint4 &vu) {
        const int j = lo + st * KPW + kk;
        const bool in = st < s1 && j < to;
        ku = in ? *(const uint4 *)(kb + (int64_t)j * k.nb[1] + c * 16) : z;
        vu = in ? *(const uint4 *)(vb + (int64_t)j * v.nb[1] + c * 16) : z;
    };
    uint4 ku = z, vu = z;
    if (a.early) { /* the position and the settled rows of the warp's first step before the wait */
        if (!range()) {
            gpu_trace_mark(a.trace, 3);
            return; /* uniform over the block */
        }
        load(s0 + wid, pos, ku, vu);
    }
    rb_grid_dep_wait(); /* launched with gpu_launch_pdl */
    gpu_trace_mark(a.trace, 1);
    if (!a.early && !range()) {
        gpu_trace_mark(a.trace, 3);
        return;
    }
    /* this lane's 8 elements of the query, scaled */
    float qv[8];
    const char *qp = q.p + (int64_t)h * q.nb[2] + (int64_t)i * q.nb[1] + b * q.nb[3];
    if (q.dt == RB_F32 && q.nb[0] == 4 && ((uintptr_t)qp & 15) == 0) { /* two 16-byte loads */
        const float4 x0 = *(const float4 *)(qp + c * 32), x1 = *(const float4 *)(qp + c * 32 + 16);
        const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int e = 0; e < 8; e++) qv[e] = xv[e] * a.scale;
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) qv[e] = ldf(q.dt, qp + (int64_t)(c * 8 + e) * q.nb[0]) * a.scale;
    }
    if (a.early) { /* the new row, where the first step holds it */
        const int j = lo + (s0 + wid) * KPW + kk;
        if (s0 + wid < s1 && j == pos) {
            ku = *(const uint4 *)(kb + (int64_t)j * k.nb[1] + c * 16);
            vu = *(const uint4 *)(vb + (int64_t)j * v.nb[1] + c * 16);
        }
    } else {
        load(s0 + wid, hi, ku, vu);
    }
    gpu_trace_mark_after(a.trace, 4, qv[0]);

    float m = -INFINITY, l = 0.0f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;
    const float4 qa = make_float4(qv[0], qv[1], qv[2], qv[3]), qb = make_float4(qv[4], qv[5], qv[6], qv[7]);
    for (int st = s0 + wid; st < s1; st += NW) { /* uniform over the warp */
        uint4 kn, vn; /* the warp's next step, in flight while this one is used */
        load(st + NW, hi, kn, vn);
        const int j = lo + st * KPW + kk;
        float x0 = 0.0f, x1 = 0.0f;
        att_dot8<BF>(ku, qa, qb, x0, x1);
        float s = x0 + x1;
#pragma unroll
        for (int o = CH / 2; o > 0; o >>= 1) s += RB_SHFL_XOR(s, o); /* the CH lanes of the row */
        if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
        if (j < hi && mask.p) s += ldf(mask.dt, mask.p + (int64_t)j * mask.nb[0] + (int64_t)i * mask.nb[1]);
        if (j < hi && s != -INFINITY) {
            const float mn = fmaxf(m, s), cr = expf(m - mn), pj = expf(s - mn);
            l = fmaf(l, cr, pj);
            const float2 f0 = unpack2<BF>(vu.x), f1 = unpack2<BF>(vu.y), f2 = unpack2<BF>(vu.z), f3 = unpack2<BF>(vu.w);
            const float vf[8] = {f0.x, f0.y, f1.x, f1.y, f2.x, f2.y, f3.x, f3.y};
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] = fmaf(acc[e], cr, pj * vf[e]);
            m = mn;
        }
        ku = kn;
        vu = vn;
    }
    /* the warp's KPW key lanes of each piece c merged (every lane ends with
     * the warp's m and l), then the warps: each scales its state to the
     * block's largest m itself, so the sum over the warps is plain adds (a
     * thread a column taking exp of every warp's m had made the merge ~1 us
     * of the launch's 3.3 at 33 keys, 7B trace) */
#pragma unroll
    for (int o = CH; o < W; o <<= 1) {
        float a2[8];
#pragma unroll
        for (int e = 0; e < 8; e++) a2[e] = RB_SHFL_XOR(acc[e], o);
        const float m2 = RB_SHFL_XOR(m, o), l2 = RB_SHFL_XOR(l, o);
        att_dw_join(m, l, acc, m2, l2, a2);
    }
    if (lane == 0) ml_sh[wid][0] = m;
    gpu_trace_mark_after(a.trace, 2, acc[0]);
    __syncthreads();
    float mt = -INFINITY;
#pragma unroll
    for (int w2 = 0; w2 < NW; w2++) mt = fmaxf(mt, ml_sh[w2][0]);
    const float cs = m == -INFINITY ? 0.0f : expf(m - mt);
    if (kk == 0)
#pragma unroll
        for (int e = 0; e < 8; e++) acc_sh[wid][c * 8 + e] = acc[e] * cs;
    if (lane == 0) ml_sh[wid][1] = l * cs;
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += ATT_DW_THREADS) {
        float lt = 0.0f, at = 0.0f;
#pragma unroll
        for (int w2 = 0; w2 < NW; w2++) {
            lt += ml_sh[w2][1];
            at += acc_sh[w2][d];
        }
        if (nbe == 1) {
            const float o = att_finish(a, h, mt, lt, at);
            *(float *)(dst.p + d * dst.nb[0] + h * dst.nb[1] + i * dst.nb[2] + b * dst.nb[3]) = o;
            if (d == 0) gpu_trace_mark_after(a.trace, 3, o);
        } else {
            att_split_put(a, grp, D, d, mt, lt, at);
        }
    }
    if (nbe == 1) return; /* thread 0 marked its output (3) */
    if (!att_split_last(a, grp, nbe, &last_sh)) {
        gpu_trace_mark(a.trace, 3);
        return;
    }
    for (int d = threadIdx.x; d < D; d += ATT_DW_THREADS)
        *(float *)(dst.p + d * dst.nb[0] + h * dst.nb[1] + i * dst.nb[2] + b * dst.nb[3]) =
            att_split_merge(a, h, a.part + (int64_t)grp * a.nsplit * (D + 2), nbe, D, d);
    gpu_trace_mark(a.trace, 3);
}

} // namespace RB_GPU_NS

#endif

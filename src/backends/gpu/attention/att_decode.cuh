/* Attention for few queries over many keys (decode), included by
 * ops_attention.cu: 16-bit K/V (f16 or bf16) with contiguous, 16-byte
 * aligned rows, D = Dv. Head dims 64 and 128 go to att_decode_wide.cuh
 * (here only when a test asks: rb_gpu_tuning); this kernel takes 80, 96 and 256.
 * A block takes `hb` query heads of one kv group (one query, one batch) and
 * a range of keys; its warps are hb heads x nsub sub-splits, so K/V rows
 * one warp fetches are found in L1 by the other heads' warps, and a short
 * context is spread over the block's warps without another kernel. Each
 * warp walks chunks of RB_WARP keys, online softmax in f32. Keys: a lane
 * owns one key of the chunk and reads its whole row with 16-byte loads
 * against the scaled query in shared memory; or, from 64 keys on where the
 * 16-byte pieces of a row are a power of two (D = 64, 128), the lanes read
 * the keys as they read the values (each load instruction then touches 2
 * rows instead of 32) and add a row's parts across lanes (att_lanes_add).
 * Values: the lanes split a row into 16-byte pieces, RB_WARP / (D/8) rows
 * per step, each lane accumulating 8 columns, summed over lanes at the end; where registers allow (D <= 128 on 32-wide
 * warps) a chunk's value pieces are requested together with its keys.
 * How many blocks a row uses is decided on the device from the keys its
 * query may see (q_pos is read by the kernel, so one launch serves every
 * decode step): at most a.nsplit blocks (blockIdx.y, fixed by Tk for graph
 * replay), each with at least nsub * minch chunks; blocks past that return
 * at once. The warps of a block merge in shared memory; when a row needs
 * one block it writes the output, otherwise each block writes its partial
 * (m, l, acc) and the last block to finish (a per-row-group counter that
 * it resets) merges them - no separate merge kernel.
 * A decode step over a KV cache (one query, rb_attn_params.keys_settled:
 * nothing queued ahead writes the rows below its position) reads the
 * position and each warp's first chunk of those rows before its dependency
 * wait (D = 64, 128): they are in flight while the qkv product ahead ends,
 * and blocks without keys leave at once
 * (where all blocks' chunks would come to many MB, only the first block of
 * each row reads early: a.early == 2).
 * 7B q4_0 tg128 468.9 -> 485.5-487.2 tok/s in one call. The new row is
 * requested beside the query and passed through shared memory (not loaded
 * after the query: a second round trip; 7B q4_0 tg128 +0.7%).
 * Short path (early reads, at most NW KS = 64 keys): a warp-per-32-keys
 * chunk is a chain of ~1100 instructions a warp, issued at 5-8 cycles each
 * by a lone warp (ncu: barrier, wait and
 * instruction-fetch stalls), so at short contexts block 0 of a row spreads
 * the keys over all its warps instead, KS = 16 keys a 32-lane warp (32 a
 * wavefront), a lane per 16-byte piece of a key row as the values are read, for
 * every head of the block; the warps merge in shared memory. 7B q4_0 at 33
 * keys: attention 4.9 -> 3.7 us a layer, tg128 +2-3%. The same path for up
 * to 128 keys (two halves of 16 keys a warp) spilled 80-104 bytes at D =
 * 128 and made 7B q4_0 ~1% slower at every length (run 19). */
#ifndef RBEE_GPU_ATT_DECODE_CUH
#define RBEE_GPU_ATT_DECODE_CUH

#include "backends/gpu/attention/att_common.cuh"
#include "backends/gpu/mma_tile.cuh"

namespace RB_GPU_NS {

/* 4 warps (2 wavefronts): with 168 registers a thread at D = 128, three
 * blocks fit a multiprocessor; 7B q4_0 tg128 453 tok/s against 446 with
 * 256 threads (8 warps, one block a multiprocessor) */
#define ATT_DEC_THREADS 128
/* D = 128: at most 170 registers (three blocks a multiprocessor); unbounded,
 * the first chunk held across the dependency wait (a.early) took 242 */
#define ATT_DEC_MINB128 3
#if defined(RBEE_GPU_HIP) && !defined(RBEE_HIP_NVIDIA)
#define ATT_DEC_BOUNDS(D) __launch_bounds__(ATT_DEC_THREADS)
#else
#define ATT_DEC_BOUNDS(D) __launch_bounds__(ATT_DEC_THREADS, (D) == 128 ? ATT_DEC_MINB128 : 0)
#endif

/* Rows r < 2H of values spread over 2H lanes (lane bits below 2H, c =
 * those bits): each level keeps half the rows (bit h of c picks which) and
 * adds the partner lane's other half, so lane c ends with row c summed over
 * the 2H lanes in pr[0] (2H - 1 shuffles for 2H rows). */
template <int H, int N> __device__ __forceinline__ void att_lanes_add(float (&pr)[N], int c) {
#pragma unroll
    for (int e = 0; e < H; e++) {
        const bool up = (c & H) != 0;
        const float send = up ? pr[e] : pr[e + H], keep = up ? pr[e + H] : pr[e];
        pr[e] = keep + RB_SHFL_XOR(send, H);
    }
    if constexpr (H > 1) att_lanes_add<H / 2>(pr, c);
}

/* The 8 elements of a 16-byte piece u of a 16-bit K row dotted with qa
 * (elements 0-3) and qb (4-7), added to two partial sums (even and odd
 * elements). */
template <bool BF> __device__ __forceinline__ void att_dot8(uint4 u, float4 qa, float4 qb, float &s0, float &s1) {
    const float2 f0 = unpack2<BF>(u.x), f1 = unpack2<BF>(u.y), f2 = unpack2<BF>(u.z), f3 = unpack2<BF>(u.w);
    s0 = fmaf(qa.x, f0.x, s0);
    s1 = fmaf(qa.y, f0.y, s1);
    s0 = fmaf(qa.z, f1.x, s0);
    s1 = fmaf(qa.w, f1.y, s1);
    s0 = fmaf(qb.x, f2.x, s0);
    s1 = fmaf(qb.y, f2.y, s1);
    s0 = fmaf(qb.z, f3.x, s0);
    s1 = fmaf(qb.w, f3.y, s1);
}

/* acc += w times the 8 elements of a 16-byte piece u of a 16-bit V row. */
template <bool BF> __device__ __forceinline__ void att_axpy8(float w, uint4 u, float (&acc)[8]) {
    const float2 f0 = unpack2<BF>(u.x), f1 = unpack2<BF>(u.y), f2 = unpack2<BF>(u.z), f3 = unpack2<BF>(u.w);
    acc[0] = fmaf(w, f0.x, acc[0]);
    acc[1] = fmaf(w, f0.y, acc[1]);
    acc[2] = fmaf(w, f1.x, acc[2]);
    acc[3] = fmaf(w, f1.y, acc[3]);
    acc[4] = fmaf(w, f2.x, acc[4]);
    acc[5] = fmaf(w, f2.y, acc[5]);
    acc[6] = fmaf(w, f3.x, acc[6]);
    acc[7] = fmaf(w, f3.y, acc[7]);
}

/* Key splits of a decode row (both decode kernels): each of the row's nbe
 * blocks has written its partial (m, l, acc[D]) to a.part; the block's
 * thread 0 counts it on the row group's counter (the barrier orders the
 * block's writes before thread 0's fence, which is cumulative). True in the
 * last block to count, which merges the partials (att_split_merge) and
 * resets the counter for the next launch. Every thread of the block calls;
 * last_sh: an int in shared memory. */
__device__ __forceinline__ bool att_split_last(const att_args &a, unsigned grp, int nbe, int *last_sh) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned prev = atomicAdd(a.cnt + grp, 1u);
        *last_sh = prev == (unsigned)nbe - 1u;
        if (*last_sh) {
            a.cnt[grp] = 0u; /* every block of the row has counted: ready for the next launch */
            __threadfence();
        }
    }
    __syncthreads();
    return *last_sh != 0;
}

/* Column d of this block's partial (m, l, acc) of row `row` of a.part
 * (blockIdx.y: the key split). */
__device__ __forceinline__ void att_split_put(const att_args &a, int64_t row, int D, int d, float m, float l,
                                              float acc) {
    float *pp = a.part + (row * a.nsplit + blockIdx.y) * (D + 2);
    if (d == 0) {
        pp[0] = m;
        pp[1] = l;
    }
    pp[2 + d] = acc;
}

/* Column d of query head h's output from its row's nbe partials at pp
 * (D + 2 floats apart): an online merge with 8 splits' loads in flight at a
 * time, normalised by att_finish (sinks). */
__device__ __forceinline__ float att_split_merge(const att_args &a, int64_t h, const float *pp, int nbe, int D,
                                                 int d) {
    float mt = -INFINITY, lt = 0.0f, at = 0.0f;
    for (int s0 = 0; s0 < nbe; s0 += 8) {
        float ms[8], ls[8], as[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const float *ps = pp + (int64_t)(s0 + u) * (D + 2);
            const bool in = s0 + u < nbe;
            ms[u] = in ? RB_LD_L2(ps) : -INFINITY;
            ls[u] = in ? RB_LD_L2(ps + 1) : 0.0f;
            as[u] = in ? RB_LD_L2(ps + 2 + d) : 0.0f;
        }
        float mb = mt;
#pragma unroll
        for (int u = 0; u < 8; u++) mb = fmaxf(mb, ms[u]);
        if (mb == -INFINITY) continue;
        const float corr = expf(mt - mb); /* 0 while mt is -inf */
        lt *= corr;
        at *= corr;
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const float cs = ms[u] == -INFINITY ? 0.0f : expf(ms[u] - mb);
            lt = fmaf(cs, ls[u], lt);
            at = fmaf(cs, as[u], at);
        }
        mt = mb;
    }
    return att_finish(a, h, mt, lt, at);
}

/* blockIdx.x = ((b Tq + i) Hkv + g) (R / hb) + head chunk; blockIdx.y = key split.
 * Warp w: head hc hb + w % hb of the group, sub-split w / hb (< nsub). */
template <bool BF, int D>
__global__ void ATT_DEC_BOUNDS(D) k_att_dec(gt dst, gt q, gt k, gt v, gt mask, att_args a) {
    rb_grid_dep_trigger();
    gpu_trace_start(a.trace);
    constexpr int W = RB_WARP, NW = ATT_DEC_THREADS / W, CH = D / 8, KPW = W / CH, NSTEP = (W + KPW - 1) / KPW;
    constexpr int KG = CH <= 16 ? CH : 16; /* key pieces loaded before use */
    constexpr bool VPRE = NSTEP <= 16;     /* value pieces prefetched with the keys */
    /* keys read like the values (lane: piece c of key rows st KPW + kk, two
     * rows an instruction at D = 128, where a lane per key row makes each
     * load instruction touch 32 rows) and their CH parts added across lanes,
     * where CH is a power of two equal to NSTEP (D = 64, 128) */
    constexpr bool KCO = VPRE && NSTEP == CH && (CH & (CH - 1)) == 0 && CH * KPW == W;
    /* a chunk's key pieces (either form) and value pieces in one set of
     * registers, so they can be requested before the dependency wait (D <= 128) */
    constexpr bool EARLY = VPRE && KG == CH && NSTEP == CH;
    constexpr int KB = EARLY ? CH : 1, VB = VPRE ? NSTEP : 1; /* a chunk's key and value pieces in registers */
    static_assert(CH % KG == 0, "decode kernel: key pieces in whole groups");
    static_assert(D % 8 == 0 && CH <= W, "decode kernel: D must be a multiple of 8 and at most 8 RB_WARP");
    __shared__ __align__(16) float qs_all[NW][D];
    __shared__ __align__(16) float acc_sh[NW][D];
    __shared__ float ml_sh[NW][2];
    __shared__ int last_sh;
    __shared__ __align__(16) uint4 nrow_sh[2][EARLY ? CH : 1]; /* the new key and value rows (early reads) */
    /* short path (below): KS keys a warp, SH heads at most a block; its
     * warps' partials (m, l, acc) for the merge */
    constexpr int SH = NW / 2 > 1 ? NW / 2 : 1, SNST = D == 128 ? 8 : 4, KS = SNST * KPW;
    static_assert(!EARLY || (SNST <= KB && SNST <= VB), "decode kernel: short path's pieces in kbuf / vbuf");
    __shared__ __align__(16) float sacc_sh[EARLY ? NW : 1][EARLY ? SH : 1][EARLY ? D : 1];
    __shared__ float sml_sh[EARLY ? NW : 1][EARLY ? SH : 1][2];
    const int lane = threadIdx.x % W, wid = threadIdx.x / W;
    const int Tq = (int)q.ne[1], Hq = (int)q.ne[2], Tk = (int)k.ne[1], Hkv = (int)k.ne[2];
    const int R = Hq / Hkv, hb = a.hb, S = a.nsub, nhc = R / hb;
    const unsigned grp = blockIdx.x;
    const int hc = (int)(grp % (unsigned)nhc);
    unsigned t = grp / (unsigned)nhc;
    const int gk = (int)(t % (unsigned)Hkv);
    t /= (unsigned)Hkv;
    const int i = (int)(t % (unsigned)Tq), b = (int)(t / (unsigned)Tq);
    const int hw = wid % hb, sub = wid / hb;
    const bool wlive = sub < S;
    /* this item's keys and values: set by range() (kv_index is read with
     * the position, before the dependency wait only in the early form) */
    int64_t kvs = 0;
    const char *kb = k.p, *vb = v.p;
    const int c = lane % CH, kk = lane / CH;

    /* keys the query may see, in chunks of W; this block's chunks; false
     * when the row needs fewer blocks than this one's index */
    int pos = 0, lo = 0, hi = Tk, nch = 0, nbe = 1, c0 = 0, c1 = 0;
    auto range = [&]() {
        kvs = att_kv_slice(a, b); /* -1: no keys */
        kb = k.p + gk * k.nb[2] + (kvs < 0 ? 0 : kvs) * k.nb[3];
        vb = v.p + gk * v.nb[2] + (kvs < 0 ? 0 : kvs) * v.nb[3];
        pos = att_pos(a, i, b);
        if (a.causal && pos + 1 < hi) hi = pos + 1;
        if (a.window > 0 && pos - a.window + 1 > lo) lo = pos - a.window + 1;
        if (kvs < 0) hi = lo;
        nch = hi > lo ? (hi - lo + W - 1) / W : 0;
        int cpb = (nch + a.nsplit - 1) / a.nsplit;
        if (cpb < S * a.minch) cpb = S * a.minch;
        nbe = nch > 0 ? (nch + cpb - 1) / cpb : 1; /* blocks this row uses */
        c0 = (int)blockIdx.y * cpb;
        c1 = c0 + cpb < nch ? c0 + cpb : nch;
        return (int)blockIdx.y < nbe;
    };
    /* from 64 keys on (bench_gpu attn, H100: 128-4096 keys 14-22% faster;
     * at 1-33 keys the row loads of the other form were ~0.5 us shorter) */
    auto use_kco = [&]() { return KCO && hi - lo >= 64; };
    /* Key pieces (kcp: the keys' coalesced form if kco, else this lane's
     * key row) and value pieces (vp) of the chunk at key j0 (nk of its keys
     * visible): visible rows below `to` are loaded, the others' pieces zeroed
     * (the row at `to` is added by load_row). */
    auto load_chunk = [&](uint4(&kcp)[KB], uint4(&vp)[VB], int j0, int nk, bool kco, int to) {
        if constexpr (EARLY) {
            const uint4 z = make_uint4(0u, 0u, 0u, 0u);
            const int j = j0 + lane;
#pragma unroll
            for (int st = 0; st < NSTEP; st++) { /* NSTEP == CH == KG */
                const int src = st * KPW + kk, row = j0 + src;
                vp[st] = kk < KPW && src < nk && row < to ? *(const uint4 *)(vb + (int64_t)row * v.nb[1] + c * 16) : z;
                /* piece c of row `row`, or piece st of this lane's row j */
                const bool kin = kco ? src < nk && row < to : lane < nk && j < to;
                const char *ka = kco ? kb + (int64_t)row * k.nb[1] + c * 16 : kb + (int64_t)j * k.nb[1] + st * 16;
                kcp[st] = kin ? *(const uint4 *)ka : z;
            }
        }
    };
    /* Row r's pieces (in nrow_sh) into those of the chunk at key j0, where r
     * is in it and visible. */
    auto load_row = [&](uint4(&kcp)[KB], uint4(&vp)[VB], int j0, bool kco, int r) {
        if constexpr (EARLY) {
            const int src = r - j0, st0 = src / KPW;
            if (src < 0 || src >= W || r < lo || r >= hi) return;
            const bool vin = kk == src % KPW; /* this lane holds piece c of row r at st0 */
#pragma unroll
            for (int st = 0; st < NSTEP; st++) {
                if (vin && st == st0) {
                    vp[st] = nrow_sh[1][c];
                    if (kco) kcp[st] = nrow_sh[0][c];
                }
                if (!kco && lane == src) kcp[st] = nrow_sh[0][st];
            }
        }
    };
    /* Early (a.early: one query, its cache's rows below its position written
     * before the ops ahead of this one, rb_attn_params.keys_settled): the
     * position is read, idle blocks leave, and each warp's first chunk's
     * settled rows are requested before the dependency wait, so they arrive
     * while the kernel ahead ends; after the wait the query, then the new
     * row (at the position). (The new row requested with the query was
     * slower: writing it into the chunk's registers waits for their early
     * loads, 7B q4_0 query loaded 1.39 -> 3.10 us after the release.) */
    uint4 kbuf[KB], vbuf[VB];
    bool have = false; /* kbuf / vbuf hold the settled rows of the warp's first chunk */
    auto have_row = [&]() { /* one of the block's early chunks holds the new row (uniform) */
        const int cp = (pos - lo) / W;
        return pos >= lo && pos < hi && cp >= c0 && cp < c1 && cp < c0 + S && (a.early == 1 || blockIdx.y == 0);
    };
    bool shortp = false; /* the short path: the row's keys spread over all warps of block 0 */
    if (EARLY && a.early) {
        if (!range()) {
            gpu_trace_mark(a.trace, 3);
            return; /* uniform over the block */
        }
        shortp = hb <= SH && hi - lo <= NW * KS;
        if (shortp) {
            if (blockIdx.y != 0) {
                gpu_trace_mark(a.trace, 3);
                return; /* block 0 takes the row */
            }
            /* warp wid: keys lo + wid KS + st KPW + kk, piece c, below the position */
#pragma unroll
            for (int st = 0; st < SNST; st++) {
                const int j = lo + wid * KS + st * KPW + kk;
                const bool in = j < pos && j < hi;
                kbuf[st] = in ? *(const uint4 *)(kb + (int64_t)j * k.nb[1] + c * 16) : make_uint4(0u, 0u, 0u, 0u);
                vbuf[st] = in ? *(const uint4 *)(vb + (int64_t)j * v.nb[1] + c * 16) : make_uint4(0u, 0u, 0u, 0u);
            }
        }
        const int ch = c0 + sub;
        if (!shortp && wlive && ch < c1 && (a.early == 1 || blockIdx.y == 0)) {
            const int j0 = lo + ch * W;
            load_chunk(kbuf, vbuf, j0, hi - j0 < W ? hi - j0 : W, use_kco(), pos);
            have = true;
        }
    }
    rb_grid_dep_wait(); /* launched with gpu_launch_pdl */
    gpu_trace_mark(a.trace, 1);
    /* The new row (at the position), where a warp's early chunk holds it:
     * requested now, beside the query, by the block's first 2 CH threads
     * and put in shared memory with the query (load_row reads it there), so
     * it is not a second round trip after the query's (7B q4_0: the warp
     * with the new row had ended the block ~1.7 us after the others). */
    const bool nrow = EARLY && a.early && (shortp || have_row());
    uint4 nrv = make_uint4(0u, 0u, 0u, 0u);
    if (nrow && threadIdx.x < 2 * CH) {
        const char *rb = threadIdx.x < CH ? kb + (int64_t)pos * k.nb[1] : vb + (int64_t)pos * v.nb[1];
        nrv = *(const uint4 *)(rb + (threadIdx.x % CH) * 16);
    }

    /* the block's queries, requested before the position they do not need */
    constexpr int QPT = (D + W - 1) / W; /* hb D <= (blockDim.x / W) D elements */
    float qreg[QPT];
#pragma unroll
    for (int r = 0; r < QPT; r++) {
        const int e = threadIdx.x + r * blockDim.x, hh = e / D, d = e % D, h = gk * R + hc * hb + hh;
        qreg[r] = e < hb * D ? ldf(q.dt, q.p + d * q.nb[0] + i * q.nb[1] + h * q.nb[2] + b * q.nb[3]) : 0.0f;
    }
    if (!(EARLY && a.early) && !range()) {
        gpu_trace_mark(a.trace, 3);
        return; /* uniform over the block */
    }

#pragma unroll
    for (int r = 0; r < QPT; r++) {
        const int e = threadIdx.x + r * blockDim.x;
        if (e < hb * D) qs_all[e / D][e % D] = qreg[r] * a.scale;
    }
    if (nrow && threadIdx.x < 2 * CH) nrow_sh[threadIdx.x / CH][threadIdx.x % CH] = nrv;
    __syncthreads();
    gpu_trace_mark(a.trace, 4);
    if constexpr (EARLY) {
        if (shortp) { /* a row of at most NW KS keys: each warp scores its KS against the block's heads */
#pragma unroll
            for (int st = 0; st < SNST; st++)
                if (lo + wid * KS + st * KPW + kk == pos) { /* the new row, from shared memory */
                    kbuf[st] = nrow_sh[0][c];
                    vbuf[st] = nrow_sh[1][c];
                }
            float sc[SNST][SH];
#pragma unroll
            for (int st = 0; st < SNST; st++) { /* piece c of key kk's row: its part of each score */
                const bool in = lo + wid * KS + st * KPW + kk < hi;
#pragma unroll
                for (int hh = 0; hh < SH; hh++) { /* the query piece from shared memory (registers are short) */
                    const float4 qa = *(const float4 *)&qs_all[hh < hb ? hh : 0][c * 8],
                                 qb = *(const float4 *)&qs_all[hh < hb ? hh : 0][c * 8 + 4];
                    float s0 = 0.0f, s1 = 0.0f;
                    att_dot8<BF>(kbuf[st], qa, qb, s0, s1);
                    float t = s0 + s1;
#pragma unroll
                    for (int o = CH / 2; o > 0; o >>= 1) t += RB_SHFL_XOR(t, o); /* the CH lanes of the row */
                    if (a.softcap > 0.0f) t = a.softcap * tanhf(t / a.softcap);
                    sc[st][hh] = in ? t : -INFINITY;
                }
            }
            float mh[SH], lh[SH], ac[SH][8];
#pragma unroll
            for (int hh = 0; hh < SH; hh++) {
                float mx = -INFINITY;
#pragma unroll
                for (int st = 0; st < SNST; st++) mx = fmaxf(mx, sc[st][hh]);
#pragma unroll
                for (int o = CH; o < W; o <<= 1) mx = fmaxf(mx, RB_SHFL_XOR(mx, o)); /* over the warp's keys */
                mh[hh] = mx;
                lh[hh] = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) ac[hh][e] = 0.0f;
            }
#pragma unroll
            for (int st = 0; st < SNST; st++) /* piece c of key kk's value row, weighted */
#pragma unroll
                for (int hh = 0; hh < SH; hh++) {
                    const float pj = sc[st][hh] == -INFINITY ? 0.0f : expf(sc[st][hh] - mh[hh]);
                    lh[hh] += pj;
                    att_axpy8<BF>(pj, vbuf[st], ac[hh]);
                }
#pragma unroll
            for (int hh = 0; hh < SH; hh++) {
#pragma unroll
                for (int o = CH; o < W; o <<= 1) { /* over the keys kk: lanes c hold columns c 8 .. c 8 + 7 */
                    lh[hh] += RB_SHFL_XOR(lh[hh], o);
#pragma unroll
                    for (int e = 0; e < 8; e++) ac[hh][e] += RB_SHFL_XOR(ac[hh][e], o);
                }
                if (hh < hb && kk == 0) {
#pragma unroll
                    for (int e = 0; e < 8; e++) sacc_sh[wid][hh][c * 8 + e] = ac[hh][e];
                    if (c == 0) {
                        sml_sh[wid][hh][0] = mh[hh];
                        sml_sh[wid][hh][1] = lh[hh];
                    }
                }
            }
            gpu_trace_mark_after(a.trace, 2, ac[0][0]);
            __syncthreads();
            for (int e = threadIdx.x; e < hb * D; e += blockDim.x) { /* the warps' partials of head hh */
                const int hh = e / D, d = e % D, h = gk * R + hc * hb + hh;
                float mt = -INFINITY, lt = 0.0f, at = 0.0f;
#pragma unroll
                for (int w2 = 0; w2 < NW; w2++) mt = fmaxf(mt, sml_sh[w2][hh][0]);
#pragma unroll
                for (int w2 = 0; w2 < NW; w2++) {
                    const float ms = sml_sh[w2][hh][0];
                    const float cs = ms == -INFINITY ? 0.0f : expf(ms - mt);
                    lt = fmaf(cs, sml_sh[w2][hh][1], lt);
                    at = fmaf(cs, sacc_sh[w2][hh][d], at);
                }
                const float o = att_finish(a, h, mt, lt, at);
                *(float *)(dst.p + d * dst.nb[0] + h * dst.nb[1] + i * dst.nb[2] + b * dst.nb[3]) = o;
                if (e == 0) gpu_trace_mark_after(a.trace, 3, o);
            }
            return;
        }
    }

    const float *qs = qs_all[hw];
    float m = -INFINITY, l = 0.0f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;
    const bool kco = use_kco();
    float qc[8]; /* KCO: this lane's piece of the query */
#pragma unroll
    for (int e = 0; e < 8; e++) qc[e] = KCO ? qs[c * 8 + e] : 0.0f;
    /* One chunk: its keys scored against the query, the online softmax, its
     * values added. vc: its value pieces (VPRE), loaded by the caller; kc:
     * its key pieces (either form) where kin (EARLY), otherwise loaded here. */
    auto chunk = [&](int ch, const uint4(&kc)[KB], const uint4(&vc)[VB], bool kin) {
        const int j0 = lo + ch * W, j = j0 + lane, nk = hi - j0 < W ? hi - j0 : W;
        float s = -INFINITY;
        if (KCO && kco) {
            uint4 ku[KCO ? NSTEP : 1];
            float pr[KCO ? NSTEP : 1];
#pragma unroll
            for (int st = 0; st < (KCO ? NSTEP : 1); st++) {
                const int src = st * KPW + kk;
                ku[st] = kin ? kc[KCO ? st : 0]
                       : src < nk ? *(const uint4 *)(kb + (int64_t)(j0 + src) * k.nb[1] + c * 16)
                                  : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int st = 0; st < (KCO ? NSTEP : 1); st++) {
                float s0 = 0.0f, s1 = 0.0f;
                att_dot8<BF>(ku[st], make_float4(qc[0], qc[1], qc[2], qc[3]), make_float4(qc[4], qc[5], qc[6], qc[7]), s0,
                             s1);
                pr[st] = s0 + s1;
            }
            /* the CH lanes of a row add their parts: lane c ends with row st = c */
            if constexpr (KCO) att_lanes_add<NSTEP / 2>(pr, c);
            const int idx = c * KPW + kk; /* this lane's key of the chunk */
            if (idx < nk) {
                s = pr[0];
                if (ch == c0 + sub) gpu_trace_mark_after(a.trace, 5, s);
                if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
                if (mask.p) s += ldf(mask.dt, mask.p + (int64_t)(j0 + idx) * mask.nb[0] + (int64_t)i * mask.nb[1]);
            }
        } else if (j < hi) {
            const uint4 *kr = (const uint4 *)(kb + (int64_t)j * k.nb[1]);
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
            for (int cb = 0; cb < CH; cb += KG) {
                uint4 u[KG];
#pragma unroll
                for (int cc = 0; cc < KG; cc++) u[cc] = EARLY && kin ? kc[EARLY ? cc : 0] : kr[cb + cc]; /* EARLY: CH == KG */
#pragma unroll
                for (int cc = 0; cc < KG; cc++)
                    att_dot8<BF>(u[cc], *(const float4 *)(qs + (cb + cc) * 8), *(const float4 *)(qs + (cb + cc) * 8 + 4), s0,
                                 s1);
            }
            s = s0 + s1;
            if (ch == c0 + sub) gpu_trace_mark_after(a.trace, 5, s);
            if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
            if (mask.p) s += ldf(mask.dt, mask.p + (int64_t)j * mask.nb[0] + (int64_t)i * mask.nb[1]);
        }
        const float cmax = warp_max(s);
        if (cmax == -INFINITY) return; /* uniform over the warp */
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
            const float wgt = RB_SHFL(pj, kco ? kk * CH + st : src < W ? src : 0); /* the lane holding key src */
            uint4 u = make_uint4(0u, 0u, 0u, 0u);
            if (VPRE) u = vc[VPRE ? st : 0];
            else if (kk < KPW && src < nk) u = *(const uint4 *)(vb + (int64_t)(j0 + src) * v.nb[1] + c * 16);
            att_axpy8<BF>(wgt, u, acc);
        }
    };
    int ch = c0 + sub;
    if (EARLY && have) { /* kbuf / vbuf hold the warp's first chunk but its new row */
        load_row(kbuf, vbuf, lo + ch * W, kco, pos);
        chunk(ch, kbuf, vbuf, true);
        ch += S;
    }
    for (; wlive && ch < c1; ch += S) {
        const int j0 = lo + ch * W, nk = hi - j0 < W ? hi - j0 : W;
        uint4 vc[VB]; /* value pieces, requested together with the keys */
        if (VPRE) {
#pragma unroll
            for (int st = 0; st < NSTEP; st++) {
                const int src = st * KPW + kk;
                vc[VPRE ? st : 0] = kk < KPW && src < nk ? *(const uint4 *)(vb + (int64_t)(j0 + src) * v.nb[1] + c * 16)
                                                         : make_uint4(0u, 0u, 0u, 0u);
            }
        }
        chunk(ch, kbuf, vc, false);
    }
    /* sum the KPW lanes that hold the same 8 columns, then merge the block's
     * sub-splits of each head in shared memory */
#pragma unroll
    for (int e = 0; e < 8; e++) {
        float tot = 0.0f;
#pragma unroll
        for (int k2 = 0; k2 < KPW; k2++) tot += RB_SHFL(acc[e], k2 * CH + c);
        acc[e] = tot;
    }
    gpu_trace_mark_after(a.trace, 2, acc[0]); /* thread 0's keys and values are done */
    if (lane < CH)
#pragma unroll
        for (int e = 0; e < 8; e++) acc_sh[wid][c * 8 + e] = acc[e];
    if (lane == 0) {
        ml_sh[wid][0] = wlive ? m : -INFINITY;
        ml_sh[wid][1] = wlive ? l : 0.0f;
    }
    __syncthreads();
    const int64_t grow = (int64_t)grp * hb; /* first of this group's rows in the partials */
    for (int e = threadIdx.x; e < hb * D; e += blockDim.x) {
        const int hh = e / D, d = e % D, h = gk * R + hc * hb + hh;
        float mt = -INFINITY;
        for (int s2 = 0; s2 < S; s2++) mt = fmaxf(mt, ml_sh[s2 * hb + hh][0]);
        float lt = 0.0f, at = 0.0f;
        for (int s2 = 0; s2 < S; s2++) {
            const float ms = ml_sh[s2 * hb + hh][0];
            if (ms == -INFINITY) continue;
            const float cs = expf(ms - mt);
            lt += cs * ml_sh[s2 * hb + hh][1];
            at += cs * acc_sh[s2 * hb + hh][d];
        }
        if (nbe == 1) {
            const float o = att_finish(a, h, mt, lt, at);
            *(float *)(dst.p + d * dst.nb[0] + h * dst.nb[1] + i * dst.nb[2] + b * dst.nb[3]) = o;
            if (e == 0) gpu_trace_mark_after(a.trace, 3, o);
        } else {
            att_split_put(a, grow + hh, D, d, mt, lt, at);
        }
    }
    if (nbe == 1) return; /* thread 0 marked its output (3) */
    if (!att_split_last(a, grp, nbe, &last_sh)) {
        gpu_trace_mark(a.trace, 3);
        return;
    }
    for (int e = threadIdx.x; e < hb * D; e += blockDim.x) {
        const int hh = e / D, d = e % D, h = gk * R + hc * hb + hh;
        *(float *)(dst.p + d * dst.nb[0] + h * dst.nb[1] + i * dst.nb[2] + b * dst.nb[3]) =
            att_split_merge(a, h, a.part + (grow + hh) * a.nsplit * (D + 2), nbe, D, d);
    }
    gpu_trace_mark(a.trace, 3);
}

} // namespace RB_GPU_NS

#endif

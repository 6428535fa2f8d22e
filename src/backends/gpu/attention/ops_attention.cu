/* GPU fused attention: picks one of three kernels and merges key splits.
 *  - Tensor cores (att_tc.cuh) for prefill: 16-bit K/V with aligned rows,
 *    D = Dv in {40, 64, 80, 96, 128, 160, 256}, Tq >= 16 (the image tokens
 *    and text context of the diffusion UNets: heads of 40, 64, 80, 160).
 *    On CUDA the plain case of these - no mask of any kind, no soft-capping,
 *    sinks or device positions, D <= 160: the diffusion networks' self- and
 *    cross-attention - goes to att_fa.cuh, 128 rows a block and Q in
 *    registers (the tuning's no_att_fa keeps it on att_tc.cuh).
 *  - Decode (att_decode.cuh): the same K/V layouts with fewer queries,
 *    D in {64, 80, 96, 128, 256} and an f32 dst; for D = 64 and 128 in wide
 *    blocks (att_decode_wide.cuh).
 *  - Generic (here), exact f32 math for everything else (f32 K/V, any
 *    strides and head dims up to 512): one warp per (query, query head, batch, key
 *    split) walks its keys RB_WARP at a time - each lane scores one key
 *    against the query held in shared memory, the warp keeps a running max
 *    and sum (online softmax), and the lanes accumulate the value rows split
 *    over the head dimension.
 * All three support grouped-query heads, causal and sliding-window masks,
 * q_pos0 or per-query positions on the device (q_pos), an additive mask,
 * soft-capping and attention sinks (att_common.cuh: att_out_scale, applied
 * where a row's output is normalised), and keep memory linear in Tk. When the query rows cannot
 * fill the GPU the keys are split and k_att_merge combines the partial
 * results (the decode kernel merges inside itself); with q_pos the split
 * count depends on Tk only, so one launch serves every decode step (graph
 * replay), and splits past a query's position return at once.
 * A test or benchmark may restrict the choice (rb_gpu_tuning: the generic
 * kernel for everything, att_decode.cuh for head dims 64 and 128 too,
 * att_tc.cuh for the plain prefill case). */
#include "backends/gpu/attention/att_common.cuh"
#include "backends/gpu/attention/att_decode.cuh"
#include "backends/gpu/attention/att_decode_wide.cuh"
#include "backends/gpu/attention/att_fa.cuh"
#include "backends/gpu/attention/att_tc.cuh"

namespace RB_GPU_NS {

#define ATT_THREADS 128
#define ATT_DV_MAX 512 /* the VAE's mid-block attention: one head of 512 */
#define ATT_ACC (ATT_DV_MAX / RB_WARP)

__device__ __forceinline__ float dot_q_k(const float *qs, const gt &k, const char *kr, int64_t D, int kvec) {
    float s = 0.0f;
    if (kvec) {
        for (int64_t d = 0; d < D; d += 8) {
            const uint4 u = *(const uint4 *)(kr + d * 2);
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int t = 0; t < 4; t++) {
                s += qs[d + 2 * t] * f16_bits_to_f32((uint16_t)(w[t] & 0xffffu));
                s += qs[d + 2 * t + 1] * f16_bits_to_f32((uint16_t)(w[t] >> 16));
            }
        }
    } else {
        for (int64_t d = 0; d < D; d++) s += qs[d] * ldf(k.dt, kr + d * k.nb[0]);
    }
    return s;
}

/* q [D,Tq,Hq,B], k [D,Tk,Hkv,B], v [Dv,Tk,Hkv,B], mask [Tk,Tq] or p == NULL;
 * dst [Dv,Hq,Tq,B]. Task = ((b * Tq + i) * Hq + h) * nsplit + split. */
__global__ void __launch_bounds__(ATT_THREADS) k_attention(gt dst, gt q, gt k, gt v, gt mask, att_args a) {
    extern __shared__ float att_sh[];
    const int lane = threadIdx.x % RB_WARP, wid = threadIdx.x / RB_WARP, nw = blockDim.x / RB_WARP;
    const int64_t D = q.ne[0], Tq = q.ne[1], Hq = q.ne[2], B = q.ne[3], Tk = k.ne[1], Hkv = k.ne[2], Dv = v.ne[0];
    const int64_t ntask = Tq * Hq * B * a.nsplit, task = (int64_t)blockIdx.x * nw + wid;
    const bool live = task < ntask;
    const int64_t split = task % a.nsplit, row = task / a.nsplit;
    const int64_t h = row % Hq, i = (row / Hq) % Tq, b = row / (Hq * Tq);
    const int64_t g = h / (Hq / Hkv);
    float *qs = att_sh + (int64_t)wid * D;
    if (live)
        for (int64_t d = lane; d < D; d += RB_WARP)
            qs[d] = ldf(q.dt, q.p + d * q.nb[0] + i * q.nb[1] + h * q.nb[2] + b * q.nb[3]) * a.scale;
    __syncthreads();
    if (!live) return;

    const int64_t pos = att_pos64(a, i, b), kvs = att_kv_slice(a, b);
    int64_t kbeg, kend;
    att_range(a, pos, Tk, split, &kbeg, &kend);
    if (kvs < 0) kend = kbeg; /* kv_index names no slice: no keys */
    const char *kb = k.p + g * k.nb[2] + (kvs < 0 ? 0 : kvs) * k.nb[3];
    const char *vb = v.p + g * v.nb[2] + (kvs < 0 ? 0 : kvs) * v.nb[3];
    float m = -INFINITY, l = 0.0f, acc[ATT_ACC];
#pragma unroll
    for (int t = 0; t < ATT_ACC; t++) acc[t] = 0.0f;

    for (int64_t j0 = kbeg; j0 < kend; j0 += RB_WARP) {
        const int64_t j = j0 + lane;
        float s = -INFINITY;
        if (j < kend && !(a.window > 0 && pos - j >= a.window)) {
            s = dot_q_k(qs, k, kb + j * k.nb[1], D, a.kvec);
            if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
            if (mask.p) s += ldf(mask.dt, mask.p + j * mask.nb[0] + i * mask.nb[1]);
        }
        const float cmax = warp_max(s);
        if (cmax == -INFINITY) continue;
        const float mnew = fmaxf(m, cmax), corr = expf(m - mnew);
        l *= corr;
#pragma unroll
        for (int t = 0; t < ATT_ACC; t++) acc[t] *= corr;
        m = mnew;
        const float pj = s == -INFINITY ? 0.0f : expf(s - mnew);
        l += warp_sum(pj);
        const int64_t nk = kend - j0 < RB_WARP ? kend - j0 : RB_WARP;
        for (int jj = 0; jj < (int)nk; jj++) {
            const float w = RB_SHFL(pj, jj);
            if (w == 0.0f) continue; /* uniform: every lane got the same w */
            const char *vr = vb + (j0 + jj) * v.nb[1];
#pragma unroll
            for (int t = 0; t < ATT_ACC; t++) {
                const int64_t d = lane + (int64_t)t * RB_WARP;
                if (d < Dv) acc[t] += w * ldf(v.dt, vr + d * v.nb[0]);
            }
        }
    }
    if (a.nsplit > 1) {
        float *pp = a.part + task * (Dv + 2);
        if (lane == 0) {
            pp[0] = m;
            pp[1] = l;
        }
#pragma unroll
        for (int t = 0; t < ATT_ACC; t++) {
            const int64_t d = lane + (int64_t)t * RB_WARP;
            if (d < Dv) pp[2 + d] = acc[t];
        }
        return;
    }
    const float inv = att_out_scale(a.sinks, a.sinks_nb, h, m, l);
    char *dr = dst.p + h * dst.nb[1] + i * dst.nb[2] + b * dst.nb[3];
#pragma unroll
    for (int t = 0; t < ATT_ACC; t++) {
        const int64_t d = lane + (int64_t)t * RB_WARP;
        if (d < Dv) stf(dst.dt, dr + d * dst.nb[0], acc[t] * inv);
    }
}

/* Merges the nsplit partial (m, l, acc) of each query row: one block per
 * row; splits that saw no key (m = -inf) are skipped without reading acc. */
#define ATT_MERGE_THREADS 128
#define ATT_SPLIT_MAX 256
__global__ void __launch_bounds__(ATT_MERGE_THREADS)
    k_att_merge(gt dst, const float *part, int nsplit, int64_t nrow, const char *sinks, int64_t sinks_nb) {
    rb_grid_dep_trigger();
    rb_grid_dep_wait(); /* launched with gpu_launch_pdl */
    __shared__ float wsh[ATT_SPLIT_MAX];
    __shared__ float red[32];
    const int64_t Dv = dst.ne[0], Hq = dst.ne[1], Tq = dst.ne[2];
    for (int64_t row = blockIdx.x; row < nrow; row += gridDim.x) {
        const int64_t h = row % Hq, i = (row / Hq) % Tq, b = row / (Hq * Tq);
        const float *pp = part + row * nsplit * (Dv + 2);
        float m = -INFINITY;
        for (int s = threadIdx.x; s < nsplit; s += blockDim.x) m = fmaxf(m, pp[s * (Dv + 2)]);
        m = block_max(m, red);
        float l = 0.0f;
        for (int s = threadIdx.x; s < nsplit; s += blockDim.x) {
            const float ms = pp[s * (Dv + 2)];
            const float c = ms == -INFINITY ? 0.0f : expf(ms - m);
            wsh[s] = c;
            l += c * pp[s * (Dv + 2) + 1];
        }
        l = block_sum(l, red); /* its barriers also publish wsh */
        const float inv = att_out_scale(sinks, sinks_nb, h, m, l);
        char *dr = dst.p + h * dst.nb[1] + i * dst.nb[2] + b * dst.nb[3];
        for (int64_t d = threadIdx.x; d < Dv; d += blockDim.x) {
            float acc = 0.0f;
            for (int s = 0; s < nsplit; s++)
                if (wsh[s] != 0.0f) acc += wsh[s] * pp[s * (Dv + 2) + 2 + d];
            stf(dst.dt, dr + d * dst.nb[0], acc * inv);
        }
        __syncthreads(); /* wsh and red are reused by the next row */
    }
}

enum att_kernel { ATT_GENERIC, ATT_DECODE, ATT_TC, ATT_FA };

/* 16-bit rows the vector kernels can read: contiguous, 16-byte aligned */
static bool att_rows16(const rb_tensor *t) {
    const uintptr_t p = (uintptr_t)((const char *)t->buf->impl + t->offs);
    return (t->dtype == RB_F16 || t->dtype == RB_BF16) && t->nb[0] == 2 && t->ne[0] % 8 == 0 && p % 16 == 0 &&
           t->nb[1] % 16 == 0 && t->nb[2] % 16 == 0 && t->nb[3] % 16 == 0;
}

/* Query heads of a kv group one decode block takes: the largest divisor of
 * R up to half the block's nw warps, so each head has at least two warps
 * for its keys (Llama-3.2-1B, R = 4: 2 heads x 2 warps; all 4 heads with one
 * warp each left short contexts to several blocks, and 256-thread blocks of
 * 4 heads x 2 warps held one block a multiprocessor: 34 against 25 us at
 * 4096 keys). */
static int64_t att_dec_hb(int64_t R, int64_t nw) {
    for (int64_t h = nw / 2 > 1 ? nw / 2 : 1; h > 1; h--)
        if (R % h == 0) return h;
    return 1;
}

static bool att_tc_dim(int64_t D) {
    return D == 40 || D == 64 || D == 80 || D == 96 || D == 128 || D == 160 || D == 256;
}

static bool att_dec_dim(int64_t D) { return D == 64 || D == 80 || D == 96 || D == 128 || D == 256; }

/* the device runs the tensor-core kernel (CUDA: mma.sync needs sm_80) */
static bool att_tc_device(gpu_backend *g) {
#if defined(RBEE_GPU_HIP)
    (void)g;
    return true;
#else
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, g->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return major >= 8;
#endif
}

/* The plain prefill case att_fa.cuh takes (CUDA only): no mask of any
 * kind, no soft-capping, sinks, device positions or kv_index, D <= 160. */
static bool att_fa_ok(const gpu_backend *g, const rb_tensor *q, const rb_attn_params *p) {
#if defined(RBEE_GPU_HIP)
    (void)g;
    (void)q;
    (void)p;
    return false;
#else
    return !g->tune.no_att_fa && att_fa_dim(q->ne[0]) && !p->causal && p->window <= 0 && !p->mask &&
           !(p->softcap > 0.0f) && !p->sinks && !p->q_pos && !p->kv_index;
#endif
}

/* rows a block takes and keys a tile holds in the tensor-core kernels */
static int64_t att_tile_rows(att_kernel kern, int64_t D) {
#if !defined(RBEE_GPU_HIP)
    if (kern == ATT_FA) return att_fa_bm((int)D);
#endif
    (void)kern;
    (void)D;
    return ATT_TC_BM;
}

static int64_t att_tile_keys(att_kernel kern, int64_t D) {
#if !defined(RBEE_GPU_HIP)
    if (kern == ATT_FA) return att_fa_bn((int)D);
#endif
    (void)kern;
    return att_tc_bn((int)D);
}

static att_kernel att_choose(gpu_backend *g, const rb_tensor *dst, const rb_tensor *q, const rb_tensor *k,
                             const rb_tensor *v, const rb_attn_params *p) {
    const int64_t D = q->ne[0], Tq = q->ne[1], Tk = k->ne[1], Dv = v->ne[0];
    if (g->tune.generic_attention) return ATT_GENERIC;
    /* the vector kernels keep positions in int */
    if (Tk > INT_MAX / 2 || p->q_pos0 > INT_MAX / 2 - Tq) return ATT_GENERIC;
    if (D != Dv || !att_tc_dim(D) || k->dtype != v->dtype || !att_rows16(k) || !att_rows16(v))
        return ATT_GENERIC;
    if (Tq >= 16 && att_tc_device(g)) return att_fa_ok(g, q, p) ? ATT_FA : ATT_TC;
    /* the decode kernels store f32 rows of their head dims */
    if (dst->dtype != RB_F32 || !att_dec_dim(D)) return ATT_GENERIC;
    /* the decode kernel's per-row-group counters must cover every group */
    const int64_t nw = ATT_DEC_THREADS / g->warp, R = q->ne[2] / k->ne[2];
    if (!g->att_cnt || q->ne[3] * Tq * k->ne[2] * (R / att_dec_hb(R, nw)) > ATT_DEC_COUNTERS) return ATT_GENERIC;
    return ATT_DECODE;
}

/* Splits keys when the query rows alone cannot fill the GPU: about `want`
 * work items in all, at least `minkeys` keys per split. With q_pos the split
 * count depends on Tk only (fixed launch for graph replay). */
static int att_nsplit(int64_t items, int64_t want, int64_t reach, int64_t minkeys) {
    if (items >= want || reach < 2 * minkeys) return 1;
    int64_t n = (want + items - 1) / items, maxs = reach / minkeys;
    if (n > maxs) n = maxs;
    if (n > ATT_SPLIT_MAX) n = ATT_SPLIT_MAX;
    return n < 1 ? 1 : (int)n;
}

template <bool BF, int D>
static rb_status att_launch_tc(rb_backend *be, dim3 grid, const gt &dst, const gt &q, const gt &k, const gt &v,
                               const gt &mk, const att_args &a) {
    gpu_backend *g = gb(be);
    const size_t smem = att_tc_smem(D);
#if defined(RBEE_GPU_HIP)
    static_assert(att_tc_smem(D) + 512 <= 48 * 1024, "tensor-core attention: HIP tiles exceed 48 KiB");
#else
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k_att_tc<BF, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return gpu_fail(be, e, "attention: shared memory for the tensor-core kernel");
    }
#endif
    k_att_tc<BF, D><<<grid, ATT_TC_THREADS, smem, g->stream>>>(dst, q, k, v, mk, a);
    return gpu_check_launch(be, "attention (tensor cores)");
}

template <bool BF>
static rb_status att_tc_dispatch(rb_backend *be, int64_t D, dim3 grid, const gt &dst, const gt &q, const gt &k,
                                 const gt &v, const gt &mk, const att_args &a) {
    switch (D) {
    case 40: return att_launch_tc<BF, 40>(be, grid, dst, q, k, v, mk, a);
    case 64: return att_launch_tc<BF, 64>(be, grid, dst, q, k, v, mk, a);
    case 80: return att_launch_tc<BF, 80>(be, grid, dst, q, k, v, mk, a);
    case 96: return att_launch_tc<BF, 96>(be, grid, dst, q, k, v, mk, a);
    case 128: return att_launch_tc<BF, 128>(be, grid, dst, q, k, v, mk, a);
    case 160: return att_launch_tc<BF, 160>(be, grid, dst, q, k, v, mk, a);
    default: return att_launch_tc<BF, 256>(be, grid, dst, q, k, v, mk, a);
    }
}

#if !defined(RBEE_GPU_HIP)
template <bool BF, int D>
static rb_status att_launch_fa(rb_backend *be, dim3 grid, const gt &dst, const gt &q, const gt &k, const gt &v,
                               const att_args &a) {
    gpu_backend *g = gb(be);
    const size_t smem = att_fa_smem(D);
    /* all of a multiprocessor's shared memory for att_fa_minb blocks of it */
    cudaError_t e = cudaFuncSetAttribute(k_att_fa<BF, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_att_fa<BF, D>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 (int)cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess) return gpu_fail(be, e, "attention: shared memory for the tensor-core kernel (plain case)");
    k_att_fa<BF, D><<<grid, ATT_FA_THREADS, smem, g->stream>>>(dst, q, k, v, a);
    return gpu_check_launch(be, "attention (tensor cores, plain case)");
}

template <bool BF>
static rb_status att_fa_dispatch(rb_backend *be, int64_t D, dim3 grid, const gt &dst, const gt &q, const gt &k,
                                 const gt &v, const att_args &a) {
    switch (D) {
    case 40: return att_launch_fa<BF, 40>(be, grid, dst, q, k, v, a);
    case 64: return att_launch_fa<BF, 64>(be, grid, dst, q, k, v, a);
    case 80: return att_launch_fa<BF, 80>(be, grid, dst, q, k, v, a);
    case 96: return att_launch_fa<BF, 96>(be, grid, dst, q, k, v, a);
    case 128: return att_launch_fa<BF, 128>(be, grid, dst, q, k, v, a);
    default: return att_launch_fa<BF, 160>(be, grid, dst, q, k, v, a);
    }
}
#endif

template <bool BF>
static rb_status att_dec_dispatch(rb_backend *be, int64_t D, dim3 grid, const gt &dst, const gt &q, const gt &k,
                                  const gt &v, const gt &mk, const att_args &a) {
    gpu_backend *g = gb(be);
    const dim3 blk(ATT_DEC_THREADS);
    switch (D) {
    case 64: (void)gpu_launch_pdl(g, true, k_att_dec<BF, 64>, grid, blk, 0, dst, q, k, v, mk, a); break;
    case 80: (void)gpu_launch_pdl(g, true, k_att_dec<BF, 80>, grid, blk, 0, dst, q, k, v, mk, a); break;
    case 96: (void)gpu_launch_pdl(g, true, k_att_dec<BF, 96>, grid, blk, 0, dst, q, k, v, mk, a); break;
    case 128: (void)gpu_launch_pdl(g, true, k_att_dec<BF, 128>, grid, blk, 0, dst, q, k, v, mk, a); break;
    default: (void)gpu_launch_pdl(g, true, k_att_dec<BF, 256>, grid, blk, 0, dst, q, k, v, mk, a); break;
    }
    return gpu_check_launch(be, "attention (decode)");
}

template <bool BF>
static rb_status att_dw_dispatch(rb_backend *be, int64_t D, dim3 grid, const gt &dst, const gt &q, const gt &k,
                                 const gt &v, const gt &mk, const att_args &a) {
    gpu_backend *g = gb(be);
    const dim3 blk(ATT_DW_THREADS);
    if (D == 64) (void)gpu_launch_pdl(g, true, k_att_dw<BF, 64>, grid, blk, 0, dst, q, k, v, mk, a);
    else (void)gpu_launch_pdl(g, true, k_att_dw<BF, 128>, grid, blk, 0, dst, q, k, v, mk, a);
    return gpu_check_launch(be, "attention (decode, wide)");
}

/* Whether the wide decode kernel (att_decode_wide.cuh) takes a decode case:
 * D = 64 or 128 and a counter for each query row (a test's
 * narrow_decode_att: never). */
static bool att_dw_ok(const gpu_backend *g, const rb_tensor *q) {
    const int64_t D = q->ne[0];
    if ((D != 64 && D != 128) || g->tune.narrow_decode_att) return false;
    return g->att_cnt && q->ne[3] * q->ne[1] * q->ne[2] <= ATT_DEC_COUNTERS;
}

#define ATT_EARLY_BYTES 8e6 /* bytes a decode launch may request before its wait from every block (att_dec_run) */

/* Early reads of a decode launch (att_args.early) may apply: one query over
 * settled rows of a causal cache, no mask. */
static bool att_early_ok(int64_t Tq, const rb_attn_params *p) {
    return Tq == 1 && p->q_pos && p->keys_settled && p->causal && !p->mask;
}

/* The decode kernels' key splits (ns > 1 blocks a row): partials for nrows x
 * ns blocks of D + 2 floats in the scratch, and the row groups' counters. */
static rb_status att_split_scratch(rb_backend *be, int64_t nrows, int64_t ns, int64_t D, att_args *a) {
    if (ns <= 1) return RB_OK;
    void *sp = NULL;
    rb_status s = gpu_scratch(be, (size_t)(nrows * ns * (D + 2)) * sizeof(float), &sp);
    if (s != RB_OK) return s;
    a->part = (float *)sp;
    a->cnt = gb(be)->att_cnt;
    return RB_OK;
}

/* A decode kernel's dispatch on D for one K/V type (att_dec_dispatch, att_dw_dispatch). */
typedef rb_status (*att_dec_fn)(rb_backend *be, int64_t D, dim3 grid, const gt &dst, const gt &q, const gt &k,
                                const gt &v, const gt &mk, const att_args &a);

/* The launch both decode kernels end with: grid (nrg row groups, key
 * splits), its trace slot, the views, and the kernel for the K/V type. */
static rb_status att_dec_launch(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k,
                                const rb_tensor *v, const rb_attn_params *p, att_args a, int64_t nrg, int64_t ns,
                                att_dec_fn f16, att_dec_fn bf16) {
    gt mk = {};
    if (p->mask) mk = gview(p->mask);
    const dim3 grid((unsigned)nrg, (unsigned)ns);
    a.trace = gpu_trace_slot(gb(be), GPU_TRACE_ATTENTION, k->dtype, 0, nrg, k->ne[1], grid.x * grid.y);
    return (k->dtype == RB_BF16 ? bf16 : f16)(be, q->ne[0], grid, gview(dst), gview(q), gview(k), gview(v), mk, a);
}

/* The decode kernel: blocks of hb heads x nsub warps, at most a.nsplit
 * blocks per row group (fixed by Tk: the device picks how many a row uses
 * from its position), merging in the kernel itself (att_decode.cuh). */
static rb_status att_dec_run(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k,
                             const rb_tensor *v, const rb_attn_params *p, att_args a) {
    gpu_backend *g = gb(be);
    const int64_t D = q->ne[0], Tq = q->ne[1], Hq = q->ne[2], B = q->ne[3], Tk = k->ne[1], Hkv = k->ne[2];
    const int64_t nw = ATT_DEC_THREADS / g->warp, R = Hq / Hkv, hb = att_dec_hb(R, nw), S = nw / hb;
    const int64_t ngrp = B * Tq * Hkv * (R / hb);
    /* a row takes another block once each of its warps has a chunk: a second
     * chunk a warp before that (one more dependent load) cost more than the
     * in-kernel merge of blocks (7B shape at 400-511 keys: 16.1-16.3 us
     * against 12.3-13.1; 1B q4_0 tg128 within 1%) */
    const int64_t minch = 1;
    a.hb = (int)hb;
    a.nsub = (int)S;
    a.minch = (int)minch;
    /* blocks for ~12 warps a multiprocessor, each block at least S minch
     * chunks; rounded down, so that no block waits for a second wave (D =
     * 128 fits three blocks a multiprocessor: 7B's 32 rows x 13 splits had
     * been 416 blocks for 396 places) */
    const int64_t maxkeys = p->window > 0 && p->window < Tk ? p->window : Tk;
    const int64_t maxch = (maxkeys + g->warp - 1) / g->warp, want = 12 * (int64_t)g->n_sm / nw;
    int64_t ns = want / ngrp, nsmax = (maxch + S * minch - 1) / (S * minch);
    if (ns > nsmax) ns = nsmax;
    if (ns > 65535) ns = 65535;
    if (ns < 1) ns = 1;
    a.nsplit = (int)ns;
    a.kchunk = 0;
    /* early reads of settled rows (att_decode.cuh): every block's first chunks
     * where they come to at most ATT_EARLY_BYTES over the launch (1B at 4096
     * keys, 3.3 MB: 1300 against 1257 tok/s without), else block 0's of each
     * row only (7B, 32 heads x 13 splits, 27 MB: 313.5 against 303.6 with
     * all, 307.6 without) */
    const double ebytes = (double)ngrp * (double)ns * (double)S * (double)g->warp *
                          (double)(k->nb[0] * D + v->nb[0] * v->ne[0]);
    a.early = att_early_ok(Tq, p) ? (ebytes <= ATT_EARLY_BYTES ? 1 : 2) : 0;
    rb_status s = att_split_scratch(be, ngrp * hb, ns, D, &a);
    if (s != RB_OK) return s;
    return att_dec_launch(be, dst, q, k, v, p, a, ngrp, ns, att_dec_dispatch<false>, att_dec_dispatch<true>);
}

/* The wide decode kernel: a block of 512 threads a query head, at most
 * a.nsplit blocks per row (fixed by Tk: the device picks how many a row uses
 * from its position), merging in the kernel. */
static rb_status att_dw_run(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k,
                            const rb_tensor *v, const rb_attn_params *p, att_args a) {
    gpu_backend *g = gb(be);
    const int64_t D = q->ne[0], Tq = q->ne[1], Hq = q->ne[2], B = q->ne[3], Tk = k->ne[1];
    const int64_t nw = ATT_DW_THREADS / g->warp, kpw = g->warp / (D / 8), rows = B * Tq * Hq;
    /* two blocks a multiprocessor in all, each at least ATT_DW_MINST steps a warp
     * (rows up to ATT_DW_ONE steps a warp keep one block) */
    const int64_t maxkeys = p->window > 0 && p->window < Tk ? p->window : Tk;
    const int64_t maxst = (maxkeys + kpw - 1) / kpw, want = 2 * (int64_t)g->n_sm;
    int64_t ns = want / rows;
    const int64_t nsmax = att_dw_blocks(maxst, nw);
    if (ns > nsmax) ns = nsmax;
    if (ns < 1) ns = 1;
    a.nsplit = (int)ns;
    a.kchunk = 0;
    /* early reads (as att_dec_run), where every block's first steps come to
     * at most ATT_EARLY_BYTES (a step: 32 bytes a thread) */
    a.early = att_early_ok(Tq, p) && (double)rows * (double)ns * (double)ATT_DW_THREADS * 32.0 <= ATT_EARLY_BYTES;
    rb_status s = att_split_scratch(be, rows, ns, D, &a);
    if (s != RB_OK) return s;
    return att_dec_launch(be, dst, q, k, v, p, a, rows, ns, att_dw_dispatch<false>, att_dw_dispatch<true>);
}

rb_status gpu_attention(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k, const rb_tensor *v,
                        const rb_attn_params *p) {
    gpu_backend *g = gb(be);
    const int64_t D = q->ne[0], Tq = q->ne[1], Hq = q->ne[2], B = q->ne[3], Tk = k->ne[1], Hkv = k->ne[2];
    const int64_t Dv = v->ne[0];
    if (Dv > ATT_DV_MAX || D > 512)
        return rb_backend_fail(be, RB_E_UNSUPPORTED,
                               "rb_attention: head dims D = %lld, Dv = %lld exceed the GPU kernel's limits (512, %d)",
                               (long long)D, (long long)Dv, ATT_DV_MAX);
    if (rb_tensor_nelements(dst) == 0) return RB_OK;
    att_args a = {};
    a.scale = p->scale;
    a.softcap = p->softcap;
    a.causal = p->causal ? 1 : 0;
    a.window = p->window;
    a.q_pos0 = p->q_pos0;
    if (p->q_pos) {
        a.qpos = (const char *)p->q_pos->buf->impl + p->q_pos->offs;
        a.qpos_nb = (int64_t)p->q_pos->nb[0];
        a.qpos_nbb = p->q_pos->ne[1] > 1 ? (int64_t)p->q_pos->nb[1] : 0;
    }
    if (p->kv_index) {
        a.kvidx = (const char *)p->kv_index->buf->impl + p->kv_index->offs;
        a.kvidx_nb = (int64_t)p->kv_index->nb[0];
    }
    a.kv_n = k->ne[3];
    if (p->sinks) {
        a.sinks = (const char *)p->sinks->buf->impl + p->sinks->offs;
        a.sinks_nb = (int64_t)p->sinks->nb[0];
    }
    const att_kernel kern = att_choose(g, dst, q, k, v, p);
    if (kern == ATT_DECODE)
        return att_dw_ok(g, q) ? att_dw_run(be, dst, q, k, v, p, a) : att_dec_run(be, dst, q, k, v, p, a);
    const char *kp = (const char *)k->buf->impl + k->offs;
    a.kvec = k->dtype == RB_F16 && k->nb[0] == 2 && D % 8 == 0 && k->nb[1] % 16 == 0 && k->nb[2] % 16 == 0 &&
             k->nb[3] % 16 == 0 && ((uintptr_t)kp % 16) == 0;

    /* keys one query row may see (all of Tk with q_pos: positions unknown here; and without masks) */
    const int64_t rows = Tq * Hq * B;
    int64_t span = Tk;
    if (!p->q_pos && p->window > 0 && p->window < span) span = p->window;
    const int64_t reach = p->q_pos || kern == ATT_FA ? Tk : span + (Tq > 1 ? Tq - 1 : 0);
    int64_t items; /* work items without splitting */
    dim3 grid(1, 1, 1);
    const bool tc = kern == ATT_TC || kern == ATT_FA;
    if (tc) {
        const int64_t bm = att_tile_rows(kern, D), ntile = (Tq * (Hq / Hkv) + bm - 1) / bm;
        items = ntile * Hkv * B;
        /* split only when the tiles cannot give every multiprocessor one: a
         * 512-token 7B prefill (256 tiles) split in two spent 29 us per layer
         * merging, more than the split saved */
        a.nsplit = att_nsplit(items, (int64_t)g->n_sm, reach, 4 * att_tile_keys(kern, D));
        if (ntile > 0x7fffffffLL || Hkv * B > 65535)
            return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_attention: %lld query rows x %lld kv heads are too many",
                                   (long long)(Tq * Hq), (long long)(Hkv * B));
        grid = dim3((unsigned)ntile, (unsigned)(Hkv * B), (unsigned)a.nsplit);
    } else {
        items = rows; /* a warp per row: ~12 per multiprocessor fill it */
        a.nsplit = att_nsplit(items, 12 * (int64_t)g->n_sm, reach, 128);
    }
    if (a.nsplit > 1) { /* whole key tiles / warp chunks per split */
        const int64_t al = tc ? att_tile_keys(kern, D) : 32;
        a.kchunk = ((reach + a.nsplit - 1) / a.nsplit + al - 1) / al * al;
        a.nsplit = (int)((reach + a.kchunk - 1) / a.kchunk);
        if (tc) grid.z = (unsigned)a.nsplit;
    }
    if (a.nsplit <= 1) a.kchunk = Tk > 0 ? Tk : 1;
    if (a.nsplit > 1) {
        void *sp = NULL;
        rb_status s = gpu_scratch(be, (size_t)(rows * a.nsplit * (Dv + 2)) * sizeof(float), &sp);
        if (s != RB_OK) return s;
        a.part = (float *)sp;
    }
    gt mk = {};
    if (p->mask) mk = gview(p->mask);
    const gt gd = gview(dst), gq = gview(q), gk_ = gview(k), gv = gview(v);
    const bool bf = k->dtype == RB_BF16;
    rb_status s;
    if (kern == ATT_FA) {
#if !defined(RBEE_GPU_HIP)
        s = bf ? att_fa_dispatch<true>(be, D, grid, gd, gq, gk_, gv, a)
               : att_fa_dispatch<false>(be, D, grid, gd, gq, gk_, gv, a);
#else
        s = RB_E_UNSUPPORTED; /* never chosen (att_fa_ok) */
#endif
    } else if (kern == ATT_TC) {
        s = bf ? att_tc_dispatch<true>(be, D, grid, gd, gq, gk_, gv, mk, a)
               : att_tc_dispatch<false>(be, D, grid, gd, gq, gk_, gv, mk, a);
    } else {
        const int nw = ATT_THREADS / g->warp;
        const int64_t blocks = (rows * a.nsplit + nw - 1) / nw;
        if (blocks > 0x7fffffffLL)
            return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_attention: %lld query rows are too many", (long long)rows);
        k_attention<<<(unsigned)blocks, ATT_THREADS, (size_t)nw * (size_t)D * sizeof(float), g->stream>>>(
            gd, gq, gk_, gv, mk, a);
        s = gpu_check_launch(be, "attention");
    }
    if (s != RB_OK || a.nsplit == 1) return s;
    (void)gpu_launch_pdl(g, true, k_att_merge, dim3(gpu_blocks(rows, 1)), dim3(ATT_MERGE_THREADS), 0, gd,
                         (const float *)a.part, a.nsplit, rows, a.sinks, a.sinks_nb);
    return gpu_check_launch(be, "attention merge");
}

} // namespace RB_GPU_NS

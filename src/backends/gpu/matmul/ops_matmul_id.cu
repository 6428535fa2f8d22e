/* rb_matmul_id on the GPU: the expert products of a mixture-of-experts
 * layer, dst[:, j, t] = a[:, :, ids[j, t]] b[:, S == 1 ? 0 : j, t]. An
 * eager call on CUDA with many rows per used expert (a prompt) goes through
 * tensor-core GEMMs (moe_gemm.cuh, from the ids read on the host); every
 * other call (decode, small batches, graph captures, HIP) takes three
 * launches whatever the number of experts, none reading the host, so a
 * decode step's layer is captured into a graph like any other op:
 *   1. k_moe_route (moe_route.cuh) groups the k T (slot, token) rows by
 *      expert: the used experts, each with its rows in ascending order;
 *   2. the activations' S T distinct rows are quantized once to int8 the
 *      way the CPU backend quantizes them for the weight format (q8_0 mode
 *      for q4_0 / q8_0 / mxfp4, q8_K mode for q4_K / q5_K / q6_K; mv_quant8 of
 *      matvec_fmt.cuh), or, for float weights, read as f32 rows (converted
 *      into scratch where they are not contiguous aligned f32);
 *   3. k_moe_mv: blockIdx.y picks a used expert, so only the selected
 *      experts' weights are read (a decode step: k matrices), and each of
 *      them once per block for all its rows: a 32-lane group takes R weight
 *      rows and MT of the expert's activation rows at a time, each lane a
 *      stride of work units through the rows, with the formats' dot
 *      products of matvec_fmt.cuh (q4_0, q8_0, q4_K, q5_K, q6_K, f32/f16/bf16
 *      in 16-byte units) and matvec_fmt_mxfp4.cuh (mxfp4), the lane sums meeting
 *      in shuffles; results go straight to their (j, t) place in dst.
 * Float weights in other layouts (strided elements, unaligned rows, K not a
 * multiple of the 16-byte unit) take k_moe_mv_any, the same walk with one
 * element a lane a step. An eager call checks the ids on the host first
 * (RB_E_RANGE before anything runs, as the CPU backend does); while a graph
 * is captured the routing kernel reports a bad id through the ids guard
 * and leaves its row unwritten. The integer sums equal the CPU backend's;
 * only the order of the f32 additions differs. */
#include "backends/gpu/matmul/matvec_fmt_mxfp4.cuh"
#include "backends/gpu/matmul/moe_gemm.cuh"
#include "backends/gpu/matmul/moe_route.cuh"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

namespace RB_GPU_NS {

#define MOE_THREADS 256
#define MOE_NG (MOE_THREADS / 32) /* 32-lane groups a block */
#define MOE_R 2                   /* weight rows a group takes at a time */
#define MOE_E_MAX MR_SEG_INTS     /* experts the routing kernel can count */

struct moe_args {
    gt a, d;          /* experts [K, N, E], dst [N, k, T] */
    const int *order; /* rows r = t k + j sorted by expert (k_moe_route) */
    const int *grp;   /* {ng, ue[G], us[G], un[G]} */
    int G, k, S;
    mv_x X;           /* activations: xq/xs (quantized weights) or xf (float) */
    int64_t x1, x2;   /* elements between rows s and s + 1, t and t + 1 of X */
    gt b;             /* k_moe_mv_any: the activations as given */
};

/* The activations' rows (s, t) of b [K, S, T] quantized as mv_quant8 does,
 * into xq [T][S][K] and one record per 32 in xs: a 32-lane group per 256
 * elements of a row. */
template <bool KQ> __global__ void __launch_bounds__(MOE_THREADS) k_moe_xq(gt b, int8_t *xq, int2 *xs) {
    const int lane = threadIdx.x & 31;
    const int64_t K = b.ne[0], S = b.ne[1], KB = (K + 255) / 256, total = KB * S * b.ne[2];
    for (int64_t gi = (int64_t)blockIdx.x * MOE_NG + (threadIdx.x >> 5); gi < total; gi += (int64_t)gridDim.x * MOE_NG) {
        const int64_t kb = gi % KB, row = gi / KB, s = row % S, t = row / S; /* uniform over the group */
        const int64_t e = kb * 256 + lane * 8;
        const bool valid = e < K;
        const char *rp = b.p + s * b.nb[1] + t * b.nb[2];
        float v[8];
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = valid ? ldf(b.dt, rp + (e + i) * b.nb[0]) : 0.0f;
        int2 qv, rec;
        mv_quant8<KQ>(v, lane, &qv, &rec);
        const int64_t o = row * K + e;
        if (valid) {
            *(int2 *)(xq + o) = qv;
            if ((lane & 3) == 0) xs[o >> 5] = rec;
        }
    }
}

/* the used expert g's fields of the routing output */
__device__ __forceinline__ void moe_group(const moe_args &p, int g, int *e, int *s0, int *cnt) {
    *e = p.grp[1 + g];
    *s0 = p.grp[1 + p.G + g];
    *cnt = p.grp[1 + 2 * p.G + g];
}

/* the 32 lanes' sums of acc, stored for rows n0 + j (< N) and the group's
 * rows m0 + m (< cnt), whose slots are slot[m] */
template <int R, int MT>
__device__ __forceinline__ void moe_store(const moe_args &p, float (&acc)[R][MT], int lane, int64_t n0, int m0,
                                          int cnt, const int (&slot)[MT]) {
    const int64_t N = p.a.ne[1];
#pragma unroll
    for (int j = 0; j < R; j++)
#pragma unroll
        for (int m = 0; m < MT; m++) {
            float v = acc[j][m];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += MV_XOR32(v, o);
            if (lane == ((j * MT + m) & 31) && n0 + j < N && m0 + m < cnt) {
                const int r = slot[m], jj = r % p.k, t = r / p.k;
                *(float *)(p.d.p + (n0 + j) * p.d.nb[0] + (int64_t)jj * p.d.nb[1] + (int64_t)t * p.d.nb[2]) = v;
            }
        }
}

/* grid (row blocks, used-expert places); F: a format of matvec_fmt.cuh */
template <class F, int R, int MT> __global__ void __launch_bounds__(MOE_THREADS) k_moe_mv(const moe_args p) {
    const int lane = threadIdx.x & 31, gi = threadIdx.x >> 5;
    const int ng = p.grp[0], nwu = (int)(p.a.ne[0] / F::WU_EL);
    const int64_t N = p.a.ne[1];
    for (int g = blockIdx.y; g < ng; g += gridDim.y) {
        int e, s0, cnt;
        moe_group(p, g, &e, &s0, &cnt);
        const char *ab = p.a.p + (int64_t)e * p.a.nb[2];
        for (int64_t n0 = ((int64_t)blockIdx.x * MOE_NG + gi) * R; n0 < N; n0 += (int64_t)gridDim.x * MOE_NG * R) {
            const char *rp[R];
#pragma unroll
            for (int j = 0; j < R; j++) rp[j] = ab + (n0 + j < N ? n0 + j : N - 1) * p.a.nb[1];
            for (int m0 = 0; m0 < cnt; m0 += MT) { /* uniform over the group */
                int xo[MT], slot[MT];
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const int r = p.order[s0 + (m0 + m < cnt ? m0 + m : cnt - 1)];
                    slot[m] = r;
                    xo[m] = (int)((p.S == 1 ? 0 : r % p.k) * p.x1 + (r / p.k) * p.x2);
                }
                float acc[R][MT];
#pragma unroll
                for (int j = 0; j < R; j++)
#pragma unroll
                    for (int m = 0; m < MT; m++) acc[j][m] = 0.0f;
                for (int w = lane; w < nwu; w += 32) F::template dot<R, MT>(rp, w, 0, p.X, xo, acc);
                moe_store<R, MT>(p, acc, lane, n0, m0, cnt, slot);
            }
        }
    }
}

/* float weights and activations in any layout: one element a lane a step */
template <int R, int MT> __global__ void __launch_bounds__(MOE_THREADS) k_moe_mv_any(const moe_args p) {
    const int lane = threadIdx.x & 31, gi = threadIdx.x >> 5;
    const int ng = p.grp[0];
    const int64_t K = p.a.ne[0], N = p.a.ne[1];
    for (int g = blockIdx.y; g < ng; g += gridDim.y) {
        int e, s0, cnt;
        moe_group(p, g, &e, &s0, &cnt);
        const char *ab = p.a.p + (int64_t)e * p.a.nb[2];
        for (int64_t n0 = ((int64_t)blockIdx.x * MOE_NG + gi) * R; n0 < N; n0 += (int64_t)gridDim.x * MOE_NG * R) {
            const char *rp[R];
#pragma unroll
            for (int j = 0; j < R; j++) rp[j] = ab + (n0 + j < N ? n0 + j : N - 1) * p.a.nb[1];
            for (int m0 = 0; m0 < cnt; m0 += MT) {
                const char *xp[MT];
                int slot[MT];
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const int r = p.order[s0 + (m0 + m < cnt ? m0 + m : cnt - 1)];
                    slot[m] = r;
                    xp[m] = p.b.p + (int64_t)(p.S == 1 ? 0 : r % p.k) * p.b.nb[1] + (int64_t)(r / p.k) * p.b.nb[2];
                }
                float acc[R][MT];
#pragma unroll
                for (int j = 0; j < R; j++)
#pragma unroll
                    for (int m = 0; m < MT; m++) acc[j][m] = 0.0f;
                for (int64_t i = lane; i < K; i += 32) {
                    float w[R];
#pragma unroll
                    for (int j = 0; j < R; j++) w[j] = ldf(p.a.dt, rp[j] + i * p.a.nb[0]);
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        const float x = ldf(p.b.dt, xp[m] + i * p.b.nb[0]);
#pragma unroll
                        for (int j = 0; j < R; j++) acc[j][m] = fmaf(w[j], x, acc[j][m]);
                    }
                }
                moe_store<R, MT>(p, acc, lane, n0, m0, cnt, slot);
            }
        }
    }
}

/* ---------------- host side ---------------- */

/* Eager calls: every id in 0..E-1, read on the host (the CPU backend's check
 * and message), into *out (malloc'd, row r = t k + j at [r]; the caller frees). */
static rb_status moe_read_ids(rb_backend *be, const rb_tensor *ids, int64_t E, int32_t **out) {
    const int64_t k = ids->ne[0], T = ids->ne[1];
    const size_t span = rb_tensor_span(ids);
    *out = NULL;
    if (span == 0 || k * T == 0) return RB_OK;
    char *h = (char *)malloc(span);
    int32_t *v = (int32_t *)malloc(sizeof(int32_t) * (size_t)(k * T));
    if (!h || !v) {
        free(h);
        free(v);
        return rb_backend_fail(be, RB_E_NOMEM, "rb_matmul_id: no host memory to check %zu bytes of ids", span);
    }
    cudaError_t err = cudaMemcpyAsync(h, (const char *)ids->buf->impl + ids->offs, span, cudaMemcpyDeviceToHost,
                                      gb(be)->stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(gb(be)->stream);
    if (err != cudaSuccess) {
        free(h);
        free(v);
        return gpu_fail(be, err, "rb_matmul_id: reading the ids");
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++) {
            int32_t x;
            memcpy(&x, h + j * (int64_t)ids->nb[0] + t * (int64_t)ids->nb[1], sizeof x);
            if (x < 0 || x >= E) {
                free(h);
                free(v);
                return rb_backend_fail(be, RB_E_RANGE,
                                       "rb_matmul_id: expert id %d at [%lld, %lld] is outside 0..%lld", (int)x,
                                       (long long)j, (long long)t, (long long)E - 1);
            }
            v[t * k + j] = x;
        }
    free(h);
    *out = v;
    return RB_OK;
}

#if !defined(RBEE_GPU_HIP)
/* An eager call through the expert GEMMs (moe_gemm.cuh) where mg_wanted
 * takes it (*done true), from the ids read on the host. */
static rb_status moe_try_gemm(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                              const int32_t *hid, bool *done) {
    const int64_t E = a->ne[2], R = dst->ne[1] * dst->ne[2];
    *done = false;
    int64_t *cnt = (int64_t *)calloc((size_t)E, sizeof(int64_t));
    if (!cnt) return rb_backend_fail(be, RB_E_NOMEM, "rb_matmul_id: no host memory to count %lld experts", (long long)E);
    int64_t used = 0;
    for (int64_t r = 0; r < R; r++) used += cnt[hid[r]]++ == 0;
    rb_status s = RB_OK;
    if (mg_wanted(gb(be), a, dst->ne[2], R, used)) {
        *done = true;
        s = moe_gemm(be, dst, a, b, hid, cnt, used);
    }
    free(cnt);
    return s;
}
#endif

/* activation rows a pass: the most rows a used expert can have, T (top-k
 * gives distinct experts per token), rounded up to 1, 2, 4 or 8 */
static int moe_mt(int64_t T) { return T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : 8; }

/* blocks: about 8 resident a multiprocessor over the used-expert places,
 * at most one 32-lane group per R weight rows */
static dim3 moe_grid(rb_backend *be, int64_t N, int G) {
    const unsigned gy = (unsigned)(G < 65535 ? G : 65535);
    int64_t gx = (8 * (int64_t)gb(be)->n_sm + gy - 1) / gy;
    const int64_t gmax = (N + MOE_NG * MOE_R - 1) / (MOE_NG * MOE_R);
    if (gx > gmax) gx = gmax;
    if (gx > 65535) gx = 65535;
    return dim3((unsigned)(gx < 1 ? 1 : gx), gy);
}

template <class F, int MT> static rb_status moe_launch_mt(rb_backend *be, const moe_args &p, dim3 grid) {
    k_moe_mv<F, MOE_R, MT><<<grid, MOE_THREADS, 0, gb(be)->stream>>>(p);
    return gpu_check_launch(be, "rb_matmul_id (expert products)");
}

template <class F> static rb_status moe_launch(rb_backend *be, const moe_args &p, dim3 grid, int mt) {
    switch (mt) {
    case 1: return moe_launch_mt<F, 1>(be, p, grid);
    case 2: return moe_launch_mt<F, 2>(be, p, grid);
    case 4: return moe_launch_mt<F, 4>(be, p, grid);
    default: return moe_launch_mt<F, 8>(be, p, grid);
    }
}

static rb_status moe_launch_any(rb_backend *be, const moe_args &p, dim3 grid, int mt) {
    cudaStream_t st = gb(be)->stream;
    switch (mt) {
    case 1: k_moe_mv_any<MOE_R, 1><<<grid, MOE_THREADS, 0, st>>>(p); break;
    case 2: k_moe_mv_any<MOE_R, 2><<<grid, MOE_THREADS, 0, st>>>(p); break;
    case 4: k_moe_mv_any<MOE_R, 4><<<grid, MOE_THREADS, 0, st>>>(p); break;
    default: k_moe_mv_any<MOE_R, 8><<<grid, MOE_THREADS, 0, st>>>(p); break;
    }
    return gpu_check_launch(be, "rb_matmul_id (expert products)");
}

static size_t moe_up256(size_t n) { return (n + 255) & ~(size_t)255; }

static bool moe_al16(const gt &v) {
    return ((uintptr_t)v.p & 15) == 0 && v.nb[1] % 16 == 0 && v.nb[2] % 16 == 0 && v.nb[3] % 16 == 0;
}

rb_status gpu_matmul_id(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                        const rb_tensor *ids) {
    const int64_t K = a->ne[0], N = a->ne[1], E = a->ne[2], k = ids->ne[0], T = ids->ne[1], S = b->ne[1];
    const int64_t R = k * T, B = S * T; /* (slot, token) rows; distinct activation rows */
    const rb_dtype dt = a->dtype;
    const bool quant = rb_dtype_info((int)dt)->is_quant;
    if (quant ? !gpu_quant_ok(dt) || gpu_iq_dtype(dt)
              : !(dt == RB_F32 || dt == RB_F16 || dt == RB_BF16))
        return rb_backend_fail(be, RB_E_UNSUPPORTED,
                               "rb_matmul_id: experts of dtype %s are not supported on %s (f32, f16, bf16, q4_0, "
                               "q8_0, q4_K, q5_K, q6_K and mxfp4 are)",
                               rb_dtype_name(dt), be->name);
    if (E > MOE_E_MAX || R >= ((int64_t)1 << 30) || B * (K > 0 ? K : 1) >= ((int64_t)1 << 31))
        return rb_backend_fail(be, RB_E_UNSUPPORTED,
                               "rb_matmul_id: %lld experts, %lld rows of %lld are beyond %s's kernels (at most %d "
                               "experts, 2^30 rows, 2^31 activation elements)",
                               (long long)E, (long long)R, (long long)K, be->name, MOE_E_MAX);
    const gt av = gview(a);
    if (quant && dt != RB_MXFP4 && !gpu_units_aligned(dt, av))
        return rb_backend_fail(be, RB_E_UNSUPPORTED,
                               "rb_matmul_id: %s experts at a misaligned address or row stride are not supported on %s",
                               rb_dtype_name(dt), be->name);
    int *guard = gpu_ids_guard(be);
    int32_t *hid = NULL; /* eager: the ids, checked on the host */
    if (!guard) {
        rb_status s = moe_read_ids(be, ids, E, &hid);
        if (s != RB_OK) return s;
    }
    if (R == 0 || N == 0 || K == 0) {
        free(hid);
        return R == 0 || N == 0 ? RB_OK : gpu_fill(be, dst, 0.0f);
    }
#if !defined(RBEE_GPU_HIP)
    if (hid) { /* many rows per expert: the GEMMs of moe_gemm.cuh */
        bool done = false;
        rb_status s = moe_try_gemm(be, dst, a, b, hid, &done);
        if (s != RB_OK || done) {
            free(hid);
            return s;
        }
    }
#endif
    free(hid);
    gb(be)->moe_mv++;

    /* how the activations are read: quantized rows, f32 rows of b, or f32 copies */
    const size_t es = rb_dtype_info((int)dt)->type_size;
    const int64_t wu = dt == RB_F32 ? 4 : 8; /* float: elements a 16-byte unit */
    const bool fvec = !quant && av.nb[0] == (int64_t)es && K % wu == 0 && moe_al16(av);
    const gt bv = gview(b);
    const bool b_direct = bv.dt == RB_F32 && bv.nb[0] == 4 && moe_al16(bv) &&
                          (S - 1) * (bv.nb[1] / 4) + (T - 1) * (bv.nb[2] / 4) < ((int64_t)1 << 31) - K;
    const bool xcopy = fvec && !b_direct;
    /* routing segments: a 32-lane group per 32 rows (one for a decode step), as
     * many as the shared counts allow */
    const int64_t G = E < R ? E : R, nseg_fit = MOE_E_MAX / E, nseg_rows = (R + 31) / 32;
    int64_t nseg = nseg_fit < MR_GROUPS ? nseg_fit : MR_GROUPS;
    if (nseg > nseg_rows) nseg = nseg_rows;
    /* scratch: the routing output, then the activations */
    const size_t route_b = moe_up256(sizeof(int) * (size_t)(R + 1 + 3 * G));
    const size_t xq_b = quant ? moe_up256((size_t)(B * K)) : 0, xs_b = quant ? moe_up256((size_t)(B * K / 32) * 8) : 0;
    const size_t xf_b = xcopy ? moe_up256((size_t)(B * K) * 4) : 0;
    void *sp = NULL;
    rb_status s = gpu_scratch(be, route_b + xq_b + xs_b + xf_b, &sp);
    if (s != RB_OK) return s;
    char *base = (char *)sp;
    moe_args p = {};
    p.a = av;
    p.d = gview(dst);
    p.b = bv;
    p.order = (const int *)base;
    p.grp = (const int *)base + R;
    p.G = (int)G;
    p.k = (int)k;
    p.S = (int)S;
    cudaStream_t st = gb(be)->stream;

    k_moe_route<<<1, MR_THREADS, 0, st>>>(gview(ids), (int)E, (int)k, (int)R, (int)nseg, (int)G, (int *)base,
                                          (int *)base + R, guard);
    s = gpu_check_launch(be, "rb_matmul_id (routing)");
    if (s != RB_OK) return s;

    if (quant) {
        int8_t *xq = (int8_t *)(base + route_b);
        int2 *xs = (int2 *)(base + route_b + xq_b);
        const bool kq = dt == RB_Q4_K || dt == RB_Q5_K || dt == RB_Q6_K;
        int64_t blocks = (B * ((K + 255) / 256) + MOE_NG - 1) / MOE_NG;
        if (blocks > 65535LL * 32) blocks = 65535LL * 32;
        gt b3 = bv; /* [K, S, T] */
        if (kq) k_moe_xq<true><<<(unsigned)blocks, MOE_THREADS, 0, st>>>(b3, xq, xs);
        else k_moe_xq<false><<<(unsigned)blocks, MOE_THREADS, 0, st>>>(b3, xq, xs);
        s = gpu_check_launch(be, "rb_matmul_id (activation quantization)");
        if (s != RB_OK) return s;
        p.X.xq = xq;
        p.X.xs = xs;
        p.x1 = K;
        p.x2 = S * K;
    } else if (fvec) {
        if (xcopy) { /* contiguous f32 rows [K, S, T] */
            float *xf = (float *)(base + route_b);
            s = gpu_copy_view(be, gpu_contig_view(xf, RB_F32, K, S, T, 1), bv);
            if (s != RB_OK) return s;
            p.X.xf = xf;
            p.x1 = K;
            p.x2 = S * K;
        } else {
            p.X.xf = (const float *)bv.p;
            p.x1 = bv.nb[1] / 4;
            p.x2 = bv.nb[2] / 4;
        }
    }
    const dim3 grid = moe_grid(be, N, (int)G);
    const int mt = moe_mt(T);
    switch (dt) {
    case RB_Q4_0: return moe_launch<mvf_q4_0>(be, p, grid, mt);
    case RB_Q8_0: return moe_launch<mvf_q8_0>(be, p, grid, mt);
    case RB_Q4_K: return moe_launch<mvf_q4_K>(be, p, grid, mt);
    case RB_Q5_K: return moe_launch<mvf_q5_K>(be, p, grid, mt);
    case RB_Q6_K: return moe_launch<mvf_q6_K>(be, p, grid, mt);
    case RB_MXFP4: return moe_launch<mvf_mxfp4>(be, p, grid, mt);
    default: break;
    }
    if (!fvec) return moe_launch_any(be, p, grid, mt);
    switch (dt) {
    case RB_F32: return moe_launch<mvf_float<RB_F32>>(be, p, grid, mt);
    case RB_F16: return moe_launch<mvf_float<RB_F16>>(be, p, grid, mt);
    default: return moe_launch<mvf_float<RB_BF16>>(be, p, grid, mt);
    }
}

} // namespace RB_GPU_NS

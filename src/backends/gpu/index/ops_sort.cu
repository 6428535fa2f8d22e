/* GPU sorting ops: rb_argsort and rb_topk (a mixture-of-experts layer's
 * routing: the k largest of each token's E router logits). Both order by
 * one strict total order, the CPU backend's: by value (NaN above every
 * number), equal values by index, lower first - so a sort is stable and
 * its result unique. Keys are the elements as f32 (i32 converted as the CPU
 * does).
 *  - topk with k <= 32 over rows of at most 32 elements a lane: one warp a
 *    row, each lane holding its share of the row in registers; k rounds of
 *    a warp-wide arg-max (lane candidates, then a shuffle tree), the winner
 *    struck out by its lane. Routing widths (4..128 experts, k 1..8) take
 *    this path: a decode step's routing is one short kernel.
 *  - everything else (argsort, larger k or rows): a block a row sorts its
 *    (key, index) pairs with a bitonic network, padded to a power of two,
 *    in shared memory up to SORT_SHARED_MAX elements, beyond that in device
 *    scratch (the same network, read and written through L2).
 * values of rb_topk get the element's bytes where their dtype is src's,
 * else its f32 value. */
#include "backends/gpu/gpu_common.cuh"

#include <limits.h>

namespace RB_GPU_NS {

#define SORT_THREADS 256
#define SORT_SHARED_MAX 4096 /* elements (8 bytes each) sorted in shared memory */
#define TOPK_WARP_K 32       /* largest k of the warp path */
#define TOPK_WARP_PER 32     /* most elements a lane holds on the warp path */

/* a > b with NaN above every number (the CPU's order) */
__device__ __forceinline__ bool sort_gt(float a, float b) {
    if (isnan(a)) return !isnan(b);
    if (isnan(b)) return false;
    return a > b;
}

/* (ka, ia) comes before (kb, ib) in the output order; index < 0 marks
 * padding, which comes after everything */
__device__ __forceinline__ bool sort_before(float ka, int ia, float kb, int ib, bool desc) {
    if (ia < 0) return false;
    if (ib < 0) return true;
    const bool agt = sort_gt(ka, kb), bgt = sort_gt(kb, ka);
    if (desc ? agt : bgt) return true;
    if (desc ? bgt : agt) return false;
    return ia < ib;
}

/* element i of a row as a key */
__device__ __forceinline__ float sort_key(const gt &s, const char *row, int64_t i) {
    return ldf(s.dt, row + i * s.nb[0]);
}

/* output position `pos` of a row: index into ind (i32), and for topk the
 * value (the element's bytes where vals has src's dtype, else f32) */
__device__ __forceinline__ void sort_store(const gt &s, const char *srow, const gt &ind, char *irow, const gt *vals,
                                           char *vrow, int64_t pos, int idx, float key) {
    *(int32_t *)(irow + pos * ind.nb[0]) = idx;
    if (!vals) return;
    char *vp = vrow + pos * vals->nb[0];
    if (vals->dt == s.dt) {
        const char *sp = srow + (int64_t)idx * s.nb[0];
        if (s.dt == RB_F32 || s.dt == RB_I32) *(uint32_t *)vp = *(const uint32_t *)sp;
        else *(uint16_t *)vp = *(const uint16_t *)sp;
    } else {
        stf(vals->dt, vp, key);
    }
}

/* byte offset of row r (coordinates over ne[1..3]) in view v */
__device__ __forceinline__ int64_t sort_row(const gt &v, const int64_t ne[4], int64_t r) {
    const int64_t c1 = r % ne[1], c2 = (r / ne[1]) % ne[2], c3 = r / (ne[1] * ne[2]);
    return c1 * v.nb[1] + c2 * v.nb[2] + c3 * v.nb[3];
}

/* topk, one warp a row: lane l holds elements l + RB_WARP p, p < PER */
template <int PER>
__global__ void __launch_bounds__(SORT_THREADS) k_topk_warp(gt s, gt ind, gt vals, int hasv, int k, int64_t nrows) {
    const int lane = threadIdx.x % RB_WARP, nw = blockDim.x / RB_WARP;
    const int64_t n = s.ne[0];
    for (int64_t r = (int64_t)blockIdx.x * nw + threadIdx.x / RB_WARP; r < nrows; r += (int64_t)gridDim.x * nw) {
        const char *srow = s.p + sort_row(s, s.ne, r);
        char *irow = ind.p + sort_row(ind, s.ne, r), *vrow = hasv ? vals.p + sort_row(vals, s.ne, r) : NULL;
        float key[PER];
        uint32_t live = 0; /* bit p: element lane + RB_WARP p is still a candidate */
#pragma unroll
        for (int p = 0; p < PER; p++) {
            const int64_t i = lane + (int64_t)RB_WARP * p;
            key[p] = i < n ? sort_key(s, srow, i) : 0.0f;
            if (i < n) live |= 1u << p;
        }
        for (int j = 0; j < k; j++) {
            float bk = 0.0f;
            int bi = -1;
#pragma unroll
            for (int p = 0; p < PER; p++) /* this lane's first in order (its indices ascend with p) */
                if (((live >> p) & 1u) && sort_before(key[p], lane + RB_WARP * p, bk, bi, true)) {
                    bk = key[p];
                    bi = lane + RB_WARP * p;
                }
#pragma unroll
            for (int m = RB_WARP / 2; m > 0; m >>= 1) {
                const float ok = RB_SHFL_XOR(bk, m);
                const int oi = RB_SHFL_XOR(bi, m);
                if (sort_before(ok, oi, bk, bi, true)) {
                    bk = ok;
                    bi = oi;
                }
            }
            /* every lane holds the winner (a total order: the same one); its lane strikes it out */
            if (bi >= 0 && bi % RB_WARP == lane) live &= ~(1u << ((bi - lane) / RB_WARP));
            if (lane == 0 && bi >= 0) sort_store(s, srow, ind, irow, hasv ? &vals : NULL, vrow, j, bi, bk);
        }
    }
}

/* Bitonic sort of a row's P (a power of two) pairs in kk/ki (shared memory
 * or this row's scratch), output order `desc`; the block's threads take
 * the compare-exchange pairs. */
__device__ __forceinline__ void sort_bitonic(float *kk, int *ki, int64_t P, bool desc) {
    for (int64_t size = 2; size <= P; size <<= 1)
        for (int64_t stride = size / 2; stride > 0; stride >>= 1) {
            for (int64_t t = threadIdx.x; t < P / 2; t += blockDim.x) {
                const int64_t i = 2 * stride * (t / stride) + t % stride, j = i + stride;
                const bool up = (i & size) == 0; /* this run ends in output order */
                const float a = kk[i], b = kk[j];
                const int ia = ki[i], ib = ki[j];
                if (up ? sort_before(b, ib, a, ia, desc) : sort_before(a, ia, b, ib, desc)) {
                    kk[i] = b;
                    kk[j] = a;
                    ki[i] = ib;
                    ki[j] = ia;
                }
            }
            __syncthreads();
        }
}

/* A block a row: argsort (nout = n, no values) or topk (nout = k). SHARED:
 * pairs in dynamic shared memory, else in scr (P floats then P ints a row,
 * for gridDim.x rows at a time). */
template <bool SHARED>
__global__ void __launch_bounds__(SORT_THREADS)
    k_sort_rows(gt s, gt ind, gt vals, int hasv, int64_t nout, int64_t P, bool desc, int64_t nrows, char *scr) {
    extern __shared__ __align__(16) unsigned char sort_sh[];
    const int64_t n = s.ne[0];
    float *kk;
    int *ki;
    if (SHARED) {
        kk = (float *)sort_sh;
        ki = (int *)(kk + P);
    } else {
        kk = (float *)(scr + (int64_t)blockIdx.x * P * 8);
        ki = (int *)(kk + P);
    }
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        const char *srow = s.p + sort_row(s, s.ne, r);
        for (int64_t i = threadIdx.x; i < P; i += blockDim.x) {
            kk[i] = i < n ? sort_key(s, srow, i) : 0.0f;
            ki[i] = i < n ? (int)i : -1;
        }
        __syncthreads();
        sort_bitonic(kk, ki, P, desc);
        char *irow = ind.p + sort_row(ind, s.ne, r), *vrow = hasv ? vals.p + sort_row(vals, s.ne, r) : NULL;
        for (int64_t i = threadIdx.x; i < nout; i += blockDim.x)
            sort_store(s, srow, ind, irow, hasv ? &vals : NULL, vrow, i, ki[i], kk[i]);
        __syncthreads(); /* the pairs are reused by the next row */
    }
}

/* the block-per-row sort of every row: nout outputs of each */
static rb_status sort_rows(rb_backend *be, const rb_tensor *src, const rb_tensor *ind, const rb_tensor *vals,
                           int64_t nout, bool desc) {
    gpu_backend *g = gb(be);
    const int64_t n = src->ne[0], nrows = src->ne[1] * src->ne[2] * src->ne[3];
    if (n > INT_MAX / 2)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "sorting rows of %lld elements is not supported on %s",
                               (long long)n, be->name);
    int64_t P = 2;
    while (P < n) P <<= 1;
    int64_t threads = P / 2 < SORT_THREADS ? P / 2 : SORT_THREADS;
    threads = (threads + g->warp - 1) / g->warp * g->warp;
    const gt sv = gview(src), iv = gview(ind);
    const gt vv = vals ? gview(vals) : iv;
    int64_t blocks = nrows < 65535LL * 16 ? nrows : 65535LL * 16;
    if (P <= SORT_SHARED_MAX) {
        k_sort_rows<true><<<(unsigned)blocks, (unsigned)threads, (size_t)P * 8, g->stream>>>(
            sv, iv, vv, vals != NULL, nout, P, desc, nrows, NULL);
        return gpu_check_launch(be, "sort");
    }
    /* long rows: the pairs of up to `blocks` rows at a time in scratch */
    const int64_t per = P * 8, cap = ((int64_t)1 << 30) / per;
    if (blocks > cap) blocks = cap > 0 ? cap : 1;
    void *scr = NULL;
    rb_status st = gpu_scratch(be, (size_t)(blocks * per), &scr);
    if (st != RB_OK) return st;
    k_sort_rows<false><<<(unsigned)blocks, (unsigned)threads, 0, g->stream>>>(sv, iv, vv, vals != NULL, nout, P, desc,
                                                                              nrows, (char *)scr);
    return gpu_check_launch(be, "sort");
}

rb_status gpu_argsort(rb_backend *be, rb_tensor *dst, const rb_tensor *src, bool descending) {
    if (rb_tensor_nelements(src) == 0) return RB_OK;
    return sort_rows(be, src, dst, NULL, src->ne[0], descending);
}

template <int PER> static rb_status topk_warp(rb_backend *be, rb_tensor *values, rb_tensor *indices,
                                              const rb_tensor *src, int k) {
    gpu_backend *g = gb(be);
    const int64_t nrows = src->ne[1] * src->ne[2] * src->ne[3], rpb = SORT_THREADS / g->warp;
    int64_t blocks = (nrows + rpb - 1) / rpb;
    if (blocks > 65535LL * 16) blocks = 65535LL * 16;
    k_topk_warp<PER><<<(unsigned)blocks, SORT_THREADS, 0, g->stream>>>(gview(src), gview(indices), gview(values), 1, k,
                                                                       nrows);
    return gpu_check_launch(be, "topk");
}

rb_status gpu_topk(rb_backend *be, rb_tensor *values, rb_tensor *indices, const rb_tensor *src, int k) {
    if (rb_tensor_nelements(src) == 0) return RB_OK;
    const int64_t n = src->ne[0], per = (n + gb(be)->warp - 1) / gb(be)->warp;
    if (k <= TOPK_WARP_K && per <= TOPK_WARP_PER) {
        if (per <= 4) return topk_warp<4>(be, values, indices, src, k);
        if (per <= 8) return topk_warp<8>(be, values, indices, src, k);
        return topk_warp<TOPK_WARP_PER>(be, values, indices, src, k);
    }
    return sort_rows(be, src, indices, values, k, true);
}

} // namespace RB_GPU_NS

/* rb_linear on the GPU: the product by gpu_matmul (every path it has:
 * matrix-vector kernels, cuBLAS / the tiled GEMM), then the epilogue (bias,
 * activation, gate, residual) in one pass over the result, where the
 * separate ops took one launch each (the MMDiT's gated residual was four:
 * bias, mul, add, and the product's temporary).
 *  - in place: the product goes straight into dst and the epilogue reads it
 *    back from there (a 16-bit dst is rounded twice, as by the separate
 *    ops); used unless the residual is dst itself.
 *  - the residual in place (x += gate * (W a + b)): the product goes to an
 *    f32 buffer in the second scratch region (gpu_scratch_aux, so the
 *    product's own scratch use cannot clobber it), and the epilogue reads it
 *    and x and writes x, rounded once.
 * The epilogue kernel walks dst's rows (grid: column blocks x rows); rows of
 * contiguous 16-byte aligned f32/f16/bf16 (rows4_ok) take 4 elements a
 * thread with vector loads and stores. */
#include "backends/gpu/gpu_common.cuh"

#include <string.h>

namespace RB_GPU_NS {

#define LIN_THREADS 256

struct lin_ep {
    gt d, p;          /* destination, product (dst's shape; p may be d) */
    gt bias, gate, res; /* p == NULL where absent */
    int act, has_act;
};

__device__ __forceinline__ const char *lin_brow(const gt &v, int64_t c1, int64_t c2, int64_t c3) {
    return v.p + (v.ne[1] == 1 ? 0 : c1) * v.nb[1] + (v.ne[2] == 1 ? 0 : c2) * v.nb[2] +
           (v.ne[3] == 1 ? 0 : c3) * v.nb[3];
}

/* the epilogue of element i0 of a row: y the product, gr / rr the gate's
 * and the residual's row (NULL: none), r the residual's value when V4 */
__device__ __forceinline__ float lin_value(const lin_ep &e, float y, int64_t i0, const char *gr) {
    if (e.bias.p) y = y + ldf(e.bias.dt, e.bias.p + i0 * e.bias.nb[0]);
    if (e.has_act) y = apply_unary(e.act, y);
    if (gr) y = y * ldf(e.gate.dt, gr + i0 * e.gate.nb[0]);
    return y;
}

template <bool V4> __global__ void k_linear_ep(lin_ep e, int64_t nrows) {
    const int64_t n = e.d.ne[0];
    for (int64_t r = blockIdx.y; r < nrows; r += gridDim.y) {
        const int64_t c1 = r % e.d.ne[1], c2 = (r / e.d.ne[1]) % e.d.ne[2], c3 = r / (e.d.ne[1] * e.d.ne[2]);
        char *dr = e.d.p + c1 * e.d.nb[1] + c2 * e.d.nb[2] + c3 * e.d.nb[3];
        const char *pr = e.p.p + c1 * e.p.nb[1] + c2 * e.p.nb[2] + c3 * e.p.nb[3];
        const char *gr = e.gate.p ? lin_brow(e.gate, c1, c2, c3) : NULL;
        const char *rr = e.res.p ? e.res.p + c1 * e.res.nb[1] + c2 * e.res.nb[2] + c3 * e.res.nb[3] : NULL;
        if (V4) {
            for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n / 4;
                 j += (int64_t)gridDim.x * blockDim.x) {
                float v[4], x[4];
                ld4(e.p.dt, pr + j * 4 * e.p.nb[0], v);
                if (rr) ld4(e.res.dt, rr + j * 4 * e.res.nb[0], x);
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    v[t] = lin_value(e, v[t], 4 * j + t, gr);
                    if (rr) v[t] = x[t] + v[t];
                }
                st4(e.d.dt, dr + j * 4 * e.d.nb[0], v);
            }
        } else {
            for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
                float y = lin_value(e, ldf(e.p.dt, pr + i * e.p.nb[0]), i, gr);
                if (rr) y = ldf(e.res.dt, rr + i * e.res.nb[0]) + y;
                stf(e.d.dt, dr + i * e.d.nb[0], y);
            }
        }
    }
}

static gt lin_opt(const rb_tensor *t) {
    if (t) return gview(t);
    gt v = {};
    return v;
}

rb_status gpu_linear(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                     const rb_linear_epilogue *ep) {
    if (!ep->bias && !ep->has_act && !ep->gate && !ep->res) return gpu_matmul(be, dst, a, b);
    const int64_t N = dst->ne[0], M = dst->ne[1], B2 = dst->ne[2], B3 = dst->ne[3], nrows = M * B2 * B3;
    if (N == 0 || nrows == 0) return RB_OK;
    /* the residual is dst itself (the front-end allows only that view or none) */
    const bool res_in_dst = ep->res && ep->res->buf == dst->buf && ep->res->offs == dst->offs;
    lin_ep e;
    e.d = gview(dst);
    e.bias = lin_opt(ep->bias);
    e.gate = lin_opt(ep->gate);
    e.res = lin_opt(ep->res);
    e.act = (int)ep->act;
    e.has_act = ep->has_act ? 1 : 0;
    rb_status s;
    if (res_in_dst) { /* the product into f32 rows of the second scratch region */
        if ((size_t)N > SIZE_MAX / 4 / (size_t)nrows)
            return rb_backend_fail(be, RB_E_NOMEM, "rb_linear: a product of %lld x %lld is too large", (long long)N,
                                   (long long)nrows);
        void *sp = NULL;
        s = gpu_scratch_aux(be, (size_t)(N * nrows) * 4, &sp);
        if (s != RB_OK) return s;
        rb_buffer pb;
        memset(&pb, 0, sizeof pb);
        pb.backend = be;
        pb.size = (size_t)(N * nrows) * 4;
        pb.impl = sp;
        pb.owned = true;
        rb_tensor pt;
        const int64_t pne[4] = {N, M, B2, B3};
        s = rb_tensor_init(&pt, RB_F32, 4, pne, &pb, 0);
        if (s != RB_OK) return rb_backend_fail(be, s, "rb_linear: product view");
        s = gpu_matmul(be, &pt, a, b);
        if (s != RB_OK) return s;
        e.p = gview(&pt);
    } else {
        s = gpu_matmul(be, dst, a, b);
        if (s != RB_OK) return s;
        e.p = e.d;
    }
    const bool v4 = rows4_pair(e.d, e.p) && (!ep->res || rows4_pair(e.d, e.res));
    const int64_t cols = v4 ? N / 4 : N;
    int64_t bx = (cols + LIN_THREADS - 1) / LIN_THREADS;
    if (bx > 1024) bx = 1024;
    const dim3 grid((unsigned)bx, (unsigned)(nrows > 65535 ? 65535 : nrows));
    if (v4) k_linear_ep<true><<<grid, LIN_THREADS, 0, gb(be)->stream>>>(e, nrows);
    else k_linear_ep<false><<<grid, LIN_THREADS, 0, gb(be)->stream>>>(e, nrows);
    return gpu_check_launch(be, "linear (epilogue)");
}

} // namespace RB_GPU_NS

/* GPU resize of dims 0 and 1 (rb_upsample): [W, H, C, N] -> [W', H', C, N],
 * a thread per output element, any strides and float dtypes. Nearest takes
 * source index floor(i in / out) (torch's "nearest", what diffusers'
 * Upsample2D uses for its 2x); bilinear samples at (i + 0.5) in / out - 0.5
 * clamped at 0, the upper neighbour clamped to the edge (align_corners =
 * false), with the coordinate in double as the CPU backend computes it, so
 * both pick the same neighbours and weights. */
#include "backends/gpu/gpu_common.cuh"

namespace RB_GPU_NS {

#define UP_THREADS 256

__device__ __forceinline__ void up_coord(int64_t o, int64_t in, int64_t out, int64_t *i0, int64_t *i1, float *fr) {
    double s = ((double)o + 0.5) * (double)in / (double)out - 0.5;
    if (s < 0.0) s = 0.0;
    int64_t a = (int64_t)s;
    if (a > in - 1) a = in - 1;
    *i0 = a;
    *i1 = a + 1 < in ? a + 1 : in - 1;
    *fr = (float)(s - (double)a);
}

__global__ void __launch_bounds__(UP_THREADS) k_upsample(gt d, gt s, int bilinear, int64_t n) {
    const int64_t W = s.ne[0], H = s.ne[1], Wo = d.ne[0], Ho = d.ne[1];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        unravel(i, d.ne, c);
        const char *sp = s.p + c[2] * s.nb[2] + c[3] * s.nb[3];
        float v;
        if (!bilinear) {
            v = ldf(s.dt, sp + (c[1] * H / Ho) * s.nb[1] + (c[0] * W / Wo) * s.nb[0]);
        } else {
            int64_t x0, x1, y0, y1;
            float lx, ly;
            up_coord(c[0], W, Wo, &x0, &x1, &lx);
            up_coord(c[1], H, Ho, &y0, &y1, &ly);
            const char *r0 = sp + y0 * s.nb[1], *r1 = sp + y1 * s.nb[1];
            const float a0 = ldf(s.dt, r0 + x0 * s.nb[0]), a1 = ldf(s.dt, r0 + x1 * s.nb[0]);
            const float b0 = ldf(s.dt, r1 + x0 * s.nb[0]), b1 = ldf(s.dt, r1 + x1 * s.nb[0]);
            const float top = a0 + lx * (a1 - a0), bot = b0 + lx * (b1 - b0);
            v = top + ly * (bot - top);
        }
        stf(d.dt, d.p + c[0] * d.nb[0] + c[1] * d.nb[1] + c[2] * d.nb[2] + c[3] * d.nb[3], v);
    }
}

rb_status gpu_upsample(rb_backend *be, rb_tensor *dst, const rb_tensor *src, rb_upsample_mode mode) {
    const int64_t n = rb_tensor_nelements(dst);
    if (n == 0) return RB_OK;
    k_upsample<<<gpu_blocks(n, UP_THREADS), UP_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(src),
                                                                             mode == RB_UPSAMPLE_BILINEAR ? 1 : 0, n);
    return gpu_check_launch(be, "upsample");
}

} // namespace RB_GPU_NS

/* gpt-oss's clamped SwiGLU on the GPU (rb_swiglu_clamp): over f32 tensors
 * of one shape with any strides, dst possibly the same view as gate or up,
 *   g = min(gate, limit), u = clamp(up, -limit, limit),
 *   dst = (u + 1) * (g / (1 + exp(-alpha g)))
 * with the CPU backend's comparisons (a NaN gate becomes the limit, a NaN up
 * stays NaN) and order of operations, so the two differ only in expf's
 * last bits. One thread per element in a grid-stride loop: the op is
 * memory-bound and runs once per MoE layer on [F, k, T]. */
#include "backends/gpu/gpu_common.cuh"

namespace RB_GPU_NS {

#define SWC_THREADS 256

__global__ void __launch_bounds__(SWC_THREADS) k_swiglu_clamp(gt d, gt g, gt u, float alpha, float limit, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        unravel(i, d.ne, c);
        float gv = *(const float *)(g.p + boffs(g, c)), uv = *(const float *)(u.p + boffs(u, c));
        gv = gv < limit ? gv : limit;
        uv = uv < -limit ? -limit : (uv > limit ? limit : uv);
        *(float *)(d.p + boffs(d, c)) = (uv + 1.0f) * (gv / (1.0f + expf(-alpha * gv)));
    }
}

rb_status gpu_swiglu_clamp(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, float alpha,
                           float limit) {
    const int64_t n = rb_tensor_nelements(dst);
    if (n == 0) return RB_OK;
    k_swiglu_clamp<<<gpu_blocks(n, SWC_THREADS), SWC_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(gate), gview(up),
                                                                                   alpha, limit, n);
    return gpu_check_launch(be, "swiglu_clamp");
}

} // namespace RB_GPU_NS

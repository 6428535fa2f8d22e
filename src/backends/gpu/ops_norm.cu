/* GPU row-wise ops: rms_norm, layer_norm, softmax (scale + broadcast mask)
 * and the row reductions (sum, mean, max, min, argmax). One block per row;
 * block reductions from gpu_common.cuh, f32 accumulation (tree-ordered, so
 * its rounding error grows with log(n), well inside the 1e-5 bound). */
#include "backends/gpu/gpu_common.cuh"

namespace RB_GPU_NS {

#define ROW_THREADS 256

__device__ __forceinline__ void row_coords(int64_t r, const int64_t ne[4], int64_t c[4]) {
    c[0] = 0;
    c[1] = r % ne[1];
    c[2] = (r / ne[1]) % ne[2];
    c[3] = r / (ne[1] * ne[2]);
}

/* rms (layer = false) or layer norm; w and b may have p == NULL. */
__global__ void k_norm(gt d, gt s, gt w, gt b, float eps, bool layer) {
    __shared__ float sh[32];
    const int64_t n = s.ne[0], nrows = s.ne[1] * s.ne[2] * s.ne[3];
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        int64_t c[4];
        row_coords(r, s.ne, c);
        const char *sx = s.p + c[1] * s.nb[1] + c[2] * s.nb[2] + c[3] * s.nb[3];
        char *dx = d.p + c[1] * d.nb[1] + c[2] * d.nb[2] + c[3] * d.nb[3];
        float mean = 0.0f;
        if (layer) {
            float acc = 0.0f;
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += ldf(s.dt, sx + i * s.nb[0]);
            mean = block_sum(acc, sh) / (float)n;
        }
        float acc = 0.0f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const float x = ldf(s.dt, sx + i * s.nb[0]) - mean;
            acc += x * x;
        }
        const float k = rsqrtf(block_sum(acc, sh) / (float)n + eps);
        __syncthreads(); /* dst may alias src: every read of the row is done */
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            float y = (ldf(s.dt, sx + i * s.nb[0]) - mean) * k;
            if (w.p) y *= ldf(w.dt, w.p + i * w.nb[0]);
            if (b.p) y += ldf(b.dt, b.p + i * b.nb[0]);
            stf(d.dt, dx + i * d.nb[0], y);
        }
    }
}

__global__ void k_softmax(gt d, gt s, gt m, float scale) {
    __shared__ float sh[32];
    const int64_t n = s.ne[0], nrows = s.ne[1] * s.ne[2] * s.ne[3];
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        int64_t c[4];
        row_coords(r, s.ne, c);
        const char *sx = s.p + c[1] * s.nb[1] + c[2] * s.nb[2] + c[3] * s.nb[3];
        char *dx = d.p + c[1] * d.nb[1] + c[2] * d.nb[2] + c[3] * d.nb[3];
        const char *mx = m.p ? m.p + boffs(m, c) : nullptr;
        float mx_v = -INFINITY;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            float v = ldf(s.dt, sx + i * s.nb[0]) * scale;
            if (mx) v += ldf(m.dt, mx + i * m.nb[0]);
            mx_v = fmaxf(mx_v, v);
        }
        mx_v = block_max(mx_v, sh);
        float sum = 0.0f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            float v = ldf(s.dt, sx + i * s.nb[0]) * scale;
            if (mx) v += ldf(m.dt, mx + i * m.nb[0]);
            sum += mx_v == -INFINITY ? 0.0f : expf(v - mx_v);
        }
        sum = block_sum(sum, sh);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        __syncthreads();
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            float v = ldf(s.dt, sx + i * s.nb[0]) * scale;
            if (mx) v += ldf(m.dt, mx + i * m.nb[0]);
            stf(d.dt, dx + i * d.nb[0], mx_v == -INFINITY ? 0.0f : expf(v - mx_v) * inv);
        }
    }
}

__device__ __forceinline__ int warp_min_i(int v) {
#pragma unroll
    for (int m = RB_WARP / 2; m > 0; m >>= 1) {
        const int o = RB_SHFL_XOR(v, m);
        v = o < v ? o : v;
    }
    return v;
}

__global__ void k_reduce(gt d, gt s, int op) {
    __shared__ float sh[32];
    __shared__ int shi[32];
    const int64_t n = s.ne[0], nrows = s.ne[1] * s.ne[2] * s.ne[3];
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        int64_t c[4];
        row_coords(r, s.ne, c);
        const char *sx = s.p + c[1] * s.nb[1] + c[2] * s.nb[2] + c[3] * s.nb[3];
        char *dx = d.p + c[1] * d.nb[1] + c[2] * d.nb[2] + c[3] * d.nb[3];
        float res;
        if (op == RB_REDUCE_SUM || op == RB_REDUCE_MEAN) {
            float acc = 0.0f;
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += ldf(s.dt, sx + i * s.nb[0]);
            res = block_sum(acc, sh);
            if (op == RB_REDUCE_MEAN) res = n ? res / (float)n : NAN;
        } else if (op == RB_REDUCE_MIN) {
            float acc = INFINITY;
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc = fminf(acc, ldf(s.dt, sx + i * s.nb[0]));
            res = -block_max(-acc, sh);
        } else {
            float acc = -INFINITY;
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc = fmaxf(acc, ldf(s.dt, sx + i * s.nb[0]));
            res = block_max(acc, sh);
            if (op == RB_REDUCE_ARGMAX) { /* first index holding the maximum */
                int first = 0x7fffffff;
                for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
                    if (ldf(s.dt, sx + i * s.nb[0]) == res && (int)i < first) first = (int)i;
                first = warp_min_i(first);
                const int lane = threadIdx.x % RB_WARP, w = threadIdx.x / RB_WARP, nw = blockDim.x / RB_WARP;
                __syncthreads();
                if (lane == 0) shi[w] = first;
                __syncthreads();
                first = warp_min_i(lane < nw ? shi[lane] : 0x7fffffff);
                if (threadIdx.x == 0) *(int32_t *)dx = first == 0x7fffffff ? 0 : first;
                continue;
            }
        }
        if (threadIdx.x == 0) stf(d.dt, dx, res);
    }
}

static gt opt_view(const rb_tensor *t) {
    if (t) return gview(t);
    gt v = {};
    return v;
}

static unsigned row_blocks(const rb_tensor *t) {
    const int64_t r = t->ne[1] * t->ne[2] * t->ne[3];
    return (unsigned)(r < 65535LL * 16 ? (r < 1 ? 1 : r) : 65535LL * 16);
}

rb_status gpu_rms_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w, float eps) {
    if (rb_tensor_nelements(src) == 0) return RB_OK;
    k_norm<<<row_blocks(src), ROW_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(src), opt_view(w), opt_view(NULL),
                                                               eps, false);
    return gpu_check_launch(be, "rms_norm");
}

rb_status gpu_layer_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w,
                         const rb_tensor *b, float eps) {
    if (rb_tensor_nelements(src) == 0) return RB_OK;
    k_norm<<<row_blocks(src), ROW_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(src), opt_view(w), opt_view(b), eps,
                                                               true);
    return gpu_check_launch(be, "layer_norm");
}

rb_status gpu_softmax(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *mask, float scale) {
    if (rb_tensor_nelements(src) == 0) return RB_OK;
    k_softmax<<<row_blocks(src), ROW_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(src), opt_view(mask), scale);
    return gpu_check_launch(be, "softmax");
}

rb_status gpu_reduce(rb_backend *be, rb_reduce_op op, rb_tensor *dst, const rb_tensor *src) {
    if (rb_tensor_nelements(dst) == 0) return RB_OK;
    k_reduce<<<row_blocks(src), ROW_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(src), (int)op);
    return gpu_check_launch(be, "reduce");
}

} // namespace RB_GPU_NS

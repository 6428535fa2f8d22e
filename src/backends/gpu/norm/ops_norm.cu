/* GPU row-wise ops: rms_norm, layer_norm, layer_norm with adaLN modulation
 * (k_norm_mod: the row staged in shared memory where it fits, so it is read
 * from memory once), the fused residual add + rms_norm,
 * softmax (scale + broadcast mask) and the row reductions (sum, mean, max,
 * min, argmax). One block per row; block reductions from gpu_common.cuh, f32
 * accumulation (tree-ordered, so its rounding error grows with log(n), well
 * inside the 1e-5 bound). The fused add + norm sums squares in double like
 * the CPU backend, so its scale matches the CPU's to f32 rounding.
 * rms_norm and add + rms_norm on contiguous, 16-byte aligned f32 rows (every
 * decode step, twice per layer) take k_rms_rows: a thread holds its V float4
 * of the row (and of an f32 weight) in registers, so all of a row's loads
 * are in flight at once.
 * The generic loops below wait for each load in turn (the store into x may
 * alias the next load), 17 us for a 4096-wide row on an H100 against ~2. */
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
    rb_grid_dep_trigger();
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

/* dst = layer_norm(src) * (1 + scale) + shift over each row; scale and
 * shift rows ([n], broadcast over dims 1..3 where their extent is 1) may
 * have p == NULL. With stage (n floats of dynamic shared memory) the row is
 * read once into shared memory, else three times from src. Mean, then the
 * variance about it (two passes, as k_norm), in f32. */
__global__ void k_norm_mod(gt d, gt s, gt sh, gt sc, float eps, int stage) {
    rb_grid_dep_trigger();
    extern __shared__ float nm_row[];
    __shared__ float red[32];
    const int64_t n = s.ne[0], nrows = s.ne[1] * s.ne[2] * s.ne[3];
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        int64_t c[4];
        row_coords(r, s.ne, c);
        const char *sx = s.p + c[1] * s.nb[1] + c[2] * s.nb[2] + c[3] * s.nb[3];
        char *dx = d.p + c[1] * d.nb[1] + c[2] * d.nb[2] + c[3] * d.nb[3];
        c[0] = 0;
        const char *shx = sh.p ? sh.p + boffs(sh, c) : NULL, *scx = sc.p ? sc.p + boffs(sc, c) : NULL;
        float acc = 0.0f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const float x = ldf(s.dt, sx + i * s.nb[0]);
            if (stage) nm_row[i] = x;
            acc += x;
        }
        const float mean = block_sum(acc, red) / (float)n;
        acc = 0.0f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) { /* each thread reads back its own elements */
            const float x = (stage ? nm_row[i] : ldf(s.dt, sx + i * s.nb[0])) - mean;
            acc += x * x;
        }
        const float k = rsqrtf(block_sum(acc, red) / (float)n + eps);
        __syncthreads(); /* dst may alias src: every read of the row is done */
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            float y = ((stage ? nm_row[i] : ldf(s.dt, sx + i * s.nb[0])) - mean) * k;
            if (scx) y *= 1.0f + ldf(sc.dt, scx + i * sc.nb[0]);
            if (shx) y += ldf(sh.dt, shx + i * sh.nb[0]);
            stf(d.dt, dx + i * d.nb[0], y);
        }
    }
}

/* Block-wide double sum (blockDim.x a multiple of RB_WARP, <= 1024); every
 * thread gets the result. */
__device__ __forceinline__ double block_sum_d(double v, double *sh) {
    const int lane = threadIdx.x % RB_WARP, w = threadIdx.x / RB_WARP, nw = blockDim.x / RB_WARP;
#pragma unroll
    for (int m = RB_WARP / 2; m > 0; m >>= 1) v += RB_SHFL_XOR(v, m);
    __syncthreads(); /* sh may still be read by the previous row's reduction */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
#pragma unroll
    for (int m = RB_WARP / 2; m > 0; m >>= 1) v += RB_SHFL_XOR(v, m);
    return v;
}

/* x += delta (in place), h = rms_norm(x) * w; x, delta, h f32; w may have
 * p == NULL. Element i of a row is read and written by the same thread in
 * both passes, so h may be delta's view. */
__global__ void k_add_rms_norm(gt x, gt dl, gt w, gt h, float eps) {
    rb_grid_dep_trigger();
    __shared__ double sh[32];
    const int64_t n = x.ne[0], nrows = x.ne[1] * x.ne[2] * x.ne[3];
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        int64_t c[4];
        row_coords(r, x.ne, c);
        char *xr = x.p + c[1] * x.nb[1] + c[2] * x.nb[2] + c[3] * x.nb[3];
        const char *dr = dl.p + c[1] * dl.nb[1] + c[2] * dl.nb[2] + c[3] * dl.nb[3];
        char *hr = h.p + c[1] * h.nb[1] + c[2] * h.nb[2] + c[3] * h.nb[3];
        double acc = 0.0;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            float *xp = (float *)(xr + i * x.nb[0]);
            const float v = *xp + *(const float *)(dr + i * dl.nb[0]);
            *xp = v;
            acc += (double)v * v;
        }
        const float k = (float)(1.0 / sqrt(block_sum_d(acc, sh) / (double)n + (double)eps));
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            float y = *(const float *)(xr + i * x.nb[0]) * k;
            if (w.p) y *= ldf(w.dt, w.p + i * w.nb[0]);
            *(float *)(hr + i * h.nb[0]) = y;
        }
    }
}

/* Rows of n floats (n % 4 == 0, n <= 4 V blockDim.x), 16-byte aligned:
 * h = rms_norm(x [+ dl]) * w, x updated in place when ADD (x += dl). w: f32
 * contiguous (wvec) or any plain dtype, or NULL. Row r of each is at
 * p + off(r) with off from the view's dims 1..3. Sums of squares in double,
 * as the CPU backend and k_add_rms_norm. h may alias dl (read first). */
template <int V, bool ADD>
__global__ void __launch_bounds__(1024) k_rms_rows(gt x, gt dl, gt w, gt h, float eps, int wvec) {
    rb_grid_dep_trigger();
    rb_grid_dep_wait(); /* launched with gpu_launch_pdl */
    __shared__ double sh[32];
    const int64_t n = x.ne[0], nrows = x.ne[1] * x.ne[2] * x.ne[3];
    const int64_t n4 = n / 4;
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        int64_t c[4];
        row_coords(r, x.ne, c);
        float4 *xr = (float4 *)(x.p + c[1] * x.nb[1] + c[2] * x.nb[2] + c[3] * x.nb[3]);
        const float4 *dr = ADD ? (const float4 *)(dl.p + c[1] * dl.nb[1] + c[2] * dl.nb[2] + c[3] * dl.nb[3]) : NULL;
        float4 *hr = (float4 *)(h.p + c[1] * h.nb[1] + c[2] * h.nb[2] + c[3] * h.nb[3]);
        float4 v[V], wv[V];
#pragma unroll
        for (int j = 0; j < V; j++) {
            const int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
            v[j] = i < n4 ? xr[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            /* the weights' loads fly with the row's, not after the reduction */
            wv[j] = wvec && i < n4 ? ((const float4 *)w.p)[i] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        }
        if (ADD) {
            float4 d[V];
#pragma unroll
            for (int j = 0; j < V; j++) {
                const int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
                d[j] = i < n4 ? dr[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int j = 0; j < V; j++) {
                v[j].x += d[j].x;
                v[j].y += d[j].y;
                v[j].z += d[j].z;
                v[j].w += d[j].w;
            }
        }
        double acc = 0.0;
#pragma unroll
        for (int j = 0; j < V; j++) {
            acc += (double)v[j].x * v[j].x;
            acc += (double)v[j].y * v[j].y;
            acc += (double)v[j].z * v[j].z;
            acc += (double)v[j].w * v[j].w;
        }
        const float k = (float)(1.0 / sqrt(block_sum_d(acc, sh) / (double)n + (double)eps));
#pragma unroll
        for (int j = 0; j < V; j++) {
            const int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
            if (i >= n4) break;
            if (ADD) xr[i] = v[j];
            float4 y = make_float4(v[j].x * k, v[j].y * k, v[j].z * k, v[j].w * k);
            if (wvec) {
                y.x *= wv[j].x;
                y.y *= wv[j].y;
                y.z *= wv[j].z;
                y.w *= wv[j].w;
            } else if (w.p) {
                y.x *= ldf(w.dt, w.p + (4 * i) * w.nb[0]);
                y.y *= ldf(w.dt, w.p + (4 * i + 1) * w.nb[0]);
                y.z *= ldf(w.dt, w.p + (4 * i + 2) * w.nb[0]);
                y.w *= ldf(w.dt, w.p + (4 * i + 3) * w.nb[0]);
            }
            hr[i] = y;
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

/* one block per row, capped (the kernels loop over rows) */
static unsigned row_blocks_gt(const gt &t) {
    const int64_t r = t.ne[1] * t.ne[2] * t.ne[3];
    return (unsigned)(r < 65535LL * 16 ? (r < 1 ? 1 : r) : 65535LL * 16);
}

static unsigned row_blocks(const rb_tensor *t) { return row_blocks_gt(gview(t)); }

/* Rows k_rms_rows can take: f32, contiguous, 16-byte aligned, n % 4 == 0,
 * at most 4 * 8 * 1024 wide. */
static bool rms_rows_ok(const gt &t) {
    return t.dt == RB_F32 && t.nb[0] == 4 && t.ne[0] % 4 == 0 && t.ne[0] <= 4 * 8 * 1024 && ((uintptr_t)t.p & 15) == 0 &&
           t.nb[1] % 16 == 0 && t.nb[2] % 16 == 0 && t.nb[3] % 16 == 0;
}

/* Launches k_rms_rows: 256 threads with V = 1, 2, 4 or 8 float4 each, or
 * 1024 threads with V = 8 for rows past 8192 floats. */
template <bool ADD>
static rb_status rms_rows_launch(rb_backend *be, const gt &x, const gt &dl, const gt &w, const gt &h, float eps,
                                 const char *what) {
    const int64_t n4 = x.ne[0] / 4;
    const int wvec = w.p && w.dt == RB_F32 && w.nb[0] == 4 && ((uintptr_t)w.p & 15) == 0;
    const unsigned blocks = row_blocks_gt(x);
    gpu_backend *g = gb(be);
    const dim3 grid(blocks), b256(256);
    if (n4 <= 256) (void)gpu_launch_pdl(g, true, k_rms_rows<1, ADD>, grid, b256, 0, x, dl, w, h, eps, wvec);
    else if (n4 <= 512) (void)gpu_launch_pdl(g, true, k_rms_rows<2, ADD>, grid, b256, 0, x, dl, w, h, eps, wvec);
    else if (n4 <= 1024) (void)gpu_launch_pdl(g, true, k_rms_rows<4, ADD>, grid, b256, 0, x, dl, w, h, eps, wvec);
    else if (n4 <= 2048) (void)gpu_launch_pdl(g, true, k_rms_rows<8, ADD>, grid, b256, 0, x, dl, w, h, eps, wvec);
    else (void)gpu_launch_pdl(g, true, k_rms_rows<8, ADD>, grid, dim3(1024), 0, x, dl, w, h, eps, wvec);
    return gpu_check_launch(be, what);
}

rb_status gpu_rms_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w, float eps) {
    if (rb_tensor_nelements(src) == 0) return RB_OK;
    const gt s = gview(src), d = gview(dst);
    if (rms_rows_ok(s) && rms_rows_ok(d)) return rms_rows_launch<false>(be, s, s, opt_view(w), d, eps, "rms_norm");
    k_norm<<<row_blocks(src), ROW_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(src), opt_view(w), opt_view(NULL),
                                                               eps, false);
    return gpu_check_launch(be, "rms_norm");
}

rb_status gpu_add_rms_norm(rb_backend *be, rb_tensor *x, const rb_tensor *delta, const rb_tensor *w, float eps,
                           rb_tensor *h) {
    if (rb_tensor_nelements(x) == 0) return RB_OK;
    const gt xv = gview(x), dv = gview(delta), hv = gview(h);
    if (rms_rows_ok(xv) && rms_rows_ok(dv) && rms_rows_ok(hv))
        return rms_rows_launch<true>(be, xv, dv, opt_view(w), hv, eps, "add_rms_norm");
    k_add_rms_norm<<<row_blocks(x), ROW_THREADS, 0, gb(be)->stream>>>(gview(x), gview(delta), opt_view(w), gview(h),
                                                                     eps);
    return gpu_check_launch(be, "add_rms_norm");
}

rb_status gpu_layer_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w,
                         const rb_tensor *b, float eps) {
    if (rb_tensor_nelements(src) == 0) return RB_OK;
    k_norm<<<row_blocks(src), ROW_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(src), opt_view(w), opt_view(b), eps,
                                                               true);
    return gpu_check_launch(be, "layer_norm");
}

/* rows up to this many floats are staged in shared memory (k_norm_mod) */
#define NORM_MOD_STAGE_MAX 8192

rb_status gpu_layer_norm_mod(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *shift,
                             const rb_tensor *scale, float eps) {
    if (rb_tensor_nelements(src) == 0) return RB_OK;
    const int stage = src->ne[0] <= NORM_MOD_STAGE_MAX;
    const size_t smem = stage ? (size_t)src->ne[0] * sizeof(float) : 0;
    k_norm_mod<<<row_blocks(src), ROW_THREADS, smem, gb(be)->stream>>>(gview(dst), gview(src), opt_view(shift),
                                                                      opt_view(scale), eps, stage);
    return gpu_check_launch(be, "layer_norm_mod");
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

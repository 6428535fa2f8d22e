/* GPU group norm (rb_group_norm, rb_group_norm_act): src [W, H, C, N] with
 * C split into G groups, each (group, image) normalised over its W H C/G
 * values, then y = x k + off per channel (k = rstd w[c], off = b[c] -
 * mean k, as the CPU backend computes it) and optionally an activation, in
 * one pass over the data. The statistics are f32 for every dtype, kept as
 * (count, mean, M2) - Welford per thread, Chan's merge across threads and
 * blocks - so a large mean does not cancel the variance. A group of a UNet
 * is large (SD1.5: 40960 values) and there are few of them (64 at batch
 * 2), so each group's values are split over several blocks: k_gn_stats
 * writes a partial per block, k_gn_final merges them into (mean, rstd) per
 * group, k_gn_apply normalises every row. Rows of 4-element multiples,
 * contiguous and aligned, go 4 at a time (ld4 / st4). */
#include "backends/gpu/gpu_common.cuh"

namespace RB_GPU_NS {

#define GN_THREADS 256
#define GN_SPLIT_MAX 64

struct gn_args {
    int G;
    int64_t cg;  /* channels a group */
    int nsplit;  /* blocks a group in k_gn_stats */
    int vec;     /* src (and dst in k_gn_apply) rows in 4-element units */
    float eps;
    int act;     /* RB_UNARY_COUNT_: none */
    float *part; /* [group][split] (n, mean, M2) */
    float *stat; /* [group] (mean, rstd) */
};

__device__ __forceinline__ void gn_push(float &n, float &mean, float &m2, float x) {
    n += 1.0f;
    const float dl = x - mean;
    mean += dl / n;
    m2 += dl * (x - mean);
}

/* (n, mean, M2) += (nb, mb, m2b) */
__device__ __forceinline__ void gn_merge(float &n, float &mean, float &m2, float nb, float mb, float m2b) {
    if (nb == 0.0f) return;
    if (n == 0.0f) {
        n = nb;
        mean = mb;
        m2 = m2b;
        return;
    }
    const float nn = n + nb, dl = mb - mean;
    mean += dl * (nb / nn);
    m2 += m2b + dl * dl * (n * (nb / nn));
    n = nn;
}

/* row r (0 .. cg H) of group g of image n */
__device__ __forceinline__ const char *gn_row(const gt &s, const gn_args &a, int64_t g, int64_t n, int64_t r) {
    const int64_t H = s.ne[1];
    return s.p + (g * a.cg + r / H) * s.nb[2] + (r % H) * s.nb[1] + n * s.nb[3];
}

/* grid (G N, nsplit): partial statistics of a share of one group */
__global__ void __launch_bounds__(GN_THREADS) k_gn_stats(gt s, gn_args a) {
    __shared__ float sh[3][32];
    const int64_t gn = blockIdx.x, g = gn % a.G, n = gn / a.G;
    const int64_t W = s.ne[0], rows = a.cg * s.ne[1];
    const int64_t upr = a.vec ? W / 4 : W, units = rows * upr; /* units: 4-element pieces or elements */
    const int64_t lo = units * blockIdx.y / a.nsplit, hi = units * (blockIdx.y + 1) / a.nsplit;
    float cnt = 0.0f, mean = 0.0f, m2 = 0.0f;
    for (int64_t u = lo + threadIdx.x; u < hi; u += blockDim.x) {
        const char *row = gn_row(s, a, g, n, u / upr);
        const int64_t j = u % upr;
        if (a.vec) {
            float v[4];
            ld4(s.dt, row + j * 4 * s.nb[0], v);
#pragma unroll
            for (int t = 0; t < 4; t++) gn_push(cnt, mean, m2, v[t]);
        } else {
            gn_push(cnt, mean, m2, ldf(s.dt, row + j * s.nb[0]));
        }
    }
    /* the warp, then the block */
#pragma unroll
    for (int m = RB_WARP / 2; m > 0; m >>= 1) {
        const float nb = RB_SHFL_XOR(cnt, m), mb = RB_SHFL_XOR(mean, m), qb = RB_SHFL_XOR(m2, m);
        gn_merge(cnt, mean, m2, nb, mb, qb);
    }
    const int lane = threadIdx.x % RB_WARP, wid = threadIdx.x / RB_WARP, nw = blockDim.x / RB_WARP;
    if (lane == 0) {
        sh[0][wid] = cnt;
        sh[1][wid] = mean;
        sh[2][wid] = m2;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float c = 0.0f, mu = 0.0f, q = 0.0f;
        for (int i = 0; i < nw; i++) gn_merge(c, mu, q, sh[0][i], sh[1][i], sh[2][i]);
        float *p = a.part + (gn * a.nsplit + blockIdx.y) * 3;
        p[0] = c;
        p[1] = mu;
        p[2] = q;
    }
}

/* a thread per group: the splits merged in order, then mean and 1 / sqrt(var + eps) */
__global__ void k_gn_final(gn_args a, int64_t ngroups) {
    const int64_t gn = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (gn >= ngroups) return;
    float c = 0.0f, mu = 0.0f, q = 0.0f;
    for (int i = 0; i < a.nsplit; i++) {
        const float *p = a.part + (gn * a.nsplit + i) * 3;
        gn_merge(c, mu, q, p[0], p[1], p[2]);
    }
    const float var = c > 0.0f ? fmaxf(q / c, 0.0f) : 0.0f;
    a.stat[2 * gn] = mu;
    a.stat[2 * gn + 1] = 1.0f / sqrtf(var + a.eps);
}

/* every row (c, h, n) of the tensor: y = x k + off, then the activation */
__global__ void __launch_bounds__(GN_THREADS) k_gn_apply(gt d, gt s, gt w, gt b, gn_args a) {
    const int64_t W = s.ne[0], H = s.ne[1], C = s.ne[2];
    const int64_t upr = a.vec ? W / 4 : W, units = H * C * s.ne[3] * upr;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < units; u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = u / upr, j = u % upr;
        const int64_t h = r % H, c = (r / H) % C, n = r / (H * C);
        const int64_t gn = n * a.G + c / a.cg;
        const float mu = a.stat[2 * gn], rs = a.stat[2 * gn + 1];
        const float k = rs * (w.p ? ldf(w.dt, w.p + c * w.nb[0]) : 1.0f);
        const float off = (b.p ? ldf(b.dt, b.p + c * b.nb[0]) : 0.0f) - mu * k;
        const char *sr = s.p + h * s.nb[1] + c * s.nb[2] + n * s.nb[3];
        char *dr = d.p + h * d.nb[1] + c * d.nb[2] + n * d.nb[3];
        if (a.vec) {
            float v[4];
            ld4(s.dt, sr + j * 4 * s.nb[0], v);
#pragma unroll
            for (int t = 0; t < 4; t++) {
                v[t] = v[t] * k + off;
                if (a.act != RB_UNARY_COUNT_) v[t] = apply_unary(a.act, v[t]);
            }
            st4(d.dt, dr + j * 4 * d.nb[0], v);
        } else {
            float y = ldf(s.dt, sr + j * s.nb[0]) * k + off;
            if (a.act != RB_UNARY_COUNT_) y = apply_unary(a.act, y);
            stf(d.dt, dr + j * d.nb[0], y);
        }
    }
}

static rb_status gn_run(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups, const rb_tensor *w,
                        const rb_tensor *b, float eps, int act) {
    gpu_backend *g = gb(be);
    if (rb_tensor_nelements(src) == 0) return RB_OK;
    const gt s = gview(src), d = gview(dst);
    gn_args a = {};
    a.G = n_groups;
    a.cg = src->ne[2] / n_groups;
    a.eps = eps;
    a.act = act;
    a.vec = rows4_pair(d, s);
    const int64_t ngroups = (int64_t)n_groups * src->ne[3];
    const int64_t per = a.cg * src->ne[0] * src->ne[1]; /* values a group */
    if (ngroups > 0x7fffffffLL)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_group_norm: %lld groups exceed the GPU grid", (long long)ngroups);
    /* about two blocks a multiprocessor, each at least 4096 values */
    int64_t ns = (2 * (int64_t)g->n_sm + ngroups - 1) / ngroups;
    if (ns > per / 4096) ns = per / 4096;
    if (ns > GN_SPLIT_MAX) ns = GN_SPLIT_MAX;
    a.nsplit = ns < 1 ? 1 : (int)ns;
    void *sp = NULL;
    rb_status st = gpu_scratch(be, (size_t)ngroups * ((size_t)a.nsplit * 3 + 2) * sizeof(float), &sp);
    if (st != RB_OK) return st;
    a.part = (float *)sp;
    a.stat = a.part + ngroups * a.nsplit * 3;
    k_gn_stats<<<dim3((unsigned)ngroups, (unsigned)a.nsplit), GN_THREADS, 0, g->stream>>>(s, a);
    st = gpu_check_launch(be, "group_norm (statistics)");
    if (st != RB_OK) return st;
    k_gn_final<<<(unsigned)((ngroups + 127) / 128), 128, 0, g->stream>>>(a, ngroups);
    st = gpu_check_launch(be, "group_norm (merge)");
    if (st != RB_OK) return st;
    gt wv = {}, bv = {};
    if (w) wv = gview(w);
    if (b) bv = gview(b);
    const int64_t units = rb_tensor_nelements(src) / (a.vec ? 4 : 1);
    k_gn_apply<<<gpu_blocks(units, GN_THREADS), GN_THREADS, 0, g->stream>>>(d, s, wv, bv, a);
    return gpu_check_launch(be, "group_norm");
}

rb_status gpu_group_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups, const rb_tensor *w,
                         const rb_tensor *b, float eps) {
    return gn_run(be, dst, src, n_groups, w, b, eps, RB_UNARY_COUNT_);
}

rb_status gpu_group_norm_act(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups, const rb_tensor *w,
                             const rb_tensor *b, float eps, rb_unary_op act) {
    return gn_run(be, dst, src, n_groups, w, b, eps, (int)act);
}

} // namespace RB_GPU_NS

/* CPU 1-D and 2-D convolution (cross-correlation) with stride, padding,
 * dilation and groups, computed directly (no im2col buffer): one work item
 * is one (batch, output channel) plane, accumulated in f32 from the input
 * planes of its group. x is f32 (conv2d: f32, f16 or bf16) with any
 * strides; w may be f32 or f16 (conv2d: bf16 too); dst takes any float dtype. */
#include "backends/cpu/ops_common.h"

typedef struct conv_ctx {
    rb_cpu_backend *cb;
    rb_tensor *dst;
    const rb_tensor *x, *w, *bias;
    int stride[2], pad[2], dil[2], groups;
    char *scratch;
    size_t stride_b;
} conv_ctx;

static float x_at(const rb_tensor *x, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return rb_cpu_load_f(x->dtype, rb_cpu_data(x) + i0 * x->nb[0] + i1 * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3]);
}

static float bias_at(const conv_ctx *c, int64_t co) {
    return c->bias ? rb_cpu_load_f(RB_F32, rb_cpu_data(c->bias) + co * c->bias->nb[0]) : 0.0f;
}

static void conv1d_task(void *p, int ith, int nth) {
    conv_ctx *c = p;
    const rb_tensor *x = c->x, *w = c->w;
    rb_tensor *d = c->dst;
    const int64_t L = x->ne[0], K = w->ne[0], cin_g = w->ne[1], Cout = w->ne[2], N = x->ne[2];
    const int64_t Lout = d->ne[0], cout_g = Cout / c->groups;
    float *out = (float *)(void *)(c->scratch + (size_t)ith * c->stride_b);
    float *wk = out + Lout;
    int64_t lo, hi;
    rb_cpu_split(N * Cout, ith, nth, &lo, &hi);
    for (int64_t it = lo; it < hi; it++) {
        const int64_t co = it % Cout, n = it / Cout, g = co / cout_g;
        const float b0 = bias_at(c, co);
        for (int64_t o = 0; o < Lout; o++) out[o] = b0;
        for (int64_t cl = 0; cl < cin_g; cl++) {
            const int64_t ci = g * cin_g + cl;
            rb_cpu_row_to_f32(c->cb, w->dtype, rb_cpu_row(w, cl, co, 0), w->nb[0], wk, K);
            for (int64_t kk = 0; kk < K; kk++) {
                const float wv = wk[kk];
                for (int64_t o = 0; o < Lout; o++) {
                    const int64_t ip = o * c->stride[0] - c->pad[0] + kk * c->dil[0];
                    if (ip >= 0 && ip < L) out[o] += wv * x_at(x, ip, ci, n, 0);
                }
            }
        }
        rb_cpu_row_from_f32(c->cb, RB_F32, out, rb_cpu_row(d, co, n, 0), d->nb[0], Lout);
    }
}

static void conv2d_task(void *p, int ith, int nth) {
    conv_ctx *c = p;
    const rb_tensor *x = c->x, *w = c->w;
    rb_tensor *d = c->dst;
    const int64_t W = x->ne[0], H = x->ne[1], N = x->ne[3];
    const int64_t KW = w->ne[0], KH = w->ne[1], cin_g = w->ne[2], Cout = w->ne[3];
    const int64_t Wo = d->ne[0], Ho = d->ne[1], cout_g = Cout / c->groups;
    float *out = (float *)(void *)(c->scratch + (size_t)ith * c->stride_b);
    float *wk = out + Wo * Ho;
    int64_t lo, hi;
    rb_cpu_split(N * Cout, ith, nth, &lo, &hi);
    for (int64_t it = lo; it < hi; it++) {
        const int64_t co = it % Cout, n = it / Cout, g = co / cout_g;
        const float b0 = bias_at(c, co);
        for (int64_t o = 0; o < Wo * Ho; o++) out[o] = b0;
        for (int64_t cl = 0; cl < cin_g; cl++) {
            const int64_t ci = g * cin_g + cl;
            for (int64_t ky = 0; ky < KH; ky++) {
                rb_cpu_row_to_f32(c->cb, w->dtype, rb_cpu_row(w, ky, cl, co), w->nb[0], wk, KW);
                for (int64_t oy = 0; oy < Ho; oy++) {
                    const int64_t iy = oy * c->stride[1] - c->pad[1] + ky * c->dil[1];
                    if (iy < 0 || iy >= H) continue;
                    float *orow = out + oy * Wo;
                    for (int64_t kx = 0; kx < KW; kx++) {
                        const float wv = wk[kx];
                        for (int64_t ox = 0; ox < Wo; ox++) {
                            const int64_t ix = ox * c->stride[0] - c->pad[0] + kx * c->dil[0];
                            if (ix >= 0 && ix < W) orow[ox] += wv * x_at(x, ix, iy, ci, n);
                        }
                    }
                }
            }
        }
        for (int64_t oy = 0; oy < Ho; oy++)
            rb_cpu_row_from_f32(c->cb, d->dtype, out + oy * Wo, rb_cpu_row(d, oy, co, n), d->nb[0], Wo);
    }
}

static rb_status conv_run(rb_cpu_backend *cb, conv_ctx *c, rb_task_fn fn, size_t per_thread_floats, int64_t work) {
    c->cb = cb;
    if (rb_tensor_nelements(c->dst) == 0) return RB_OK;
    int nth = rb_cpu_threads_for(cb, work);
    c->scratch = rb_cpu_scratch_threads(cb, nth, per_thread_floats * sizeof(float), &c->stride_b);
    if (!c->scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, fn, c);
    return RB_OK;
}

rb_status rb_cpu_conv1d(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w, const rb_tensor *bias,
                        int stride, int pad, int dilation, int groups) {
    conv_ctx c = {.dst = dst, .x = x, .w = w, .bias = bias, .stride = {stride, 1}, .pad = {pad, 0},
                  .dil = {dilation, 1}, .groups = groups};
    int64_t work = rb_tensor_nelements(dst) * w->ne[0] * w->ne[1];
    return conv_run(rb_cpu(be), &c, conv1d_task, (size_t)(dst->ne[0] + w->ne[0]), work);
}

rb_status rb_cpu_conv2d(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w, const rb_tensor *bias,
                        const int stride[2], const int pad[2], const int dilation[2], int groups) {
    if (rb_cpu_conv2d_gemm_ok(rb_cpu(be), w, groups)) /* ops_conv_gemm.c */
        return rb_cpu_conv2d_gemm(be, dst, x, w, bias, stride, pad, dilation);
    conv_ctx c = {.dst = dst, .x = x, .w = w, .bias = bias, .stride = {stride[0], stride[1]},
                  .pad = {pad[0], pad[1]}, .dil = {dilation[0], dilation[1]}, .groups = groups};
    int64_t work = rb_tensor_nelements(dst) * w->ne[0] * w->ne[1] * w->ne[2];
    return conv_run(rb_cpu(be), &c, conv2d_task, (size_t)(dst->ne[0] * dst->ne[1] + w->ne[0]), work);
}

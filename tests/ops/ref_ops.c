/* Naive double-precision reference implementations of the ops, written
 * straight from their definitions (no blocking, no online softmax), used by
 * the op tests as the independent ground truth. */
#include "ref_ops.h"

#include <math.h>
#include <stdlib.h>

double ref_unary(rb_unary_op op, double x) {
    switch (op) {
    case RB_UNARY_NEG: return -x;
    case RB_UNARY_ABS: return fabs(x);
    case RB_UNARY_SQR: return x * x;
    case RB_UNARY_SQRT: return sqrt(x);
    case RB_UNARY_RSQRT: return 1.0 / sqrt(x);
    case RB_UNARY_EXP: return exp(x);
    case RB_UNARY_LOG: return log(x);
    case RB_UNARY_SIN: return sin(x);
    case RB_UNARY_COS: return cos(x);
    case RB_UNARY_TANH: return tanh(x);
    case RB_UNARY_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case RB_UNARY_RELU: return x > 0 ? x : 0.0;
    case RB_UNARY_SILU: return x / (1.0 + exp(-x));
    case RB_UNARY_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case RB_UNARY_GELU_TANH: return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case RB_UNARY_RECIP: return 1.0 / x;
    default: return NAN;
    }
}

double ref_binary(rb_binary_op op, double a, double b) {
    switch (op) {
    case RB_BINARY_ADD: return a + b;
    case RB_BINARY_SUB: return a - b;
    case RB_BINARY_MUL: return a * b;
    case RB_BINARY_DIV: return a / b;
    case RB_BINARY_MAX: return a > b ? a : b;
    case RB_BINARY_MIN: return a < b ? a : b;
    default: return NAN;
    }
}

void ref_softmax_row(const double *x, const double *mask, double scale, int64_t n, double *y) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        y[i] = x[i] * scale + (mask ? mask[i] : 0.0);
        if (y[i] > mx) mx = y[i];
    }
    if (mx == -INFINITY) {
        for (int64_t i = 0; i < n; i++) y[i] = 0.0;
        return;
    }
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (y[i] = exp(y[i] - mx));
    for (int64_t i = 0; i < n; i++) y[i] /= s;
}

void ref_rms_norm_row(const double *x, const double *w, double eps, int64_t n, double *y) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    double k = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * k * (w ? w[i] : 1.0);
}

void ref_layer_norm_row(const double *x, const double *w, const double *b, double eps, int64_t n, double *y) {
    double m = 0.0, v = 0.0;
    for (int64_t i = 0; i < n; i++) m += x[i];
    m /= (double)n;
    for (int64_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    v /= (double)n;
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) / sqrt(v + eps) * (w ? w[i] : 1.0) + (b ? b[i] : 0.0);
}

void ref_group_norm(const double *x, const int64_t ne[4], int groups, const double *w, const double *b, double eps,
                    double *y) {
    const int64_t W = ne[0], H = ne[1], C = ne[2], N = ne[3], cg = C / groups;
    for (int64_t n = 0; n < N; n++)
        for (int g = 0; g < groups; g++) {
            double m = 0.0, v = 0.0, cnt = (double)(W * H * cg);
            for (int64_t c = g * cg; c < (g + 1) * cg; c++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t i = 0; i < W; i++) m += x[tf_idx(ne, i, h, c, n)];
            m /= cnt;
            for (int64_t c = g * cg; c < (g + 1) * cg; c++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t i = 0; i < W; i++) {
                        double d = x[tf_idx(ne, i, h, c, n)] - m;
                        v += d * d;
                    }
            v /= cnt;
            for (int64_t c = g * cg; c < (g + 1) * cg; c++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t i = 0; i < W; i++) {
                        int64_t k = tf_idx(ne, i, h, c, n);
                        y[k] = (x[k] - m) / sqrt(v + eps) * (w ? w[c] : 1.0) + (b ? b[c] : 0.0);
                    }
        }
}

void ref_rope(const double *x, const int64_t ne[4], const int32_t *pos, int n_rot, rb_rope_mode mode, double base,
              double freq_scale, double attn_factor, const double *ff, double *y) {
    const int64_t D = ne[0];
    for (int64_t b = 0; b < ne[3]; b++)
        for (int64_t t = 0; t < ne[2]; t++)
            for (int64_t h = 0; h < ne[1]; h++) {
                const double *xr = x + tf_idx(ne, 0, h, t, b);
                double *yr = y + tf_idx(ne, 0, h, t, b);
                for (int64_t i = 0; i < D; i++) yr[i] = xr[i];
                for (int i = 0; i < n_rot / 2; i++) {
                    double th = pos[t] * freq_scale * pow(base, -2.0 * i / n_rot) / (ff ? ff[i] : 1.0);
                    double c = cos(th) * attn_factor, s = sin(th) * attn_factor;
                    int64_t a = mode == RB_ROPE_NEOX ? i : 2 * i, bb = mode == RB_ROPE_NEOX ? i + n_rot / 2 : 2 * i + 1;
                    yr[a] = xr[a] * c - xr[bb] * s;
                    yr[bb] = xr[a] * s + xr[bb] * c;
                }
            }
}

void ref_attention(const double *q, const double *k, const double *v, const int64_t qne[4], const int64_t kne[4],
                   int64_t Dv, const double *mask, double scale, double softcap, bool causal, int window,
                   int64_t q_pos0, double *y) {
    const int64_t D = qne[0], Tq = qne[1], Hq = qne[2], B = qne[3], Tk = kne[1], Hkv = kne[2];
    const int64_t vne[4] = {Dv, Tk, Hkv, B}, yne[4] = {Dv, Hq, Tq, B};
    double *s = malloc((size_t)(Tk > 0 ? Tk : 1) * sizeof(double));
    assert_non_null(s);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t g = h / (Hq / Hkv);
            for (int64_t i = 0; i < Tq; i++) {
                const int64_t pos = q_pos0 + i;
                double mx = -INFINITY;
                for (int64_t j = 0; j < Tk; j++) {
                    double d = 0.0;
                    for (int64_t e = 0; e < D; e++) d += q[tf_idx(qne, e, i, h, b)] * k[tf_idx(kne, e, j, g, b)];
                    d *= scale;
                    if (softcap > 0) d = softcap * tanh(d / softcap);
                    if (mask) d += mask[i * Tk + j];
                    if ((causal && j > pos) || (window > 0 && pos - j >= window)) d = -INFINITY;
                    s[j] = d;
                    if (d > mx) mx = d;
                }
                double *yr = y + tf_idx(yne, 0, h, i, b);
                for (int64_t e = 0; e < Dv; e++) yr[e] = 0.0;
                if (mx == -INFINITY) continue;
                double sum = 0.0;
                for (int64_t j = 0; j < Tk; j++) sum += (s[j] = exp(s[j] - mx));
                for (int64_t j = 0; j < Tk; j++)
                    for (int64_t e = 0; e < Dv; e++) yr[e] += s[j] / sum * v[tf_idx(vne, e, j, g, b)];
            }
        }
    free(s);
}

void ref_conv1d(const double *x, const int64_t xne[4], const double *w, const int64_t wne[4], const double *bias,
                int stride, int pad, int dil, int groups, int64_t lout, double *y) {
    const int64_t L = xne[0], N = xne[2], K = wne[0], cin_g = wne[1], Cout = wne[2], cout_g = Cout / groups;
    const int64_t yne[4] = {lout, Cout, N, 1};
    for (int64_t n = 0; n < N; n++)
        for (int64_t co = 0; co < Cout; co++)
            for (int64_t o = 0; o < lout; o++) {
                double acc = bias ? bias[co] : 0.0;
                for (int64_t cl = 0; cl < cin_g; cl++)
                    for (int64_t kk = 0; kk < K; kk++) {
                        int64_t ip = o * stride - pad + kk * dil;
                        if (ip < 0 || ip >= L) continue;
                        acc += w[tf_idx(wne, kk, cl, co, 0)] * x[tf_idx(xne, ip, (co / cout_g) * cin_g + cl, n, 0)];
                    }
                y[tf_idx(yne, o, co, n, 0)] = acc;
            }
}

void ref_conv2d(const double *x, const int64_t xne[4], const double *w, const int64_t wne[4], const double *bias,
                const int stride[2], const int pad[2], const int dil[2], int groups, int64_t wo, int64_t ho,
                double *y) {
    const int64_t W = xne[0], H = xne[1], N = xne[3], KW = wne[0], KH = wne[1], cin_g = wne[2], Cout = wne[3];
    const int64_t cout_g = Cout / groups, yne[4] = {wo, ho, Cout, N};
    for (int64_t n = 0; n < N; n++)
        for (int64_t co = 0; co < Cout; co++)
            for (int64_t oy = 0; oy < ho; oy++)
                for (int64_t ox = 0; ox < wo; ox++) {
                    double acc = bias ? bias[co] : 0.0;
                    for (int64_t cl = 0; cl < cin_g; cl++)
                        for (int64_t ky = 0; ky < KH; ky++)
                            for (int64_t kx = 0; kx < KW; kx++) {
                                int64_t iy = oy * stride[1] - pad[1] + ky * dil[1];
                                int64_t ix = ox * stride[0] - pad[0] + kx * dil[0];
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                acc += w[tf_idx(wne, kx, ky, cl, co)] *
                                       x[tf_idx(xne, ix, iy, (co / cout_g) * cin_g + cl, n)];
                            }
                    y[tf_idx(yne, ox, oy, co, n)] = acc;
                }
}

/* torch's area-pixel source index for align_corners=false, clamped at 0 */
static double src_coord(int64_t o, int64_t in, int64_t out) {
    double s = (o + 0.5) * (double)in / (double)out - 0.5;
    return s < 0 ? 0 : s;
}

void ref_upsample(const double *x, const int64_t ne[4], int64_t wo, int64_t ho, rb_upsample_mode mode, double *y) {
    const int64_t W = ne[0], H = ne[1], yne[4] = {wo, ho, ne[2], ne[3]};
    for (int64_t n = 0; n < ne[3]; n++)
        for (int64_t c = 0; c < ne[2]; c++)
            for (int64_t oy = 0; oy < ho; oy++)
                for (int64_t ox = 0; ox < wo; ox++) {
                    double r;
                    if (mode == RB_UPSAMPLE_NEAREST) {
                        r = x[tf_idx(ne, ox * W / wo, oy * H / ho, c, n)];
                    } else {
                        double sy = src_coord(oy, H, ho), sx = src_coord(ox, W, wo);
                        int64_t y0 = (int64_t)floor(sy), x0 = (int64_t)floor(sx);
                        int64_t y1 = y0 + 1 < H ? y0 + 1 : H - 1, x1 = x0 + 1 < W ? x0 + 1 : W - 1;
                        double ly = sy - y0, lx = sx - x0;
                        r = (1 - ly) * ((1 - lx) * x[tf_idx(ne, x0, y0, c, n)] + lx * x[tf_idx(ne, x1, y0, c, n)]) +
                            ly * ((1 - lx) * x[tf_idx(ne, x0, y1, c, n)] + lx * x[tf_idx(ne, x1, y1, c, n)]);
                    }
                    y[tf_idx(yne, ox, oy, c, n)] = r;
                }
}

/* CPU row reductions and normalisations: reduce (sum/mean/max/min/argmax),
 * softmax with scale and broadcast additive mask, rms_norm, the fused
 * residual add + rms_norm (same float operations as rb_binary(ADD) then
 * rb_rms_norm, so bit-identical to them), layer_norm, layer_norm with adaLN
 * modulation (the float operations of layer_norm, affine, mul and add, so
 * bit-identical to them in f32) and group_norm. Values are f32; sums
 * accumulate in double so rows of any length stay within ~1e-6 relative.
 * Rows (or groups) are split across threads. */
#include "backends/cpu/ops_common.h"

#include "backends/cpu/llamacpp_numerics.h"

#include <math.h>

typedef enum red_kind { RK_REDUCE, RK_SOFTMAX, RK_RMS, RK_LAYER, RK_ADD_RMS, RK_LAYER_MOD } red_kind;

typedef struct red_ctx {
    rb_cpu_backend *cb;
    red_kind kind;
    rb_reduce_op op;
    rb_tensor *dst;
    const rb_tensor *src, *mask, *w, *b;
    const rb_tensor *delta; /* RK_ADD_RMS: src += delta in place, dst = rms_norm(src) */
    const rb_tensor *shift, *mscale; /* RK_LAYER_MOD: rows broadcast to dst's (nullable) */
    float scale, eps;
    char *scratch;
    size_t stride;
} red_ctx;

/* Loads a [n] parameter vector (w or b) into f32, or leaves NULL. */
static const float *load_param(const red_ctx *c, const rb_tensor *t, float *tmp) {
    if (!t) return NULL;
    rb_cpu_row_to_f32(c->cb, t->dtype, rb_cpu_data(t), t->nb[0], tmp, t->ne[0]);
    return tmp;
}

static void reduce_row(const red_ctx *c, const float *x, int64_t n, char *drow) {
    if (c->op == RB_REDUCE_ARGMAX) {
        int32_t best = 0;
        float bv = x[0];
        for (int64_t i = 1; i < n; i++)
            if (x[i] > bv || (isnan(x[i]) && !isnan(bv))) { /* NaN counts as the maximum */
                bv = x[i];
                best = (int32_t)i;
            }
        memcpy(drow, &best, 4);
        return;
    }
    double r;
    if (c->op == RB_REDUCE_SUM || c->op == RB_REDUCE_MEAN) {
        r = 0.0;
        for (int64_t i = 0; i < n; i++) r += x[i];
        if (c->op == RB_REDUCE_MEAN) r = n ? r / (double)n : NAN;
    } else {
        float m = x[0];
        if (c->op == RB_REDUCE_MAX)
            for (int64_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
        else
            for (int64_t i = 1; i < n; i++) m = x[i] < m ? x[i] : m;
        r = m;
    }
    rb_cpu_store_f(c->dst->dtype, drow, (float)r);
}

static void softmax_row(const red_ctx *c, float *x, int64_t n, int64_t i1, int64_t i2, int64_t i3, float *mtmp) {
    const float *m = NULL;
    if (c->mask) {
        const rb_tensor *mk = c->mask;
        rb_cpu_row_to_f32(c->cb, mk->dtype, rb_cpu_brow(mk, i1, i2, i3), mk->nb[0], mtmp, n);
        m = mtmp;
    }
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] * c->scale + (m ? m[i] : 0.0f);
        x[i] = v;
        mx = v > mx ? v : mx;
    }
    if (mx == -INFINITY) { /* fully masked row */
        for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float e = expf(x[i] - mx);
        x[i] = e;
        sum += e;
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

/* RK_ADD_RMS: x (the loaded src row) += delta's row, stored back to src. */
static void add_row(const red_ctx *c, float *x, int64_t n, int64_t i1, int64_t i2, int64_t i3, float *dtmp) {
    const rb_tensor *d = c->delta, *s = c->src;
    rb_cpu_row_to_f32(c->cb, d->dtype, rb_cpu_row(d, i1, i2, i3), d->nb[0], dtmp, n);
    for (int64_t i = 0; i < n; i++) x[i] = x[i] + dtmp[i];
    rb_cpu_row_from_f32(c->cb, s->dtype, x, rb_cpu_row(s, i1, i2, i3), s->nb[0], n);
}

/* RK_LAYER_MOD: x = x * (1 + scale) + shift with the rows of row (i1, i2, i3) */
static void modulate_row(const red_ctx *c, float *x, int64_t n, int64_t i1, int64_t i2, int64_t i3, float *tmp) {
    if (c->mscale) {
        rb_cpu_row_to_f32(c->cb, c->mscale->dtype, rb_cpu_brow(c->mscale, i1, i2, i3), c->mscale->nb[0], tmp, n);
        for (int64_t i = 0; i < n; i++) tmp[i] = tmp[i] + 1.0f;
        for (int64_t i = 0; i < n; i++) x[i] = x[i] * tmp[i];
    }
    if (c->shift) {
        rb_cpu_row_to_f32(c->cb, c->shift->dtype, rb_cpu_brow(c->shift, i1, i2, i3), c->shift->nb[0], tmp, n);
        for (int64_t i = 0; i < n; i++) x[i] = x[i] + tmp[i];
    }
}

static void norm_row(const red_ctx *c, float *x, int64_t n, const float *w, const float *b) {
    const bool layer = c->kind == RK_LAYER || c->kind == RK_LAYER_MOD;
    if (!layer && c->cb->llamacpp_numerics) {
        const float k = rb_cpu_rms_scale_llamacpp(x, n, c->eps);
        for (int64_t i = 0; i < n; i++) x[i] *= k;
    } else if (!layer) {
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
        const float k = (float)(1.0 / sqrt(ss / (double)n + c->eps));
        for (int64_t i = 0; i < n; i++) x[i] *= k;
    } else {
        double s = 0.0;
        for (int64_t i = 0; i < n; i++) s += x[i];
        const double mean = s / (double)n;
        double v = 0.0;
        for (int64_t i = 0; i < n; i++) v += (x[i] - mean) * (x[i] - mean);
        const float k = (float)(1.0 / sqrt(v / (double)n + c->eps)), mf = (float)mean;
        for (int64_t i = 0; i < n; i++) x[i] = (x[i] - mf) * k;
    }
    if (w)
        for (int64_t i = 0; i < n; i++) x[i] *= w[i];
    if (b)
        for (int64_t i = 0; i < n; i++) x[i] += b[i];
}

static void red_task(void *p, int ith, int nth) {
    red_ctx *c = p;
    const rb_tensor *s = c->src;
    const int64_t n = s->ne[0], nr = rb_tensor_nrows(s);
    float *x = (float *)(void *)(c->scratch + (size_t)ith * c->stride);
    float *t1 = x + n, *t2 = x + 2 * n;
    const float *w = load_param(c, c->w, t1), *b = load_param(c, c->b, t2);
    int64_t lo, hi;
    rb_cpu_split(nr, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const int64_t i1 = r % s->ne[1], i2 = (r / s->ne[1]) % s->ne[2], i3 = r / (s->ne[1] * s->ne[2]);
        rb_cpu_row_to_f32(c->cb, s->dtype, rb_cpu_row(s, i1, i2, i3), s->nb[0], x, n);
        char *drow = rb_cpu_row(c->dst, i1, i2, i3);
        switch (c->kind) {
        case RK_REDUCE: reduce_row(c, x, n, drow); continue;
        case RK_SOFTMAX: softmax_row(c, x, n, i1, i2, i3, t1); break;
        case RK_ADD_RMS: /* t2 is free: there is no b */
            add_row(c, x, n, i1, i2, i3, t2);
            /* fall through - then the rms_norm of the sum */
        case RK_RMS:
        case RK_LAYER: norm_row(c, x, n, w, b); break;
        case RK_LAYER_MOD: /* no w or b: t1 is free */
            norm_row(c, x, n, NULL, NULL);
            modulate_row(c, x, n, i1, i2, i3, t1);
            break;
        }
        rb_cpu_row_from_f32(c->cb, c->dst->dtype, x, drow, c->dst->nb[0], n);
    }
}

static rb_status red_run(rb_backend *be, red_ctx *c, int64_t cost) {
    rb_cpu_backend *cb = rb_cpu(be);
    c->cb = cb;
    const int64_t ne = rb_tensor_nelements(c->src);
    if (rb_tensor_nrows(c->src) == 0) return RB_OK;
    int nth = rb_cpu_threads_for(cb, ne * cost);
    c->scratch = rb_cpu_scratch_threads(cb, nth, (size_t)(c->src->ne[0] > 0 ? c->src->ne[0] : 1) * 3 * sizeof(float),
                                        &c->stride);
    if (!c->scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, red_task, c);
    return RB_OK;
}

rb_status rb_cpu_reduce(rb_backend *be, rb_reduce_op op, rb_tensor *dst, const rb_tensor *src) {
    red_ctx c = {.kind = RK_REDUCE, .op = op, .dst = dst, .src = src};
    return red_run(be, &c, 1);
}

rb_status rb_cpu_softmax(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *mask, float scale) {
    red_ctx c = {.kind = RK_SOFTMAX, .dst = dst, .src = src, .mask = mask, .scale = scale};
    return red_run(be, &c, 8);
}

rb_status rb_cpu_rms_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w, float eps) {
    red_ctx c = {.kind = RK_RMS, .dst = dst, .src = src, .w = w, .eps = eps};
    return red_run(be, &c, 2);
}

rb_status rb_cpu_add_rms_norm(rb_backend *be, rb_tensor *x, const rb_tensor *delta, const rb_tensor *w, float eps,
                              rb_tensor *h) {
    red_ctx c = {.kind = RK_ADD_RMS, .dst = h, .src = x, .delta = delta, .w = w, .eps = eps};
    return red_run(be, &c, 3);
}

rb_status rb_cpu_layer_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w,
                            const rb_tensor *b, float eps) {
    red_ctx c = {.kind = RK_LAYER, .dst = dst, .src = src, .w = w, .b = b, .eps = eps};
    return red_run(be, &c, 3);
}

rb_status rb_cpu_layer_norm_mod(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *shift,
                                const rb_tensor *scale, float eps) {
    red_ctx c = {.kind = RK_LAYER_MOD, .dst = dst, .src = src, .shift = shift, .mscale = scale, .eps = eps};
    return red_run(be, &c, 4);
}

/* ---- group norm: one task item per (group, n) ---- */

typedef struct gn_ctx {
    rb_cpu_backend *cb;
    rb_tensor *dst;
    const rb_tensor *src, *w, *b;
    int n_groups;
    float eps;
    bool has_act;      /* then act(...) of each value rounded through dst's dtype */
    rb_unary_op act;
    char *scratch;
    size_t stride;
} gn_ctx;

static void gn_task(void *p, int ith, int nth) {
    gn_ctx *c = p;
    const rb_tensor *s = c->src;
    const int64_t W = s->ne[0], H = s->ne[1], C = s->ne[2], N = s->ne[3], cg = C / c->n_groups;
    float *x = (float *)(void *)(c->scratch + (size_t)ith * c->stride);
    int64_t lo, hi;
    rb_cpu_split((int64_t)c->n_groups * N, ith, nth, &lo, &hi);
    for (int64_t item = lo; item < hi; item++) {
        const int64_t g = item % c->n_groups, in = item / c->n_groups;
        double sum = 0.0, sq = 0.0;
        for (int64_t ch = g * cg; ch < (g + 1) * cg; ch++)
            for (int64_t h = 0; h < H; h++) {
                rb_cpu_row_to_f32(c->cb, s->dtype, rb_cpu_row(s, h, ch, in), s->nb[0], x, W);
                for (int64_t i = 0; i < W; i++) sum += x[i];
            }
        const double cnt = (double)(W * H * cg), mean = sum / cnt;
        for (int64_t ch = g * cg; ch < (g + 1) * cg; ch++)
            for (int64_t h = 0; h < H; h++) {
                rb_cpu_row_to_f32(c->cb, s->dtype, rb_cpu_row(s, h, ch, in), s->nb[0], x, W);
                for (int64_t i = 0; i < W; i++) sq += (x[i] - mean) * (x[i] - mean);
            }
        const double inv = 1.0 / sqrt(sq / cnt + c->eps);
        for (int64_t ch = g * cg; ch < (g + 1) * cg; ch++) {
            const double wv = c->w ? rb_cpu_load_f(c->w->dtype, rb_cpu_data(c->w) + ch * c->w->nb[0]) : 1.0;
            const double bv = c->b ? rb_cpu_load_f(c->b->dtype, rb_cpu_data(c->b) + ch * c->b->nb[0]) : 0.0;
            const float k = (float)(inv * wv), off = (float)(bv - mean * inv * wv);
            for (int64_t h = 0; h < H; h++) {
                rb_cpu_row_to_f32(c->cb, s->dtype, rb_cpu_row(s, h, ch, in), s->nb[0], x, W);
                for (int64_t i = 0; i < W; i++) x[i] = x[i] * k + off;
                if (c->has_act) {
                    if (c->dst->dtype != RB_F32) /* as the unfused pair: stored, then reloaded */
                        for (int64_t i = 0; i < W; i++) {
                            char v[4];
                            rb_cpu_store_f(c->dst->dtype, v, x[i]);
                            x[i] = rb_cpu_load_f(c->dst->dtype, v);
                        }
                    rb_cpu_unary_row(c->act, x, x, W);
                }
                rb_cpu_row_from_f32(c->cb, c->dst->dtype, x, rb_cpu_row(c->dst, h, ch, in), c->dst->nb[0], W);
            }
        }
    }
}

static rb_status gn_run(rb_backend *be, gn_ctx *c) {
    rb_cpu_backend *cb = rb_cpu(be);
    if (rb_tensor_nelements(c->src) == 0) return RB_OK;
    c->cb = cb;
    int nth = rb_cpu_threads_for(cb, rb_tensor_nelements(c->src) * 4);
    c->scratch = rb_cpu_scratch_threads(cb, nth, (size_t)c->src->ne[0] * sizeof(float), &c->stride);
    if (!c->scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, gn_task, c);
    return RB_OK;
}

rb_status rb_cpu_group_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups, const rb_tensor *w,
                            const rb_tensor *b, float eps) {
    gn_ctx c = {.dst = dst, .src = src, .w = w, .b = b, .n_groups = n_groups, .eps = eps};
    return gn_run(be, &c);
}

rb_status rb_cpu_group_norm_act(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups,
                                const rb_tensor *w, const rb_tensor *b, float eps, rb_unary_op act) {
    gn_ctx c = {.dst = dst, .src = src, .w = w, .b = b, .n_groups = n_groups, .eps = eps, .has_act = true, .act = act};
    return gn_run(be, &c);
}

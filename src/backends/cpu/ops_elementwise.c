/* CPU elementwise ops: fill, affine, unary functions, binary ops with
 * broadcasting, where, and the gated linear unit (act(gate) * up through the
 * same unary_row / binary_row as the unfused pair, so bit-identical to it).
 * Every row is converted to f32 (or used in place when it is contiguous f32),
 * computed in f32, and stored back in the dst dtype; rows are split across
 * the thread pool for large tensors. */
#include "backends/cpu/ops_common.h"

#include <math.h>

typedef enum ew_kind { EW_FILL, EW_AFFINE, EW_UNARY, EW_BINARY, EW_WHERE, EW_GLU } ew_kind;

typedef struct ew_ctx {
    rb_cpu_backend *cb;
    ew_kind kind;
    int op;
    float p0, p1; /* fill value / affine scale, bias */
    rb_tensor *dst;
    const rb_tensor *src[3];
    int nsrc;
    char *scratch;
    size_t stride;
} ew_ctx;

static void unary_row(rb_unary_op op, const float *x, float *y, int64_t n) {
    switch (op) {
    case RB_UNARY_NEG: for (int64_t i = 0; i < n; i++) y[i] = -x[i]; break;
    case RB_UNARY_ABS: for (int64_t i = 0; i < n; i++) y[i] = fabsf(x[i]); break;
    case RB_UNARY_SQR: for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i]; break;
    case RB_UNARY_SQRT: for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]); break;
    case RB_UNARY_RSQRT: for (int64_t i = 0; i < n; i++) y[i] = 1.0f / sqrtf(x[i]); break;
    case RB_UNARY_EXP: for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]); break;
    case RB_UNARY_LOG: for (int64_t i = 0; i < n; i++) y[i] = logf(x[i]); break;
    case RB_UNARY_SIN: for (int64_t i = 0; i < n; i++) y[i] = sinf(x[i]); break;
    case RB_UNARY_COS: for (int64_t i = 0; i < n; i++) y[i] = cosf(x[i]); break;
    case RB_UNARY_TANH: for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]); break;
    case RB_UNARY_SIGMOID: for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i])); break;
    case RB_UNARY_RELU: for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f; break;
    case RB_UNARY_SILU: for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i])); break;
    case RB_UNARY_GELU:
        for (int64_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
        break;
    case RB_UNARY_GELU_TANH:
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            y[i] = 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        }
        break;
    case RB_UNARY_RECIP: for (int64_t i = 0; i < n; i++) y[i] = 1.0f / x[i]; break;
    case RB_UNARY_COUNT_: break;
    }
}

static void binary_row(rb_binary_op op, const float *a, const float *b, float *y, int64_t n) {
    switch (op) {
    case RB_BINARY_ADD: for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i]; break;
    case RB_BINARY_SUB: for (int64_t i = 0; i < n; i++) y[i] = a[i] - b[i]; break;
    case RB_BINARY_MUL: for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i]; break;
    case RB_BINARY_DIV: for (int64_t i = 0; i < n; i++) y[i] = a[i] / b[i]; break;
    case RB_BINARY_MAX: for (int64_t i = 0; i < n; i++) y[i] = fmaxf(a[i], b[i]); break;
    case RB_BINARY_MIN: for (int64_t i = 0; i < n; i++) y[i] = fminf(a[i], b[i]); break;
    case RB_BINARY_COUNT_: break;
    }
}

/* Source row as f32: in place when contiguous f32 and not broadcast along
 * dim 0, else converted into tmp (an extent-1 dim 0 repeats its element). */
static const float *load_src(const ew_ctx *c, const rb_tensor *s, int64_t i1, int64_t i2, int64_t i3, float *tmp) {
    const int64_t n = c->dst->ne[0];
    const char *row = rb_cpu_brow(s, i1, i2, i3);
    size_t stride = s->ne[0] == 1 ? 0 : s->nb[0];
    if (s->dtype == RB_F32 && stride == sizeof(float)) return (const float *)(const void *)row;
    if (s->dtype == RB_I32) { /* where's condition: only != 0 matters */
        for (int64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, row + (size_t)i * stride, 4);
            tmp[i] = v != 0 ? 1.0f : 0.0f;
        }
        return tmp;
    }
    if (stride == 0) {
        float v = rb_cpu_load_f(s->dtype, row);
        for (int64_t i = 0; i < n; i++) tmp[i] = v;
        return tmp;
    }
    rb_cpu_row_to_f32(c->cb, s->dtype, row, stride, tmp, n);
    return tmp;
}

static void ew_task(void *p, int ith, int nth) {
    ew_ctx *c = p;
    rb_tensor *d = c->dst;
    const int64_t n = d->ne[0], nr = rb_tensor_nrows(d);
    float *tmp = (float *)(void *)(c->scratch + (size_t)ith * c->stride);
    float *in[3] = {tmp, tmp + n, tmp + 2 * n};
    float *out = tmp + 3 * n;
    const bool direct = d->dtype == RB_F32 && d->nb[0] == sizeof(float);
    if (d->dtype == RB_I32) { /* fill only */
        int32_t v = (int32_t)c->p0;
        int64_t lo, hi;
        rb_cpu_split(nr, ith, nth, &lo, &hi);
        for (int64_t r = lo; r < hi; r++) {
            char *row = rb_cpu_row(d, r % d->ne[1], (r / d->ne[1]) % d->ne[2], r / (d->ne[1] * d->ne[2]));
            for (int64_t i = 0; i < n; i++) memcpy(row + (size_t)i * d->nb[0], &v, 4);
        }
        return;
    }
    int64_t lo, hi;
    rb_cpu_split(nr, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const int64_t i1 = r % d->ne[1], i2 = (r / d->ne[1]) % d->ne[2], i3 = r / (d->ne[1] * d->ne[2]);
        char *drow = rb_cpu_row(d, i1, i2, i3);
        float *y = direct ? (float *)(void *)drow : out;
        const float *x[3] = {NULL, NULL, NULL};
        for (int s = 0; s < c->nsrc; s++) x[s] = load_src(c, c->src[s], i1, i2, i3, in[s]);
        switch (c->kind) {
        case EW_FILL:
            for (int64_t i = 0; i < n; i++) y[i] = c->p0;
            break;
        case EW_AFFINE:
            for (int64_t i = 0; i < n; i++) y[i] = x[0][i] * c->p0 + c->p1;
            break;
        case EW_UNARY:
            unary_row((rb_unary_op)c->op, x[0], y, n);
            break;
        case EW_BINARY:
            binary_row((rb_binary_op)c->op, x[0], x[1], y, n);
            break;
        case EW_WHERE:
            for (int64_t i = 0; i < n; i++) y[i] = x[0][i] != 0.0f ? x[1][i] : x[2][i];
            break;
        case EW_GLU: /* act(gate) into the free third slot: y may be gate's or up's row */
            unary_row((rb_unary_op)c->op, x[0], in[2], n);
            binary_row(RB_BINARY_MUL, in[2], x[1], y, n);
            break;
        }
        if (!direct) rb_cpu_row_from_f32(c->cb, d->dtype, y, drow, d->nb[0], n);
    }
}

static rb_status ew_run(rb_backend *be, ew_ctx *c) {
    rb_cpu_backend *cb = rb_cpu(be);
    c->cb = cb;
    const int64_t ne = rb_tensor_nelements(c->dst);
    if (ne == 0) return RB_OK;
    int nth = rb_cpu_threads_for(cb, ne * (c->kind == EW_UNARY || c->kind == EW_GLU ? 8 : 1));
    size_t per = (size_t)c->dst->ne[0] * 4 * sizeof(float);
    c->scratch = rb_cpu_scratch_threads(cb, nth, per, &c->stride);
    if (!c->scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, ew_task, c);
    return RB_OK;
}

void rb_cpu_unary_row(rb_unary_op op, const float *x, float *y, int64_t n) { unary_row(op, x, y, n); }

rb_status rb_cpu_fill(rb_backend *be, rb_tensor *dst, float value) {
    ew_ctx c = {.kind = EW_FILL, .p0 = value, .dst = dst};
    return ew_run(be, &c);
}

rb_status rb_cpu_affine(rb_backend *be, rb_tensor *dst, const rb_tensor *src, float scale, float bias) {
    ew_ctx c = {.kind = EW_AFFINE, .p0 = scale, .p1 = bias, .dst = dst, .src = {src}, .nsrc = 1};
    return ew_run(be, &c);
}

rb_status rb_cpu_unary(rb_backend *be, rb_unary_op op, rb_tensor *dst, const rb_tensor *src) {
    ew_ctx c = {.kind = EW_UNARY, .op = (int)op, .dst = dst, .src = {src}, .nsrc = 1};
    return ew_run(be, &c);
}

rb_status rb_cpu_binary(rb_backend *be, rb_binary_op op, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b) {
    ew_ctx c = {.kind = EW_BINARY, .op = (int)op, .dst = dst, .src = {a, b}, .nsrc = 2};
    return ew_run(be, &c);
}

rb_status rb_cpu_where(rb_backend *be, rb_tensor *dst, const rb_tensor *cond, const rb_tensor *a, const rb_tensor *b) {
    ew_ctx c = {.kind = EW_WHERE, .dst = dst, .src = {cond, a, b}, .nsrc = 3};
    return ew_run(be, &c);
}

rb_status rb_cpu_glu(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, rb_unary_op act) {
    ew_ctx c = {.kind = EW_GLU, .op = (int)act, .dst = dst, .src = {gate, up}, .nsrc = 2};
    return ew_run(be, &c);
}

/* Front-ends of every operation in include/rbee/ops.h. Each validates its
 * arguments completely (NULLs, dtypes, shapes, broadcast rules, tensors on
 * `be`, views inside their buffers, parameter ranges, and host-visible index
 * values) and only then dispatches to the backend's vtable, so a failing call
 * writes nothing and rb_backend_last_error names the op and the mismatch. */
#include "core/backend_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct opc {
    rb_backend *be;
    const char *op;
} opc;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static rb_status fail(const opc *c, rb_status code, const char *fmt, ...) {
    char msg[RB_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rb_backend_fail(c->be, code, "%s: %s", c->op, msg);
}

typedef struct desc {
    char s[96];
} desc;
static desc D(const rb_tensor *t) {
    desc d;
    rb_tensor_describe(t, d.s, sizeof d.s);
    return d;
}

static bool is_float(rb_dtype t) { return t == RB_F32 || t == RB_F16 || t == RB_BF16; }
static bool is_quant(rb_dtype t) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t);
    return tr && tr->is_quant;
}

/* Structural checks of one tensor argument: exists, valid dtype, lives in a
 * buffer of `be`, and every element it addresses lies inside that buffer. */
static rb_status check_t(const opc *c, const char *name, const rb_tensor *t) {
    if (!t) return fail(c, RB_E_INVALID, "%s is NULL", name);
    const rb_dtype_traits *tr = rb_dtype_info((int)t->dtype);
    if (!tr) return fail(c, RB_E_INVALID, "%s has invalid dtype id %d", name, (int)t->dtype);
    if (!t->buf) return fail(c, RB_E_INVALID, "%s %s has no buffer", name, D(t).s);
    if (t->buf->backend != c->be)
        return fail(c, RB_E_INVALID, "%s %s lives on backend '%s', not on '%s'", name, D(t).s,
                    t->buf->backend ? t->buf->backend->name : "?", c->be->name);
    bool empty = false;
    for (int i = 0; i < RB_MAX_DIMS; i++) {
        if (t->ne[i] < 0) return fail(c, RB_E_INVALID, "%s %s has a negative extent", name, D(t).s);
        if (t->ne[i] == 0) empty = true;
    }
    if (t->ne[0] % tr->block_size)
        return fail(c, RB_E_INVALID, "%s %s: ne[0] is not a multiple of the %s block size %lld", name, D(t).s,
                    tr->name, (long long)tr->block_size);
    if (empty) return t->offs <= t->buf->size ? RB_OK : fail(c, RB_E_RANGE, "%s offset outside its buffer", name);
    /* offset of the last element, overflow-checked */
    size_t last = 0;
    for (int i = 0; i < RB_MAX_DIMS; i++) {
        size_t n = (size_t)(i == 0 ? t->ne[0] / tr->block_size : t->ne[i]) - 1, step;
        if (n && t->nb[i] > SIZE_MAX / n) goto outside;
        step = n * t->nb[i];
        if (last > SIZE_MAX - step) goto outside;
        last += step;
    }
    if (last > SIZE_MAX - tr->type_size || t->offs > SIZE_MAX - (last + tr->type_size)) goto outside;
    if (t->offs + last + tr->type_size > t->buf->size) goto outside;
    if (tr->is_quant && t->nb[0] != tr->type_size)
        return fail(c, RB_E_INVALID, "%s %s: quantized rows must be contiguous", name, D(t).s);
    return RB_OK;
outside:
    return fail(c, RB_E_RANGE, "%s %s (offset %zu, strides %zu,%zu,%zu,%zu) reaches outside its buffer of %zu bytes",
                name, D(t).s, t->offs, t->nb[0], t->nb[1], t->nb[2], t->nb[3], t->buf->size);
}

static rb_status check_float(const opc *c, const char *name, const rb_tensor *t) {
    rb_status s = check_t(c, name, t);
    if (s != RB_OK) return s;
    if (!is_float(t->dtype))
        return fail(c, RB_E_INVALID, "%s has dtype %s; expected f32, f16 or bf16", name, rb_dtype_name(t->dtype));
    return RB_OK;
}

static rb_status check_dtype(const opc *c, const char *name, const rb_tensor *t, rb_dtype want) {
    rb_status s = check_t(c, name, t);
    if (s != RB_OK) return s;
    if (t->dtype != want)
        return fail(c, RB_E_INVALID, "%s has dtype %s; expected %s", name, rb_dtype_name(t->dtype),
                    rb_dtype_name(want));
    return RB_OK;
}

static rb_status same_shape(const opc *c, const char *an, const rb_tensor *a, const char *bn, const rb_tensor *b) {
    if (!rb_tensor_same_shape(a, b))
        return fail(c, RB_E_INVALID, "shape mismatch: %s %s vs %s %s", an, D(a).s, bn, D(b).s);
    return RB_OK;
}

static rb_status bcast(const opc *c, const char *bn, const rb_tensor *b, const rb_tensor *dst) {
    if (!rb_tensor_can_broadcast(b, dst))
        return fail(c, RB_E_INVALID, "%s %s cannot broadcast to dst %s (each dim must match or be 1)", bn, D(b).s,
                    D(dst).s);
    return RB_OK;
}

static bool nelem_is(const rb_tensor *t, int64_t n) {
    return t->ne[0] == n && t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1;
}

/* ids must be < limit and >= 0; checked here when the ids are host-visible
 * (device backends check their own). Nothing has been written yet. */
static rb_status check_ids(const opc *c, const rb_tensor *ids, int64_t limit, const char *what) {
    const char *base = ids->buf->host_ptr;
    if (!base) return RB_OK;
    base += ids->offs;
    for (int64_t i3 = 0; i3 < ids->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ids->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ids->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < ids->ne[0]; i0++) {
                    int32_t v;
                    memcpy(&v, base + i0 * ids->nb[0] + i1 * ids->nb[1] + i2 * ids->nb[2] + i3 * ids->nb[3],
                           sizeof v);
                    if (v < 0 || v >= limit)
                        return fail(c, RB_E_RANGE, "ids[%lld,%lld,%lld,%lld] = %d out of range [0, %lld) (%s)",
                                    (long long)i0, (long long)i1, (long long)i2, (long long)i3, (int)v,
                                    (long long)limit, what);
                }
    return RB_OK;
}

/* Outputs may not lie in a constant buffer (rb_buffer_set_constant). */
static rb_status writable(const opc *c, const char *name, const rb_tensor *t) {
    if (t && t->buf && t->buf->constant)
        return fail(c, RB_E_INVALID, "%s %s lies in a constant buffer (model weights): ops may not write it", name,
                    D(t).s);
    return RB_OK;
}

#define TRY(x)                                                                                                 \
    do {                                                                                                       \
        rb_status s_ = (x);                                                                                    \
        if (s_ != RB_OK) return s_;                                                                            \
    } while (0)
#define NEED_BE()                                                                                              \
    do {                                                                                                       \
        if (!be) return RB_E_INVALID;                                                                          \
    } while (0)

static const char *unary_name(rb_unary_op op) {
    static const char *const n[RB_UNARY_COUNT_] = {"neg",  "abs",     "sqr",  "sqrt", "rsqrt", "exp",
                                                   "log",  "sin",     "cos",  "tanh", "sigmoid", "relu",
                                                   "silu", "gelu", "gelu_tanh", "recip"};
    return (unsigned)op < RB_UNARY_COUNT_ ? n[op] : "?";
}
static const char *binary_name(rb_binary_op op) {
    static const char *const n[RB_BINARY_COUNT_] = {"add", "sub", "mul", "div", "max", "min"};
    return (unsigned)op < RB_BINARY_COUNT_ ? n[op] : "?";
}

/* ---- elementwise ---- */

rb_status rb_fill(rb_backend *be, rb_tensor *dst, float value) {
    NEED_BE();
    opc c = {be, "rb_fill"};
    TRY(check_t(&c, "dst", dst));
    if (!is_float(dst->dtype) && dst->dtype != RB_I32)
        return fail(&c, RB_E_INVALID, "dst has dtype %s; expected f32, f16, bf16 or i32", rb_dtype_name(dst->dtype));
    TRY(writable(&c, "dst", dst));
    return be->vt->fill(be, dst, value);
}

rb_status rb_affine(rb_backend *be, rb_tensor *dst, const rb_tensor *src, float scale, float bias) {
    NEED_BE();
    opc c = {be, "rb_affine"};
    TRY(check_float(&c, "dst", dst));
    TRY(check_float(&c, "src", src));
    TRY(same_shape(&c, "dst", dst, "src", src));
    TRY(writable(&c, "dst", dst));
    return be->vt->affine(be, dst, src, scale, bias);
}

rb_status rb_unary(rb_backend *be, rb_unary_op op, rb_tensor *dst, const rb_tensor *src) {
    NEED_BE();
    char name[48];
    snprintf(name, sizeof name, "rb_unary(%s)", unary_name(op));
    opc c = {be, name};
    if ((unsigned)op >= RB_UNARY_COUNT_) return fail(&c, RB_E_INVALID, "unknown unary op %d", (int)op);
    TRY(check_float(&c, "dst", dst));
    TRY(check_float(&c, "src", src));
    TRY(same_shape(&c, "dst", dst, "src", src));
    TRY(writable(&c, "dst", dst));
    return be->vt->unary(be, op, dst, src);
}

rb_status rb_binary(rb_backend *be, rb_binary_op op, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b) {
    NEED_BE();
    char name[48];
    snprintf(name, sizeof name, "rb_binary(%s)", binary_name(op));
    opc c = {be, name};
    if ((unsigned)op >= RB_BINARY_COUNT_) return fail(&c, RB_E_INVALID, "unknown binary op %d", (int)op);
    TRY(check_float(&c, "dst", dst));
    TRY(check_float(&c, "a", a));
    TRY(check_float(&c, "b", b));
    TRY(bcast(&c, "a", a, dst));
    TRY(bcast(&c, "b", b, dst));
    TRY(writable(&c, "dst", dst));
    return be->vt->binary(be, op, dst, a, b);
}

rb_status rb_where(rb_backend *be, rb_tensor *dst, const rb_tensor *cond, const rb_tensor *a, const rb_tensor *b) {
    NEED_BE();
    opc c = {be, "rb_where"};
    TRY(check_float(&c, "dst", dst));
    TRY(check_t(&c, "cond", cond));
    if (cond->dtype != RB_I32 && !is_float(cond->dtype))
        return fail(&c, RB_E_INVALID, "cond has dtype %s; expected i32, f32, f16 or bf16",
                    rb_dtype_name(cond->dtype));
    TRY(check_float(&c, "a", a));
    TRY(check_float(&c, "b", b));
    TRY(bcast(&c, "cond", cond, dst));
    TRY(bcast(&c, "a", a, dst));
    TRY(bcast(&c, "b", b, dst));
    TRY(writable(&c, "dst", dst));
    return be->vt->where(be, dst, cond, a, b);
}

/* the activations rb_glu (and rb_matmul_fused's gate) accept */
static bool gate_act(rb_unary_op act) {
    return act == RB_UNARY_SILU || act == RB_UNARY_GELU_TANH || act == RB_UNARY_GELU || act == RB_UNARY_RELU;
}

rb_status rb_glu(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, rb_unary_op act) {
    NEED_BE();
    char name[48];
    snprintf(name, sizeof name, "rb_glu(%s)", unary_name(act));
    opc c = {be, name};
    if (!gate_act(act))
        return fail(&c, RB_E_INVALID, "activation %d (%s) is not a gate activation; expected silu, gelu_tanh, gelu "
                    "or relu", (int)act, unary_name(act));
    TRY(check_float(&c, "dst", dst));
    TRY(check_float(&c, "gate", gate));
    TRY(check_float(&c, "up", up));
    TRY(same_shape(&c, "dst", dst, "gate", gate));
    TRY(same_shape(&c, "dst", dst, "up", up));
    TRY(writable(&c, "dst", dst));
    return be->vt->glu(be, dst, gate, up, act);
}

rb_status rb_swiglu_clamp(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, float alpha,
                          float limit) {
    NEED_BE();
    opc c = {be, "rb_swiglu_clamp"};
    if (!(limit > 0.0f) || !isfinite(limit) || !isfinite(alpha))
        return fail(&c, RB_E_INVALID, "limit %g must be finite and > 0, alpha %g finite", (double)limit, (double)alpha);
    TRY(check_dtype(&c, "dst", dst, RB_F32));
    TRY(check_dtype(&c, "gate", gate, RB_F32));
    TRY(check_dtype(&c, "up", up, RB_F32));
    TRY(same_shape(&c, "dst", dst, "gate", gate));
    TRY(same_shape(&c, "dst", dst, "up", up));
    TRY(writable(&c, "dst", dst));
    if (!be->vt->swiglu_clamp) return fail(&c, RB_E_UNSUPPORTED, "not implemented by backend %s", be->name);
    return be->vt->swiglu_clamp(be, dst, gate, up, alpha, limit);
}

rb_status rb_cast(rb_backend *be, rb_tensor *dst, const rb_tensor *src) {
    NEED_BE();
    opc c = {be, "rb_cast"};
    TRY(check_t(&c, "dst", dst));
    TRY(check_t(&c, "src", src));
    TRY(same_shape(&c, "dst", dst, "src", src));
    bool qs = is_quant(src->dtype), qd = is_quant(dst->dtype);
    if (qs && qd)
        return fail(&c, RB_E_UNSUPPORTED, "cannot convert between two quantized dtypes (%s -> %s)",
                    rb_dtype_name(src->dtype), rb_dtype_name(dst->dtype));
    if (qs && !is_float(dst->dtype))
        return fail(&c, RB_E_INVALID, "dequantizing %s needs a f32/f16/bf16 dst, not %s", rb_dtype_name(src->dtype),
                    rb_dtype_name(dst->dtype));
    if (qd && !is_float(src->dtype))
        return fail(&c, RB_E_INVALID, "quantizing to %s needs a f32/f16/bf16 src, not %s", rb_dtype_name(dst->dtype),
                    rb_dtype_name(src->dtype));
    TRY(writable(&c, "dst", dst));
    return be->vt->cast(be, dst, src);
}

/* ---- reductions and normalisations ---- */

rb_status rb_reduce(rb_backend *be, rb_reduce_op op, rb_tensor *dst, const rb_tensor *src) {
    NEED_BE();
    opc c = {be, "rb_reduce"};
    if ((unsigned)op >= RB_REDUCE_COUNT_) return fail(&c, RB_E_INVALID, "unknown reduce op %d", (int)op);
    TRY(check_t(&c, "dst", dst));
    TRY(check_float(&c, "src", src));
    if (op == RB_REDUCE_ARGMAX) {
        if (dst->dtype != RB_I32)
            return fail(&c, RB_E_INVALID, "argmax dst has dtype %s; expected i32", rb_dtype_name(dst->dtype));
    } else if (!is_float(dst->dtype)) {
        return fail(&c, RB_E_INVALID, "dst has dtype %s; expected f32, f16 or bf16", rb_dtype_name(dst->dtype));
    }
    if (dst->ne[0] != 1 || dst->ne[1] != src->ne[1] || dst->ne[2] != src->ne[2] || dst->ne[3] != src->ne[3])
        return fail(&c, RB_E_INVALID, "dst %s must be [1, %lld, %lld, %lld] for src %s", D(dst).s,
                    (long long)src->ne[1], (long long)src->ne[2], (long long)src->ne[3], D(src).s);
    if (src->ne[0] == 0 && op >= RB_REDUCE_MAX)
        return fail(&c, RB_E_INVALID, "max/min/argmax of an empty row");
    TRY(writable(&c, "dst", dst));
    return be->vt->reduce(be, op, dst, src);
}

rb_status rb_softmax(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *mask, float scale) {
    NEED_BE();
    opc c = {be, "rb_softmax"};
    TRY(check_float(&c, "dst", dst));
    TRY(check_float(&c, "src", src));
    TRY(same_shape(&c, "dst", dst, "src", src));
    if (mask) {
        TRY(check_t(&c, "mask", mask));
        if (mask->dtype != RB_F32 && mask->dtype != RB_F16)
            return fail(&c, RB_E_INVALID, "mask has dtype %s; expected f32 or f16", rb_dtype_name(mask->dtype));
        if (mask->ne[0] != src->ne[0])
            return fail(&c, RB_E_INVALID, "mask %s: ne[0] must equal src ne[0] %lld", D(mask).s,
                        (long long)src->ne[0]);
        TRY(bcast(&c, "mask", mask, src));
    }
    if (!isfinite(scale)) return fail(&c, RB_E_INVALID, "scale %g is not finite", (double)scale);
    TRY(writable(&c, "dst", dst));
    return be->vt->softmax(be, dst, src, mask, scale);
}

static rb_status check_row_param(const opc *c, const char *name, const rb_tensor *w, int64_t n) {
    if (!w) return RB_OK;
    TRY(check_float(c, name, w));
    if (!nelem_is(w, n)) return fail(c, RB_E_INVALID, "%s %s must have shape [%lld]", name, D(w).s, (long long)n);
    return RB_OK;
}

static rb_status check_eps(const opc *c, float eps) {
    if (!(eps >= 0.0f) || !isfinite(eps)) return fail(c, RB_E_INVALID, "eps %g must be finite and >= 0", (double)eps);
    return RB_OK;
}

rb_status rb_rms_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w, float eps) {
    NEED_BE();
    opc c = {be, "rb_rms_norm"};
    TRY(check_float(&c, "dst", dst));
    TRY(check_float(&c, "src", src));
    TRY(same_shape(&c, "dst", dst, "src", src));
    TRY(check_row_param(&c, "w", w, src->ne[0]));
    TRY(check_eps(&c, eps));
    TRY(writable(&c, "dst", dst));
    return be->vt->rms_norm(be, dst, src, w, eps);
}

/* [first, last] bytes a view touches; views are non-empty and checked. */
static void byte_span(const rb_tensor *t, size_t *first, size_t *last) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t->dtype);
    size_t end = t->offs + tr->type_size - 1;
    for (int i = 0; i < RB_MAX_DIMS; i++)
        end += (size_t)((i == 0 ? t->ne[0] / tr->block_size : t->ne[i]) - 1) * t->nb[i];
    *first = t->offs;
    *last = end;
}

/* true when t and u share bytes of one buffer */
static bool overlap(const rb_tensor *t, const rb_tensor *u) {
    if (t->buf != u->buf || rb_tensor_nelements(t) == 0 || rb_tensor_nelements(u) == 0) return false;
    size_t t0, t1, u0, u1;
    byte_span(t, &t0, &t1);
    byte_span(u, &u0, &u1);
    return t0 <= u1 && u0 <= t1;
}

rb_status rb_add_rms_norm(rb_backend *be, rb_tensor *x, const rb_tensor *delta, const rb_tensor *w, float eps,
                          rb_tensor *h) {
    NEED_BE();
    opc c = {be, "rb_add_rms_norm"};
    TRY(check_dtype(&c, "x", x, RB_F32));
    TRY(check_dtype(&c, "delta", delta, RB_F32));
    TRY(check_dtype(&c, "h", h, RB_F32));
    TRY(same_shape(&c, "x", x, "delta", delta));
    TRY(same_shape(&c, "x", x, "h", h));
    TRY(check_row_param(&c, "w", w, x->ne[0]));
    TRY(check_eps(&c, eps));
    if (overlap(x, h))
        return fail(&c, RB_E_INVALID, "h %s overlaps x %s in their buffer (x is updated in place)", D(h).s, D(x).s);
    TRY(writable(&c, "x", x));
    TRY(writable(&c, "h", h));
    return be->vt->add_rms_norm(be, x, delta, w, eps, h);
}

rb_status rb_layer_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w, const rb_tensor *b,
                        float eps) {
    NEED_BE();
    opc c = {be, "rb_layer_norm"};
    TRY(check_float(&c, "dst", dst));
    TRY(check_float(&c, "src", src));
    TRY(same_shape(&c, "dst", dst, "src", src));
    TRY(check_row_param(&c, "w", w, src->ne[0]));
    TRY(check_row_param(&c, "b", b, src->ne[0]));
    TRY(check_eps(&c, eps));
    TRY(writable(&c, "dst", dst));
    return be->vt->layer_norm(be, dst, src, w, b, eps);
}

/* t (nullable) has n elements in dim 0 and broadcasts to dst in dims 1..3 */
static rb_status check_row_bcast(const opc *c, const char *name, const rb_tensor *t, int64_t n, const rb_tensor *dst) {
    if (!t) return RB_OK;
    TRY(check_float(c, name, t));
    if (t->ne[0] != n) return fail(c, RB_E_INVALID, "%s %s must have ne[0] == %lld", name, D(t).s, (long long)n);
    return bcast(c, name, t, dst);
}

rb_status rb_layer_norm_mod(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *shift,
                            const rb_tensor *scale, float eps) {
    NEED_BE();
    opc c = {be, "rb_layer_norm_mod"};
    TRY(check_float(&c, "dst", dst));
    TRY(check_float(&c, "src", src));
    TRY(same_shape(&c, "dst", dst, "src", src));
    TRY(check_row_bcast(&c, "shift", shift, src->ne[0], dst));
    TRY(check_row_bcast(&c, "scale", scale, src->ne[0], dst));
    if ((shift && overlap(dst, shift)) || (scale && overlap(dst, scale)))
        return fail(&c, RB_E_INVALID, "dst %s overlaps shift or scale", D(dst).s);
    TRY(check_eps(&c, eps));
    TRY(writable(&c, "dst", dst));
    if (!be->vt->layer_norm_mod) return fail(&c, RB_E_UNSUPPORTED, "not implemented by backend %s", be->name);
    return be->vt->layer_norm_mod(be, dst, src, shift, scale, eps);
}

rb_status rb_group_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups, const rb_tensor *w,
                        const rb_tensor *b, float eps) {
    NEED_BE();
    opc c = {be, "rb_group_norm"};
    TRY(check_float(&c, "dst", dst));
    TRY(check_float(&c, "src", src));
    TRY(same_shape(&c, "dst", dst, "src", src));
    if (n_groups < 1 || src->ne[2] % n_groups)
        return fail(&c, RB_E_INVALID, "n_groups %d must be >= 1 and divide the %lld channels (dim 2)", n_groups,
                    (long long)src->ne[2]);
    TRY(check_row_param(&c, "w", w, src->ne[2]));
    TRY(check_row_param(&c, "b", b, src->ne[2]));
    TRY(check_eps(&c, eps));
    TRY(writable(&c, "dst", dst));
    return be->vt->group_norm(be, dst, src, n_groups, w, b, eps);
}

rb_status rb_group_norm_act(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups, const rb_tensor *w,
                            const rb_tensor *b, float eps, rb_unary_op act) {
    NEED_BE();
    char name[48];
    snprintf(name, sizeof name, "rb_group_norm_act(%s)", unary_name(act));
    opc c = {be, name};
    if (!gate_act(act))
        return fail(&c, RB_E_INVALID, "activation %d (%s) is not supported; expected silu, gelu_tanh, gelu or relu",
                    (int)act, unary_name(act));
    TRY(check_float(&c, "dst", dst));
    TRY(check_float(&c, "src", src));
    TRY(same_shape(&c, "dst", dst, "src", src));
    if (n_groups < 1 || src->ne[2] % n_groups)
        return fail(&c, RB_E_INVALID, "n_groups %d must be >= 1 and divide the %lld channels (dim 2)", n_groups,
                    (long long)src->ne[2]);
    TRY(check_row_param(&c, "w", w, src->ne[2]));
    TRY(check_row_param(&c, "b", b, src->ne[2]));
    TRY(check_eps(&c, eps));
    TRY(writable(&c, "dst", dst));
    if (be->vt->group_norm_act) return be->vt->group_norm_act(be, dst, src, n_groups, w, b, eps, act);
    rb_status s = be->vt->group_norm(be, dst, src, n_groups, w, b, eps);
    return s != RB_OK ? s : be->vt->unary(be, act, dst, dst);
}

/* ---- indexing ---- */

rb_status rb_get_rows(rb_backend *be, rb_tensor *dst, const rb_tensor *table, const rb_tensor *ids) {
    NEED_BE();
    opc c = {be, "rb_get_rows"};
    TRY(check_float(&c, "dst", dst));
    TRY(check_t(&c, "table", table));
    TRY(check_dtype(&c, "ids", ids, RB_I32));
    if (table->ne[2] != 1 || table->ne[3] != 1)
        return fail(&c, RB_E_INVALID, "table %s must be 2-D [D, V]", D(table).s);
    if (ids->ne[2] != 1 || ids->ne[3] != 1)
        return fail(&c, RB_E_INVALID, "ids %s must be [T] or [T, B]", D(ids).s);
    if (dst->ne[0] != table->ne[0] || dst->ne[1] != ids->ne[0] || dst->ne[2] != ids->ne[1] || dst->ne[3] != 1)
        return fail(&c, RB_E_INVALID, "dst %s must be [%lld, %lld, %lld] for table %s and ids %s", D(dst).s,
                    (long long)table->ne[0], (long long)ids->ne[0], (long long)ids->ne[1], D(table).s, D(ids).s);
    TRY(check_ids(&c, ids, table->ne[1], "table rows"));
    TRY(writable(&c, "dst", dst));
    return be->vt->get_rows(be, dst, table, ids);
}

rb_status rb_index_select(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids, int dim) {
    NEED_BE();
    opc c = {be, "rb_index_select"};
    TRY(check_t(&c, "dst", dst));
    TRY(check_t(&c, "src", src));
    TRY(check_dtype(&c, "ids", ids, RB_I32));
    if (dim < 0 || dim >= RB_MAX_DIMS) return fail(&c, RB_E_INVALID, "dim %d out of range [0, 4)", dim);
    if (is_quant(src->dtype) || is_quant(dst->dtype))
        return fail(&c, RB_E_UNSUPPORTED, "quantized tensors are not supported (use rb_get_rows)");
    if (dst->dtype != src->dtype && !(is_float(dst->dtype) && is_float(src->dtype)))
        return fail(&c, RB_E_INVALID, "dtypes %s -> %s: must be equal or both float", rb_dtype_name(src->dtype),
                    rb_dtype_name(dst->dtype));
    if (!nelem_is(ids, ids->ne[0])) return fail(&c, RB_E_INVALID, "ids %s must be 1-D", D(ids).s);
    for (int i = 0; i < RB_MAX_DIMS; i++) {
        int64_t want = i == dim ? ids->ne[0] : src->ne[i];
        if (dst->ne[i] != want)
            return fail(&c, RB_E_INVALID, "dst %s: ne[%d] must be %lld (src %s, %lld ids on dim %d)", D(dst).s, i,
                        (long long)want, D(src).s, (long long)ids->ne[0], dim);
    }
    TRY(check_ids(&c, ids, src->ne[dim], "src extent of the indexed dim"));
    TRY(writable(&c, "dst", dst));
    return be->vt->index_select(be, dst, src, ids, dim);
}

/* What rb_set_rows (and rb_matmul_fused's store) require of its operands. */
static rb_status check_set_rows(const opc *c, const rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids) {
    TRY(check_float(c, "dst", dst));
    TRY(check_float(c, "src", src));
    TRY(check_dtype(c, "ids", ids, RB_I32));
    if (!nelem_is(ids, ids->ne[0])) return fail(c, RB_E_INVALID, "ids %s must be 1-D", D(ids).s);
    if (src->ne[1] != ids->ne[0])
        return fail(c, RB_E_INVALID, "src %s has %lld rows but ids %s has %lld", D(src).s, (long long)src->ne[1],
                    D(ids).s, (long long)ids->ne[0]);
    if (dst->ne[0] != src->ne[0] || dst->ne[2] != src->ne[2] || dst->ne[3] != src->ne[3])
        return fail(c, RB_E_INVALID, "dst %s and src %s must agree in dims 0, 2 and 3", D(dst).s, D(src).s);
    TRY(check_ids(c, ids, dst->ne[1], "dst slots"));
    return writable(c, "dst", dst);
}

rb_status rb_set_rows(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids) {
    NEED_BE();
    opc c = {be, "rb_set_rows"};
    TRY(check_set_rows(&c, dst, src, ids));
    return be->vt->set_rows(be, dst, src, ids);
}

/* ---- sorting ---- */

rb_status rb_argsort(rb_backend *be, rb_tensor *dst, const rb_tensor *src, bool descending) {
    NEED_BE();
    opc c = {be, "rb_argsort"};
    TRY(check_dtype(&c, "dst", dst, RB_I32));
    TRY(check_t(&c, "src", src));
    if (!is_float(src->dtype) && src->dtype != RB_I32)
        return fail(&c, RB_E_INVALID, "src has dtype %s; expected f32, f16, bf16 or i32", rb_dtype_name(src->dtype));
    TRY(same_shape(&c, "dst", dst, "src", src));
    if (src->ne[0] > INT32_MAX) return fail(&c, RB_E_RANGE, "rows longer than INT32_MAX");
    TRY(writable(&c, "dst", dst));
    return be->vt->argsort(be, dst, src, descending);
}

rb_status rb_topk(rb_backend *be, rb_tensor *values, rb_tensor *indices, const rb_tensor *src, int k) {
    NEED_BE();
    opc c = {be, "rb_topk"};
    TRY(check_float(&c, "src", src));
    TRY(check_t(&c, "values", values));
    TRY(check_dtype(&c, "indices", indices, RB_I32));
    if (values->dtype != src->dtype && values->dtype != RB_F32)
        return fail(&c, RB_E_INVALID, "values has dtype %s; expected %s or f32", rb_dtype_name(values->dtype),
                    rb_dtype_name(src->dtype));
    if (k < 1 || k > src->ne[0])
        return fail(&c, RB_E_INVALID, "k = %d must be in [1, ne0 = %lld]", k, (long long)src->ne[0]);
    const rb_tensor *outs[2] = {values, indices};
    for (int j = 0; j < 2; j++)
        if (outs[j]->ne[0] != k || outs[j]->ne[1] != src->ne[1] || outs[j]->ne[2] != src->ne[2] ||
            outs[j]->ne[3] != src->ne[3])
            return fail(&c, RB_E_INVALID, "%s %s must be [%d, %lld, %lld, %lld]", j ? "indices" : "values",
                        D(outs[j]).s, k, (long long)src->ne[1], (long long)src->ne[2], (long long)src->ne[3]);
    TRY(writable(&c, "values", values));
    TRY(writable(&c, "indices", indices));
    return be->vt->topk(be, values, indices, src, k);
}

/* ---- matmul ---- */

/* a's dtype and the shapes of dst = a^T b (rb_matmul, rb_linear) */
static rb_status check_product(const opc *c, const rb_tensor *dst, const rb_tensor *a, const rb_tensor *b) {
    if (!is_float(a->dtype) && !is_quant(a->dtype))
        return fail(c, RB_E_INVALID, "a has dtype %s; expected f32, f16, bf16 or quantized", rb_dtype_name(a->dtype));
    if (a->ne[0] != b->ne[0])
        return fail(c, RB_E_INVALID, "inner dims differ: a %s vs b %s (ne[0] is K for both)", D(a).s, D(b).s);
    if (a->ne[2] == 0 || a->ne[3] == 0 || b->ne[2] % a->ne[2] || b->ne[3] % a->ne[3])
        return fail(c, RB_E_INVALID, "a %s cannot broadcast over b %s in dims 2/3 (need B2 %% A2 == 0, B3 %% A3 == 0)",
                    D(a).s, D(b).s);
    if (dst->ne[0] != a->ne[1] || dst->ne[1] != b->ne[1] || dst->ne[2] != b->ne[2] || dst->ne[3] != b->ne[3])
        return fail(c, RB_E_INVALID, "dst %s must be [%lld, %lld, %lld, %lld] for a %s, b %s", D(dst).s,
                    (long long)a->ne[1], (long long)b->ne[1], (long long)b->ne[2], (long long)b->ne[3], D(a).s,
                    D(b).s);
    return RB_OK;
}

rb_status rb_matmul(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b) {
    NEED_BE();
    opc c = {be, "rb_matmul"};
    TRY(check_t(&c, "dst", dst));
    TRY(check_t(&c, "a", a));
    TRY(check_float(&c, "b", b));
    if (!is_float(dst->dtype))
        return fail(&c, RB_E_INVALID, "dst has dtype %s; expected f32, f16 or bf16", rb_dtype_name(dst->dtype));
    TRY(check_product(&c, dst, a, b));
    TRY(writable(&c, "dst", dst));
    return be->vt->matmul(be, dst, a, b);
}

/* the same view of the same memory */
static bool same_view(const rb_tensor *t, const rb_tensor *u) {
    if (t->buf != u->buf || t->offs != u->offs || t->dtype != u->dtype) return false;
    for (int i = 0; i < RB_MAX_DIMS; i++)
        if (t->ne[i] != u->ne[i] || t->nb[i] != u->nb[i]) return false;
    return true;
}

rb_status rb_linear(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                    const rb_linear_epilogue *ep) {
    NEED_BE();
    opc c = {be, "rb_linear"};
    const rb_linear_epilogue none = {0};
    if (!ep) ep = &none;
    TRY(check_float(&c, "dst", dst));
    TRY(check_t(&c, "a", a));
    TRY(check_float(&c, "b", b));
    TRY(check_product(&c, dst, a, b));
    const int64_t N = a->ne[1];
    TRY(check_row_param(&c, "bias", ep->bias, N));
    if (ep->has_act && (unsigned)ep->act >= RB_UNARY_COUNT_)
        return fail(&c, RB_E_INVALID, "unknown activation %d", (int)ep->act);
    TRY(check_row_bcast(&c, "gate", ep->gate, N, dst));
    if (ep->res) {
        TRY(check_float(&c, "res", ep->res));
        TRY(same_shape(&c, "res", ep->res, "dst", dst));
        if (overlap(ep->res, dst) && !same_view(ep->res, dst))
            return fail(&c, RB_E_INVALID, "res %s overlaps dst %s without being its view", D(ep->res).s, D(dst).s);
    }
    if (overlap(dst, a) || overlap(dst, b) || (ep->bias && overlap(dst, ep->bias)) ||
        (ep->gate && overlap(dst, ep->gate)))
        return fail(&c, RB_E_INVALID, "dst %s overlaps a, b, bias or gate", D(dst).s);
    TRY(writable(&c, "dst", dst));
    if (!be->vt->linear) return fail(&c, RB_E_UNSUPPORTED, "not implemented by backend %s", be->name);
    return be->vt->linear(be, dst, a, b, ep);
}

rb_status rb_matmul_id(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b, const rb_tensor *ids) {
    NEED_BE();
    opc c = {be, "rb_matmul_id"};
    TRY(check_dtype(&c, "dst", dst, RB_F32));
    TRY(check_t(&c, "a", a));
    TRY(check_float(&c, "b", b));
    TRY(check_dtype(&c, "ids", ids, RB_I32));
    if (!is_float(a->dtype) && !is_quant(a->dtype))
        return fail(&c, RB_E_INVALID, "a has dtype %s; expected f32, f16, bf16 or quantized", rb_dtype_name(a->dtype));
    const int64_t K = a->ne[0], N = a->ne[1], E = a->ne[2], k = ids->ne[0], T = ids->ne[1], S = b->ne[1];
    if (a->ne[3] != 1 || E <= 0) return fail(&c, RB_E_INVALID, "a %s must be [K, N, E] with E > 0", D(a).s);
    if (is_quant(a->dtype) && a->nb[0] != rb_dtype_info((int)a->dtype)->type_size)
        return fail(&c, RB_E_INVALID, "a %s: quantized weights need contiguous rows", D(a).s);
    if (ids->ne[2] != 1 || ids->ne[3] != 1 || k <= 0)
        return fail(&c, RB_E_INVALID, "ids %s must be [k, T] with k > 0", D(ids).s);
    if (b->ne[0] != K || b->ne[2] != T || b->ne[3] != 1 || (S != 1 && S != k))
        return fail(&c, RB_E_INVALID, "b %s must be [K = %lld, 1 or k = %lld, T = %lld]", D(b).s, (long long)K,
                    (long long)k, (long long)T);
    if (dst->ne[0] != N || dst->ne[1] != k || dst->ne[2] != T || dst->ne[3] != 1)
        return fail(&c, RB_E_INVALID, "dst %s must be [N = %lld, k = %lld, T = %lld]", D(dst).s, (long long)N,
                    (long long)k, (long long)T);
    TRY(writable(&c, "dst", dst));
    if (!be->vt->matmul_id) return fail(&c, RB_E_UNSUPPORTED, "not implemented by backend %s", be->name);
    return be->vt->matmul_id(be, dst, a, b, ids);
}

/* What rb_rope (and rb_matmul_fused's rope) require of its operands. */
static rb_status check_rope(const opc *c, const rb_tensor *dst, const rb_tensor *src, const rb_tensor *pos,
                            const rb_rope_params *p) {
    if (!p) return fail(c, RB_E_INVALID, "params are NULL");
    TRY(check_float(c, "dst", dst));
    TRY(check_float(c, "src", src));
    TRY(same_shape(c, "dst", dst, "src", src));
    TRY(check_dtype(c, "pos", pos, RB_I32));
    if (!nelem_is(pos, src->ne[2]))
        return fail(c, RB_E_INVALID, "pos %s must be [T = %lld] (src %s is [head_dim, n_heads, T, B])", D(pos).s,
                    (long long)src->ne[2], D(src).s);
    if (p->n_rot <= 0 || p->n_rot % 2 || p->n_rot > src->ne[0])
        return fail(c, RB_E_INVALID, "n_rot %d must be even, > 0 and <= head_dim %lld", p->n_rot,
                    (long long)src->ne[0]);
    if (p->mode != RB_ROPE_NORMAL && p->mode != RB_ROPE_NEOX)
        return fail(c, RB_E_INVALID, "unknown rope mode %d", (int)p->mode);
    if (!(p->freq_base > 0.0f) || !isfinite(p->freq_base) || !isfinite(p->freq_scale) || !isfinite(p->attn_factor))
        return fail(c, RB_E_INVALID, "freq_base %g must be > 0; freq_scale %g and attn_factor %g finite",
                    (double)p->freq_base, (double)p->freq_scale, (double)p->attn_factor);
    if (p->freq_factors) {
        TRY(check_dtype(c, "freq_factors", p->freq_factors, RB_F32));
        if (!nelem_is(p->freq_factors, p->n_rot / 2))
            return fail(c, RB_E_INVALID, "freq_factors %s must be [n_rot/2 = %d]", D(p->freq_factors).s,
                        p->n_rot / 2);
    }
    return RB_OK;
}

rb_tensor rb_fusion_rope_view(const rb_tensor *dst, const rb_matmul_fusion *f) {
    rb_tensor v = *dst;
    v.ne[0] = f->rope_head_dim;
    v.ne[1] = f->rope_heads;
    v.ne[2] = dst->ne[1];
    v.ne[3] = 1;
    v.nb[1] = (size_t)f->rope_head_dim * dst->nb[0];
    v.nb[2] = dst->nb[1];
    v.nb[3] = dst->nb[1] * (size_t)dst->ne[1];
    return v;
}

rb_tensor rb_fusion_store_view(const rb_tensor *dst, const rb_matmul_fusion *f) {
    rb_tensor v = *dst;
    v.ne[0] = dst->ne[0] - f->store_row0;
    v.offs += (size_t)f->store_row0 * dst->nb[0];
    return v;
}

rb_status rb_matmul_fused(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                          const rb_matmul_fusion *f) {
    NEED_BE();
    opc c = {be, "rb_matmul_fused"};
    if (!f) return fail(&c, RB_E_INVALID, "fusion is NULL");
    TRY(check_t(&c, "dst", dst));
    TRY(check_t(&c, "a", a));
    TRY(check_dtype(&c, "b", b, RB_F32));
    if (f->norm && f->glu) return fail(&c, RB_E_INVALID, "norm and glu cannot both come first");
    if (f->glu_out && (f->glu || f->accumulate))
        return fail(&c, RB_E_INVALID, "glu_out cannot be combined with glu or accumulate");
    if (f->norm) {
        TRY(check_row_param(&c, "norm_w", f->norm_w, b->ne[0]));
        TRY(check_eps(&c, f->eps));
    }
    if ((f->glu || f->glu_out) && !gate_act(f->act))
        return fail(&c, RB_E_INVALID, "activation %d (%s) is not a gate activation", (int)f->act, unary_name(f->act));
    if (f->glu) {
        if (!f->up) return fail(&c, RB_E_INVALID, "glu without up");
        TRY(check_dtype(&c, "up", f->up, RB_F32));
        TRY(same_shape(&c, "up", f->up, "b", b));
    }
    if (f->norm || f->glu) {
        if (!f->tmp_in) return fail(&c, RB_E_INVALID, "tmp_in is needed with norm or glu");
        TRY(check_dtype(&c, "tmp_in", f->tmp_in, RB_F32));
        TRY(same_shape(&c, "tmp_in", f->tmp_in, "b", b));
        TRY(writable(&c, "tmp_in", f->tmp_in));
        if (overlap(f->tmp_in, b) || overlap(f->tmp_in, dst) || (f->glu && overlap(f->tmp_in, f->up)))
            return fail(&c, RB_E_INVALID, "tmp_in %s overlaps b, up or dst", D(f->tmp_in).s);
    }
    if (f->accumulate) {
        TRY(check_dtype(&c, "dst", dst, RB_F32));
        if (!f->tmp_out) return fail(&c, RB_E_INVALID, "tmp_out is needed with accumulate");
        TRY(check_dtype(&c, "tmp_out", f->tmp_out, RB_F32));
        TRY(same_shape(&c, "tmp_out", f->tmp_out, "dst", dst));
        TRY(writable(&c, "tmp_out", f->tmp_out));
        if (overlap(f->tmp_out, dst) || overlap(f->tmp_out, b) || (f->glu && overlap(f->tmp_out, f->up)) ||
            (f->tmp_in && (f->norm || f->glu) && overlap(f->tmp_out, f->tmp_in)))
            return fail(&c, RB_E_INVALID, "tmp_out %s overlaps dst, b, up or tmp_in", D(f->tmp_out).s);
    }
    if (f->glu_out) {
        if (a->ne[1] % 2 != 0)
            return fail(&c, RB_E_INVALID, "glu_out needs an even number of rows in a %s (gate, then up)", D(a).s);
        if (!f->tmp_out) return fail(&c, RB_E_INVALID, "tmp_out is needed with glu_out");
        TRY(check_dtype(&c, "tmp_out", f->tmp_out, RB_F32));
        const rb_tensor *t = f->tmp_out;
        if (t->ne[0] != a->ne[1] || t->ne[1] != b->ne[1] || t->ne[2] != b->ne[2] || t->ne[3] != b->ne[3])
            return fail(&c, RB_E_INVALID, "tmp_out %s must be the whole product [%lld, %lld, %lld, %lld]", D(t).s,
                        (long long)a->ne[1], (long long)b->ne[1], (long long)b->ne[2], (long long)b->ne[3]);
        TRY(writable(&c, "tmp_out", f->tmp_out));
        if (overlap(t, dst) || overlap(t, b) || (f->tmp_in && f->norm && overlap(t, f->tmp_in)))
            return fail(&c, RB_E_INVALID, "tmp_out %s overlaps dst, b or tmp_in", D(t).s);
    }
    rb_tensor rv = {0}; /* rope: dst's first heads as [head_dim, heads, M] */
    if (f->rope) {
        if (f->accumulate || f->glu_out)
            return fail(&c, RB_E_INVALID, "rope cannot be combined with accumulate or glu_out");
        if (dst->ne[2] != 1 || dst->ne[3] != 1 || f->rope_head_dim <= 0 || f->rope_heads <= 0 ||
            f->rope_heads > dst->ne[0] / f->rope_head_dim)
            return fail(&c, RB_E_INVALID, "rope over %lld heads of %lld needs dst %s of [>= heads x head_dim, M]",
                        (long long)f->rope_heads, (long long)f->rope_head_dim, D(dst).s);
        rv = rb_fusion_rope_view(dst, f);
        TRY(check_rope(&c, &rv, &rv, f->rope_pos, f->rope));
    }
    rb_tensor sv = {0}; /* store: dst's rows from store_row0 on, [N - store_row0, M] */
    if (f->store_dst) {
        if (f->accumulate || f->glu_out)
            return fail(&c, RB_E_INVALID, "store cannot be combined with accumulate or glu_out");
        if (dst->ne[2] != 1 || dst->ne[3] != 1 || f->store_row0 < 0 || f->store_row0 >= dst->ne[0])
            return fail(&c, RB_E_INVALID, "store from row %lld needs dst %s of [> store_row0, M]",
                        (long long)f->store_row0, D(dst).s);
        sv = rb_fusion_store_view(dst, f);
        TRY(check_set_rows(&c, f->store_dst, &sv, f->store_ids));
        if (overlap(f->store_dst, dst) || overlap(f->store_dst, b) || overlap(f->store_dst, f->store_ids) ||
            (f->tmp_in && f->norm && overlap(f->store_dst, f->tmp_in)))
            return fail(&c, RB_E_INVALID, "store_dst %s overlaps dst, b, store_ids or tmp_in", D(f->store_dst).s);
    }
    if (overlap(dst, b) || (f->glu && overlap(dst, f->up)))
        return fail(&c, RB_E_INVALID, "dst %s overlaps b or up", D(dst).s);
    const int64_t n_out = f->glu_out ? a->ne[1] / 2 : a->ne[1];
    if (a->ne[0] != b->ne[0] || dst->ne[0] != n_out || dst->ne[1] != b->ne[1] || dst->ne[2] != b->ne[2] ||
        dst->ne[3] != b->ne[3])
        return fail(&c, RB_E_INVALID, "shapes do not multiply%s: dst %s, a %s, b %s",
                    f->glu_out ? " (glu_out: dst has half of a's rows)" : "", D(dst).s, D(a).s, D(b).s);
    TRY(writable(&c, "dst", dst));
    if (be->vt->matmul_fused) {
        const rb_status s = be->vt->matmul_fused(be, dst, a, b, f);
        if (s != RB_E_UNSUPPORTED) return s;
    }
    /* the separate ops (each validates the rest) */
    const rb_tensor *in = b;
    if (f->norm) {
        TRY(rb_rms_norm(be, f->tmp_in, b, f->norm_w, f->eps));
        in = f->tmp_in;
    } else if (f->glu) {
        TRY(rb_glu(be, f->tmp_in, b, f->up, f->act));
        in = f->tmp_in;
    }
    if (f->glu_out) {
        TRY(rb_matmul(be, f->tmp_out, a, in));
        rb_tensor gate = *f->tmp_out, up = *f->tmp_out;
        gate.ne[0] = up.ne[0] = n_out;
        up.offs += (size_t)n_out * up.nb[0];
        return rb_glu(be, dst, &gate, &up, f->act);
    }
    if (f->rope || f->store_dst) {
        TRY(rb_matmul(be, dst, a, in));
        if (f->rope) TRY(rb_rope(be, &rv, &rv, f->rope_pos, f->rope));
        return f->store_dst ? rb_set_rows(be, f->store_dst, &sv, f->store_ids) : RB_OK;
    }
    if (!f->accumulate) return rb_matmul(be, dst, a, in);
    TRY(rb_matmul(be, f->tmp_out, a, in));
    return rb_binary(be, RB_BINARY_ADD, dst, dst, f->tmp_out);
}

/* ---- rope and attention ---- */

rb_status rb_rope(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *pos,
                  const rb_rope_params *p) {
    NEED_BE();
    opc c = {be, "rb_rope"};
    TRY(check_rope(&c, dst, src, pos, p));
    TRY(writable(&c, "dst", dst));
    return be->vt->rope(be, dst, src, pos, p);
}

rb_status rb_attention(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k, const rb_tensor *v,
                       const rb_attn_params *p) {
    NEED_BE();
    opc c = {be, "rb_attention"};
    if (!p) return fail(&c, RB_E_INVALID, "params are NULL");
    TRY(check_float(&c, "dst", dst));
    TRY(check_float(&c, "q", q));
    TRY(check_float(&c, "k", k));
    TRY(check_float(&c, "v", v));
    const int64_t Dk = q->ne[0], Tq = q->ne[1], Hq = q->ne[2], B = q->ne[3];
    const int64_t Tk = k->ne[1], Hkv = k->ne[2], Dv = v->ne[0];
    if (k->ne[0] != Dk) return fail(&c, RB_E_INVALID, "k %s head dim differs from q %s", D(k).s, D(q).s);
    if (v->ne[1] != Tk || v->ne[2] != Hkv || v->ne[3] != k->ne[3])
        return fail(&c, RB_E_INVALID, "v %s must be [Dv, %lld, %lld, %lld] like k %s", D(v).s, (long long)Tk,
                    (long long)Hkv, (long long)k->ne[3], D(k).s);
    if (p->kv_index) {
        TRY(check_dtype(&c, "kv_index", p->kv_index, RB_I32));
        if (!nelem_is(p->kv_index, B))
            return fail(&c, RB_E_INVALID, "kv_index %s must be [B = %lld]", D(p->kv_index).s, (long long)B);
    } else if (k->ne[3] != B) {
        return fail(&c, RB_E_INVALID, "batch of k %s differs from q %s", D(k).s, D(q).s);
    }
    if (Hkv == 0 || Hq % Hkv)
        return fail(&c, RB_E_INVALID, "q heads %lld not a multiple of kv heads %lld", (long long)Hq, (long long)Hkv);
    if (dst->ne[0] != Dv || dst->ne[1] != Hq || dst->ne[2] != Tq || dst->ne[3] != B)
        return fail(&c, RB_E_INVALID, "dst %s must be [%lld, %lld, %lld, %lld] ([Dv, Hq, Tq, B])", D(dst).s,
                    (long long)Dv, (long long)Hq, (long long)Tq, (long long)B);
    if (!isfinite(p->scale) || !(p->softcap >= 0.0f) || !isfinite(p->softcap))
        return fail(&c, RB_E_INVALID, "scale %g must be finite and softcap %g finite and >= 0", (double)p->scale,
                    (double)p->softcap);
    if (p->window < 0 || p->q_pos0 < 0)
        return fail(&c, RB_E_INVALID, "window %d and q_pos0 %lld must be >= 0", p->window, (long long)p->q_pos0);
    if (p->mask) {
        TRY(check_t(&c, "mask", p->mask));
        if (p->mask->dtype != RB_F32 && p->mask->dtype != RB_F16)
            return fail(&c, RB_E_INVALID, "mask has dtype %s; expected f32 or f16", rb_dtype_name(p->mask->dtype));
        if (p->mask->ne[0] != Tk || p->mask->ne[1] != Tq || p->mask->ne[2] != 1 || p->mask->ne[3] != 1)
            return fail(&c, RB_E_INVALID, "mask %s must be [Tk = %lld, Tq = %lld]", D(p->mask).s, (long long)Tk,
                        (long long)Tq);
    }
    if (p->sinks) {
        TRY(check_dtype(&c, "sinks", p->sinks, RB_F32));
        if (!nelem_is(p->sinks, Hq))
            return fail(&c, RB_E_INVALID, "sinks %s must be [Hq = %lld]", D(p->sinks).s, (long long)Hq);
    }
    if (p->q_pos) {
        TRY(check_dtype(&c, "q_pos", p->q_pos, RB_I32));
        if (!p->causal) return fail(&c, RB_E_INVALID, "q_pos needs a causal mask");
        if (p->q_pos->ne[0] != Tq || (p->q_pos->ne[1] != 1 && p->q_pos->ne[1] != B) || p->q_pos->ne[2] != 1 ||
            p->q_pos->ne[3] != 1)
            return fail(&c, RB_E_INVALID, "q_pos %s must be [Tq = %lld] or [Tq, B = %lld]", D(p->q_pos).s,
                        (long long)Tq, (long long)B);
    }
    TRY(writable(&c, "dst", dst));
    return be->vt->attention(be, dst, q, k, v, p);
}

/* ---- convolution and resampling ---- */

static int64_t conv_out(int64_t in, int k, int stride, int pad, int dil) {
    int64_t span = (int64_t)dil * (k - 1) + 1;
    int64_t num = in + 2 * (int64_t)pad - span;
    return num < 0 ? 0 : num / stride + 1;
}

/* conv1d: x f32, w f32/f16; conv2d (half): x f32/f16/bf16, w f32/f16/bf16. */
static rb_status check_conv_w(const opc *c, const rb_tensor *x, const rb_tensor *w, const rb_tensor *bias,
                              int cdim, int groups, bool half) {
    if (half) TRY(check_float(c, "x", x));
    else TRY(check_dtype(c, "x", x, RB_F32));
    TRY(check_t(c, "w", w));
    if (half ? !is_float(w->dtype) : (w->dtype != RB_F32 && w->dtype != RB_F16))
        return fail(c, RB_E_INVALID, "w has dtype %s; expected f32%s", rb_dtype_name(w->dtype),
                    half ? ", f16 or bf16" : " or f16");
    int64_t cin = x->ne[cdim], cout = w->ne[cdim + 1];
    if (groups < 1 || cin % groups || cout % groups)
        return fail(c, RB_E_INVALID, "groups %d must be >= 1 and divide Cin %lld and Cout %lld", groups,
                    (long long)cin, (long long)cout);
    if (w->ne[cdim] != cin / groups)
        return fail(c, RB_E_INVALID, "w %s: input channels ne[%d] must be Cin/groups = %lld (x %s)", D(w).s, cdim,
                    (long long)(cin / groups), D(x).s);
    if (bias) {
        TRY(check_dtype(c, "bias", bias, RB_F32));
        if (!nelem_is(bias, cout)) return fail(c, RB_E_INVALID, "bias %s must be [Cout = %lld]", D(bias).s, (long long)cout);
    }
    return RB_OK;
}

rb_status rb_conv1d(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w, const rb_tensor *bias,
                    int stride, int pad, int dilation, int groups) {
    NEED_BE();
    opc c = {be, "rb_conv1d"};
    TRY(check_dtype(&c, "dst", dst, RB_F32));
    TRY(check_conv_w(&c, x, w, bias, 1, groups, false));
    if (stride < 1 || pad < 0 || dilation < 1)
        return fail(&c, RB_E_INVALID, "stride %d and dilation %d must be >= 1, pad %d >= 0", stride, dilation, pad);
    if (x->ne[3] != 1 || w->ne[3] != 1) return fail(&c, RB_E_INVALID, "x %s and w %s must be 3-D", D(x).s, D(w).s);
    if (w->ne[0] < 1) return fail(&c, RB_E_INVALID, "kernel size must be >= 1");
    int64_t lout = conv_out(x->ne[0], (int)w->ne[0], stride, pad, dilation);
    if (lout < 1) return fail(&c, RB_E_INVALID, "kernel span exceeds the padded input (x %s, w %s)", D(x).s, D(w).s);
    if (dst->ne[0] != lout || dst->ne[1] != w->ne[2] || dst->ne[2] != x->ne[2] || dst->ne[3] != 1)
        return fail(&c, RB_E_INVALID, "dst %s must be [%lld, %lld, %lld]", D(dst).s, (long long)lout,
                    (long long)w->ne[2], (long long)x->ne[2]);
    TRY(writable(&c, "dst", dst));
    return be->vt->conv1d(be, dst, x, w, bias, stride, pad, dilation, groups);
}

rb_status rb_conv2d(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w, const rb_tensor *bias,
                    const int stride[2], const int pad[2], const int dilation[2], int groups) {
    NEED_BE();
    opc c = {be, "rb_conv2d"};
    if (!stride || !pad || !dilation) return fail(&c, RB_E_INVALID, "stride/pad/dilation arrays are NULL");
    TRY(check_float(&c, "dst", dst));
    TRY(check_conv_w(&c, x, w, bias, 2, groups, true));
    for (int i = 0; i < 2; i++)
        if (stride[i] < 1 || pad[i] < 0 || dilation[i] < 1)
            return fail(&c, RB_E_INVALID, "stride %d and dilation %d must be >= 1, pad %d >= 0 (axis %d)", stride[i],
                        dilation[i], pad[i], i);
    if (w->ne[0] < 1 || w->ne[1] < 1) return fail(&c, RB_E_INVALID, "kernel size must be >= 1");
    int64_t wo = conv_out(x->ne[0], (int)w->ne[0], stride[0], pad[0], dilation[0]);
    int64_t ho = conv_out(x->ne[1], (int)w->ne[1], stride[1], pad[1], dilation[1]);
    if (wo < 1 || ho < 1)
        return fail(&c, RB_E_INVALID, "kernel span exceeds the padded input (x %s, w %s)", D(x).s, D(w).s);
    if (dst->ne[0] != wo || dst->ne[1] != ho || dst->ne[2] != w->ne[3] || dst->ne[3] != x->ne[3])
        return fail(&c, RB_E_INVALID, "dst %s must be [%lld, %lld, %lld, %lld]", D(dst).s, (long long)wo,
                    (long long)ho, (long long)w->ne[3], (long long)x->ne[3]);
    TRY(writable(&c, "dst", dst));
    return be->vt->conv2d(be, dst, x, w, bias, stride, pad, dilation, groups);
}

rb_status rb_upsample(rb_backend *be, rb_tensor *dst, const rb_tensor *src, rb_upsample_mode mode) {
    NEED_BE();
    opc c = {be, "rb_upsample"};
    if (mode != RB_UPSAMPLE_NEAREST && mode != RB_UPSAMPLE_BILINEAR)
        return fail(&c, RB_E_INVALID, "unknown mode %d", (int)mode);
    TRY(check_float(&c, "dst", dst));
    TRY(check_float(&c, "src", src));
    if (dst->ne[2] != src->ne[2] || dst->ne[3] != src->ne[3])
        return fail(&c, RB_E_INVALID, "dst %s and src %s must agree in dims 2 and 3", D(dst).s, D(src).s);
    if ((src->ne[0] == 0 || src->ne[1] == 0) && (dst->ne[0] > 0 && dst->ne[1] > 0))
        return fail(&c, RB_E_INVALID, "cannot resize an empty src %s", D(src).s);
    TRY(writable(&c, "dst", dst));
    return be->vt->upsample(be, dst, src, mode);
}

/* CPU rb_cast: dtype conversion and strided-to-contiguous copies. Same dtype
 * copies bytes; f32/f16/bf16 pairs convert rows through f32; other plain
 * dtypes (f64, i8..i64) go element by element through double (float -> int
 * truncates toward zero and saturates, NaN -> 0); quantized sources are
 * dequantized and quantized destinations use the reference quantizer of
 * quant.h row by row. */
#include "backends/cpu/ops_common.h"

#include "rbee/quant.h"

#include <math.h>
#include <stdatomic.h>

typedef struct cast_ctx {
    rb_cpu_backend *cb;
    rb_tensor *dst;
    const rb_tensor *src;
    char *scratch;
    size_t stride;
    atomic_int status; /* first failure of a (de)quantize call */
} cast_ctx;

static bool is_f(rb_dtype t) { return t == RB_F32 || t == RB_F16 || t == RB_BF16; }

static double load_d(rb_dtype t, const char *p) {
    switch (t) {
    case RB_F64: { double v; memcpy(&v, p, 8); return v; }
    case RB_I8: { int8_t v; memcpy(&v, p, 1); return v; }
    case RB_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case RB_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case RB_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    default: return rb_cpu_load_f(t, p);
    }
}

/* Truncates toward zero and clamps to [lo, hi]; NaN -> 0. */
static double to_int_range(double v, double lo, double hi) {
    if (isnan(v)) return 0.0;
    v = trunc(v);
    return v < lo ? lo : v > hi ? hi : v;
}

static void store_d(rb_dtype t, char *p, double v) {
    switch (t) {
    case RB_F64: memcpy(p, &v, 8); break;
    case RB_I8: { int8_t x = (int8_t)to_int_range(v, INT8_MIN, INT8_MAX); memcpy(p, &x, 1); break; }
    case RB_I16: { int16_t x = (int16_t)to_int_range(v, INT16_MIN, INT16_MAX); memcpy(p, &x, 2); break; }
    case RB_I32: { int32_t x = (int32_t)to_int_range(v, INT32_MIN, INT32_MAX); memcpy(p, &x, 4); break; }
    case RB_I64: {
        /* 2^63 is exact in double; anything >= it saturates */
        int64_t x;
        if (isnan(v)) x = 0;
        else if (v >= 9223372036854775808.0) x = INT64_MAX;
        else if (v < -9223372036854775808.0) x = INT64_MIN;
        else x = (int64_t)trunc(v);
        memcpy(p, &x, 8);
        break;
    }
    default: rb_cpu_store_f(t, p, (float)v); break;
    }
}

/* i64 -> i64-ish integer copies must not go through double (precision). */
static bool is_int(rb_dtype t) { return t == RB_I8 || t == RB_I16 || t == RB_I32 || t == RB_I64; }
static int64_t load_i(rb_dtype t, const char *p) {
    switch (t) {
    case RB_I8: { int8_t v; memcpy(&v, p, 1); return v; }
    case RB_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case RB_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    default: { int64_t v; memcpy(&v, p, 8); return v; }
    }
}
static void store_i(rb_dtype t, char *p, int64_t v) {
    switch (t) {
    case RB_I8: { int8_t x = (int8_t)(v < INT8_MIN ? INT8_MIN : v > INT8_MAX ? INT8_MAX : v); memcpy(p, &x, 1); break; }
    case RB_I16: { int16_t x = (int16_t)(v < INT16_MIN ? INT16_MIN : v > INT16_MAX ? INT16_MAX : v); memcpy(p, &x, 2); break; }
    case RB_I32: { int32_t x = (int32_t)(v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : v); memcpy(p, &x, 4); break; }
    default: memcpy(p, &v, 8); break;
    }
}

static void cast_task(void *p, int ith, int nth) {
    cast_ctx *c = p;
    const rb_tensor *s = c->src;
    rb_tensor *d = c->dst;
    const rb_dtype_traits *st = rb_dtype_info((int)s->dtype), *dt = rb_dtype_info((int)d->dtype);
    const int64_t n = d->ne[0], nr = rb_tensor_nrows(d);
    float *tmp = (float *)(void *)(c->scratch + (size_t)ith * c->stride);
    int64_t lo, hi;
    rb_cpu_split(nr, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const int64_t i1 = r % d->ne[1], i2 = (r / d->ne[1]) % d->ne[2], i3 = r / (d->ne[1] * d->ne[2]);
        const char *srow = rb_cpu_row(s, i1, i2, i3);
        char *drow = rb_cpu_row(d, i1, i2, i3);
        if (s->dtype == d->dtype) {
            const int64_t nblk = n / st->block_size;
            if (s->nb[0] == st->type_size && d->nb[0] == dt->type_size)
                memmove(drow, srow, (size_t)nblk * st->type_size);
            else
                for (int64_t i = 0; i < nblk; i++)
                    memmove(drow + (size_t)i * d->nb[0], srow + (size_t)i * s->nb[0], st->type_size);
        } else if (st->is_quant) {
            rb_status e = rb_dequantize_row(s->dtype, srow, tmp, n);
            if (e != RB_OK) atomic_store(&c->status, (int)e);
            rb_cpu_row_from_f32(c->cb, d->dtype, tmp, drow, d->nb[0], n);
        } else if (dt->is_quant) {
            rb_cpu_row_to_f32(c->cb, s->dtype, srow, s->nb[0], tmp, n);
            rb_status e = rb_quantize_row(d->dtype, tmp, drow, n);
            if (e != RB_OK) atomic_store(&c->status, (int)e);
        } else if (is_f(s->dtype) && is_f(d->dtype)) {
            rb_cpu_row_to_f32(c->cb, s->dtype, srow, s->nb[0], tmp, n);
            rb_cpu_row_from_f32(c->cb, d->dtype, tmp, drow, d->nb[0], n);
        } else if (is_int(s->dtype) && is_int(d->dtype)) {
            for (int64_t i = 0; i < n; i++)
                store_i(d->dtype, drow + (size_t)i * d->nb[0], load_i(s->dtype, srow + (size_t)i * s->nb[0]));
        } else {
            for (int64_t i = 0; i < n; i++)
                store_d(d->dtype, drow + (size_t)i * d->nb[0], load_d(s->dtype, srow + (size_t)i * s->nb[0]));
        }
    }
}

rb_status rb_cpu_cast(rb_backend *be, rb_tensor *dst, const rb_tensor *src) {
    rb_cpu_backend *cb = rb_cpu(be);
    if (rb_dtype_info((int)dst->dtype)->is_quant && !rb_quant_can_quantize(dst->dtype))
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_cast: cannot quantize to %s", rb_dtype_name(dst->dtype));
    const int64_t ne = rb_tensor_nelements(dst);
    if (ne == 0) return RB_OK;
    cast_ctx c = {.cb = cb, .dst = dst, .src = src};
    atomic_init(&c.status, RB_OK);
    bool quant = rb_dtype_info((int)dst->dtype)->is_quant || rb_dtype_info((int)src->dtype)->is_quant;
    int nth = rb_cpu_threads_for(cb, quant ? ne * 16 : ne);
    c.scratch = rb_cpu_scratch_threads(cb, nth, (size_t)dst->ne[0] * sizeof(float), &c.stride);
    if (!c.scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, cast_task, &c);
    int st = atomic_load(&c.status);
    if (st != RB_OK)
        return rb_backend_fail(be, (rb_status)st, "rb_cast: converting %s -> %s failed in the quant codec",
                               rb_dtype_name(src->dtype), rb_dtype_name(dst->dtype));
    return RB_OK;
}

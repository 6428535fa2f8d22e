/* Test-tensor plumbing for the op tests (see ref_ops.h): backends for each
 * test configuration, tensors in contiguous / permuted / sliced layouts with
 * a double shadow of their values, read-back, padding checks and tolerant
 * comparisons. */
#include "ref_ops.h"

#include "rbee/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const tf_cfg tf_cfgs[] = {{"scalar", 1}, {NULL, 1}, {NULL, 3}};
const int tf_ncfgs = 3;

rb_backend *tf_backend(const tf_cfg *cfg) {
    rb_backend_config bc = {.n_threads = cfg->n_threads, .cpu_isa = cfg->isa};
    rb_backend *be = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_backend_create("cpu", &bc, &be, &err) != RB_OK) fail_msg("backend: %s", err.msg);
    return be;
}

static double round_to(rb_dtype dt, double v) {
    switch (dt) {
    case RB_F32: return (float)v;
    case RB_F16: return rb_f16_to_f32(rb_f32_to_f16((float)v));
    case RB_BF16: return rb_bf16_to_f32(rb_f32_to_bf16((float)v));
    default: return v;
    }
}

static void encode(rb_dtype dt, unsigned char *p, double v) {
    switch (dt) {
    case RB_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case RB_F16: { rb_f16 h = rb_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
    case RB_BF16: { rb_bf16 h = rb_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case RB_F64: memcpy(p, &v, 8); break;
    case RB_I8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case RB_I16: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
    case RB_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case RB_I64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    default: fail_msg("encode: dtype %s", rb_dtype_name(dt));
    }
}

static double decode(rb_dtype dt, const unsigned char *p) {
    switch (dt) {
    case RB_F32: { float f; memcpy(&f, p, 4); return f; }
    case RB_F16: { rb_f16 h; memcpy(&h, p, 2); return rb_f16_to_f32(h); }
    case RB_BF16: { rb_bf16 h; memcpy(&h, p, 2); return rb_bf16_to_f32(h); }
    case RB_F64: { double d; memcpy(&d, p, 8); return d; }
    case RB_I8: { int8_t x; memcpy(&x, p, 1); return x; }
    case RB_I16: { int16_t x; memcpy(&x, p, 2); return x; }
    case RB_I32: { int32_t x; memcpy(&x, p, 4); return x; }
    case RB_I64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    default: fail_msg("decode: dtype %s", rb_dtype_name(dt));
    }
    return 0;
}

static size_t elem_offs(const rb_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return t->offs + (size_t)i0 * t->nb[0] + (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] + (size_t)i3 * t->nb[3];
}

/* Builds the view and allocates the parent; returns parent bytes. */
static size_t layout(rb_backend *be, rb_dtype dt, const int64_t ne[4], tf_layout lay, tt *x) {
    const rb_dtype_traits *tr = rb_dtype_info((int)dt);
    assert_non_null(tr);
    if (tr->is_quant) assert_int_equal(lay, TF_CONTIG);
    rb_tensor t;
    TU_OK(rb_tensor_init(&t, dt, 4, ne, NULL, 0));
    size_t total = rb_tensor_nbytes_contig(&t), es = tr->type_size;
    if (lay == TF_PERM) {
        static const int phys[4] = {1, 0, 3, 2};
        size_t s = es;
        for (int j = 0; j < 4; j++) {
            t.nb[phys[j]] = s;
            s *= (size_t)ne[phys[j]];
        }
        total = s;
    } else if (lay == TF_SLICE) {
        int64_t pe[4] = {ne[0] + 3, ne[1] + 1, ne[2] + 1, ne[3] + 1};
        size_t s = es;
        for (int j = 0; j < 4; j++) {
            t.nb[j] = s;
            s *= (size_t)pe[j];
        }
        t.offs = es + t.nb[1];
        total = s;
    }
    if (total == 0) total = 1;
    TU_OK(rb_buffer_alloc(be, total, &x->buf));
    t.buf = x->buf;
    x->t = t;
    return total;
}

static void finish(tt *x, unsigned char *bytes, size_t total) {
    TU_OK(rb_buffer_set(x->buf, 0, bytes, total));
    x->orig = bytes;
    x->mask = calloc(total, 1);
    assert_non_null(x->mask);
    const rb_tensor *t = &x->t;
    const rb_dtype_traits *tr = rb_dtype_info((int)t->dtype);
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t b = 0; b < t->ne[0] / tr->block_size; b++)
                    memset(x->mask + elem_offs(t, b, i1, i2, i3), 1, tr->type_size);
}

tt tf_from(rb_backend *be, rb_dtype dt, const int64_t ne[4], tf_layout lay, const double *vals) {
    tt x;
    memset(&x, 0, sizeof x);
    size_t total = layout(be, dt, ne, lay, &x);
    x.n = ne[0] * ne[1] * ne[2] * ne[3];
    x.v = malloc((size_t)(x.n > 0 ? x.n : 1) * sizeof(double));
    unsigned char *bytes = malloc(total);
    assert_true(x.v && bytes);
    for (size_t i = 0; i < total; i++) bytes[i] = (unsigned char)(0x5a ^ (i * 131u)); /* noise */
    const rb_dtype_traits *tr = rb_dtype_info((int)dt);
    if (tr->is_quant) {
        int64_t nr = ne[1] * ne[2] * ne[3];
        float *row = malloc((size_t)ne[0] * sizeof(float));
        assert_non_null(row);
        for (int64_t r = 0; r < nr; r++) {
            for (int64_t i = 0; i < ne[0]; i++) row[i] = (float)vals[r * ne[0] + i];
            unsigned char *dst = bytes + (size_t)r * x.t.nb[1];
            TU_OK(rb_quantize_row(dt, row, dst, ne[0]));
            TU_OK(rb_dequantize_row(dt, dst, row, ne[0]));
            for (int64_t i = 0; i < ne[0]; i++) x.v[r * ne[0] + i] = row[i];
        }
        free(row);
    } else {
        for (int64_t i3 = 0; i3 < ne[3]; i3++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++)
                for (int64_t i1 = 0; i1 < ne[1]; i1++)
                    for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                        int64_t k = tf_idx(ne, i0, i1, i2, i3);
                        double v = round_to(dt, vals[k]);
                        x.v[k] = v;
                        encode(dt, bytes + elem_offs(&x.t, i0, i1, i2, i3), v);
                        x.v[k] = decode(dt, bytes + elem_offs(&x.t, i0, i1, i2, i3));
                    }
    }
    finish(&x, bytes, total);
    return x;
}

tt tf_make(rb_backend *be, tu_rng *rng, rb_dtype dt, const int64_t ne[4], tf_layout lay, float lo, float hi) {
    int64_t n = ne[0] * ne[1] * ne[2] * ne[3];
    double *vals = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    assert_non_null(vals);
    const rb_dtype_traits *tr = rb_dtype_info((int)dt);
    for (int64_t i = 0; i < n; i++) {
        double u = tu_rng_range(rng, lo, hi);
        vals[i] = tr->is_float || tr->is_quant ? u : floor(u);
    }
    tt x = tf_from(be, dt, ne, lay, vals);
    free(vals);
    return x;
}

void tf_free(tt *x) {
    rb_buffer_free(x->buf);
    free(x->v);
    free(x->orig);
    free(x->mask);
    memset(x, 0, sizeof *x);
}

static unsigned char *parent_bytes(const tt *x) {
    size_t total = rb_buffer_size(x->buf);
    unsigned char *b = malloc(total ? total : 1);
    assert_non_null(b);
    TU_OK(rb_buffer_get(x->buf, 0, b, total));
    return b;
}

double *tf_read(const tt *x) {
    unsigned char *b = parent_bytes(x);
    const rb_tensor *t = &x->t;
    double *out = malloc((size_t)(x->n > 0 ? x->n : 1) * sizeof(double));
    assert_non_null(out);
    const rb_dtype_traits *tr = rb_dtype_info((int)t->dtype);
    if (tr->is_quant) {
        float *row = malloc((size_t)t->ne[0] * sizeof(float));
        assert_non_null(row);
        for (int64_t r = 0; r < t->ne[1] * t->ne[2] * t->ne[3]; r++) {
            TU_OK(rb_dequantize_row(t->dtype, b + t->offs + (size_t)r * t->nb[1], row, t->ne[0]));
            for (int64_t i = 0; i < t->ne[0]; i++) out[r * t->ne[0] + i] = row[i];
        }
        free(row);
    } else {
        for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
                        out[tf_idx(t->ne, i0, i1, i2, i3)] = decode(t->dtype, b + elem_offs(t, i0, i1, i2, i3));
    }
    free(b);
    return out;
}

bool tf_pad_intact(const tt *x) {
    unsigned char *b = parent_bytes(x);
    size_t total = rb_buffer_size(x->buf);
    bool ok = true;
    for (size_t i = 0; i < total && ok; i++)
        if (!x->mask[i] && b[i] != x->orig[i]) ok = false;
    free(b);
    return ok;
}

bool tf_unchanged(const tt *x) {
    unsigned char *b = parent_bytes(x);
    bool ok = memcmp(b, x->orig, rb_buffer_size(x->buf)) == 0;
    free(b);
    return ok;
}

void tf_expect_close(const double *got, const double *ref, int64_t n, double rtol, double atol, const char *what) {
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        if (isnan(r) && isnan(g)) continue;
        if (isinf(r) || isinf(g)) {
            if (g != r) fail_msg("%s: element %lld = %.9g, expected %.9g", what, (long long)i, g, r);
            continue;
        }
        if (!(fabs(g - r) <= atol + rtol * fabs(r)))
            fail_msg("%s: element %lld = %.9g, expected %.9g (|diff| %.3g > atol %.1g + rtol %.1g * |ref|)", what,
                     (long long)i, g, r, fabs(g - r), atol, rtol);
    }
}

double tf_tol(rb_dtype dt, double base) {
    switch (dt) {
    case RB_F16: return base + 1.0 / 2048;
    case RB_BF16: return base + 1.0 / 256;
    default: return base;
    }
}

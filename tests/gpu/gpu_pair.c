/* Implementation of the CPU/GPU tensor pairs of gpu_pair.h. */
#include "gpu_pair.h"

#include "rbee/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rb_backend *gp_gpu(void) {
    const char *env = getenv("RBEE_TEST_GPU");
    const char *specs[] = {env && *env ? env : "cuda:0", "rocm:0"};
    for (int i = 0; i < (env && *env ? 1 : 2); i++) {
        rb_backend *be = NULL;
        rb_error err;
        rb_error_clear(&err);
        if (rb_backend_create(specs[i], NULL, &be, &err) == RB_OK) return be;
    }
    return NULL;
}

rb_backend *gp_cpu(void) {
    rb_backend *be = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_backend_create("cpu", NULL, &be, &err) != RB_OK) fail_msg("cpu backend: %s", err.msg);
    return be;
}

static void encode(rb_dtype dt, unsigned char *p, float v) {
    switch (dt) {
    case RB_F32: memcpy(p, &v, 4); break;
    case RB_F16: { rb_f16 h = rb_f32_to_f16(v); memcpy(p, &h, 2); break; }
    case RB_BF16: { rb_bf16 h = rb_f32_to_bf16(v); memcpy(p, &h, 2); break; }
    case RB_I32: { int32_t x = (int32_t)floorf(v); memcpy(p, &x, 4); break; }
    default: fail_msg("encode: dtype %s", rb_dtype_name(dt));
    }
}

static double decode(rb_dtype dt, const unsigned char *p) {
    switch (dt) {
    case RB_F32: { float f; memcpy(&f, p, 4); return f; }
    case RB_F16: { rb_f16 h; memcpy(&h, p, 2); return rb_f16_to_f32(h); }
    case RB_BF16: { rb_bf16 h; memcpy(&h, p, 2); return rb_bf16_to_f32(h); }
    case RB_I32: { int32_t x; memcpy(&x, p, 4); return x; }
    default: fail_msg("decode: dtype %s", rb_dtype_name(dt));
    }
    return 0;
}

static void init_view(rb_tensor *t, rb_dtype dt, const int64_t ne[4], gp_layout lay, size_t *parent) {
    const rb_dtype_traits *tr = rb_dtype_info((int)dt);
    const size_t es = tr->type_size;
    const int64_t bs = tr->block_size;
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    for (int i = 0; i < 4; i++) t->ne[i] = ne[i];
    if (lay == GP_PERM) {
        assert_int_equal(bs, 1);
        t->nb[1] = es;
        t->nb[0] = es * (size_t)ne[1];
        t->nb[2] = t->nb[0] * (size_t)ne[0];
        t->nb[3] = t->nb[2] * (size_t)ne[2];
        *parent = t->nb[3] * (size_t)ne[3];
        return;
    }
    const bool pad = lay == GP_SLICE || lay == GP_PAD;
    const int64_t p0 = pad ? ne[0] + 3 * bs : ne[0], p1 = pad ? ne[1] + 2 : ne[1];
    t->nb[0] = es;
    t->nb[1] = es * (size_t)(p0 / bs);
    t->nb[2] = t->nb[1] * (size_t)p1;
    t->nb[3] = t->nb[2] * (size_t)ne[2];
    *parent = t->nb[3] * (size_t)ne[3];
    t->offs = lay == GP_SLICE ? es + t->nb[1] : 0;
}

static gp make_from(rb_backend *cpu, rb_backend *gpu, const rb_tensor *shape, size_t size, unsigned char *bytes) {
    gp x;
    memset(&x, 0, sizeof x);
    x.size = size ? size : 1;
    x.orig = bytes;
    TU_OK(rb_buffer_alloc(cpu, x.size, &x.cb));
    TU_OK(rb_buffer_set(x.cb, 0, bytes, x.size));
    x.c = *shape;
    x.c.buf = x.cb;
    if (gpu) {
        TU_OK(rb_buffer_alloc(gpu, x.size, &x.gb));
        TU_OK(rb_buffer_set(x.gb, 0, bytes, x.size));
        x.g = *shape;
        x.g.buf = x.gb;
    }
    return x;
}

gp gp_make(rb_backend *cpu, rb_backend *gpu, tu_rng *rng, rb_dtype dt, const int64_t ne[4], gp_layout lay,
           float lo, float hi) {
    rb_tensor t;
    size_t size = 0;
    init_view(&t, dt, ne, lay, &size);
    unsigned char *bytes = malloc(size ? size : 1);
    assert_non_null(bytes);
    const rb_dtype_traits *tr = rb_dtype_info((int)dt);
    if (dt == RB_IQ4_NL || dt == RB_IQ4_XS || dt == RB_IQ3_XXS || dt == RB_IQ3_S || dt == RB_IQ2_XXS ||
        dt == RB_IQ2_XS || dt == RB_IQ2_S || dt == RB_IQ1_S || dt == RB_IQ1_M) {
        /* no encoder for the iq formats: random indices, signs and scales,
         * each block's f16 d set so values stay within about 2 max(|lo|, |hi|)
         * (iq1_m keeps d in the top nibbles of its 4 scale words, bytes 48-55) */
        for (size_t i = 0; i < size; i++) bytes[i] = (unsigned char)tu_rng_u64(rng);
        const float m = fmaxf(fabsf(lo), fabsf(hi)) /
                        (dt == RB_IQ4_NL   ? 64.0f
                         : dt == RB_IQ4_XS ? 64.0f * 32.0f
                         : dt == RB_IQ2_XXS || dt == RB_IQ2_XS || dt == RB_IQ2_S ? 84.0f /* 43 x 15.5 / 4 at most */
                         : dt == RB_IQ1_S || dt == RB_IQ1_M ? 8.4f /* 15 x 1.125 at most */
                                                            : 240.0f);
        for (size_t b = 0; b + tr->type_size <= size; b += tr->type_size) {
            const rb_f16 d = rb_f32_to_f16(m * tu_rng_range(rng, -1.0f, 1.0f));
            if (dt == RB_IQ1_M) {
                for (int k = 0; k < 4; k++) {
                    unsigned char *top = bytes + b + 49 + 2 * k;
                    *top = (unsigned char)((*top & 15u) | ((d >> (4 * k)) & 15u) << 4);
                }
            } else {
                memcpy(bytes + b, &d, sizeof d);
            }
        }
    } else if (tr->is_quant) {
        /* whole parent rows of random values, quantized */
        const int64_t rowel = (int64_t)(t.nb[1] / tr->type_size) * tr->block_size;
        const int64_t rows = (int64_t)(size / t.nb[1]);
        float *f = malloc(sizeof(float) * (size_t)(rowel * rows));
        assert_non_null(f);
        tu_fill_uniform(rng, f, (size_t)(rowel * rows), lo, hi);
        TU_OK(rb_quantize_rows(dt, f, bytes, rows, rowel));
        free(f);
    } else {
        const size_t es = tr->type_size;
        for (size_t i = 0; i + es <= size; i += es) encode(dt, bytes + i, tu_rng_range(rng, lo, hi));
    }
    return make_from(cpu, gpu, &t, size, bytes);
}

gp gp_ids(rb_backend *cpu, rb_backend *gpu, const int32_t *v, int64_t n0, int64_t n1) {
    const int64_t ne[4] = {n0, n1, 1, 1};
    rb_tensor t;
    size_t size = 0;
    init_view(&t, RB_I32, ne, GP_CONTIG, &size);
    unsigned char *bytes = malloc(size ? size : 1);
    assert_non_null(bytes);
    memcpy(bytes, v, size);
    return make_from(cpu, gpu, &t, size, bytes);
}

void gp_free(gp *x) {
    rb_buffer_free(x->cb);
    rb_buffer_free(x->gb);
    free(x->orig);
    memset(x, 0, sizeof *x);
}

static unsigned char *parent(const gp *x, int side) {
    unsigned char *p = malloc(x->size);
    assert_non_null(p);
    TU_OK(rb_buffer_get(side ? x->gb : x->cb, 0, p, x->size));
    return p;
}

double *gp_read(const gp *x, int side) {
    const rb_tensor *t = side ? &x->g : &x->c;
    unsigned char *p = parent(x, side);
    const int64_t n = rb_tensor_nelements(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    assert_non_null(v);
    int64_t k = 0;
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
                    v[k++] = decode(t->dtype, p + t->offs + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] +
                                                  i3 * t->nb[3]);
    free(p);
    return v;
}

void gp_expect_close(const gp *x, double rtol, double atol, const char *what) {
    double *c = gp_read(x, 0), *g = gp_read(x, 1);
    const int64_t n = rb_tensor_nelements(&x->c);
    for (int64_t i = 0; i < n; i++) {
        if (isnan(c[i]) && isnan(g[i])) continue;
        if (isinf(c[i]) || isinf(g[i])) {
            if (c[i] != g[i]) fail_msg("%s: element %lld: gpu %.9g, cpu %.9g", what, (long long)i, g[i], c[i]);
            continue;
        }
        if (!(fabs(g[i] - c[i]) <= atol + rtol * fabs(c[i])))
            fail_msg("%s: element %lld: gpu %.9g, cpu %.9g (|diff| %.3g > %.1g + %.1g |cpu|)", what, (long long)i, g[i],
                     c[i], fabs(g[i] - c[i]), atol, rtol);
    }
    free(c);
    free(g);
    /* bytes outside the view: untouched on the GPU */
    unsigned char *gpb = parent(x, 1);
    unsigned char *inside = calloc(x->size, 1);
    assert_non_null(inside);
    const rb_tensor *t = &x->g;
    const size_t es = rb_dtype_info((int)t->dtype)->type_size;
    const int64_t nb0 = t->ne[0] / rb_dtype_info((int)t->dtype)->block_size;
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < nb0; i0++)
                    memset(inside + t->offs + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], 1, es);
    for (size_t i = 0; i < x->size; i++)
        if (!inside[i] && gpb[i] != x->orig[i]) fail_msg("%s: GPU wrote byte %zu outside the view", what, i);
    free(inside);
    free(gpb);
}

bool gp_gpu_unchanged(const gp *x) {
    unsigned char *p = parent(x, 1);
    bool same = memcmp(p, x->orig, x->size) == 0;
    free(p);
    return same;
}

double gp_tol(rb_dtype dt, double base) {
    switch (dt) {
    case RB_F16: return base + 1.0 / 1024;
    case RB_BF16: return base + 1.0 / 128;
    default: return base;
    }
}

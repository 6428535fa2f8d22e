/* The diffusion networks' fused ops, rb_layer_norm_mod (layer norm with
 * adaLN modulation) and rb_linear (a product with its bias, activation,
 * gate and residual), on the CPU:
 *  - against naive double references of the stored values, per element:
 *    layer_norm_mod |got - ref| <= 1e-6 (|xn (1 + scale)| + |shift|) + 1e-7
 *    + r |ref|, linear |got - ref| <= 2e-6 S + 1e-7 + r |ref| with S the
 *    magnitude the f32 sums carry (|bias| + sum |a b|, times the
 *    activation's slope bound 1.2, times |gate|, plus |res|) and r the half
 *    ulp of a 16-bit dst (2^-11 f16, 2^-8 bf16);
 *  - bit for bit against the separate ops they replace where the header
 *    promises it (f32 dst): layer_norm + affine + mul + add, and matmul +
 *    add + unary + mul + add in the model's operand order, also for
 *    quantized weights (whose product is not the double reference's);
 *  - on the networks' layouts (a modulation chunk [D, 1, B] of a [k D, B]
 *    tensor, dst a slice of a joint [N, T, B] buffer, the residual in place
 *    as dst's own view) and odd ones (permuted, sliced, rows of 1 and 4097,
 *    one activation row, more rows than the packed kernels' threshold), in
 *    f32, f16 and bf16, under every test configuration; nothing outside dst
 *    written, the inputs unchanged;
 *  - bad input refused with a message before anything is written. */
#include "ref_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* half ulp of a stored result, relative */
static double half_ulp(rb_dtype dt) { return dt == RB_F16 ? 1.0 / 2048 : dt == RB_BF16 ? 1.0 / 256 : 0.0; }

/* Values of a view of p's buffer, ggml order (through a tt sharing it). */
static double *view_vals(const tt *p, const rb_tensor *view) {
    tt w = *p;
    w.t = *view;
    w.n = view->ne[0] * view->ne[1] * view->ne[2] * view->ne[3];
    return tf_read(&w);
}

/* Index into a [ne] array of the element a broadcast operand of shape bne
 * gives to dst coordinates (i0..i3). */
static int64_t bidx(const int64_t bne[4], int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return tf_idx(bne, bne[0] == 1 ? 0 : i0, bne[1] == 1 ? 0 : i1, bne[2] == 1 ? 0 : i2, bne[3] == 1 ? 0 : i3);
}

/* Chunk i of a modulation tensor m [k D, B] as the [D, 1, B] view the
 * MMDiT broadcasts over tokens. */
static rb_tensor chunk(const rb_tensor *m, int i, int64_t D) {
    rb_tensor v = *m;
    v.offs += (size_t)((int64_t)i * D) * m->nb[0];
    v.ne[0] = D;
    v.ne[1] = 1;
    v.ne[2] = m->ne[1];
    v.ne[3] = 1;
    v.nb[2] = m->nb[1];
    v.nb[3] = m->nb[1] * (size_t)m->ne[1];
    return v;
}

/* Each element within its own bound (ref and bound arrays of n). */
static void expect_within(const double *got, const double *ref, const double *bound, int64_t n, const char *what) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs(got[i] - ref[i]);
        if (!(e <= bound[i]))
            fail_msg("%s: element %lld: got %.9g, want %.9g (|diff| %.3g > bound %.3g)", what, (long long)i, got[i],
                     ref[i], e, bound[i]);
        if (bound[i] > 0 && e / bound[i] > worst) worst = e / bound[i];
    }
    print_message("%s: worst |diff| / bound %.3f\n", what, worst);
}

/* ---- rb_layer_norm_mod ---- */

enum { M_SHIFT = 1, M_SCALE = 2 };

static void test_layer_norm_mod(void **state) {
    (void)state;
    const struct {
        int64_t ne[4];
        tf_layout ls, ld;
        rb_dtype sdt, ddt, mdt;
        int mods;  /* M_SHIFT | M_SCALE */
        int chunk; /* 1: shift and scale are chunks of one [6 D, B] modulation; 0: [D, 1, ne2, 1] tensors */
    } cases[] = {
        {{96, 7, 2, 1}, TF_CONTIG, TF_CONTIG, RB_F32, RB_F32, RB_F32, M_SHIFT | M_SCALE, 1},
        {{96, 7, 2, 1}, TF_CONTIG, TF_CONTIG, RB_F16, RB_F16, RB_F16, M_SHIFT | M_SCALE, 1},
        {{64, 5, 2, 1}, TF_CONTIG, TF_CONTIG, RB_BF16, RB_BF16, RB_BF16, M_SHIFT | M_SCALE, 1},
        {{5, 3, 2, 2}, TF_PERM, TF_SLICE, RB_F32, RB_F16, RB_BF16, M_SHIFT | M_SCALE, 0},
        {{1, 4, 1, 1}, TF_SLICE, TF_CONTIG, RB_F32, RB_F32, RB_F32, M_SHIFT, 0},
        {{4097, 3, 1, 1}, TF_CONTIG, TF_SLICE, RB_F32, RB_F32, RB_F16, M_SCALE, 0},
        {{33, 6, 1, 1}, TF_SLICE, TF_PERM, RB_F16, RB_F32, RB_F32, 0, 0},
        {{40, 9, 3, 1}, TF_PERM, TF_PERM, RB_BF16, RB_F32, RB_F32, M_SHIFT | M_SCALE, 1},
    };
    const float eps = 1e-6f;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 41000 + (uint64_t)ci);
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            const int64_t *ne = cases[k].ne, D = ne[0];
            const int64_t mne[4] = {6 * D, ne[2], 1, 1}, one[4] = {D, 1, ne[2], 1};
            tt x = tf_make(be, &rng, cases[k].sdt, ne, cases[k].ls, -3, 3);
            tt d = tf_make(be, &rng, cases[k].ddt, ne, cases[k].ld, -1, 1);
            /* the modulation: one tensor holding both chunks, or two */
            tt m = tf_make(be, &rng, cases[k].mdt, cases[k].chunk ? mne : one, TF_SLICE, -1, 1);
            tt m2 = tf_make(be, &rng, cases[k].mdt, one, TF_SLICE, -1, 1);
            rb_tensor sh = cases[k].chunk ? chunk(&m.t, 3, D) : m.t, sc = cases[k].chunk ? chunk(&m.t, 4, D) : m2.t;
            const rb_tensor *shp = cases[k].mods & M_SHIFT ? &sh : NULL, *scp = cases[k].mods & M_SCALE ? &sc : NULL;
            const int64_t bne[4] = {D, 1, ne[2], 1};
            double *shv = view_vals(&m, &sh), *scv = view_vals(cases[k].chunk ? &m : &m2, &sc);
            TU_OK(rb_layer_norm_mod(be, &d.t, &x.t, shp, scp, eps));
            char what[96];
            snprintf(what, sizeof what, "layer_norm_mod case %zu cfg %d", k, ci);
            /* double reference */
            double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double)),
                   *bnd = malloc((size_t)d.n * sizeof(double)), *xn = malloc((size_t)D * sizeof(double));
            assert_true(ref && bnd && xn);
            for (int64_t i3 = 0; i3 < ne[3]; i3++)
                for (int64_t i2 = 0; i2 < ne[2]; i2++)
                    for (int64_t i1 = 0; i1 < ne[1]; i1++) {
                        const int64_t r0 = tf_idx(ne, 0, i1, i2, i3);
                        ref_layer_norm_row(x.v + r0, NULL, NULL, eps, D, xn);
                        for (int64_t i0 = 0; i0 < D; i0++) {
                            const int64_t j = bidx(bne, i0, i1, i2, i3);
                            const double s = scp ? scv[j] : 0.0, t = shp ? shv[j] : 0.0, y = xn[i0] * (1.0 + s) + t;
                            ref[r0 + i0] = y;
                            bnd[r0 + i0] = 1e-6 * (fabs(xn[i0] * (1.0 + s)) + fabs(t)) + 1e-7 +
                                           half_ulp(cases[k].ddt) * fabs(y);
                        }
                    }
            expect_within(got, ref, bnd, d.n, what);
            assert_true(tf_pad_intact(&d));
            assert_true(tf_unchanged(&x));
            assert_true(tf_unchanged(&m));
            assert_true(tf_unchanged(&m2));
            /* the separate ops (f32 throughout): identical bits */
            if (cases[k].sdt == RB_F32 && cases[k].ddt == RB_F32 && cases[k].mdt == RB_F32) {
                tt u = tf_make(be, &rng, RB_F32, ne, TF_CONTIG, 0, 1), o = tf_make(be, &rng, RB_F32, one, TF_CONTIG, 0, 1);
                TU_OK(rb_layer_norm(be, &u.t, &x.t, NULL, NULL, eps));
                if (scp) {
                    TU_OK(rb_affine(be, &o.t, scp, 1.0f, 1.0f));
                    TU_OK(rb_binary(be, RB_BINARY_MUL, &u.t, &u.t, &o.t));
                }
                if (shp) TU_OK(rb_binary(be, RB_BINARY_ADD, &u.t, &u.t, shp));
                double *uv = tf_read(&u);
                tf_expect_close(got, uv, d.n, 0, 0, "layer_norm_mod vs the separate ops");
                free(uv);
                tf_free(&u);
                tf_free(&o);
            }
            /* in place (dst is src's view): the same bits as into dst */
            if (cases[k].sdt == cases[k].ddt) {
                tt y = tf_from(be, cases[k].sdt, ne, cases[k].ls, x.v);
                TU_OK(rb_layer_norm_mod(be, &y.t, &y.t, shp, scp, eps));
                double *yv = tf_read(&y);
                tf_expect_close(yv, got, d.n, 0, 0, "layer_norm_mod in place");
                assert_true(tf_pad_intact(&y));
                free(yv);
                tf_free(&y);
            }
            free(got);
            free(ref);
            free(bnd);
            free(xn);
            free(shv);
            free(scv);
            tf_free(&x);
            tf_free(&d);
            tf_free(&m);
            tf_free(&m2);
        }
        rb_backend_destroy(be);
    }
}

/* ---- rb_linear ---- */

enum { E_BIAS = 1, E_ACT = 2, E_GATE = 4, E_RES = 8, E_INPLACE = 16 /* res is dst's own view */, E_NULL = 32 };

typedef struct lin_case {
    int64_t K, N, M, B;
    rb_dtype adt, bdt, ddt;
    int ep;
    rb_unary_op act;
    tf_layout lb, ld;
    int slice; /* dst is rows [3, 3 + M) of a joint [N, M + 5, B] buffer */
} lin_case;

static const lin_case k_lin[] = {
    /* the MMDiT's feed-forward in: bias and tanh GELU, 37 rows (past the packed kernels' threshold) */
    {64, 24, 37, 2, RB_F32, RB_F32, RB_F32, E_BIAS | E_ACT, RB_UNARY_GELU_TANH, TF_CONTIG, TF_CONTIG, 0},
    /* its gated residual, in place: x += gate * (W a + b) */
    {64, 24, 37, 2, RB_F32, RB_F32, RB_F32, E_BIAS | E_GATE | E_RES | E_INPLACE, RB_UNARY_SILU, TF_CONTIG, TF_CONTIG, 0},
    /* the time embedding: one row, SiLU */
    {48, 20, 1, 1, RB_F32, RB_F32, RB_F32, E_BIAS | E_ACT, RB_UNARY_SILU, TF_CONTIG, TF_SLICE, 0},
    /* a few rows, a residual of its own, strided operands */
    {32, 12, 3, 2, RB_F32, RB_F32, RB_F32, E_BIAS | E_GATE | E_RES, RB_UNARY_SILU, TF_PERM, TF_SLICE, 0},
    /* q / k / v straight into the joint buffer, half precision */
    {64, 16, 9, 2, RB_F16, RB_F16, RB_F16, E_BIAS, RB_UNARY_SILU, TF_CONTIG, TF_CONTIG, 1},
    {64, 16, 9, 2, RB_BF16, RB_BF16, RB_BF16, E_BIAS, RB_UNARY_SILU, TF_CONTIG, TF_CONTIG, 1},
    /* everything, in place, half precision and 16-bit weights */
    {64, 24, 21, 2, RB_F16, RB_F16, RB_F16, E_BIAS | E_ACT | E_GATE | E_RES | E_INPLACE, RB_UNARY_GELU, TF_CONTIG,
     TF_CONTIG, 0},
    {64, 24, 21, 2, RB_BF16, RB_BF16, RB_F32, E_BIAS | E_ACT | E_GATE | E_RES | E_INPLACE, RB_UNARY_GELU, TF_CONTIG,
     TF_PERM, 0},
    /* the UNet's attention output: the residual added in place, no gate */
    {32, 40, 17, 2, RB_F16, RB_F32, RB_F32, E_BIAS | E_RES | E_INPLACE, RB_UNARY_SILU, TF_SLICE, TF_SLICE, 0},
    /* quantized weights: only against the separate ops */
    {64, 12, 19, 1, RB_Q8_0, RB_F32, RB_F32, E_BIAS | E_RES | E_INPLACE, RB_UNARY_SILU, TF_CONTIG, TF_CONTIG, 0},
    {64, 12, 2, 2, RB_Q4_0, RB_F32, RB_F32, E_BIAS | E_ACT, RB_UNARY_RELU, TF_CONTIG, TF_CONTIG, 0},
    /* activation only; one output row of one input */
    {40, 8, 5, 1, RB_F32, RB_F32, RB_F32, E_ACT, RB_UNARY_TANH, TF_PERM, TF_PERM, 0},
    {1, 1, 5, 1, RB_F32, RB_F32, RB_F16, E_BIAS | E_ACT | E_GATE, RB_UNARY_SIGMOID, TF_CONTIG, TF_SLICE, 0},
    /* no epilogue: rb_matmul itself */
    {32, 16, 6, 2, RB_F32, RB_F32, RB_F16, E_NULL, RB_UNARY_SILU, TF_CONTIG, TF_SLICE, 0},
};

static void test_linear(void **state) {
    (void)state;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 42000 + (uint64_t)ci);
        for (size_t k = 0; k < sizeof k_lin / sizeof k_lin[0]; k++) {
            const lin_case *c = &k_lin[k];
            const int64_t K = c->K, N = c->N, M = c->M, B = c->B;
            const int64_t ane[4] = {K, N, 1, 1}, bne[4] = {K, M, B, 1}, dne[4] = {N, M, B, 1},
                          jne[4] = {N, M + 5, B, 1}, vne[4] = {N, 1, 1, 1}, mne[4] = {3 * N, B, 1, 1};
            const bool quant = c->adt == RB_Q8_0 || c->adt == RB_Q4_0;
            tt a = tf_make(be, &rng, c->adt, ane, quant ? TF_CONTIG : TF_SLICE, -1, 1);
            tt b = tf_make(be, &rng, c->bdt, bne, c->lb, -1, 1);
            tt bias = tf_make(be, &rng, RB_F32, vne, TF_SLICE, -0.5f, 0.5f);
            tt mod = tf_make(be, &rng, RB_F16, mne, TF_CONTIG, -1, 1); /* the gate is its chunk 2 */
            tt res = tf_make(be, &rng, RB_F32, dne, TF_PERM, -2, 2);
            tt d = c->slice ? tf_make(be, &rng, c->ddt, jne, TF_CONTIG, -2, 2) : tf_make(be, &rng, c->ddt, dne, c->ld, -2, 2);
            rb_tensor dv = d.t;
            if (c->slice) {
                dv.ne[1] = M;
                dv.offs += 3 * d.t.nb[1];
            }
            double *d0 = view_vals(&d, &dv); /* dst before the call: the in-place residual */
            rb_tensor gate = chunk(&mod.t, 2, N);
            double *gv = view_vals(&mod, &gate);
            rb_linear_epilogue ep = {.bias = c->ep & E_BIAS ? &bias.t : NULL, .has_act = (c->ep & E_ACT) != 0,
                                     .act = c->act, .gate = c->ep & E_GATE ? &gate : NULL,
                                     .res = c->ep & E_INPLACE ? &dv : c->ep & E_RES ? &res.t : NULL};
            TU_OK(rb_linear(be, &dv, &a.t, &b.t, c->ep & E_NULL ? NULL : &ep));
            char what[96];
            snprintf(what, sizeof what, "linear case %zu cfg %d", k, ci);
            double *got = view_vals(&d, &dv);
            const int64_t n = N * M * B;
            if (!quant) { /* double reference of the stored values */
                double *ref = malloc((size_t)n * sizeof(double)), *bnd = malloc((size_t)n * sizeof(double));
                assert_true(ref && bnd);
                for (int64_t i2 = 0; i2 < B; i2++)
                    for (int64_t m = 0; m < M; m++)
                        for (int64_t j = 0; j < N; j++) {
                            double p = 0, s = 0;
                            for (int64_t q = 0; q < K; q++) {
                                const double t = a.v[tf_idx(ane, q, j, 0, 0)] * b.v[tf_idx(bne, q, m, i2, 0)];
                                p += t;
                                s += fabs(t);
                            }
                            const int64_t o = tf_idx(dne, j, m, i2, 0);
                            if (ep.bias) {
                                p += bias.v[j];
                                s += fabs(bias.v[j]);
                            }
                            if (ep.has_act) {
                                p = ref_unary(c->act, p);
                                s *= 1.2;
                            }
                            if (ep.gate) {
                                const double g = gv[i2 * N + j]; /* the [N, 1, B] chunk */
                                p *= g;
                                s *= fabs(g);
                            }
                            if (ep.res) {
                                const double r = c->ep & E_INPLACE ? d0[o] : res.v[o];
                                p += r;
                                s += fabs(r);
                            }
                            ref[o] = p;
                            bnd[o] = 2e-6 * s + 1e-7 + half_ulp(c->ddt) * fabs(p);
                        }
                expect_within(got, ref, bnd, n, what);
                free(ref);
                free(bnd);
            }
            assert_true(tf_pad_intact(&d));
            assert_true(tf_unchanged(&a));
            assert_true(tf_unchanged(&b));
            assert_true(tf_unchanged(&bias));
            assert_true(tf_unchanged(&mod));
            assert_true(tf_unchanged(&res));
            /* the separate ops in the model's order, into an f32 product: identical bits for an f32 dst
             * (rb_matmul itself whatever dst is when there is no epilogue) */
            if (c->ddt == RB_F32 || (c->ep & E_NULL)) {
                tt u = tf_make(be, &rng, c->ep & E_NULL ? c->ddt : RB_F32, dne, TF_CONTIG, 0, 1);
                tt r0 = tf_from(be, c->ddt, dne, TF_CONTIG, d0);
                TU_OK(rb_matmul(be, &u.t, &a.t, &b.t));
                if (ep.bias) TU_OK(rb_binary(be, RB_BINARY_ADD, &u.t, &u.t, ep.bias));
                if (ep.has_act) TU_OK(rb_unary(be, c->act, &u.t, &u.t));
                if (ep.gate) TU_OK(rb_binary(be, RB_BINARY_MUL, &u.t, &u.t, ep.gate));
                if (ep.res) TU_OK(rb_binary(be, RB_BINARY_ADD, &u.t, c->ep & E_INPLACE ? &r0.t : &res.t, &u.t));
                double *uv = tf_read(&u);
                snprintf(what, sizeof what, "linear case %zu cfg %d vs the separate ops", k, ci);
                tf_expect_close(got, uv, n, 0, 0, what);
                free(uv);
                tf_free(&u);
                tf_free(&r0);
            }
            free(d0);
            free(gv);
            free(got);
            tf_free(&a);
            tf_free(&b);
            tf_free(&bias);
            tf_free(&mod);
            tf_free(&res);
            tf_free(&d);
        }
        rb_backend_destroy(be);
    }
}

/* ---- bad input ---- */

static void expect_refused(rb_backend *be, rb_status got, const char *op, const char *needle, const tt *dst) {
    if (got != RB_E_INVALID)
        fail_msg("%s (%s): got %s, want invalid (%s)", op, needle, rb_status_str(got), rb_backend_last_error(be));
    const char *msg = rb_backend_last_error(be);
    if (!strstr(msg, op)) fail_msg("message '%s' does not name %s", msg, op);
    if (!strstr(msg, needle)) fail_msg("message '%s' lacks '%s'", msg, needle);
    assert_true(tf_unchanged(dst));
}

static void test_bad_input(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[0]);
    tu_rng rng;
    tu_rng_seed(&rng, 43000);
    const int64_t D = 8, T = 3, B = 2, K = 16;
    const int64_t xne[4] = {D, T, B, 1}, mne[4] = {D, 1, B, 1}, wide[4] = {D + 1, 1, B, 1}, three[4] = {D, 1, 3, 1},
                  ane[4] = {K, D, 1, 1}, bne[4] = {K, T, B, 1}, vne[4] = {D, 1, 1, 1}, v1[4] = {D - 1, 1, 1, 1},
                  big[4] = {K + D, T, B, 1}, ine[4] = {D, T, B, 1};
    tt x = tf_make(be, &rng, RB_F32, xne, TF_CONTIG, -1, 1), d = tf_make(be, &rng, RB_F32, xne, TF_CONTIG, -1, 1);
    tt m = tf_make(be, &rng, RB_F32, mne, TF_CONTIG, -1, 1), mw = tf_make(be, &rng, RB_F32, wide, TF_CONTIG, -1, 1);
    tt m3 = tf_make(be, &rng, RB_F32, three, TF_CONTIG, -1, 1), ints = tf_make(be, &rng, RB_I32, xne, TF_CONTIG, -1, 1);
    tt a = tf_make(be, &rng, RB_F32, ane, TF_CONTIG, -1, 1), b = tf_make(be, &rng, RB_F32, bne, TF_CONTIG, -1, 1);
    tt bias = tf_make(be, &rng, RB_F32, vne, TF_CONTIG, -1, 1), bshort = tf_make(be, &rng, RB_F32, v1, TF_CONTIG, -1, 1);
    tt bg = tf_make(be, &rng, RB_F32, big, TF_CONTIG, -1, 1), di = tf_make(be, &rng, RB_I32, ine, TF_CONTIG, -1, 1);
    tt dr = tf_make(be, &rng, RB_F32, xne, TF_PERM, -1, 1);
    rb_tensor xs = x.t;
    xs.ne[1] = T - 1;

    /* layer_norm_mod */
    const char *op = "rb_layer_norm_mod";
    expect_refused(be, rb_layer_norm_mod(be, &d.t, &xs, &m.t, &m.t, 1e-6f), op, "shape mismatch", &d);
    expect_refused(be, rb_layer_norm_mod(be, &d.t, &x.t, &mw.t, NULL, 1e-6f), op, "ne[0]", &d);
    expect_refused(be, rb_layer_norm_mod(be, &d.t, &x.t, NULL, &m3.t, 1e-6f), op, "cannot broadcast", &d);
    expect_refused(be, rb_layer_norm_mod(be, &d.t, &x.t, &m.t, &m.t, -1.0f), op, "eps", &d);
    expect_refused(be, rb_layer_norm_mod(be, &d.t, &ints.t, &m.t, &m.t, 1e-6f), op, "i32", &d);
    rb_tensor dm = d.t; /* shift inside dst */
    dm.ne[1] = 1;
    expect_refused(be, rb_layer_norm_mod(be, &d.t, &x.t, &dm, NULL, 1e-6f), op, "overlaps", &d);
    assert_int_equal(rb_layer_norm_mod(be, &d.t, NULL, NULL, NULL, 1e-6f), RB_E_INVALID);
    assert_true(tf_unchanged(&d));

    /* linear */
    op = "rb_linear";
    rb_tensor ds = d.t, bd = bg.t, bb = bg.t;
    ds.ne[1] = T - 1;
    bd.ne[0] = D; /* dst and b overlapping in one buffer */
    bb.ne[0] = K;
    bb.offs += (size_t)(D - 1) * 4;
    rb_tensor g = m.t, gbad = m3.t;
    const rb_linear_epilogue ok = {.bias = &bias.t, .has_act = true, .act = RB_UNARY_GELU_TANH, .gate = &g,
                                   .res = &d.t};
    rb_linear_epilogue e = ok;
    expect_refused(be, rb_linear(be, &ds, &a.t, &b.t, &ok), op, "must be", &d);
    e.bias = &bshort.t;
    expect_refused(be, rb_linear(be, &d.t, &a.t, &b.t, &e), op, "bias", &d);
    e = ok;
    e.act = RB_UNARY_COUNT_;
    expect_refused(be, rb_linear(be, &d.t, &a.t, &b.t, &e), op, "activation", &d);
    e = ok;
    e.gate = &mw.t;
    expect_refused(be, rb_linear(be, &d.t, &a.t, &b.t, &e), op, "gate", &d);
    e.gate = &gbad;
    expect_refused(be, rb_linear(be, &d.t, &a.t, &b.t, &e), op, "cannot broadcast", &d);
    e = ok;
    e.res = &xs;
    expect_refused(be, rb_linear(be, &d.t, &a.t, &b.t, &e), op, "shape mismatch", &d);
    e.res = &dr.t; /* the right shape, but dst's memory seen through other strides */
    dr.t.buf = d.t.buf;
    expect_refused(be, rb_linear(be, &d.t, &a.t, &b.t, &e), op, "overlaps dst", &d);
    dr.t.buf = dr.buf;
    expect_refused(be, rb_linear(be, &bd, &a.t, &bb, NULL), op, "overlaps", &bg);
    expect_refused(be, rb_linear(be, &di.t, &a.t, &b.t, &ok), op, "i32", &di);
    e = ok; /* a bias view inside dst */
    rb_tensor inside = d.t;
    inside.ne[1] = inside.ne[2] = 1;
    e.bias = &inside;
    expect_refused(be, rb_linear(be, &d.t, &a.t, &b.t, &e), op, "overlaps", &d);
    assert_int_equal(rb_linear(be, &d.t, NULL, &b.t, &ok), RB_E_INVALID);
    assert_true(tf_unchanged(&d));
    /* and the valid calls go through */
    TU_OK(rb_linear(be, &d.t, &a.t, &b.t, &ok));
    TU_OK(rb_layer_norm_mod(be, &d.t, &x.t, &m.t, &m.t, 1e-6f));
    tf_free(&x);
    tf_free(&d);
    tf_free(&m);
    tf_free(&mw);
    tf_free(&m3);
    tf_free(&ints);
    tf_free(&a);
    tf_free(&b);
    tf_free(&bias);
    tf_free(&bshort);
    tf_free(&bg);
    tf_free(&di);
    tf_free(&dr);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_norm_mod),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

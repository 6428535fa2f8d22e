/* The fused ops rb_glu and rb_add_rms_norm exist so the model can drop a
 * pass and a launch per call; they must not change the CPU's numbers. Each
 * is checked against a naive double reference and, bit for bit, against the
 * unfused pair it replaces (rb_unary + rb_binary(MUL), rb_binary(ADD) +
 * rb_rms_norm), on the model's layouts (gate/up as strided halves of one
 * [2F, T] projection, in place) and odd ones (permuted, sliced, rows of 1 and
 * 4097), under the scalar ISA and auto with 1 and 3 threads (the larger
 * shapes take the thread pool). */
#include "ref_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const rb_unary_op ACTS[4] = {RB_UNARY_SILU, RB_UNARY_GELU_TANH, RB_UNARY_GELU, RB_UNARY_RELU};

/* The half of a [2F, ...] tensor starting at element `first` of each row. */
static rb_tensor half_view(const tt *p, int64_t first) {
    rb_tensor v = p->t;
    v.ne[0] = p->t.ne[0] / 2;
    v.offs += (size_t)first * p->t.nb[0];
    return v;
}

/* Values of the half view, ggml order. */
static double *half_vals(const tt *p, int64_t first) {
    const int64_t *ne = p->t.ne, F = ne[0] / 2;
    double *v = malloc((size_t)(p->n / 2) * sizeof(double));
    assert_non_null(v);
    int64_t k = 0;
    for (int64_t i3 = 0; i3 < ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++)
                for (int64_t i0 = 0; i0 < F; i0++) v[k++] = p->v[tf_idx(ne, first + i0, i1, i2, i3)];
    return v;
}

/* Reads a view of a tt's parent through a temporary tt sharing its buffer. */
static double *read_view(const tt *p, const rb_tensor *view) {
    tt w = *p;
    w.t = *view;
    w.n = view->ne[0] * view->ne[1] * view->ne[2] * view->ne[3];
    return tf_read(&w);
}

static void test_glu(void **state) {
    (void)state;
    /* parent [2F, T, A, B] and its layout; the first is the model's decode/prefill shape */
    const struct { int64_t ne[4]; tf_layout lay; } cases[] = {
        {{2 * 1000, 7, 1, 1}, TF_CONTIG}, {{2 * 9, 13, 3, 2}, TF_PERM}, {{2 * 1, 5, 1, 1}, TF_SLICE},
        {{2 * 4097, 2, 1, 1}, TF_SLICE}};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 31000 + (uint64_t)ci);
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
            for (int a = 0; a < 4; a++) {
                const rb_unary_op act = ACTS[a];
                const int64_t *pne = cases[k].ne, F = pne[0] / 2;
                const int64_t dne[4] = {F, pne[1], pne[2], pne[3]};
                tt p = tf_make(be, &rng, RB_F32, pne, cases[k].lay, -5, 5);
                rb_tensor gate = half_view(&p, 0), up = half_view(&p, F);
                double *gv = half_vals(&p, 0), *uv = half_vals(&p, F);
                tt d = tf_make(be, &rng, RB_F32, dne, k == 1 ? TF_SLICE : TF_CONTIG, -1, 1);
                tt u = tf_make(be, &rng, RB_F32, dne, k == 1 ? TF_PERM : TF_CONTIG, -1, 1);
                TU_OK(rb_glu(be, &d.t, &gate, &up, act));
                char what[96];
                snprintf(what, sizeof what, "glu act %d case %zu cfg %d", (int)act, k, ci);
                /* double reference */
                double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
                for (int64_t i = 0; i < d.n; i++) ref[i] = ref_unary(act, gv[i]) * uv[i];
                tf_expect_close(got, ref, d.n, 1e-5, 1e-6, what);
                assert_true(tf_pad_intact(&d));
                assert_true(tf_unchanged(&p));
                /* the unfused pair, as the model calls it: identical bits */
                TU_OK(rb_unary(be, act, &u.t, &gate));
                TU_OK(rb_binary(be, RB_BINARY_MUL, &u.t, &u.t, &up));
                double *un = tf_read(&u);
                tf_expect_close(got, un, d.n, 0, 0, what);
                /* in place over gate, then over up (the parent is rewritten) */
                for (int side = 0; side < 2; side++) {
                    tt q = tf_from(be, RB_F32, pne, cases[k].lay, p.v);
                    rb_tensor qg = half_view(&q, 0), qu = half_view(&q, F);
                    rb_tensor *dst = side ? &qu : &qg;
                    TU_OK(rb_glu(be, dst, &qg, &qu, act));
                    double *ip = read_view(&q, dst);
                    tf_expect_close(ip, un, d.n, 0, 0, side ? "glu in place over up" : "glu in place over gate");
                    free(ip);
                    tf_free(&q);
                }
                free(un);
                free(got);
                free(ref);
                free(gv);
                free(uv);
                tf_free(&p);
                tf_free(&d);
                tf_free(&u);
            }
        rb_backend_destroy(be);
    }
}

static void test_add_rms_norm(void **state) {
    (void)state;
    const struct { int64_t ne[4]; tf_layout lx, ld, lh; int w; } cases[] = {
        /* w: 0 none, 1 f32, 2 bf16, 3 f16 */
        {{2048, 7, 1, 1}, TF_CONTIG, TF_CONTIG, TF_CONTIG, 1}, {{7, 13, 3, 2}, TF_PERM, TF_SLICE, TF_PERM, 2},
        {{1, 3, 1, 1}, TF_SLICE, TF_PERM, TF_SLICE, 0}, {{4097, 11, 1, 1}, TF_SLICE, TF_CONTIG, TF_SLICE, 3},
        {{64, 5, 2, 1}, TF_CONTIG, TF_SLICE, TF_CONTIG, 0}};
    const rb_dtype wdt[4] = {RB_F32, RB_F32, RB_BF16, RB_F16};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 32000 + (uint64_t)ci);
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
            for (int alias = 0; alias < 2; alias++) { /* 1: delta is h's view */
                const int64_t *ne = cases[k].ne, wne[4] = {ne[0], 1, 1, 1};
                const float eps = k == 2 ? 0.0f : 1e-6f;
                tt x = tf_make(be, &rng, RB_F32, ne, cases[k].lx, -3, 3);
                tt dl = tf_make(be, &rng, RB_F32, ne, cases[k].ld, -2, 2);
                tt h = alias ? tf_from(be, RB_F32, ne, cases[k].lh, dl.v) : tf_make(be, &rng, RB_F32, ne, cases[k].lh, -1, 1);
                tt w = tf_make(be, &rng, wdt[cases[k].w], wne, TF_SLICE, 0.5f, 1.5f);
                const rb_tensor *wp = cases[k].w ? &w.t : NULL;
                /* the unfused pair on copies, before the fused call changes x */
                tt x2 = tf_from(be, RB_F32, ne, cases[k].lx, x.v);
                tt h2 = tf_from(be, RB_F32, ne, cases[k].lh, h.v);
                tt d2 = tf_from(be, RB_F32, ne, cases[k].ld, dl.v);
                TU_OK(rb_binary(be, RB_BINARY_ADD, &x2.t, &x2.t, alias ? &h2.t : &d2.t));
                TU_OK(rb_rms_norm(be, &h2.t, &x2.t, wp, eps));

                TU_OK(rb_add_rms_norm(be, &x.t, alias ? &h.t : &dl.t, wp, eps, &h.t));
                char what[96];
                snprintf(what, sizeof what, "add_rms_norm case %zu alias %d cfg %d", k, alias, ci);
                double *gx = tf_read(&x), *gh = tf_read(&h), *rx = malloc((size_t)x.n * sizeof(double)),
                       *rh = malloc((size_t)x.n * sizeof(double));
                for (int64_t i = 0; i < x.n; i++) rx[i] = (float)(x.v[i] + dl.v[i]); /* one f32 rounding */
                for (int64_t r = 0; r < x.n / ne[0]; r++)
                    ref_rms_norm_row(rx + r * ne[0], wp ? w.v : NULL, eps, ne[0], rh + r * ne[0]);
                tf_expect_close(gx, rx, x.n, 0, 0, what);      /* the sum is exact f32 addition */
                tf_expect_close(gh, rh, x.n, 1e-6, 1e-12, what); /* three roundings: ~2e-7 */
                assert_true(tf_pad_intact(&x));
                assert_true(tf_pad_intact(&h));
                if (!alias) assert_true(tf_unchanged(&dl));
                assert_true(tf_unchanged(&w));
                double *ux = tf_read(&x2), *uh = tf_read(&h2);
                tf_expect_close(gx, ux, x.n, 0, 0, "add_rms_norm x vs unfused");
                tf_expect_close(gh, uh, x.n, 0, 0, "add_rms_norm h vs unfused");
                free(gx);
                free(gh);
                free(rx);
                free(rh);
                free(ux);
                free(uh);
                tf_free(&x);
                tf_free(&dl);
                tf_free(&h);
                tf_free(&w);
                tf_free(&x2);
                tf_free(&h2);
                tf_free(&d2);
            }
        rb_backend_destroy(be);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glu),
        cmocka_unit_test(test_add_rms_norm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Row reductions, softmax (scale, broadcast f32/f16 masks, -inf entries,
 * fully masked rows) and rms/layer/group norms against double references,
 * with odd shapes, rows of 1 and 4097, strided views, f16/bf16 data, and
 * 1-vs-3-thread agreement. Bounds: f32 within 1e-5 relative (+1e-6 abs),
 * f16/bf16 outputs add their rounding (2^-11, 2^-8). */
#include "ref_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static void test_reduce_ops(void **state) {
    (void)state;
    const int64_t shapes[3][4] = {{7, 13, 3, 2}, {1, 5, 3, 1}, {4097, 3, 1, 2}};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 5000 + (uint64_t)ci);
        for (int sh = 0; sh < 3; sh++)
            for (int op = 0; op < RB_REDUCE_COUNT_; op++) {
                const int64_t *ne = shapes[sh];
                int64_t dne[4] = {1, ne[1], ne[2], ne[3]};
                rb_dtype sdt = sh == 1 ? RB_BF16 : RB_F32, ddt = op == RB_REDUCE_ARGMAX ? RB_I32 : (sh == 0 ? RB_F16 : RB_F32);
                tt s = tf_make(be, &rng, sdt, ne, sh == 0 ? TF_PERM : TF_SLICE, -2, 3);
                tt d = tf_make(be, &rng, ddt, dne, TF_SLICE, -1, 1);
                TU_OK(rb_reduce(be, (rb_reduce_op)op, &d.t, &s.t));
                double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
                for (int64_t r = 0; r < d.n; r++) {
                    const double *x = s.v + r * ne[0];
                    double acc = op == RB_REDUCE_SUM || op == RB_REDUCE_MEAN ? 0 : x[0];
                    int64_t am = 0;
                    for (int64_t i = 0; i < ne[0]; i++) {
                        if (op == RB_REDUCE_SUM || op == RB_REDUCE_MEAN) acc += x[i];
                        if (op == RB_REDUCE_MAX && x[i] > acc) acc = x[i];
                        if (op == RB_REDUCE_MIN && x[i] < acc) acc = x[i];
                        if (op == RB_REDUCE_ARGMAX && x[i] > x[am]) am = i;
                    }
                    if (op == RB_REDUCE_MEAN) acc /= (double)ne[0];
                    ref[r] = op == RB_REDUCE_ARGMAX ? (double)am : acc;
                }
                char what[64];
                snprintf(what, sizeof what, "reduce op %d shape %d cfg %d", op, sh, ci);
                /* sums of random signs: absolute floor scaled by the row length */
                tf_expect_close(got, ref, d.n, tf_tol(ddt, 1e-6), 1e-6 * (double)ne[0], what);
                assert_true(tf_pad_intact(&d));
                free(got);
                free(ref);
                tf_free(&s);
                tf_free(&d);
            }
        rb_backend_destroy(be);
    }
}

static void test_softmax(void **state) {
    (void)state;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 6000 + (uint64_t)ci);
        const int64_t shapes[3][4] = {{37, 13, 3, 2}, {1, 6, 1, 1}, {4097, 4, 1, 1}};
        for (int sh = 0; sh < 3; sh++)
            for (int mk = 0; mk < 3; mk++) { /* 0: no mask, 1: f32 [n, ne1] with -inf, 2: f16 [n] */
                const int64_t *ne = shapes[sh];
                int64_t mne[4] = {ne[0], mk == 1 ? ne[1] : 1, 1, 1};
                tt s = tf_make(be, &rng, sh == 2 ? RB_F16 : RB_F32, ne, sh == 0 ? TF_PERM : TF_SLICE, -6, 6);
                tt d = tf_make(be, &rng, sh == 1 ? RB_BF16 : RB_F32, ne, TF_SLICE, 0, 1);
                double *mv = malloc((size_t)(mne[0] * mne[1]) * sizeof(double));
                for (int64_t i = 0; i < mne[0] * mne[1]; i++) {
                    double u = tu_rng_uniform(&rng);
                    mv[i] = u < 0.3 ? -INFINITY : (u - 0.5) * 4;
                }
                if (mk == 1) /* one fully masked row */
                    for (int64_t i = 0; i < mne[0]; i++) mv[i + (mne[1] > 2 ? 2 : 0) * mne[0]] = -INFINITY;
                tt m = tf_from(be, mk == 2 ? RB_F16 : RB_F32, mne, TF_SLICE, mv);
                const float scale = 0.37f;
                TU_OK(rb_softmax(be, &d.t, &s.t, mk ? &m.t : NULL, scale));
                double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
                for (int64_t r = 0; r < d.n / ne[0]; r++) {
                    int64_t i1 = r % ne[1];
                    const double *mrow = mk == 0 ? NULL : mk == 1 ? m.v + i1 * ne[0] : m.v;
                    ref_softmax_row(s.v + r * ne[0], mrow, scale, ne[0], ref + r * ne[0]);
                }
                char what[64];
                snprintf(what, sizeof what, "softmax shape %d mask %d cfg %d", sh, mk, ci);
                tf_expect_close(got, ref, d.n, tf_tol(d.t.dtype, 1e-5), 1e-7, what);
                assert_true(tf_pad_intact(&d));
                free(got);
                free(ref);
                free(mv);
                tf_free(&s);
                tf_free(&d);
                tf_free(&m);
            }
        rb_backend_destroy(be);
    }
}

static void test_norms(void **state) {
    (void)state;
    const int64_t shapes[3][4] = {{7, 13, 3, 2}, {1, 3, 1, 1}, {4097, 5, 1, 1}};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 7000 + (uint64_t)ci);
        for (int sh = 0; sh < 3; sh++)
            for (int variant = 0; variant < 4; variant++) { /* bit 0: weights, bit 1: layer norm */
                const int64_t *ne = shapes[sh];
                const int64_t wne[4] = {ne[0], 1, 1, 1};
                const bool has_w = variant & 1, layer = variant & 2;
                tt s = tf_make(be, &rng, sh == 0 ? RB_BF16 : RB_F32, ne, sh == 0 ? TF_SLICE : TF_PERM, -2, 5);
                tt d = tf_make(be, &rng, sh == 1 ? RB_F16 : RB_F32, ne, TF_SLICE, 0, 1);
                tt w = tf_make(be, &rng, RB_F32, wne, TF_SLICE, 0.5f, 1.5f);
                tt b = tf_make(be, &rng, RB_F16, wne, TF_CONTIG, -1, 1);
                const float eps = 1e-5f;
                if (layer)
                    TU_OK(rb_layer_norm(be, &d.t, &s.t, has_w ? &w.t : NULL, has_w ? &b.t : NULL, eps));
                else
                    TU_OK(rb_rms_norm(be, &d.t, &s.t, has_w ? &w.t : NULL, eps));
                double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
                for (int64_t r = 0; r < d.n / ne[0]; r++) {
                    if (layer)
                        ref_layer_norm_row(s.v + r * ne[0], has_w ? w.v : NULL, has_w ? b.v : NULL, eps, ne[0],
                                           ref + r * ne[0]);
                    else
                        ref_rms_norm_row(s.v + r * ne[0], has_w ? w.v : NULL, eps, ne[0], ref + r * ne[0]);
                }
                char what[64];
                snprintf(what, sizeof what, "norm variant %d shape %d cfg %d", variant, sh, ci);
                tf_expect_close(got, ref, d.n, tf_tol(d.t.dtype, 1e-5), 1e-5, what);
                assert_true(tf_pad_intact(&d));
                free(got);
                free(ref);
                tf_free(&s);
                tf_free(&d);
                tf_free(&w);
                tf_free(&b);
            }
        /* group norm [W, H, C, N] */
        const int64_t gne[4] = {5, 3, 12, 2}, cne[4] = {12, 1, 1, 1};
        for (int groups = 1; groups <= 12; groups *= 2) {
            if (12 % groups) continue;
            tt s = tf_make(be, &rng, RB_F32, gne, TF_PERM, -3, 2);
            tt d = tf_make(be, &rng, RB_F32, gne, TF_SLICE, 0, 1);
            tt w = tf_make(be, &rng, RB_F32, cne, TF_CONTIG, 0.5f, 2);
            tt b = tf_make(be, &rng, RB_BF16, cne, TF_SLICE, -1, 1);
            TU_OK(rb_group_norm(be, &d.t, &s.t, groups, &w.t, groups == 4 ? NULL : &b.t, 1e-6f));
            double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
            ref_group_norm(s.v, gne, groups, w.v, groups == 4 ? NULL : b.v, 1e-6, ref);
            tf_expect_close(got, ref, d.n, 1e-5, 1e-5, "group norm");
            assert_true(tf_pad_intact(&d));
            free(got);
            free(ref);
            tf_free(&s);
            tf_free(&d);
            tf_free(&w);
            tf_free(&b);
        }
        rb_backend_destroy(be);
    }
}

static void test_threads_match(void **state) {
    (void)state;
    rb_backend *b1 = tf_backend(&tf_cfgs[1]), *b3 = tf_backend(&tf_cfgs[2]);
    tu_rng rng;
    tu_rng_seed(&rng, 8000);
    const int64_t ne[4] = {4097, 11, 1, 1};
    tt s1 = tf_make(b1, &rng, RB_F32, ne, TF_CONTIG, -5, 5);
    tt s3 = tf_from(b3, RB_F32, ne, TF_CONTIG, s1.v);
    tt d1 = tf_make(b1, &rng, RB_F32, ne, TF_CONTIG, 0, 1);
    tt d3 = tf_make(b3, &rng, RB_F32, ne, TF_CONTIG, 0, 1);
    for (int op = 0; op < 3; op++) {
        if (op == 0) {
            TU_OK(rb_softmax(b1, &d1.t, &s1.t, NULL, 1.0f));
            TU_OK(rb_softmax(b3, &d3.t, &s3.t, NULL, 1.0f));
        } else if (op == 1) {
            TU_OK(rb_rms_norm(b1, &d1.t, &s1.t, NULL, 1e-6f));
            TU_OK(rb_rms_norm(b3, &d3.t, &s3.t, NULL, 1e-6f));
        } else {
            TU_OK(rb_layer_norm(b1, &d1.t, &s1.t, NULL, NULL, 1e-6f));
            TU_OK(rb_layer_norm(b3, &d3.t, &s3.t, NULL, NULL, 1e-6f));
        }
        double *g1 = tf_read(&d1), *g3 = tf_read(&d3);
        tf_expect_close(g3, g1, d1.n, 0, 0, "3 threads vs 1");
        free(g1);
        free(g3);
    }
    tf_free(&s1);
    tf_free(&s3);
    tf_free(&d1);
    tf_free(&d3);
    rb_backend_destroy(b1);
    rb_backend_destroy(b3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduce_ops),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_threads_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Elementwise ops (fill, affine, unary, binary with broadcasting, where)
 * against double references, on f32/f16/bf16 in contiguous, permuted and
 * sliced layouts, under the scalar ISA and auto with 1 and 3 threads.
 * Bounds: f32 outputs within 1e-5 relative (+1e-6 absolute); f16 outputs
 * add 2^-11 and bf16 2^-8 relative for the final rounding. */
#include "ref_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const int64_t SHAPE[4] = {7, 13, 3, 2};

static void unary_range(rb_unary_op op, float *lo, float *hi) {
    switch (op) {
    case RB_UNARY_SQRT: case RB_UNARY_RSQRT: case RB_UNARY_LOG: case RB_UNARY_RECIP: *lo = 0.1f; *hi = 4.0f; break;
    case RB_UNARY_EXP: *lo = -6.0f; *hi = 6.0f; break;
    default: *lo = -5.0f; *hi = 5.0f; break;
    }
}

static void test_unary(void **state) {
    (void)state;
    const struct { rb_dtype s, d; tf_layout ls, ld; } combos[] = {
        {RB_F32, RB_F32, TF_PERM, TF_SLICE}, {RB_F16, RB_BF16, TF_CONTIG, TF_PERM},
        {RB_BF16, RB_F16, TF_SLICE, TF_CONTIG}, {RB_F32, RB_F32, TF_CONTIG, TF_CONTIG}};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 1000 + (uint64_t)ci);
        for (int op = 0; op < RB_UNARY_COUNT_; op++)
            for (size_t k = 0; k < sizeof combos / sizeof combos[0]; k++) {
                float lo, hi;
                unary_range((rb_unary_op)op, &lo, &hi);
                tt s = tf_make(be, &rng, combos[k].s, SHAPE, combos[k].ls, lo, hi);
                tt d = tf_make(be, &rng, combos[k].d, SHAPE, combos[k].ld, -1, 1);
                TU_OK(rb_unary(be, (rb_unary_op)op, &d.t, &s.t));
                double *got = tf_read(&d), *ref = malloc((size_t)s.n * sizeof(double));
                for (int64_t i = 0; i < s.n; i++) ref[i] = ref_unary((rb_unary_op)op, s.v[i]);
                char what[96];
                snprintf(what, sizeof what, "unary op %d %s->%s cfg %d", op, rb_dtype_name(combos[k].s),
                         rb_dtype_name(combos[k].d), ci);
                tf_expect_close(got, ref, s.n, tf_tol(combos[k].d, 1e-5), 1e-6, what);
                assert_true(tf_pad_intact(&d));
                assert_true(tf_unchanged(&s));
                free(got);
                free(ref);
                tf_free(&s);
                tf_free(&d);
            }
        rb_backend_destroy(be);
    }
}

static void test_binary_broadcast(void **state) {
    (void)state;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 2000 + (uint64_t)ci);
        /* bcast = -1: none; 0..3: b has extent 1 in that dim; 4: b is a scalar; 5: a broadcasts in dim 1 */
        for (int bc = -1; bc <= 5; bc++)
            for (int op = 0; op < RB_BINARY_COUNT_; op++) {
                int64_t ane[4] = {SHAPE[0], SHAPE[1], SHAPE[2], SHAPE[3]}, bne[4] = {SHAPE[0], SHAPE[1], SHAPE[2], SHAPE[3]};
                if (bc >= 0 && bc <= 3) bne[bc] = 1;
                if (bc == 4) bne[0] = bne[1] = bne[2] = bne[3] = 1;
                if (bc == 5) ane[1] = 1;
                rb_dtype da = (bc & 1) ? RB_F16 : RB_F32, db = bc == 2 ? RB_BF16 : RB_F32;
                rb_dtype dd = op == RB_BINARY_MUL ? RB_F16 : RB_F32;
                tt a = tf_make(be, &rng, da, ane, bc == 3 ? TF_PERM : TF_SLICE, -3, 3);
                tt b = tf_make(be, &rng, db, bne, bc == 0 ? TF_SLICE : TF_PERM, 0.5f, 2.5f);
                tt d = tf_make(be, &rng, dd, SHAPE, bc == 1 ? TF_PERM : TF_CONTIG, -1, 1);
                TU_OK(rb_binary(be, (rb_binary_op)op, &d.t, &a.t, &b.t));
                double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
                for (int64_t i3 = 0; i3 < SHAPE[3]; i3++)
                    for (int64_t i2 = 0; i2 < SHAPE[2]; i2++)
                        for (int64_t i1 = 0; i1 < SHAPE[1]; i1++)
                            for (int64_t i0 = 0; i0 < SHAPE[0]; i0++) {
                                double av = a.v[tf_idx(ane, i0 % ane[0], i1 % ane[1], i2 % ane[2], i3 % ane[3])];
                                double bv = b.v[tf_idx(bne, i0 % bne[0], i1 % bne[1], i2 % bne[2], i3 % bne[3])];
                                ref[tf_idx(SHAPE, i0, i1, i2, i3)] = ref_binary((rb_binary_op)op, av, bv);
                            }
                char what[64];
                snprintf(what, sizeof what, "binary op %d bcast %d cfg %d", op, bc, ci);
                tf_expect_close(got, ref, d.n, tf_tol(dd, 1e-6), 1e-6, what);
                assert_true(tf_pad_intact(&d));
                free(got);
                free(ref);
                tf_free(&a);
                tf_free(&b);
                tf_free(&d);
            }
        rb_backend_destroy(be);
    }
}

static void test_fill_affine_where(void **state) {
    (void)state;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 3000 + (uint64_t)ci);
        const rb_dtype fdt[4] = {RB_F32, RB_F16, RB_BF16, RB_I32};
        for (int k = 0; k < 4; k++) {
            tt d = tf_make(be, &rng, fdt[k], SHAPE, k == 2 ? TF_PERM : TF_SLICE, -9, 9);
            TU_OK(rb_fill(be, &d.t, -3.0f));
            double *got = tf_read(&d);
            for (int64_t i = 0; i < d.n; i++) assert_true(got[i] == -3.0);
            assert_true(tf_pad_intact(&d));
            free(got);
            tf_free(&d);
        }
        /* affine, including in place (dst is the same view as src) */
        tt s = tf_make(be, &rng, RB_BF16, SHAPE, TF_PERM, -4, 4);
        tt d = tf_make(be, &rng, RB_F32, SHAPE, TF_SLICE, -4, 4);
        TU_OK(rb_affine(be, &d.t, &s.t, 0.75f, -1.5f));
        double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
        for (int64_t i = 0; i < d.n; i++) ref[i] = s.v[i] * 0.75 - 1.5;
        tf_expect_close(got, ref, d.n, 1e-6, 1e-6, "affine");
        free(got);
        TU_OK(rb_affine(be, &d.t, &d.t, 2.0f, 1.0f));
        got = tf_read(&d);
        for (int64_t i = 0; i < d.n; i++) ref[i] = ref[i] * 2.0 + 1.0;
        tf_expect_close(got, ref, d.n, 1e-6, 1e-6, "affine in place");
        free(got);

        /* where: i32 cond broadcast over dim 0, f16 cond full, a/b broadcast */
        int64_t cne[4] = {1, SHAPE[1], SHAPE[2], SHAPE[3]}, bne[4] = {SHAPE[0], 1, SHAPE[2], 1};
        tt ci32 = tf_make(be, &rng, RB_I32, cne, TF_SLICE, 0, 2);
        tt cf = tf_make(be, &rng, RB_F16, SHAPE, TF_PERM, -1, 1);
        tt a = tf_make(be, &rng, RB_F32, SHAPE, TF_CONTIG, -4, 4);
        tt b = tf_make(be, &rng, RB_F16, bne, TF_PERM, -4, 4);
        for (int which = 0; which < 2; which++) {
            const tt *cond = which ? &cf : &ci32;
            TU_OK(rb_where(be, &d.t, &cond->t, &a.t, &b.t));
            got = tf_read(&d);
            for (int64_t i3 = 0; i3 < SHAPE[3]; i3++)
                for (int64_t i2 = 0; i2 < SHAPE[2]; i2++)
                    for (int64_t i1 = 0; i1 < SHAPE[1]; i1++)
                        for (int64_t i0 = 0; i0 < SHAPE[0]; i0++) {
                            double cv = which ? cf.v[tf_idx(SHAPE, i0, i1, i2, i3)] : ci32.v[tf_idx(cne, 0, i1, i2, i3)];
                            ref[tf_idx(SHAPE, i0, i1, i2, i3)] =
                                cv != 0 ? a.v[tf_idx(SHAPE, i0, i1, i2, i3)] : b.v[tf_idx(bne, i0, 0, i2, 0)];
                        }
            tf_expect_close(got, ref, d.n, 0, 0, "where");
            free(got);
        }
        free(ref);
        tf_free(&ci32);
        tf_free(&cf);
        tf_free(&a);
        tf_free(&b);
        tf_free(&s);
        tf_free(&d);
        rb_backend_destroy(be);
    }
}

/* Large tensors (which wake the pool) give bit-identical results with 1 and
 * 3 threads, and rows of 1 and 4097 elements work. */
static void test_threads_match(void **state) {
    (void)state;
    rb_backend *b1 = tf_backend(&tf_cfgs[1]), *b3 = tf_backend(&tf_cfgs[2]);
    const int64_t shapes[2][4] = {{4097, 9, 1, 1}, {1, 40001, 1, 1}};
    for (int sh = 0; sh < 2; sh++) {
        tu_rng rng;
        tu_rng_seed(&rng, 4000 + (uint64_t)sh);
        tt s1 = tf_make(b1, &rng, RB_F32, shapes[sh], TF_CONTIG, -6, 6);
        tt s3 = tf_from(b3, RB_F32, shapes[sh], TF_PERM, s1.v);
        tt d1 = tf_make(b1, &rng, RB_F32, shapes[sh], TF_CONTIG, 0, 1);
        tt d3 = tf_make(b3, &rng, RB_F32, shapes[sh], TF_SLICE, 0, 1);
        TU_OK(rb_unary(b1, RB_UNARY_GELU, &d1.t, &s1.t));
        TU_OK(rb_unary(b3, RB_UNARY_GELU, &d3.t, &s3.t));
        double *g1 = tf_read(&d1), *g3 = tf_read(&d3), *ref = malloc((size_t)s1.n * sizeof(double));
        for (int64_t i = 0; i < s1.n; i++) ref[i] = ref_unary(RB_UNARY_GELU, s1.v[i]);
        tf_expect_close(g1, ref, s1.n, 1e-5, 1e-6, "gelu 1 thread");
        tf_expect_close(g3, g1, s1.n, 0, 0, "gelu 3 threads vs 1");
        assert_true(tf_pad_intact(&d3));
        free(g1);
        free(g3);
        free(ref);
        tf_free(&s1);
        tf_free(&s3);
        tf_free(&d1);
        tf_free(&d3);
    }
    rb_backend_destroy(b1);
    rb_backend_destroy(b3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_binary_broadcast),
        cmocka_unit_test(test_fill_affine_where),
        cmocka_unit_test(test_threads_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

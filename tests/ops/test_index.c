/* get_rows (f32/f16/bf16 and quantized tables, [T] and [T, B] ids),
 * index_select along each dim, and set_rows (KV-cache style writes into
 * f32/f16/bf16 slots of a strided view), compared exactly with gathers done
 * in the test; out-of-range ids must fail with RB_E_RANGE and write nothing. */
#include "ref_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double conv_to(rb_dtype d, double v) {
    if (d == RB_F16) return rb_f16_to_f32(rb_f32_to_f16((float)v));
    if (d == RB_BF16) return rb_bf16_to_f32(rb_f32_to_bf16((float)v));
    return (float)v;
}

static void test_get_rows(void **state) {
    (void)state;
    const rb_dtype tdt[] = {RB_F32, RB_F16, RB_BF16, RB_Q4_0, RB_Q8_0, RB_Q4_K, RB_Q6_K};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 10000 + (uint64_t)ci);
        for (size_t k = 0; k < sizeof tdt / sizeof tdt[0]; k++) {
            const bool q = rb_dtype_info((int)tdt[k])->is_quant;
            const int64_t V = 29, Dm = q ? 256 : 13, T = 7, B = k % 2 ? 3 : 1;
            const int64_t tne[4] = {Dm, V, 1, 1}, ine[4] = {T, B, 1, 1}, dne[4] = {Dm, T, B, 1};
            tt tab = tf_make(be, &rng, tdt[k], tne, q ? TF_CONTIG : TF_PERM, -2, 2);
            tt ids = tf_make(be, &rng, RB_I32, ine, TF_SLICE, 0, (float)V);
            rb_dtype ddt = k == 2 ? RB_F16 : RB_F32;
            tt d = tf_make(be, &rng, ddt, dne, TF_SLICE, -1, 1);
            TU_OK(rb_get_rows(be, &d.t, &tab.t, &ids.t));
            double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
            for (int64_t b = 0; b < B; b++)
                for (int64_t t = 0; t < T; t++) {
                    int64_t id = (int64_t)ids.v[t + b * T];
                    for (int64_t i = 0; i < Dm; i++) ref[tf_idx(dne, i, t, b, 0)] = conv_to(ddt, tab.v[id * Dm + i]);
                }
            char what[64];
            snprintf(what, sizeof what, "get_rows %s cfg %d", rb_dtype_name(tdt[k]), ci);
            tf_expect_close(got, ref, d.n, 0, 0, what);
            assert_true(tf_pad_intact(&d));
            free(got);
            free(ref);

            /* one bad id: RB_E_RANGE, nothing written */
            double *bad = malloc((size_t)(T * B) * sizeof(double));
            memcpy(bad, ids.v, (size_t)(T * B) * sizeof(double));
            bad[T * B - 1] = (double)V;
            tt bids = tf_from(be, RB_I32, ine, TF_CONTIG, bad);
            tt d2 = tf_make(be, &rng, ddt, dne, TF_CONTIG, -1, 1);
            assert_int_equal(rb_get_rows(be, &d2.t, &tab.t, &bids.t), RB_E_RANGE);
            assert_non_null(strstr(rb_backend_last_error(be), "out of range"));
            assert_true(tf_unchanged(&d2));
            tf_free(&bids);
            bad[0] = -1;
            bids = tf_from(be, RB_I32, ine, TF_CONTIG, bad);
            assert_int_equal(rb_get_rows(be, &d2.t, &tab.t, &bids.t), RB_E_RANGE);
            assert_true(tf_unchanged(&d2));
            free(bad);
            tf_free(&bids);
            tf_free(&d2);
            tf_free(&tab);
            tf_free(&ids);
            tf_free(&d);
        }
        rb_backend_destroy(be);
    }
}

static void test_index_select(void **state) {
    (void)state;
    const int64_t sne[4] = {7, 6, 5, 3};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 11000 + (uint64_t)ci);
        for (int dim = 0; dim < 4; dim++) {
            const int64_t n = 4 + dim;
            const int64_t ine[4] = {n, 1, 1, 1};
            int64_t dne[4] = {sne[0], sne[1], sne[2], sne[3]};
            dne[dim] = n;
            rb_dtype sdt = dim == 1 ? RB_I32 : RB_F32, ddt = dim == 1 ? RB_I32 : dim == 2 ? RB_F16 : RB_F32;
            tt s = tf_make(be, &rng, sdt, sne, TF_PERM, -50, 50);
            tt ids = tf_make(be, &rng, RB_I32, ine, TF_SLICE, 0, (float)sne[dim]);
            tt d = tf_make(be, &rng, ddt, dne, TF_SLICE, -1, 1);
            TU_OK(rb_index_select(be, &d.t, &s.t, &ids.t, dim));
            double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
            for (int64_t i3 = 0; i3 < dne[3]; i3++)
                for (int64_t i2 = 0; i2 < dne[2]; i2++)
                    for (int64_t i1 = 0; i1 < dne[1]; i1++)
                        for (int64_t i0 = 0; i0 < dne[0]; i0++) {
                            int64_t ix[4] = {i0, i1, i2, i3};
                            ix[dim] = (int64_t)ids.v[ix[dim]];
                            double v = s.v[tf_idx(sne, ix[0], ix[1], ix[2], ix[3])];
                            ref[tf_idx(dne, i0, i1, i2, i3)] = ddt == RB_I32 ? v : conv_to(ddt, v);
                        }
            char what[48];
            snprintf(what, sizeof what, "index_select dim %d cfg %d", dim, ci);
            tf_expect_close(got, ref, d.n, 0, 0, what);
            assert_true(tf_pad_intact(&d));
            /* out of range */
            double *bad = malloc((size_t)n * sizeof(double));
            memcpy(bad, ids.v, (size_t)n * sizeof(double));
            bad[n / 2] = (double)sne[dim];
            tt bids = tf_from(be, RB_I32, ine, TF_CONTIG, bad);
            tt d2 = tf_make(be, &rng, ddt, dne, TF_CONTIG, -1, 1);
            assert_int_equal(rb_index_select(be, &d2.t, &s.t, &bids.t, dim), RB_E_RANGE);
            assert_true(tf_unchanged(&d2));
            free(bad);
            free(got);
            free(ref);
            tf_free(&bids);
            tf_free(&d2);
            tf_free(&s);
            tf_free(&ids);
            tf_free(&d);
        }
        rb_backend_destroy(be);
    }
}

static void test_set_rows(void **state) {
    (void)state;
    const rb_dtype ddts[3] = {RB_F16, RB_F32, RB_BF16};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 12000 + (uint64_t)ci);
        for (int k = 0; k < 3; k++) {
            const int64_t D = 24, n = 5, S = 17, A = 3, B = 2;
            const int64_t sne[4] = {D, n, A, B}, dne[4] = {D, S, A, B}, ine[4] = {n, 1, 1, 1};
            tt s = tf_make(be, &rng, k == 2 ? RB_F16 : RB_F32, sne, TF_PERM, -3, 3);
            const double slots[5] = {16, 0, 7, 3, 9};
            tt ids = tf_from(be, RB_I32, ine, TF_SLICE, slots);
            tt d = tf_make(be, &rng, ddts[k], dne, k == 0 ? TF_SLICE : TF_CONTIG, -1, 1);
            double *ref = malloc((size_t)d.n * sizeof(double));
            memcpy(ref, d.v, (size_t)d.n * sizeof(double));
            TU_OK(rb_set_rows(be, &d.t, &s.t, &ids.t));
            for (int64_t b = 0; b < B; b++)
                for (int64_t a = 0; a < A; a++)
                    for (int64_t i = 0; i < n; i++)
                        for (int64_t e = 0; e < D; e++)
                            ref[tf_idx(dne, e, (int64_t)slots[i], a, b)] = conv_to(ddts[k], s.v[tf_idx(sne, e, i, a, b)]);
            double *got = tf_read(&d);
            tf_expect_close(got, ref, d.n, 0, 0, "set_rows");
            assert_true(tf_pad_intact(&d));
            free(got);
            free(ref);
            /* slot == S is out of range: nothing written */
            const double bad[5] = {1, 2, 17, 3, 4};
            tt bids = tf_from(be, RB_I32, ine, TF_CONTIG, bad);
            tt d2 = tf_make(be, &rng, ddts[k], dne, TF_CONTIG, -1, 1);
            assert_int_equal(rb_set_rows(be, &d2.t, &s.t, &bids.t), RB_E_RANGE);
            assert_true(tf_unchanged(&d2));
            tf_free(&bids);
            tf_free(&d2);
            tf_free(&s);
            tf_free(&ids);
            tf_free(&d);
        }
        rb_backend_destroy(be);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_rows),
        cmocka_unit_test(test_index_select),
        cmocka_unit_test(test_set_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* conv1d / conv2d (stride, padding, dilation, groups, bias, f16 weights,
 * strided inputs; the implicit-GEMM path of ungrouped convolutions) and
 * upsample (nearest; bilinear with align_corners=false, both up and down)
 * against double references.
 * Bounds: conv 1e-5 relative + 1e-5 absolute; upsample 1e-6 + 1e-6. */
#include "ref_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_conv1d(void **state) {
    (void)state;
    const struct { int64_t L, Cin, Cout, K, N; int stride, pad, dil, groups; bool bias; rb_dtype wdt; } cs[] = {
        {17, 3, 4, 3, 2, 1, 1, 1, 1, true, RB_F32},  {31, 4, 6, 5, 1, 2, 2, 2, 2, false, RB_F16},
        {9, 6, 6, 3, 3, 3, 0, 1, 6, true, RB_F32},   {5, 2, 3, 1, 1, 1, 0, 1, 1, true, RB_F16},
        {4097, 2, 2, 4, 1, 1, 3, 3, 1, true, RB_F32},
    };
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 18000 + (uint64_t)ci);
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
            const int64_t lout = (cs[k].L + 2 * cs[k].pad - cs[k].dil * (cs[k].K - 1) - 1) / cs[k].stride + 1;
            const int64_t xne[4] = {cs[k].L, cs[k].Cin, cs[k].N, 1}, wne[4] = {cs[k].K, cs[k].Cin / cs[k].groups, cs[k].Cout, 1};
            const int64_t bne[4] = {cs[k].Cout, 1, 1, 1}, dne[4] = {lout, cs[k].Cout, cs[k].N, 1};
            tt x = tf_make(be, &rng, RB_F32, xne, k % 2 ? TF_PERM : TF_SLICE, -1, 1);
            tt w = tf_make(be, &rng, cs[k].wdt, wne, k % 2 ? TF_SLICE : TF_CONTIG, -1, 1);
            tt b = tf_make(be, &rng, RB_F32, bne, TF_SLICE, -1, 1);
            tt d = tf_make(be, &rng, RB_F32, dne, TF_SLICE, 0, 1);
            TU_OK(rb_conv1d(be, &d.t, &x.t, &w.t, cs[k].bias ? &b.t : NULL, cs[k].stride, cs[k].pad, cs[k].dil,
                            cs[k].groups));
            double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
            ref_conv1d(x.v, xne, w.v, wne, cs[k].bias ? b.v : NULL, cs[k].stride, cs[k].pad, cs[k].dil, cs[k].groups,
                       lout, ref);
            char what[48];
            snprintf(what, sizeof what, "conv1d case %zu cfg %d", k, ci);
            tf_expect_close(got, ref, d.n, 1e-5, 1e-5, what);
            assert_true(tf_pad_intact(&d));
            free(got);
            free(ref);
            tf_free(&x);
            tf_free(&w);
            tf_free(&b);
            tf_free(&d);
        }
        rb_backend_destroy(be);
    }
}

static void test_conv2d(void **state) {
    (void)state;
    const struct { int64_t W, H, Cin, Cout, KW, KH, N; int s[2], p[2], dl[2], groups; bool bias; rb_dtype wdt; } cs[] = {
        {9, 7, 3, 4, 3, 3, 2, {1, 1}, {1, 1}, {1, 1}, 1, true, RB_F32},
        {13, 11, 4, 6, 3, 2, 1, {2, 1}, {1, 0}, {1, 2}, 2, false, RB_F16},
        {8, 8, 4, 4, 3, 3, 1, {2, 2}, {2, 1}, {2, 1}, 4, true, RB_F32},
        {5, 1, 2, 3, 1, 1, 3, {1, 1}, {0, 0}, {1, 1}, 1, true, RB_F16},
    };
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 19000 + (uint64_t)ci);
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
            const int64_t wo = (cs[k].W + 2 * cs[k].p[0] - cs[k].dl[0] * (cs[k].KW - 1) - 1) / cs[k].s[0] + 1;
            const int64_t ho = (cs[k].H + 2 * cs[k].p[1] - cs[k].dl[1] * (cs[k].KH - 1) - 1) / cs[k].s[1] + 1;
            const int64_t xne[4] = {cs[k].W, cs[k].H, cs[k].Cin, cs[k].N};
            const int64_t wne[4] = {cs[k].KW, cs[k].KH, cs[k].Cin / cs[k].groups, cs[k].Cout};
            const int64_t bne[4] = {cs[k].Cout, 1, 1, 1}, dne[4] = {wo, ho, cs[k].Cout, cs[k].N};
            tt x = tf_make(be, &rng, RB_F32, xne, k % 2 ? TF_PERM : TF_SLICE, -1, 1);
            tt w = tf_make(be, &rng, cs[k].wdt, wne, k % 2 ? TF_SLICE : TF_PERM, -1, 1);
            tt b = tf_make(be, &rng, RB_F32, bne, TF_CONTIG, -1, 1);
            tt d = tf_make(be, &rng, RB_F32, dne, TF_SLICE, 0, 1);
            TU_OK(rb_conv2d(be, &d.t, &x.t, &w.t, cs[k].bias ? &b.t : NULL, cs[k].s, cs[k].p, cs[k].dl, cs[k].groups));
            double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
            ref_conv2d(x.v, xne, w.v, wne, cs[k].bias ? b.v : NULL, cs[k].s, cs[k].p, cs[k].dl, cs[k].groups, wo, ho, ref);
            char what[48];
            snprintf(what, sizeof what, "conv2d case %zu cfg %d", k, ci);
            tf_expect_close(got, ref, d.n, 1e-5, 1e-5, what);
            assert_true(tf_pad_intact(&d));
            free(got);
            free(ref);
            tf_free(&x);
            tf_free(&w);
            tf_free(&b);
            tf_free(&d);
        }
        /* bad: Cin not divisible by groups, dst of the wrong size, x i32 */
        const int64_t xne[4] = {6, 6, 3, 1}, wne[4] = {3, 3, 3, 2}, dne[4] = {4, 4, 2, 1}, dbad[4] = {5, 4, 2, 1};
        tt x = tf_make(be, &rng, RB_F32, xne, TF_CONTIG, -1, 1);
        tt xh = tf_make(be, &rng, RB_I32, xne, TF_CONTIG, -1, 1);
        tt w = tf_make(be, &rng, RB_F32, wne, TF_CONTIG, -1, 1);
        tt d = tf_make(be, &rng, RB_F32, dne, TF_CONTIG, -1, 1);
        tt db = tf_make(be, &rng, RB_F32, dbad, TF_CONTIG, -1, 1);
        const int one[2] = {1, 1}, zero[2] = {0, 0}, neg[2] = {-1, 0};
        TU_OK(rb_conv2d(be, &d.t, &x.t, &w.t, NULL, one, zero, one, 1));
        assert_int_equal(rb_conv2d(be, &d.t, &x.t, &w.t, NULL, one, zero, one, 2), RB_E_INVALID);
        assert_int_equal(rb_conv2d(be, &db.t, &x.t, &w.t, NULL, one, zero, one, 1), RB_E_INVALID);
        assert_int_equal(rb_conv2d(be, &d.t, &xh.t, &w.t, NULL, one, zero, one, 1), RB_E_INVALID);
        assert_int_equal(rb_conv2d(be, &d.t, &x.t, &w.t, NULL, zero, zero, one, 1), RB_E_INVALID);
        assert_int_equal(rb_conv2d(be, &d.t, &x.t, &w.t, NULL, one, neg, one, 1), RB_E_INVALID);
        assert_non_null(strstr(rb_backend_last_error(be), "rb_conv2d"));
        assert_true(tf_unchanged(&db));
        tf_free(&x);
        tf_free(&xh);
        tf_free(&w);
        tf_free(&d);
        tf_free(&db);
        rb_backend_destroy(be);
    }
}

/* conv2d without groups and with contiguous kernels: the implicit-GEMM path
 * (ops_conv_gemm.c), with K = Cin*KH*KW below, at and above the SIMD width,
 * partial channel and pixel tiles, stride 2 without padding, dilation. */
static void test_conv2d_gemm(void **state) {
    (void)state;
    const struct { int64_t W, H, Cin, Cout, KW, KH, N; int s[2], p[2], dl[2]; bool bias; rb_dtype wdt; } cs[] = {
        {16, 12, 40, 24, 3, 3, 2, {1, 1}, {1, 1}, {1, 1}, true, RB_F32},
        {17, 9, 32, 20, 3, 3, 1, {2, 2}, {0, 0}, {1, 1}, true, RB_F16},
        {10, 10, 8, 13, 1, 1, 3, {1, 1}, {0, 0}, {1, 1}, false, RB_F32},
        {35, 7, 5, 9, 3, 5, 1, {1, 2}, {2, 1}, {2, 1}, true, RB_F16},
    };
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 19500 + (uint64_t)ci);
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
            const int64_t wo = (cs[k].W + 2 * cs[k].p[0] - cs[k].dl[0] * (cs[k].KW - 1) - 1) / cs[k].s[0] + 1;
            const int64_t ho = (cs[k].H + 2 * cs[k].p[1] - cs[k].dl[1] * (cs[k].KH - 1) - 1) / cs[k].s[1] + 1;
            const int64_t xne[4] = {cs[k].W, cs[k].H, cs[k].Cin, cs[k].N};
            const int64_t wne[4] = {cs[k].KW, cs[k].KH, cs[k].Cin, cs[k].Cout};
            const int64_t bne[4] = {cs[k].Cout, 1, 1, 1}, dne[4] = {wo, ho, cs[k].Cout, cs[k].N};
            tt x = tf_make(be, &rng, RB_F32, xne, k == 1 ? TF_PERM : k == 2 ? TF_SLICE : TF_CONTIG, -1, 1);
            tt w = tf_make(be, &rng, cs[k].wdt, wne, TF_CONTIG, -1, 1);
            tt b = tf_make(be, &rng, RB_F32, bne, TF_SLICE, -1, 1);
            tt d = tf_make(be, &rng, RB_F32, dne, k % 2 ? TF_SLICE : TF_PERM, 0, 1);
            TU_OK(rb_conv2d(be, &d.t, &x.t, &w.t, cs[k].bias ? &b.t : NULL, cs[k].s, cs[k].p, cs[k].dl, 1));
            double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
            ref_conv2d(x.v, xne, w.v, wne, cs[k].bias ? b.v : NULL, cs[k].s, cs[k].p, cs[k].dl, 1, wo, ho, ref);
            char what[48];
            snprintf(what, sizeof what, "conv2d gemm case %zu cfg %d", k, ci);
            tf_expect_close(got, ref, d.n, 1e-5, 1e-5, what);
            assert_true(tf_pad_intact(&d));
            free(got);
            free(ref);
            tf_free(&x);
            tf_free(&w);
            tf_free(&b);
            tf_free(&d);
        }
        rb_backend_destroy(be);
    }
}

static void test_upsample(void **state) {
    (void)state;
    const int64_t sizes[4][4] = {{5, 3, 14, 7}, {7, 6, 3, 4}, {1, 1, 3, 2}, {4, 4, 4, 4}}; /* W, H, W', H' */
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 20000 + (uint64_t)ci);
        for (int k = 0; k < 4; k++)
            for (int mode = 0; mode < 2; mode++) {
                const int64_t sne[4] = {sizes[k][0], sizes[k][1], 3, 2}, dne[4] = {sizes[k][2], sizes[k][3], 3, 2};
                tt s = tf_make(be, &rng, k == 1 ? RB_F16 : RB_F32, sne, k % 2 ? TF_SLICE : TF_PERM, -2, 2);
                tt d = tf_make(be, &rng, RB_F32, dne, TF_SLICE, 0, 1);
                TU_OK(rb_upsample(be, &d.t, &s.t, (rb_upsample_mode)mode));
                double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
                ref_upsample(s.v, sne, dne[0], dne[1], (rb_upsample_mode)mode, ref);
                char what[48];
                snprintf(what, sizeof what, "upsample size %d mode %d cfg %d", k, mode, ci);
                tf_expect_close(got, ref, d.n, 1e-6, 1e-6, what);
                assert_true(tf_pad_intact(&d));
                free(got);
                free(ref);
                tf_free(&s);
                tf_free(&d);
            }
        rb_backend_destroy(be);
    }
}

/* torch.nn.functional.interpolate(x, size=(1, 4), mode='bilinear',
 * align_corners=False) of the row [1, 2] gives [1, 1.25, 1.75, 2]. */
static void test_upsample_torch_values(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[1]);
    const int64_t sne[4] = {2, 1, 1, 1}, dne[4] = {4, 1, 1, 1};
    const double in[2] = {1, 2}, zero[4] = {0}, expect[4] = {1, 1.25, 1.75, 2};
    tt s = tf_from(be, RB_F32, sne, TF_CONTIG, in);
    tt d = tf_from(be, RB_F32, dne, TF_CONTIG, zero);
    TU_OK(rb_upsample(be, &d.t, &s.t, RB_UPSAMPLE_BILINEAR));
    double *got = tf_read(&d);
    tf_expect_close(got, expect, 4, 0, 0, "bilinear torch values");
    free(got);
    tf_free(&s);
    tf_free(&d);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv1d),
        cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_conv2d_gemm),
        cmocka_unit_test(test_upsample),
        cmocka_unit_test(test_upsample_torch_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

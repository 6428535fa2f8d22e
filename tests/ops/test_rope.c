/* rb_rope against a double reference: normal and neox layouts, full and
 * partial n_rot, freq_scale, attn_factor and freq_factors, f32/f16/bf16,
 * strided views and in-place use. Positions go up to ~3000, so the bound is
 * 2e-5 relative + 2e-5 absolute for f32 (the reference angle is exact; the
 * kernel's is rounded once to f32 cos/sin). */
#include "ref_ops.h"

#include <stdio.h>
#include <stdlib.h>

static void test_rope_cases(void **state) {
    (void)state;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 15000 + (uint64_t)ci);
        for (int c = 0; c < 8; c++) {
            const int64_t D = c % 4 == 3 ? 64 : 18, H = 3, T = 5, B = c % 2 + 1;
            const int64_t ne[4] = {D, H, T, B}, pne[4] = {T, 1, 1, 1};
            rb_rope_params p = {.n_rot = (c & 1) ? (int)D : 8, .mode = c & 2 ? RB_ROPE_NEOX : RB_ROPE_NORMAL,
                                .freq_base = c < 4 ? 10000.0f : 500000.0f, .freq_scale = c == 5 ? 0.25f : 1.0f,
                                .attn_factor = c == 6 ? 1.3f : 1.0f, .freq_factors = NULL};
            rb_dtype dt = c == 2 ? RB_F16 : c == 7 ? RB_BF16 : RB_F32;
            tt s = tf_make(be, &rng, dt, ne, c % 3 == 0 ? TF_PERM : TF_SLICE, -2, 2);
            tt pos = tf_make(be, &rng, RB_I32, pne, TF_SLICE, 0, 3000);
            const int64_t fne[4] = {p.n_rot / 2, 1, 1, 1};
            tt ff = tf_make(be, &rng, RB_F32, fne, TF_SLICE, 1, 8);
            if (c >= 4) p.freq_factors = &ff.t;
            tt d = tf_make(be, &rng, dt, ne, c % 2 ? TF_CONTIG : TF_PERM, -1, 1);
            TU_OK(rb_rope(be, &d.t, &s.t, &pos.t, &p));
            int32_t posi[5];
            for (int t = 0; t < T; t++) posi[t] = (int32_t)pos.v[t];
            double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
            ref_rope(s.v, ne, posi, p.n_rot, p.mode, p.freq_base, p.freq_scale, p.attn_factor,
                     p.freq_factors ? ff.v : NULL, ref);
            char what[48];
            snprintf(what, sizeof what, "rope case %d cfg %d", c, ci);
            tf_expect_close(got, ref, d.n, tf_tol(dt, 2e-5), 2e-5 * 2, what);
            assert_true(tf_pad_intact(&d));
            /* in place on the source view */
            TU_OK(rb_rope(be, &s.t, &s.t, &pos.t, &p));
            double *got2 = tf_read(&s);
            tf_expect_close(got2, got, s.n, 0, 0, "rope in place");
            free(got);
            free(got2);
            free(ref);
            tf_free(&s);
            tf_free(&pos);
            tf_free(&ff);
            tf_free(&d);
        }
        rb_backend_destroy(be);
    }
}

static void test_rope_bad(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[1]);
    tu_rng rng;
    tu_rng_seed(&rng, 15500);
    const int64_t ne[4] = {8, 2, 3, 1}, pne[4] = {3, 1, 1, 1}, bad_pne[4] = {4, 1, 1, 1};
    tt s = tf_make(be, &rng, RB_F32, ne, TF_CONTIG, -1, 1);
    tt d = tf_make(be, &rng, RB_F32, ne, TF_CONTIG, -1, 1);
    tt pos = tf_make(be, &rng, RB_I32, pne, TF_CONTIG, 0, 9);
    tt bpos = tf_make(be, &rng, RB_I32, bad_pne, TF_CONTIG, 0, 9);
    tt fpos = tf_make(be, &rng, RB_F32, pne, TF_CONTIG, 0, 9);
    rb_rope_params p = {.n_rot = 8, .mode = RB_ROPE_NEOX, .freq_base = 10000, .freq_scale = 1, .attn_factor = 1};
    assert_int_equal(rb_rope(be, &d.t, &s.t, &bpos.t, &p), RB_E_INVALID);
    assert_int_equal(rb_rope(be, &d.t, &s.t, &fpos.t, &p), RB_E_INVALID);
    p.n_rot = 10;
    assert_int_equal(rb_rope(be, &d.t, &s.t, &pos.t, &p), RB_E_INVALID);
    p.n_rot = 3;
    assert_int_equal(rb_rope(be, &d.t, &s.t, &pos.t, &p), RB_E_INVALID);
    p.n_rot = 8;
    p.mode = (rb_rope_mode)1;
    assert_int_equal(rb_rope(be, &d.t, &s.t, &pos.t, &p), RB_E_INVALID);
    p.mode = RB_ROPE_NORMAL;
    p.freq_factors = &pos.t; /* wrong dtype and length */
    assert_int_equal(rb_rope(be, &d.t, &s.t, &pos.t, &p), RB_E_INVALID);
    assert_int_equal(rb_rope(be, &d.t, &s.t, &pos.t, NULL), RB_E_INVALID);
    assert_true(tf_unchanged(&d));
    tf_free(&s);
    tf_free(&d);
    tf_free(&pos);
    tf_free(&bpos);
    tf_free(&fpos);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_cases),
        cmocka_unit_test(test_rope_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* argsort (stable, both directions, ties from a coarse value grid) and
 * topk (small k via the insertion path and large k via the sort path, ties
 * keep the lower index) against a reference built with a stable insertion
 * sort in the test; k > ne0 and k < 1 are rejected. */
#include "ref_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stable insertion sort of indices by x (desc or asc). */
static void ref_argsort(const double *x, int64_t n, bool desc, int32_t *idx) {
    for (int64_t i = 0; i < n; i++) {
        int64_t j = i;
        while (j > 0 && (desc ? x[idx[j - 1]] < x[i] : x[idx[j - 1]] > x[i])) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = (int32_t)i;
    }
}

static void test_argsort(void **state) {
    (void)state;
    const int64_t shapes[3][4] = {{37, 5, 3, 1}, {1, 4, 1, 1}, {4097, 2, 1, 1}};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 13000 + (uint64_t)ci);
        for (int sh = 0; sh < 3; sh++)
            for (int desc = 0; desc < 2; desc++) {
                const int64_t *ne = shapes[sh];
                /* integers in a small range: many ties */
                rb_dtype sdt = sh == 0 ? RB_I32 : sh == 1 ? RB_F16 : RB_F32;
                tt s = tf_make(be, &rng, sdt, ne, TF_PERM, -20, 20);
                if (sdt != RB_I32) { /* coarse grid of floats */
                    for (int64_t i = 0; i < s.n; i++) s.v[i] = (double)(int)(s.v[i] * 2) / 2;
                    tt t2 = tf_from(be, sdt, ne, TF_PERM, s.v);
                    tf_free(&s);
                    s = t2;
                }
                tt d = tf_make(be, &rng, RB_I32, ne, TF_SLICE, 0, 1);
                TU_OK(rb_argsort(be, &d.t, &s.t, desc));
                double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
                int32_t *idx = malloc((size_t)ne[0] * sizeof(int32_t));
                for (int64_t r = 0; r < d.n / ne[0]; r++) {
                    ref_argsort(s.v + r * ne[0], ne[0], desc, idx);
                    for (int64_t i = 0; i < ne[0]; i++) ref[r * ne[0] + i] = idx[i];
                }
                char what[48];
                snprintf(what, sizeof what, "argsort shape %d desc %d cfg %d", sh, desc, ci);
                tf_expect_close(got, ref, d.n, 0, 0, what);
                assert_true(tf_pad_intact(&d));
                free(idx);
                free(got);
                free(ref);
                tf_free(&s);
                tf_free(&d);
            }
        rb_backend_destroy(be);
    }
}

static void test_topk(void **state) {
    (void)state;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 14000 + (uint64_t)ci);
        const int ks[4] = {1, 5, 64, 300};
        for (int kk = 0; kk < 4; kk++) {
            const int k = ks[kk];
            const int64_t ne[4] = {1001, 3, 2, 1}, one[4] = {k, 3, 2, 1};
            rb_dtype sdt = kk % 2 ? RB_BF16 : RB_F32;
            tt s = tf_make(be, &rng, sdt, ne, kk == 2 ? TF_PERM : TF_CONTIG, -8, 8);
            for (int64_t i = 0; i < s.n; i++) s.v[i] = (double)(int)(s.v[i] * 4) / 4; /* ties */
            tt s2 = tf_from(be, sdt, ne, kk == 2 ? TF_PERM : TF_CONTIG, s.v);
            tf_free(&s);
            s = s2;
            tt vals = tf_make(be, &rng, kk == 3 ? RB_F32 : sdt, one, TF_SLICE, 0, 1);
            tt inds = tf_make(be, &rng, RB_I32, one, TF_SLICE, 0, 1);
            TU_OK(rb_topk(be, &vals.t, &inds.t, &s.t, k));
            double *gv = tf_read(&vals), *gi = tf_read(&inds);
            double *rv = malloc((size_t)vals.n * sizeof(double)), *ri = malloc((size_t)vals.n * sizeof(double));
            int32_t *idx = malloc((size_t)ne[0] * sizeof(int32_t));
            for (int64_t r = 0; r < 6; r++) {
                ref_argsort(s.v + r * ne[0], ne[0], true, idx);
                for (int i = 0; i < k; i++) {
                    ri[r * k + i] = idx[i];
                    rv[r * k + i] = s.v[r * ne[0] + idx[i]];
                }
            }
            char what[48];
            snprintf(what, sizeof what, "topk k=%d cfg %d", k, ci);
            tf_expect_close(gi, ri, inds.n, 0, 0, what);
            tf_expect_close(gv, rv, vals.n, 0, 0, what);
            assert_true(tf_pad_intact(&vals) && tf_pad_intact(&inds));
            free(gv);
            free(gi);
            free(rv);
            free(ri);
            free(idx);
            tf_free(&s);
            tf_free(&vals);
            tf_free(&inds);
        }
        /* k out of range */
        const int64_t ne[4] = {10, 2, 1, 1}, one[4] = {11, 2, 1, 1};
        tt s = tf_make(be, &rng, RB_F32, ne, TF_CONTIG, -1, 1);
        tt vals = tf_make(be, &rng, RB_F32, one, TF_CONTIG, 0, 1);
        tt inds = tf_make(be, &rng, RB_I32, one, TF_CONTIG, 0, 1);
        assert_int_equal(rb_topk(be, &vals.t, &inds.t, &s.t, 11), RB_E_INVALID);
        assert_non_null(strstr(rb_backend_last_error(be), "k = 11"));
        assert_int_equal(rb_topk(be, &vals.t, &inds.t, &s.t, 0), RB_E_INVALID);
        assert_true(tf_unchanged(&vals) && tf_unchanged(&inds));
        tf_free(&s);
        tf_free(&vals);
        tf_free(&inds);
        rb_backend_destroy(be);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argsort),
        cmocka_unit_test(test_topk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

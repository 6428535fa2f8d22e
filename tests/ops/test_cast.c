/* rb_cast: every pair of plain dtypes (exact expectations: float -> int
 * truncates and saturates, NaN -> 0), strided to contiguous copies,
 * quantization (must equal rb_quantize_row exactly) and dequantization
 * (must equal rb_dequantize_row exactly), under every test configuration. */
#include "ref_ops.h"

#include "rbee/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const rb_dtype PLAIN[] = {RB_F32, RB_F16, RB_BF16, RB_F64, RB_I8, RB_I16, RB_I32, RB_I64};

static double expect_conv(rb_dtype d, double v) {
    switch (d) {
    case RB_F32: return (float)v;
    case RB_F16: return rb_f16_to_f32(rb_f32_to_f16((float)v));
    case RB_BF16: return rb_bf16_to_f32(rb_f32_to_bf16((float)v));
    case RB_F64: return v;
    case RB_I8: { double t = trunc(v); return t < -128 ? -128 : t > 127 ? 127 : t; }
    case RB_I16: { double t = trunc(v); return t < -32768 ? -32768 : t > 32767 ? 32767 : t; }
    default: return trunc(v);
    }
}

static void test_plain_pairs(void **state) {
    (void)state;
    const int64_t ne[4] = {9, 5, 3, 2};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 9000 + (uint64_t)ci);
        for (size_t a = 0; a < sizeof PLAIN / sizeof PLAIN[0]; a++)
            for (size_t b = 0; b < sizeof PLAIN / sizeof PLAIN[0]; b++) {
                tt s = tf_make(be, &rng, PLAIN[a], ne, TF_PERM, -100, 100);
                tt d = tf_make(be, &rng, PLAIN[b], ne, TF_SLICE, -5, 5);
                TU_OK(rb_cast(be, &d.t, &s.t));
                double *got = tf_read(&d), *ref = malloc((size_t)s.n * sizeof(double));
                for (int64_t i = 0; i < s.n; i++) ref[i] = expect_conv(PLAIN[b], s.v[i]);
                char what[64];
                snprintf(what, sizeof what, "cast %s -> %s cfg %d", rb_dtype_name(PLAIN[a]), rb_dtype_name(PLAIN[b]), ci);
                tf_expect_close(got, ref, s.n, 0, 0, what);
                assert_true(tf_pad_intact(&d));
                free(got);
                free(ref);
                tf_free(&s);
                tf_free(&d);
            }
        rb_backend_destroy(be);
    }
}

static void test_saturation(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[1]);
    const int64_t ne[4] = {6, 1, 1, 1};
    const double in[6] = {300.7, -1e10, NAN, -2.9, 2.9, 1e30};
    tt s = tf_from(be, RB_F32, ne, TF_CONTIG, in);
    const struct { rb_dtype t; double e[6]; } cases[] = {
        {RB_I8, {127, -128, 0, -2, 2, 127}},
        {RB_I32, {300, -2147483648.0, 0, -2, 2, 2147483647.0}},
        {RB_I64, {300, -1e10, 0, -2, 2, 9223372036854775807.0}},
    };
    for (int k = 0; k < 3; k++) {
        const double zero[6] = {0};
        tt d = tf_from(be, cases[k].t, ne, TF_CONTIG, zero);
        TU_OK(rb_cast(be, &d.t, &s.t));
        double *got = tf_read(&d);
        tf_expect_close(got, cases[k].e, 6, 0, 0, "saturating cast");
        free(got);
        tf_free(&d);
    }
    tf_free(&s);
    rb_backend_destroy(be);
}

static void test_quant(void **state) {
    (void)state;
    const rb_dtype qs[] = {RB_Q4_0, RB_Q4_1, RB_Q5_0, RB_Q5_1, RB_Q8_0, RB_Q2_K, RB_Q3_K, RB_Q4_K, RB_Q5_K, RB_Q6_K};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 9500 + (uint64_t)ci);
        for (size_t q = 0; q < sizeof qs / sizeof qs[0]; q++) {
            const int64_t ne[4] = {512, 3, 2, 1};
            /* quantize from a strided f16 view */
            tt s = tf_make(be, &rng, RB_F16, ne, TF_PERM, -2, 2);
            tt expect = tf_from(be, qs[q], ne, TF_CONTIG, s.v); /* rb_quantize_row of the same values */
            tt d = tf_make(be, &rng, qs[q], ne, TF_CONTIG, -1, 1);
            TU_OK(rb_cast(be, &d.t, &s.t));
            double *got = tf_read(&d);
            char what[64];
            snprintf(what, sizeof what, "quantize %s cfg %d", rb_dtype_name(qs[q]), ci);
            tf_expect_close(got, expect.v, d.n, 0, 0, what);
            free(got);
            /* dequantize into strided f32 and contiguous bf16 */
            tt o = tf_make(be, &rng, RB_F32, ne, TF_SLICE, 0, 1);
            TU_OK(rb_cast(be, &o.t, &expect.t));
            got = tf_read(&o);
            snprintf(what, sizeof what, "dequantize %s cfg %d", rb_dtype_name(qs[q]), ci);
            tf_expect_close(got, expect.v, o.n, 0, 0, what);
            assert_true(tf_pad_intact(&o));
            free(got);
            tt ob = tf_make(be, &rng, RB_BF16, ne, TF_CONTIG, 0, 1);
            TU_OK(rb_cast(be, &ob.t, &expect.t));
            got = tf_read(&ob);
            tf_expect_close(got, expect.v, o.n, 1.0 / 256, 0, what);
            free(got);
            /* quantized -> quantized is refused and writes nothing */
            if (q > 0) {
                assert_int_equal(rb_cast(be, &d.t, &expect.t), RB_E_UNSUPPORTED);
                assert_non_null(strstr(rb_backend_last_error(be), "rb_cast"));
            }
            tf_free(&s);
            tf_free(&expect);
            tf_free(&d);
            tf_free(&o);
            tf_free(&ob);
        }
        rb_backend_destroy(be);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_pairs),
        cmocka_unit_test(test_saturation),
        cmocka_unit_test(test_quant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

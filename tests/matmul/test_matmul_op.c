/* rb_matmul on the CPU backend, end to end, for every ISA this CPU has:
 * every weight dtype x activation dtype (f32/f16/bf16) x M in {1, 3, 17} (and 70),
 * odd N, against a naive double reference computed on the DEQUANTIZED
 * weights and the original activations; batched broadcast (A2=2, B2=6,
 * A3=1, B3=2); transposed (strided) b; f16 dst; 1 vs 2 threads bit-identical;
 * bad inputs refused.
 *
 * Error bounds (relative L2 of the output against the reference):
 *  - f32/f16/bf16 weights: activations stay f32, only float rounding of the
 *    K-term sums: 1e-5.
 *  - quantized weights: activations are quantized to q8_0/q8_1 (blocks of 32)
 *    or q8_K (256), each value rounded to a step of amax_block/127, i.e. an
 *    RMS error of amax_block/(127 sqrt 12). With independent random weights
 *    the output's relative L2 error is then about
 *        e_act = sqrt(sum_blocks n_b (amax_b/127)^2 / 12 / sum x^2),
 *    computed from the actual activations; bound = 3 e_act + 1e-5 (about
 *    1.5e-2 for 32-blocks of normal data with outliers, 3e-2 for 256-blocks).
 *    The exact agreement of the integer kernels with the quantized
 *    activations is checked in test_matmul_kernels.
 *  - f16 dst adds its rounding (2^-11 relative): +1e-3.
 * The reference uses the activations as the op receives them (rounded to
 * f16/bf16 when b has that dtype). */
#include "mm_testlib.h"

#include "rbee/backend.h"
#include "rbee/ops.h"
#include "backends/cpu/cpu_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *k_isas[] = {"scalar", "avx2", "avx512"};

static int n_isas(void) {
    rb_backend_config cfg = {.n_threads = 1, .cpu_isa = "avx512"};
    rb_backend *be = NULL;
    int n = 1;
    for (int i = 1; i < 3; i++) {
        cfg.cpu_isa = k_isas[i];
        if (rb_backend_create("cpu", &cfg, &be, NULL) == RB_OK) {
            rb_backend_destroy(be);
            n = i + 1;
        }
    }
    return n;
}

static rb_backend *make_be(const char *isa, int threads) {
    rb_backend_config cfg = {.n_threads = threads, .cpu_isa = isa};
    rb_backend *be = NULL;
    rb_error err;
    rb_status s = rb_backend_create("cpu", &cfg, &be, &err);
    if (s != RB_OK) fail_msg("cpu backend (%s, %d threads): %s", isa, threads, err.msg);
    return be;
}

/* predicted relative L2 error from quantizing x (rows of K) in blocks of bs values to 8 bits */
static double act_quant_err(const float *x, int64_t rows, int64_t K, int64_t bs) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < rows * K; i += bs) {
        double amax = 0;
        for (int64_t j = 0; j < bs; j++) {
            amax = fmax(amax, fabs(x[i + j]));
            den += (double)x[i + j] * x[i + j];
        }
        num += (double)bs * (amax / 127) * (amax / 127) / 12.0;
    }
    return sqrt(num / den);
}

typedef struct mm_case {
    rb_dtype w, act, dst;
    int64_t K, N, M, A2, A3, B2, B3;
    bool b_transposed;
} mm_case;

/* Runs one case on be; returns the output as f32 [N, M, B2, B3] (malloc'ed) and checks it. */
static float *run_case(rb_backend *be, const mm_case *c, uint64_t seed) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    const int64_t na = c->N * c->A2 * c->A3, nb = c->M * c->B2 * c->B3;
    float *wf = malloc(sizeof(float) * (size_t)(na * c->K));
    float *bf = malloc(sizeof(float) * (size_t)(nb * c->K));
    assert_true(wf && bf);
    mm_fill(&r, wf, (size_t)(na * c->K), 0.3f);
    mm_fill(&r, bf, (size_t)(nb * c->K), 1.0f);
    void *wq = mm_encode(c->w, wf, na, c->K);
    float *wd = mm_decode(c->w, wq, na, c->K);
    /* activations as the kernel sees them: rounded to the activation dtype */
    void *bq = mm_encode(c->act, bf, nb, c->K);
    float *bd = mm_decode(c->act, bq, nb, c->K);

    rb_tensor a, b, d;
    int64_t ne_a[4] = {c->K, c->N, c->A2, c->A3}, ne_d[4] = {c->N, c->M, c->B2, c->B3};
    TU_OK(rb_tensor_alloc(be, c->w, 4, ne_a, &a));
    TU_OK(rb_tensor_set(&a, wq, rb_dtype_row_size(c->w, c->K) * (size_t)na));
    rb_tensor bstore;
    if (!c->b_transposed) {
        int64_t ne_b[4] = {c->K, c->M, c->B2, c->B3};
        TU_OK(rb_tensor_alloc(be, c->act, 4, ne_b, &bstore));
        TU_OK(rb_tensor_set(&bstore, bq, rb_dtype_row_size(c->act, c->K) * (size_t)nb));
        b = bstore;
    } else {
        /* store b^T [M, K] (2-D) and pass the transposed view [K, M] */
        assert_true(c->B2 == 1 && c->B3 == 1);
        int64_t ne_t[2] = {c->M, c->K};
        TU_OK(rb_tensor_alloc(be, c->act, 2, ne_t, &bstore));
        size_t es = rb_dtype_row_size(c->act, 1);
        char *tmp = malloc(es * (size_t)(c->M * c->K));
        assert_non_null(tmp);
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t k = 0; k < c->K; k++)
                memcpy(tmp + (size_t)(k * c->M + m) * es, (char *)bq + (size_t)(m * c->K + k) * es, es);
        TU_OK(rb_tensor_set(&bstore, tmp, es * (size_t)(c->M * c->K)));
        free(tmp);
        TU_OK(rb_tensor_transpose(&bstore, &b));
        assert_int_equal(b.ne[0], c->K);
        assert_false(rb_tensor_rows_contiguous(&b));
    }
    TU_OK(rb_tensor_alloc(be, c->dst, 4, ne_d, &d));
    rb_status s = rb_matmul(be, &d, &a, &b);
    if (s != RB_OK) fail_msg("%s x %s: %s", rb_dtype_name(c->w), rb_dtype_name(c->act), rb_backend_last_error(be));
    TU_OK(rb_backend_sync(be));
    const size_t nout = (size_t)(c->N * c->M * c->B2 * c->B3);
    float *out = malloc(sizeof(float) * nout);
    assert_non_null(out);
    if (c->dst == RB_F32) {
        TU_OK(rb_tensor_get(&d, out, nout * 4));
    } else {
        rb_f16 *h = malloc(2 * nout);
        assert_non_null(h);
        TU_OK(rb_tensor_get(&d, h, nout * 2));
        rb_f16_to_f32_row(h, out, (int64_t)nout);
        free(h);
    }

    double *ref = malloc(sizeof(double) * nout);
    assert_non_null(ref);
    for (int64_t i3 = 0; i3 < c->B3; i3++)
        for (int64_t i2 = 0; i2 < c->B2; i2++)
            for (int64_t m = 0; m < c->M; m++)
                for (int64_t n = 0; n < c->N; n++) {
                    int64_t arow = ((i3 / (c->B3 / c->A3)) * c->A2 + i2 / (c->B2 / c->A2)) * c->N + n;
                    int64_t brow = (i3 * c->B2 + i2) * c->M + m;
                    ref[((i3 * c->B2 + i2) * c->M + m) * c->N + n] =
                        mm_dot_ref(wd + arow * c->K, bd + brow * c->K, c->K, NULL);
                }
    double err = tu_rel_l2(out, ref, nout);
    double bound = 1e-5;
    if (rb_dtype_info((int)c->w)->is_quant)
        bound += 3.0 * act_quant_err(bd, nb, c->K, rb_dtype_info((int)c->w)->block_size >= 256 ? 256 : 32);
    if (c->dst == RB_F16) bound += 1e-3;
    if (!(err <= bound))
        fail_msg("%s w x %s b -> %s, K=%lld N=%lld M=%lld B2=%lld%s: rel L2 %.3g > %.3g (%s)", rb_dtype_name(c->w),
                 rb_dtype_name(c->act), rb_dtype_name(c->dst), (long long)c->K, (long long)c->N, (long long)c->M,
                 (long long)c->B2, c->b_transposed ? " (b transposed)" : "", err, bound, rb_backend_name(be));
    free(ref); free(wf); free(bf); free(wq); free(wd); free(bq); free(bd);
    rb_tensor_free(&a);
    rb_tensor_free(&bstore);
    rb_tensor_free(&d);
    return out;
}

static void test_all_dtypes_shapes(void **state) {
    (void)state;
    const rb_dtype acts[] = {RB_F32, RB_F16, RB_BF16};
    const int64_t Ms[] = {1, 3, 17};
    for (int isa = 0; isa < n_isas(); isa++) {
        rb_backend *be = make_be(k_isas[isa], 2);
        for (int wi = 0; wi < mm_n_weight_dtypes; wi++) {
            for (int ai = 0; ai < 3; ai++) {
                for (int mi = 0; mi < 3; mi++) {
                    mm_case c = {mm_weight_dtypes[wi], acts[ai], RB_F32, 512, 37, Ms[mi], 1, 1, 1, 1, false};
                    free(run_case(be, &c, 1000 + (uint64_t)(wi * 100 + ai * 10 + mi)));
                    if (mm_small_block(c.w)) { /* K a multiple of 32 but not of 256 */
                        c.K = 96 + 32 * (mi == 2);
                        free(run_case(be, &c, 5000 + (uint64_t)(wi * 100 + ai * 10 + mi)));
                    }
                }
            }
        }
        rb_backend_destroy(be);
    }
}

static void test_broadcast_strided_f16dst(void **state) {
    (void)state;
    for (int isa = 0; isa < n_isas(); isa++) {
        rb_backend *be = make_be(k_isas[isa], 2);
        for (int wi = 0; wi < mm_n_weight_dtypes; wi++) {
            rb_dtype w = mm_weight_dtypes[wi];
            mm_case bc = {w, RB_F32, RB_F32, 256, 13, 5, 2, 1, 6, 2, false};
            free(run_case(be, &bc, 77 + (uint64_t)wi));
            mm_case tc = {w, RB_F32, RB_F32, 256, 21, 9, 1, 1, 1, 1, true};
            free(run_case(be, &tc, 88 + (uint64_t)wi));
            mm_case hc = {w, RB_F16, RB_F16, 256, 19, 17, 1, 1, 1, 1, false};
            free(run_case(be, &hc, 99 + (uint64_t)wi));
            /* several 32-row activation blocks of the float prefill kernel, the last one partial */
            mm_case mc = {w, RB_F32, RB_F32, 256, 29, 70, 1, 1, 2, 1, false};
            free(run_case(be, &mc, 111 + (uint64_t)wi));
        }
        rb_backend_destroy(be);
    }
}

static void test_threads_identical(void **state) {
    (void)state;
    for (int isa = 0; isa < n_isas(); isa++) {
        rb_backend *b1 = make_be(k_isas[isa], 1), *b2 = make_be(k_isas[isa], 2), *b3 = make_be(k_isas[isa], 3);
        for (int wi = 0; wi < mm_n_weight_dtypes; wi++) {
            mm_case c = {mm_weight_dtypes[wi], RB_F32, RB_F32, 512, 41, 17, 2, 1, 4, 1, false};
            float *o1 = run_case(b1, &c, 31 + (uint64_t)wi);
            float *o2 = run_case(b2, &c, 31 + (uint64_t)wi);
            float *o3 = run_case(b3, &c, 31 + (uint64_t)wi);
            size_t n = (size_t)(c.N * c.M * c.B2 * c.B3);
            assert_memory_equal(o1, o2, n * sizeof(float));
            assert_memory_equal(o1, o3, n * sizeof(float));
            free(o1); free(o2); free(o3);
        }
        rb_backend_destroy(b1);
        rb_backend_destroy(b2);
        rb_backend_destroy(b3);
    }
}

static void test_bad_inputs(void **state) {
    (void)state;
    rb_backend *be = make_be("auto", 2);
    rb_tensor a, b, d, bad;
    int64_t ne_a[2] = {64, 5}, ne_b[2] = {64, 3}, ne_d[2] = {5, 3};
    TU_OK(rb_tensor_alloc(be, RB_Q4_0, 2, ne_a, &a));
    TU_OK(rb_tensor_alloc(be, RB_F32, 2, ne_b, &b));
    TU_OK(rb_tensor_alloc(be, RB_F32, 2, ne_d, &d));
    /* K mismatch */
    int64_t ne_bk[2] = {96, 3};
    TU_OK(rb_tensor_alloc(be, RB_F32, 2, ne_bk, &bad));
    assert_int_equal(rb_matmul(be, &d, &a, &bad), RB_E_INVALID);
    assert_true(strlen(rb_backend_last_error(be)) > 0);
    rb_tensor_free(&bad);
    /* unsupported dst dtype */
    TU_OK(rb_tensor_alloc(be, RB_I32, 2, ne_d, &bad));
    assert_int_not_equal(rb_matmul(be, &bad, &a, &b), RB_OK);
    rb_tensor_free(&bad);
    /* quantized activations are not accepted as b */
    TU_OK(rb_tensor_alloc(be, RB_Q8_0, 2, ne_b, &bad));
    assert_int_not_equal(rb_matmul(be, &d, &a, &bad), RB_OK);
    rb_tensor_free(&bad);
    /* dst of the wrong shape */
    int64_t ne_dx[2] = {5, 4};
    TU_OK(rb_tensor_alloc(be, RB_F32, 2, ne_dx, &bad));
    assert_int_equal(rb_matmul(be, &bad, &a, &b), RB_E_INVALID);
    rb_tensor_free(&bad);
    /* broadcast mismatch: A2 = 2 does not divide B2 = 3 */
    rb_tensor a2, b3, d3;
    int64_t ne_a2[3] = {64, 5, 2}, ne_b3[3] = {64, 3, 3}, ne_d3[3] = {5, 3, 3};
    TU_OK(rb_tensor_alloc(be, RB_F32, 3, ne_a2, &a2));
    TU_OK(rb_tensor_alloc(be, RB_F32, 3, ne_b3, &b3));
    TU_OK(rb_tensor_alloc(be, RB_F32, 3, ne_d3, &d3));
    assert_int_equal(rb_matmul(be, &d3, &a2, &b3), RB_E_INVALID);
    /* the CPU entry point itself refuses too, without the front-end's checks */
    assert_int_equal(rb_cpu_matmul(be, &d3, &a2, &b3), RB_E_INVALID);
    assert_int_equal(rb_cpu_matmul(be, &d, &a, &b), RB_OK);
    rb_tensor_free(&a2); rb_tensor_free(&b3); rb_tensor_free(&d3);
    rb_tensor_free(&a); rb_tensor_free(&b); rb_tensor_free(&d);
    rb_backend_destroy(be);
}

/* The IQ weights at prefill sizes (64 and 65 rows, odd widths) on every ISA,
 * and their shape rules: a row must be whole blocks (256 for iq4_xs, iq2_*, iq1_*). */
static void test_iq_prefill_and_shapes(void **state) {
    (void)state;
    const rb_dtype iq[7] = {RB_IQ4_NL, RB_IQ4_XS, RB_IQ2_XXS, RB_IQ2_XS, RB_IQ2_S, RB_IQ1_S, RB_IQ1_M};
    for (int isa = 0; isa < n_isas(); isa++) {
        rb_backend *be = make_be(k_isas[isa], 2);
        for (int i = 0; i < 7; i++) {
            mm_case c = {iq[i], RB_F32, RB_F32, 768, 29, 64, 1, 1, 1, 1, false};
            free(run_case(be, &c, 600 + (uint64_t)i));
            mm_case c2 = {iq[i], RB_F32, RB_F32, i == 0 ? 32 * 11 : 256, 7, 65, 1, 1, 1, 1, false};
            free(run_case(be, &c2, 700 + (uint64_t)i));
        }
        rb_backend_destroy(be);
    }
    rb_backend *be = make_be("auto", 2);
    rb_tensor a, b, d, bad;
    int64_t ne_bad[2] = {96, 5}, ne_a[2] = {256, 5}, ne_b[2] = {512, 3}, ne_d[2] = {5, 3};
    assert_int_not_equal(rb_tensor_alloc(be, RB_IQ4_XS, 2, ne_bad, &bad), RB_OK); /* 96 is not whole blocks */
    int64_t ne_nl[2] = {48, 5};
    assert_int_not_equal(rb_tensor_alloc(be, RB_IQ4_NL, 2, ne_nl, &bad), RB_OK);
    assert_int_not_equal(rb_tensor_alloc(be, RB_IQ2_XXS, 2, ne_bad, &bad), RB_OK);
    assert_int_not_equal(rb_tensor_alloc(be, RB_IQ2_XS, 2, ne_bad, &bad), RB_OK);
    assert_int_not_equal(rb_tensor_alloc(be, RB_IQ2_S, 2, ne_bad, &bad), RB_OK);
    assert_int_not_equal(rb_tensor_alloc(be, RB_IQ1_S, 2, ne_bad, &bad), RB_OK);
    assert_int_not_equal(rb_tensor_alloc(be, RB_IQ1_M, 2, ne_bad, &bad), RB_OK);
    TU_OK(rb_tensor_alloc(be, RB_IQ4_XS, 2, ne_a, &a));
    TU_OK(rb_tensor_alloc(be, RB_F32, 2, ne_b, &b));
    TU_OK(rb_tensor_alloc(be, RB_F32, 2, ne_d, &d));
    assert_int_equal(rb_matmul(be, &d, &a, &b), RB_E_INVALID); /* K 256 vs 512 */
    assert_true(strlen(rb_backend_last_error(be)) > 0);
    rb_tensor_free(&a); rb_tensor_free(&b); rb_tensor_free(&d);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_iq_prefill_and_shapes),
        cmocka_unit_test(test_all_dtypes_shapes),
        cmocka_unit_test(test_broadcast_strided_f16dst),
        cmocka_unit_test(test_threads_identical),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

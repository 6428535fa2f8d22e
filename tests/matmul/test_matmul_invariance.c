/* Batch invariance of rb_matmul on the CPU backend with
 * rb_backend_config.batch_invariant: the output of an activation row is
 * bit-identical whatever other rows share the call (M = 1 alone, or 2 up to
 * RB_BATCH_INVARIANT_ROWS rows), for every weight dtype and ISA, at a K the
 * matrix-vector kernels take and at one past their limit. This is what makes
 * greedy decoding reproducible whatever the server's load: a sequence's
 * decode step gives the same logits alone as in a batch of streams. Without
 * the setting the packed prefill kernels (AVX-512: q4_0, q8_0, K-quants) and
 * the f16/bf16 prefill kernel sum in another order, which the test also
 * checks it can see. */
#include "mm_testlib.h"

#include "rbee/backend.h"
#include "rbee/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *k_isas[] = {"scalar", "avx2", "avx512"};

static rb_backend *try_be(const char *isa, int threads, bool invariant) {
    rb_backend_config cfg = {.n_threads = threads, .cpu_isa = isa, .batch_invariant = invariant};
    rb_backend *be = NULL;
    return rb_backend_create("cpu", &cfg, &be, NULL) == RB_OK ? be : NULL;
}

/* dst (N x M f32) = a (N x K, dtype w) * b (K x M, f32 rows) */
static void mm(rb_backend *be, rb_dtype w, const void *wq, int64_t K, int64_t N, const float *x, int64_t M,
               float *out) {
    rb_tensor a, b, d;
    int64_t ne_a[2] = {K, N}, ne_b[2] = {K, M}, ne_d[2] = {N, M};
    TU_OK(rb_tensor_alloc(be, w, 2, ne_a, &a));
    TU_OK(rb_tensor_set(&a, wq, rb_dtype_row_size(w, K) * (size_t)N));
    TU_OK(rb_tensor_alloc(be, RB_F32, 2, ne_b, &b));
    TU_OK(rb_tensor_set(&b, x, sizeof(float) * (size_t)(K * M)));
    TU_OK(rb_tensor_alloc(be, RB_F32, 2, ne_d, &d));
    TU_OK(rb_matmul(be, &d, &a, &b));
    TU_OK(rb_tensor_get(&d, out, sizeof(float) * (size_t)(N * M)));
    rb_tensor_free(&a);
    rb_tensor_free(&b);
    rb_tensor_free(&d);
}

/* Number of (isa, dtype, M) cases whose rows differ from the one-row product. */
static int count_variant(bool invariant, int64_t K, int64_t N, int *n_cases) {
    const int64_t Ms[] = {2, 3, 4, 5, 8, 9, 15, RB_BATCH_INVARIANT_ROWS};
    const int64_t MAXM = RB_BATCH_INVARIANT_ROWS;
    tu_rng r;
    tu_rng_seed(&r, 7);
    float *wf = malloc(sizeof(float) * (size_t)(N * K)), *x = malloc(sizeof(float) * (size_t)(MAXM * K));
    float *solo = malloc(sizeof(float) * (size_t)(N * MAXM)), *bat = malloc(sizeof(float) * (size_t)(N * MAXM));
    assert_true(wf && x && solo && bat);
    mm_fill(&r, wf, (size_t)(N * K), 0.3f);
    mm_fill(&r, x, (size_t)(MAXM * K), 1.0f);
    int bad = 0;
    *n_cases = 0;
    for (int i = 0; i < 3; i++) {
        rb_backend *be = try_be(k_isas[i], 2, invariant);
        if (!be) continue;
        for (int t = 0; t < mm_n_weight_dtypes; t++) {
            const rb_dtype w = mm_weight_dtypes[t];
            void *wq = mm_encode(w, wf, N, K);
            for (int64_t m = 0; m < MAXM; m++) mm(be, w, wq, K, N, x + m * K, 1, solo + m * N);
            for (size_t j = 0; j < sizeof Ms / sizeof Ms[0]; j++) {
                const int64_t M = Ms[j];
                mm(be, w, wq, K, N, x, M, bat);
                int64_t diff = 0;
                (*n_cases)++;
                for (int64_t e = 0; e < N * M; e++) diff += memcmp(&bat[e], &solo[e], sizeof(float)) != 0;
                if (diff && invariant) {
                    print_message("%s %s M=%lld: %lld of %lld outputs differ from the rows computed alone\n",
                                  k_isas[i], rb_dtype_name(w), (long long)M, (long long)diff, (long long)(N * M));
                }
                bad += diff != 0;
            }
            free(wq);
        }
        rb_backend_destroy(be);
    }
    free(wf);
    free(x);
    free(solo);
    free(bat);
    return bad;
}

static void test_rows_independent_of_batch(void **state) {
    (void)state;
    int n = 0;
    assert_int_equal(count_variant(true, 512, 72, &n), 0);
    assert_true(n > 100);
    /* past the matrix-vector kernels' K limit (RB_MATVEC_MAX_K = 16384) */
    assert_int_equal(count_variant(true, 16640, 20, &n), 0);
}

/* The batched kernels do sum in another order where this CPU has them: the
 * comparison above can see a difference. */
static void test_default_mode_differs(void **state) {
    (void)state;
    rb_backend *be = try_be("avx512", 1, false);
    if (!be) skip();
    rb_backend_destroy(be);
    int n = 0;
    assert_true(count_variant(false, 512, 72, &n) > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rows_independent_of_batch),
                                       cmocka_unit_test(test_default_mode_differs)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

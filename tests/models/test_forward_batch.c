/* Batched decode (rb_model_forward_batch): several sequences with different
 * prompt lengths advanced in one pass give the same logits as advancing each
 * sequence alone, for models with sliding windows, longrope and GQA; bad
 * batches (full context, duplicate cache, bad token) are refused. The same
 * for passes that mix decode steps and prompt chunks (rb_model_forward_seqs),
 * MoE included. */
#include "testutil.h"

#include "rbee/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSEQ 4

static void check(const char *name, rb_dtype kv_dtype) {
    char dir[1024], rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    tu_data(dir, sizeof dir, rel);
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_model *m = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_model_load(dir, be, NULL, &m, &err) != RB_OK) fail_msg("%s", err.msg);
    const int64_t V = rb_model_get_config(m)->n_vocab;
    tu_rng rng;
    tu_rng_seed(&rng, 42);
    rb_kv_cache *solo[NSEQ], *bat[NSEQ];
    const int64_t plen[NSEQ] = {3, 9, 17, 1}; /* window 8 and longrope's 16 both crossed */
    float *want = malloc(sizeof(float) * (size_t)(V * NSEQ)), *got = malloc(sizeof(float) * (size_t)(V * NSEQ));
    assert_non_null(want);
    assert_non_null(got);
    int32_t next[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        TU_OK(rb_kv_cache_create(m, 64, kv_dtype, &solo[s], &err));
        TU_OK(rb_kv_cache_create(m, 64, kv_dtype, &bat[s], &err));
        int32_t prompt[32];
        for (int64_t i = 0; i < plen[s]; i++) prompt[i] = (int32_t)(tu_rng_u64(&rng) % (uint64_t)V);
        TU_OK(rb_model_forward(m, solo[s], prompt, plen[s], false, want, &err));
        TU_OK(rb_model_forward(m, bat[s], prompt, plen[s], false, want, &err));
    }
    for (int step = 0; step < 3; step++) {
        for (int s = 0; s < NSEQ; s++) next[s] = (int32_t)(tu_rng_u64(&rng) % (uint64_t)V);
        for (int s = 0; s < NSEQ; s++) TU_OK(rb_model_forward(m, solo[s], &next[s], 1, false, want + s * V, &err));
        if (rb_model_forward_batch(m, bat, next, NSEQ, got, &err) != RB_OK) fail_msg("%s", err.msg);
        double e = tu_rel_l2_f(got, want, (size_t)(V * NSEQ));
        print_message("%s step %d: batched vs solo rel L2 %.2g\n", name, step, e);
        assert_true(e < 1e-5);
        for (int s = 0; s < NSEQ; s++) assert_int_equal(rb_kv_cache_used(bat[s]), rb_kv_cache_used(solo[s]));
    }
    /* refusals */
    rb_kv_cache *dup[2] = {bat[0], bat[0]};
    int32_t tk[2] = {1, 2};
    assert_int_equal(rb_model_forward_batch(m, dup, tk, 2, got, &err), RB_E_INVALID);
    int32_t bad[1] = {(int32_t)V};
    assert_int_equal(rb_model_forward_batch(m, bat, bad, 1, got, &err), RB_E_RANGE);
    rb_kv_cache *tiny = NULL;
    TU_OK(rb_kv_cache_create(m, 1, kv_dtype, &tiny, &err));
    TU_OK(rb_model_forward(m, tiny, tk, 1, false, got, &err));
    assert_int_equal(rb_model_forward_batch(m, &tiny, tk, 1, got, &err), RB_E_RANGE);
    assert_non_null(strstr(err.msg, "full"));
    rb_kv_cache_free(tiny);
    for (int s = 0; s < NSEQ; s++) {
        rb_kv_cache_free(solo[s]);
        rb_kv_cache_free(bat[s]);
    }
    free(want);
    free(got);
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* rb_model_forward_seqs: decode steps and prompt chunks of different
 * lengths in one pass give each sequence the logits of its last token that
 * running its tokens alone gives, and advance each cache by its count;
 * bad passes (no tokens, too many, a full context, a bad token) are refused
 * without advancing anything. */
static void check_mixed(const char *name, rb_dtype kv_dtype) {
    char dir[1024], rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    tu_data(dir, sizeof dir, rel);
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_model *m = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_model_load(dir, be, NULL, &m, &err) != RB_OK) fail_msg("%s", err.msg);
    const int64_t V = rb_model_get_config(m)->n_vocab;
    tu_rng rng;
    tu_rng_seed(&rng, 7);
    rb_kv_cache *solo[NSEQ], *mix[NSEQ];
    const int64_t plen[NSEQ] = {5, 1, 12, 3};
    float *want = malloc(sizeof(float) * (size_t)(V * NSEQ)), *got = malloc(sizeof(float) * (size_t)(V * NSEQ));
    assert_non_null(want);
    assert_non_null(got);
    for (int s = 0; s < NSEQ; s++) {
        TU_OK(rb_kv_cache_create(m, 64, kv_dtype, &solo[s], &err));
        TU_OK(rb_kv_cache_create(m, 64, kv_dtype, &mix[s], &err));
        int32_t prompt[32];
        for (int64_t i = 0; i < plen[s]; i++) prompt[i] = (int32_t)(tu_rng_u64(&rng) % (uint64_t)V);
        TU_OK(rb_model_forward(m, solo[s], prompt, plen[s], false, want, &err));
        TU_OK(rb_model_forward(m, mix[s], prompt, plen[s], false, want, &err));
    }
    /* two passes: chunks of 1, 7, 1, 4 tokens, then 3, 1, 9 (window 8 crossed), 1 */
    const int64_t cnt[2][NSEQ] = {{1, 7, 1, 4}, {3, 1, 9, 1}};
    for (int pass = 0; pass < 2; pass++) {
        int32_t toks[32];
        int64_t at = 0;
        for (int s = 0; s < NSEQ; s++) {
            for (int64_t j = 0; j < cnt[pass][s]; j++) toks[at + j] = (int32_t)(tu_rng_u64(&rng) % (uint64_t)V);
            TU_OK(rb_model_forward(m, solo[s], toks + at, cnt[pass][s], false, want + s * V, &err));
            at += cnt[pass][s];
        }
        if (rb_model_forward_seqs(m, mix, toks, cnt[pass], NSEQ, got, &err) != RB_OK) fail_msg("%s", err.msg);
        double e = tu_rel_l2_f(got, want, (size_t)(V * NSEQ));
        print_message("%s mixed pass %d: vs each alone rel L2 %.2g\n", name, pass, e);
        assert_true(e < 1e-5);
        for (int s = 0; s < NSEQ; s++) assert_int_equal(rb_kv_cache_used(mix[s]), rb_kv_cache_used(solo[s]));
    }
    /* refusals leave every cache as it was */
    int32_t tk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int64_t zero[2] = {2, 0}, big[2] = {1, RB_MODEL_MAX_STEP_TOKENS}, full[2] = {1, 60}, two[2] = {1, 2};
    const int64_t used0 = rb_kv_cache_used(mix[0]), used1 = rb_kv_cache_used(mix[1]);
    assert_int_equal(rb_model_forward_seqs(m, mix, tk, zero, 2, got, &err), RB_E_INVALID);
    assert_int_equal(rb_model_forward_seqs(m, mix, tk, big, 2, got, &err), RB_E_RANGE);
    assert_int_equal(rb_model_forward_seqs(m, mix, tk, full, 2, got, &err), RB_E_RANGE);
    assert_non_null(strstr(err.msg, "do not fit"));
    tk[2] = (int32_t)V;
    assert_int_equal(rb_model_forward_seqs(m, mix, tk, two, 2, got, &err), RB_E_RANGE);
    rb_kv_cache *dup[2] = {mix[0], mix[0]};
    tk[2] = 3;
    assert_int_equal(rb_model_forward_seqs(m, dup, tk, two, 2, got, &err), RB_E_INVALID);
    assert_int_equal(rb_kv_cache_used(mix[0]), used0);
    assert_int_equal(rb_kv_cache_used(mix[1]), used1);
    for (int s = 0; s < NSEQ; s++) {
        rb_kv_cache_free(solo[s]);
        rb_kv_cache_free(mix[s]);
    }
    free(want);
    free(got);
    rb_model_free(m);
    rb_backend_destroy(be);
}

static void test_mixed_equals_solo(void **state) {
    (void)state;
    check_mixed("llama_gqa", RB_F16);
    check_mixed("mistral_sw8", RB_F32);
    check_mixed("phi3_longrope", RB_F32);
    check_mixed("gemma2", RB_F16);
    check_mixed("qwen3_moe", RB_F32);
}

static void test_batch_equals_solo(void **state) {
    (void)state;
    check("llama_gqa", RB_F16);
    check("mistral_sw8", RB_F32);
    check("phi3_longrope", RB_F32);
    check("gemma2", RB_F16);
    check("qwen2", RB_F32);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_batch_equals_solo), cmocka_unit_test(test_mixed_equals_solo)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

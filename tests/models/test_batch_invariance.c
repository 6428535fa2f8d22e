/* Batch invariance of the whole forward pass on a backend created with
 * rb_backend_config.batch_invariant: a sequence's decode step, batched with
 * other sequences (rb_model_forward_batch, as the worker runs its streams),
 * gives bit-identical logits to the same step run alone (rb_model_forward of
 * one token), for every weight format of llama.cpp's fixture files, the
 * bundled default model (q8_0) and reference models with sliding windows,
 * MoE experts and attention sinks, at batch sizes 2 to 8 and one above
 * RB_BATCH_INVARIANT_ROWS (run in chunks), with sequences of different
 * lengths; and greedy decoding of each sequence takes the same tokens alone
 * as in a batch (issue 35 item 9). The backend is the CPU's (its products keep
 * rows apart), or RBEE_TEST_BACKEND's (e.g. cuda:0, where the batch runs its
 * sequences one at a time). */
#include "testutil.h"

#include "rbee/backend.h"
#include "rbee/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXSEQ (RB_BATCH_INVARIANT_ROWS + 3)
#define STEPS 6

static int32_t argmax(const float *x, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return (int32_t)b;
}

/* Greedy-decodes nseq sequences STEPS tokens, alone and batched; every
 * step's logits must match bit for bit. */
static void check_model(const char *path, int nseq) {
    rb_backend_config cfg = {.n_threads = 2, .batch_invariant = true};
    rb_backend *be = NULL;
    const char *spec = getenv("RBEE_TEST_BACKEND");
    TU_OK(rb_backend_create(spec && *spec ? spec : "cpu", &cfg, &be, NULL));
    assert_true(rb_backend_batch_invariant(be));
    rb_model *m = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_model_load(path, be, NULL, &m, &err) != RB_OK) fail_msg("load %s: %s", path, err.msg);
    const int64_t V = rb_model_get_config(m)->n_vocab;
    tu_rng rng;
    tu_rng_seed(&rng, 1234);
    rb_kv_cache *solo[MAXSEQ], *bat[MAXSEQ];
    float *want = malloc(sizeof(float) * (size_t)(V * MAXSEQ)), *got = malloc(sizeof(float) * (size_t)(V * MAXSEQ));
    assert_true(want && got);
    int32_t next_solo[MAXSEQ], next_bat[MAXSEQ];
    for (int s = 0; s < nseq; s++) {
        TU_OK(rb_kv_cache_create(m, 128, RB_F16, &solo[s], &err));
        TU_OK(rb_kv_cache_create(m, 128, RB_F16, &bat[s], &err));
        int32_t prompt[MAXSEQ * 5];
        const int64_t plen = 1 + 5 * s; /* one-row and packed prompt products */
        for (int64_t i = 0; i < plen; i++) prompt[i] = (int32_t)(tu_rng_u64(&rng) % (uint64_t)V);
        TU_OK(rb_model_forward(m, solo[s], prompt, plen, false, want, &err));
        TU_OK(rb_model_forward(m, bat[s], prompt, plen, false, got, &err));
        next_solo[s] = next_bat[s] = argmax(want, V);
    }
    int64_t differ = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int s = 0; s < nseq; s++) {
            if (rb_model_forward(m, solo[s], &next_solo[s], 1, false, want + s * V, &err) != RB_OK)
                fail_msg("%s", err.msg);
            next_solo[s] = argmax(want + s * V, V);
        }
        if (rb_model_forward_batch(m, bat, next_bat, nseq, got, &err) != RB_OK) fail_msg("%s", err.msg);
        for (int s = 0; s < nseq; s++) next_bat[s] = argmax(got + s * V, V);
        for (int64_t i = 0; i < V * nseq; i++) differ += memcmp(&got[i], &want[i], sizeof(float)) != 0;
        for (int s = 0; s < nseq; s++) assert_int_equal(next_bat[s], next_solo[s]);
    }
    if (differ) print_message("%s, %d sequences: %lld logits differ\n", path, nseq, (long long)differ);
    assert_int_equal(differ, 0);
    for (int s = 0; s < nseq; s++) {
        rb_kv_cache_free(solo[s]);
        rb_kv_cache_free(bat[s]);
    }
    free(want);
    free(got);
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* CPU only: a GPU runs a few of these formats, which the default model and
 * the reference models already cover there. */
static void test_llamacpp_formats(void **state) {
    (void)state;
    const char *spec = getenv("RBEE_TEST_BACKEND");
    if (spec && *spec && strcmp(spec, "cpu") != 0) return;
    static const char *files[] = {"tiny-f32", "tiny-q8_0", "tiny-q4_0", "tiny-q4_1", "tiny-q5_0", "tiny-q2_k",
                                  "tiny-q3_k", "tiny-q4_k", "tiny-q5_k", "tiny-q6_k"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char rel[128], path[1024];
        snprintf(rel, sizeof rel, "llamacpp/%s.gguf", files[i]);
        if (!tu_fixture(path, sizeof path, rel)) return;
        check_model(path, i % 2 ? 4 : 8);
    }
}

static void test_default_model(void **state) {
    (void)state;
    char path[1024];
    tu_data(path, sizeof path, "../../models/default/rbee-default-q8_0.gguf");
    for (int n = 2; n <= 8; n += 3) check_model(path, n);
    check_model(path, MAXSEQ); /* in chunks of RB_BATCH_INVARIANT_ROWS */
}

static void test_reference_models(void **state) {
    (void)state;
    static const char *names[] = {"llama_gqa", "mistral_sw8", "gemma2", "qwen3_moe", "gpt_oss", "phi3_longrope"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char rel[128], path[1024];
        snprintf(rel, sizeof rel, "models/%s", names[i]);
        tu_data(path, sizeof path, rel);
        check_model(path, 5);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_default_model), cmocka_unit_test(test_reference_models),
                                       cmocka_unit_test(test_llamacpp_formats)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Every tiny random-weight model made by tools/ref/gen_tiny_models.py with
 * Hugging Face transformers (tests/data/models/<name>: config.json,
 * model.safetensors in f32/f16/bf16, transformers' logits in float64 and its
 * greedy continuation) loaded from the HF folder and run on the CPU with an
 * f32 KV cache: logits within 1e-4 relative (L2 over all positions, and per
 * position) and identical greedy tokens, prefilling the prompt and decoding
 * one token at a time. */
#include "testutil.h"

#include "rbee/json_config.h"
#include "rbee/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int argmax(const float *x, int64_t n) {
    int64_t a = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[a]) a = i;
    return (int)a;
}

static int32_t *read_ids(const rb_json_config *j, const char *key, size_t *n) {
    TU_OK(rb_json_config_arr_len(j, key, n));
    int32_t *ids = malloc(sizeof(int32_t) * (*n ? *n : 1));
    assert_non_null(ids);
    for (size_t i = 0; i < *n; i++) {
        int64_t v;
        TU_OK(rb_json_config_arr_int(j, key, i, &v));
        ids[i] = (int32_t)v;
    }
    return ids;
}

static void check_model(rb_backend *be, const char *dir, const char *name) {
    char path[2200];
    rb_error err;
    rb_error_clear(&err);
    snprintf(path, sizeof path, "%s/ref.json", dir);
    rb_json_config *ref = NULL;
    if (rb_json_config_load(path, &ref, &err) != RB_OK) fail_msg("%s: %s", name, err.msg);
    size_t nt = 0, np = 0, ng = 0;
    int32_t *tokens = read_ids(ref, "tokens", &nt);
    int32_t *prompt = read_ids(ref, "greedy_prompt", &np);
    int32_t *greedy = read_ids(ref, "greedy_tokens", &ng);
    int64_t V = 0;
    TU_OK(rb_json_config_int(ref, "vocab", &V));
    snprintf(path, sizeof path, "%s/logits.f32", dir);
    size_t nbytes = 0;
    float *want = tu_read_file(path, &nbytes);
    assert_int_equal(nbytes, sizeof(float) * nt * (size_t)V);

    rb_model *m = NULL;
    if (rb_model_load(dir, be, NULL, &m, &err) != RB_OK) fail_msg("%s: %s", name, err.msg);
    assert_int_equal(rb_model_get_config(m)->n_vocab, V);
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(m, 128, RB_F32, &kv, &err));
    float *got = malloc(nbytes);
    assert_non_null(got);
    if (rb_model_forward(m, kv, tokens, (int64_t)nt, true, got, &err) != RB_OK) fail_msg("%s: %s", name, err.msg);
    double e = tu_rel_l2_f(got, want, nt * (size_t)V), worst = 0;
    for (size_t t = 0; t < nt; t++) {
        double et = tu_rel_l2_f(got + t * (size_t)V, want + t * (size_t)V, (size_t)V);
        if (et > worst) worst = et;
    }
    print_message("%-26s logits rel L2 %.2g (worst position %.2g)", name, e, worst);
    if (e > 1e-4 || worst > 1e-4) fail_msg("%s: logits differ from transformers: %.3g / %.3g", name, e, worst);

    /* greedy: prefill the prompt, then one token at a time */
    rb_kv_cache_truncate(kv, 0);
    float *logits = got; /* reuse: V floats */
    if (rb_model_forward(m, kv, prompt, (int64_t)np, false, logits, &err) != RB_OK) fail_msg("%s: %s", name, err.msg);
    for (size_t i = 0; i < ng; i++) {
        int32_t t = argmax(logits, V);
        if (t != greedy[i]) fail_msg("%s: greedy token %zu is %d, transformers chose %d", name, i, t, greedy[i]);
        if (i + 1 < ng && rb_model_forward(m, kv, &t, 1, false, logits, &err) != RB_OK)
            fail_msg("%s: %s", name, err.msg);
    }
    print_message("; greedy %zu tokens identical\n", ng);
    free(got);
    free(want);
    free(tokens);
    free(prompt);
    free(greedy);
    rb_kv_cache_free(kv);
    rb_model_free(m);
    rb_json_config_free(ref);
}


static void test_all_models(void **state) {
    (void)state;
    char root[1024];
    tu_data(root, sizeof root, "models");
    char *names[64];
    const int n = tu_model_names(names, 64);
    assert_true(n >= 15);
    rb_backend *be = NULL;
    /* RBEE_TEST_BACKEND (e.g. cuda:0) runs the same checks on another backend */
    const char *spec = getenv("RBEE_TEST_BACKEND");
    TU_OK(rb_backend_create(spec && *spec ? spec : "cpu", NULL, &be, NULL));
    for (int i = 0; i < n; i++) {
        char dir[2048];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        check_model(be, dir, names[i]);
        free(names[i]);
    }
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_all_models)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Memory: model weights are memory-mapped, not copied (anonymous memory grows
 * by far less than the weights when a model is loaded), and the peak resident
 * set while generating stays within file size + KV cache + 64 MiB, read from
 * /proc/self/status. Skipped under AddressSanitizer, whose shadow memory
 * inflates every figure. */
#include "testutil.h"

#include "rbee/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(__SANITIZE_ADDRESS__)
#define RB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RB_ASAN 1
#endif
#endif

static long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    assert_non_null(f);
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') v = atol(line + kl + 1);
    fclose(f);
    assert_true(v >= 0);
    return v;
}

static size_t path_bytes(const char *path) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    if (!S_ISDIR(st.st_mode)) return (size_t)st.st_size;
    char p[2048];
    snprintf(p, sizeof p, "%s/model.safetensors", path);
    assert_int_equal(stat(p, &st), 0);
    return (size_t)st.st_size;
}

static void check(const char *path) {
#ifdef RB_ASAN
    skip();
#endif
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    const long anon0 = status_kb("RssAnon");
    rb_model *m = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_model_load(path, be, NULL, &m, &err) != RB_OK) fail_msg("%s", err.msg);
    const long anon_loaded = status_kb("RssAnon");
    const size_t weights = rb_model_weight_bytes(m);
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(m, 256, RB_F16, &kv, &err));
    const int64_t V = rb_model_get_config(m)->n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)V);
    assert_non_null(logits);
    int32_t t = 1;
    for (int i = 0; i < 200; i++) { /* prefill-free decode of 200 tokens */
        if (rb_model_forward(m, kv, &t, 1, false, logits, &err) != RB_OK) fail_msg("%s", err.msg);
        int32_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = (int32_t)v;
        t = best;
    }
    const long hwm = status_kb("VmHWM");
    const size_t file = path_bytes(path), kvb = rb_kv_cache_bytes(kv);
    print_message("%s: weights %.1f MiB, anon growth on load %.1f MiB, peak RSS %.1f MiB (limit %.1f MiB)\n", path,
                  (double)weights / 1048576.0, (double)(anon_loaded - anon0) / 1024.0, (double)hwm / 1024.0,
                  (double)(file + kvb + (64u << 20)) / 1048576.0);
    /* mapped, not copied: loading adds well under a tenth of the weights in anonymous memory */
    assert_true((size_t)(anon_loaded - anon0) * 1024 < weights / 10 + (1u << 20));
    assert_true((size_t)hwm * 1024 <= file + kvb + (64u << 20));
    free(logits);
    rb_kv_cache_free(kv);
    rb_model_free(m);
    rb_backend_destroy(be);
}

static void test_gguf_mapped(void **state) {
    (void)state;
    char p[1024];
    check(tu_fixture(p, sizeof p, "llamacpp/tiny-f32.gguf"));
}

static void test_hf_mapped(void **state) {
    (void)state;
    char p[1024];
    snprintf(p, sizeof p, "%s/../../models/default/hf", RBEE_TEST_DATA_DIR);
    check(p);
}

int main(void) {
    /* separate processes would give cleaner peaks; run the larger model first so
     * the smaller one's check is not dominated by it */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_mapped),
        cmocka_unit_test(test_gguf_mapped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

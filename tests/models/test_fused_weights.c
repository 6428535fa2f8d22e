/* GPU backends load q/k/v and gate/up as one fused matrix each (see
 * src/models/model_weights.c); the CPU keeps the mapped separate tensors, so
 * the fused path would go untested here. The load option fuse_proj =
 * RB_FUSE_PROJ_ON forces it on the CPU: every tiny HF model of tests/data/models (llama variants, mistral,
 * qwen2 with q/k/v biases, gemma, gemma2, the newer architectures; phi3 is
 * fused in its files; models with experts fuse only q/k/v) and
 * the llama.cpp fixture GGUFs (f32 and block formats) are loaded both ways
 * and must give the same logits (relative L2 <= 1e-6; the matrix kernels may
 * group rows differently, so bit-identity is reported, not required) over a
 * prefill and single-token decode steps, with the fused flags set only in
 * the fused load and the same weight byte count; and without the override
 * the CPU does not fuse (its weights stay memory-mapped). RBEE_TEST_BACKEND
 * (e.g. cuda:0) runs the same comparison on another backend, where the
 * default load must fuse and the matrix library may pick other kernels for
 * the wider matrices (relative L2 <= 1e-5 there). */
#include "testutil.h"
#include "tu_kmix.h"

#include "rbee/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NT 12 /* tokens: 8 prefilled, then 4 decode steps */

typedef struct run {
    float *logits; /* NT x V */
    int64_t V;
    bool fused_qkv, fused_gate_up, moe;
    size_t weight_bytes;
} run;

static run run_model(rb_backend *be, const char *path, bool fuse) {
    const rb_model_load_opts opts = {.fuse_proj = fuse ? RB_FUSE_PROJ_ON : RB_FUSE_PROJ_OFF};
    rb_error err;
    rb_error_clear(&err);
    rb_model *m = NULL;
    rb_status s = rb_model_load(path, be, &opts, &m, &err);
    if (s != RB_OK) fail_msg("load %s (fuse_proj %s): %s", path, fuse ? "on" : "off", err.msg);
    const rb_model_config *c = rb_model_get_config(m);
    run r = {.V = c->n_vocab, .fused_qkv = c->fused_qkv, .fused_gate_up = c->fused_gate_up,
             .moe = c->n_expert > 0, .weight_bytes = rb_model_weight_bytes(m)};
    int32_t tok[NT];
    for (int i = 0; i < NT; i++) tok[i] = (int32_t)((i * 37 + 5) % r.V);
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(m, 32, RB_F32, &kv, &err));
    r.logits = malloc(sizeof(float) * (size_t)(NT * r.V));
    assert_non_null(r.logits);
    if (rb_model_forward(m, kv, tok, 8, true, r.logits, &err) != RB_OK) fail_msg("%s: %s", path, err.msg);
    for (int i = 8; i < NT; i++)
        if (rb_model_forward(m, kv, &tok[i], 1, false, r.logits + (size_t)i * (size_t)r.V, &err) != RB_OK)
            fail_msg("%s: %s", path, err.msg);
    rb_kv_cache_free(kv);
    rb_model_free(m);
    return r;
}

/* Loads path unfused and fused and compares; returns true if the fused
 * load used both fused paths (models with experts: the q/k/v one; their
 * expert stacks have no gate/up pair to fuse). */
static bool check_pair(rb_backend *be, const char *path, const char *label) {
    const double tol = rb_backend_kind(be) == RB_DEVICE_CPU ? 1e-6 : 1e-5;
    run a = run_model(be, path, false), b = run_model(be, path, true);
    assert_int_equal(a.V, b.V);
    assert_int_equal(a.weight_bytes, b.weight_bytes);
    const size_t n = (size_t)(NT * a.V);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(a.logits[i]) || !isfinite(b.logits[i])) fail_msg("%s: logit %zu is not finite", label, i);
    const bool same = memcmp(a.logits, b.logits, n * sizeof(float)) == 0;
    const double e = tu_rel_l2_f(b.logits, a.logits, n);
    print_message("%-28s fused qkv %d gate_up %d (unfused load: %d %d): logits %s, rel L2 %.2g\n", label,
                  b.fused_qkv, b.fused_gate_up, a.fused_qkv, a.fused_gate_up, same ? "bit-identical" : "differ",
                  e);
    if (e > tol) fail_msg("%s: fused weights change the logits: rel L2 %.3g", label, e);
    /* the unfused load stays unfused unless the files themselves are (phi3) */
    assert_true(b.fused_qkv >= a.fused_qkv && b.fused_gate_up >= a.fused_gate_up);
    const bool both = b.fused_qkv && (b.fused_gate_up || b.moe) && !(a.fused_qkv && (a.fused_gate_up || a.moe));
    free(a.logits);
    free(b.logits);
    return both;
}

/* Without the override the CPU keeps the mapped separate tensors, and
 * device backends fuse. */
static void check_default(rb_backend *be, const char *dir) {
    const bool want = rb_backend_kind(be) != RB_DEVICE_CPU;
    rb_error err;
    rb_error_clear(&err);
    rb_model *m = NULL;
    if (rb_model_load(dir, be, NULL, &m, &err) != RB_OK) fail_msg("load %s: %s", dir, err.msg);
    assert_int_equal(rb_model_get_config(m)->fused_qkv, want);
    assert_int_equal(rb_model_get_config(m)->fused_gate_up, want);
    rb_model_free(m);
}

static rb_backend *test_backend(void) {
    const char *spec = getenv("RBEE_TEST_BACKEND");
    rb_backend *be = NULL;
    TU_OK(rb_backend_create(spec && *spec ? spec : "cpu", NULL, &be, NULL));
    return be;
}


static void test_hf_models(void **state) {
    (void)state;
    char root[1024];
    tu_data(root, sizeof root, "models");
    char *names[64];
    const int n = tu_model_names(names, 64);
    assert_true(n >= 15);
    rb_backend *be = test_backend();
    int fused = 0, seen_qwen2 = 0, seen_gemma = 0, seen_llama = 0;
    for (int i = 0; i < n; i++) {
        char dir[2048];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        if (strcmp(names[i], "qwen2") == 0) check_default(be, dir);
        const bool both = check_pair(be, dir, names[i]);
        const bool phi3 = strncmp(names[i], "phi3", 4) == 0;
        if (!phi3 && !both) fail_msg("%s: the forced load did not fuse q/k/v and gate/up", names[i]);
        fused += both;
        seen_qwen2 += both && strncmp(names[i], "qwen2", 5) == 0;
        seen_gemma += both && strncmp(names[i], "gemma", 5) == 0;
        seen_llama += both && strncmp(names[i], "llama", 5) == 0;
        free(names[i]);
    }
    assert_true(fused >= 12 && seen_qwen2 >= 1 && seen_gemma >= 1 && seen_llama >= 1);
    rb_backend_destroy(be);
}

static void test_gguf_fixtures(void **state) {
    (void)state;
    rb_backend *be = test_backend();
    const char *files[] = {"llamacpp/tiny-f32.gguf", "llamacpp/tiny-q8_0.gguf", "llamacpp/tiny-q4_0.gguf",
                           "llamacpp/tiny-q4_k.gguf", "llamacpp/tiny-q6_k.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1024];
        tu_fixture(path, sizeof path, files[i]);
        check_pair(be, path, files[i]);
    }
    rb_backend_destroy(be);
}

/* A k-quant mix as llama-quantize writes Q4_K_M (tu_kmix.h): a fused load
 * joins q/k/v in the layers whose attn_v stays q4_K only, and the forward
 * pass switches between the two forms layer by layer. */
static void test_kquant_mix(void **state) {
    (void)state;
    char path[64];
    tu_write_kquant_mix(path, sizeof path);
    rb_backend *be = test_backend();
    check_pair(be, path, "q4_K_M-style mix");
    /* which layers joined q/k/v: the 8 of 16 whose attn_v stays q4_K */
    int joined = -1, all = -1;
    for (int fuse = 0; fuse < 2; fuse++) {
        const rb_model_load_opts opts = {.fuse_proj = fuse ? RB_FUSE_PROJ_ON : RB_FUSE_PROJ_OFF};
        rb_model *m = NULL;
        TU_OK(rb_model_load(path, be, &opts, &m, NULL));
        if (fuse) {
            joined = rb_model_get_config(m)->n_layer_qkv_one;
            all = rb_model_get_config(m)->fused_qkv;
            assert_true(rb_model_get_config(m)->fused_gate_up);
        } else {
            assert_int_equal(rb_model_get_config(m)->n_layer_qkv_one, 0);
        }
        rb_model_free(m);
    }
    int expect = 0;
    for (int il = 0; il < TU_KMIX_LAYERS; il++) expect += !tu_kmix_more_bits(il, TU_KMIX_LAYERS);
    assert_int_equal(expect, 8);
    assert_int_equal(joined, expect);
    assert_false(all);
    rb_backend_destroy(be);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_models),
        cmocka_unit_test(test_gguf_fixtures),
        cmocka_unit_test(test_kquant_mix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Malformed model inputs give clear errors: unknown architecture (GGUF and
 * HF, listing the supported ones), missing tensors and wrong shapes (naming
 * the tensor), missing config, bad paths, out-of-vocabulary tokens, and a
 * prompt longer than the context (refused, never truncated); metadata values
 * that do not fit their field; KV-cache truncation followed by more tokens;
 * load options out of range. */
#include "testutil.h"

#include "rbee/generate.h"
#include "rbee/gguf.h"
#include "rbee/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { E = 32, L = 1, H = 2, HKV = 1, F = 64, V = 40 };

/* Writes a tiny llama GGUF; skip names one tensor to leave out, bad one to
 * misshape; extra_key (arch-prefixed, may be NULL) adds a u64 metadata value. */
static void write_gguf_kv(const char *path, const char *arch, const char *skip, const char *bad,
                          const char *extra_key, uint64_t extra_val) {
    rb_gguf_writer *w = NULL;
    TU_OK(rb_gguf_writer_create(&w, NULL));
    char key[128];
    TU_OK(rb_gguf_writer_set_str(w, "general.architecture", arch));
    if (extra_key) {
        snprintf(key, sizeof key, "%s.%s", arch, extra_key);
        TU_OK(rb_gguf_writer_set_u64(w, key, extra_val));
    }
#define U32(k, v)                                                                                              \
    do {                                                                                                       \
        snprintf(key, sizeof key, "%s." k, arch);                                                              \
        TU_OK(rb_gguf_writer_set_u32(w, key, v));                                                              \
    } while (0)
    U32("embedding_length", E);
    U32("block_count", L);
    U32("feed_forward_length", F);
    U32("attention.head_count", H);
    U32("attention.head_count_kv", HKV);
#undef U32
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    TU_OK(rb_gguf_writer_set_f32(w, key, 1e-5f));
    const int D = E / H;
    struct { const char *name; int64_t ne0, ne1; } t[] = {
        {"token_embd.weight", E, V}, {"output_norm.weight", E, 1},       {"blk.0.attn_norm.weight", E, 1},
        {"blk.0.attn_q.weight", E, H * D}, {"blk.0.attn_k.weight", E, HKV * D}, {"blk.0.attn_v.weight", E, HKV * D},
        {"blk.0.attn_output.weight", H * D, E}, {"blk.0.ffn_norm.weight", E, 1}, {"blk.0.ffn_gate.weight", E, F},
        {"blk.0.ffn_up.weight", E, F},     {"blk.0.ffn_down.weight", F, E},
    };
    float *data = calloc((size_t)(E * F * 2), sizeof(float));
    assert_non_null(data);
    for (int i = 0; i < E * F * 2; i++) data[i] = 0.01f * (float)((i * 7) % 13 - 6);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (skip && strcmp(t[i].name, skip) == 0) continue;
        int64_t ne[2] = {t[i].ne0, t[i].ne1};
        if (bad && strcmp(t[i].name, bad) == 0) ne[1] += 1;
        TU_OK(rb_gguf_writer_add_tensor(w, t[i].name, RB_F32, ne[1] > 1 ? 2 : 1, ne, data,
                                        sizeof(float) * (size_t)(ne[0] * ne[1])));
    }
    free(data);
    rb_error err;
    if (rb_gguf_writer_write(w, path, 0, &err) != RB_OK) fail_msg("%s", err.msg);
    rb_gguf_writer_free(w);
}

static void write_gguf(const char *path, const char *arch, const char *skip, const char *bad) {
    write_gguf_kv(path, arch, skip, bad, NULL, 0);
}

static rb_status try_load(const char *path, rb_error *err) {
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_model *m = NULL;
    rb_error_clear(err);
    rb_status s = rb_model_load(path, be, NULL, &m, err);
    rb_model_free(m);
    rb_backend_destroy(be);
    return s;
}

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    return tu_tmpdir_make(g_dir, sizeof g_dir, "rbee-model-errors-");
}

static int teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(g_dir);
}

static void test_gguf_errors(void **state) {
    (void)state;
    char p[512];
    rb_error err;
    snprintf(p, sizeof p, "%s/ok.gguf", g_dir);
    write_gguf(p, "llama", NULL, NULL);
    assert_int_equal(try_load(p, &err), RB_OK); /* control: the well-formed file loads */

    snprintf(p, sizeof p, "%s/arch.gguf", g_dir);
    write_gguf(p, "mamba", NULL, NULL);
    assert_int_equal(try_load(p, &err), RB_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "'mamba'"));
    assert_non_null(strstr(err.msg, rb_arch_supported_list()));
    assert_non_null(strstr(err.msg, "qwen3_moe"));

    snprintf(p, sizeof p, "%s/missing.gguf", g_dir);
    write_gguf(p, "llama", "blk.0.ffn_up.weight", NULL);
    assert_int_equal(try_load(p, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "missing tensor 'blk.0.ffn_up.weight'"));

    snprintf(p, sizeof p, "%s/shape.gguf", g_dir);
    write_gguf(p, "llama", NULL, "blk.0.attn_k.weight");
    assert_int_equal(try_load(p, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "'blk.0.attn_k.weight' has shape [32,17,1,1], expected [32,16]"));

    /* 32-bit metadata given as u64 values that do not fit: refused, not truncated
     * (2^32 + 16 used to become 16 rotary dims) */
    snprintf(p, sizeof p, "%s/rot.gguf", g_dir);
    write_gguf_kv(p, "llama", NULL, NULL, "rope.dimension_count", (1ull << 32) + 16);
    assert_int_equal(try_load(p, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "'llama.rope.dimension_count' = 4294967312 is out of range"));
    write_gguf_kv(p, "llama", NULL, NULL, "attention.sliding_window", (1ull << 32) + 4);
    assert_int_equal(try_load(p, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "attention.sliding_window"));
    write_gguf_kv(p, "llama", NULL, NULL, "rope.dimension_count", 16); /* control: a fitting value loads */
    assert_int_equal(try_load(p, &err), RB_OK);

    snprintf(p, sizeof p, "%s/nope.gguf", g_dir);
    assert_int_equal(try_load(p, &err), RB_E_NOT_FOUND);
    assert_non_null(strstr(err.msg, "does not exist"));
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_hf_errors(void **state) {
    (void)state;
    char dir[512], p[600];
    rb_error err;
    snprintf(dir, sizeof dir, "%s/hf", g_dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_not_equal(try_load(dir, &err), RB_OK); /* no config.json */
    assert_non_null(strstr(err.msg, "config.json"));
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_file(p, "{\"model_type\": \"mamba\", \"vocab_size\": 10}");
    assert_int_equal(try_load(dir, &err), RB_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "model_type 'mamba' is not supported (supported: llama, mistral"));
    write_file(p, "{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 8}");
    assert_int_equal(try_load(dir, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "'num_hidden_layers' is missing"));
    write_file(p, "{ not json");
    assert_int_not_equal(try_load(dir, &err), RB_OK);
    /* values that used to reach a float -> int conversion out of range (UB) */
    const char *base = "{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 8, "
                       "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"intermediate_size\": 16";
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s, \"partial_rotary_factor\": 1e30}", base);
    write_file(p, cfg);
    assert_int_equal(try_load(dir, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "partial_rotary_factor 1e+30 is not in (0, 1]"));
    snprintf(cfg, sizeof cfg, "%s, \"head_dim\": 1000000000000}", base);
    write_file(p, cfg);
    assert_int_equal(try_load(dir, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "head_dim 1000000000000 too large"));
}

/* Writes the well-formed tiny model as g_dir/file and loads it on a new CPU backend. */
static rb_model *open_tiny(const char *file, rb_backend **be) {
    char p[512];
    rb_error err;
    snprintf(p, sizeof p, "%s/%s", g_dir, file);
    write_gguf(p, "llama", NULL, NULL);
    TU_OK(rb_backend_create("cpu", NULL, be, NULL));
    rb_model *m = NULL;
    if (rb_model_load(p, *be, NULL, &m, &err) != RB_OK) fail_msg("%s", err.msg);
    return m;
}

static void test_runtime_errors(void **state) {
    (void)state;
    rb_error err;
    rb_backend *be = NULL;
    rb_model *m = open_tiny("ok2.gguf", &be);
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(m, 8, RB_F16, &kv, &err));
    float logits[V];
    const int32_t bad[2] = {3, V};
    assert_int_equal(rb_model_forward(m, kv, bad, 2, false, logits, &err), RB_E_RANGE);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    assert_int_equal(rb_kv_cache_used(kv), 0); /* nothing was appended */
    const int32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    assert_int_equal(rb_model_forward(m, kv, toks, 9, false, logits, &err), RB_E_RANGE);
    /* generation: a prompt that leaves no room is refused with a clear message */
    rb_gen_params gp = rb_gen_default_params();
    gp.max_tokens = 4;
    rb_gen_result res;
    assert_int_equal(rb_generate(m, NULL, kv, toks, 8, &gp, NULL, NULL, &res, &err), RB_E_RANGE);
    assert_non_null(strstr(err.msg, "the prompt has 8 tokens but the context has room for 7"));
    /* a prompt that fits generates until the context is full: 8 slots, 5 prompt
     * tokens -> 3 more forwarded plus the last sampled token = 4 (< max_tokens) */
    gp.max_tokens = 100;
    gp.ignore_eos = true;
    TU_OK(rb_generate(m, NULL, kv, toks, 5, &gp, NULL, NULL, &res, &err));
    assert_int_equal(res.n_generated, 4);
    assert_int_equal(rb_kv_cache_used(kv), 8);
    assert_int_equal(res.stop_reason, RB_STOP_MAX_TOKENS);
    /* a huge count with a non-empty cache: refused before any token is read
     * (used + n used to overflow) */
    assert_int_equal(rb_model_forward(m, kv, toks, INT64_MAX - 3, false, logits, &err), RB_E_RANGE);
    rb_kv_cache_free(kv);
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* A load option out of range is refused before the file is read; the
 * defaults (opts zeroed, or NULL) load. */
static void test_load_options(void **state) {
    (void)state;
    char p[512];
    rb_error err;
    snprintf(p, sizeof p, "%s/opts.gguf", g_dir);
    write_gguf(p, "llama", NULL, NULL);
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_model *m = NULL;
    const rb_model_load_opts bad = {.fuse_proj = (rb_fuse_proj)3}, bad2 = {.fuse_proj = (rb_fuse_proj)-1};
    assert_int_equal(rb_model_load(p, be, &bad, &m, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "fuse_proj 3"));
    assert_null(m);
    assert_int_equal(rb_model_load(p, be, &bad2, &m, &err), RB_E_INVALID);
    const rb_model_load_opts dflt = {0};
    TU_OK(rb_model_load(p, be, &dflt, &m, &err));
    assert_false(rb_model_get_config(m)->fused_qkv); /* the CPU keeps the file's separate q/k/v */
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* Truncating the cache and continuing gives the logits of a cache that never
 * held the dropped tokens (their keys and values are overwritten). */
static void test_truncate_then_continue(void **state) {
    (void)state;
    rb_error err;
    rb_backend *be = NULL;
    rb_model *m = open_tiny("trunc.gguf", &be);
    tu_rng rng;
    tu_rng_seed(&rng, 2024);
    int32_t toks[7], junk[3];
    for (int i = 0; i < 7; i++) toks[i] = (int32_t)(tu_rng_u64(&rng) % V);
    for (int i = 0; i < 3; i++) junk[i] = (int32_t)((toks[3 + i] + 1 + i) % V); /* differs from toks[3..6) */
    float want[7 * V], got[4 * V];
    rb_kv_cache *a = NULL, *b = NULL;
    TU_OK(rb_kv_cache_create(m, 16, RB_F32, &a, &err));
    TU_OK(rb_kv_cache_create(m, 16, RB_F32, &b, &err));
    TU_OK(rb_model_forward(m, a, toks, 7, true, want, &err));
    TU_OK(rb_model_forward(m, b, toks, 3, false, got, &err));
    TU_OK(rb_model_forward(m, b, junk, 3, false, got, &err));
    rb_kv_cache_truncate(b, 3);
    assert_int_equal(rb_kv_cache_used(b), 3);
    rb_kv_cache_truncate(b, 5); /* beyond used: ignored */
    assert_int_equal(rb_kv_cache_used(b), 3);
    TU_OK(rb_model_forward(m, b, toks + 3, 4, true, got, &err));
    assert_int_equal(rb_kv_cache_used(b), 7);
    double e = tu_rel_l2_f(got, want + 3 * V, 4 * V);
    print_message("truncate + continue vs straight run: rel L2 %.2g\n", e);
    assert_true(e < 1e-5);
    rb_kv_cache_free(a);
    rb_kv_cache_free(b);
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* Caches made together (rb_kv_cache_create_many): each behaves as a cache
 * of its own (the same logits as a lone cache, positions independent of the
 * others', copies to and from lone caches), freed in any order (the shared
 * memory goes with the last: ASan's leak check); bad counts refused. */
static void test_caches_made_together(void **state) {
    (void)state;
    rb_error err;
    rb_backend *be = NULL;
    rb_model *m = open_tiny("many.gguf", &be);
    tu_rng rng;
    tu_rng_seed(&rng, 2025);
    int32_t toks[3][5];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 5; i++) toks[s][i] = (int32_t)(tu_rng_u64(&rng) % V);
    float want[3][V], got[V];
    rb_kv_cache *many[3] = {NULL, NULL, NULL}, *lone = NULL;
    TU_OK(rb_kv_cache_create_many(m, 3, 16, RB_F16, many, &err));
    assert_int_equal(rb_kv_cache_size(many[2]), 16);
    assert_int_equal(rb_kv_cache_bytes(many[0]), rb_kv_cache_bytes(many[1]));
    for (int s = 0; s < 3; s++) {
        TU_OK(rb_kv_cache_create(m, 16, RB_F16, &lone, &err));
        TU_OK(rb_model_forward(m, lone, toks[s], 5, false, want[s], &err));
        rb_kv_cache_free(lone);
    }
    /* interleaved: each cache's positions are its own */
    for (int i = 0; i < 5; i++)
        for (int s = 2; s >= 0; s--) TU_OK(rb_model_forward(m, many[s], &toks[s][i], 1, false, got, &err));
    for (int s = 0; s < 3; s++) assert_int_equal(rb_kv_cache_used(many[s]), 5);
    /* a copy of cache 1 into a lone cache continues as cache 1 does */
    TU_OK(rb_kv_cache_create(m, 16, RB_F16, &lone, &err));
    TU_OK(rb_kv_cache_copy(lone, many[1], &err));
    float a[V], b[V];
    TU_OK(rb_model_forward(m, lone, &toks[1][2], 1, false, a, &err));
    rb_kv_cache_free(many[0]); /* freed before the others: their memory stays */
    TU_OK(rb_model_forward(m, many[1], &toks[1][2], 1, false, b, &err));
    assert_memory_equal(a, b, sizeof a);
    /* the first five tokens' logits match a lone cache's */
    rb_kv_cache_truncate(many[2], 4);
    TU_OK(rb_model_forward(m, many[2], &toks[2][4], 1, false, got, &err));
    double e = tu_rel_l2_f(got, want[2], V);
    print_message("cache made together vs lone: rel L2 %.2g\n", e);
    assert_true(e < 1e-6);
    rb_kv_cache_free(lone);
    rb_kv_cache_free(many[2]);
    rb_kv_cache_free(many[1]);
    rb_kv_cache *bad[2] = {NULL, NULL};
    assert_int_equal(rb_kv_cache_create_many(m, 0, 16, RB_F16, bad, &err), RB_E_RANGE);
    assert_int_equal(rb_kv_cache_create_many(m, 70000, 16, RB_F16, bad, &err), RB_E_RANGE);
    assert_int_equal(rb_kv_cache_create_many(m, 1 << 10, 1 << 22, RB_F16, bad, &err), RB_E_RANGE); /* i32 rows */
    assert_int_equal(rb_kv_cache_create_many(m, 2, 16, RB_Q8_0, bad, &err), RB_E_INVALID);
    assert_null(bad[0]);
    rb_model_free(m);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_errors),
        cmocka_unit_test(test_hf_errors),
        cmocka_unit_test(test_runtime_errors),
        cmocka_unit_test(test_truncate_then_continue),
        cmocka_unit_test(test_caches_made_together),
        cmocka_unit_test(test_load_options),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

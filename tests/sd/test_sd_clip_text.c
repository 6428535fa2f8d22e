/* The CLIP text encoders (rb_clip_text_*) against diffusers / transformers
 * float32 references (../shared/fixtures/diffusers/refs/<pipe>/text.safetensors):
 * every hidden state, last_hidden_state, pooler_output / text_embeds of each
 * pipeline's encoders for the prompt and negative prompt (one batch of 2),
 * and the pipeline-level prompt embeddings (SD1.x/2.x: last_hidden_state;
 * SDXL: both encoders' penultimate layer written side by side into one
 * tensor, pooled = text_embeds), all within 1e-5 absolute. Also: weight
 * names without the "text_model." prefix, f16 / bf16 weight files (loaded
 * to f32: bit-identical to f32 files holding the same rounded values; kept
 * f16: within a looser bound), and bad input (missing / mis-shaped tensor,
 * truncated file, unsupported activation, bad ids, shapes, indices). */
#include "sd_nets_ref.h"

#define TOL 1e-5

typedef struct enc_case {
    const char *pipe, *encoder, *tokenizer;
} enc_case;

static const enc_case k_cases[] = {
    {"sd15", "text_encoder", "tokenizer"},  {"sd21v", "text_encoder", "tokenizer"},
    {"sdxl", "text_encoder", "tokenizer"},  {"sdxl", "text_encoder_2", "tokenizer_2"},
    {"sd15-inpaint", "text_encoder", "tokenizer"},
};

static rb_clip_text *load_dir(rb_backend *be, const char *dir, const rb_sd_load_opts *o) {
    rb_clip_text *m = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_clip_text_load(dir, be, o, &m, &err) != RB_OK) fail_msg("load %s: %s", dir, err.msg);
    return m;
}

static rb_clip_text *load_enc(rb_backend *be, const char *pipe, const char *enc) {
    char dir[1024];
    const bool tmp = fixture_component(dir, sizeof dir, pipe, enc, "model.safetensors");
    rb_clip_text *m = load_dir(be, dir, NULL);
    if (tmp) tu_tmpdir_remove(dir);
    return m;
}

/* ids of [negative, prompt] from the reference file. */
static void batch_ids(const rb_st_set *ref, const char *tok, int32_t *ids) {
    char n[128];
    snprintf(n, sizeof n, "negative.%s.input_ids", tok);
    ref_ids(ref, n, ids, 77);
    snprintf(n, sizeof n, "prompt.%s.input_ids", tok);
    ref_ids(ref, n, ids + 77, 77);
}

static void test_encoders_match_reference(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    for (size_t ci = 0; ci < sizeof k_cases / sizeof k_cases[0]; ci++) {
        const enc_case *c = &k_cases[ci];
        rb_st_set *ref = ref_open(c->pipe, "text.safetensors");
        rb_clip_text *m = load_enc(be, c->pipe, c->encoder);
        const rb_clip_text_config *cfg = rb_clip_text_get_config(m);
        const int64_t D = cfg->hidden_size, L = cfg->n_layers;
        int32_t ids[2 * 77];
        batch_ids(ref, c->tokenizer, ids);
        printf("%s/%s: %lld layers, hidden %lld, %s\n", c->pipe, c->encoder, (long long)L, (long long)D,
               cfg->with_projection ? "with projection" : "pooled");
        rb_tensor hid = dev_tensor(be, D, 77, 2, 1, NULL), last = dev_tensor(be, D, 77, 2, 1, NULL);
        rb_tensor pooled = dev_tensor(be, D, 2, 1, 1, NULL);
        rb_tensor te = dev_tensor(be, cfg->with_projection ? cfg->projection_dim : 1, 2, 1, 1, NULL);
        for (int64_t i = 0; i <= L; i++) {
            rb_clip_text_outputs o = {.hidden = &hid, .hidden_index = (int)i};
            if (i == L) { /* the last call reads everything */
                o.last_hidden = &last;
                o.pooled = &pooled;
                if (cfg->with_projection) o.text_embeds = &te;
            }
            rb_error err;
            rb_error_clear(&err);
            if (rb_clip_text_encode(m, ids, 77, 2, &o, &err) != RB_OK) fail_msg("%s", err.msg);
            float *h = dev_read(&hid);
            for (int b = 0; b < 2; b++) {
                char n[160];
                snprintf(n, sizeof n, "%s.%s.hidden_states.%lld", b ? "prompt" : "negative", c->encoder, (long long)i);
                expect_close(h + b * 77 * D, ref_f32(ref, n, NULL), 77 * D, TOL, n);
            }
            free(h);
        }
        float *lh = dev_read(&last), *po = dev_read(&pooled), *tx = dev_read(&te);
        for (int b = 0; b < 2; b++) {
            const char *tag = b ? "prompt" : "negative";
            char n[160];
            snprintf(n, sizeof n, "%s.%s.last_hidden_state", tag, c->encoder);
            expect_close(lh + b * 77 * D, ref_f32(ref, n, NULL), 77 * D, TOL, n);
            if (cfg->with_projection) {
                snprintf(n, sizeof n, "%s.%s.text_embeds", tag, c->encoder);
                expect_close(tx + b * cfg->projection_dim, ref_f32(ref, n, NULL), cfg->projection_dim, TOL, n);
            } else {
                snprintf(n, sizeof n, "%s.%s.pooler_output", tag, c->encoder);
                expect_close(po + b * D, ref_f32(ref, n, NULL), D, TOL, n);
            }
        }
        free(lh);
        free(po);
        free(tx);
        rb_tensor_free(&hid);
        rb_tensor_free(&last);
        rb_tensor_free(&pooled);
        rb_tensor_free(&te);
        rb_clip_text_free(m);
        rb_st_close(ref);
    }
    rb_backend_destroy(be);
}

/* SD1.x / 2.x: prompt_embeds = last_hidden_state, one sequence at a time. */
static void test_sd1_prompt_embeds(void **state) {
    (void)state;
    static const char *const pipes[] = {"sd15", "sd21v", "sd15-inpaint"};
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    for (size_t pi = 0; pi < 3; pi++) {
        rb_st_set *ref = ref_open(pipes[pi], "text.safetensors");
        rb_clip_text *m = load_enc(be, pipes[pi], "text_encoder");
        const int64_t D = rb_clip_text_get_config(m)->hidden_size;
        int32_t ids[2 * 77];
        batch_ids(ref, "tokenizer", ids);
        rb_tensor out = dev_tensor(be, D, 77, 1, 1, NULL);
        for (int b = 0; b < 2; b++) {
            rb_clip_text_outputs o = {.last_hidden = &out};
            TU_OK(rb_clip_text_encode(m, ids + 77 * b, 77, 1, &o, NULL));
            float *h = dev_read(&out);
            char what[96];
            snprintf(what, sizeof what, "%s %s", pipes[pi], b ? "prompt_embeds" : "negative_prompt_embeds");
            expect_close(h, ref_f32(ref, b ? "prompt_embeds" : "negative_prompt_embeds", NULL), 77 * D, TOL, what);
            free(h);
        }
        rb_tensor_free(&out);
        rb_clip_text_free(m);
        rb_st_close(ref);
    }
    rb_backend_destroy(be);
}

/* SDXL: [te1 hidden[-2] | te2 hidden[-2]] written into channel slices of one
 * [40, 77, 2] tensor; pooled embeds = te2's text_embeds. */
static void test_sdxl_prompt_embeds(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_st_set *ref = ref_open("sdxl", "text.safetensors");
    rb_clip_text *te1 = load_enc(be, "sdxl", "text_encoder"), *te2 = load_enc(be, "sdxl", "text_encoder_2");
    const int64_t D1 = rb_clip_text_get_config(te1)->hidden_size, D2 = rb_clip_text_get_config(te2)->hidden_size;
    const int64_t P = rb_clip_text_get_config(te2)->projection_dim;
    int32_t ids1[2 * 77], ids2[2 * 77];
    batch_ids(ref, "tokenizer", ids1);
    batch_ids(ref, "tokenizer_2", ids2);
    rb_tensor emb = dev_tensor(be, D1 + D2, 77, 2, 1, NULL), pooled = dev_tensor(be, P, 2, 1, 1, NULL);
    rb_tensor a, b;
    TU_OK(rb_tensor_slice(&emb, 0, 0, D1, &a));
    TU_OK(rb_tensor_slice(&emb, 0, D1, D2, &b));
    rb_clip_text_outputs o1 = {.hidden = &a, .hidden_index = -2};
    rb_clip_text_outputs o2 = {.hidden = &b, .hidden_index = -2, .text_embeds = &pooled};
    TU_OK(rb_clip_text_encode(te1, ids1, 77, 2, &o1, NULL));
    TU_OK(rb_clip_text_encode(te2, ids2, 77, 2, &o2, NULL));
    float *e = dev_read(&emb), *p = dev_read(&pooled);
    expect_close(e, ref_f32(ref, "negative_prompt_embeds", NULL), 77 * (D1 + D2), TOL, "sdxl negative_prompt_embeds");
    expect_close(e + 77 * (D1 + D2), ref_f32(ref, "prompt_embeds", NULL), 77 * (D1 + D2), TOL, "sdxl prompt_embeds");
    expect_close(p, ref_f32(ref, "negative_pooled_prompt_embeds", NULL), P, TOL, "sdxl negative_pooled_prompt_embeds");
    expect_close(p + P, ref_f32(ref, "pooled_prompt_embeds", NULL), P, TOL, "sdxl pooled_prompt_embeds");
    free(e);
    free(p);
    rb_tensor_free(&emb);
    rb_tensor_free(&pooled);
    rb_clip_text_free(te1);
    rb_clip_text_free(te2);
    rb_st_close(ref);
    rb_backend_destroy(be);
}

/* last_hidden [D, 77, 2] of the sd15 prompt batch from the model in dir. */
static float *run_sd15(rb_backend *be, const char *dir, const rb_sd_load_opts *o, const int32_t *ids) {
    rb_clip_text *m = load_dir(be, dir, o);
    rb_tensor out = dev_tensor(be, 16, 77, 2, 1, NULL);
    rb_clip_text_outputs oo = {.last_hidden = &out};
    TU_OK(rb_clip_text_encode(m, ids, 77, 2, &oo, NULL));
    float *h = dev_read(&out);
    rb_tensor_free(&out);
    rb_clip_text_free(m);
    return h;
}

static void test_key_spellings_and_dtypes(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_st_set *ref = ref_open("sd15", "text.safetensors");
    int32_t ids[2 * 77];
    batch_ids(ref, "tokenizer", ids);
    const int64_t n = 16 * 77 * 2;
    char p[1024], dir[256];
    float *base = run_sd15(be, ref_path(p, sizeof p, "pipelines", "sd15", "text_encoder"), NULL, ids);

    /* transformers 5 layout: no text_model. prefix */
    st_xform x = {.strip_prefix = "text_model."};
    make_component(dir, sizeof dir, "sd15", "text_encoder", "model.safetensors", "model.safetensors", &x, NULL);
    float *h = run_sd15(be, dir, NULL, ids);
    assert_memory_equal(h, base, (size_t)n * sizeof(float));
    free(h);
    tu_tmpdir_remove(dir);

    /* f16 / bf16 files converted to f32 at load == f32 files of the rounded values */
    const rb_dtype dts[2] = {RB_F16, RB_BF16};
    for (int k = 0; k < 2; k++) {
        st_xform xr = {.round_through = dts[k]}, xs = {.to = dts[k]};
        make_component(dir, sizeof dir, "sd15", "text_encoder", "model.safetensors", "model.safetensors", &xr, NULL);
        float *want = run_sd15(be, dir, NULL, ids);
        tu_tmpdir_remove(dir);
        /* the f16 file only under its variant name: found without asking */
        make_component(dir, sizeof dir, "sd15", "text_encoder", "model.safetensors",
                       k == 0 ? "model.fp16.safetensors" : "model.safetensors", &xs, NULL);
        float *got = run_sd15(be, dir, NULL, ids);
        assert_memory_equal(got, want, (size_t)n * sizeof(float));
        /* rounding the weights moves the result, but not far */
        const double d = max_abs_diff(got, ref_f32(ref, "negative.text_encoder.last_hidden_state", NULL), 77 * 16);
        printf("  %s weights: max|diff| to the f32 reference %.3g\n", k ? "bf16" : "f16", d);
        assert_true(d > 0.0 && d < (k ? 0.1 : 0.02));
        if (k == 0) { /* kept f16 on the backend (f16 matrix products) */
            rb_sd_load_opts o = {.weight_dtype = RB_F16, .variant = "fp16"};
            float *f16 = run_sd15(be, dir, &o, ids);
            const double d16 = max_abs_diff(f16, want, n);
            printf("  f16 weights kept f16: max|diff| to the f32 run of the same weights %.3g\n", d16);
            assert_true(d16 <= 1e-5);
            free(f16);
        }
        free(want);
        free(got);
        tu_tmpdir_remove(dir);
    }
    free(base);
    rb_st_close(ref);
    rb_backend_destroy(be);
}

static void expect_load_error(rb_backend *be, const char *dir, rb_status want, const char *needle1,
                              const char *needle2) {
    rb_clip_text *m = NULL;
    rb_error err;
    rb_error_clear(&err);
    rb_status s = rb_clip_text_load(dir, be, NULL, &m, &err);
    printf("  load error: %s\n", err.msg);
    assert_int_equal(s, want);
    assert_null(m);
    if (needle1 && !strstr(err.msg, needle1)) fail_msg("'%s' not in '%s'", needle1, err.msg);
    if (needle2 && !strstr(err.msg, needle2)) fail_msg("'%s' not in '%s'", needle2, err.msg);
}

static void test_bad_files(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    char dir[256];
    const char *fc2 = "text_model.encoder.layers.1.mlp.fc2.weight";
    st_xform drop = {.drop = fc2};
    make_component(dir, sizeof dir, "sd15", "text_encoder", "model.safetensors", "model.safetensors", &drop, NULL);
    expect_load_error(be, dir, RB_E_FORMAT, fc2, "expected shape [16, 37]");
    tu_tmpdir_remove(dir);

    const char *fc1 = "text_model.encoder.layers.2.mlp.fc1.weight";
    st_xform rs = {.reshape = fc1, .new_shape = {16, 37}, .new_nd = 2};
    make_component(dir, sizeof dir, "sd15", "text_encoder", "model.safetensors", "model.safetensors", &rs, NULL);
    expect_load_error(be, dir, RB_E_FORMAT, fc1, "expected [37, 16]");
    tu_tmpdir_remove(dir);

    /* truncated weights file */
    st_xform none = {0};
    make_component(dir, sizeof dir, "sd15", "text_encoder", "model.safetensors", "model.safetensors", &none, NULL);
    char w[512];
    snprintf(w, sizeof w, "%s/model.safetensors", dir);
    size_t sz;
    void *bytes = tu_read_file(w, &sz);
    write_file(w, bytes, sz / 2);
    free(bytes);
    expect_load_error(be, dir, RB_E_FORMAT, "model.safetensors", NULL);
    write_file(w, "\x08", 1); /* shorter than the length prefix */
    expect_load_error(be, dir, RB_E_FORMAT, NULL, NULL);
    tu_tmpdir_remove(dir);

    char *cfg = edited_config("sd15", "text_encoder", "\"quick_gelu\"", "\"swish\"");
    make_component(dir, sizeof dir, "sd15", "text_encoder", "model.safetensors", "model.safetensors", &none, cfg);
    expect_load_error(be, dir, RB_E_UNSUPPORTED, "hidden_act", "swish");
    free(cfg);
    tu_tmpdir_remove(dir);
    cfg = edited_config("sd15", "text_encoder", "\"num_attention_heads\": 2", "\"num_attention_heads\": 3");
    make_component(dir, sizeof dir, "sd15", "text_encoder", "model.safetensors", "model.safetensors", &none, cfg);
    expect_load_error(be, dir, RB_E_FORMAT, "num_attention_heads", NULL);
    free(cfg);
    tu_tmpdir_remove(dir);
    cfg = edited_config("sd15", "text_encoder", "\"hidden_size\": 16", "\"hidden_size\": \"16\"");
    make_component(dir, sizeof dir, "sd15", "text_encoder", "model.safetensors", "model.safetensors", &none, cfg);
    expect_load_error(be, dir, RB_E_FORMAT, "hidden_size", NULL);
    free(cfg);
    tu_tmpdir_remove(dir);

    expect_load_error(be, "/nonexistent/rbee", RB_E_NOT_FOUND, "config.json", NULL);
    rb_backend_destroy(be);
}

static void test_bad_calls(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_clip_text *m = load_enc(be, "sd15", "text_encoder");
    int32_t ids[77];
    for (int i = 0; i < 77; i++) ids[i] = 49407;
    ids[0] = 49406;
    rb_tensor ok = dev_tensor(be, 16, 77, 1, 1, NULL), bad = dev_tensor(be, 16, 76, 1, 1, NULL);
    rb_error err;
    rb_clip_text_outputs o = {.last_hidden = &ok};
    TU_OK(rb_clip_text_encode(m, ids, 77, 1, &o, NULL));
    ids[5] = 49408;
    assert_int_equal(rb_clip_text_encode(m, ids, 77, 1, &o, &err), RB_E_RANGE);
    ids[5] = -1;
    assert_int_equal(rb_clip_text_encode(m, ids, 77, 1, &o, &err), RB_E_RANGE);
    ids[5] = 49407;
    assert_int_equal(rb_clip_text_encode(m, ids, 78, 1, &o, &err), RB_E_INVALID);
    o.last_hidden = &bad;
    assert_int_equal(rb_clip_text_encode(m, ids, 77, 1, &o, &err), RB_E_INVALID);
    rb_clip_text_outputs oh = {.hidden = &ok, .hidden_index = 4};
    assert_int_equal(rb_clip_text_encode(m, ids, 77, 1, &oh, &err), RB_E_RANGE);
    oh.hidden_index = -5;
    assert_int_equal(rb_clip_text_encode(m, ids, 77, 1, &oh, &err), RB_E_RANGE);
    oh.hidden_index = -4; /* = 0, the embeddings */
    TU_OK(rb_clip_text_encode(m, ids, 77, 1, &oh, &err));
    rb_clip_text_outputs ot = {.text_embeds = &ok};
    assert_int_equal(rb_clip_text_encode(m, ids, 77, 1, &ot, &err), RB_E_INVALID);
    rb_tensor_free(&ok);
    rb_tensor_free(&bad);
    rb_clip_text_free(m);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoders_match_reference), cmocka_unit_test(test_sd1_prompt_embeds),
        cmocka_unit_test(test_sdxl_prompt_embeds),       cmocka_unit_test(test_key_spellings_and_dtypes),
        cmocka_unit_test(test_bad_files),                cmocka_unit_test(test_bad_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

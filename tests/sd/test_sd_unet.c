/* The UNet2DConditionModel (rb_unet_*) against diffusers' float32 results:
 * each pipeline's denoiser_call.safetensors (sd15, sd21v v-prediction with
 * linear projections, sdxl with text_embeds / time_ids, sd15-inpaint with 9
 * input channels): all three calls (timesteps 981, 1, 500) on the CFG batch
 * of 2, within 1e-5 absolute; the non-square 64x96 runs' first steps
 * (step0.model_in -> step0.model_out); one batch element alone. Also f16
 * weight files, the config and weight errors (unsupported block type,
 * missing / mis-shaped tensor, truncated file) and bad inputs. Prints the
 * CPU time per UNet call (information only). */
#include "sd_nets_ref.h"

#define TOL 1e-5

static const char *const k_pipes[] = {"sd15", "sd21v", "sdxl", "sd15-inpaint"};

static rb_unet *load_unet(rb_backend *be, const char *dir, const rb_sd_load_opts *o) {
    rb_unet *u = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_unet_load(dir, be, o, &u, &err) != RB_OK) fail_msg("load %s: %s", dir, err.msg);
    return u;
}

static rb_unet *load_pipe(rb_backend *be, const char *pipe) {
    char p[1024];
    return load_unet(be, ref_path(p, sizeof p, "pipelines", pipe, "unet"), NULL);
}

/* Runs the UNet on host data; returns the output [W, H, out_channels, B] (malloc'ed). */
static float *run_unet(rb_unet *u, rb_backend *be, const float *sample, int64_t W, int64_t H, int64_t B, float t,
                       const float *ctx, int64_t T, const float *text_embeds, const float *time_ids, double *ms) {
    const rb_unet_config *c = rb_unet_get_config(u);
    rb_tensor x = dev_tensor(be, W, H, c->in_channels, B, sample);
    rb_tensor k = dev_tensor(be, c->cross_attention_dim, T, B, 1, ctx);
    rb_tensor out = dev_tensor(be, W, H, c->out_channels, B, NULL), te = {0};
    float ts[16];
    for (int64_t b = 0; b < B; b++) ts[b] = t;
    rb_unet_inputs in = {.sample = &x, .timesteps = ts, .context = &k};
    if (c->add_text_time) {
        const int64_t Dt = c->projection_class_embeddings_input_dim - 6 * c->addition_time_embed_dim;
        te = dev_tensor(be, Dt, B, 1, 1, text_embeds);
        in.text_embeds = &te;
        in.time_ids = time_ids;
        in.n_time_ids = 6;
    }
    rb_error err;
    rb_error_clear(&err);
    const double c0 = cpu_ms(), w0 = now_ms();
    if (rb_unet_forward(u, &in, &out, &err) != RB_OK) fail_msg("%s", err.msg);
    if (ms) {
        ms[0] = cpu_ms() - c0;
        ms[1] = now_ms() - w0;
    }
    float *o = dev_read(&out);
    rb_tensor_free(&x);
    rb_tensor_free(&k);
    rb_tensor_free(&out);
    if (te.buf) rb_tensor_free(&te);
    return o;
}

static void test_denoiser_calls(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    for (size_t pi = 0; pi < sizeof k_pipes / sizeof k_pipes[0]; pi++) {
        const char *pipe = k_pipes[pi];
        rb_st_set *ref = ref_open(pipe, "denoiser_call.safetensors");
        rb_unet *u = load_pipe(be, pipe);
        const rb_unet_config *c = rb_unet_get_config(u);
        const rb_st_tensor *st = rb_st_find(ref, "sample");
        assert_non_null(st);
        const int64_t W = st->ne[0], H = st->ne[1], B = st->ne[3];
        assert_int_equal(st->ne[2], c->in_channels);
        int64_t nctx;
        const float *ctx = ref_f32(ref, "encoder_hidden_states", &nctx);
        const int64_t T = nctx / (B * c->cross_attention_dim);
        const float *te = c->add_text_time ? ref_f32(ref, "text_embeds", NULL) : NULL;
        const float *tid = c->add_text_time ? ref_f32(ref, "time_ids", NULL) : NULL;
        printf("%s: UNet %lld levels, in %lld, %.2f MB of weights, sample %lldx%lld, batch %lld\n", pipe,
               (long long)c->n_levels, (long long)c->in_channels, (double)rb_unet_weight_bytes(u) / 1e6, (long long)W,
               (long long)H, (long long)B);
        for (int j = 0; j < 3; j++) {
            char n[64];
            snprintf(n, sizeof n, "call%d.timestep", j);
            const float t = ref_f32(ref, n, NULL)[0];
            double ms[2];
            float *o = run_unet(u, be, ref_f32(ref, "sample", NULL), W, H, B, t, ctx, T, te, tid, ms);
            snprintf(n, sizeof n, "call%d.out", j);
            char what[96];
            snprintf(what, sizeof what, "%s %s (t = %g)", pipe, n, (double)t);
            expect_close(o, ref_f32(ref, n, NULL), W * H * c->out_channels * B, TOL, what);
            printf("  UNet call: %.1f ms CPU, %.1f ms wall\n", ms[0], ms[1]);
            free(o);
        }
        rb_unet_free(u);
        rb_st_close(ref);
    }
    rb_backend_destroy(be);
}

/* The 64x96 runs: latents 8x12, not square. */
static void test_nonsquare_step(void **state) {
    (void)state;
    static const char *const pipes[] = {"sd15", "sd21v", "sdxl"};
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    for (size_t pi = 0; pi < 3; pi++) {
        rb_st_set *ref = ref_open(pipes[pi], "txt2img_euler_64x96.safetensors");
        rb_unet *u = load_pipe(be, pipes[pi]);
        const rb_unet_config *c = rb_unet_get_config(u);
        const rb_st_tensor *st = rb_st_find(ref, "step0.model_in");
        assert_non_null(st);
        const int64_t W = st->ne[0], H = st->ne[1], B = st->ne[3];
        assert_true(W != H);
        int64_t nctx;
        const float *ctx = ref_f32(ref, "cond.encoder_hidden_states", &nctx);
        const float *te = c->add_text_time ? ref_f32(ref, "cond.added_cond_kwargs.text_embeds", NULL) : NULL;
        const float *tid = c->add_text_time ? ref_f32(ref, "cond.added_cond_kwargs.time_ids", NULL) : NULL;
        for (int i = 0; i < 2; i++) {
            char n[64], what[96];
            snprintf(n, sizeof n, "step%d.timestep", i);
            const float t = ref_f32(ref, n, NULL)[0];
            snprintf(n, sizeof n, "step%d.model_in", i);
            float *o = run_unet(u, be, ref_f32(ref, n, NULL), W, H, B, t, ctx, nctx / (B * c->cross_attention_dim), te,
                                tid, NULL);
            snprintf(n, sizeof n, "step%d.model_out", i);
            snprintf(what, sizeof what, "%s 64x96 %s", pipes[pi], n);
            expect_close(o, ref_f32(ref, n, NULL), W * H * c->out_channels * B, TOL, what);
            free(o);
        }
        rb_unet_free(u);
        rb_st_close(ref);
    }
    rb_backend_destroy(be);
}

/* The cond half of the batch alone gives the cond half of the reference. */
static void test_single_element(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_st_set *ref = ref_open("sdxl", "denoiser_call.safetensors");
    rb_unet *u = load_pipe(be, "sdxl");
    const int64_t W = 8, H = 8, C = 4, X = 40, P = 20;
    const float *x = ref_f32(ref, "sample", NULL), *k = ref_f32(ref, "encoder_hidden_states", NULL);
    const float *te = ref_f32(ref, "text_embeds", NULL), *tid = ref_f32(ref, "time_ids", NULL);
    float *o = run_unet(u, be, x + W * H * C, W, H, 1, ref_f32(ref, "call2.timestep", NULL)[0], k + 77 * X, 77, te + P,
                        tid + 6, NULL);
    expect_close(o, ref_f32(ref, "call2.out", NULL) + W * H * C, W * H * C, TOL, "sdxl call2.out, cond element alone");
    free(o);
    rb_unet_free(u);
    rb_st_close(ref);
    rb_backend_destroy(be);
}

/* An f16 weight file (the .fp16 variant) loads to f32 exactly as an f32
 * file of the rounded values; kept f16 (f16 kernels) it stays within 1e-5 of that. */
static void test_f16_weights(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_st_set *ref = ref_open("sd15", "denoiser_call.safetensors");
    const float *x = ref_f32(ref, "sample", NULL), *k = ref_f32(ref, "encoder_hidden_states", NULL);
    const int64_t n = 8 * 8 * 4 * 2;
    const float t = ref_f32(ref, "call2.timestep", NULL)[0];
    char dir[256];
    st_xform xr = {.round_through = RB_F16}, xs = {.to = RB_F16};
    make_component(dir, sizeof dir, "sd15", "unet", "diffusion_pytorch_model.safetensors",
                   "diffusion_pytorch_model.safetensors", &xr, NULL);
    rb_unet *u = load_unet(be, dir, NULL);
    float *want = run_unet(u, be, x, 8, 8, 2, t, k, 77, NULL, NULL, NULL);
    rb_unet_free(u);
    tu_tmpdir_remove(dir);
    make_component(dir, sizeof dir, "sd15", "unet", "diffusion_pytorch_model.safetensors",
                   "diffusion_pytorch_model.fp16.safetensors", &xs, NULL);
    u = load_unet(be, dir, NULL);
    float *got = run_unet(u, be, x, 8, 8, 2, t, k, 77, NULL, NULL, NULL);
    assert_memory_equal(got, want, (size_t)n * sizeof(float));
    const double d = max_abs_diff(got, ref_f32(ref, "call2.out", NULL), n);
    printf("  f16 weights: max|diff| to the f32 reference %.3g\n", d);
    assert_true(d > 0.0 && d < 0.05);
    rb_unet_free(u);
    rb_sd_load_opts o = {.weight_dtype = RB_F16, .variant = "fp16"};
    u = load_unet(be, dir, &o);
    assert_true(rb_unet_weight_bytes(u) < 1300000); /* half of the 2.24 MB f32 file, biases f32 */
    float *h = run_unet(u, be, x, 8, 8, 2, t, k, 77, NULL, NULL, NULL);
    expect_close(h, want, n, TOL, "sd15 f16 weights kept f16");
    free(h);
    rb_unet_free(u);
    tu_tmpdir_remove(dir);
    free(want);
    free(got);
    rb_st_close(ref);
    rb_backend_destroy(be);
}

static void expect_load_error(rb_backend *be, const char *dir, rb_status want, const char *needle1,
                              const char *needle2) {
    rb_unet *u = NULL;
    rb_error err;
    rb_error_clear(&err);
    rb_status s = rb_unet_load(dir, be, NULL, &u, &err);
    printf("  load error: %s\n", err.msg);
    assert_int_equal(s, want);
    assert_null(u);
    if (needle1 && !strstr(err.msg, needle1)) fail_msg("'%s' not in '%s'", needle1, err.msg);
    if (needle2 && !strstr(err.msg, needle2)) fail_msg("'%s' not in '%s'", needle2, err.msg);
}

static void config_error(rb_backend *be, const char *pipe, const char *from, const char *to, rb_status want,
                         const char *needle) {
    char dir[256];
    char *cfg = edited_config(pipe, "unet", from, to);
    st_xform none = {0};
    make_component(dir, sizeof dir, pipe, "unet", "diffusion_pytorch_model.safetensors",
                   "diffusion_pytorch_model.safetensors", &none, cfg);
    expect_load_error(be, dir, want, needle, NULL);
    free(cfg);
    tu_tmpdir_remove(dir);
}

static void test_bad_files(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    char dir[256];
    const char *ws = "diffusion_pytorch_model.safetensors";
    config_error(be, "sd15", "\"CrossAttnDownBlock2D\",\n    \"DownBlock2D\"",
                 "\"CrossAttnDownBlock2D\",\n    \"SimpleCrossAttnDownBlock2D\"", RB_E_UNSUPPORTED, "down_block_types");
    config_error(be, "sd15", "\"UpBlock2D\",", "\"KUpBlock2D\",", RB_E_UNSUPPORTED, "up_block_types");
    config_error(be, "sd15", "\"mid_block_type\": \"UNetMidBlock2DCrossAttn\"", "\"mid_block_type\": \"UNetMidBlock2D\"",
                 RB_E_UNSUPPORTED, "mid_block_type");
    config_error(be, "sd15", "\"time_cond_proj_dim\": null", "\"time_cond_proj_dim\": 256", RB_E_UNSUPPORTED,
                 "time_cond_proj_dim");
    config_error(be, "sd15", "\"resnet_time_scale_shift\": \"default\"", "\"resnet_time_scale_shift\": \"scale_shift\"",
                 RB_E_UNSUPPORTED, "resnet_time_scale_shift");
    config_error(be, "sd15", "\"class_embed_type\": null", "\"class_embed_type\": \"timestep\"", RB_E_UNSUPPORTED,
                 "class_embed_type");
    config_error(be, "sd15", "\"attention_head_dim\": 8", "\"attention_head_dim\": 5", RB_E_UNSUPPORTED,
                 "attention_head_dim");
    config_error(be, "sdxl", "\"addition_embed_type\": \"text_time\"", "\"addition_embed_type\": \"image\"",
                 RB_E_UNSUPPORTED, "addition_embed_type");
    config_error(be, "sdxl", "\"transformer_layers_per_block\": [\n    1,\n    1,\n    2\n  ]",
                 "\"transformer_layers_per_block\": [1, 2]", RB_E_FORMAT, "transformer_layers_per_block");
    config_error(be, "sd15", "\"norm_num_groups\": 8", "\"norm_num_groups\": 3", RB_E_UNSUPPORTED, "norm_num_groups");
    config_error(be, "sd15", "\"block_out_channels\": [", "\"block_out_channels\": 7, \"x\": [", RB_E_FORMAT,
                 "block_out_channels");
    /* a config that does not match the weights: the first mismatching tensor is named */
    config_error(be, "sd15", "\"in_channels\": 4", "\"in_channels\": 9", RB_E_FORMAT, "conv_in.weight");

    const char *miss = "down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k.weight";
    st_xform drop = {.drop = miss};
    make_component(dir, sizeof dir, "sd15", "unet", ws, ws, &drop, NULL);
    expect_load_error(be, dir, RB_E_FORMAT, miss, "expected shape [32, 16]");
    tu_tmpdir_remove(dir);
    const char *bad = "up_blocks.1.resnets.2.conv1.weight";
    st_xform rs = {.reshape = bad, .new_shape = {32, 48, 9, 1}, .new_nd = 4};
    make_component(dir, sizeof dir, "sd15", "unet", ws, ws, &rs, NULL);
    expect_load_error(be, dir, RB_E_FORMAT, bad, "expected [32, 48, 3, 3]");
    tu_tmpdir_remove(dir);

    st_xform none = {0};
    make_component(dir, sizeof dir, "sd15", "unet", ws, ws, &none, NULL);
    char w[512];
    snprintf(w, sizeof w, "%s/%s", dir, ws);
    size_t sz;
    void *bytes = tu_read_file(w, &sz);
    write_file(w, bytes, sz - 100);
    free(bytes);
    expect_load_error(be, dir, RB_E_FORMAT, ws, NULL);
    remove(w); /* no weights at all */
    expect_load_error(be, dir, RB_E_NOT_FOUND, "diffusion_pytorch_model", NULL);
    tu_tmpdir_remove(dir);
    rb_backend_destroy(be);
}

static void test_bad_inputs(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_unet *u = load_pipe(be, "sdxl");
    rb_tensor x = dev_tensor(be, 8, 8, 4, 2, NULL), k = dev_tensor(be, 40, 77, 2, 1, NULL);
    rb_tensor te = dev_tensor(be, 20, 2, 1, 1, NULL), out = dev_tensor(be, 8, 8, 4, 2, NULL);
    rb_tensor x9 = dev_tensor(be, 8, 8, 9, 2, NULL), k1 = dev_tensor(be, 40, 77, 1, 1, NULL);
    TU_OK(rb_fill(be, &x, 0.5f));
    TU_OK(rb_fill(be, &k, 0.1f));
    TU_OK(rb_fill(be, &te, 0.2f));
    const float ts[2] = {500, 500}, tid[12] = {64, 64, 0, 0, 64, 64, 64, 64, 0, 0, 64, 64};
    rb_unet_inputs in = {.sample = &x, .timesteps = ts, .context = &k, .text_embeds = &te, .time_ids = tid,
                         .n_time_ids = 6};
    rb_error err;
    TU_OK(rb_unet_forward(u, &in, &out, &err));
    size_t need = 0;
    TU_OK(rb_unet_scratch_bytes(u, &in, &need, &err));
    printf("  sdxl fixture UNet, batch 2 at 8x8: %zu bytes of activations\n", need);
    assert_true(need > 0);
    rb_unet_inputs bad = in;
    bad.sample = &x9;
    assert_int_equal(rb_unet_forward(u, &bad, &out, &err), RB_E_INVALID);
    bad = in;
    bad.context = &k1;
    assert_int_equal(rb_unet_forward(u, &bad, &out, &err), RB_E_INVALID);
    bad = in;
    bad.n_time_ids = 5;
    assert_int_equal(rb_unet_forward(u, &bad, &out, &err), RB_E_INVALID);
    printf("  %s\n", err.msg);
    bad = in;
    bad.text_embeds = NULL;
    assert_int_equal(rb_unet_forward(u, &bad, &out, &err), RB_E_INVALID);
    bad = in;
    bad.timesteps = NULL;
    assert_int_equal(rb_unet_forward(u, &bad, &out, &err), RB_E_INVALID);
    const float tnan[2] = {NAN, 1};
    bad = in;
    bad.timesteps = tnan;
    assert_int_equal(rb_unet_forward(u, &bad, &out, &err), RB_E_INVALID);
    assert_int_equal(rb_unet_forward(u, &in, &x9, &err), RB_E_INVALID);
    assert_int_equal(rb_unet_forward(NULL, &in, &out, &err), RB_E_INVALID);
    rb_tensor_free(&x);
    rb_tensor_free(&k);
    rb_tensor_free(&te);
    rb_tensor_free(&out);
    rb_tensor_free(&x9);
    rb_tensor_free(&k1);
    rb_unet_free(u);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_denoiser_calls), cmocka_unit_test(test_nonsquare_step),
        cmocka_unit_test(test_single_element), cmocka_unit_test(test_f16_weights),
        cmocka_unit_test(test_bad_files),      cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The Stable Diffusion networks on the GPU backend (RBEE_TEST_GPU, as the
 * other GPU tests; skipped without one) against diffusers' float32 fixtures
 * with the CPU tests' tolerance, 1e-5 absolute: the UNet's denoiser calls
 * of every pipeline (sd15, sd21v with linear projections and
 * v-prediction, sdxl with text_time, the 9-channel inpainting UNet) and the
 * non-square 64x96 first steps, the VAE's decodes (square, non-square batch
 * of two) and encodes (mean, logvar), and every hidden state, last hidden
 * state and pooled / projected output of the text encoders (sd21v's is left
 * to the CPU tests, see k_encoders).
 *
 * Half-precision activations (rb_sd_load_opts.act_dtype, weights in the same
 * dtype) on the CPU (always) and on the GPU, against the same f32 fixtures:
 * rel L2 = |got - ref| / |ref| and max |got - ref| / max |ref| within the
 * bounds of k_half below. Every activation is rounded to 11 (f16) or 8
 * (bf16) significant bits after each op, so a single op's relative error is
 * 2^-12 / 2^-9 and the networks' error is that amplified by their depth
 * (10 to 30 ops on a path); the bounds are the errors measured on the CPU
 * backend (in the comments of k_half) times about 2.5, rounded up to 1, 2
 * or 5 times a power of ten. The GPU rounds at other points (P of
 * attention, the fused group norm + SiLU) and measured within 10% of the
 * CPU's errors (H200, CUDA and HIP flavours).
 * A VAE runs the activation dtype asked for, force_upcast or not (the
 * SDXL pipelines' upcast is the pipeline's: tests/sd). */
#include "gpu_pair.h"

#include "../sd/sd_nets_ref.h"

#define TOL 1e-5

static const char *const k_pipes[] = {"sd15", "sd21v", "sdxl", "sd15-inpaint"};

static rb_backend *need_gpu(void) {
    rb_backend *g = gp_gpu();
    if (!g) {
        print_message("no GPU backend available: skipping\n");
        skip();
    }
    return g;
}

static rb_unet *load_unet(rb_backend *be, const char *dir, const rb_sd_load_opts *o) {
    rb_unet *u = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_unet_load(dir, be, o, &u, &err) != RB_OK) fail_msg("load %s: %s", dir, err.msg);
    return u;
}

/* Runs the UNet on host data; returns the output [W, H, out_channels, B] (malloc'ed). */
static float *run_unet(rb_unet *u, rb_backend *be, const float *sample, int64_t W, int64_t H, int64_t B, float t,
                       const float *ctx, int64_t T, const float *text_embeds, const float *time_ids) {
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
    if (rb_unet_forward(u, &in, &out, &err) != RB_OK) fail_msg("%s", err.msg);
    float *o = dev_read(&out);
    rb_tensor_free(&x);
    rb_tensor_free(&k);
    rb_tensor_free(&out);
    if (te.buf) rb_tensor_free(&te);
    return o;
}

/* The three denoiser calls of a pipeline; each output checked by check(). */
typedef void (*out_check)(const float *got, const float *ref, int64_t n, const char *what, const void *arg);

static void unet_calls(rb_backend *be, const char *pipe, const rb_sd_load_opts *o, out_check check, const void *arg) {
    char dir[1024];
    rb_st_set *ref = ref_open(pipe, "denoiser_call.safetensors");
    rb_unet *u = load_unet(be, ref_path(dir, sizeof dir, "pipelines", pipe, "unet"), o);
    const rb_unet_config *c = rb_unet_get_config(u);
    const rb_st_tensor *st = rb_st_find(ref, "sample");
    assert_non_null(st);
    const int64_t W = st->ne[0], H = st->ne[1], B = st->ne[3];
    int64_t nctx;
    const float *ctx = ref_f32(ref, "encoder_hidden_states", &nctx);
    const float *te = c->add_text_time ? ref_f32(ref, "text_embeds", NULL) : NULL;
    const float *tid = c->add_text_time ? ref_f32(ref, "time_ids", NULL) : NULL;
    for (int j = 0; j < 3; j++) {
        char n[64], what[128];
        snprintf(n, sizeof n, "call%d.timestep", j);
        const float t = ref_f32(ref, n, NULL)[0];
        float *out = run_unet(u, be, ref_f32(ref, "sample", NULL), W, H, B, t, ctx, nctx / (B * c->cross_attention_dim),
                              te, tid);
        snprintf(n, sizeof n, "call%d.out", j);
        snprintf(what, sizeof what, "%s %s unet %s (t = %g) act %s", rb_backend_name(be), pipe, n, (double)t,
                 rb_dtype_name(rb_unet_act_dtype(u)));
        check(out, ref_f32(ref, n, NULL), W * H * c->out_channels * B, what, arg);
        free(out);
    }
    rb_unet_free(u);
    rb_st_close(ref);
}

static void check_tol(const float *got, const float *ref, int64_t n, const char *what, const void *arg) {
    (void)arg;
    expect_close(got, ref, n, TOL, what);
}

static void test_unet_gpu(void **state) {
    (void)state;
    rb_backend *g = need_gpu();
    for (size_t pi = 0; pi < sizeof k_pipes / sizeof k_pipes[0]; pi++) unet_calls(g, k_pipes[pi], NULL, check_tol, NULL);
    /* the 64x96 runs' first steps: latents 8x12 */
    static const char *const ns[] = {"sd15", "sdxl"};
    for (size_t pi = 0; pi < 2; pi++) {
        char dir[1024];
        rb_st_set *ref = ref_open(ns[pi], "txt2img_euler_64x96.safetensors");
        rb_unet *u = load_unet(g, ref_path(dir, sizeof dir, "pipelines", ns[pi], "unet"), NULL);
        const rb_unet_config *c = rb_unet_get_config(u);
        const rb_st_tensor *st = rb_st_find(ref, "step0.model_in");
        assert_non_null(st);
        const int64_t W = st->ne[0], H = st->ne[1], B = st->ne[3];
        int64_t nctx;
        const float *ctx = ref_f32(ref, "cond.encoder_hidden_states", &nctx);
        const float *te = c->add_text_time ? ref_f32(ref, "cond.added_cond_kwargs.text_embeds", NULL) : NULL;
        const float *tid = c->add_text_time ? ref_f32(ref, "cond.added_cond_kwargs.time_ids", NULL) : NULL;
        float *o = run_unet(u, g, ref_f32(ref, "step0.model_in", NULL), W, H, B, ref_f32(ref, "step0.timestep", NULL)[0],
                            ctx, nctx / (B * c->cross_attention_dim), te, tid);
        char what[96];
        snprintf(what, sizeof what, "%s %s 64x96 step0.model_out", rb_backend_name(g), ns[pi]);
        expect_close(o, ref_f32(ref, "step0.model_out", NULL), W * H * c->out_channels * B, TOL, what);
        free(o);
        rb_unet_free(u);
        rb_st_close(ref);
    }
    rb_backend_destroy(g);
}

/* ---- VAE ---- */

static rb_vae *load_vae_dir(rb_backend *be, const char *dir, const rb_sd_load_opts *o) {
    rb_vae *v = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_vae_load(dir, be, o, &v, &err) != RB_OK) fail_msg("load %s: %s", dir, err.msg);
    return v;
}

static rb_vae *load_vae(rb_backend *be, const char *pipe, const rb_sd_load_opts *o) {
    char dir[1024];
    const bool tmp = fixture_component(dir, sizeof dir, pipe, "vae", "diffusion_pytorch_model.safetensors");
    rb_vae *v = load_vae_dir(be, dir, o);
    if (tmp) tu_tmpdir_remove(dir);
    return v;
}

/* Decodes host latents [w, h, 4, B] (B copies of z); returns the image. */
static float *vae_decode(rb_vae *v, rb_backend *be, const float *z, int64_t w, int64_t h, int64_t B) {
    const int s = rb_vae_scale(v);
    const int64_t n = w * h * 4;
    float *zz = malloc(sizeof(float) * (size_t)(n * B));
    assert_non_null(zz);
    for (int64_t b = 0; b < B; b++) memcpy(zz + b * n, z, sizeof(float) * (size_t)n);
    rb_tensor lt = dev_tensor(be, w, h, 4, B, zz), img = dev_tensor(be, w * s, h * s, 3, B, NULL);
    rb_error err;
    rb_error_clear(&err);
    if (rb_vae_decode(v, &lt, &img, &err) != RB_OK) fail_msg("%s", err.msg);
    float *o = dev_read(&img);
    rb_tensor_free(&lt);
    rb_tensor_free(&img);
    free(zz);
    return o;
}

/* decode (square, and non-square as a batch of two) and encode of a pipeline's VAE */
static void vae_cases(rb_backend *be, rb_vae *v, const char *pipe, out_check check, const void *arg, bool encode) {
    rb_st_set *ref = ref_open(pipe, "vae.safetensors");
    static const char *const sets[2] = {"decode", "decode_nonsquare"};
    for (int k = 0; k < 2; k++) {
        char n[64], what[128];
        snprintf(n, sizeof n, "%s.in", sets[k]);
        const rb_st_tensor *zt = rb_st_find(ref, n);
        assert_non_null(zt);
        const int64_t w = zt->ne[0], h = zt->ne[1], B = k ? 2 : 1, npx = 64 * w * h * 3;
        float *o = vae_decode(v, be, ref_f32(ref, n, NULL), w, h, B);
        snprintf(n, sizeof n, "%s.out", sets[k]);
        for (int64_t b = 0; b < B; b++) {
            snprintf(what, sizeof what, "%s %s vae %s [%lld] act %s", rb_backend_name(be), pipe, n, (long long)b,
                     rb_dtype_name(rb_vae_act_dtype(v)));
            check(o + b * npx, ref_f32(ref, n, NULL), npx, what, arg);
        }
        free(o);
    }
    if (encode) {
        const rb_st_tensor *xt = rb_st_find(ref, "encode.in");
        assert_non_null(xt);
        const int64_t W = xt->ne[0], H = xt->ne[1], w = W / 8, h = H / 8, n = w * h * 4;
        rb_tensor x = dev_tensor(be, W, H, 3, 1, ref_f32(ref, "encode.in", NULL));
        rb_tensor mean = dev_tensor(be, w, h, 4, 1, NULL), logvar = dev_tensor(be, w, h, 4, 1, NULL);
        rb_error err;
        rb_error_clear(&err);
        if (rb_vae_encode(v, &x, &mean, &logvar, &err) != RB_OK) fail_msg("%s", err.msg);
        float *m = dev_read(&mean), *lv = dev_read(&logvar);
        char what[128];
        snprintf(what, sizeof what, "%s %s vae encode.mean", rb_backend_name(be), pipe);
        check(m, ref_f32(ref, "encode.mean", NULL), n, what, arg);
        snprintf(what, sizeof what, "%s %s vae encode.logvar", rb_backend_name(be), pipe);
        check(lv, ref_f32(ref, "encode.logvar", NULL), n, what, arg);
        free(m);
        free(lv);
        rb_tensor_free(&x);
        rb_tensor_free(&mean);
        rb_tensor_free(&logvar);
    }
    rb_st_close(ref);
}

static void test_vae_gpu(void **state) {
    (void)state;
    rb_backend *g = need_gpu();
    for (size_t pi = 0; pi < sizeof k_pipes / sizeof k_pipes[0]; pi++) {
        rb_vae *v = load_vae(g, k_pipes[pi], NULL);
        vae_cases(g, v, k_pipes[pi], check_tol, NULL, true);
        rb_vae_free(v);
    }
    rb_backend_destroy(g);
}

/* ---- CLIP text encoders ---- */

typedef struct enc_case {
    const char *pipe, *encoder, *tokenizer;
} enc_case;

/* sd21v's encoder (gelu, 3 heads of 8) is left to the CPU tests: its 4.8 MB
 * would not fit the GPU machine's transfer beside the others */
static const enc_case k_encoders[] = {
    {"sd15", "text_encoder", "tokenizer"},
    {"sdxl", "text_encoder", "tokenizer"},
    {"sdxl", "text_encoder_2", "tokenizer_2"},
    {"sd15-inpaint", "text_encoder", "tokenizer"},
};

static rb_clip_text *load_enc(rb_backend *be, const enc_case *c, const rb_sd_load_opts *o) {
    char dir[1024];
    const bool tmp = fixture_component(dir, sizeof dir, c->pipe, c->encoder, "model.safetensors");
    rb_clip_text *m = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_clip_text_load(dir, be, o, &m, &err) != RB_OK) fail_msg("load %s: %s", dir, err.msg);
    if (tmp) tu_tmpdir_remove(dir);
    return m;
}

/* Every hidden state, then the last hidden state and the pooled or
 * projected output, of [negative, prompt]; all_layers false: the
 * penultimate and last hidden states only. */
static void clip_cases(rb_backend *be, const enc_case *c, const rb_sd_load_opts *o, out_check check, const void *arg,
                       bool all_layers) {
    rb_st_set *ref = ref_open(c->pipe, "text.safetensors");
    rb_clip_text *m = load_enc(be, c, o);
    const rb_clip_text_config *cfg = rb_clip_text_get_config(m);
    const int64_t D = cfg->hidden_size, L = cfg->n_layers;
    int32_t ids[2 * 77];
    char n[160], what[200];
    snprintf(n, sizeof n, "negative.%s.input_ids", c->tokenizer);
    ref_ids(ref, n, ids, 77);
    snprintf(n, sizeof n, "prompt.%s.input_ids", c->tokenizer);
    ref_ids(ref, n, ids + 77, 77);
    rb_tensor hid = dev_tensor(be, D, 77, 2, 1, NULL), last = dev_tensor(be, D, 77, 2, 1, NULL);
    rb_tensor pooled = dev_tensor(be, D, 2, 1, 1, NULL);
    rb_tensor te = dev_tensor(be, cfg->with_projection ? cfg->projection_dim : 1, 2, 1, 1, NULL);
    for (int64_t i = all_layers ? 0 : L - 1; i <= L; i++) {
        rb_clip_text_outputs out = {.hidden = &hid, .hidden_index = (int)i};
        if (i == L) {
            out.last_hidden = &last;
            out.pooled = &pooled;
            if (cfg->with_projection) out.text_embeds = &te;
        }
        rb_error err;
        rb_error_clear(&err);
        if (rb_clip_text_encode(m, ids, 77, 2, &out, &err) != RB_OK) fail_msg("%s", err.msg);
        float *h = dev_read(&hid);
        for (int b = 0; b < 2; b++) {
            snprintf(n, sizeof n, "%s.%s.hidden_states.%lld", b ? "prompt" : "negative", c->encoder, (long long)i);
            snprintf(what, sizeof what, "%s %s %s act %s", rb_backend_name(be), c->pipe, n,
                     rb_dtype_name(rb_clip_text_act_dtype(m)));
            check(h + b * 77 * D, ref_f32(ref, n, NULL), 77 * D, what, arg);
        }
        free(h);
    }
    float *lh = dev_read(&last), *po = dev_read(&pooled), *tx = dev_read(&te);
    for (int b = 0; b < 2; b++) {
        const char *tag = b ? "prompt" : "negative";
        snprintf(n, sizeof n, "%s.%s.last_hidden_state", tag, c->encoder);
        snprintf(what, sizeof what, "%s %s %s", rb_backend_name(be), c->pipe, n);
        check(lh + b * 77 * D, ref_f32(ref, n, NULL), 77 * D, what, arg);
        if (cfg->with_projection) {
            snprintf(n, sizeof n, "%s.%s.text_embeds", tag, c->encoder);
            snprintf(what, sizeof what, "%s %s %s", rb_backend_name(be), c->pipe, n);
            check(tx + b * cfg->projection_dim, ref_f32(ref, n, NULL), cfg->projection_dim, what, arg);
        } else {
            snprintf(n, sizeof n, "%s.%s.pooler_output", tag, c->encoder);
            snprintf(what, sizeof what, "%s %s %s", rb_backend_name(be), c->pipe, n);
            check(po + b * D, ref_f32(ref, n, NULL), D, what, arg);
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

static void test_clip_gpu(void **state) {
    (void)state;
    rb_backend *g = need_gpu();
    for (size_t i = 0; i < sizeof k_encoders / sizeof k_encoders[0]; i++)
        clip_cases(g, &k_encoders[i], NULL, check_tol, NULL, true);
    rb_backend_destroy(g);
}

/* ---- half-precision activations ---- */

/* Bounds on rel L2 and on max |diff| / max |ref| (see the header). */
typedef struct half_bound {
    double rel, max;
} half_bound;

/* f16, bf16; measured on the CPU backend (worst over the checks) */
static const half_bound k_half[3][2] = {
    /* UNet, 3 pipelines x 3 calls (CPU: f16 rel 1.6e-3, max 2.1e-3; bf16 1.4e-2, 1.3e-2) */
    {{5e-3, 1e-2}, {5e-2, 5e-2}},
    /* VAE decodes and encode (CPU: f16 rel 4.2e-3, max 4.5e-3; bf16 3.2e-2, 2.8e-2) */
    {{2e-2, 2e-2}, {1e-1, 1e-1}},
    /* CLIP, the last two hidden states and the outputs (CPU: f16 rel 1.2e-3, max 1.2e-3; bf16 1.0e-2, 1.3e-2) */
    {{5e-3, 5e-3}, {5e-2, 5e-2}},
};

typedef struct half_arg {
    half_bound b;
    double worst_rel, worst_max; /* over the checks of one network */
} half_arg;

static void check_half(const float *got, const float *ref, int64_t n, const char *what, const void *arg) {
    half_arg *h = (half_arg *)(uintptr_t)arg;
    double num = 0, den = 0, md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) fail_msg("%s: element %lld is %g", what, (long long)i, (double)got[i]);
        const double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        md = fabs(d) > md ? fabs(d) : md;
        mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
    }
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num), mx = mr > 0 ? md / mr : md;
    h->worst_rel = rel > h->worst_rel ? rel : h->worst_rel;
    h->worst_max = mx > h->worst_max ? mx : h->worst_max;
    printf("  %-76s rel L2 %.2e, max|diff|/max|ref| %.2e\n", what, rel, mx);
    if (!(rel <= h->b.rel) || !(mx <= h->b.max))
        fail_msg("%s: rel L2 %.3g (bound %.0e), max |diff| / max |ref| %.3g (bound %.0e)", what, rel, h->b.rel, mx,
                 h->b.max);
}

static void half_nets(rb_backend *be, rb_dtype dt) {
    const int t = dt == RB_BF16;
    const rb_sd_load_opts o = {.weight_dtype = dt, .act_dtype = dt};
    half_arg ua = {.b = k_half[0][t]}, va = {.b = k_half[1][t]}, ca = {.b = k_half[2][t]};
    unet_calls(be, "sd15", &o, check_half, &ua);
    unet_calls(be, "sdxl", &o, check_half, &ua);
    unet_calls(be, "sd21v", &o, check_half, &ua);
    rb_vae *v = load_vae(be, "sd15", &o);
    assert_int_equal(rb_vae_act_dtype(v), dt);
    vae_cases(be, v, "sd15", check_half, &va, true);
    rb_vae_free(v);
    clip_cases(be, &k_encoders[0], &o, check_half, &ca, false);
    clip_cases(be, &k_encoders[2], &o, check_half, &ca, false);
    printf("%s %s: worst rel L2 / max ratio: unet %.2e / %.2e, vae %.2e / %.2e, clip %.2e / %.2e\n",
           rb_backend_name(be), rb_dtype_name(dt), ua.worst_rel, ua.worst_max, va.worst_rel, va.worst_max,
           ca.worst_rel, ca.worst_max);
}

static void test_half_cpu(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    half_nets(be, RB_F16);
    half_nets(be, RB_BF16);
    rb_backend_destroy(be);
}

static void test_half_gpu(void **state) {
    (void)state;
    rb_backend *g = need_gpu();
    half_nets(g, RB_F16);
    half_nets(g, RB_BF16);
    rb_backend_destroy(g);
}

/* The VAE's activation dtype: f32 asked of a VAE loaded for f16 gives the
 * f32 decode; bf16 is kept (force_upcast plays no part here); other dtypes
 * are refused. */
static void test_vae_act_dtype(void **state) {
    (void)state;
    rb_backend *bes[2] = {NULL, gp_gpu()};
    TU_OK(rb_backend_create("cpu", NULL, &bes[0], NULL));
    for (int side = 0; side < 2; side++) {
        rb_backend *be = bes[side];
        if (!be) continue;
        const rb_sd_load_opts o16 = {.act_dtype = RB_F16}, ob = {.weight_dtype = RB_BF16, .act_dtype = RB_BF16};
        rb_vae *v = load_vae(be, "sdxl", &o16);
        assert_true(rb_vae_get_config(v)->force_upcast);
        assert_int_equal(rb_vae_act_dtype(v), RB_F16);
        TU_OK(rb_vae_set_act_dtype(v, RB_F32, NULL));
        assert_int_equal(rb_vae_act_dtype(v), RB_F32);
        vae_cases(be, v, "sdxl", check_tol, NULL, false);
        rb_error err;
        rb_error_clear(&err);
        assert_int_equal(rb_vae_set_act_dtype(v, RB_Q8_0, &err), RB_E_UNSUPPORTED);
        assert_non_null(strstr(err.msg, "activation dtype"));
        TU_OK(rb_vae_set_act_dtype(v, RB_BF16, NULL));
        assert_int_equal(rb_vae_act_dtype(v), RB_BF16);
        rb_vae_free(v);
        v = load_vae(be, "sdxl", &ob);
        assert_int_equal(rb_vae_act_dtype(v), RB_BF16);
        half_arg va = {.b = k_half[1][1]};
        vae_cases(be, v, "sdxl", check_half, &va, false);
        rb_vae_free(v);
        /* a bad act dtype fails before anything is loaded */
        const rb_sd_load_opts bad = {.act_dtype = RB_I32};
        char dir[1024];
        rb_unet *u = NULL;
        rb_error_clear(&err);
        assert_int_equal(rb_unet_load(ref_path(dir, sizeof dir, "pipelines", "sd15", "unet"), be, &bad, &u, &err),
                         RB_E_UNSUPPORTED);
        assert_null(u);
        rb_backend_destroy(be);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unet_gpu),  cmocka_unit_test(test_vae_gpu),  cmocka_unit_test(test_clip_gpu),
        cmocka_unit_test(test_half_cpu),  cmocka_unit_test(test_half_gpu), cmocka_unit_test(test_vae_act_dtype),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

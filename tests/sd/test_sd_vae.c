/* The AutoencoderKL (rb_vae_*) against diffusers' float32 results
 * (refs/<pipe>/vae.safetensors): decode of a square (8x8 -> 64x64) and a
 * non-square (8x12 -> 64x96) latent, encode mean and logvar (and the std
 * derived from it), all within 1e-5 absolute; a batch of two; weights saved
 * under diffusers' pre-0.14 attention names as 1x1 convolution kernels; the
 * config and weight errors and bad shapes. Prints the CPU time per decode
 * (information only) and the activation memory the decoder needs.
 * The decodes come within about 8e-6 of diffusers (outputs up to 2.8): a
 * float32 summation-order spread, not a bias. Accumulating our
 * convolutions in double moves us no closer than about 5e-6, i.e. the
 * reference itself carries that much float32 error. */
#include "sd_nets_ref.h"

#define TOL 1e-5

static const char *const k_pipes[] = {"sd15", "sd21v", "sdxl", "sd15-inpaint"};
static const char *const k_weights = "diffusion_pytorch_model.safetensors";

static rb_vae *load_vae(rb_backend *be, const char *dir) {
    rb_vae *v = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_vae_load(dir, be, NULL, &v, &err) != RB_OK) fail_msg("load %s: %s", dir, err.msg);
    return v;
}

static rb_vae *load_pipe(rb_backend *be, const char *pipe) {
    char dir[1024];
    const bool tmp = fixture_component(dir, sizeof dir, pipe, "vae", k_weights);
    rb_vae *v = load_vae(be, dir);
    if (tmp) tu_tmpdir_remove(dir);
    return v;
}

/* Decodes host latents [w, h, 4, B] (B copies of z); returns the image. */
static float *decode(rb_vae *v, rb_backend *be, const float *z, int64_t w, int64_t h, int64_t B, double *ms) {
    const rb_vae_config *c = rb_vae_get_config(v);
    const int s = rb_vae_scale(v);
    const int64_t n = w * h * c->latent_channels;
    float *zz = malloc(sizeof(float) * (size_t)(n * B));
    assert_non_null(zz);
    for (int64_t b = 0; b < B; b++) memcpy(zz + b * n, z, sizeof(float) * (size_t)n);
    rb_tensor lt = dev_tensor(be, w, h, c->latent_channels, B, zz), img = dev_tensor(be, w * s, h * s, 3, B, NULL);
    rb_error err;
    rb_error_clear(&err);
    const double c0 = cpu_ms(), w0 = now_ms();
    if (rb_vae_decode(v, &lt, &img, &err) != RB_OK) fail_msg("%s", err.msg);
    if (ms) {
        ms[0] = cpu_ms() - c0;
        ms[1] = now_ms() - w0;
    }
    float *o = dev_read(&img);
    rb_tensor_free(&lt);
    rb_tensor_free(&img);
    free(zz);
    return o;
}

static void test_decode(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    for (size_t pi = 0; pi < sizeof k_pipes / sizeof k_pipes[0]; pi++) {
        rb_st_set *ref = ref_open(k_pipes[pi], "vae.safetensors");
        rb_vae *v = load_pipe(be, k_pipes[pi]);
        printf("%s: VAE %d levels, %.2f MB of weights, scale %d\n", k_pipes[pi], rb_vae_get_config(v)->n_levels,
               (double)rb_vae_weight_bytes(v) / 1e6, rb_vae_scale(v));
        static const char *const sets[2] = {"decode", "decode_nonsquare"};
        for (int k = 0; k < 2; k++) {
            char n[64], what[96];
            snprintf(n, sizeof n, "%s.in", sets[k]);
            const rb_st_tensor *zt = rb_st_find(ref, n);
            assert_non_null(zt);
            const int64_t w = zt->ne[0], h = zt->ne[1];
            double ms[2];
            const int64_t B = k ? 2 : 1; /* the non-square case as a batch of two */
            float *o = decode(v, be, ref_f32(ref, n, NULL), w, h, B, ms);
            snprintf(n, sizeof n, "%s.out", sets[k]);
            const int64_t npx = 64 * w * h * 3;
            for (int64_t b = 0; b < B; b++) {
                snprintf(what, sizeof what, "%s %s (%lldx%lld) [%lld]", k_pipes[pi], n, (long long)(8 * h),
                         (long long)(8 * w), (long long)b);
                expect_close(o + b * npx, ref_f32(ref, n, NULL), npx, TOL, what);
            }
            printf("  VAE decode of %lld: %.1f ms CPU, %.1f ms wall\n", (long long)B, ms[0], ms[1]);
            free(o);
        }
        size_t bytes = 0;
        TU_OK(rb_vae_decode_scratch_bytes(v, 64, 64, 1, &bytes, NULL));
        printf("  decode activations at 64x64 latents (512x512): %.1f MB\n", (double)bytes / 1e6);
        rb_vae_free(v);
        rb_st_close(ref);
    }
    rb_backend_destroy(be);
}

static void test_encode(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    for (size_t pi = 0; pi < sizeof k_pipes / sizeof k_pipes[0]; pi++) {
        rb_st_set *ref = ref_open(k_pipes[pi], "vae.safetensors");
        rb_vae *v = load_pipe(be, k_pipes[pi]);
        const rb_st_tensor *xt = rb_st_find(ref, "encode.in");
        assert_non_null(xt);
        const int64_t W = xt->ne[0], H = xt->ne[1], w = W / 8, h = H / 8, n = w * h * 4;
        rb_tensor x = dev_tensor(be, W, H, 3, 1, ref_f32(ref, "encode.in", NULL));
        rb_tensor mean = dev_tensor(be, w, h, 4, 1, NULL), logvar = dev_tensor(be, w, h, 4, 1, NULL);
        rb_error err;
        rb_error_clear(&err);
        if (rb_vae_encode(v, &x, &mean, &logvar, &err) != RB_OK) fail_msg("%s", err.msg);
        float *m = dev_read(&mean), *lv = dev_read(&logvar);
        char what[96];
        snprintf(what, sizeof what, "%s encode.mean", k_pipes[pi]);
        expect_close(m, ref_f32(ref, "encode.mean", NULL), n, TOL, what);
        snprintf(what, sizeof what, "%s encode.logvar", k_pipes[pi]);
        expect_close(lv, ref_f32(ref, "encode.logvar", NULL), n, TOL, what);
        for (int64_t i = 0; i < n; i++) lv[i] = expf(0.5f * lv[i]);
        snprintf(what, sizeof what, "%s encode.std = exp(logvar / 2)", k_pipes[pi]);
        expect_close(lv, ref_f32(ref, "encode.std", NULL), n, TOL, what);
        /* mean alone */
        TU_OK(rb_fill(be, &mean, NAN));
        TU_OK(rb_vae_encode(v, &x, &mean, NULL, NULL));
        float *m2 = dev_read(&mean);
        assert_memory_equal(m2, m, sizeof(float) * (size_t)n);
        free(m);
        free(m2);
        free(lv);
        rb_tensor_free(&x);
        rb_tensor_free(&mean);
        rb_tensor_free(&logvar);
        rb_vae_free(v);
        rb_st_close(ref);
    }
    rb_backend_destroy(be);
}

/* diffusers < 0.14 names (query/key/value/proj_attn) with [C, C, 1, 1] kernels. */
static void old_attention_names(const char *name, char *nn, size_t cap, int64_t *shape, int *nd) {
    static const char *const map[4][2] = {
        {".to_q.", ".query."}, {".to_k.", ".key."}, {".to_v.", ".value."}, {".to_out.0.", ".proj_attn."}};
    if (!strstr(name, "mid_block.attentions.0")) return;
    for (int i = 0; i < 4; i++) {
        const char *p = strstr(name, map[i][0]);
        if (!p) continue;
        snprintf(nn, cap, "%.*s%s%s", (int)(p - name), name, map[i][1], p + strlen(map[i][0]));
        if (*nd == 2) {
            shape[2] = shape[3] = 1;
            *nd = 4;
        }
    }
}

static void test_old_attention_names(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_st_set *ref = ref_open("sd15", "vae.safetensors");
    char dir[256];
    st_xform x = {.edit = old_attention_names};
    make_component(dir, sizeof dir, "sd15", "vae", k_weights, k_weights, &x, NULL);
    rb_st_set *w = NULL;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, k_weights);
    TU_OK(rb_st_open(p, &w, NULL));
    assert_non_null(rb_st_find(w, "decoder.mid_block.attentions.0.proj_attn.weight"));
    assert_null(rb_st_find(w, "decoder.mid_block.attentions.0.to_out.0.weight"));
    rb_st_close(w);
    rb_vae *v = load_vae(be, dir);
    float *o = decode(v, be, ref_f32(ref, "decode.in", NULL), 8, 8, 1, NULL);
    expect_close(o, ref_f32(ref, "decode.out", NULL), 64 * 64 * 3, TOL, "sd15 decode.out, pre-0.14 attention names");
    free(o);
    rb_vae_free(v);
    tu_tmpdir_remove(dir);
    rb_st_close(ref);
    rb_backend_destroy(be);
}

static void expect_load_error(rb_backend *be, const char *dir, rb_status want, const char *needle1,
                              const char *needle2) {
    rb_vae *v = NULL;
    rb_error err;
    rb_error_clear(&err);
    rb_status s = rb_vae_load(dir, be, NULL, &v, &err);
    printf("  load error: %s\n", err.msg);
    assert_int_equal(s, want);
    assert_null(v);
    if (needle1 && !strstr(err.msg, needle1)) fail_msg("'%s' not in '%s'", needle1, err.msg);
    if (needle2 && !strstr(err.msg, needle2)) fail_msg("'%s' not in '%s'", needle2, err.msg);
}

static void test_bad_files(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    char dir[256];
    st_xform none = {0};
    char *cfg = edited_config("sd15", "vae", "\"UpDecoderBlock2D\",\n    \"UpDecoderBlock2D\"\n",
                              "\"UpDecoderBlock2D\",\n    \"AttnUpDecoderBlock2D\"\n");
    make_component(dir, sizeof dir, "sd15", "vae", k_weights, k_weights, &none, cfg);
    expect_load_error(be, dir, RB_E_UNSUPPORTED, "up_block_types", "AttnUpDecoderBlock2D");
    free(cfg);
    tu_tmpdir_remove(dir);
    cfg = edited_config("sd15", "vae", "\"act_fn\": \"silu\"", "\"act_fn\": \"relu\"");
    make_component(dir, sizeof dir, "sd15", "vae", k_weights, k_weights, &none, cfg);
    expect_load_error(be, dir, RB_E_UNSUPPORTED, "act_fn", NULL);
    free(cfg);
    tu_tmpdir_remove(dir);
    cfg = edited_config("sd15", "vae", "\"latent_channels\": 4", "\"latent_channels\": 16");
    make_component(dir, sizeof dir, "sd15", "vae", k_weights, k_weights, &none, cfg);
    expect_load_error(be, dir, RB_E_FORMAT, "encoder.conv_out.weight", "expected [32, 32, 3, 3]");
    free(cfg);
    tu_tmpdir_remove(dir);

    const char *miss = "decoder.mid_block.attentions.0.to_v.bias";
    st_xform drop = {.drop = miss};
    make_component(dir, sizeof dir, "sd15", "vae", k_weights, k_weights, &drop, NULL);
    expect_load_error(be, dir, RB_E_FORMAT, miss, "expected shape [32]");
    tu_tmpdir_remove(dir);
    const char *bad = "decoder.up_blocks.3.resnets.0.conv_shortcut.weight";
    st_xform rs = {.reshape = bad, .new_shape = {32, 16, 1, 1}, .new_nd = 4};
    make_component(dir, sizeof dir, "sd15", "vae", k_weights, k_weights, &rs, NULL);
    expect_load_error(be, dir, RB_E_FORMAT, bad, "expected [16, 32, 1, 1]");
    tu_tmpdir_remove(dir);

    make_component(dir, sizeof dir, "sd15", "vae", k_weights, k_weights, &none, NULL);
    char w[512];
    snprintf(w, sizeof w, "%s/%s", dir, k_weights);
    size_t sz;
    void *bytes = tu_read_file(w, &sz);
    write_file(w, bytes, 4000); /* inside the header */
    free(bytes);
    expect_load_error(be, dir, RB_E_FORMAT, k_weights, NULL);
    tu_tmpdir_remove(dir);
    rb_backend_destroy(be);
}

static void test_bad_inputs(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_vae *v = load_pipe(be, "sd15");
    rb_tensor z = dev_tensor(be, 8, 8, 4, 1, NULL), z3 = dev_tensor(be, 8, 8, 3, 1, NULL);
    rb_tensor img = dev_tensor(be, 64, 64, 3, 1, NULL), img2 = dev_tensor(be, 64, 63, 3, 1, NULL);
    rb_tensor m = dev_tensor(be, 8, 8, 4, 1, NULL), m2 = dev_tensor(be, 8, 7, 4, 1, NULL);
    rb_error err;
    TU_OK(rb_fill(be, &z, 0.1f));
    TU_OK(rb_fill(be, &img, 0.1f));
    TU_OK(rb_vae_decode(v, &z, &img, &err));
    assert_int_equal(rb_vae_decode(v, &z3, &img, &err), RB_E_INVALID);
    assert_int_equal(rb_vae_decode(v, &z, &img2, &err), RB_E_INVALID);
    assert_int_equal(rb_vae_decode(v, &z, NULL, &err), RB_E_INVALID);
    printf("  %s\n", err.msg);
    TU_OK(rb_vae_encode(v, &img, &m, NULL, &err));
    assert_int_equal(rb_vae_encode(v, &img, &m2, NULL, &err), RB_E_INVALID);
    assert_int_equal(rb_vae_encode(v, &z3, &m, NULL, &err), RB_E_INVALID);
    /* odd sizes encode as diffusers does (pad right/bottom, stride 2): 63 rows -> 31 -> 15 -> 7 */
    TU_OK(rb_vae_encode(v, &img2, &m2, NULL, &err));
    assert_int_equal(rb_vae_encode(v, &img2, &m, NULL, &err), RB_E_INVALID);
    assert_int_equal(rb_vae_encode(NULL, &img, &m, NULL, &err), RB_E_INVALID);
    rb_tensor_free(&z);
    rb_tensor_free(&z3);
    rb_tensor_free(&img);
    rb_tensor_free(&img2);
    rb_tensor_free(&m);
    rb_tensor_free(&m2);
    rb_vae_free(v);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode),    cmocka_unit_test(test_encode),     cmocka_unit_test(test_old_attention_names),
        cmocka_unit_test(test_bad_files), cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

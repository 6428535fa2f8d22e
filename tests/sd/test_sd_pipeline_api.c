/* The pipeline calls a server needs beside rb_sd_generate (sd15 fixture
 * model):
 *  - rb_sd_check_params: RB_OK exactly when rb_sd_generate would start,
 *    the same status and message otherwise (clip skip past the encoder,
 *    a schedule the sampler does not take, a strength that leaves no step,
 *    a mask without an image, bad sizes), without running anything;
 *  - rb_sd_decode: a skip_decode run decoded afterwards gives rb_sd_generate's
 *    pixels and images bit for bit; tiling on changes the result (tiles of 8
 *    latent pixels on 16x16 latents), off does not; misuse is refused;
 *  - rb_sd_model_set_vae: the swapped VAE decodes the same latents as the
 *    VAE network run directly (rb_vae_decode on latents / its scaling factor,
 *    diffusers' postprocessing), and the UNet's result is untouched; a
 *    missing folder is refused;
 *  - rb_sd_model_set_sched_config: SDXL-Turbo's published config makes
 *    Euler ancestral with trailing spacing the default (first timestep 999). */
#include "sd_pipeline_ref.h"

static const char *const k_prompt = "a photograph of an astronaut riding a horse, highly detailed";

typedef struct ctx {
    rb_backend *be;
    char dir[256];
    rb_sd_model *m;
} ctx;

static int setup(void **state) {
    ctx *c = calloc(1, sizeof *c);
    assert_non_null(c);
    TU_OK(rb_backend_create("cpu", NULL, &c->be, NULL));
    pipeline_dir(c->dir, sizeof c->dir, "sd15");
    c->m = load_model(c->be, c->dir, NULL);
    *state = c;
    return 0;
}

static int teardown(void **state) {
    ctx *c = *state;
    rb_sd_model_free(c->m);
    tu_tmpdir_remove(c->dir);
    rb_backend_destroy(c->be);
    free(c);
    return 0;
}

static void params(rb_sd_params *p) {
    rb_sd_params_init(p);
    p->prompt = k_prompt;
    p->width = p->height = 64;
    p->steps = 4;
    p->guidance_scale = 6.0f;
    p->sampler = "euler";
    p->seed = 7;
}

static int calls;
static void count(void *user, int done, int total) {
    (void)user;
    (void)done;
    (void)total;
    calls++;
}

static void test_check_params(void **state) {
    ctx *c = *state;
    rb_sd_params p;
    rb_error e1, e2;
    params(&p);
    calls = 0;
    TU_OK(rb_sd_check_params(c->m, &p, &e1));
    rb_image img = {0}, mask = {0};
    TU_OK(rb_image_alloc(&img, 64, 64, 3, NULL));
    TU_OK(rb_image_alloc(&mask, 64, 64, 1, NULL));
    /* each bad case: the same status and message as rb_sd_generate, and nothing ran */
    for (int k = 0; k < 6; k++) {
        params(&p);
        rb_status want = RB_E_INVALID;
        switch (k) {
        case 0: p.clip_skip = 3; want = RB_E_RANGE; break;        /* the text encoder has 3 layers */
        case 1: p.sampler = "ddim_karras"; want = RB_E_UNSUPPORTED; break;
        case 2: p.init_image = &img; p.strength = 0.1; want = RB_E_RANGE; break; /* floor(4 x 0.1) = 0 steps */
        case 3: p.mask = &mask; break;                             /* a mask without an image */
        case 4: p.width = 60; break;
        case 5: p.sampler = "plms"; break;
        }
        rb_error_clear(&e1);
        rb_error_clear(&e2);
        rb_sd_output out;
        rb_sd_callbacks cb = {.progress = count};
        assert_int_equal(rb_sd_check_params(c->m, &p, &e1), want);
        assert_int_equal(rb_sd_generate(c->m, &p, &cb, &out, &e2), want);
        assert_string_equal(e1.msg, e2.msg);
        printf("  case %d: %s\n", k, e1.msg);
    }
    assert_int_equal(calls, 0);
    rb_image_free(&img);
    rb_image_free(&mask);
}

static void test_decode(void **state) {
    ctx *c = *state;
    rb_sd_params p;
    params(&p);
    p.width = p.height = 128;
    rb_sd_output full, split;
    rb_error err;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &full, &err));
    p.skip_decode = true;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &split, &err));
    assert_null(split.images);
    assert_non_null(split.latents);
    p.skip_decode = false;
    TU_OK(rb_sd_decode(c->m, &p, &split, &err));
    const size_t np = 128 * 128 * 3;
    assert_int_equal(split.count, 1);
    assert_memory_equal(split.images[0].data, full.images[0].data, np);
    assert_memory_equal(split.pixels, full.pixels, np * sizeof(float));
    assert_true(split.decode_ms >= 0.0);
    /* decoded already; no latents */
    assert_int_equal(rb_sd_decode(c->m, &p, &split, &err), RB_E_INVALID);
    rb_sd_output none = {0};
    assert_int_equal(rb_sd_decode(c->m, &p, &none, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_decode(NULL, &p, &split, &err), RB_E_INVALID);
    /* tiles of 8 latent pixels: a different (blended) result, still an image; off: the full decode */
    rb_sd_output tiled;
    p.skip_decode = true;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &tiled, &err));
    rb_sd_output off = tiled;
    off.latents = malloc(sizeof(float) * 4 * 16 * 16);
    assert_non_null(off.latents);
    memcpy(off.latents, tiled.latents, sizeof(float) * 4 * 16 * 16);
    p.vae_tiling = RB_SD_TILING_ON;
    p.vae_tile = 8;
    TU_OK(rb_sd_decode(c->m, &p, &tiled, &err));
    assert_memory_not_equal(tiled.images[0].data, full.images[0].data, np);
    const double d = max_abs_d(tiled.pixels, full.pixels, np);
    printf("  tiled decode (8-pixel tiles) vs full: max |diff| %.3g\n", d);
    assert_true(d > 0.0 && d < 1.0);
    p.vae_tiling = RB_SD_TILING_OFF;
    TU_OK(rb_sd_decode(c->m, &p, &off, &err));
    assert_memory_equal(off.images[0].data, full.images[0].data, np);
    rb_sd_output_free(&off);
    rb_sd_output_free(&tiled);
    rb_sd_output_free(&split);
    rb_sd_output_free(&full);
}

/* latents (1 x 4 x h x w, sampler space) through vae: raw / scaling, the
 * network, diffusers' postprocessing. */
static void decode_direct(rb_backend *be, rb_vae *vae, const float *latents, int h, int w, uint8_t *rgb) {
    const rb_vae_config *vc = rb_vae_get_config(vae);
    const int s = rb_vae_scale(vae);
    const size_t k = (size_t)4 * (size_t)h * (size_t)w, HW = (size_t)h * (size_t)w * (size_t)s * (size_t)s;
    float *z = malloc(sizeof(float) * k), *raw = malloc(sizeof(float) * 3 * HW);
    assert_non_null(z);
    assert_non_null(raw);
    for (size_t i = 0; i < k; i++) z[i] = latents[i] / vc->scaling_factor;
    rb_tensor tin, tout;
    const int64_t ni[4] = {w, h, 4, 1}, no[4] = {(int64_t)w * s, (int64_t)h * s, 3, 1};
    TU_OK(rb_tensor_alloc(be, RB_F32, 4, ni, &tin));
    TU_OK(rb_tensor_alloc(be, RB_F32, 4, no, &tout));
    TU_OK(rb_tensor_set(&tin, z, sizeof(float) * k));
    TU_OK(rb_vae_decode(vae, &tin, &tout, NULL));
    TU_OK(rb_tensor_get(&tout, raw, sizeof(float) * 3 * HW));
    for (size_t i = 0; i < HW; i++)
        for (int c = 0; c < 3; c++) {
            float v = raw[(size_t)c * HW + i] * 0.5f + 0.5f;
            v = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
            rgb[i * 3 + (size_t)c] = (uint8_t)rintf(v * 255.0f);
        }
    rb_tensor_free(&tin);
    rb_tensor_free(&tout);
    free(z);
    free(raw);
}

static void test_set_vae(void **state) {
    ctx *c = *state;
    rb_error err;
    char vdir[1024];
    tu_fixture(vdir, sizeof vdir, "diffusers/pipelines/sdxl/vae"); /* another VAE: scaling 0.13025 */
    rb_sd_model *m = load_model(c->be, c->dir, NULL);
    rb_sd_params p;
    params(&p);
    rb_sd_output before, after;
    p.skip_decode = true;
    TU_OK(rb_sd_generate(m, &p, NULL, &before, &err));
    assert_int_equal(rb_sd_model_set_vae(m, "/nonexistent/vae", NULL, &err), RB_E_NOT_FOUND);
    printf("  %s\n", err.msg);
    TU_OK(rb_sd_model_set_vae(m, vdir, NULL, &err));
    rb_sd_model_info info;
    rb_sd_model_get_info(m, &info);
    assert_true(fabsf(info.vae_scaling_factor - 0.13025f) < 1e-7f);
    p.skip_decode = false;
    TU_OK(rb_sd_generate(m, &p, NULL, &after, &err));
    assert_memory_equal(after.latents, before.latents, sizeof(float) * 4 * 8 * 8); /* the UNet's result is untouched */
    rb_vae *vae = NULL;
    TU_OK(rb_vae_load(vdir, c->be, NULL, &vae, &err));
    uint8_t *rgb = malloc(64 * 64 * 3);
    assert_non_null(rgb);
    decode_direct(c->be, vae, before.latents, 8, 8, rgb);
    assert_memory_equal(after.images[0].data, rgb, 64 * 64 * 3);
    free(rgb);
    rb_vae_free(vae);
    rb_sd_output_free(&before);
    rb_sd_output_free(&after);
    rb_sd_model_free(m);
}

static void test_set_sched_config(void **state) {
    ctx *c = *state;
    rb_error err;
    rb_sd_model *m = load_model(c->be, c->dir, NULL);
    rb_sd_sched_config sc;
    TU_OK(rb_sd_sched_config_family(&sc, RB_SD_FAMILY_SDXL_TURBO, &err));
    TU_OK(rb_sd_model_set_sched_config(m, &sc, &err));
    rb_sd_model_info info;
    rb_sd_model_get_info(m, &info);
    assert_int_equal(info.default_sampler, RB_SD_SAMPLER_EULER_A);
    assert_int_equal(rb_sd_model_sched_config(m)->timestep_spacing, RB_SD_SPACING_TRAILING);
    rb_sd_sampler_opts so;
    rb_sd_sampler_opts_init(&so);
    so.kind = RB_SD_SAMPLER_EULER; /* draws no noise: no callback needed to read the schedule */
    so.steps = 4;
    so.n = 16;
    rb_sd_sampler *s = NULL;
    TU_OK(rb_sd_sampler_create(rb_sd_model_sched_config(m), &so, &s, &err));
    int n = 0;
    const float *ts = rb_sd_sampler_timesteps(s, &n);
    assert_int_equal(n, 4);
    assert_true(ts[0] == 999.0f);
    rb_sd_sampler_free(s);
    rb_sd_sched_config bad;
    rb_sd_sched_config_init(&bad);
    bad.num_train_timesteps = 0;
    assert_int_equal(rb_sd_model_set_sched_config(m, &bad, &err), RB_E_INVALID);
    rb_sd_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_params),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_set_vae),
        cmocka_unit_test(test_set_sched_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

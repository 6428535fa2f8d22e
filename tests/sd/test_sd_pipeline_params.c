/* rb_sd_generate's contract beyond the fixture runs (sd15 and sd15-inpaint
 * fixture models):
 *  - every parameter validated with a clear message (sizes, multiples of 8,
 *    limits, steps, guidance, strength, batch, eta, clip skip, sampler and
 *    schedule names listed, generator kind, image and mask sizes, modes a
 *    model cannot run);
 *  - callbacks: progress per evaluation, step information, a step callback
 *    error stopping the run, the cancel flag before the start and between
 *    evaluations;
 *  - batches: one noise draw for the batch (image i of a batch = the run
 *    given the i-th slice of that draw as its latents), identical latents
 *    giving identical images, each against the fixture;
 *  - the CUDA-style generator (= its draw passed as latents), skip_decode,
 *    the defaults (size, strength, sampler);
 *  - AUTOMATIC1111's infotext, exactly. */
#include "sd_pipeline_ref.h"

#include "rbee/sd_rng.h"

static const char *const k_prompt = "a photograph of an astronaut riding a horse, highly detailed";
static const char *const k_neg = "blurry, low quality";

typedef struct ctx {
    rb_backend *be;
    char dir[256], idir[256];
    rb_sd_model *m, *inpaint;
    rb_image init, mask;
} ctx;

static int setup(void **state) {
    ctx *c = calloc(1, sizeof *c);
    assert_non_null(c);
    TU_OK(rb_backend_create("cpu", NULL, &c->be, NULL));
    pipeline_dir(c->dir, sizeof c->dir, "sd15");
    pipeline_dir(c->idir, sizeof c->idir, "sd15-inpaint");
    c->m = load_model(c->be, c->dir, NULL);
    c->inpaint = load_model(c->be, c->idir, NULL);
    char p[1024];
    c->init = decode_file(refs_path(p, sizeof p, "sd15", "init_image.png"), 3);
    c->mask = decode_file(refs_path(p, sizeof p, "sd15", "mask.png"), 0);
    *state = c;
    return 0;
}

static int teardown(void **state) {
    ctx *c = *state;
    rb_image_free(&c->init);
    rb_image_free(&c->mask);
    rb_sd_model_free(c->m);
    rb_sd_model_free(c->inpaint);
    tu_tmpdir_remove(c->dir);
    tu_tmpdir_remove(c->idir);
    rb_backend_destroy(c->be);
    free(c);
    return 0;
}

static void params(rb_sd_params *p) {
    rb_sd_params_init(p);
    p->prompt = k_prompt;
    p->negative_prompt = k_neg;
    p->steps = 4;
    p->guidance_scale = 6.0f;
    p->sampler = "euler";
    p->seed = 1000;
}

/* Runs p expecting status want and a message holding needle. */
static void expect(rb_sd_model *m, const rb_sd_params *p, rb_status want, const char *needle) {
    rb_sd_output out;
    rb_error err;
    rb_error_clear(&err);
    memset(&out, 0x5a, sizeof out);
    rb_status s = rb_sd_generate(m, p, NULL, &out, &err);
    if (s != want) fail_msg("status %s, expected %s (%s)", rb_status_str(s), rb_status_str(want), err.msg);
    if (s == RB_OK) {
        rb_sd_output_free(&out);
        return;
    }
    assert_null(out.latents); /* zeroed on failure */
    assert_null(out.images);
    if (needle && !strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    printf("  %s\n", err.msg);
}

static void test_bad_parameters(void **state) {
    ctx *c = *state;
    rb_sd_params p;
    rb_sd_output out;
    rb_error err;
    params(&p);
    assert_int_equal(rb_sd_generate(NULL, &p, NULL, &out, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_generate(c->m, NULL, NULL, &out, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_generate(c->m, &p, NULL, NULL, &err), RB_E_INVALID);
    p.prompt = NULL;
    expect(c->m, &p, RB_E_INVALID, "prompt");
    params(&p);
    p.width = 60;
    expect(c->m, &p, RB_E_INVALID, "multiple of 8");
    p.width = RB_SD_MAX_SIDE + 8;
    expect(c->m, &p, RB_E_RANGE, "width");
    p.width = 64;
    p.height = -8;
    expect(c->m, &p, RB_E_RANGE, "height");
    params(&p);
    p.width = p.height = 4096;
    p.batch = 2;
    p.steps = 0;
    expect(c->m, &p, RB_E_RANGE, "steps");
    params(&p);
    p.steps = RB_SD_MAX_STEPS + 1;
    expect(c->m, &p, RB_E_RANGE, "steps");
    params(&p);
    p.guidance_scale = -1.0f;
    expect(c->m, &p, RB_E_RANGE, "guidance");
    p.guidance_scale = NAN;
    expect(c->m, &p, RB_E_RANGE, "guidance");
    p.guidance_scale = RB_SD_MAX_GUIDANCE + 1.0f;
    expect(c->m, &p, RB_E_RANGE, "guidance");
    params(&p);
    p.batch = 0;
    expect(c->m, &p, RB_E_RANGE, "batch");
    p.batch = RB_SD_MAX_BATCH + 1;
    expect(c->m, &p, RB_E_RANGE, "batch");
    params(&p);
    p.sampler = "plms";
    expect(c->m, &p, RB_E_INVALID, "euler_a"); /* the valid names are listed */
    params(&p);
    p.schedule = "cosine";
    expect(c->m, &p, RB_E_INVALID, "karras");
    params(&p);
    p.sampler = "ddim_karras";
    expect(c->m, &p, RB_E_UNSUPPORTED, "ddim");
    params(&p);
    p.eta = NAN;
    expect(c->m, &p, RB_E_INVALID, "eta");
    params(&p);
    p.clip_skip = -1;
    expect(c->m, &p, RB_E_INVALID, "clip skip");
    p.clip_skip = 3;
    expect(c->m, &p, RB_E_RANGE, "clip skip");
    params(&p);
    p.rng = RB_TORCH_RNG_KIND_COUNT_;
    expect(c->m, &p, RB_E_INVALID, "generator");
    params(&p);
    p.strength = 0.5;
    expect(c->m, &p, RB_E_INVALID, "init image");
    params(&p);
    p.init_image = &c->init;
    p.strength = 1.5;
    expect(c->m, &p, RB_E_RANGE, "strength");
    p.strength = 0.01; /* 4 steps x 0.01: no step left */
    expect(c->m, &p, RB_E_RANGE, "strength");
    p.strength = 0.6;
    p.width = 128;
    expect(c->m, &p, RB_E_INVALID, "resize");
    params(&p);
    p.mask = &c->mask;
    expect(c->m, &p, RB_E_INVALID, "init image");
    rb_image small;
    TU_OK(rb_image_alloc(&small, 32, 64, 1, NULL));
    p.init_image = &c->init;
    p.mask = &small;
    expect(c->m, &p, RB_E_INVALID, "mask");
    rb_image odd;
    TU_OK(rb_image_alloc(&odd, 60, 64, 3, NULL));
    params(&p);
    p.init_image = &odd;
    expect(c->m, &p, RB_E_INVALID, "multiple of 8");
    rb_image bad = odd;
    bad.channels = 2;
    p.init_image = &bad;
    expect(c->m, &p, RB_E_INVALID, "init image");
    rb_image_free(&small);
    rb_image_free(&odd);
    /* a 9-channel inpainting model needs an image and a mask */
    params(&p);
    expect(c->inpaint, &p, RB_E_INVALID, "inpainting model");
    p.init_image = &c->init;
    expect(c->inpaint, &p, RB_E_INVALID, "inpainting model");
    params(&p);
    p.vae_tile = 4;
    expect(c->m, &p, RB_E_RANGE, "tile");
    params(&p);
    p.vae_tiling = (rb_sd_tiling)7;
    expect(c->m, &p, RB_E_INVALID, "tiling");
    params(&p);
    p.prompt_mode = (rb_sd_prompt_mode)9;
    expect(c->m, &p, RB_E_INVALID, "prompt mode");
    /* invalid UTF-8 in the prompt is the tokenizer's error, reported */
    params(&p);
    p.prompt = "bad \xff byte";
    expect(c->m, &p, RB_E_INVALID, NULL);
}

typedef struct cb_state {
    int progress_calls, last_done, last_total, steps_seen, stop_at;
    volatile int cancel;
    int cancel_after;
} cb_state;

static void on_progress(void *user, int done, int total) {
    cb_state *s = user;
    s->progress_calls++;
    assert_int_equal(done, s->last_done + 1);
    s->last_done = done;
    s->last_total = total;
    if (s->cancel_after && done == s->cancel_after) s->cancel = 1;
}

static rb_status on_step(void *user, const rb_sd_step_info *info) {
    cb_state *s = user;
    s->steps_seen++;
    assert_int_equal(info->eval, s->steps_seen);
    assert_int_equal(info->batch, 1);
    assert_int_equal(info->channels, 4);
    assert_int_equal(info->latent_h, 8);
    assert_int_equal(info->model_rows, 2);
    assert_int_equal(info->model_channels, 4);
    assert_non_null(info->latents);
    assert_non_null(info->model_in);
    assert_true(info->step <= info->n_steps);
    return s->stop_at && info->eval == s->stop_at ? RB_E_IO : RB_OK;
}

static void test_callbacks_and_cancel(void **state) {
    ctx *c = *state;
    rb_sd_params p;
    params(&p);
    cb_state s = {0};
    rb_sd_callbacks cb = {.progress = on_progress, .on_step = on_step, .cancel = &s.cancel, .user = &s};
    rb_sd_output out;
    rb_error err;
    TU_OK(rb_sd_generate(c->m, &p, &cb, &out, &err));
    assert_int_equal(s.progress_calls, 4);
    assert_int_equal(s.last_total, 4);
    assert_int_equal(s.steps_seen, 4);
    rb_sd_output_free(&out);
    /* heun: two evaluations a step, one fewer at the end */
    memset(&s, 0, sizeof s);
    p.sampler = "heun";
    TU_OK(rb_sd_generate(c->m, &p, &cb, &out, &err));
    assert_int_equal(s.last_total, 7);
    assert_int_equal(out.n_evals, 7);
    rb_sd_output_free(&out);
    p.sampler = "euler";
    /* cancelled before the start, and after two evaluations */
    memset(&s, 0, sizeof s);
    s.cancel = 1;
    assert_int_equal(rb_sd_generate(c->m, &p, &cb, &out, &err), RB_E_CANCELLED);
    assert_int_equal(s.progress_calls, 0);
    memset(&s, 0, sizeof s);
    s.cancel_after = 2;
    assert_int_equal(rb_sd_generate(c->m, &p, &cb, &out, &err), RB_E_CANCELLED);
    printf("  %s\n", err.msg);
    assert_int_equal(s.progress_calls, 2);
    assert_null(out.latents);
    /* the step callback's status stops the run */
    memset(&s, 0, sizeof s);
    s.stop_at = 3;
    assert_int_equal(rb_sd_generate(c->m, &p, &cb, &out, &err), RB_E_IO);
    assert_int_equal(s.steps_seen, 3);
    printf("  %s\n", err.msg);
}

/* The fixture's txt2img_euler image and latents. */
static void fixture_result(rb_st_set **ref, const float **image, const float **latents) {
    *ref = open_refs("sd15", "txt2img_euler.safetensors");
    *image = st_f32(*ref, "image", NULL);
    *latents = st_f32(*ref, "final_latents", NULL);
}

static void test_batches(void **state) {
    ctx *c = *state;
    const size_t nl = 4 * 8 * 8, np = 64 * 64 * 3;
    rb_st_set *ref;
    const float *ref_img, *ref_lat;
    fixture_result(&ref, &ref_img, &ref_lat);
    /* two images from the same latents: both the fixture's */
    float lat[2 * 4 * 8 * 8];
    rb_torch_rng g;
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, 1000));
    TU_OK(rb_torch_randn(&g, lat, nl));
    memcpy(lat + nl, lat, nl * sizeof(float));
    rb_sd_params p;
    params(&p);
    p.seed = 2001;
    p.batch = 2;
    p.latents = lat;
    rb_sd_output out;
    rb_error err;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &out, &err));
    assert_int_equal(out.count, 2);
    for (int b = 0; b < 2; b++) {
        check_close("batch image", out.pixels + (size_t)b * np, ref_img, np, 1e-4, false);
        check_close("batch latents", out.latents + (size_t)b * nl, ref_lat, nl, 1e-4, true);
    }
    rb_sd_output_free(&out);
    /* no latents given: one draw of 2 x 4 x 8 x 8 from the generator; image i = a
     * batch-1 run given slice i of that draw */
    params(&p);
    p.seed = 77;
    p.batch = 2;
    rb_sd_output both;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &both, &err));
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, 77));
    TU_OK(rb_torch_randn(&g, lat, 2 * nl));
    for (int b = 0; b < 2; b++) {
        rb_sd_params q = p;
        q.batch = 1;
        q.latents = lat + (size_t)b * nl;
        TU_OK(rb_sd_generate(c->m, &q, NULL, &out, &err));
        const double e = check_close("batch slice", both.pixels + (size_t)b * np, out.pixels, np, 1e-5, false);
        printf("  batch image %d = batch-1 run on slice %d of the draw: max |diff| %.2e\n", b, b, e);
        rb_sd_output_free(&out);
    }
    assert_true(max_abs_d(both.pixels, both.pixels + np, np) > 1e-3); /* different noise, different images */
    rb_sd_output_free(&both);
    rb_st_close(ref);
}

static void test_generators_and_defaults(void **state) {
    ctx *c = *state;
    const size_t nl = 4 * 8 * 8;
    /* the CUDA-style generator: the same as its first draw passed as latents */
    rb_sd_params p;
    params(&p);
    p.rng = RB_TORCH_RNG_CUDA;
    p.seed = 123;
    rb_sd_output a, b;
    rb_error err;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &a, &err));
    float lat[4 * 8 * 8];
    rb_torch_rng g;
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CUDA, 123));
    TU_OK(rb_torch_randn(&g, lat, nl));
    p.latents = lat;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &b, &err));
    assert_memory_equal(a.latents, b.latents, nl * sizeof(float));
    assert_memory_equal(a.images[0].data, b.images[0].data, 64 * 64 * 3);
    assert_int_equal(a.rng, RB_TORCH_RNG_CUDA);
    rb_sd_output_free(&b);
    /* the CPU generator gives another picture */
    params(&p);
    p.seed = 123;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &b, &err));
    assert_true(max_abs_d(a.latents, b.latents, nl) > 1e-3);
    rb_sd_output_free(&a);
    rb_sd_output_free(&b);
    /* skip_decode: latents only, equal to a full run's */
    params(&p);
    p.skip_decode = true;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &a, &err));
    assert_null(a.pixels);
    assert_null(a.images);
    p.skip_decode = false;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &b, &err));
    assert_memory_equal(a.latents, b.latents, nl * sizeof(float));
    assert_true(b.decode_ms >= 0.0 && b.denoise_ms > 0.0);
    rb_sd_output_free(&a);
    rb_sd_output_free(&b);
    /* defaults: the model's size and sampler (PNDM config: euler), img2img strength 0.8, inpaint 1 */
    rb_sd_params_init(&p);
    p.prompt = k_prompt;
    p.steps = 5;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &a, &err));
    assert_int_equal(a.width, 64);
    assert_int_equal(a.height, 64);
    assert_int_equal(a.sampler, RB_SD_SAMPLER_EULER);
    assert_int_equal(a.schedule, RB_SD_SCHEDULE_DEFAULT);
    assert_true(a.strength == 0.0 && !a.img2img && !a.inpaint);
    assert_int_equal(a.n_evals, 5);
    rb_sd_output_free(&a);
    p.init_image = &c->init;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &a, &err));
    assert_true(a.img2img && a.strength == 0.8);
    assert_int_equal(a.n_evals, 4); /* floor(5 x 0.8) */
    rb_sd_output_free(&a);
    p.mask = &c->mask;
    TU_OK(rb_sd_generate(c->inpaint, &p, NULL, &a, &err));
    assert_true(a.inpaint && a.strength == 1.0);
    assert_int_equal(a.n_evals, 5);
    rb_sd_output_free(&a);
    /* inpainting below strength 1 with a 9-channel model (image latents noised), and an RGBA mask */
    p.strength = 0.6;
    rb_image rgba;
    TU_OK(rb_image_alloc(&rgba, 64, 64, 4, NULL));
    for (int i = 0; i < 64 * 64; i++)
        for (int k = 0; k < 4; k++) rgba.data[i * 4 + k] = k == 3 ? 255 : c->mask.data[i];
    p.mask = &rgba;
    TU_OK(rb_sd_generate(c->inpaint, &p, NULL, &a, &err));
    p.mask = &c->mask;
    TU_OK(rb_sd_generate(c->inpaint, &p, NULL, &b, &err));
    assert_memory_equal(a.latents, b.latents, nl * sizeof(float)); /* the gray of an RGB(A) mask is the mask */
    assert_int_equal(a.n_evals, 3);
    rb_sd_output_free(&a);
    rb_sd_output_free(&b);
    rb_image_free(&rgba);
}

static char *infotext(rb_sd_model *m, const rb_sd_params *p, const rb_sd_output *o, int i) {
    char *t = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_sd_infotext(m, p, o, i, &t, &err) != RB_OK) fail_msg("infotext: %s", err.msg);
    return t;
}

static void test_infotext(void **state) {
    ctx *c = *state;
    char parent[256], dir[512];
    pipeline_dir_named(parent, sizeof parent, dir, sizeof dir, "sd15", "sd15");
    rb_sd_model *m = load_model(c->be, dir, NULL);
    /* a real run: txt2img, euler, the fixture's parameters */
    rb_sd_params p;
    params(&p);
    rb_sd_output o;
    rb_error err;
    TU_OK(rb_sd_generate(m, &p, NULL, &o, &err));
    char *t = infotext(m, &p, &o, 0);
    assert_string_equal(t, "a photograph of an astronaut riding a horse, highly detailed\n"
                           "Negative prompt: blurry, low quality\n"
                           "Steps: 4, Sampler: Euler, Schedule type: Automatic, CFG scale: 6, Seed: 1000, Size: 64x64, "
                           "Model: sd15, RNG: CPU");
    free(t);
    rb_sd_output_free(&o);
    /* img2img, clip skip, the GPU generator, a batch, DPM++ 2M Karras, no negative prompt */
    params(&p);
    p.negative_prompt = NULL;
    p.init_image = &c->init;
    p.strength = 0.6;
    p.clip_skip = 1;
    p.rng = RB_TORCH_RNG_CUDA;
    p.batch = 2;
    p.sampler = "dpmpp_2m_karras";
    p.guidance_scale = 7.5f;
    p.steps = 5;
    p.seed = 4294967296ull;
    TU_OK(rb_sd_generate(m, &p, NULL, &o, &err));
    t = infotext(m, &p, &o, 1);
    assert_string_equal(t, "a photograph of an astronaut riding a horse, highly detailed\n"
                           "Steps: 5, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7.5, Seed: 4294967296, "
                           "Size: 64x64, Model: sd15, Denoising strength: 0.6, Clip skip: 2, Batch size: 2, Batch pos: 1");
    free(t);
    char *bad = NULL;
    assert_int_equal(rb_sd_infotext(m, &p, &o, 2, &bad, &err), RB_E_RANGE);
    assert_null(bad);
    rb_sd_output_free(&o);
    rb_sd_model_free(m);
    tu_tmpdir_remove(parent);
    /* values holding ',' ':' or a newline are JSON strings; surrounding space is stripped */
    pipeline_dir_named(parent, sizeof parent, dir, sizeof dir, "sd15", "my \"best\", model: v2");
    m = load_model(c->be, dir, NULL);
    params(&p);
    p.prompt = "  lighthouse\tat night";
    p.negative_prompt = "";
    p.sampler = "euler_a_sgm_uniform";
    p.steps = 2;
    TU_OK(rb_sd_generate(m, &p, NULL, &o, &err));
    t = infotext(m, &p, &o, 0);
    assert_string_equal(t, "lighthouse\tat night\n"
                           "Steps: 2, Sampler: Euler a, Schedule type: SGM Uniform, CFG scale: 6, Seed: 1000, "
                           "Size: 64x64, Model: \"my \\\"best\\\", model: v2\", RNG: CPU");
    free(t);
    rb_sd_output_free(&o);
    rb_sd_model_free(m);
    tu_tmpdir_remove(parent);
    assert_string_equal(rb_sd_sampler_a1111_name(RB_SD_SAMPLER_DPMPP_SDE), "DPM++ SDE");
    assert_string_equal(rb_sd_sampler_a1111_name(RB_SD_SAMPLER_HEUN), "Heun");
    assert_string_equal(rb_sd_sampler_a1111_name(RB_SD_SAMPLER_DDIM), "DDIM");
    assert_string_equal(rb_sd_sampler_a1111_name(RB_SD_SAMPLER_LCM), "LCM");
    assert_string_equal(rb_sd_schedule_a1111_name(RB_SD_SCHEDULE_EXPONENTIAL), "Exponential");
    assert_string_equal(rb_sd_schedule_a1111_name(RB_SD_SCHEDULE_SIMPLE), "Simple");
    assert_int_equal(rb_sd_infotext(m, NULL, &o, 0, &t, &err), RB_E_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_parameters), cmocka_unit_test(test_callbacks_and_cancel),
        cmocka_unit_test(test_batches),        cmocka_unit_test(test_generators_and_defaults),
        cmocka_unit_test(test_infotext),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

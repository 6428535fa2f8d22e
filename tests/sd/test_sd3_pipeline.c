/* The SD3 pipeline (rb_sd_generate on a StableDiffusion3Pipeline folder)
 * against diffusers' runs in tests/data/sd3/refs/{sd3,sd35}, every model
 * input, timestep and step's latents, the final latents and the image
 * compared (f32; 1e-4 x max(1, max|x|) for latents, 1e-4 for pixels in
 * [0, 1], 1e-5 for prompt embeddings, as test_sd_pipeline.c): the model
 * loaded without T5 runs txt2img_flow_euler_no_t5 from its prompts (and from
 * the generator's own draw); with T5, txt2img (square and 64x96), the
 * EulerDiscreteScheduler run (SD3 feeds the model unscaled latents) and
 * img2img (strength 0.6: posterior sample, then noise) run from their
 * prompts, and txt2img once more from the recorded conditioning
 * (rb_sd_params.cond, diffusers' prompt_embeds=); the whole conditioning of
 * every run (CLIP tokens, T5 tokens cut as T5's tokenizer cuts, pooled)
 * matches diffusers'; A1111 prompt mode gives the same conditioning; bad
 * uses fail cleanly. */
#include "sd_pipeline_ref.h"

#define TOL_LAT 1e-4
#define TOL_IMG 1e-4
#define TOL_TEXT 1e-5

static rb_backend *cpu_backend(void) {
    rb_backend *be = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_backend_create("cpu", NULL, &be, &err) != RB_OK) fail_msg("backend: %s", err.msg);
    return be;
}

static rb_st_set *open_run(const char *pipe, const char *run) {
    char rel[256], p[1024];
    snprintf(rel, sizeof rel, "sd3/refs/%s/%s.safetensors", pipe, run);
    rb_st_set *s = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_st_open(tu_data(p, sizeof p, rel), &s, &err) != RB_OK) fail_msg("%s", err.msg);
    return s;
}

static rb_sd_model *load(rb_backend *be, const char *pipe, bool no_t5, rb_status want) {
    char rel[256], p[1024];
    snprintf(rel, sizeof rel, "sd3/pipelines/%s", pipe);
    rb_sd_model_opts o;
    rb_sd_model_opts_init(&o);
    o.no_t5 = no_t5;
    rb_sd_model *m = NULL;
    rb_error err;
    rb_error_clear(&err);
    rb_status s = rb_sd_model_load(tu_data(p, sizeof p, rel), be, &o, &m, &err);
    if (s != want) fail_msg("load %s: status %d, wanted %d: %s", pipe, s, want, err.msg);
    if (s != RB_OK) printf("  load error: %s\n", err.msg);
    return m;
}

typedef struct step_check {
    const rb_st_set *ref;
    const char *label;
    int evals;
    double worst;
} step_check;

static rb_status on_step(void *user, const rb_sd_step_info *info) {
    step_check *c = user;
    char name[64], what[160];
    const int i = info->eval - 1;
    size_t n;
    snprintf(name, sizeof name, "step%d.model_in", i);
    const float *ref_in = st_f32(c->ref, name, &n);
    assert_int_equal(n, (size_t)info->model_rows * (size_t)info->model_channels * (size_t)info->latent_h *
                            (size_t)info->latent_w);
    snprintf(what, sizeof what, "%s %s", c->label, name);
    c->worst = fmax(c->worst, check_close(what, info->model_in, ref_in, n, TOL_LAT, true));
    snprintf(name, sizeof name, "step%d.timestep", i);
    if (st_f32(c->ref, name, NULL)[0] != info->timestep) fail_msg("%s: timestep %g", what, (double)info->timestep);
    snprintf(name, sizeof name, "step%d.latents", i);
    const float *ref_lat = st_f32(c->ref, name, &n);
    snprintf(what, sizeof what, "%s %s", c->label, name);
    c->worst = fmax(c->worst, check_close(what, info->latents, ref_lat, n, TOL_LAT, true));
    c->evals++;
    return RB_OK;
}

static void base_params(rb_sd_params *p) {
    rb_sd_params_init(p);
    p->prompt = "a red apple on a wooden table, studio light";
    p->negative_prompt = "blurry";
    p->steps = 4;
    p->guidance_scale = 6.0f;
    p->width = 64;
    p->height = 64;
    p->max_sequence_length = 24;
}

/* meta.json's record of a run (meta owned by the caller). */
static json_t *find_run(json_t *meta, const char *run) {
    json_t *rs = json_object_get(meta, "runs");
    for (size_t i = 0; i < json_array_size(rs); i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(rs, i), "run")), run) == 0) return json_array_get(rs, i);
    fail_msg("run %s not in meta.json", run);
    return NULL;
}

static json_t *load_meta_of(const char *pipe) {
    char rel[256], path[1024];
    rb_error err;
    snprintf(rel, sizeof rel, "sd3/refs/%s/meta.json", pipe);
    json_t *meta = rb_sched_json_load(tu_data(path, sizeof path, rel), &err);
    if (!meta) fail_msg("%s", err.msg);
    return meta;
}

/* The call of a run as parameters (strings point into meta). */
static void run_params(json_t *run, rb_sd_params *p) {
    json_t *call = json_object_get(run, "call");
    base_params(p);
    p->prompt = json_string_value(json_object_get(call, "prompt"));
    p->negative_prompt = json_string_value(json_object_get(call, "negative_prompt"));
    p->steps = (int)json_integer_value(json_object_get(call, "num_inference_steps"));
    p->guidance_scale = (float)json_number_value(json_object_get(call, "guidance_scale"));
    if (json_object_get(call, "width")) p->width = (int)json_integer_value(json_object_get(call, "width"));
    if (json_object_get(call, "height")) p->height = (int)json_integer_value(json_object_get(call, "height"));
    p->max_sequence_length = (int)json_integer_value(json_object_get(call, "max_sequence_length"));
}

/* One run of meta.json through rb_sd_generate, every step checked. ref_cond:
 * the run's recorded conditioning instead of the prompts. */
static void full_run(rb_sd_model *m, const char *pipe, const char *name, bool ref_cond) {
    rb_st_set *ref = open_run(pipe, name);
    json_t *meta = load_meta_of(pipe), *run = find_run(meta, name), *call = json_object_get(run, "call");
    rb_sd_params p;
    run_params(run, &p);
    p.sampler = json_string_value(json_object_get(run, "scheduler_key"));
    p.seed = (uint64_t)json_integer_value(json_object_get(json_object_get(run, "generator"), "seed"));
    size_t n;
    rb_image init;
    memset(&init, 0, sizeof init);
    json_t *js = json_object_get(call, "strength");
    if (js) { /* img2img: the generator draws the posterior sample, then the noise */
        char rel[256], path[1024];
        snprintf(rel, sizeof rel, "sd3/refs/%s/init_image.png", pipe);
        init = decode_file(tu_data(path, sizeof path, rel), 3);
        p.init_image = &init;
        p.strength = json_number_value(js);
    } else {
        p.latents = st_f32(ref, "init_latents", &n);
    }
    rb_sd_cond cond;
    memset(&cond, 0, sizeof cond);
    if (ref_cond) {
        cond.context = (float *)st_f32(ref, "cond.encoder_hidden_states", &n);
        cond.rows = 2;
        cond.dim = 32;
        cond.tokens = (int64_t)n / (2 * 32);
        cond.pooled = (float *)st_f32(ref, "cond.pooled_projections", NULL);
        cond.pooled_dim = 20;
        p.cond = &cond;
    }
    char label[128];
    snprintf(label, sizeof label, "%s %s", pipe, name);
    step_check sc = {.ref = ref, .label = label};
    rb_sd_callbacks cb = {.on_step = on_step, .user = &sc};
    rb_sd_output out;
    rb_error err;
    rb_error_clear(&err);
    if (rb_sd_generate(m, &p, &cb, &out, &err) != RB_OK) fail_msg("%s: %s", label, err.msg);
    assert_int_equal(sc.evals, (int)json_integer_value(json_object_get(run, "n_model_calls")));
    const float *fl = st_f32(ref, "final_latents", &n);
    const double ef = check_close("final latents", out.latents, fl, n, TOL_LAT, true);
    const float *img = st_f32(ref, "image", &n);
    assert_int_equal(n, (size_t)out.width * (size_t)out.height * 3);
    const double ei = check_close("image", out.pixels, img, n, TOL_IMG, false);
    printf("  %-5s %-26s steps %.2e, final latents %.2e, image %.2e\n", pipe, name, sc.worst, ef, ei);
    rb_sd_output_free(&out);
    if (!js && strstr(name, "no_t5")) {
        /* the generator's own draw gives the same start (the recorded init_latents' seed) */
        p.latents = NULL;
        p.seed = (uint64_t)json_integer_value(json_object_get(json_object_get(run, "init_latents"), "seed"));
        p.skip_decode = true;
        sc.evals = 0;
        if (rb_sd_generate(m, &p, &cb, &out, &err) != RB_OK) fail_msg("%s: %s", label, err.msg);
        check_close("final latents (generator)", out.latents, fl, 16 * 8 * 8, TOL_LAT, true);
        rb_sd_output_free(&out);
    }
    if (init.data) rb_image_free(&init);
    json_decref(meta);
    rb_st_close(ref);
}

static void pipe_runs(const char *pipe) {
    rb_backend *be = cpu_backend();
    rb_sd_model *m = load(be, pipe, true, RB_OK);
    rb_sd_model_info info;
    rb_sd_model_get_info(m, &info);
    assert_int_equal(info.arch, RB_SD_ARCH_SD3);
    assert_int_equal(info.latent_channels, 16);
    assert_int_equal(info.default_sampler, RB_SD_SAMPLER_FLOW_EULER);
    assert_int_equal(info.default_width, 64);
    full_run(m, pipe, "txt2img_flow_euler_no_t5", false);
    rb_sd_model_free(m);
    m = load(be, pipe, false, RB_OK); /* with T5 */
    full_run(m, pipe, "txt2img_flow_euler", false);
    full_run(m, pipe, "txt2img_flow_euler_64x96", false);
    full_run(m, pipe, "txt2img_euler_long_prompt", false);
    full_run(m, pipe, "img2img_flow_euler", false);
    full_run(m, pipe, "txt2img_flow_euler", true);
    rb_sd_model_free(m);
    rb_backend_destroy(be);
}

static void test_sd3_runs(void **state) {
    (void)state;
    pipe_runs("sd3");
}

static void test_sd35_runs(void **state) {
    (void)state;
    pipe_runs("sd35");
}

/* The CLIP tokens and the pooled conditioning of every run, T5 or not. */
static void clip_conditioning(const char *pipe) {
    rb_backend *be = cpu_backend();
    rb_sd_model *m = load(be, pipe, false, RB_OK);
    static const char *const runs[] = {"txt2img_flow_euler", "txt2img_euler_long_prompt", "txt2img_flow_euler_no_t5",
                                       "img2img_flow_euler"};
    json_t *meta = load_meta_of(pipe);
    rb_error err;
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        rb_st_set *ref = open_run(pipe, runs[k]);
        rb_sd_params p;
        run_params(find_run(meta, runs[k]), &p);
        rb_sd_cond c;
        if (rb_sd_encode_prompt(m, &p, &c, &err) != RB_OK) fail_msg("%s", err.msg);
        assert_int_equal(c.rows, 2);
        assert_int_equal(c.tokens, 77 + 24);
        assert_int_equal(c.dim, 32);
        size_t n;
        const float *eh = st_f32(ref, "cond.encoder_hidden_states", &n), *pe = st_f32(ref, "cond.pooled_projections", NULL);
        assert_int_equal(n, 2 * 101 * 32);
        for (int r = 0; r < 2; r++) {
            char what[128];
            snprintf(what, sizeof what, "%s %s row %d CLIP tokens", pipe, runs[k], r);
            check_close(what, c.context + (size_t)r * 101 * 32, eh + (size_t)r * 101 * 32, 77 * 32, TOL_TEXT, false);
        }
        check_close("pooled", c.pooled, pe, 2 * 20, TOL_TEXT, false);
        /* the T5 tokens of both rows (zeros in the no-T5 run: this model has T5, the run's did not) */
        if (!strstr(runs[k], "no_t5"))
            for (int r = 0; r < 2; r++) {
                char what[128];
                snprintf(what, sizeof what, "%s %s row %d T5 tokens", pipe, runs[k], r);
                check_close(what, c.context + ((size_t)r * 101 + 77) * 32, eh + ((size_t)r * 101 + 77) * 32, 24 * 32,
                            TOL_TEXT, false);
            }
        rb_sd_cond_free(&c);
        rb_st_close(ref);
    }
    json_decref(meta);
    rb_sd_model_free(m);
    rb_backend_destroy(be);
}

static void test_conditioning(void **state) {
    (void)state;
    clip_conditioning("sd3");
    clip_conditioning("sd35");
}

static void test_errors(void **state) {
    (void)state;
    rb_backend *be = cpu_backend();
    rb_sd_model *m = load(be, "sd3", true, RB_OK);
    rb_sd_params p;
    base_params(&p);
    rb_error err;
    rb_sd_output out;
    /* A1111 prompt mode truncates as diffusers does (the same conditioning) */
    rb_sd_cond c1, c2;
    TU_OK(rb_sd_encode_prompt(m, &p, &c1, &err));
    p.prompt_mode = RB_SD_PROMPT_A1111;
    p.emphasis = true;
    TU_OK(rb_sd_encode_prompt(m, &p, &c2, &err));
    assert_int_equal(c1.tokens, c2.tokens);
    assert_memory_equal(c1.context, c2.context, sizeof(float) * (size_t)(c1.rows * c1.tokens * c1.dim));
    rb_sd_cond_free(&c1);
    rb_sd_cond_free(&c2);
    base_params(&p);
    p.max_sequence_length = 100000;
    assert_int_equal(rb_sd_check_params(m, &p, &err), RB_E_RANGE);
    base_params(&p);
    rb_sd_cond bad = {.rows = 2, .tokens = 10, .dim = 31, .pooled_dim = 20};
    float ctx[2 * 10 * 32] = {0}, pooled[40] = {0};
    bad.context = ctx;
    bad.pooled = pooled;
    p.cond = &bad;
    assert_int_equal(rb_sd_generate(m, &p, NULL, &out, &err), RB_E_INVALID); /* 31 wide, the model takes 32 */
    assert_non_null(strstr(err.msg, "conditioning"));
    bad.dim = 32;
    bad.rows = 1; /* guidance needs [uncond, cond] */
    assert_int_equal(rb_sd_generate(m, &p, NULL, &out, &err), RB_E_INVALID);
    base_params(&p);
    p.width = 208; /* 26 latent pixels: 13 patches, more than the 12 of the position table */
    assert_int_equal(rb_sd_generate(m, &p, NULL, &out, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "position table"));
    rb_sd_model_free(m);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sd3_runs),
        cmocka_unit_test(test_sd35_runs),
        cmocka_unit_test(test_conditioning),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

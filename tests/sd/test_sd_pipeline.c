/* The whole pipeline against diffusers: every run of
 * refs/<pipe>/meta.json (sd15, sd21v, sdxl, sd15-inpaint: txt2img with
 * ddim / euler / euler_a / dpmpp_2m_karras / lcm, non-square, SDXL without
 * a negative prompt, img2img, 4- and 9-channel inpainting) generated end to
 * end through rb_sd_generate from the prompts, sizes, steps, guidance,
 * strength and seeds of meta.json alone (the initial latents drawn with the
 * torch-compatible generator from init_latents.seed, as the fixture
 * generator did; everything else from generator.seed). Checked per run:
 * the conditioning (cond.encoder_hidden_states, SDXL's pooled text embeds
 * and time ids; 1e-5 as the README suggests for text embeddings), the
 * preprocessed init image and mask (exact), every model input and the
 * latents after every step (1e-4 x max(1, max|x|)), the final latents
 * (same), the image in [0, 1] (1e-4) and the 8-bit image against the
 * fixture PNG (equal, or off by one only where diffusers' image x 255
 * lies within 255 x 1e-4 of a .5 boundary, i.e. where the image tolerance
 * can flip the rounding). Then the single-file checkpoint with the sd15
 * folder's configs must give the folder's results bit for bit. */
#include "sd_pipeline_ref.h"

#include "rbee/sd_rng.h"
#include "sd/sd_pipeline_internal.h"

#define TOL_LAT 1e-4
#define TOL_IMG 1e-4
#define TOL_TEXT 1e-5

typedef struct step_check {
    const rb_st_set *ref;
    const char *label;
    int evals;
    double worst_in, worst_lat;
    float *last_x0; /* the last evaluation's denoised estimate */
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
    double e = check_close(what, info->model_in, ref_in, n, TOL_LAT, true);
    if (e > c->worst_in) c->worst_in = e;
    snprintf(name, sizeof name, "step%d.timestep", i);
    const float *ts = st_f32(c->ref, name, NULL);
    if (ts[0] != info->timestep) fail_msg("%s: timestep %g, diffusers %g", what, (double)info->timestep, (double)ts[0]);
    snprintf(name, sizeof name, "step%d.latents", i);
    const float *ref_lat = st_f32(c->ref, name, &n);
    assert_int_equal(n, (size_t)info->batch * (size_t)info->channels * (size_t)info->latent_h * (size_t)info->latent_w);
    snprintf(what, sizeof what, "%s %s", c->label, name);
    e = check_close(what, info->latents, ref_lat, n, TOL_LAT, true);
    if (e > c->worst_lat) c->worst_lat = e;
    assert_non_null(info->denoised);
    free(c->last_x0);
    c->last_x0 = malloc(sizeof(float) * n);
    assert_non_null(c->last_x0);
    memcpy(c->last_x0, info->denoised, sizeof(float) * n);
    c->evals++;
    return RB_OK;
}

/* The parameters of a run, from meta.json alone. latents / images are owned by the caller. */
typedef struct run_inputs {
    rb_sd_params p;
    float *latents;
    rb_image init, mask;
    char sampler[64];
} run_inputs;

static void inputs_of(const char *pipe, json_t *run, run_inputs *in) {
    memset(in, 0, sizeof *in);
    rb_sd_params *p = &in->p;
    rb_sd_params_init(p);
    json_t *call = json_object_get(run, "call");
    p->prompt = json_string_value(json_object_get(call, "prompt"));
    json_t *neg = json_object_get(call, "negative_prompt");
    p->negative_prompt = json_is_string(neg) ? json_string_value(neg) : NULL;
    json_t *p2 = json_object_get(call, "prompt_2");
    if (json_is_string(p2)) p->prompt_2 = json_string_value(p2);
    p->steps = (int)json_integer_value(json_object_get(call, "num_inference_steps"));
    p->guidance_scale = (float)json_number_value(json_object_get(call, "guidance_scale"));
    json_t *v;
    if ((v = json_object_get(call, "height"))) p->height = (int)json_integer_value(v);
    if ((v = json_object_get(call, "width"))) p->width = (int)json_integer_value(v);
    if ((v = json_object_get(call, "strength"))) p->strength = json_number_value(v);
    if ((v = json_object_get(call, "clip_skip")) && json_is_integer(v)) p->clip_skip = (int)json_integer_value(v);
    snprintf(in->sampler, sizeof in->sampler, "%s", json_string_value(json_object_get(run, "scheduler_key")));
    p->sampler = in->sampler;
    p->seed = (uint64_t)json_integer_value(json_object_get(json_object_get(run, "generator"), "seed"));
    json_t *il = json_object_get(run, "init_latents");
    if (il) {
        json_t *shape = json_object_get(il, "shape");
        size_t n = 1;
        for (size_t k = 0; k < json_array_size(shape); k++) n *= (size_t)json_integer_value(json_array_get(shape, k));
        in->latents = malloc(n * sizeof(float));
        assert_non_null(in->latents);
        rb_torch_rng g;
        TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, (uint64_t)json_integer_value(json_object_get(il, "seed"))));
        TU_OK(rb_torch_randn(&g, in->latents, n));
        p->latents = in->latents;
    }
    const char *pipeline = json_string_value(json_object_get(run, "pipeline"));
    char path[1024];
    if (strstr(pipeline, "Img2Img") || strstr(pipeline, "Inpaint")) {
        in->init = decode_file(refs_path(path, sizeof path, pipe, "init_image.png"), 0);
        p->init_image = &in->init;
    }
    if (strstr(pipeline, "Inpaint")) {
        in->mask = decode_file(refs_path(path, sizeof path, pipe, "mask.png"), 0);
        p->mask = &in->mask;
    }
}

static void inputs_free(run_inputs *in) {
    free(in->latents);
    rb_image_free(&in->init);
    rb_image_free(&in->mask);
}

/* The preprocessed init image and mask equal the pipeline's tensors. */
static void check_preprocess(const rb_st_set *ref, const run_inputs *in, const char *label) {
    if (!in->p.init_image) return;
    size_t n;
    const float *ri = st_f32(ref, "init_image", &n);
    float *mine = malloc(n * sizeof(float));
    assert_non_null(mine);
    TU_OK(sd_image_to_tensor(in->p.init_image, mine, NULL));
    if (memcmp(mine, ri, n * sizeof(float)) != 0) fail_msg("%s: init image preprocessing differs", label);
    free(mine);
    if (!in->p.mask) return;
    const float *rm = st_f32(ref, "mask", &n);
    mine = malloc(n * sizeof(float));
    assert_non_null(mine);
    TU_OK(sd_mask_to_tensor(in->p.mask, mine, NULL));
    if (memcmp(mine, rm, n * sizeof(float)) != 0) fail_msg("%s: mask preprocessing differs", label);
    free(mine);
}

static void check_cond(rb_sd_model *m, const rb_st_set *ref, const run_inputs *in, const char *label) {
    rb_sd_cond c;
    rb_error err;
    rb_error_clear(&err);
    if (rb_sd_encode_prompt(m, &in->p, &c, &err) != RB_OK) fail_msg("%s: encode: %s", label, err.msg);
    size_t n;
    const float *eh = st_f32(ref, "cond.encoder_hidden_states", &n);
    assert_int_equal(n, (size_t)(c.rows * c.tokens * c.dim));
    char what[160];
    snprintf(what, sizeof what, "%s cond.encoder_hidden_states", label);
    check_close(what, c.context, eh, n, TOL_TEXT, false);
    if (rb_st_find(ref, "cond.added_cond_kwargs.text_embeds")) {
        const float *te = st_f32(ref, "cond.added_cond_kwargs.text_embeds", &n);
        assert_int_equal(n, (size_t)(c.rows * c.pooled_dim));
        snprintf(what, sizeof what, "%s text_embeds", label);
        check_close(what, c.pooled, te, n, TOL_TEXT, false);
        const float *ti = st_f32(ref, "cond.added_cond_kwargs.time_ids", &n);
        assert_int_equal(n, (size_t)(c.rows * c.n_time_ids));
        for (int r = 0; r < c.rows; r++)
            for (int k = 0; k < c.n_time_ids; k++) assert_true(c.time_ids[r][k] == ti[r * c.n_time_ids + k]);
    } else {
        assert_int_equal(c.pooled_dim, 0);
        assert_int_equal(c.n_time_ids, 0);
    }
    rb_sd_cond_free(&c);
}

/* 8-bit output vs the fixture PNG: equal, or one off where image x 255 is at a rounding boundary. */
static int check_png(const rb_image *got, const float *image, const char *pipe, const char *run, const char *label) {
    char file[128], path[1024];
    snprintf(file, sizeof file, "%s.png", run);
    rb_image ref = decode_file(refs_path(path, sizeof path, pipe, file), 3);
    assert_int_equal(ref.width, got->width);
    assert_int_equal(ref.height, got->height);
    const size_t n = (size_t)ref.width * (size_t)ref.height * 3;
    int off = 0;
    for (size_t i = 0; i < n; i++) {
        const int d = abs((int)ref.data[i] - (int)got->data[i]);
        if (d == 0) continue;
        const double v = (double)image[i] * 255.0, frac = v - floor(v);
        if (d > 1 || fabs(frac - 0.5) > 255.0 * TOL_IMG) fail_msg("%s: PNG byte %zu is %d, fixture %d", label, i, got->data[i], ref.data[i]);
        off++;
    }
    rb_image_free(&ref);
    return off;
}

static void run_pipeline(rb_sd_model *m, const char *pipe, json_t *run, bool png) {
    const char *name = json_string_value(json_object_get(run, "run"));
    char label[128], file[128];
    snprintf(label, sizeof label, "%s/%s", pipe, name);
    snprintf(file, sizeof file, "%s.safetensors", name);
    rb_st_set *ref = open_refs(pipe, file);
    run_inputs in;
    inputs_of(pipe, run, &in);
    check_preprocess(ref, &in, label);
    check_cond(m, ref, &in, label);
    step_check sc = {.ref = ref, .label = label};
    rb_sd_callbacks cb = {.on_step = on_step, .user = &sc};
    rb_sd_output out;
    rb_error err;
    rb_error_clear(&err);
    if (rb_sd_generate(m, &in.p, &cb, &out, &err) != RB_OK) fail_msg("%s: %s", label, err.msg);
    assert_int_equal(sc.evals, (int)json_integer_value(json_object_get(run, "n_model_calls")));
    assert_int_equal(out.n_evals, sc.evals);
    size_t n;
    const float *fl = st_f32(ref, "final_latents", &n);
    assert_int_equal(n, (size_t)(out.count * out.latent_channels * out.latent_h * out.latent_w));
    char what[160];
    snprintf(what, sizeof what, "%s final_latents", label);
    const double ef = check_close(what, out.latents, fl, n, TOL_LAT, true);
    if (out.sampler == RB_SD_SAMPLER_EULER && !out.inpaint) {
        /* Euler's last step goes to sigma 0: the result is that evaluation's denoised estimate */
        snprintf(what, sizeof what, "%s final = last x0", label);
        check_close(what, sc.last_x0, out.latents, n, 1e-5, true);
    }
    free(sc.last_x0);
    const float *img = st_f32(ref, "image", &n);
    assert_int_equal(n, (size_t)out.width * (size_t)out.height * 3);
    snprintf(what, sizeof what, "%s image", label);
    const double ei = check_close(what, out.pixels, img, n, TOL_IMG, false);
    int off = png ? check_png(&out.images[0], img, pipe, name, label) : 0;
    printf("  %-36s %d evals: model_in %.2e, latents %.2e, final %.2e (scaled), image %.2e, PNG bytes off by 1: %d\n",
           label, sc.evals, sc.worst_in, sc.worst_lat, ef, ei, off);
    rb_sd_output_free(&out);
    inputs_free(&in);
    rb_st_close(ref);
}

static void run_all(const char *pipe) {
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    char dir[256];
    pipeline_dir(dir, sizeof dir, pipe);
    rb_sd_model *m = load_model(be, dir, NULL);
    json_t *meta = load_meta(pipe);
    json_t *runs = json_object_get(meta, "runs");
    assert_true(json_array_size(runs) > 0);
    for (size_t i = 0; i < json_array_size(runs); i++) run_pipeline(m, pipe, json_array_get(runs, i), true);
    json_decref(meta);
    rb_sd_model_free(m);
    tu_tmpdir_remove(dir);
    rb_backend_destroy(be);
}

static void test_sd15(void **state) {
    (void)state;
    run_all("sd15");
}
static void test_sd21v(void **state) {
    (void)state;
    run_all("sd21v");
}
static void test_sdxl(void **state) {
    (void)state;
    run_all("sdxl");
}
static void test_sd15_inpaint(void **state) {
    (void)state;
    run_all("sd15-inpaint");
}

/* The single file with the folder's configs gives the folder's results bit for bit. */
static void test_single_file_equals_folder(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    char dir[256], path[1024];
    pipeline_dir(dir, sizeof dir, "sd15");
    rb_sd_model *folder = load_model(be, dir, NULL);
    rb_sd_model_opts o;
    rb_sd_model_opts_init(&o);
    o.config_dir = dir;
    rb_sd_model *single = load_model(be, tu_fixture(path, sizeof path, "diffusers/single_file/sd15.safetensors"), &o);
    rb_sd_model_info fi, si;
    rb_sd_model_get_info(folder, &fi);
    rb_sd_model_get_info(single, &si);
    assert_string_equal(si.source, "single-file");
    assert_string_equal(si.name, "sd15");
    assert_int_equal(si.arch, RB_SD_ARCH_SD1);
    assert_int_equal(si.default_width, fi.default_width);
    assert_int_equal(si.weight_bytes, fi.weight_bytes);
    json_t *meta = load_meta("sd15");
    json_t *runs = json_object_get(meta, "runs");
    for (size_t i = 0; i < json_array_size(runs); i++) {
        json_t *run = json_array_get(runs, i);
        run_inputs in;
        inputs_of("sd15", run, &in);
        rb_sd_output a, b;
        rb_error err;
        rb_error_clear(&err);
        if (rb_sd_generate(folder, &in.p, NULL, &a, &err) != RB_OK) fail_msg("folder: %s", err.msg);
        if (rb_sd_generate(single, &in.p, NULL, &b, &err) != RB_OK) fail_msg("single file: %s", err.msg);
        const size_t nl = (size_t)(a.count * a.latent_channels * a.latent_h * a.latent_w);
        const size_t np = (size_t)a.width * (size_t)a.height * 3;
        assert_memory_equal(a.latents, b.latents, nl * sizeof(float));
        assert_memory_equal(a.pixels, b.pixels, np * sizeof(float));
        assert_memory_equal(a.images[0].data, b.images[0].data, np);
        printf("  single file = folder, bit for bit: %s\n", json_string_value(json_object_get(run, "run")));
        rb_sd_output_free(&a);
        rb_sd_output_free(&b);
        inputs_free(&in);
    }
    /* and the fixture's own numbers through the single file */
    run_pipeline(single, "sd15", json_array_get(runs, 1), true);
    json_decref(meta);
    rb_sd_model_free(single);
    rb_sd_model_free(folder);
    tu_tmpdir_remove(dir);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sd15),         cmocka_unit_test(test_sd21v), cmocka_unit_test(test_sdxl),
        cmocka_unit_test(test_sd15_inpaint), cmocka_unit_test(test_single_file_equals_folder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The flow-matching Euler sampler (flow_euler = FlowMatchEulerDiscreteScheduler)
 * against the SD3 references (tests/data/sd3/refs/{sd3,sd35}/meta.json):
 * for every flow_euler run, the sampler built from the pipeline's
 * scheduler_config.json gives diffusers' timesteps and sigmas exactly (f32),
 * and replaying the recorded model outputs with the run's guidance gives
 * every model input and every step's latents; img2img starts at the SD3
 * img2img pipeline's step (strength 0.6 of 5 steps: step 2). Also: the
 * starting noise from the torch-compatible generator, x0 = x - sigma v, the
 * SD3 strength rule where it differs from SD 1.x's, and config errors. */
#include "testutil.h"

#include "rbee/safetensors.h"
#include "rbee/sd_rng.h"
#include "rbee/sd_sampler.h"
#include "sd/sched_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double num(json_t *v) {
    double d = NAN;
    if (!rb_sched_json_number(v, &d)) fail_msg("not a number");
    return d;
}

static const float *tensor(rb_st_set *st, const char *name, size_t *numel) {
    const rb_st_tensor *t = rb_st_find(st, name);
    if (!t) fail_msg("tensor %s missing", name);
    assert_int_equal(t->dtype, RB_F32);
    if (numel) *numel = t->nbytes / 4;
    return t->data;
}

static double scaled_err(const float *a, const float *ref, size_t n) {
    double mx = 1.0, d = 0.0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - ref[i]));
    return d / mx;
}

static void load_cfg(const char *pipe, rb_sd_sched_config *cfg) {
    char rel[256], p[1024];
    snprintf(rel, sizeof rel, "sd3/pipelines/%s/scheduler/scheduler_config.json", pipe);
    rb_error err;
    rb_error_clear(&err);
    if (rb_sd_sched_config_load(cfg, tu_data(p, sizeof p, rel), &err) != RB_OK) fail_msg("%s", err.msg);
}

static void replay(const char *pipe, json_t *run, double *worst) {
    const char *name = json_string_value(json_object_get(run, "run"));
    json_t *call = json_object_get(run, "call"), *sch = json_object_get(run, "scheduler");
    char rel[256], p[1024];
    snprintf(rel, sizeof rel, "sd3/refs/%s/%s.safetensors", pipe, name);
    rb_st_set *st = NULL;
    rb_error err;
    rb_error_clear(&err);
    TU_OK(rb_st_open(tu_data(p, sizeof p, rel), &st, &err));

    rb_sd_sched_config cfg;
    load_cfg(pipe, &cfg);
    rb_sd_sampler_opts o;
    rb_sd_sampler_opts_init(&o);
    TU_OK(rb_sd_sampler_for_config(&cfg, &o.kind, &o.schedule, &err));
    assert_int_equal(o.kind, RB_SD_SAMPLER_FLOW_EULER);
    o.steps = (int)json_integer_value(json_object_get(call, "num_inference_steps"));
    json_t *js = json_object_get(call, "strength");
    o.strength = js ? num(js) : 1.0;
    const float guidance = (float)num(json_object_get(call, "guidance_scale"));
    size_t n = 0;
    tensor(st, "step0.latents", &n);
    o.n = n;
    rb_sd_sampler *s = NULL;
    if (rb_sd_sampler_create(&cfg, &o, &s, &err) != RB_OK) fail_msg("%s: %s", name, err.msg);

    /* the schedule, exactly */
    json_t *jts = json_object_get(sch, "timesteps"), *jsig = json_object_get(sch, "sigmas");
    int nt, ns;
    const float *ts = rb_sd_sampler_timesteps(s, &nt), *sig = rb_sd_sampler_sigmas(s, &ns);
    assert_int_equal(nt, (int)json_array_size(jts));
    assert_int_equal(ns, (int)json_array_size(jsig));
    for (int i = 0; i < nt; i++)
        if ((double)ts[i] != num(json_array_get(jts, (size_t)i)))
            fail_msg("%s: timestep %d: %.9g vs %.9g", name, i, ts[i], num(json_array_get(jts, (size_t)i)));
    for (int i = 0; i < ns; i++)
        if ((double)sig[i] != num(json_array_get(jsig, (size_t)i)))
            fail_msg("%s: sigma %d: %.9g vs %.9g", name, i, sig[i], num(json_array_get(jsig, (size_t)i)));
    assert_true(rb_sd_sampler_init_noise_sigma(s) == 1.0f);
    json_t *steps = json_object_get(run, "step_timesteps");
    assert_int_equal(rb_sd_sampler_n_evals(s), (int)json_array_size(steps));
    for (size_t i = 0; i < json_array_size(steps); i++)
        assert_true((double)ts[rb_sd_sampler_first_eval(s) + (int)i] == num(json_array_get(steps, i)));

    if (js) {
        /* img2img: the encoded image is not stored; derive it from the first
         * model input and the recorded noise (x = sigma noise + (1 - sigma) image) */
        const float *noise = tensor(st, "rng1", NULL), *mi = tensor(st, "step0.model_in", NULL);
        const double sg = sig[rb_sd_sampler_first_eval(s)];
        float *image = malloc(n * sizeof(float));
        assert_non_null(image);
        for (size_t i = 0; i < n; i++) image[i] = (float)(((double)mi[i] - sg * noise[i]) / (1.0 - sg));
        TU_OK(rb_sd_sampler_begin(s, image, noise, &err));
        free(image);
    } else {
        const float *init = tensor(st, "init_latents", NULL);
        /* the starting noise is torch's CPU generator's */
        json_t *il = json_object_get(run, "init_latents");
        rb_torch_rng gen;
        TU_OK(rb_torch_rng_init(&gen, RB_TORCH_RNG_CPU, (uint64_t)json_integer_value(json_object_get(il, "seed"))));
        float *z = malloc(n * sizeof(float));
        assert_non_null(z);
        TU_OK(rb_torch_randn(&gen, z, n));
        assert_memory_equal(z, init, n * sizeof(float));
        free(z);
        TU_OK(rb_sd_sampler_begin(s, NULL, init, &err));
        assert_memory_equal(rb_sd_sampler_latents(s), init, n * sizeof(float));
    }

    float *model_in = malloc(n * sizeof(float)), *guided = malloc(n * sizeof(float)), *x0 = malloc(n * sizeof(float));
    assert_non_null(model_in);
    assert_non_null(guided);
    assert_non_null(x0);
    float t;
    int i = 0;
    while (rb_sd_sampler_next(s, model_in, &t)) {
        char nm[48];
        snprintf(nm, sizeof nm, "step%d.model_in", i);
        const float *ref_in = tensor(st, nm, NULL);
        double e = scaled_err(model_in, ref_in, n);
        if (e > 1e-6) fail_msg("%s: step %d model input off by %.3g", name, i, e);
        *worst = fmax(*worst, e);
        snprintf(nm, sizeof nm, "step%d.timestep", i);
        if (t != tensor(st, nm, NULL)[0]) fail_msg("%s: step %d timestep %.9g", name, i, t);
        snprintf(nm, sizeof nm, "step%d.model_out", i);
        const float *out = tensor(st, nm, NULL);
        rb_sd_cfg_guidance(guided, out, out + n, n, guidance);
        TU_OK(rb_sd_sampler_x0(s, guided, x0, &err));
        const float sgk = sig[rb_sd_sampler_first_eval(s) + i];
        for (size_t k = 0; k < n; k += 37) assert_true(x0[k] == model_in[k] - sgk * guided[k]);
        TU_OK(rb_sd_sampler_feed(s, guided, &err));
        snprintf(nm, sizeof nm, "step%d.latents", i);
        e = scaled_err(rb_sd_sampler_latents(s), tensor(st, nm, NULL), n);
        if (e > 1e-6) fail_msg("%s: step %d latents off by %.3g", name, i, e);
        *worst = fmax(*worst, e);
        i++;
    }
    assert_true(rb_sd_sampler_finished(s));
    assert_int_equal(i, rb_sd_sampler_n_evals(s));
    free(model_in);
    free(guided);
    free(x0);
    rb_sd_sampler_free(s);
    rb_st_close(st);
}

static void runs_of(const char *pipe, int want) {
    char rel[256], p[1024];
    snprintf(rel, sizeof rel, "sd3/refs/%s/meta.json", pipe);
    rb_error err;
    json_t *meta = rb_sched_json_load(tu_data(p, sizeof p, rel), &err);
    if (!meta) fail_msg("%s", err.msg);
    json_t *runs = json_object_get(meta, "runs");
    int done = 0;
    for (size_t r = 0; r < json_array_size(runs); r++) {
        json_t *run = json_array_get(runs, r);
        if (strcmp(json_string_value(json_object_get(run, "scheduler_key")), "flow_euler") != 0) continue;
        double worst = 0.0;
        replay(pipe, run, &worst);
        printf("  %-5s %-26s max scaled error %.2e\n", pipe, json_string_value(json_object_get(run, "run")), worst);
        done++;
    }
    assert_int_equal(done, want);
    json_decref(meta);
}

static void test_sd3_runs(void **state) {
    (void)state;
    runs_of("sd3", 4);
}

static void test_sd35_runs(void **state) {
    (void)state;
    runs_of("sd35", 4);
}

/* SD3's img2img rule int(n - min(n strength, n)) against SD 1.x's n - int(n strength). */
static void test_strength_rule(void **state) {
    (void)state;
    rb_sd_sched_config cfg;
    load_cfg("sd3", &cfg);
    rb_sd_sampler_opts o;
    rb_sd_sampler_opts_init(&o);
    o.kind = RB_SD_SAMPLER_FLOW_EULER;
    o.steps = 10;
    o.strength = 0.55;
    o.n = 4;
    rb_sd_sampler *s = NULL;
    rb_error err;
    TU_OK(rb_sd_sampler_create(&cfg, &o, &s, &err));
    assert_int_equal(rb_sd_sampler_first_eval(s), 4); /* int(10 - 5.5) */
    assert_int_equal(rb_sd_sampler_n_evals(s), 6);
    rb_sd_sampler_free(s);
    o.kind = RB_SD_SAMPLER_EULER;
    TU_OK(rb_sd_sampler_create(&cfg, &o, &s, &err));
    assert_int_equal(rb_sd_sampler_first_eval(s), 5); /* 10 - int(5.5) */
    rb_sd_sampler_free(s);
    /* img2img noising: sigma noise + (1 - sigma) image */
    o.kind = RB_SD_SAMPLER_FLOW_EULER;
    TU_OK(rb_sd_sampler_create(&cfg, &o, &s, &err));
    const float img[4] = {1.0f, -2.0f, 0.5f, 0.0f}, nz[4] = {0.25f, 1.0f, -1.0f, 3.0f};
    TU_OK(rb_sd_sampler_begin(s, img, nz, &err));
    const float sg = rb_sd_sampler_sigmas(s, NULL)[4];
    for (int i = 0; i < 4; i++) assert_true(rb_sd_sampler_latents(s)[i] == sg * nz[i] + (1.0f - sg) * img[i]);
    assert_int_equal(rb_sd_sampler_begin(s, NULL, nz, &err), RB_E_INVALID); /* strength < 1 needs the image */
    rb_sd_sampler_free(s);
    /* one step: the whole way from sigma 1 to 0 */
    o.steps = 1;
    o.strength = 1.0;
    TU_OK(rb_sd_sampler_create(&cfg, &o, &s, &err));
    int ns;
    const float *sig = rb_sd_sampler_sigmas(s, &ns);
    assert_int_equal(ns, 2);
    assert_true(sig[0] == 1.0f && sig[1] == 0.0f);
    assert_true(rb_sd_sampler_timesteps(s, NULL)[0] == 1000.0f);
    rb_sd_sampler_free(s);
}

static void expect_cfg_error(const char *json, rb_status want, const char *needle) {
    rb_sd_sched_config c;
    rb_error err;
    rb_error_clear(&err);
    assert_int_equal(rb_sd_sched_config_parse(&c, json, strlen(json), &err), want);
    assert_non_null(strstr(err.msg, needle));
}

static void test_config_errors(void **state) {
    (void)state;
    expect_cfg_error("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"shift\": -1}", RB_E_FORMAT, "shift");
    expect_cfg_error("{\"shift\": \"3\"}", RB_E_FORMAT, "shift");
    expect_cfg_error("{\"use_dynamic_shifting\": true}", RB_E_UNSUPPORTED, "use_dynamic_shifting");
    expect_cfg_error("{\"stochastic_sampling\": true}", RB_E_UNSUPPORTED, "stochastic_sampling");
    expect_cfg_error("{\"invert_sigmas\": true}", RB_E_UNSUPPORTED, "invert_sigmas");
    expect_cfg_error("{\"shift_terminal\": 0.1}", RB_E_UNSUPPORTED, "shift_terminal");
    expect_cfg_error("{\"time_shift_type\": \"cubic\"}", RB_E_FORMAT, "time_shift_type");
    rb_sd_sched_config c;
    rb_error err;
    load_cfg("sd3", &c);
    assert_true(c.shift == 3.0);
    rb_sd_sampler_opts o;
    rb_sd_sampler_opts_init(&o);
    o.kind = RB_SD_SAMPLER_FLOW_EULER;
    o.schedule = RB_SD_SCHEDULE_KARRAS;
    o.n = 4;
    rb_sd_sampler *s = NULL;
    assert_int_equal(rb_sd_sampler_create(&c, &o, &s, &err), RB_E_UNSUPPORTED);
    assert_null(s);
    c.use_karras_sigmas = true;
    o.schedule = RB_SD_SCHEDULE_DEFAULT;
    assert_int_equal(rb_sd_sampler_create(&c, &o, &s, &err), RB_E_UNSUPPORTED);
    rb_sd_sampler_kind k;
    rb_sd_schedule sc;
    TU_OK(rb_sd_sampler_spec_parse("flow_euler", &k, &sc, &err));
    assert_int_equal(k, RB_SD_SAMPLER_FLOW_EULER);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sd3_runs),
        cmocka_unit_test(test_sd35_runs),
        cmocka_unit_test(test_strength_rule),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

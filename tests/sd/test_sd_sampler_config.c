/* Scheduler configuration, names and the sampler API contract
 * (include/rbee/sd_sampler.h): the fixture pipelines' scheduler_config.json
 * files, diffusers' class defaults for keys a config leaves out (against the
 * timesteps diffusers recorded), _use_default_values, Python's Infinity
 * tokens, model-family presets, every rejected value with its message, name
 * parsing, misuse of the state machine, failing noise callbacks, non-finite
 * model outputs, the inpaint mask broadcast, progress counters and the
 * guidance helper. */
#include "testutil.h"

#include "rbee/sd_rng.h"
#include "rbee/sd_sampler.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rb_status parse(rb_sd_sched_config *c, const char *json, rb_error *err) {
    rb_error_clear(err);
    return rb_sd_sched_config_parse(c, json, strlen(json), err);
}

static rb_sd_sampler *make(const rb_sd_sched_config *c, rb_sd_sampler_kind kind, rb_sd_schedule sch, int steps,
                           size_t n) {
    rb_sd_sampler_opts o;
    rb_sd_sampler_opts_init(&o);
    o.kind = kind;
    o.schedule = sch;
    o.steps = steps;
    o.n = n;
    o.noise = rb_torch_rng_noise;
    static rb_torch_rng g;
    rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, 5);
    o.noise_user = &g;
    rb_sd_sampler *s = NULL;
    rb_error err;
    if (rb_sd_sampler_create(c, &o, &s, &err) != RB_OK) fail_msg("create: %s", err.msg);
    return s;
}

static void expect_timesteps(rb_sd_sampler *s, const float *ref, int n) {
    int cnt;
    const float *ts = rb_sd_sampler_timesteps(s, &cnt);
    assert_int_equal(cnt, n);
    for (int i = 0; i < n; i++)
        if (ts[i] != ref[i]) fail_msg("timestep %d: %g, expected %g", i, ts[i], ref[i]);
}

/* ---------------------------------------------------------------- the fixture pipelines' configs */
static void test_fixture_configs(void **state) {
    (void)state;
    static const char *const pipes[] = {"sd15", "sd21v", "sdxl", "sd15-inpaint"};
    static const char *const classes[] = {"PNDMScheduler", "DDIMScheduler", "EulerDiscreteScheduler", "PNDMScheduler"};
    for (int p = 0; p < 4; p++) {
        char rel[128], path[1024];
        snprintf(rel, sizeof rel, "diffusers/pipelines/%s/scheduler/scheduler_config.json", pipes[p]);
        rb_sd_sched_config c;
        rb_error err;
        if (rb_sd_sched_config_load(&c, tu_fixture(path, sizeof path, rel), &err) != RB_OK) fail_msg("%s", err.msg);
        assert_string_equal(c.class_name, classes[p]);
        assert_int_equal(c.num_train_timesteps, 1000);
        assert_true(c.beta_start == 0.00085 && c.beta_end == 0.012);
        assert_int_equal(c.beta_schedule, RB_SD_BETAS_SCALED_LINEAR);
        assert_int_equal(c.prediction_type, p == 1 ? RB_SD_PRED_V : RB_SD_PRED_EPSILON);
        assert_int_equal(c.timestep_spacing, RB_SD_SPACING_LEADING);
        assert_int_equal(c.steps_offset, 1);
        assert_true(c.set & RB_SD_CFG_TIMESTEP_SPACING);
        assert_false(c.set_alpha_to_one);
        rb_sd_sampler_kind k;
        rb_sd_schedule sch;
        rb_status st = rb_sd_sampler_for_config(&c, &k, &sch, &err);
        if (p == 0 || p == 3) {
            assert_int_equal(st, RB_E_UNSUPPORTED); /* PNDM: the caller picks */
            assert_non_null(strstr(err.msg, "PNDMScheduler"));
        } else {
            TU_OK(st);
            assert_int_equal(k, p == 1 ? RB_SD_SAMPLER_DDIM : RB_SD_SAMPLER_EULER);
        }
    }
}

/* Keys a config leaves out take the chosen class's default (diffusers'
 * from_config), including keys listed in _use_default_values. The
 * expectations are diffusers' values for SD 1.5's published config. */
static void test_class_defaults(void **state) {
    (void)state;
    rb_sd_sched_config c;
    rb_error err;
    const char *sd15_published = "{\"_class_name\": \"PNDMScheduler\", \"beta_end\": 0.012, \"beta_schedule\": "
                                 "\"scaled_linear\", \"beta_start\": 0.00085, \"clip_sample\": false, "
                                 "\"num_train_timesteps\": 1000, \"set_alpha_to_one\": false, \"skip_prk_steps\": true, "
                                 "\"steps_offset\": 1, \"trained_betas\": null}";
    TU_OK(parse(&c, sd15_published, &err));
    assert_false(c.set & RB_SD_CFG_TIMESTEP_SPACING);
    /* EulerDiscreteScheduler: linspace spacing -> linspace(0, 999, 4) reversed */
    rb_sd_sampler *s = make(&c, RB_SD_SAMPLER_EULER, RB_SD_SCHEDULE_DEFAULT, 4, 16);
    static const float lin4[] = {999.0f, 666.0f, 333.0f, 0.0f};
    expect_timesteps(s, lin4, 4);
    assert_true(rb_sd_sampler_init_noise_sigma(s) == rb_sd_sampler_sigmas(s, NULL)[0]); /* linspace: sigma_max */
    rb_sd_sampler_free(s);
    /* DDIMScheduler: leading with the given steps_offset */
    s = make(&c, RB_SD_SAMPLER_DDIM, RB_SD_SCHEDULE_DEFAULT, 4, 16);
    static const float lead4[] = {751.0f, 501.0f, 251.0f, 1.0f};
    expect_timesteps(s, lead4, 4);
    rb_sd_sampler_free(s);
    /* DPMSolverMultistep: linspace over 5 points, last dropped: round(999 * {4,3,2,1} / 4) */
    s = make(&c, RB_SD_SAMPLER_DPMPP_2M, RB_SD_SCHEDULE_DEFAULT, 4, 16);
    static const float dpm4[] = {999.0f, 749.0f, 500.0f, 250.0f};
    expect_timesteps(s, dpm4, 4);
    rb_sd_sampler_free(s);
    /* LCM: its own schedule (original_inference_steps 50) */
    s = make(&c, RB_SD_SAMPLER_LCM, RB_SD_SCHEDULE_DEFAULT, 4, 16);
    static const float lcm4[] = {999.0f, 759.0f, 499.0f, 259.0f};
    expect_timesteps(s, lcm4, 4);
    rb_sd_sampler_free(s);
    /* _use_default_values: a listed key counts as not given */
    TU_OK(parse(&c, "{\"timestep_spacing\": \"leading\", \"steps_offset\": 1, \"_use_default_values\": "
                    "[\"timestep_spacing\"]}", &err));
    assert_false(c.set & RB_SD_CFG_TIMESTEP_SPACING);
    assert_true(c.set & RB_SD_CFG_STEPS_OFFSET);
    /* trailing spacing: round(1000 - i*250) - 1 */
    TU_OK(parse(&c, "{\"timestep_spacing\": \"trailing\", \"beta_schedule\": \"scaled_linear\", \"beta_start\": "
                    "0.00085, \"beta_end\": 0.012}", &err));
    s = make(&c, RB_SD_SAMPLER_EULER_A, RB_SD_SCHEDULE_DEFAULT, 4, 16);
    static const float trail4[] = {999.0f, 749.0f, 499.0f, 249.0f};
    expect_timesteps(s, trail4, 4);
    assert_true(rb_sd_sampler_init_noise_sigma(s) == rb_sd_sampler_sigmas(s, NULL)[0]);
    rb_sd_sampler_free(s);
    /* the config's karras flag is the default schedule of euler but not of euler_a */
    TU_OK(parse(&c, "{\"use_karras_sigmas\": true, \"beta_schedule\": \"scaled_linear\", \"beta_start\": 0.00085, "
                    "\"beta_end\": 0.012, \"timestep_spacing\": \"trailing\"}", &err));
    s = make(&c, RB_SD_SAMPLER_EULER, RB_SD_SCHEDULE_DEFAULT, 4, 16);
    rb_sd_sampler *k = make(&c, RB_SD_SAMPLER_EULER, RB_SD_SCHEDULE_KARRAS, 4, 16);
    rb_sd_sampler *a = make(&c, RB_SD_SAMPLER_EULER_A, RB_SD_SCHEDULE_DEFAULT, 4, 16);
    assert_memory_equal(rb_sd_sampler_sigmas(s, NULL), rb_sd_sampler_sigmas(k, NULL), 5 * sizeof(float));
    expect_timesteps(a, trail4, 4);
    rb_sd_sampler_free(s);
    rb_sd_sampler_free(k);
    rb_sd_sampler_free(a);
}

/* Python writes -Infinity / NaN as bare tokens; a config of DPMSolverMultistep
 * with lambda_min_clipped set clips the schedule's start. */
static void test_nonfinite_tokens_and_clipping(void **state) {
    (void)state;
    rb_sd_sched_config c;
    rb_error err;
    TU_OK(parse(&c, "{\"lambda_min_clipped\": -Infinity, \"note\": \"-Infinity NaN\", \"beta_schedule\": "
                    "\"squaredcos_cap_v2\"}", &err));
    assert_true(isinf(c.lambda_min_clipped) && c.lambda_min_clipped < 0);
    assert_int_equal(c.beta_schedule, RB_SD_BETAS_SQUAREDCOS_CAP_V2);
    assert_int_equal(parse(&c, "{\"beta_start\": NaN}", &err), RB_E_FORMAT);
    /* cosine betas end with alphabar ~ 0; lambda_min_clipped drops the training
     * steps whose log-SNR / 2 = log(alpha / sigma) is below it, counted in double
     * here from the published cosine schedule; linspace spacing then starts at
     * (steps kept) - 1 */
    double abar = 1.0;
    int kept = 0;
    for (int i = 0; i < 1000; i++) {
        double f0 = cos((i / 1000.0 + 0.008) / 1.008 * M_PI / 2), f1 = cos(((i + 1) / 1000.0 + 0.008) / 1.008 * M_PI / 2);
        abar *= 1.0 - fmin(1.0 - (f1 * f1) / (f0 * f0), 0.999);
        if (0.5 * log(abar / (1.0 - abar)) >= -5.1) kept = i + 1;
    }
    assert_true(kept > 900 && kept < 1000);
    TU_OK(parse(&c, "{\"beta_schedule\": \"squaredcos_cap_v2\", \"lambda_min_clipped\": -5.1}", &err));
    rb_sd_sampler *s = make(&c, RB_SD_SAMPLER_DPMPP_2M, RB_SD_SCHEDULE_DEFAULT, 4, 16);
    float t0 = rb_sd_sampler_timesteps(s, NULL)[0];
    rb_sd_sampler_free(s);
    if (t0 != (float)(kept - 1)) fail_msg("clipped start %g, expected %d", t0, kept - 1);
    TU_OK(parse(&c, "{\"beta_schedule\": \"squaredcos_cap_v2\"}", &err));
    s = make(&c, RB_SD_SAMPLER_DPMPP_2M, RB_SD_SCHEDULE_DEFAULT, 4, 16);
    assert_true(rb_sd_sampler_timesteps(s, NULL)[0] == 999.0f);
    rb_sd_sampler_free(s);
}

static void test_family_presets(void **state) {
    (void)state;
    rb_sd_sched_config c;
    rb_error err;
    rb_sd_family f;
    TU_OK(rb_sd_family_parse("sdxl-turbo", &f, &err));
    TU_OK(rb_sd_sched_config_family(&c, f, &err));
    assert_string_equal(c.class_name, "EulerAncestralDiscreteScheduler");
    rb_sd_sampler_kind k;
    rb_sd_schedule sch;
    TU_OK(rb_sd_sampler_for_config(&c, &k, &sch, &err));
    assert_int_equal(k, RB_SD_SAMPLER_EULER_A);
    rb_sd_sampler *s = make(&c, k, sch, 1, 16); /* SDXL-Turbo's one step: t = 999, sigma_max */
    assert_true(rb_sd_sampler_timesteps(s, NULL)[0] == 999.0f);
    assert_true(fabsf(rb_sd_sampler_init_noise_sigma(s) - 14.6146f) < 1e-3f);
    rb_sd_sampler_free(s);
    TU_OK(rb_sd_sched_config_family(&c, RB_SD_FAMILY_SDXL, &err));
    s = make(&c, RB_SD_SAMPLER_EULER, RB_SD_SCHEDULE_DEFAULT, 4, 16);
    static const float lead4[] = {751.0f, 501.0f, 251.0f, 1.0f};
    expect_timesteps(s, lead4, 4);
    rb_sd_sampler_free(s);
    TU_OK(rb_sd_sched_config_family(&c, RB_SD_FAMILY_SD2_V, &err));
    assert_int_equal(c.prediction_type, RB_SD_PRED_V);
    TU_OK(rb_sd_sched_config_family(&c, RB_SD_FAMILY_SD1, &err));
    assert_false(c.set & RB_SD_CFG_TIMESTEP_SPACING); /* as the published SD 1.x config */
    assert_int_equal(rb_sd_family_parse("sd3", &f, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "sd1, sd2, sd2-v, sdxl, sdxl-turbo"));
    assert_int_equal(rb_sd_sched_config_family(&c, (rb_sd_family)42, &err), RB_E_INVALID);
}

/* Every rejected value, with the status and a message naming the key. */
static void test_config_errors(void **state) {
    (void)state;
    static const struct {
        const char *json;
        rb_status st;
        const char *msg;
    } cases[] = {
        {"{\"beta_schedule\": \"cosine\"}", RB_E_FORMAT, "linear, scaled_linear, squaredcos_cap_v2"},
        {"{\"beta_schedule\": \"exp\"}", RB_E_UNSUPPORTED, "exp"},
        {"{\"prediction_type\": \"eps\"}", RB_E_FORMAT, "epsilon, v_prediction, sample"},
        {"{\"prediction_type\": \"flow_prediction\"}", RB_E_UNSUPPORTED, "flow_prediction"},
        {"{\"timestep_spacing\": \"uniform\"}", RB_E_FORMAT, "leading, trailing, linspace"},
        {"{\"timestep_spacing\": 3}", RB_E_FORMAT, "timestep_spacing"},
        {"{\"num_train_timesteps\": 1}", RB_E_FORMAT, "num_train_timesteps"},
        {"{\"num_train_timesteps\": 1000.5}", RB_E_FORMAT, "num_train_timesteps"},
        {"{\"steps_offset\": -1}", RB_E_FORMAT, "steps_offset"},
        {"{\"steps_offset\": 1000}", RB_E_FORMAT, "steps_offset"},
        {"{\"beta_start\": 0.02, \"beta_end\": 0.01}", RB_E_FORMAT, "below beta_start"},
        {"{\"beta_end\": 1.5}", RB_E_FORMAT, "beta_end"},
        {"{\"beta_start\": \"small\"}", RB_E_FORMAT, "beta_start"},
        {"{\"clip_sample\": 1}", RB_E_FORMAT, "clip_sample"},
        {"{\"clip_sample_range\": 0}", RB_E_FORMAT, "clip_sample_range"},
        {"{\"use_karras_sigmas\": true, \"use_exponential_sigmas\": true}", RB_E_FORMAT, "both on"},
        {"{\"sigma_min\": 5, \"sigma_max\": 1}", RB_E_FORMAT, "sigma_min"},
        {"{\"sigma_max\": -1}", RB_E_FORMAT, "sigma_max"},
        {"{\"final_sigmas_type\": \"one\"}", RB_E_FORMAT, "zero, sigma_min"},
        {"{\"solver_type\": \"rk4\"}", RB_E_FORMAT, "midpoint"},
        {"{\"trained_betas\": [0.1, 0.2]}", RB_E_UNSUPPORTED, "trained_betas"},
        {"{\"thresholding\": true}", RB_E_UNSUPPORTED, "thresholding"},
        {"{\"use_beta_sigmas\": true}", RB_E_UNSUPPORTED, "use_beta_sigmas"},
        {"{\"use_flow_sigmas\": true}", RB_E_UNSUPPORTED, "use_flow_sigmas"},
        {"{\"timestep_type\": \"continuous\"}", RB_E_UNSUPPORTED, "continuous"},
        {"{\"timestep_type\": \"other\"}", RB_E_FORMAT, "timestep_type"},
        {"{\"interpolation_type\": \"log_linear\"}", RB_E_UNSUPPORTED, "log_linear"},
        {"{\"variance_type\": \"learned_range\"}", RB_E_UNSUPPORTED, "learned_range"},
        {"{\"algorithm_type\": \"dpmsolver+++\"}", RB_E_FORMAT, "algorithm_type"},
        {"{\"solver_order\": 7}", RB_E_FORMAT, "solver_order"},
        {"{\"original_inference_steps\": 2000}", RB_E_FORMAT, "original_inference_steps"},
        {"{\"_use_default_values\": \"x\"}", RB_E_FORMAT, "_use_default_values"},
        {"[1, 2]", RB_E_FORMAT, "not a JSON object"},
        {"{\"beta_start\": 0.1,}", RB_E_FORMAT, "JSON"},
        {"{\"a\": 1, \"a\": 2}", RB_E_FORMAT, "JSON"},
        {"", RB_E_FORMAT, "JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rb_sd_sched_config c;
        rb_error err;
        rb_status st = parse(&c, cases[i].json, &err);
        if (st != cases[i].st) fail_msg("%s: status %s, expected %s", cases[i].json, rb_status_str(st), rb_status_str(cases[i].st));
        if (!strstr(err.msg, cases[i].msg)) fail_msg("%s: message '%s' lacks '%s'", cases[i].json, err.msg, cases[i].msg);
    }
    rb_sd_sched_config c;
    rb_error err;
    assert_int_equal(rb_sd_sched_config_parse(NULL, "{}", 2, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_sched_config_parse(&c, NULL, 2, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_sched_config_load(&c, "/nonexistent/scheduler_config.json", &err), RB_E_IO);
    /* unknown keys of other classes are ignored, null means not given */
    TU_OK(parse(&c, "{\"skip_prk_steps\": true, \"sigma_min\": null, \"future_key\": [1, {\"x\": 2}]}", &err));
    assert_false(c.set & RB_SD_CFG_SIGMA_MIN);
}

/* ---------------------------------------------------------------- names */
static void test_names(void **state) {
    (void)state;
    rb_sd_sampler_kind k;
    rb_sd_schedule s;
    rb_error err;
    for (int i = 0; i < RB_SD_SAMPLER_COUNT_; i++) {
        TU_OK(rb_sd_sampler_kind_parse(rb_sd_sampler_kind_name((rb_sd_sampler_kind)i), &k, &err));
        assert_int_equal(k, i);
    }
    for (int i = 0; i < RB_SD_SCHEDULE_COUNT_; i++) {
        TU_OK(rb_sd_schedule_parse(rb_sd_schedule_name((rb_sd_schedule)i), &s, &err));
        assert_int_equal(s, i);
    }
    TU_OK(rb_sd_sampler_kind_parse("euler_ancestral", &k, &err));
    assert_int_equal(k, RB_SD_SAMPLER_EULER_A);
    TU_OK(rb_sd_schedule_parse("normal", &s, &err));
    assert_int_equal(s, RB_SD_SCHEDULE_DEFAULT);
    TU_OK(rb_sd_sampler_spec_parse("dpmpp_2m_karras", &k, &s, &err));
    assert_int_equal(k, RB_SD_SAMPLER_DPMPP_2M);
    assert_int_equal(s, RB_SD_SCHEDULE_KARRAS);
    TU_OK(rb_sd_sampler_spec_parse("euler_a_sgm_uniform", &k, &s, &err));
    assert_int_equal(k, RB_SD_SAMPLER_EULER_A);
    assert_int_equal(s, RB_SD_SCHEDULE_SGM_UNIFORM);
    TU_OK(rb_sd_sampler_spec_parse("dpmpp_sde", &k, &s, &err));
    assert_int_equal(k, RB_SD_SAMPLER_DPMPP_SDE);
    assert_int_equal(s, RB_SD_SCHEDULE_DEFAULT);
    TU_OK(rb_sd_sampler_spec_parse("euler_a", &k, &s, &err));
    assert_int_equal(k, RB_SD_SAMPLER_EULER_A);
    assert_int_equal(rb_sd_sampler_kind_parse("plms", &k, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "euler, euler_a, heun, dpmpp_2m, dpmpp_sde, ddim, lcm"));
    assert_int_equal(rb_sd_schedule_parse("beta", &s, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "default, karras, exponential, sgm_uniform, simple"));
    assert_int_equal(rb_sd_sampler_spec_parse("dpmpp_2m_turbo", &k, &s, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "<sampler>_<schedule>"));
    assert_int_equal(rb_sd_sampler_spec_parse("_karras", &k, &s, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_sampler_kind_parse(NULL, &k, &err), RB_E_INVALID);
    assert_string_equal(rb_sd_sampler_kind_name((rb_sd_sampler_kind)99), "?");
    assert_string_equal(rb_sd_schedule_name((rb_sd_schedule)-1), "?");
}

/* ---------------------------------------------------------------- the API contract */
static rb_status failing_noise(void *user, float *out, size_t n) {
    (void)out, (void)n;
    int *calls = user;
    return ++*calls >= 2 ? RB_E_CANCELLED : RB_OK;
}

static void test_create_errors(void **state) {
    (void)state;
    rb_sd_sched_config c;
    rb_error err;
    TU_OK(rb_sd_sched_config_family(&c, RB_SD_FAMILY_SD1, &err));
    rb_sd_sampler_opts o;
    rb_sd_sampler *s = NULL;
#define EXPECT_CREATE(setup, status, text)                                                                             \
    do {                                                                                                               \
        rb_sd_sampler_opts_init(&o);                                                                                   \
        o.n = 16;                                                                                                      \
        setup;                                                                                                         \
        rb_error_clear(&err);                                                                                          \
        assert_int_equal(rb_sd_sampler_create(&c, &o, &s, &err), status);                                             \
        assert_null(s);                                                                                                \
        if (!strstr(err.msg, text)) fail_msg("'%s' lacks '%s'", err.msg, text);                                       \
    } while (0)
    EXPECT_CREATE(o.n = 0, RB_E_INVALID, "latent size");
    EXPECT_CREATE(o.steps = 0, RB_E_INVALID, "steps");
    EXPECT_CREATE(o.steps = 1001, RB_E_INVALID, "exceed");
    EXPECT_CREATE(o.strength = 0.0, RB_E_INVALID, "strength");
    EXPECT_CREATE(o.strength = 1.5, RB_E_INVALID, "strength");
    EXPECT_CREATE(o.strength = NAN, RB_E_INVALID, "strength");
    EXPECT_CREATE((o.steps = 4, o.strength = 0.2), RB_E_RANGE, "no denoising step");
    EXPECT_CREATE(o.eta = INFINITY, RB_E_INVALID, "eta");
    EXPECT_CREATE(o.kind = (rb_sd_sampler_kind)17, RB_E_INVALID, "unknown sampler");
    EXPECT_CREATE(o.schedule = (rb_sd_schedule)17, RB_E_INVALID, "unknown schedule");
    EXPECT_CREATE((o.kind = RB_SD_SAMPLER_DDIM, o.schedule = RB_SD_SCHEDULE_KARRAS), RB_E_UNSUPPORTED, "only the default");
    EXPECT_CREATE(o.kind = RB_SD_SAMPLER_EULER_A, RB_E_INVALID, "noise callback");
    EXPECT_CREATE((o.kind = RB_SD_SAMPLER_DDIM, o.eta = 0.5), RB_E_INVALID, "noise callback");
    EXPECT_CREATE((o.kind = RB_SD_SAMPLER_LCM, o.steps = 51), RB_E_INVALID, "original_inference_steps");
    EXPECT_CREATE((o.kind = RB_SD_SAMPLER_DDIM, o.steps = 1000), RB_E_RANGE, "outside [0, 999]"); /* offset 1 */
    assert_int_equal(rb_sd_sampler_create(NULL, &o, &s, &err), RB_E_INVALID);
    /* samplers that never draw need no callback; DDIM at eta 0 neither */
    rb_sd_sampler_opts_init(&o);
    o.n = 16;
    o.kind = RB_SD_SAMPLER_DDIM;
    TU_OK(rb_sd_sampler_create(&c, &o, &s, &err));
    float x[16] = {0}, t;
    assert_int_equal(rb_sd_sampler_begin(s, NULL, NULL, &err), RB_E_INVALID); /* no noise given, none to draw */
    assert_non_null(strstr(err.msg, "noise"));
    rb_sd_sampler_free(s);
    /* img2img needs the image */
    o.kind = RB_SD_SAMPLER_EULER;
    o.strength = 0.5;
    TU_OK(rb_sd_sampler_create(&c, &o, &s, &err));
    assert_int_equal(rb_sd_sampler_begin(s, NULL, x, &err), RB_E_INVALID);
    assert_false(rb_sd_sampler_next(s, x, &t));
    rb_sd_sampler_free(s);
    rb_sd_sampler_free(NULL);
#undef EXPECT_CREATE
}

static void test_state_machine(void **state) {
    (void)state;
    rb_sd_sched_config c;
    rb_error err;
    TU_OK(rb_sd_sched_config_family(&c, RB_SD_FAMILY_SDXL, &err));
    rb_sd_sampler_opts o;
    rb_sd_sampler_opts_init(&o);
    o.kind = RB_SD_SAMPLER_HEUN;
    o.steps = 3;
    o.n = 8;
    rb_sd_sampler *s = NULL;
    TU_OK(rb_sd_sampler_create(&c, &o, &s, &err));
    float noise[8], in[8], out[8], t;
    for (int i = 0; i < 8; i++) noise[i] = (float)(i - 4) * 0.25f, out[i] = 0.1f;
    assert_false(rb_sd_sampler_next(s, in, &t)); /* not begun */
    assert_int_equal(rb_sd_sampler_feed(s, out, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_sampler_n_evals(s), 5);
    assert_int_equal(rb_sd_sampler_n_steps(s), 3);
    assert_int_equal(rb_sd_sampler_evals_done(s), 0);
    TU_OK(rb_sd_sampler_begin(s, NULL, noise, &err));
    int evals = 0;
    static const int steps_after[] = {0, 1, 1, 2, 3}; /* a step completes with its second evaluation */
    while (rb_sd_sampler_next(s, in, &t)) {
        float in2[8], t2;
        assert_true(rb_sd_sampler_next(s, in2, &t2)); /* asking again repeats the same request */
        assert_memory_equal(in, in2, sizeof in);
        assert_true(t == t2);
        TU_OK(rb_sd_sampler_feed(s, out, &err));
        assert_int_equal(rb_sd_sampler_steps_done(s), steps_after[evals]);
        evals++;
        assert_int_equal(rb_sd_sampler_evals_done(s), evals);
        if (evals < 5) assert_int_equal(rb_sd_sampler_feed(s, out, &err), RB_E_INVALID); /* one feed per next */
    }
    assert_int_equal(evals, 5);
    assert_true(rb_sd_sampler_finished(s));
    assert_int_equal(rb_sd_sampler_feed(s, out, &err), RB_E_INVALID);
    /* restart: same inputs, same result */
    float first[8];
    memcpy(first, rb_sd_sampler_latents(s), sizeof first);
    TU_OK(rb_sd_sampler_begin(s, NULL, noise, &err));
    assert_false(rb_sd_sampler_finished(s));
    while (rb_sd_sampler_next(s, in, &t)) TU_OK(rb_sd_sampler_feed(s, out, &err));
    assert_memory_equal(first, rb_sd_sampler_latents(s), sizeof first);
    /* a non-finite model output stops the run */
    TU_OK(rb_sd_sampler_begin(s, NULL, noise, &err));
    assert_true(rb_sd_sampler_next(s, in, &t));
    out[3] = NAN;
    assert_int_equal(rb_sd_sampler_feed(s, out, &err), RB_E_RANGE);
    assert_non_null(strstr(err.msg, "non-finite"));
    assert_false(rb_sd_sampler_next(s, in, &t));
    rb_sd_sampler_free(s);

    /* a failing noise callback passes its status on and leaves the step pending */
    int calls = 0;
    o.kind = RB_SD_SAMPLER_EULER_A;
    o.noise = failing_noise;
    o.noise_user = &calls;
    TU_OK(rb_sd_sampler_create(&c, &o, &s, &err));
    out[3] = 0.1f;
    TU_OK(rb_sd_sampler_begin(s, NULL, NULL, &err)); /* draw 1: ok */
    float before[8];
    memcpy(before, rb_sd_sampler_latents(s), sizeof before);
    assert_true(rb_sd_sampler_next(s, in, &t));
    assert_int_equal(rb_sd_sampler_feed(s, out, &err), RB_E_CANCELLED); /* draw 2 fails */
    assert_non_null(strstr(err.msg, "noise callback"));
    assert_memory_equal(before, rb_sd_sampler_latents(s), sizeof before);
    assert_int_equal(rb_sd_sampler_evals_done(s), 0);
    rb_sd_sampler_free(s);
}

/* The mask of set_inpaint is batch x 1 x h x w, broadcast over channels;
 * where it is 0 the run ends on the image latents exactly. */
static void test_inpaint_mask_broadcast(void **state) {
    (void)state;
    rb_sd_sched_config c;
    rb_error err;
    TU_OK(rb_sd_sched_config_family(&c, RB_SD_FAMILY_SD1, &err));
    c.prediction_type = RB_SD_PRED_SAMPLE; /* the model output is the data prediction */
    c.set |= RB_SD_CFG_PREDICTION_TYPE;
    rb_sd_sampler_opts o;
    rb_sd_sampler_opts_init(&o);
    o.kind = RB_SD_SAMPLER_DPMPP_2M;
    o.steps = 4;
    size_t B = 2, C = 4, HW = 6;
    o.n = B * C * HW;
    rb_sd_sampler *s = NULL;
    TU_OK(rb_sd_sampler_create(&c, &o, &s, &err));
    float img[48], noise[48], mask[12], in[48], out[48], t;
    for (int i = 0; i < 48; i++) img[i] = 0.01f * i, noise[i] = (float)((i * 7) % 11) / 5.0f - 1.0f, out[i] = 0.3f;
    for (int i = 0; i < 12; i++) mask[i] = (i % 3 == 0) ? 0.0f : 1.0f;
    assert_int_equal(rb_sd_sampler_set_inpaint(s, img, mask, 5, 4, &err), RB_E_INVALID); /* 48 != 5*4*h*w */
    assert_int_equal(rb_sd_sampler_set_inpaint(s, img, mask, SIZE_MAX, 4, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_sampler_set_inpaint(s, img, mask, 2, (SIZE_MAX >> 1) + 1, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_sampler_set_inpaint(s, NULL, mask, B, C, &err), RB_E_INVALID);
    float bad[12];
    memcpy(bad, mask, sizeof bad);
    bad[4] = 2.0f;
    assert_int_equal(rb_sd_sampler_set_inpaint(s, img, bad, B, C, &err), RB_E_RANGE);
    TU_OK(rb_sd_sampler_set_inpaint(s, img, mask, B, C, &err));
    TU_OK(rb_sd_sampler_begin(s, NULL, noise, &err));
    int evals = 0;
    while (rb_sd_sampler_next(s, in, &t)) {
        TU_OK(rb_sd_sampler_feed(s, out, &err));
        if (++evals == 1) assert_int_equal(rb_sd_sampler_set_inpaint(s, img, mask, B, C, &err), RB_E_INVALID);
    }
    const float *x = rb_sd_sampler_latents(s);
    for (size_t i = 0; i < o.n; i++) {
        size_t b = i / (C * HW), p = i % HW;
        if (mask[b * HW + p] == 0.0f) assert_true(x[i] == img[i]);
        else assert_true(x[i] == 0.3f); /* DPM++ 2M's last step returns the data prediction */
    }
    rb_sd_sampler_free(s);
}

/* out = uncond + g * (cond - uncond), float32, against double */
static void test_guidance(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 3);
    float u[100], c[100], o[100];
    tu_fill_uniform(&r, u, 100, -3, 3);
    tu_fill_uniform(&r, c, 100, -3, 3);
    rb_sd_cfg_guidance(o, u, c, 100, 7.5f);
    for (int i = 0; i < 100; i++) {
        double ref = (double)u[i] + 7.5 * ((double)c[i] - u[i]);
        assert_true(fabs(o[i] - ref) <= 4e-7 * fmax(1.0, fabs(ref)) * 8);
    }
    memcpy(o, u, sizeof o);
    rb_sd_cfg_guidance(o, o, c, 100, 1.0f); /* in place; scale 1 gives cond (to rounding) */
    for (int i = 0; i < 100; i++) assert_true(fabsf(o[i] - c[i]) <= 1e-6f * fmaxf(1.0f, fabsf(c[i])));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_configs),     cmocka_unit_test(test_class_defaults),
        cmocka_unit_test(test_nonfinite_tokens_and_clipping), cmocka_unit_test(test_family_presets),
        cmocka_unit_test(test_config_errors),       cmocka_unit_test(test_names),
        cmocka_unit_test(test_create_errors),       cmocka_unit_test(test_state_machine),
        cmocka_unit_test(test_inpaint_mask_broadcast), cmocka_unit_test(test_guidance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

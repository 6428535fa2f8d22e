/* Every sampling run of the diffusers fixtures (refs/<pipeline>/meta.json:
 * sd15, sd21v, sdxl, sd15-inpaint; ddim, euler, euler_a, dpmpp_2m_karras,
 * lcm, img2img, inpaint, 64x96) replayed through rb_sd_sampler: the sampler
 * is built from the run's recorded scheduler config, steps and strength; its
 * timesteps, sigmas and init_noise_sigma are checked against diffusers'; then
 * the recorded UNet outputs are fed back (with the run's guidance) and every
 * model input, timestep and step's latents is compared. The random draws
 * come first from the recorded rng<k> tensors, then, in a second pass, from
 * the torch-compatible CPU generator seeded as the run was. */
#include "testutil.h"

#include "rbee/safetensors.h"
#include "rbee/sd_rng.h"
#include "rbee/sd_sampler.h"
#include "sd/sched_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DRAWS 8

typedef struct recorded_noise {
    const float *draws[MAX_DRAWS];
    size_t sizes[MAX_DRAWS];
    int count, next;
} recorded_noise;

static rb_status replay_noise(void *user, float *out, size_t n) {
    recorded_noise *r = user;
    if (r->next >= r->count || r->sizes[r->next] != n) return RB_E_RANGE;
    memcpy(out, r->draws[r->next++], n * sizeof(float));
    return RB_OK;
}

typedef struct run_ctx {
    const char *pipe;
    json_t *run;
    rb_st_set *st;
    char label[128];
} run_ctx;

static const float *tensor(const run_ctx *c, const char *name, size_t *numel) {
    const rb_st_tensor *t = rb_st_find(c->st, name);
    if (!t) fail_msg("%s: tensor %s missing", c->label, name);
    assert_int_equal(t->dtype, RB_F32);
    if (numel) *numel = t->nbytes / 4;
    return t->data;
}

static int channels_of(const run_ctx *c, const char *name) {
    const rb_st_tensor *t = rb_st_find(c->st, name);
    assert_non_null(t);
    return (int)t->ne[2];
}

static double json_num(json_t *v) {
    double d = NAN;
    if (!rb_sched_json_number(v, &d)) fail_msg("not a number");
    return d;
}

/* Worst error relative to max(1, max|ref|), for the report. */
typedef struct errstat {
    double latents, model_in;
    int exact_timesteps, sigma_exact, sigma_total;
} errstat;

static double scaled_err(const float *a, const float *ref, size_t n) {
    double mx = 1.0, d = 0.0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - ref[i]));
    return d / mx;
}

static void check_schedule(const run_ctx *c, rb_sd_sampler *s, errstat *es) {
    json_t *sch = json_object_get(c->run, "scheduler");
    json_t *jts = json_object_get(sch, "timesteps"), *jsig = json_object_get(sch, "sigmas");
    int nt, ns;
    const float *ts = rb_sd_sampler_timesteps(s, &nt), *sig = rb_sd_sampler_sigmas(s, &ns);
    assert_int_equal(nt, (int)json_array_size(jts));
    for (int i = 0; i < nt; i++)
        if ((double)ts[i] != json_num(json_array_get(jts, (size_t)i)))
            fail_msg("%s: timestep %d: %.9g vs diffusers %.9g", c->label, i, ts[i], json_num(json_array_get(jts, (size_t)i)));
    es->exact_timesteps += nt;
    if (json_is_null(jsig)) {
        assert_null(sig);
    } else {
        assert_int_equal(ns, (int)json_array_size(jsig));
        for (int i = 0; i < ns; i++) {
            double ref = json_num(json_array_get(jsig, (size_t)i));
            if (fabs(sig[i] - ref) > 1e-6 * fabs(ref))
                fail_msg("%s: sigma %d: %.9g vs diffusers %.9g", c->label, i, sig[i], ref);
            es->sigma_exact += (double)sig[i] == ref;
            es->sigma_total++;
        }
    }
    double ins = json_num(json_object_get(sch, "init_noise_sigma"));
    if (fabs(rb_sd_sampler_init_noise_sigma(s) - ins) > 1e-6 * ins)
        fail_msg("%s: init_noise_sigma %.9g vs %.9g", c->label, rb_sd_sampler_init_noise_sigma(s), ins);
}

/* The index of the first recorded draw made by a caller whose name ends with suffix, or -1. */
static int draw_index(const run_ctx *c, const char *suffix) {
    json_t *draws = json_object_get(c->run, "rng_draws");
    for (size_t k = 0; k < json_array_size(draws); k++) {
        const char *caller = json_string_value(json_object_get(json_array_get(draws, k), "caller"));
        size_t lc = strlen(caller), ls = strlen(suffix);
        if (lc >= ls && strcmp(caller + lc - ls, suffix) == 0) return (int)k;
    }
    return -1;
}

/* alphabar_t of scaled_linear betas in double, from the published
 * definition (betas = linspace(sqrt(b0), sqrt(b1), T)^2, alphabar_t =
 * prod_{i<=t} (1 - beta_i)). */
static double naive_alphabar(const rb_sd_sched_config *cfg, int t) {
    int T = cfg->num_train_timesteps;
    assert_int_equal(cfg->beta_schedule, RB_SD_BETAS_SCALED_LINEAR);
    double b0 = sqrt(cfg->beta_start), b1 = sqrt(cfg->beta_end), a = 1.0;
    for (int i = 0; i <= t; i++) {
        double b = b0 + (b1 - b0) * i / (T - 1);
        a *= 1.0 - b * b;
    }
    return a;
}

/* Replays one run; use_generator: draws from the CPU generator instead of the files. */
static void replay(run_ctx *c, int use_generator, errstat *es) {
    json_t *run = c->run, *call = json_object_get(run, "call");
    json_t *sch = json_object_get(run, "scheduler");
    char *cfg_text = json_dumps(json_object_get(sch, "config"), JSON_COMPACT);
    assert_non_null(cfg_text);
    rb_sd_sched_config cfg;
    rb_error err;
    rb_error_clear(&err);
    if (rb_sd_sched_config_parse(&cfg, cfg_text, strlen(cfg_text), &err) != RB_OK) fail_msg("%s: %s", c->label, err.msg);
    free(cfg_text);

    rb_sd_sampler_opts o;
    rb_sd_sampler_opts_init(&o);
    TU_OK(rb_sd_sampler_spec_parse(json_string_value(json_object_get(run, "scheduler_key")), &o.kind, &o.schedule, &err));
    o.steps = (int)json_integer_value(json_object_get(call, "num_inference_steps"));
    json_t *jstr = json_object_get(call, "strength");
    o.strength = jstr ? json_num(jstr) : 1.0;
    double guidance = json_num(json_object_get(call, "guidance_scale"));
    int do_cfg = guidance > 1.0;

    size_t n = 0;
    tensor(c, "step0.latents", &n);
    o.n = n;
    recorded_noise rec;
    memset(&rec, 0, sizeof rec);
    rb_torch_rng gen;
    TU_OK(rb_torch_rng_init(&gen, RB_TORCH_RNG_CPU,
                            (uint64_t)json_integer_value(json_object_get(json_object_get(run, "generator"), "seed"))));
    json_t *draws = json_object_get(run, "rng_draws");
    for (size_t k = 0; k < json_array_size(draws); k++) {
        char name[32];
        snprintf(name, sizeof name, "rng%zu", k);
        rec.draws[rec.count] = tensor(c, name, &rec.sizes[rec.count]);
        rec.count++;
    }
    o.noise = use_generator ? rb_torch_rng_noise : replay_noise;
    o.noise_user = use_generator ? (void *)&gen : (void *)&rec;
    rb_sd_sampler *s = NULL;
    if (rb_sd_sampler_create(&cfg, &o, &s, &err) != RB_OK) fail_msg("%s: %s", c->label, err.msg);
    check_schedule(c, s, es);
    assert_int_equal(rb_sd_sampler_n_evals(s), (int)json_integer_value(json_object_get(run, "n_model_calls")));

    const char *pipeline = json_string_value(json_object_get(run, "pipeline"));
    int in_ch = channels_of(c, "step0.model_in");
    size_t n_in = 0;
    tensor(c, "step0.model_in", &n_in);
    size_t batch_in = do_cfg ? 2 : 1;
    size_t plane = n / 4; /* h * w: latents are [1, 4, h, w] */
    assert_int_equal(n_in, batch_in * (size_t)in_ch * plane);

    /* draws made before the sampler's own: the VAE posterior samples */
    int skip = 0;
    while (skip < rec.count &&
           strstr(json_string_value(json_object_get(json_array_get(draws, (size_t)skip), "caller")), "vae.sample"))
        skip++;
    rec.next = skip;
    float *scratch = malloc(n * sizeof(float));
    assert_non_null(scratch);
    for (int k = 0; k < skip; k++) TU_OK(rb_torch_randn(&gen, scratch, rec.sizes[k])); /* keep the generator in step */

    if (strcmp(pipeline, "StableDiffusionImg2ImgPipeline") == 0 || strcmp(pipeline, "StableDiffusionXLImg2ImgPipeline") == 0) {
        /* The encoded image is not stored: derive it from the first model
         * input and the recorded noise (x = image + sigma * noise, or
         * sqrt(a) image + sqrt(1 - a) noise), then let begin noise it again. */
        int kn = draw_index(c, "prepare_latents");
        assert_true(kn >= 0);
        const float *noise = rec.draws[kn];
        const float *mi = tensor(c, "step0.model_in", NULL);
        int first = rb_sd_sampler_first_eval(s);
        int cnt;
        const float *sig = rb_sd_sampler_sigmas(s, &cnt);
        float *image = malloc(n * sizeof(float));
        assert_non_null(image);
        if (sig) {
            double sg = sig[first];
            for (size_t i = 0; i < n; i++) image[i] = (float)((double)mi[i] * sqrt(sg * sg + 1.0) - sg * noise[i]);
        } else {
            double a = naive_alphabar(&cfg, (int)rb_sd_sampler_timesteps(s, NULL)[first]);
            for (size_t i = 0; i < n; i++) image[i] = (float)(((double)mi[i] - sqrt(1.0 - a) * noise[i]) / sqrt(a));
        }
        TU_OK(rb_sd_sampler_begin(s, image, use_generator ? NULL : noise, &err));
        if (!use_generator) rec.next = kn + 1;
        free(image);
    } else {
        const float *init = tensor(c, "init_latents", NULL);
        TU_OK(rb_sd_sampler_begin(s, NULL, init, &err));
        if (strcmp(pipeline, "StableDiffusionInpaintPipeline") == 0 && in_ch == 4) {
            /* 4-channel inpainting: the mask at latent size (nearest), and
             * the image latents, which the last blend writes unnoised where
             * the mask is 0 (where it is 1 they are never used) */
            size_t nm = 0;
            const float *mask = tensor(c, "mask", &nm);
            const rb_st_tensor *mt = rb_st_find(c->st, "mask");
            size_t W = (size_t)mt->ne[0], H = (size_t)mt->ne[1];
            const rb_st_tensor *lt = rb_st_find(c->st, "step0.latents");
            size_t w = (size_t)lt->ne[0], h = (size_t)lt->ne[1];
            float *ml = malloc(plane * sizeof(float)), *image = calloc(n, sizeof(float));
            assert_non_null(ml);
            assert_non_null(image);
            for (size_t y = 0; y < h; y++)
                for (size_t xx = 0; xx < w; xx++) ml[y * w + xx] = mask[(y * (H / h)) * W + xx * (W / w)];
            char name[32];
            snprintf(name, sizeof name, "step%d.latents", rb_sd_sampler_n_evals(s) - 1);
            const float *fin = tensor(c, name, NULL);
            for (size_t i = 0; i < n; i++) image[i] = ml[i % plane] == 0.0f ? fin[i] : 0.0f;
            TU_OK(rb_sd_sampler_set_inpaint(s, image, ml, 1, 4, &err));
            free(ml);
            free(image);
        }
    }

    float *model_in = malloc(n * sizeof(float)), *guided = malloc(n * sizeof(float));
    assert_non_null(model_in);
    assert_non_null(guided);
    float t;
    int i = 0;
    while (rb_sd_sampler_next(s, model_in, &t)) {
        char name[48];
        snprintf(name, sizeof name, "step%d.model_in", i);
        const float *ref_in = tensor(c, name, NULL); /* batch item 0, its first 4 channels */
        double e = scaled_err(model_in, ref_in, n);
        es->model_in = fmax(es->model_in, e);
        if (e > 1e-5) fail_msg("%s: step %d model input off by %.3g (scaled)", c->label, i, e);
        snprintf(name, sizeof name, "step%d.timestep", i);
        const float *ref_t = tensor(c, name, NULL);
        if (t != ref_t[0]) fail_msg("%s: step %d timestep %.9g vs %.9g", c->label, i, t, ref_t[0]);
        snprintf(name, sizeof name, "step%d.model_out", i);
        const float *out = tensor(c, name, NULL);
        if (do_cfg) rb_sd_cfg_guidance(guided, out, out + n, n, (float)guidance);
        else memcpy(guided, out, n * sizeof(float));
        if (rb_sd_sampler_feed(s, guided, &err) != RB_OK) fail_msg("%s: feed %d: %s", c->label, i, err.msg);
        snprintf(name, sizeof name, "step%d.latents", i);
        const float *ref_lat = tensor(c, name, NULL);
        e = scaled_err(rb_sd_sampler_latents(s), ref_lat, n);
        es->latents = fmax(es->latents, e);
        if (e > 1e-5) fail_msg("%s: step %d latents off by %.3g (scaled)", c->label, i, e);
        i++;
    }
    assert_true(rb_sd_sampler_finished(s));
    assert_int_equal(i, rb_sd_sampler_n_evals(s));
    assert_int_equal(rb_sd_sampler_steps_done(s), rb_sd_sampler_n_steps(s));
    if (!use_generator) assert_int_equal(rec.next, rec.count); /* every recorded draw used, in order */
    const float *fin = tensor(c, "final_latents", NULL);
    assert_true(scaled_err(rb_sd_sampler_latents(s), fin, n) <= 1e-5);
    free(model_in);
    free(guided);
    free(scratch);
    rb_sd_sampler_free(s);
}

static void run_pipeline(const char *pipe, int *n_runs) {
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "diffusers/refs/%s/meta.json", pipe);
    rb_error err;
    json_t *meta = rb_sched_json_load(tu_fixture(path, sizeof path, rel), &err);
    if (!meta) fail_msg("%s", err.msg);
    json_t *runs = json_object_get(meta, "runs");
    for (size_t r = 0; r < json_array_size(runs); r++) {
        run_ctx c;
        memset(&c, 0, sizeof c);
        c.pipe = pipe;
        c.run = json_array_get(runs, r);
        const char *name = json_string_value(json_object_get(c.run, "run"));
        snprintf(rel, sizeof rel, "diffusers/refs/%s/%s.safetensors", pipe, name);
        TU_OK(rb_st_open(tu_fixture(path, sizeof path, rel), &c.st, &err));
        errstat es[2];
        memset(es, 0, sizeof es);
        for (int pass = 0; pass < 2; pass++) {
            snprintf(c.label, sizeof c.label, "%s/%s (%s noise)", pipe, name, pass ? "generator" : "recorded");
            replay(&c, pass, &es[pass]);
        }
        printf("  %-13s %-26s latents %.2e  model_in %.2e  sigmas exact %d/%d (scaled max errors)\n", pipe, name,
               fmax(es[0].latents, es[1].latents), fmax(es[0].model_in, es[1].model_in), es[0].sigma_exact,
               es[0].sigma_total);
        rb_st_close(c.st);
        (*n_runs)++;
    }
    json_decref(meta);
}

static void test_sd15_runs(void **state) {
    (void)state;
    int n = 0;
    run_pipeline("sd15", &n);
    assert_int_equal(n, 9);
}

static void test_sd21v_runs(void **state) {
    (void)state;
    int n = 0;
    run_pipeline("sd21v", &n);
    assert_int_equal(n, 6);
}

static void test_sdxl_runs(void **state) {
    (void)state;
    int n = 0;
    run_pipeline("sdxl", &n);
    assert_int_equal(n, 7);
}

static void test_sd15_inpaint_runs(void **state) {
    (void)state;
    int n = 0;
    run_pipeline("sd15-inpaint", &n);
    assert_int_equal(n, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sd15_runs),
        cmocka_unit_test(test_sd21v_runs),
        cmocka_unit_test(test_sdxl_runs),
        cmocka_unit_test(test_sd15_inpaint_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

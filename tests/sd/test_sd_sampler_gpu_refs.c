/* The diffusers reference runs that tests/sd/gen_sampler_refs.py records on
 * the GPU machine (tests/data/sd/sampler_refs.{json,safetensors}): Heun,
 * DPM++ SDE (its Brownian tree replaced by recorded torch.randn draws), Euler
 * with karras / exponential sigmas, Euler-ancestral with karras, DPM++ 2M
 * without karras, DDIM with eta, v-prediction variants, every timestep
 * spacing, SDXL-Turbo's config, img2img starts and the 4-channel inpainting
 * blend, all driven by a synthetic model. Each run is replayed like the
 * pipeline fixtures: schedule tables, then the recorded model outputs fed
 * back, every model input / timestep / step's latents compared; a second pass
 * regenerates the random draws with the torch-compatible CPU generator. Also
 * torch RNG facts: consecutive small CPU draws, the CPU kernel variant, and
 * a CUDA draw beyond the simple Philox layout. Skips (with a message) until
 * the lead has committed the data files. */
#include "testutil.h"

#include "rbee/safetensors.h"
#include "rbee/sd_rng.h"
#include "rbee/sd_sampler.h"
#include "sd/sched_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NUMEL 32
#define MAX_DRAWS 32

typedef struct refs {
    json_t *meta;
    rb_st_set *st;
    int avx2; /* torch used its AVX2 normal kernel on that CPU */
} refs;

static refs R;

static int group_setup(void **state) {
    (void)state;
    const char *dir = getenv("RBEE_TEST_DATA_DIR");
    if (!dir || !*dir) dir = RBEE_TEST_DATA_DIR;
    char json[1024], st[1024];
    snprintf(json, sizeof json, "%s/sd/sampler_refs.json", dir);
    snprintf(st, sizeof st, "%s/sd/sampler_refs.safetensors", dir);
    struct stat sb;
    if (stat(json, &sb) != 0 || stat(st, &sb) != 0) {
        printf("SKIP: %s not present yet: run tests/sd/gen_sampler_refs.py on the GPU machine "
               "(PYTHONPATH=<diffusers>/src python3 tests/sd/gen_sampler_refs.py --out tests/data/sd)\n", json);
        return 0;
    }
    rb_error err;
    R.meta = rb_sched_json_load(json, &err);
    if (!R.meta) {
        printf("%s\n", err.msg);
        return -1;
    }
    if (rb_st_open(st, &R.st, &err) != RB_OK) {
        printf("%s\n", err.msg);
        return -1;
    }
    const char *cap = json_string_value(json_object_get(json_object_get(R.meta, "rng"), "cpu_capability"));
    /* torch's AVX2 and AVX-512 dispatch compute the normal draw alike */
    R.avx2 = cap && (strcmp(cap, "AVX2") == 0 || strcmp(cap, "AVX512") == 0);
    printf("  refs: diffusers %s, torch %s, CPU kernel %s, torchsde: %s\n",
           json_string_value(json_object_get(R.meta, "diffusers")), json_string_value(json_object_get(R.meta, "torch")),
           cap ? cap : "?", json_string_value(json_object_get(R.meta, "torchsde")));
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    if (R.st) rb_st_close(R.st);
    if (R.meta) json_decref(R.meta);
    return 0;
}

#define NEED_REFS()                                                                                                    \
    do {                                                                                                               \
        if (!R.meta) skip();                                                                                           \
    } while (0)

static const float *tensor(const char *run, const char *what, size_t *numel) {
    char name[160];
    snprintf(name, sizeof name, "%s.%s", run, what);
    const rb_st_tensor *t = rb_st_find(R.st, name);
    if (!t) return NULL;
    if (numel) *numel = t->nbytes / 4;
    return t->data;
}

static double scaled_err(const float *a, const float *ref, size_t n) {
    double mx = 1.0, d = 0.0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - ref[i]));
    return d / mx;
}

static int float_ulps(float a, float b) {
    if (a == b) return 0;
    int k = 0;
    float x = a;
    while (x != b && k < 100) x = nextafterf(x, b), k++;
    return k;
}

/* the documented synthetic model */
static float model_fn(float x_in, float t, int i) {
    float a = (float)(0.5 + 0.3 * cos(0.003 * t)), b = (float)(0.2 * sin(0.002 * t + 1.0));
    float p = (float)sin(0.37 * i + 0.1);
    return x_in * a + p * b;
}

typedef struct draws {
    const float *d[MAX_DRAWS];
    int count, next;
    rb_torch_rng *gen; /* second pass: regenerate, and check against the recording */
    double worst;
} draws;

static rb_status next_draw(void *user, float *out, size_t n) {
    draws *dr = user;
    if (dr->next >= dr->count || n != NUMEL) return RB_E_RANGE;
    const float *rec = dr->d[dr->next++];
    if (!dr->gen) {
        memcpy(out, rec, n * sizeof(float));
        return RB_OK;
    }
    rb_status st = rb_torch_randn(dr->gen, out, n);
    for (size_t i = 0; i < n; i++) dr->worst = fmax(dr->worst, fabs((double)out[i] - rec[i]));
    return st;
}

static void replay_run(json_t *run, int regenerate) {
    const char *name = json_string_value(json_object_get(run, "run"));
    char label[160];
    snprintf(label, sizeof label, "%s (%s noise)", name, regenerate ? "regenerated" : "recorded");
    char *cfg_text = json_dumps(json_object_get(run, "config"), JSON_COMPACT);
    assert_non_null(cfg_text);
    rb_sd_sched_config cfg;
    rb_error err;
    if (rb_sd_sched_config_parse(&cfg, cfg_text, strlen(cfg_text), &err) != RB_OK) fail_msg("%s: %s", label, err.msg);
    free(cfg_text);
    rb_sd_sampler_opts o;
    rb_sd_sampler_opts_init(&o);
    TU_OK(rb_sd_sampler_spec_parse(json_string_value(json_object_get(run, "sampler")), &o.kind, &o.schedule, &err));
    o.steps = (int)json_integer_value(json_object_get(run, "steps"));
    o.strength = json_number_value(json_object_get(run, "strength"));
    json_t *eta = json_object_get(run, "eta");
    o.eta = json_is_number(eta) ? json_number_value(eta) : -1.0;
    o.n = NUMEL;
    int inpaint = json_is_true(json_object_get(run, "inpaint"));
    int n_draws = (int)json_integer_value(json_object_get(run, "n_step_draws"));
    assert_true(n_draws <= MAX_DRAWS);
    draws dr;
    memset(&dr, 0, sizeof dr);
    for (int k = 0; k < n_draws; k++) {
        char what[32];
        snprintf(what, sizeof what, "draw%d", k);
        dr.d[k] = tensor(name, what, NULL);
        assert_non_null(dr.d[k]);
    }
    dr.count = n_draws;
    rb_torch_rng gen;
    TU_OK(rb_torch_rng_init(&gen, R.avx2 ? RB_TORCH_RNG_CPU : RB_TORCH_RNG_CPU_LIBM,
                            (uint64_t)json_integer_value(json_object_get(run, "generator_seed"))));
    if (regenerate) dr.gen = &gen;
    o.noise = next_draw;
    o.noise_user = &dr;
    rb_sd_sampler *s = NULL;
    if (rb_sd_sampler_create(&cfg, &o, &s, &err) != RB_OK) fail_msg("%s: %s", label, err.msg);

    /* schedule */
    json_t *jts = json_object_get(run, "timesteps"), *jsig = json_object_get(run, "sigmas");
    int nt, ns;
    const float *ts = rb_sd_sampler_timesteps(s, &nt), *sig = rb_sd_sampler_sigmas(s, &ns);
    assert_int_equal(nt, (int)json_array_size(jts));
    for (int i = 0; i < nt; i++) {
        float ref = (float)json_number_value(json_array_get(jts, (size_t)i));
        /* fractional timesteps come from a log-sigma inversion that numpy runs in float64
         * and this code in float32: 8 float ulps (1e-6 relative); integer ones exactly */
        int ulps = float_ulps(ts[i], ref);
        if (ref == floorf(ref) ? ulps != 0 : ulps > 8) fail_msg("%s: timestep %d %.9g vs %.9g", label, i, ts[i], ref);
    }
    if (json_is_array(jsig)) {
        assert_int_equal(ns, (int)json_array_size(jsig));
        for (int i = 0; i < ns; i++) {
            double ref = json_number_value(json_array_get(jsig, (size_t)i));
            if (fabs(sig[i] - ref) > 1e-6 * fabs(ref)) fail_msg("%s: sigma %d %.9g vs %.9g", label, i, sig[i], ref);
        }
    } else {
        assert_null(sig);
    }
    double ins = json_number_value(json_object_get(run, "init_noise_sigma"));
    if (fabs(rb_sd_sampler_init_noise_sigma(s) - ins) > 1e-6 * ins) fail_msg("%s: init_noise_sigma", label);
    assert_int_equal(rb_sd_sampler_n_evals(s), (int)json_integer_value(json_object_get(run, "n_evals")));

    /* start */
    size_t nn = 0;
    const float *noise = tensor(name, "noise", &nn), *image = tensor(name, "image", NULL);
    assert_int_equal(nn, NUMEL);
    float regen[NUMEL];
    const float *start_noise = noise;
    if (regenerate) { /* the starting noise: the run generator's first draw (img2img) or its own generator */
        json_t *iseed = json_object_get(run, "init_latents_seed");
        rb_torch_rng g0;
        if (json_is_integer(iseed)) {
            TU_OK(rb_torch_rng_init(&g0, gen.kind, (uint64_t)json_integer_value(iseed)));
            TU_OK(rb_torch_randn(&g0, regen, NUMEL));
        } else {
            TU_OK(rb_torch_randn(&gen, regen, NUMEL));
        }
        for (int i = 0; i < NUMEL; i++) dr.worst = fmax(dr.worst, fabs((double)regen[i] - noise[i]));
        start_noise = regen;
    }
    TU_OK(rb_sd_sampler_begin(s, o.strength < 1.0 ? image : NULL, start_noise, &err));
    if (inpaint) {
        const float *mask = tensor(name, "mask", NULL);
        assert_non_null(mask);
        assert_non_null(image);
        TU_OK(rb_sd_sampler_set_inpaint(s, image, mask, 1, 2, &err));
    }

    /* evaluations */
    size_t ne = 0;
    const float *m_in = tensor(name, "model_in", &ne), *m_out = tensor(name, "model_out", NULL);
    const float *lat = tensor(name, "latents", NULL), *rts = tensor(name, "timesteps", NULL);
    int E = (int)(ne / NUMEL);
    float in[NUMEL], t;
    int e = 0;
    double worst_in = 0, worst_lat = 0;
    while (rb_sd_sampler_next(s, in, &t)) {
        assert_true(e < E);
        double ein = scaled_err(in, m_in + e * NUMEL, NUMEL);
        worst_in = fmax(worst_in, ein);
        if (ein > 1e-5) fail_msg("%s: eval %d model input off by %.3g", label, e, ein);
        if (float_ulps(t, rts[e]) > (rts[e] == floorf(rts[e]) ? 0 : 8)) /* as the schedule above */
            fail_msg("%s: eval %d timestep %.9g vs %.9g", label, e, t, rts[e]);
        for (int i = 0; i < NUMEL && !regenerate; i++) { /* the recording is the documented model's */
            float mo = model_fn(m_in[e * NUMEL + i], rts[e], i);
            assert_true(fabsf(mo - m_out[e * NUMEL + i]) <= 1e-5f * fmaxf(1.0f, fabsf(mo)));
        }
        if (rb_sd_sampler_feed(s, m_out + e * NUMEL, &err) != RB_OK) fail_msg("%s: %s", label, err.msg);
        double el = scaled_err(rb_sd_sampler_latents(s), lat + e * NUMEL, NUMEL);
        worst_lat = fmax(worst_lat, el);
        if (el > 1e-5) fail_msg("%s: eval %d latents off by %.3g", label, e, el);
        e++;
    }
    assert_int_equal(e, E);
    assert_int_equal(dr.next, n_draws);
    if (regenerate) {
        /* the regenerated draws are torch's: bitwise with the AVX2 kernel, within 1e-6 otherwise */
        if (R.avx2) assert_true(dr.worst == 0.0);
        else assert_true(dr.worst <= 1e-6);
    } else {
        printf("  %-26s %-20s %2d evals  model_in %.2e  latents %.2e\n", name,
               json_string_value(json_object_get(run, "sampler")), E, worst_in, worst_lat);
    }
    rb_sd_sampler_free(s);
}

static void test_reference_runs(void **state) {
    (void)state;
    NEED_REFS();
    json_t *runs = json_object_get(R.meta, "runs");
    assert_true(json_array_size(runs) >= 20);
    for (size_t r = 0; r < json_array_size(runs); r++) {
        replay_run(json_array_get(runs, r), 0);
        replay_run(json_array_get(runs, r), 1);
    }
}

/* Consecutive CPU draws of mixed sizes: below 16 elements the Box-Muller
 * pair's second value carries over to the next call. */
static void test_cpu_draw_sequences(void **state) {
    (void)state;
    NEED_REFS();
    json_t *rng = json_object_get(R.meta, "rng");
    json_t *sizes = json_object_get(rng, "cpu_seq_sizes");
    static const int seeds[] = {0, 7};
    for (int k = 0; k < 2; k++) {
        char name[64];
        snprintf(name, sizeof name, "rng.cpu_seq.seed%d", seeds[k]);
        const rb_st_tensor *t = rb_st_find(R.st, name);
        assert_non_null(t);
        const float *ref = t->data;
        rb_torch_rng g;
        TU_OK(rb_torch_rng_init(&g, R.avx2 ? RB_TORCH_RNG_CPU : RB_TORCH_RNG_CPU_LIBM, (uint64_t)seeds[k]));
        size_t off = 0;
        for (size_t j = 0; j < json_array_size(sizes); j++) {
            size_t n = (size_t)json_integer_value(json_array_get(sizes, j));
            float buf[64];
            assert_true(n <= 64 && off + n <= t->nbytes / 4);
            TU_OK(rb_torch_randn(&g, buf, n));
            for (size_t i = 0; i < n; i++) {
                int exact = n < 16 || R.avx2; /* the double path is the same on every kernel */
                if (exact ? buf[i] != ref[off + i] : fabs((double)buf[i] - ref[off + i]) > 1e-6)
                    fail_msg("%s call %zu (numel %zu) [%zu]: %.9g vs %.9g", name, j, n, i, buf[i], ref[off + i]);
            }
            off += n;
        }
        assert_int_equal(off, t->nbytes / 4);
    }
}

/* The CPU kernel torch used: its big draw against both variants. */
static void test_cpu_kernel_variant(void **state) {
    (void)state;
    NEED_REFS();
    json_t *big = json_object_get(json_object_get(R.meta, "rng"), "cpu_big");
    const rb_st_tensor *t = rb_st_find(R.st, "rng.cpu_big.seed42.first256");
    assert_non_null(t);
    size_t n = 4 * 64 * 64;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    assert_non_null(a);
    assert_non_null(b);
    rb_torch_rng g;
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, 42));
    TU_OK(rb_torch_randn(&g, a, n));
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU_LIBM, 42));
    TU_OK(rb_torch_randn(&g, b, n));
    const float *ref = t->data;
    int avx_exact = memcmp(a, ref, 256 * 4) == 0, libm_exact = memcmp(b, ref, 256 * 4) == 0;
    double sa = 0, sb = 0;
    for (size_t i = 0; i < n; i++) sa += a[i], sb += b[i];
    double ref_sum = json_number_value(json_object_get(big, "sum"));
    printf("  torch kernel %s: vectorized variant %s, libm variant %s on the first 256 values (sums %.12g / %.12g, torch %.12g)\n",
           R.avx2 ? "AVX2/AVX-512" : "other", avx_exact ? "bitwise" : "differs", libm_exact ? "bitwise" : "differs", sa, sb,
           ref_sum);
    if (R.avx2) assert_true(avx_exact);
    for (int i = 0; i < 256; i++) assert_true(fabs((double)(R.avx2 ? a : b)[i] - ref[i]) <= 1e-6);
    free(a);
    free(b);
}

/* A CUDA draw of 1.2M values (two rounds of curand_normal4 per thread on the
 * recording GPU), then a small draw on the same generator. */
static void test_cuda_big_draw(void **state) {
    (void)state;
    NEED_REFS();
    json_t *big = json_object_get(json_object_get(R.meta, "rng"), "cuda_big");
    if (!json_is_object(big)) {
        printf("SKIP: the reference machine had no CUDA device\n");
        skip();
    }
    size_t n = (size_t)json_integer_value(json_object_get(big, "numel"));
    rb_torch_rng g;
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CUDA, (uint64_t)json_integer_value(json_object_get(big, "seed"))));
    TU_OK(rb_torch_rng_set_cuda_device(&g, (uint32_t)json_integer_value(json_object_get(big, "sm_count")),
                                       (uint32_t)json_integer_value(json_object_get(big, "max_threads_per_sm"))));
    assert_true(n > rb_torch_rng_cuda_simple_limit(&g));
    float *x = malloc(n * 4), next[64];
    assert_non_null(x);
    TU_OK(rb_torch_randn(&g, x, n));
    TU_OK(rb_torch_randn(&g, next, 64));
    const rb_st_tensor *ti = rb_st_find(R.st, "rng.cuda_big.sample_idx"), *tv = rb_st_find(R.st, "rng.cuda_big.samples");
    const rb_st_tensor *tl = rb_st_find(R.st, "rng.cuda_big.last256"), *tn = rb_st_find(R.st, "rng.cuda_big.next64");
    assert_non_null(ti);
    assert_non_null(tv);
    assert_non_null(tl);
    assert_non_null(tn);
    const unsigned char *idx = ti->data; /* int64, not necessarily 8-byte aligned in the file */
    const float *sv = tv->data, *lv = tl->data, *nv = tn->data;
    double worst = 0;
    assert_int_equal(ti->nbytes / 8, tv->nbytes / 4);
    for (size_t k = 0; k < tv->nbytes / 4; k++) {
        int64_t i;
        memcpy(&i, idx + 8 * k, 8);
        assert_true(i >= 0 && (size_t)i < n);
        worst = fmax(worst, fabs((double)x[i] - sv[k]));
    }
    for (size_t k = 0; k < 256; k++) worst = fmax(worst, fabs((double)x[n - 256 + k] - lv[k]));
    for (size_t k = 0; k < 64; k++) worst = fmax(worst, fabs((double)next[k] - nv[k]));
    double s = 0, sa = 0;
    for (size_t i = 0; i < n; i++) s += x[i], sa += fabs(x[i]);
    printf("  CUDA %zu values on %s: max |diff| %.3g, sums %.9g %.9g vs %.9g %.9g\n", n,
           json_string_value(json_object_get(big, "device")), worst, s, sa,
           json_number_value(json_object_get(big, "sum")), json_number_value(json_object_get(big, "sum_abs")));
    assert_true(worst <= 2e-6);
    assert_true(fabs(s - json_number_value(json_object_get(big, "sum"))) <= 2e-6 * (double)n);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_runs),
        cmocka_unit_test(test_cpu_draw_sequences),
        cmocka_unit_test(test_cpu_kernel_variant),
        cmocka_unit_test(test_cuda_big_draw),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/* Tests of the torch-compatible generators (include/rbee/sd_rng.h) against
 * torch itself: every tensor of the diffusers fixtures' rng/ files (CPU
 * bitwise, CUDA within 2e-6), the SHA-256 and float64 sums that rng.json
 * records of the full tensors (also those stored truncated), consecutive
 * draws, seeds at and above 2^32, the random draws recorded in the pipeline
 * runs (refs/<pipeline>/<run>.safetensors) and their initial latents, plus
 * the variants, the layout rules and bad input. */
#include "testutil.h"
#include "tu_sha256.h"

#include "rbee/safetensors.h"
#include "rbee/sd_rng.h"
#include "sd/sched_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_sha256_known(void **state) {
    (void)state;
    char hex[65];
    tu_sha256 s;
    tu_sha256_init(&s);
    tu_sha256_update(&s, "abc", 3);
    tu_sha256_hex(&s, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    tu_sha256_init(&s);
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    tu_sha256_update(&s, m, strlen(m));
    tu_sha256_hex(&s, hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

/* ---------------------------------------------------------------- helpers */
static float *draw(rb_torch_rng_kind kind, uint64_t seed, size_t n) {
    rb_torch_rng g;
    TU_OK(rb_torch_rng_init(&g, kind, seed));
    float *x = malloc(n * sizeof *x + 1);
    assert_non_null(x);
    TU_OK(rb_torch_randn(&g, x, n));
    return x;
}

static void assert_bitwise(const float *a, const float *ref, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &ref[i], 4) != 0)
            fail_msg("%s[%zu]: %.9g, torch %.9g", what, i, (double)a[i], (double)ref[i]);
}

static double max_abs_diff(const float *a, const float *ref, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)ref[i]));
    return m;
}

/* diffusers' JSON (bare -Infinity tokens accepted) */
static json_t *load_json(const char *rel) {
    char p[1024];
    rb_error err;
    json_t *j = rb_sched_json_load(tu_fixture(p, sizeof p, rel), &err);
    if (!j) fail_msg("%s: %s", rel, err.msg);
    return j;
}

/* Compensated (Neumaier) float64 sum: the exact sum to well below the
 * rounding error of any plain float64 summation order. */
static void exact_sums(const float *x, size_t n, double *sum, double *sum_abs) {
    double s = 0, c = 0, a = 0, ca = 0;
    for (size_t i = 0; i < n; i++) {
        double v = x[i], t = s + v;
        c += fabs(s) >= fabs(v) ? (s - t) + v : (v - t) + s;
        s = t;
        double va = fabs(v), ta = a + va;
        ca += a >= va ? (a - ta) + va : (va - ta) + a;
        a = ta;
    }
    *sum = s + c;
    *sum_abs = a + ca;
}

/* ---------------------------------------------------------------- fixture tensors */
static size_t shape_numel(const char *shape_txt) {
    size_t n = 1;
    const char *p = shape_txt;
    while (*p) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        assert_true(end != p);
        n *= v;
        p = *end == 'x' ? end + 1 : end;
        if (*end && *end != 'x') break;
    }
    return n;
}

/* Checks every tensor of one rng fixture file: returns how many values. */
static size_t check_rng_file(const char *rel, rb_torch_rng_kind kind, double tol) {
    char p[1024];
    rb_st_set *st = NULL;
    rb_error err;
    TU_OK(rb_st_open(tu_fixture(p, sizeof p, rel), &st, &err));
    size_t total = 0;
    for (int64_t i = 0; i < rb_st_n_tensors(st); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        assert_int_equal(t->dtype, RB_F32);
        size_t stored = t->nbytes / 4;
        unsigned long long seed;
        char rest[64];
        assert_int_equal(sscanf(strchr(t->name, '.') + 1, "seed%llu.%63s", &seed, rest), 2);
        float *mine;
        if (strncmp(rest, "seq.draw", 8) == 0) {
            int k = atoi(rest + 8);
            rb_torch_rng g;
            TU_OK(rb_torch_rng_init(&g, kind, seed));
            mine = malloc(256 * sizeof *mine);
            assert_non_null(mine);
            for (int d = 0; d <= k; d++) TU_OK(rb_torch_randn(&g, mine, 256));
            assert_int_equal(stored, 256);
        } else {
            size_t n = shape_numel(rest);
            assert_true(stored <= n);
            mine = draw(kind, seed, n);
        }
        if (tol == 0) {
            assert_bitwise(mine, t->data, stored, t->name);
        } else {
            double d = max_abs_diff(mine, t->data, stored);
            if (!(d <= tol)) fail_msg("%s: max |diff| %.3g > %.3g", t->name, d, tol);
        }
        total += stored;
        free(mine);
    }
    rb_st_close(st);
    return total;
}

static void test_cpu_fixture_tensors_bitwise(void **state) {
    (void)state;
    size_t n = check_rng_file("diffusers/rng/torch_randn_cpu.safetensors", RB_TORCH_RNG_CPU, 0.0);
    assert_true(n > 40000);
}

static void test_cuda_fixture_tensors(void **state) {
    (void)state;
    size_t n = check_rng_file("diffusers/rng/torch_randn_cuda.safetensors", RB_TORCH_RNG_CUDA, 2e-6);
    assert_true(n > 40000);
}

/* rng.json: SHA-256 of the full tensor's bytes (CPU), its float64 sum and sum
 * of |x| (both devices) and first values, for every shape and seed, including
 * the tensors the safetensors file stores truncated. */
static void test_full_tensor_hashes_and_sums(void **state) {
    (void)state;
    json_t *root = load_json("diffusers/rng/rng.json");
    json_t *entries = json_object_get(root, "entries");
    assert_non_null(entries);
    const char *key;
    json_t *e;
    int n_cpu = 0, n_cuda = 0;
    json_object_foreach(entries, key, e) {
        json_t *jshape = json_object_get(e, "shape");
        if (!jshape) continue; /* seq / global_generator_equal notes */
        const char *dev = json_string_value(json_object_get(e, "device"));
        rb_torch_rng_kind kind = strcmp(dev, "cuda") == 0 ? RB_TORCH_RNG_CUDA : RB_TORCH_RNG_CPU;
        uint64_t seed = (uint64_t)json_integer_value(json_object_get(e, "seed"));
        size_t n = 1;
        for (size_t d = 0; d < json_array_size(jshape); d++) n *= (size_t)json_integer_value(json_array_get(jshape, d));
        float *x = draw(kind, seed, n);
        double sum, sum_abs;
        exact_sums(x, n, &sum, &sum_abs);
        double ref_sum = json_real_value(json_object_get(e, "sum"));
        double ref_abs = json_real_value(json_object_get(e, "sum_abs"));
        json_t *first = json_object_get(e, "first8");
        if (kind == RB_TORCH_RNG_CPU) {
            char hex[65];
            tu_sha256_floats_le(x, n, hex);
            if (strcmp(hex, json_string_value(json_object_get(e, "sha256_f32le"))) != 0)
                fail_msg("%s: sha256 of the full tensor differs", key);
            /* The tensors are bitwise torch's; the recorded sums carry only
             * torch's own float64 rounding: a blocked/pairwise sum of n terms
             * errs by at most about log2(n) * 2^-53 * sum|x|. */
            double tol = (log2((double)n) + 2.0) * 0x1p-53 * ref_abs;
            if (fabs(sum - ref_sum) > tol || fabs(sum_abs - ref_abs) > tol)
                fail_msg("%s: sums %.17g %.17g vs torch %.17g %.17g (tol %.3g)", key, sum, sum_abs, ref_sum, ref_abs,
                         tol);
            for (size_t i = 0; i < json_array_size(first); i++)
                assert_true(x[i] == (float)json_real_value(json_array_get(first, i)));
            n_cpu++;
        } else {
            /* each value within 2e-6 of the GPU's: the sums within n * 2e-6 */
            if (fabs(sum - ref_sum) > 2e-6 * (double)n || fabs(sum_abs - ref_abs) > 2e-6 * (double)n)
                fail_msg("%s: sums %.9g %.9g vs torch %.9g %.9g", key, sum, sum_abs, ref_sum, ref_abs);
            for (size_t i = 0; i < json_array_size(first); i++)
                assert_true(fabs(x[i] - json_real_value(json_array_get(first, i))) <= 2e-6);
            n_cuda++;
        }
        free(x);
    }
    assert_int_equal(n_cpu, 40);
    assert_int_equal(n_cuda, 40);
    json_decref(root);
}

/* ---------------------------------------------------------------- seeds, streams */
static void test_seed_low_32_bits(void **state) {
    (void)state;
    static const size_t sizes[] = {1, 7, 64, 100};
    for (size_t k = 0; k < 4; k++) {
        size_t n = sizes[k];
        float *a = draw(RB_TORCH_RNG_CPU, 42, n), *b = draw(RB_TORCH_RNG_CPU, (UINT64_C(1) << 32) + 42, n);
        float *c = draw(RB_TORCH_RNG_CPU, 0, n), *d = draw(RB_TORCH_RNG_CPU, UINT64_C(1) << 32, n);
        float *e = draw(RB_TORCH_RNG_CPU, UINT64_C(0xdeadbeef00000001), n), *f = draw(RB_TORCH_RNG_CPU, 1, n);
        assert_memory_equal(a, b, n * 4);
        assert_memory_equal(c, d, n * 4);
        assert_memory_equal(e, f, n * 4);
        assert_true(memcmp(a, c, n * 4) != 0);
        free(a), free(b), free(c), free(d), free(e), free(f);
    }
    /* the CUDA key takes all 64 bits */
    float *a = draw(RB_TORCH_RNG_CUDA, 42, 8), *b = draw(RB_TORCH_RNG_CUDA, (UINT64_C(1) << 32) + 42, 8);
    assert_true(memcmp(a, b, 32) != 0);
    free(a), free(b);
}

/* Values depend on each call's numel, and the stream continues: the second
 * draw of a generator equals the tail of what one draw would not give. */
static void test_stream_continues(void **state) {
    (void)state;
    rb_torch_rng g;
    float x[300], y[300];
    /* numel >= 16: a call consumes exactly numel words (plus 16 on a ragged tail) */
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, 7));
    TU_OK(rb_torch_randn(&g, x, 32));
    TU_OK(rb_torch_randn(&g, x + 32, 32));
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, 7));
    TU_OK(rb_torch_randn(&g, y, 64));
    assert_memory_equal(x, y, 64 * 4); /* blocks of 16 do not straddle the two calls */
    /* numel < 16: the Box-Muller pair's second value is kept across calls */
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, 7));
    TU_OK(rb_torch_randn(&g, x, 1));
    TU_OK(rb_torch_randn(&g, x + 1, 1));
    TU_OK(rb_torch_randn(&g, x + 2, 3));
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, 7));
    TU_OK(rb_torch_randn(&g, y, 5));
    assert_memory_equal(x, y, 5 * 4);
    /* numel 0 draws nothing */
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, 7));
    TU_OK(rb_torch_randn(&g, NULL, 0));
    TU_OK(rb_torch_randn(&g, x, 20));
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, 7));
    TU_OK(rb_torch_randn(&g, y, 20));
    assert_memory_equal(x, y, 20 * 4);
    /* CUDA: each call starts a new counter block (offset + 4) */
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CUDA, 3));
    TU_OK(rb_torch_randn(&g, x, 10));
    TU_OK(rb_torch_randn(&g, x + 10, 10));
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CUDA, 3));
    TU_OK(rb_torch_randn(&g, y, 20));
    assert_memory_equal(x, y, 10 * 4);                 /* element i of a call does not depend on numel */
    assert_true(memcmp(x + 10, y + 10, 10 * 4) != 0); /* but the second call is another block */
    assert_int_equal(g.philox_offset, 4);
}

/* The CUDA layout beyond 256 * grid, on a small pretend GPU (1 SM of 256
 * threads: 256 elements per component): element e of a draw of 3 * 256 + 5
 * values is component e / 256 of thread e % 256's curand_normal4, and a
 * draw past 4 components takes a second counter round and offset 8. */
static void test_cuda_grid_stride_layout(void **state) {
    (void)state;
    rb_torch_rng g, h;
    size_t n = 3 * 256 + 5;
    float *big = malloc(n * 4), *small = malloc(256 * 4);
    assert_non_null(big);
    assert_non_null(small);
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CUDA, 11));
    TU_OK(rb_torch_rng_set_cuda_device(&g, 1, 256));
    assert_int_equal(rb_torch_rng_cuda_simple_limit(&g), 256);
    TU_OK(rb_torch_randn(&g, big, n));
    assert_int_equal(g.philox_offset, 4);
    TU_OK(rb_torch_rng_init(&h, RB_TORCH_RNG_CUDA, 11));
    TU_OK(rb_torch_randn(&h, small, 256)); /* the default big GPU: component 0 everywhere */
    assert_memory_equal(big, small, 256 * 4);
    /* components 0 and 1 of a thread are one Box-Muller pair (same radius) */
    for (size_t t = 0; t < 256; t += 37) {
        double r2 = (double)big[t] * big[t] + (double)big[256 + t] * big[256 + t];
        assert_true(r2 > 0 && r2 < 100);
        assert_true(big[t] != big[256 + t] && big[512 + t] != big[t]);
    }
    free(big);
    n = 4 * 256 + 1; /* one element into the second round */
    big = malloc(n * 4);
    assert_non_null(big);
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CUDA, 11));
    TU_OK(rb_torch_rng_set_cuda_device(&g, 1, 256));
    TU_OK(rb_torch_randn(&g, big, n));
    assert_int_equal(g.philox_offset, 8);
    /* the second round of thread 0 is the counter the next small draw would use */
    TU_OK(rb_torch_rng_init(&h, RB_TORCH_RNG_CUDA, 11));
    TU_OK(rb_torch_randn(&h, small, 1));
    TU_OK(rb_torch_randn(&h, small, 1));
    assert_memory_equal(&big[4 * 256], &small[0], 4);
    free(big);
    free(small);
}

/* The variant for torch builds without the AVX2 kernel: identical below 16
 * elements, within float32 rounding of the AVX2 variant above. */
static void test_libm_variant(void **state) {
    (void)state;
    float *a = draw(RB_TORCH_RNG_CPU, 5, 15), *b = draw(RB_TORCH_RNG_CPU_LIBM, 5, 15);
    assert_memory_equal(a, b, 15 * 4);
    free(a), free(b);
    size_t n = 4 * 64 * 64;
    a = draw(RB_TORCH_RNG_CPU, 5, n), b = draw(RB_TORCH_RNG_CPU_LIBM, 5, n);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] != b[i]) differ++;
        if (fabs((double)a[i] - b[i]) > 2e-6 * fmax(1.0, fabs(b[i]))) fail_msg("%zu: %g vs %g", i, a[i], b[i]);
    }
    assert_true(differ > 0 && differ < n / 2); /* a last-bit difference on part of the values */
    free(a), free(b);
}

/* ---------------------------------------------------------------- pipeline runs */
/* Every rng<k> recorded in a run file is the k-th draw of the run's CPU
 * generator (meta runs[].generator.seed), and init_latents come from their
 * own generator (runs[].init_latents.seed). */
static void test_pipeline_run_draws(void **state) {
    (void)state;
    static const char *const pipes[] = {"sd15", "sd21v", "sdxl", "sd15-inpaint"};
    int n_draws = 0, n_init = 0;
    for (int p = 0; p < 4; p++) {
        char rel[256], path[1024];
        snprintf(rel, sizeof rel, "diffusers/refs/%s/meta.json", pipes[p]);
        json_t *meta = load_json(rel);
        json_t *runs = json_object_get(meta, "runs");
        for (size_t r = 0; r < json_array_size(runs); r++) {
            json_t *run = json_array_get(runs, r);
            snprintf(rel, sizeof rel, "diffusers/refs/%s/%s.safetensors", pipes[p],
                     json_string_value(json_object_get(run, "run")));
            rb_st_set *st = NULL;
            rb_error err;
            TU_OK(rb_st_open(tu_fixture(path, sizeof path, rel), &st, &err));
            rb_torch_rng g;
            TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU,
                                    (uint64_t)json_integer_value(json_object_get(json_object_get(run, "generator"), "seed"))));
            json_t *draws = json_object_get(run, "rng_draws");
            for (size_t k = 0; k < json_array_size(draws); k++) {
                json_t *shape = json_object_get(json_array_get(draws, k), "shape");
                size_t n = 1;
                for (size_t d = 0; d < json_array_size(shape); d++) n *= (size_t)json_integer_value(json_array_get(shape, d));
                char name[32];
                snprintf(name, sizeof name, "rng%zu", k);
                const rb_st_tensor *t = rb_st_find(st, name);
                assert_non_null(t);
                assert_int_equal(t->nbytes, n * 4);
                float *x = malloc(n * 4);
                assert_non_null(x);
                TU_OK(rb_torch_randn(&g, x, n));
                assert_bitwise(x, t->data, n, rel);
                free(x);
                n_draws++;
            }
            json_t *il = json_object_get(run, "init_latents");
            if (il) {
                const rb_st_tensor *t = rb_st_find(st, "init_latents");
                assert_non_null(t);
                float *x = draw(RB_TORCH_RNG_CPU, (uint64_t)json_integer_value(json_object_get(il, "seed")), t->nbytes / 4);
                assert_bitwise(x, t->data, t->nbytes / 4, rel);
                free(x);
                n_init++;
            }
            rb_st_close(st);
        }
        json_decref(meta);
    }
    assert_int_equal(n_draws, 27); /* 13 (sd15) + 6 (sd21v) + 6 (sdxl) + 2 (sd15-inpaint) */
    assert_int_equal(n_init, 20); /* every run but the 4 img2img ones */
}

/* ---------------------------------------------------------------- bad input */
static void test_bad_input(void **state) {
    (void)state;
    rb_torch_rng g;
    float x[4];
    rb_error err;
    rb_torch_rng_kind k;
    assert_int_equal(rb_torch_rng_init(NULL, RB_TORCH_RNG_CPU, 0), RB_E_INVALID);
    assert_int_equal(rb_torch_rng_init(&g, (rb_torch_rng_kind)7, 0), RB_E_INVALID);
    assert_int_equal(rb_torch_rng_init(&g, (rb_torch_rng_kind)-1, 0), RB_E_INVALID);
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, 0));
    assert_int_equal(rb_torch_randn(NULL, x, 4), RB_E_INVALID);
    assert_int_equal(rb_torch_randn(&g, NULL, 4), RB_E_INVALID);
    assert_int_equal(rb_torch_rng_set_cuda_device(&g, 132, 2048), RB_E_INVALID); /* not a CUDA generator */
    assert_int_equal(rb_torch_rng_cuda_simple_limit(&g), 0);
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CUDA, 0));
    assert_int_equal(rb_torch_rng_cuda_simple_limit(&g), 270336);
    assert_int_equal(rb_torch_rng_set_cuda_device(&g, 0, 2048), RB_E_INVALID);
    assert_int_equal(rb_torch_rng_set_cuda_device(&g, 132, 128), RB_E_INVALID);
    assert_int_equal(rb_torch_randn(&g, x, (size_t)1 << 31), RB_E_RANGE);
    assert_int_equal(g.philox_offset, 0); /* a refused draw changes nothing */
    TU_OK(rb_torch_rng_kind_parse("cpu", &k, &err));
    assert_int_equal(k, RB_TORCH_RNG_CPU);
    TU_OK(rb_torch_rng_kind_parse("gpu", &k, &err));
    assert_int_equal(k, RB_TORCH_RNG_CUDA);
    TU_OK(rb_torch_rng_kind_parse("cpu-libm", &k, &err));
    assert_int_equal(k, RB_TORCH_RNG_CPU_LIBM);
    assert_int_equal(rb_torch_rng_kind_parse("mps", &k, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "cpu, cpu-libm, cuda"));
    assert_int_equal(rb_torch_rng_kind_parse(NULL, &k, &err), RB_E_INVALID);
    assert_string_equal(rb_torch_rng_kind_name(RB_TORCH_RNG_CUDA), "cuda");
    assert_string_equal(rb_torch_rng_kind_name((rb_torch_rng_kind)9), "?");
    /* the callback adapter */
    TU_OK(rb_torch_rng_init(&g, RB_TORCH_RNG_CPU, 1));
    TU_OK(rb_torch_rng_noise(&g, x, 4));
    float *ref = draw(RB_TORCH_RNG_CPU, 1, 4);
    assert_memory_equal(x, ref, 16);
    free(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_known),
        cmocka_unit_test(test_cpu_fixture_tensors_bitwise),
        cmocka_unit_test(test_cuda_fixture_tensors),
        cmocka_unit_test(test_full_tensor_hashes_and_sums),
        cmocka_unit_test(test_seed_low_32_bits),
        cmocka_unit_test(test_stream_continues),
        cmocka_unit_test(test_cuda_grid_stride_layout),
        cmocka_unit_test(test_libm_variant),
        cmocka_unit_test(test_pipeline_run_draws),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

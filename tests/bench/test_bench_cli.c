/* `rbee bench --random tiny` through the real binary: the JSON report has
 * every field with sane values (positive, finite rates; the shape that was
 * asked for; one sample per repetition; the depth each test started from),
 * the temporary GGUF is deleted, and bad arguments exit non-zero with a
 * message instead of running. */
#include "testutil.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs cmd with TMPDIR=dir; returns the exit status and stdout in *out (malloc'ed). */
static int run(const char *dir, const char *args, char **out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "TMPDIR='%s' '%s' %s 2>/dev/null", dir, RBEE_CLI_PATH, args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    buf[len] = '\0';
    int st = pclose(f);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

static double num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v)) fail_msg("field '%s' missing or not a number", key);
    return json_number_value(v);
}

static void check_result(json_t *r, const char *test, const char *kind, int64_t n_tokens, int reps) {
    assert_string_equal(json_string_value(json_object_get(r, "test")), test);
    assert_string_equal(json_string_value(json_object_get(r, "kind")), kind);
    assert_int_equal((int64_t)num(r, "n_tokens"), n_tokens);
    assert_int_equal((int)num(r, "reps"), reps);
    const double med = num(r, "median_ts"), mean = num(r, "mean_ts");
    assert_true(isfinite(med) && med > 0);
    assert_true(isfinite(mean) && mean > 0);
    assert_true(num(r, "stddev_ts") >= 0);
    assert_true(num(r, "wall_s") > 0);
    assert_true(num(r, "cpu_s") >= 0);
    json_t *s = json_object_get(r, "samples_ts");
    assert_true(json_is_array(s));
    assert_int_equal(json_array_size(s), (size_t)reps);
    double lo = INFINITY, hi = 0;
    for (size_t i = 0; i < json_array_size(s); i++) {
        const double v = json_number_value(json_array_get(s, i));
        assert_true(v > 0 && isfinite(v));
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    assert_true(med >= lo && med <= hi); /* the median is one of (or between) the samples */
}

/* Runs args, which must succeed, and parses its JSON report (decref it). */
static json_t *run_json(const char *dir, const char *args) {
    char *out = NULL;
    int rc = run(dir, args, &out);
    if (rc != 0) fail_msg("rbee %s exited %d: %s", args, rc, out);
    json_error_t jerr;
    json_t *root = json_loads(out, 0, &jerr);
    if (!root) fail_msg("bad JSON (%s): %s", jerr.text, out);
    free(out);
    return root;
}

static void test_random_tiny_json(void **state) {
    (void)state;
    char dir[] = "/tmp/rb-bench-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    /* q4_k_m: llama-quantize's mix, q4_K with q6_K for the output and, in
     * the last of the 2 layers, attn_v and ffn_down */
    const char *types[] = {"q4_0", "q8_0", "q4_k", "f16", "q4_k_m"};
    const char *names[] = {"q4_0", "q8_0", "q4_K", "f16", "q4_K"};
    double q4k_bytes = 0;
    for (int t = 0; t < 5; t++) {
        char args[256];
        snprintf(args, sizeof args, "bench --random tiny --type %s -p 24 -n 5 -r 3 --threads 2 --json", types[t]);
        json_t *root = run_json(dir, args);
        char want_model[64];
        snprintf(want_model, sizeof want_model, "random:tiny:%s", types[t]);
        assert_string_equal(json_string_value(json_object_get(root, "model")), want_model);
        assert_string_equal(json_string_value(json_object_get(root, "backend")), "cpu");
        assert_string_equal(json_string_value(json_object_get(root, "weight_type")), names[t]);
        assert_int_equal((int)num(root, "threads"), 2);
        assert_int_equal((int64_t)num(root, "n_embd"), 256);
        assert_int_equal((int64_t)num(root, "n_layer"), 2);
        assert_int_equal((int64_t)num(root, "n_head"), 4);
        assert_int_equal((int64_t)num(root, "n_head_kv"), 2);
        assert_int_equal((int64_t)num(root, "n_ff"), 768);
        assert_int_equal((int64_t)num(root, "n_vocab"), 512);
        /* 2 x (256 x 512) embeddings/output + 2 layers x (2x256x256 + 2x256x128 + 3x256x768 + 2x256) + 256 */
        assert_int_equal((int64_t)num(root, "n_params"), 2 * 256 * 512 + 2 * (2 * 65536 + 2 * 32768 + 3 * 196608 + 512) + 256);
        assert_true(num(root, "weight_bytes") > 0);
        if (t == 2) q4k_bytes = num(root, "weight_bytes");
        if (t == 4) /* q6_K's 210 bytes a block for q4_K's 144: the output's 512 rows of one block, attn_v's
                     * 128, ffn_down's 256 of three */
            assert_int_equal((int64_t)(num(root, "weight_bytes") - q4k_bytes), (int64_t)(512 + 128 + 256 * 3) * 66);
        json_t *res = json_object_get(root, "results");
        assert_true(json_is_array(res));
        assert_int_equal(json_array_size(res), 2);
        check_result(json_array_get(res, 0), "pp24", "pp", 24, 3);
        check_result(json_array_get(res, 1), "tg5", "tg", 5, 3);
        json_decref(root);
        assert_int_equal(count_entries(dir), 0); /* the temporary GGUF is gone */
    }
    rmdir(dir);
}

/* -d: every test (prefill, decode, batched, eager) starts from a cache
 * holding D tokens, and the result says so; without -d the depth is 0 */
static void test_depth(void **state) {
    (void)state;
    char dir[] = "/tmp/rb-bench-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    json_t *root = run_json(dir, "bench --random tiny --type q8_0 -p 8 -n 4 -d 40 -r 2 --parallel 2 --compare-eager --json");
    json_t *res = json_object_get(root, "results");
    assert_int_equal(json_array_size(res), 5);
    check_result(json_array_get(res, 0), "pp8", "pp", 8, 2);
    check_result(json_array_get(res, 1), "tg4", "tg", 4, 2);
    check_result(json_array_get(res, 2), "tgb4", "tgb", 4, 2);
    check_result(json_array_get(res, 3), "tg4", "tg", 4, 2);
    check_result(json_array_get(res, 4), "tgb4", "tgb", 4, 2);
    for (size_t i = 0; i < 5; i++) assert_int_equal((int64_t)num(json_array_get(res, i), "depth"), 40);
    json_decref(root);
    root = run_json(dir, "bench --random tiny -p 8 -n 4 -r 1 --json");
    assert_int_equal((int64_t)num(json_array_get(json_object_get(root, "results"), 0), "depth"), 0);
    json_decref(root);
    assert_int_equal(count_entries(dir), 0);
    rmdir(dir);
}

/* --parallel adds one batched-decode result per count */
static void test_parallel(void **state) {
    (void)state;
    char dir[] = "/tmp/rb-bench-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    json_t *root = run_json(dir, "bench --random tiny --type q8_0 -p 0 -n 4 -r 2 --parallel 1,3 --json");
    json_t *res = json_object_get(root, "results");
    assert_int_equal(json_array_size(res), 3);
    check_result(json_array_get(res, 0), "tg4", "tg", 4, 2);
    check_result(json_array_get(res, 1), "tgb4", "tgb", 4, 2);
    check_result(json_array_get(res, 2), "tgb4", "tgb", 4, 2);
    assert_int_equal((int)num(json_array_get(res, 1), "parallel"), 1);
    assert_int_equal((int)num(json_array_get(res, 2), "parallel"), 3);
    json_decref(root);
    char *out = NULL;
    assert_int_not_equal(run(dir, "bench --random tiny -n 4 --parallel 0", &out), 0);
    free(out);
    out = NULL;
    assert_int_not_equal(run(dir, "bench --random tiny -n 4 --parallel 2,x", &out), 0);
    free(out);
    rmdir(dir);
}

static void test_bad_arguments(void **state) {
    (void)state;
    char dir[] = "/tmp/rb-bench-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *bad[] = {
        "bench --random no-such-shape --type q4_0",  /* unknown shape */
        "bench --random tiny --type q5_9",           /* unknown type */
        "bench --random tiny --type q4_1",           /* a dtype, but not a bench type */
        "bench",                                     /* no model */
        "bench -m /nonexistent/model.gguf",          /* missing file */
        "bench --random tiny -m x.gguf",             /* both */
        "bench --random tiny -p 0 -n 0",             /* nothing to do */
        "bench --random tiny -r 0",                  /* reps out of range */
        "bench --random tiny -p -3",                 /* negative */
        "bench --random tiny --threads many",        /* not a number */
        "bench -m x.gguf --type q4_0",               /* --type without --random */
        "bench --random tiny -d -1",                 /* negative depth */
        "bench --random tiny -d deep",               /* not a number */
        "bench --random tiny -d 2000000",            /* beyond the largest depth taken */
        "bench --random tiny --grammar /nonexistent.gbnf",   /* grammar file missing */
        "bench --random tiny --json-schema /nonexistent.json",
        "bench --random tiny --grammar /dev/null --json-schema /dev/null", /* both */
        "bench --random tiny --grammar /dev/null",   /* no rule root in an empty file */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = NULL;
        int rc = run(dir, bad[i], &out);
        if (rc == 0) fail_msg("'%s' succeeded", bad[i]);
        assert_int_equal(strstr(out, "\"results\"") != NULL, 0);
        free(out);
    }
    assert_int_equal(count_entries(dir), 0);
    rmdir(dir);
}

/* --grammar: the sampled and constrained decode lines, through a tokenizer
 * whose ids fit the tiny shape's 512 (the llama.cpp fixture's 259). */
static void test_grammar(void **state) {
    (void)state;
    char dir[] = "/tmp/rb-bench-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char tok[1024], gpath[1200], args[3000];
    tu_fixture(tok, sizeof tok, "llamacpp/tiny-f32.gguf");
    snprintf(gpath, sizeof gpath, "%s/g.gbnf", dir);
    FILE *f = fopen(gpath, "w");
    assert_non_null(f);
    fputs("root ::= [a-z ]{1,12} \".\"\n", f);
    fclose(f);
    snprintf(args, sizeof args, "bench --random tiny --type q8_0 -p 0 -n 6 -r 1 --grammar '%s' --tokenizer '%s'", gpath,
             tok);
    char *out = NULL;
    assert_int_equal(run(dir, args, &out), 0);
    assert_non_null(strstr(out, "grammar decode (tg6"));
    assert_non_null(strstr(out, "constrained:"));
    free(out);
    /* -n 0 leaves no decode steps to constrain */
    snprintf(args, sizeof args, "bench --random tiny -p 4 -n 0 --grammar '%s' --tokenizer '%s'", gpath, tok);
    assert_int_not_equal(run(dir, args, &out), 0);
    free(out);
    unlink(gpath);
    assert_int_equal(count_entries(dir), 0);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grammar),
        cmocka_unit_test(test_random_tiny_json),
        cmocka_unit_test(test_parallel),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

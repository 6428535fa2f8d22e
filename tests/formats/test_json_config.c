/* JSON config accessor tests: nested dotted paths, keys containing dots,
 * every typed getter and its type checks, arrays, null, random values
 * round-tripped through text, bad JSON, size cap and missing files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rbee/json_config.h"
#include "testutil.h"

static const char *k_doc =
    "{\"hidden_size\": 4096, \"rms_norm_eps\": 1e-06, \"model_type\": \"llama\",\n"
    " \"tie_word_embeddings\": true, \"bos_token_id\": null,\n"
    " \"rope_scaling\": {\"factor\": 8.0, \"type\": \"llama3\", \"low\": {\"deep\": -3}},\n"
    " \"eos_token_id\": [128001, 128008, 128009],\n"
    " \"mixed\": [1, 2.5, \"three\", null],\n"
    " \"a.b\": 11, \"a\": {\"b\": 22, \"c\": 33},\n"
    " \"empty\": [], \"obj\": {}, \"big\": 9223372036854775807, \"neg\": -9223372036854775808}";

static rb_json_config *load_doc(void) {
    rb_json_config *c = NULL;
    rb_error err;
    if (rb_json_config_parse(k_doc, strlen(k_doc), &c, &err) != RB_OK) fail_msg("%s", err.msg);
    return c;
}

static void test_scalars_and_paths(void **state) {
    (void)state;
    rb_json_config *c = load_doc();
    int64_t i;
    double d;
    bool b;
    const char *s;
    TU_OK(rb_json_config_int(c, "hidden_size", &i));
    assert_int_equal(i, 4096);
    TU_OK(rb_json_config_num(c, "hidden_size", &d)); /* integers read as numbers */
    assert_true(d == 4096.0);
    TU_OK(rb_json_config_num(c, "rms_norm_eps", &d));
    assert_true(d == 1e-6);
    assert_int_equal(rb_json_config_int(c, "rms_norm_eps", &i), RB_E_FORMAT); /* real is not int */
    TU_OK(rb_json_config_str(c, "model_type", &s));
    assert_string_equal(s, "llama");
    TU_OK(rb_json_config_bool(c, "tie_word_embeddings", &b));
    assert_true(b);
    assert_int_equal(rb_json_config_int(c, "bos_token_id", &i), RB_E_NOT_FOUND); /* null */
    assert_int_equal(rb_json_config_int(c, "nope", &i), RB_E_NOT_FOUND);
    TU_OK(rb_json_config_num(c, "rope_scaling.factor", &d));
    assert_true(d == 8.0);
    TU_OK(rb_json_config_str(c, "rope_scaling.type", &s));
    assert_string_equal(s, "llama3");
    TU_OK(rb_json_config_int(c, "rope_scaling.low.deep", &i));
    assert_int_equal(i, -3);
    assert_int_equal(rb_json_config_int(c, "rope_scaling.low.deeper", &i), RB_E_NOT_FOUND);
    assert_int_equal(rb_json_config_int(c, "rope_scaling.type.x", &i), RB_E_NOT_FOUND); /* through a string */
    assert_int_equal(rb_json_config_int(c, "rope_scaling", &i), RB_E_FORMAT);             /* an object */
    assert_int_equal(rb_json_config_int(c, "rope_scaling.", &i), RB_E_NOT_FOUND);
    assert_int_equal(rb_json_config_int(c, ".rope_scaling", &i), RB_E_NOT_FOUND);
    assert_int_equal(rb_json_config_int(c, "", &i), RB_E_NOT_FOUND);
    /* A literal dotted key wins; the nested path is still reachable. */
    TU_OK(rb_json_config_int(c, "a.b", &i));
    assert_int_equal(i, 11);
    TU_OK(rb_json_config_int(c, "a.c", &i));
    assert_int_equal(i, 33);
    TU_OK(rb_json_config_int(c, "big", &i));
    assert_true(i == INT64_MAX);
    TU_OK(rb_json_config_int(c, "neg", &i));
    assert_true(i == INT64_MIN);
    /* Type checks on every getter. */
    assert_int_equal(rb_json_config_bool(c, "hidden_size", &b), RB_E_FORMAT);
    assert_int_equal(rb_json_config_str(c, "hidden_size", &s), RB_E_FORMAT);
    assert_int_equal(rb_json_config_num(c, "model_type", &d), RB_E_FORMAT);
    assert_int_equal(rb_json_config_int(c, "tie_word_embeddings", &i), RB_E_FORMAT);
    assert_non_null(rb_json_config_root(c));
    rb_json_config_free(c);
}

static void test_arrays(void **state) {
    (void)state;
    rb_json_config *c = load_doc();
    size_t n;
    int64_t i;
    double d;
    const char *s;
    TU_OK(rb_json_config_arr_len(c, "eos_token_id", &n));
    assert_int_equal(n, 3);
    static const int64_t want[3] = {128001, 128008, 128009};
    for (size_t k = 0; k < 3; k++) {
        TU_OK(rb_json_config_arr_int(c, "eos_token_id", k, &i));
        assert_int_equal(i, want[k]);
        TU_OK(rb_json_config_arr_num(c, "eos_token_id", k, &d));
        assert_true(d == (double)want[k]);
    }
    assert_int_equal(rb_json_config_arr_int(c, "eos_token_id", 3, &i), RB_E_RANGE);
    TU_OK(rb_json_config_arr_len(c, "mixed", &n));
    assert_int_equal(n, 4);
    TU_OK(rb_json_config_arr_int(c, "mixed", 0, &i));
    assert_int_equal(i, 1);
    assert_int_equal(rb_json_config_arr_int(c, "mixed", 1, &i), RB_E_FORMAT);
    TU_OK(rb_json_config_arr_num(c, "mixed", 1, &d));
    assert_true(d == 2.5);
    TU_OK(rb_json_config_arr_str(c, "mixed", 2, &s));
    assert_string_equal(s, "three");
    assert_int_equal(rb_json_config_arr_str(c, "mixed", 0, &s), RB_E_FORMAT);
    assert_int_equal(rb_json_config_arr_num(c, "mixed", 3, &d), RB_E_FORMAT); /* null element */
    TU_OK(rb_json_config_arr_len(c, "empty", &n));
    assert_int_equal(n, 0);
    assert_int_equal(rb_json_config_arr_int(c, "empty", 0, &i), RB_E_RANGE);
    assert_int_equal(rb_json_config_arr_len(c, "obj", &n), RB_E_FORMAT);
    assert_int_equal(rb_json_config_arr_len(c, "hidden_size", &n), RB_E_FORMAT);
    assert_int_equal(rb_json_config_arr_len(c, "missing", &n), RB_E_NOT_FOUND);
    assert_int_equal(rb_json_config_arr_int(c, "hidden_size", 0, &i), RB_E_FORMAT);
    rb_json_config_free(c);
}

/* Random values written as text (%.17g round-trips doubles) read back exactly. */
static void test_random_values(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 2024);
    enum { N = 37 };
    double vals[N];
    int64_t ints[N];
    char *text = malloc(65536);
    size_t len = (size_t)snprintf(text, 65536, "{\"outer\":{");
    for (int k = 0; k < N; k++) {
        vals[k] = (double)tu_rng_normal(&r) * pow(10.0, (double)(int)(tu_rng_u64(&r) % 40) - 20.0);
        ints[k] = (int64_t)(tu_rng_u64(&r) >> 1) * (k % 2 ? -1 : 1);
        len += (size_t)snprintf(text + len, 65536 - len, "%s\"v%d\":{\"x\":%.17g,\"i\":%lld}", k ? "," : "", k, vals[k],
                                (long long)ints[k]);
    }
    snprintf(text + len, 65536 - len, "}}");
    rb_json_config *c = NULL;
    TU_OK(rb_json_config_parse(text, strlen(text), &c, NULL));
    for (int k = 0; k < N; k++) {
        char p[64];
        double d;
        int64_t i;
        snprintf(p, sizeof p, "outer.v%d.x", k);
        TU_OK(rb_json_config_num(c, p, &d));
        assert_true(d == vals[k]);
        snprintf(p, sizeof p, "outer.v%d.i", k);
        TU_OK(rb_json_config_int(c, p, &i));
        assert_true(i == ints[k]);
    }
    rb_json_config_free(c);
    free(text);
}

static void test_bad_input(void **state) {
    (void)state;
    rb_json_config *c = (rb_json_config *)1;
    rb_error err;
    static const char *const bad[] = {"", "{", "{\"a\":}", "[1,2]", "42", "\"s\"", "{\"a\":1,\"a\":2}", "{\"a\":1} x",
                                      "{'a':1}", "{\"a\":1,}", "nul"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        assert_int_equal(rb_json_config_parse(bad[k], strlen(bad[k]), &c, &err), RB_E_FORMAT);
        assert_null(c);
        assert_true(err.msg[0] != '\0');
    }
    assert_int_equal(rb_json_config_parse("{\"a\":1,\"a\":2}", 13, &c, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "duplicate"));
    /* Length is honoured: trailing bytes beyond len are not parsed. */
    TU_OK(rb_json_config_parse("{\"a\":1}garbage", 7, &c, NULL));
    rb_json_config_free(c);
    assert_int_equal(rb_json_config_parse(NULL, 5, &c, &err), RB_E_INVALID);

    assert_int_equal(rb_json_config_load("/nonexistent/config.json", &c, &err), RB_E_NOT_FOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/config.json"));
    /* Size cap: a sparse file just over 64 MiB is refused before parsing. */
    char tmpl[] = "/tmp/rbee_cfg_XXXXXX";
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (64 << 20) + 1), 0);
    close(fd);
    assert_int_equal(rb_json_config_load(tmpl, &c, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "limit"));
    /* A real file. */
    FILE *f = fopen(tmpl, "w");
    assert_non_null(f);
    fputs("{\"num_attention_heads\": 32, \"nested\": {\"k\": \"v\"}}\n", f);
    fclose(f);
    TU_OK(rb_json_config_load(tmpl, &c, NULL));
    int64_t i;
    const char *s;
    TU_OK(rb_json_config_int(c, "num_attention_heads", &i));
    assert_int_equal(i, 32);
    TU_OK(rb_json_config_str(c, "nested.k", &s));
    assert_string_equal(s, "v");
    rb_json_config_free(c);
    remove(tmpl);
    rb_json_config_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars_and_paths),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_random_values),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

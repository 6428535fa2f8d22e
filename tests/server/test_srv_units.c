/* Unit tests of the worker's pure parts: UTF-8 validation (hand-checked
 * vectors from the Unicode standard's well-formedness table), the
 * constant-time compare, request validation (every field's type and range,
 * stop strings, the context fit, both error shapes), heartbeat backoff and
 * body, the Prometheus rendering, and command-line parsing. */
#include "testutil.h"

#include "server/srv_config.h"
#include "server/srv_hive.h"
#include "server/srv_metrics.h"
#include "server/srv_request.h"
#include "server/srv_util.h"

#include <stdlib.h>
#include <string.h>

static void test_utf8(void **state) {
    (void)state;
    static const struct { const char *s; size_t len; bool ok; size_t bad; } v[] = {
        {"plain ascii", 11, true, 0},
        {"\xC3\xA9t\xC3\xA9", 6, true, 0},             /* été */
        {"\xE2\x82\xAC", 3, true, 0},                   /* € */
        {"\xF0\x9F\x98\x80", 4, true, 0},               /* U+1F600 */
        {"\xF4\x8F\xBF\xBF", 4, true, 0},               /* U+10FFFF */
        {"\xED\x9F\xBF", 3, true, 0},                   /* U+D7FF */
        {"ab\xC0\xAF", 4, false, 2},                    /* overlong '/' */
        {"\xE0\x80\xAF", 3, false, 0},                  /* overlong 3-byte */
        {"x\xED\xA0\x80", 4, false, 1},                 /* surrogate U+D800 */
        {"\xF4\x90\x80\x80", 4, false, 0},              /* > U+10FFFF */
        {"abc\xE2\x82", 5, false, 3},                   /* truncated */
        {"\x80", 1, false, 0},                          /* lone continuation */
        {"ok\xFF", 3, false, 2},
        {"\xC3\xA9\xC3", 3, false, 2},
        {"a\0b", 3, true, 0},                           /* NUL is valid UTF-8 */
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        size_t bad = 999;
        bool ok = srv_utf8_valid(v[i].s, v[i].len, &bad);
        if (ok != v[i].ok) fail_msg("vector %zu: expected %d", i, v[i].ok);
        if (!ok) assert_int_equal(bad, v[i].bad);
    }
    /* Random valid text built from code points round-trips as valid. */
    tu_rng r;
    tu_rng_seed(&r, 42);
    for (int t = 0; t < 200; t++) {
        unsigned char buf[64];
        size_t n = 0;
        while (n < 56) {
            uint32_t cp = (uint32_t)(tu_rng_u64(&r) % 0x110000);
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            if (cp < 0x80) buf[n++] = (unsigned char)cp;
            else if (cp < 0x800) { buf[n++] = (unsigned char)(0xC0 | (cp >> 6)); buf[n++] = (unsigned char)(0x80 | (cp & 0x3F)); }
            else if (cp < 0x10000) { buf[n++] = (unsigned char)(0xE0 | (cp >> 12)); buf[n++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); buf[n++] = (unsigned char)(0x80 | (cp & 0x3F)); }
            else { buf[n++] = (unsigned char)(0xF0 | (cp >> 18)); buf[n++] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F)); buf[n++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); buf[n++] = (unsigned char)(0x80 | (cp & 0x3F)); }
        }
        assert_true(srv_utf8_valid((const char *)buf, n, NULL));
        /* cutting the last sequence short must be caught */
        size_t last = n - 1;
        while (last > 0 && (buf[last] & 0xC0) == 0x80) last--;
        if (buf[last] >= 0xC0) assert_false(srv_utf8_valid((const char *)buf, n - 1, NULL));
    }
}

static void test_ct_equal(void **state) {
    (void)state;
    assert_true(srv_ct_equal("secret-token", 12, "secret-token", 12));
    assert_false(srv_ct_equal("secret-tokeN", 12, "secret-token", 12));
    assert_false(srv_ct_equal("secret", 6, "secret-token", 12));
    assert_false(srv_ct_equal("secret-token-x", 14, "secret-token", 12));
    assert_false(srv_ct_equal("", 0, "x", 1));
    assert_true(srv_ct_equal("", 0, "", 0));
}

static json_t *parse(const char *s, srv_errors *e) { return srv_parse_body(s, strlen(s), e); }

static bool has_error(const srv_errors *e, const char *field, const char *constraint) {
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->items[i].field, field) == 0 && strncmp(e->items[i].constraint, constraint, strlen(constraint)) == 0)
            return true;
    return false;
}

static void test_parse_body(void **state) {
    (void)state;
    srv_errors e = {.n = 0};
    assert_null(parse("{\"prompt\": ", &e));
    assert_true(has_error(&e, "body", "json"));
    e.n = 0;
    assert_null(srv_parse_body("{\"prompt\":\"\xC3\x28\"}", 14, &e));
    assert_true(has_error(&e, "body", "utf8"));
    assert_non_null(strstr(e.items[0].message, "offset 11"));
    e.n = 0;
    assert_null(parse("[1,2]", &e));
    assert_true(has_error(&e, "body", "json_object"));
    e.n = 0;
    assert_null(srv_parse_body("", 0, &e));
    e.n = 0;
    assert_null(parse("{\"a\":1,\"a\":2}", &e)); /* duplicate keys are ambiguous */
    e.n = 0;
    json_t *o = parse("{\"prompt\":\"hi\"}", &e);
    assert_non_null(o);
    assert_int_equal(e.n, 0);
    json_decref(o);
}

static void test_params_valid(void **state) {
    (void)state;
    srv_errors e = {.n = 0};
    json_t *o = parse("{\"operation\":\"infer\",\"hive_id\":\"h1\",\"model\":\"m\",\"prompt\":\"And God\",\"max_tokens\":17,"
                      "\"temperature\":0.25,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"repetition_penalty\":1.1,"
                      "\"seed\":12345,\"stop\":[\"\\n\",\"Amen\"]}",
                      &e);
    assert_non_null(o);
    srv_gen_request r;
    memset(&r, 0, sizeof r);
    const char *prompt = NULL;
    srv_request_read_rbee(o, &prompt, &e);
    srv_request_read_params(o, SRV_API_RBEE, &r, &e);
    assert_int_equal(e.n, 0);
    assert_string_equal(prompt, "And God");
    assert_int_equal(r.max_tokens, 17);
    assert_float_equal(r.sampling.temperature, 0.25f, 0);
    assert_float_equal(r.sampling.top_p, 0.9f, 0);
    assert_int_equal(r.sampling.top_k, 40);
    assert_float_equal(r.sampling.min_p, 0.05f, 0);
    assert_float_equal(r.sampling.repetition_penalty, 1.1f, 0);
    assert_int_equal(r.sampling.seed, 12345);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[0], "\n");
    assert_string_equal(r.stop[1], "Amen");
    assert_string_equal(r.model, "m");
    srv_gen_request_free(&r);
    json_decref(o);
    /* untagged form, integer temperature, stop as one string */
    o = parse("{\"prompt\":\"x\",\"max_tokens\":1,\"temperature\":2,\"stop\":\"END\"}", &e);
    memset(&r, 0, sizeof r);
    srv_request_read_rbee(o, &prompt, &e);
    srv_request_read_params(o, SRV_API_RBEE, &r, &e);
    assert_int_equal(e.n, 0);
    assert_float_equal(r.sampling.temperature, 2.0f, 0);
    assert_int_equal(r.n_stop, 1);
    srv_gen_request_free(&r);
    json_decref(o);
}

static void test_params_invalid(void **state) {
    (void)state;
    srv_errors e = {.n = 0};
    json_t *o = parse("{\"operation\":\"train\",\"prompt\":7,\"max_tokens\":0,\"temperature\":2.5,\"top_p\":-0.1,"
                      "\"top_k\":\"5\",\"min_p\":1.5,\"repetition_penalty\":0,\"seed\":1.5,"
                      "\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"stream\":\"yes\",\"n\":2,"
                      "\"frequency_penalty\":3}",
                      &e);
    assert_non_null(o);
    srv_gen_request r;
    memset(&r, 0, sizeof r);
    const char *prompt = NULL;
    srv_request_read_rbee(o, &prompt, &e);
    srv_request_read_params(o, SRV_API_RBEE, &r, &e);
    assert_null(prompt);
    assert_true(has_error(&e, "operation", "value"));
    assert_true(has_error(&e, "prompt", "type:string"));
    assert_true(has_error(&e, "max_tokens", "range"));
    assert_true(has_error(&e, "temperature", "range:0..2"));
    assert_true(has_error(&e, "top_p", "range:0..1"));
    assert_true(has_error(&e, "top_k", "type:integer"));
    assert_true(has_error(&e, "min_p", "range"));
    assert_true(has_error(&e, "repetition_penalty", "range"));
    assert_true(has_error(&e, "seed", "type:integer"));
    assert_true(has_error(&e, "stop", "max_items:4"));
    assert_true(has_error(&e, "stream", "type:boolean"));
    assert_true(has_error(&e, "n", "value:1"));
    assert_true(has_error(&e, "frequency_penalty", "range"));
    srv_gen_request_free(&r);
    json_decref(o);
    /* stop strings: too long, empty, wrong type */
    char big[300];
    memset(big, 'x', 101);
    big[101] = '\0';
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"p\",\"stop\":[\"%s\",\"\",3]}", big);
    e.n = 0;
    o = parse(body, &e);
    memset(&r, 0, sizeof r);
    srv_request_read_params(o, SRV_API_RBEE, &r, &e);
    assert_int_equal(e.n, 3);
    assert_true(has_error(&e, "stop", "length:1..100"));
    assert_true(has_error(&e, "stop", "type:string"));
    assert_int_equal(r.n_stop, 0);
    srv_gen_request_free(&r);
    json_decref(o);
    /* missing and empty prompt */
    e.n = 0;
    o = parse("{\"max_tokens\":3}", &e);
    srv_request_read_rbee(o, &prompt, &e);
    assert_true(has_error(&e, "prompt", "required"));
    json_decref(o);
    e.n = 0;
    o = parse("{\"prompt\":\"\"}", &e);
    srv_request_read_rbee(o, &prompt, &e);
    assert_true(has_error(&e, "prompt", "non_empty"));
    json_decref(o);
}

static void test_error_shapes(void **state) {
    (void)state;
    srv_errors e = {.n = 0};
    srv_errors_add(&e, "temperature", "range:0..2", "temperature must be between 0 and 2, got %g", 9.0);
    srv_errors_add(&e, "top_p", "range:0..1", "top_p bad");
    json_t *j = srv_errors_json(&e);
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(s, "{\"errors\":[{\"constraint\":\"range:0..2\",\"field\":\"temperature\",\"message\":"
                           "\"temperature must be between 0 and 2, got 9\"},{\"constraint\":\"range:0..1\",\"field\":"
                           "\"top_p\",\"message\":\"top_p bad\"}]}");
    free(s);
    json_decref(j);
    j = srv_errors_openai_json(&e);
    json_t *err = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(err, "param")), "temperature");
    assert_string_equal(json_string_value(json_object_get(err, "message")),
                        "temperature must be between 0 and 2, got 9; top_p bad");
    json_decref(j);
}

static void test_chat_messages(void **state) {
    (void)state;
    srv_errors e = {.n = 0};
    json_t *o = parse("{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":"
                      "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}]}",
                      &e);
    json_t *m = srv_request_read_chat(o, &e);
    assert_int_equal(e.n, 0);
    assert_int_equal(json_array_size(m), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(m, 1), "content")), "ab");
    json_decref(m);
    json_decref(o);
    const char *bad[] = {"{}", "{\"messages\":[]}", "{\"messages\":\"hi\"}", "{\"messages\":[{\"content\":\"x\"}]}",
                         "{\"messages\":[{\"role\":\"user\",\"content\":5}]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e.n = 0;
        o = parse(bad[i], &e);
        assert_null(srv_request_read_chat(o, &e));
        assert_true(e.n >= 1);
        json_decref(o);
    }
}

static void test_context_fit(void **state) {
    (void)state;
    rb_tokenizer *tok = NULL;
    TU_OK(rb_tokenizer_load_hf(RBEE_DEFAULT_MODEL_DIR "/hf/tokenizer.json", NULL, &tok, NULL));
    srv_gen_request r;
    memset(&r, 0, sizeof r);
    srv_errors e = {.n = 0};
    const char *p = "And God said unto Moses";
    int32_t *ids = NULL;
    size_t n = 0;
    TU_OK(rb_tokenizer_encode(tok, p, strlen(p), RB_TOK_ADD_SPECIAL, &ids, &n, NULL));
    free(ids);
    /* default max_tokens fills the room */
    srv_request_set_prompt(&r, tok, p, strlen(p), RB_TOK_ADD_SPECIAL, 32, 0, &e);
    assert_int_equal(e.n, 0);
    assert_int_equal(r.n_prompt, n);
    assert_int_equal(r.max_tokens, 32 - (int64_t)n);
    srv_gen_request_free(&r);
    /* exactly fits / one too many */
    r.max_tokens = 32 - (int64_t)n;
    srv_request_set_prompt(&r, tok, p, strlen(p), RB_TOK_ADD_SPECIAL, 32, 0, &e);
    assert_int_equal(e.n, 0);
    srv_gen_request_free(&r);
    r.max_tokens = 33 - (int64_t)n;
    srv_request_set_prompt(&r, tok, p, strlen(p), RB_TOK_ADD_SPECIAL, 32, 0, &e);
    assert_true(has_error(&e, "max_tokens", "range"));
    assert_null(r.prompt);
    srv_gen_request_free(&r);
    /* prompt alone too long */
    e.n = 0;
    srv_request_set_prompt(&r, tok, p, strlen(p), RB_TOK_ADD_SPECIAL, (int64_t)n, 0, &e);
    assert_true(has_error(&e, "prompt", "context"));
    srv_gen_request_free(&r);
    rb_tokenizer_free(tok);
}

static void test_backoff(void **state) {
    (void)state;
    assert_int_equal(srv_hive_backoff_ms(30000, 0), 30000);
    assert_int_equal(srv_hive_backoff_ms(30000, 1), 500);
    assert_int_equal(srv_hive_backoff_ms(30000, 2), 1000);
    assert_int_equal(srv_hive_backoff_ms(30000, 3), 2000);
    assert_int_equal(srv_hive_backoff_ms(30000, 9), 120000 < 500 * 256 ? 120000 : 500 * 256);
    assert_int_equal(srv_hive_backoff_ms(30000, 50), 120000);
    assert_int_equal(srv_hive_backoff_ms(200, 1), 200);
    assert_int_equal(srv_hive_backoff_ms(200, 2), 400);
    assert_int_equal(srv_hive_backoff_ms(200, 3), 800);
    assert_int_equal(srv_hive_backoff_ms(200, 4), 800);
}

static void test_heartbeat_json(void **state) {
    (void)state;
    srv_hive_opts o = {.worker_id = "w-1", .model_id = "rbee-default", .device = "cuda:1", .version = "0.1.0",
                       .port = 8123, .interval_ms = 1000};
    char *s = srv_hive_heartbeat_json(&o, "busy");
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    assert_non_null(j);
    json_t *w = json_object_get(j, "worker");
    assert_string_equal(json_string_value(json_object_get(w, "id")), "w-1");
    assert_string_equal(json_string_value(json_object_get(w, "model_id")), "rbee-default");
    assert_string_equal(json_string_value(json_object_get(w, "device")), "cuda:1");
    assert_int_equal(json_integer_value(json_object_get(w, "port")), 8123);
    assert_string_equal(json_string_value(json_object_get(w, "status")), "busy");
    assert_string_equal(json_string_value(json_object_get(w, "implementation")), "llm-worker-rbee");
    const char *ts = json_string_value(json_object_get(j, "timestamp"));
    assert_non_null(ts);
    /* 2025-01-02T03:04:05.678Z */
    assert_int_equal(strlen(ts), 24);
    assert_true(ts[4] == '-' && ts[10] == 'T' && ts[19] == '.' && ts[23] == 'Z');
    json_decref(j);
    free(s);
}

static void test_metrics_render(void **state) {
    (void)state;
    srv_metrics m;
    srv_metrics_init(&m);
    srv_metrics_request(&m, SRV_ROUTE_COMPLETIONS, 200);
    srv_metrics_request(&m, SRV_ROUTE_COMPLETIONS, 200);
    srv_metrics_request(&m, SRV_ROUTE_JOBS, 503);
    srv_metrics_request(&m, SRV_ROUTE_UNKNOWN, 404);
    srv_metrics_prefill(&m, 100, 50.0);
    srv_metrics_decode_step(&m, 8, 4.0, 1000.0);
    srv_metrics_decode_step(&m, 8, 4.0, 1004.0);
    srv_metrics_tokens_out(&m, 16);
    srv_gauges g = {.queue_depth = 3, .active_sequences = 8, .parallel = 8, .queue_capacity = 64, .rss_bytes = 1234};
    char *s = srv_metrics_render(&m, &g);
    assert_non_null(strstr(s, "llorch_requests_total{route=\"/v1/completions\",status=\"200\"} 2\n"));
    assert_non_null(strstr(s, "llorch_requests_total{route=\"/v1/jobs\",status=\"503\"} 1\n"));
    assert_non_null(strstr(s, "llorch_requests_total{route=\"other\",status=\"404\"} 1\n"));
    assert_non_null(strstr(s, "llorch_tokens_in_total 100\n"));
    assert_non_null(strstr(s, "llorch_tokens_out_total 16\n"));
    assert_non_null(strstr(s, "llorch_prefill_tokens_per_second 2000\n"));
    assert_non_null(strstr(s, "llorch_decode_tokens_per_second 2000\n"));
    assert_non_null(strstr(s, "llorch_queue_depth 3\n"));
    assert_non_null(strstr(s, "llorch_active_sequences 8\n"));
    assert_non_null(strstr(s, "# TYPE llorch_tokens_out_total counter\n"));
    free(s);
    srv_metrics_destroy(&m);
}

static int parse_args(srv_config *c, int argc, const char **argv) {
    srv_config_defaults(c);
    return srv_config_parse(c, argc, (char **)argv);
}

static void test_config(void **state) {
    (void)state;
    srv_config c;
    const char *a1[] = {"/opt/bin/llm-worker-rbee-cuda", "--worker-id", "w7", "--port", "0", "--parallel", "8",
                        "--ctx-size", "1024", "--queue-depth", "5", "--local-mode", "--device", "2"};
    assert_int_equal(parse_args(&c, 14, a1), 0);
    assert_string_equal(c.backend, "cuda");
    assert_string_equal(c.worker_id, "w7");
    assert_int_equal(c.parallel, 8);
    assert_int_equal(c.ctx_size, 1024);
    assert_int_equal(c.queue_depth, 5);
    assert_int_equal(c.device, 2);
    assert_true(c.local_mode);
    const char *a2[] = {"llm-worker-rbee", "--rocm-device", "1"};
    assert_int_equal(parse_args(&c, 3, a2), 0);
    assert_string_equal(c.backend, "rocm");
    assert_int_equal(c.device, 1);
    const char *a3[] = {"llm-worker-rbee-cpu"};
    assert_int_equal(parse_args(&c, 1, a3), 0);
    assert_string_equal(c.backend, "cpu");
    const char *bad1[] = {"llm-worker-rbee", "--parallel", "0"};
    assert_int_equal(parse_args(&c, 3, bad1), 2);
    const char *bad2[] = {"llm-worker-rbee", "--port", "70000"};
    assert_int_equal(parse_args(&c, 3, bad2), 2);
    const char *bad3[] = {"llm-worker-rbee", "--backend", "tpu"};
    assert_int_equal(parse_args(&c, 3, bad3), 2);
    const char *bad4[] = {"llm-worker-rbee", "--port", "12x"};
    assert_int_equal(parse_args(&c, 3, bad4), 2);
    const char *bad5[] = {"llm-worker-rbee", "stray"};
    assert_int_equal(parse_args(&c, 2, bad5), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8),          cmocka_unit_test(test_ct_equal),
        cmocka_unit_test(test_parse_body),    cmocka_unit_test(test_params_valid),
        cmocka_unit_test(test_params_invalid), cmocka_unit_test(test_error_shapes),
        cmocka_unit_test(test_chat_messages), cmocka_unit_test(test_context_fit),
        cmocka_unit_test(test_backoff),       cmocka_unit_test(test_heartbeat_json),
        cmocka_unit_test(test_metrics_render), cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

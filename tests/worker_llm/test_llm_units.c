/* Unit tests of the LLM worker's pure parts and the worker layer under it:
 * UTF-8 validation (hand-checked vectors from the Unicode standard's
 * well-formedness table), the constant-time compare, request validation
 * (every field's type and range, stop strings, the context fit, both error
 * shapes, refused OpenAI fields), heartbeat backoff and body, the Prometheus
 * rendering, and command-line parsing. */
#include "testutil.h"

#include "worker/wk_config.h"
#include "worker/wk_hive.h"
#include "worker/wk_metrics.h"
#include "worker/wk_util.h"
#include "worker_llm/llm_metrics.h"
#include "worker_llm/llm_request.h"
#include "worker_llm/llm_worker.h"

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
        bool ok = wk_utf8_valid(v[i].s, v[i].len, &bad);
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
        assert_true(wk_utf8_valid((const char *)buf, n, NULL));
        /* cutting the last sequence short must be caught */
        size_t last = n - 1;
        while (last > 0 && (buf[last] & 0xC0) == 0x80) last--;
        if (buf[last] >= 0xC0) assert_false(wk_utf8_valid((const char *)buf, n - 1, NULL));
    }
}

static void test_ct_equal(void **state) {
    (void)state;
    assert_true(wk_ct_equal("secret-token", 12, "secret-token", 12));
    assert_false(wk_ct_equal("secret-tokeN", 12, "secret-token", 12));
    assert_false(wk_ct_equal("secret", 6, "secret-token", 12));
    assert_false(wk_ct_equal("secret-token-x", 14, "secret-token", 12));
    assert_false(wk_ct_equal("", 0, "x", 1));
    assert_true(wk_ct_equal("", 0, "", 0));
}

static json_t *parse(const char *s, wk_errors *e) { return wk_parse_body(s, strlen(s), e); }

static bool has_error(const wk_errors *e, const char *field, const char *constraint) {
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->items[i].field, field) == 0 && strncmp(e->items[i].constraint, constraint, strlen(constraint)) == 0)
            return true;
    return false;
}

static void test_parse_body(void **state) {
    (void)state;
    wk_errors e = {.n = 0};
    assert_null(parse("{\"prompt\": ", &e));
    assert_true(has_error(&e, "body", "json"));
    e.n = 0;
    assert_null(wk_parse_body("{\"prompt\":\"\xC3\x28\"}", 14, &e));
    assert_true(has_error(&e, "body", "utf8"));
    assert_non_null(strstr(e.items[0].message, "offset 11"));
    e.n = 0;
    assert_null(parse("[1,2]", &e));
    assert_true(has_error(&e, "body", "json_object"));
    e.n = 0;
    assert_null(wk_parse_body("", 0, &e));
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
    wk_errors e = {.n = 0};
    json_t *o = parse("{\"operation\":\"infer\",\"hive_id\":\"h1\",\"model\":\"m\",\"prompt\":\"And God\",\"max_tokens\":17,"
                      "\"temperature\":0.25,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"repetition_penalty\":1.1,"
                      "\"seed\":12345,\"stop\":[\"\\n\",\"Amen\"]}",
                      &e);
    assert_non_null(o);
    llm_gen_request r;
    memset(&r, 0, sizeof r);
    const char *prompt = NULL;
    llm_request_read_rbee(o, &prompt, &e);
    llm_request_read_params(o, LLM_API_RBEE, NULL, &r, &e);
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
    llm_gen_request_free(&r);
    json_decref(o);
    /* untagged form, integer temperature, stop as one string */
    o = parse("{\"prompt\":\"x\",\"max_tokens\":1,\"temperature\":2,\"stop\":\"END\"}", &e);
    memset(&r, 0, sizeof r);
    llm_request_read_rbee(o, &prompt, &e);
    llm_request_read_params(o, LLM_API_RBEE, NULL, &r, &e);
    assert_int_equal(e.n, 0);
    assert_float_equal(r.sampling.temperature, 2.0f, 0);
    assert_int_equal(r.n_stop, 1);
    llm_gen_request_free(&r);
    json_decref(o);
}

static void test_params_invalid(void **state) {
    (void)state;
    wk_errors e = {.n = 0};
    json_t *o = parse("{\"operation\":\"train\",\"prompt\":7,\"max_tokens\":0,\"temperature\":2.5,\"top_p\":-0.1,"
                      "\"top_k\":\"5\",\"min_p\":1.5,\"repetition_penalty\":0,\"seed\":1.5,"
                      "\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\","
                      "\"o\",\"p\",\"q\"],\"stream\":\"yes\",\"n\":2,"
                      "\"frequency_penalty\":3}",
                      &e);
    assert_non_null(o);
    llm_gen_request r;
    memset(&r, 0, sizeof r);
    const char *prompt = NULL;
    llm_request_read_rbee(o, &prompt, &e);
    llm_request_read_params(o, LLM_API_RBEE, NULL, &r, &e);
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
    assert_true(has_error(&e, "stop", "max_items:16")); /* 17 */
    assert_true(has_error(&e, "stream", "type:boolean"));
    assert_true(has_error(&e, "n", "range:1..1")); /* the rbee job API makes one choice */
    assert_true(has_error(&e, "frequency_penalty", "range"));
    llm_gen_request_free(&r);
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
    llm_request_read_params(o, LLM_API_RBEE, NULL, &r, &e);
    assert_int_equal(e.n, 3);
    assert_true(has_error(&e, "stop", "length:1..100"));
    assert_true(has_error(&e, "stop", "type:string"));
    assert_int_equal(r.n_stop, 0);
    llm_gen_request_free(&r);
    json_decref(o);
    /* missing and empty prompt */
    e.n = 0;
    o = parse("{\"max_tokens\":3}", &e);
    llm_request_read_rbee(o, &prompt, &e);
    assert_true(has_error(&e, "prompt", "required"));
    json_decref(o);
    e.n = 0;
    o = parse("{\"prompt\":\"\"}", &e);
    llm_request_read_rbee(o, &prompt, &e);
    assert_true(has_error(&e, "prompt", "non_empty"));
    json_decref(o);
}

static void test_error_shapes(void **state) {
    (void)state;
    wk_errors e = {.n = 0};
    wk_errors_add(&e, "temperature", "range:0..2", "temperature must be between 0 and 2, got %g", 9.0);
    wk_errors_add(&e, "top_p", "range:0..1", "top_p bad");
    json_t *j = wk_errors_json(&e);
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(s, "{\"errors\":[{\"constraint\":\"range:0..2\",\"field\":\"temperature\",\"message\":"
                           "\"temperature must be between 0 and 2, got 9\"},{\"constraint\":\"range:0..1\",\"field\":"
                           "\"top_p\",\"message\":\"top_p bad\"}]}");
    free(s);
    json_decref(j);
    j = wk_errors_openai_json(&e);
    json_t *err = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(err, "param")), "temperature");
    assert_string_equal(json_string_value(json_object_get(err, "message")),
                        "temperature must be between 0 and 2, got 9; top_p bad");
    json_decref(j);
}

static void test_chat_messages(void **state) {
    (void)state;
    wk_errors e = {.n = 0};
    json_t *o = parse("{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":"
                      "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}]}",
                      &e);
    json_t *m = llm_request_read_chat(o, &e);
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
        assert_null(llm_request_read_chat(o, &e));
        assert_true(e.n >= 1);
        json_decref(o);
    }
}

static void test_context_fit(void **state) {
    (void)state;
    rb_tokenizer *tok = NULL;
    TU_OK(rb_tokenizer_load_hf(RBEE_DEFAULT_MODEL_DIR "/hf/tokenizer.json", NULL, &tok, NULL));
    llm_gen_request r;
    memset(&r, 0, sizeof r);
    wk_errors e = {.n = 0};
    const char *p = "And God said unto Moses";
    int32_t *ids = NULL;
    size_t n = 0;
    TU_OK(rb_tokenizer_encode(tok, p, strlen(p), RB_TOK_ADD_SPECIAL, &ids, &n, NULL));
    free(ids);
    /* default max_tokens fills the room */
    llm_request_set_prompt(&r, tok, p, strlen(p), RB_TOK_ADD_SPECIAL, NULL, 0, 32, 0, &e);
    assert_int_equal(e.n, 0);
    assert_int_equal(r.n_prompt, n);
    assert_int_equal(r.max_tokens, 32 - (int64_t)n);
    llm_gen_request_free(&r);
    /* exactly fits / one too many */
    r.max_tokens = 32 - (int64_t)n;
    llm_request_set_prompt(&r, tok, p, strlen(p), RB_TOK_ADD_SPECIAL, NULL, 0, 32, 0, &e);
    assert_int_equal(e.n, 0);
    llm_gen_request_free(&r);
    r.max_tokens = 33 - (int64_t)n;
    llm_request_set_prompt(&r, tok, p, strlen(p), RB_TOK_ADD_SPECIAL, NULL, 0, 32, 0, &e);
    assert_true(has_error(&e, "max_tokens", "range"));
    assert_null(r.prompt);
    llm_gen_request_free(&r);
    /* prompt alone too long */
    e.n = 0;
    llm_request_set_prompt(&r, tok, p, strlen(p), RB_TOK_ADD_SPECIAL, NULL, 0, (int64_t)n, 0, &e);
    assert_true(has_error(&e, "prompt", "context"));
    llm_gen_request_free(&r);
    rb_tokenizer_free(tok);
}

static void test_backoff(void **state) {
    (void)state;
    assert_int_equal(wk_hive_backoff_ms(30000, 0), 30000);
    assert_int_equal(wk_hive_backoff_ms(30000, 1), 500);
    assert_int_equal(wk_hive_backoff_ms(30000, 2), 1000);
    assert_int_equal(wk_hive_backoff_ms(30000, 3), 2000);
    assert_int_equal(wk_hive_backoff_ms(30000, 9), 120000 < 500 * 256 ? 120000 : 500 * 256);
    assert_int_equal(wk_hive_backoff_ms(30000, 50), 120000);
    assert_int_equal(wk_hive_backoff_ms(200, 1), 200);
    assert_int_equal(wk_hive_backoff_ms(200, 2), 400);
    assert_int_equal(wk_hive_backoff_ms(200, 3), 800);
    assert_int_equal(wk_hive_backoff_ms(200, 4), 800);
}

static void test_heartbeat_json(void **state) {
    (void)state;
    wk_hive_opts o = {.worker_id = "w-1", .model_id = "rbee-default", .device = "cuda:1", .version = "0.1.0",
                      .implementation = "llm-worker-rbee",
                      .port = 8123, .interval_ms = 1000};
    char *s = wk_hive_heartbeat_json(&o, "busy");
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

static double gauge_3(void *u) {
    (void)u;
    return 3;
}
static double gauge_8(void *u) {
    (void)u;
    return 8;
}

static void test_metrics_render(void **state) {
    (void)state;
    wk_metrics reg;
    wk_metrics_init(&reg);
    const char *const rl[] = {"route", "status", NULL};
    wk_metric *req = wk_metrics_counter(&reg, "llorch_requests_total", "HTTP requests by route and status code.", rl);
    assert_non_null(req);
    assert_null(wk_metrics_counter(&reg, "llorch_requests_total", "twice", NULL)); /* one family per name */
    llm_metrics m;
    llm_metrics_init(&m, &reg);
    wk_metrics_gauge_fn(&reg, "llorch_queue_depth", "Requests waiting for a sequence slot.", gauge_3, NULL);
    wk_metrics_gauge_fn(&reg, "llorch_active_sequences", "Sequences being generated.", gauge_8, NULL);
    const char *c200[] = {"/v1/completions", "200"}, *j503[] = {"/v1/jobs", "503"}, *o404[] = {"other", "404"};
    wk_counter_add(req, c200, 1);
    wk_counter_add(req, c200, 1);
    wk_counter_add(req, j503, 1);
    wk_counter_add(req, o404, 1);
    llm_metrics_prefill(&m, 100, 0, 50.0);
    llm_metrics_prefill(&m, 140, 40, 50.0); /* 40 from a cache: 100 run in 50 ms */
    llm_metrics_decode_step(&m, 8, 4.0, 1000.0);
    llm_metrics_decode_step(&m, 8, 4.0, 1004.0);
    llm_metrics_tokens_out(&m, 16);
    llm_metrics_first_token(&m, "/v1/completions", 30.0);  /* 0.03 s */
    llm_metrics_first_token(&m, "/v1/completions", 700.0); /* 0.7 s */
    llm_metrics_token_gap(&m, "/v1/jobs", 2.0);
    char *s = wk_metrics_render(&reg);
    assert_non_null(strstr(s, "llorch_requests_total{route=\"/v1/completions\",status=\"200\"} 2\n"));
    assert_non_null(strstr(s, "llorch_requests_total{route=\"/v1/jobs\",status=\"503\"} 1\n"));
    assert_non_null(strstr(s, "llorch_requests_total{route=\"other\",status=\"404\"} 1\n"));
    assert_non_null(strstr(s, "llorch_tokens_in_total 240\n"));
    assert_non_null(strstr(s, "llorch_prompt_tokens_cached_total 40\n"));
    assert_non_null(strstr(s, "llorch_tokens_out_total 16\n"));
    assert_non_null(strstr(s, "llorch_prefill_tokens_per_second 2000\n"));
    assert_non_null(strstr(s, "llorch_decode_tokens_per_second 2000\n"));
    assert_non_null(strstr(s, "llorch_queue_depth 3\n"));
    assert_non_null(strstr(s, "llorch_active_sequences 8\n"));
    assert_non_null(strstr(s, "# TYPE llorch_tokens_out_total counter\n"));
    /* histograms: cumulative buckets, +Inf, sum and count per route */
    assert_non_null(strstr(s, "# TYPE llorch_time_to_first_token_seconds histogram\n"));
    assert_non_null(strstr(s, "llorch_time_to_first_token_seconds_bucket{route=\"/v1/completions\",le=\"0.025\"} 0\n"));
    assert_non_null(strstr(s, "llorch_time_to_first_token_seconds_bucket{route=\"/v1/completions\",le=\"0.05\"} 1\n"));
    assert_non_null(strstr(s, "llorch_time_to_first_token_seconds_bucket{route=\"/v1/completions\",le=\"0.5\"} 1\n"));
    assert_non_null(strstr(s, "llorch_time_to_first_token_seconds_bucket{route=\"/v1/completions\",le=\"1\"} 2\n"));
    assert_non_null(strstr(s, "llorch_time_to_first_token_seconds_bucket{route=\"/v1/completions\",le=\"+Inf\"} 2\n"));
    assert_non_null(strstr(s, "llorch_time_to_first_token_seconds_sum{route=\"/v1/completions\"} 0.72999999999999998\n"));
    assert_non_null(strstr(s, "llorch_time_to_first_token_seconds_count{route=\"/v1/completions\"} 2\n"));
    assert_non_null(strstr(s, "llorch_inter_token_latency_seconds_bucket{route=\"/v1/jobs\",le=\"0.001\"} 0\n"));
    assert_non_null(strstr(s, "llorch_inter_token_latency_seconds_bucket{route=\"/v1/jobs\",le=\"0.0025\"} 1\n"));
    assert_null(strstr(s, "llorch_inter_token_latency_seconds_bucket{route=\"/v1/completions\""));
    free(s);
    const char *q[] = {"a\"b\\c\nd", "x"};
    wk_counter_add(req, q, 5);
    assert_true(wk_metric_value(req, q) == 5);
    s = wk_metrics_render(&reg);
    assert_non_null(strstr(s, "llorch_requests_total{route=\"a\\\"b\\\\c\\nd\",status=\"x\"} 5\n")); /* escaped */
    free(s);
    llm_metrics_destroy(&m);
    wk_metrics_destroy(&reg);
}

static llm_worker g_lw; /* the option destinations of the last parse */

static int parse_args(wk_config *c, int argc, const char **argv) {
    memset(&g_lw, 0, sizeof g_lw);
    g_lw.parallel = 4;
    wk_opt opts[8];
    int n = llm_worker_options(&g_lw, opts, 8);
    wk_config_defaults(c, "llm-worker-rbee");
    wk_config_info ci = {.name = "llm-worker-rbee", .version = "0.0.0", .opts = opts, .n_opts = n};
    return wk_config_parse(c, &ci, argc, (char **)argv);
}

static void test_config(void **state) {
    (void)state;
    wk_config c;
    const char *a1[] = {"/opt/bin/llm-worker-rbee-cuda", "--worker-id", "w7", "--port", "0", "--parallel", "8",
                        "--ctx-size", "1024", "--queue-depth", "5", "--local-mode", "--device", "2"};
    assert_int_equal(parse_args(&c, 14, a1), 0);
    assert_string_equal(c.backend, "cuda");
    assert_string_equal(c.worker_id, "w7");
    assert_int_equal(g_lw.parallel, 8);
    assert_int_equal(g_lw.ctx_size, 1024);
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

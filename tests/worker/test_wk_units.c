/* Unit tests of the worker layer's pure parts: the router (patterns,
 * parameters, HEAD as GET, 405 method lists, duplicates and bad patterns),
 * bearer auth, CORS origin matching and preflight headers, the job event
 * list (started first, exactly one final event, cancel hooks), and the
 * environment equivalents of flags, and the number format of range errors. */
#include "testutil.h"

#include "worker/wk_auth.h"
#include "worker/wk_config.h"
#include "worker/wk_cors.h"
#include "worker/wk_job.h"
#include "worker/wk_job_queue.h"
#include "worker/wk_router.h"
#include "worker/wk_util.h"

#include <stdlib.h>
#include <string.h>

static bool h1(wk_req *r, void *ctx) {
    (void)r;
    (void)ctx;
    return true;
}

static void test_router(void **state) {
    (void)state;
    wk_router rt;
    wk_router_init(&rt);
    rb_error err;
    int a = 1, b = 2;
    TU_OK(wk_router_add(&rt, "GET", "/v1/jobs/{id}", h1, &a, NULL, 0, &err));
    TU_OK(wk_router_add(&rt, "DELETE", "/v1/jobs/{id}", h1, &b, "DELETE /v1/jobs/{id}", 0, &err));
    TU_OK(wk_router_add(&rt, "GET", "/v1/jobs/{id}/stream", h1, &a, NULL, 0, &err));
    TU_OK(wk_router_add(&rt, "POST", "/v1/jobs", h1, &a, NULL, 0, &err));
    TU_OK(wk_router_add(&rt, "GET", "/a/{x}/b/{y}", h1, &a, NULL, WK_ROUTE_PUBLIC, &err));
    assert_int_equal(wk_router_add(&rt, "GET", "/v1/jobs/{id}", h1, &a, NULL, 0, &err), RB_E_INVALID); /* twice */
    const char *bad[] = {"nope", "/x/{}", "/x/{a", "/x/a}", "/x/{a}b", "/x{a}", "/{a}/{b}/{c}/{d}/{e}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(wk_router_add(&rt, "GET", bad[i], h1, &a, NULL, 0, &err), RB_E_INVALID);
    wk_params p;
    char allow[64];
    const wk_route *r = wk_router_match(&rt, "GET", "/v1/jobs/job-123", &p, allow, sizeof allow);
    assert_non_null(r);
    assert_string_equal(r->pattern, "/v1/jobs/{id}");
    assert_string_equal(r->label, "/v1/jobs/{id}");
    assert_int_equal(p.n, 1);
    assert_string_equal(p.values[0], "job-123");
    r = wk_router_match(&rt, "HEAD", "/v1/jobs/x/stream", &p, allow, sizeof allow);
    assert_non_null(r);
    assert_string_equal(r->pattern, "/v1/jobs/{id}/stream");
    r = wk_router_match(&rt, "DELETE", "/v1/jobs/j", &p, allow, sizeof allow);
    assert_non_null(r);
    assert_ptr_equal(r->ctx, &b);
    assert_string_equal(r->label, "DELETE /v1/jobs/{id}");
    r = wk_router_match(&rt, "GET", "/a/one/b/two", &p, allow, sizeof allow);
    assert_non_null(r);
    assert_int_equal(p.n, 2);
    assert_string_equal(p.values[0], "one");
    assert_string_equal(p.values[1], "two");
    assert_true(r->flags & WK_ROUTE_PUBLIC);
    /* no match: the methods the path does accept */
    assert_null(wk_router_match(&rt, "PUT", "/v1/jobs/j", &p, allow, sizeof allow));
    assert_string_equal(allow, "GET, DELETE");
    assert_null(wk_router_match(&rt, "GET", "/v1/jobs", &p, allow, sizeof allow));
    assert_string_equal(allow, "POST");
    assert_null(wk_router_match(&rt, "GET", "/v1/jobs/", &p, allow, sizeof allow)); /* empty parameter */
    assert_string_equal(allow, "");
    assert_null(wk_router_match(&rt, "GET", "/v1/jobs/a/b", &p, allow, sizeof allow));
    assert_string_equal(allow, "");
    char longid[200];
    memset(longid, 'x', sizeof longid);
    memcpy(longid, "/v1/jobs/", 9);
    longid[sizeof longid - 1] = '\0';
    assert_null(wk_router_match(&rt, "GET", longid, &p, allow, sizeof allow)); /* parameter too long */
    static const char page[] = "<p>hi</p>";
    TU_OK(wk_router_add_static(&rt, "/", "text/html", page, sizeof page - 1, &err));
    r = wk_router_match(&rt, "GET", "/", &p, allow, sizeof allow);
    assert_non_null(r);
    assert_true(r->flags & WK_ROUTE_PUBLIC);
    assert_int_equal(wk_router_add_static(&rt, "/", "text/html", page, 2, &err), RB_E_INVALID);
    wk_router_destroy(&rt);
}

static void test_auth(void **state) {
    (void)state;
    assert_null(wk_auth_check(NULL, NULL)); /* no token configured */
    assert_null(wk_auth_check("Bearer abc", "abc"));
    assert_null(wk_auth_check("bearer   abc \t", "abc"));
    assert_string_equal(wk_auth_check(NULL, "abc"), "MISSING_API_KEY");
    assert_string_equal(wk_auth_check("", "abc"), "MISSING_API_KEY");
    assert_string_equal(wk_auth_check("Basic abc", "abc"), "INVALID_API_KEY");
    assert_string_equal(wk_auth_check("Bearer abcd", "abc"), "INVALID_API_KEY");
    assert_string_equal(wk_auth_check("Bearer ab", "abc"), "INVALID_API_KEY");
    assert_string_equal(wk_auth_check("Bearer ", "abc"), "INVALID_API_KEY");
}

static void test_cors(void **state) {
    (void)state;
    char out[128];
    assert_true(wk_cors_allow("*", "https://x.example", out, sizeof out));
    assert_string_equal(out, "*");
    assert_true(wk_cors_allow("https://a.example, https://b.example", "https://b.example", out, sizeof out));
    assert_string_equal(out, "https://b.example");
    assert_false(wk_cors_allow("https://a.example", "https://a.example.evil", out, sizeof out));
    assert_false(wk_cors_allow("https://a.example", "https://a.exampl", out, sizeof out));
    assert_false(wk_cors_allow("https://a.example", "", out, sizeof out));
    assert_false(wk_cors_allow(NULL, "https://a.example", out, sizeof out));
    wk_cors_allow_headers("authorization, content-type", out, sizeof out);
    assert_string_equal(out, "authorization, content-type");
    wk_cors_allow_headers("x\r\nSet-Cookie: a", out, sizeof out); /* no header injection */
    assert_string_equal(out, "Authorization, Content-Type");
    wk_cors_allow_headers(NULL, out, sizeof out);
    assert_string_equal(out, "Authorization, Content-Type");
}

static int hook_calls;
static void hook(void *u) {
    (void)u;
    hook_calls++;
}

static void test_job_events(void **state) {
    (void)state;
    static const wk_job_kind kind = {.free_payload = free, .describe = NULL};
    wk_job *j = wk_job_new(&kind, "t-", malloc(8));
    assert_non_null(j);
    assert_int_equal(strncmp(j->id, "t-", 2), 0);
    assert_int_equal(strlen(j->id), 2 + 24);
    wk_job_set_cancel_hook(j, hook, NULL);
    assert_true(wk_job_start(j, json_pack("{s:i}", "n", 2)));
    assert_false(wk_job_start(j, NULL)); /* once */
    assert_true(wk_job_push(j, "tick", json_pack("{s:i}", "i", 0), "ab", 2));
    wk_job_cancel(j);
    assert_int_equal(hook_calls, 1);
    assert_true(wk_job_cancel_requested(j));
    wk_job_end(j, json_pack("{s:s}", "stop_reason", "CANCELLED"));
    wk_job_fail(j, "LATE", "ignored: the job already ended");
    assert_false(wk_job_push(j, "tick", json_object(), NULL, 0));
    assert_int_equal(j->n_events, 3);
    assert_string_equal(j->events[0].type, "started");
    assert_string_equal(json_string_value(json_object_get(j->events[0].data, "job_id")), j->id);
    assert_int_equal(json_integer_value(json_object_get(j->events[0].data, "n")), 2);
    assert_string_equal(j->events[1].type, "tick");
    assert_string_equal(json_string_value(json_object_get(j->events[1].data, "type")), "tick");
    assert_int_equal(j->events[1].raw_len, 2);
    assert_string_equal(j->events[1].raw, "ab");
    assert_string_equal(j->events[2].type, "end");
    assert_int_equal(j->state, WK_JOB_DONE);
    wk_job_unref(j);
    /* failing straight from the queue still opens with started */
    j = wk_job_new(&kind, "t-", NULL);
    wk_job_fail(j, "BAD", "bad \xff bytes");
    assert_int_equal(j->n_events, 2);
    assert_string_equal(j->events[0].type, "started");
    assert_string_equal(j->events[1].type, "error");
    assert_string_equal(json_string_value(json_object_get(j->events[1].data, "message")), "bad \xEF\xBF\xBD bytes");
    assert_int_equal(j->state, WK_JOB_FAILED);
    assert_string_equal(j->err_code, "BAD");
    wk_job_unref(j);
}

/* The position a job's "queued" event gave, or 0 without one. */
static int queued_position(const wk_job *j) {
    for (size_t i = 0; i < j->n_events; i++)
        if (!strcmp(j->events[i].type, "queued"))
            return (int)json_integer_value(json_object_get(j->events[i].data, "position"));
    return 0;
}

static void test_job_queue(void **state) {
    (void)state;
    static const wk_job_kind kind = {.free_payload = NULL, .describe = NULL};
    wk_job_queue q;
    assert_int_equal(wk_job_queue_init(&q, 8), RB_OK);
    wk_job *j[4];
    for (int i = 0; i < 4; i++) assert_non_null(j[i] = wk_job_new(&kind, "q-", NULL));
    /* depth 2 behind one free place: three fit; the first runs at once, the others wait */
    assert_int_equal(wk_job_queue_push(&q, j[0], 2, 1), RB_OK);
    assert_int_equal(wk_job_queue_push(&q, j[1], 2, 1), RB_OK);
    assert_int_equal(wk_job_queue_push(&q, j[2], 2, 1), RB_OK);
    assert_int_equal(wk_job_queue_push(&q, j[3], 2, 1), RB_E_RANGE);
    assert_int_equal(q.n, 3);
    assert_int_equal(queued_position(j[0]), 0);
    assert_int_equal(queued_position(j[1]), 1);
    assert_int_equal(queued_position(j[2]), 2);
    assert_int_equal(queued_position(j[3]), 0);
    assert_ptr_equal(wk_job_queue_at(&q, 1), j[1]);
    assert_null(wk_job_queue_at(&q, 3));
    /* a cancelled job leaves; the others keep their order */
    wk_job_cancel(j[1]);
    wk_job *out[4];
    assert_int_equal(wk_job_queue_take_cancelled(&q, false, out, 4), 1);
    assert_ptr_equal(out[0], j[1]);
    wk_job_unref(out[0]);
    assert_ptr_equal(wk_job_queue_pop(&q), j[0]);
    wk_job_unref(j[0]);
    /* one more behind the moved head */
    assert_int_equal(wk_job_queue_push(&q, j[3], 4, 0), RB_OK);
    assert_int_equal(queued_position(j[3]), 2);
    assert_int_equal(wk_job_queue_take_cancelled(&q, true, out, 1), 1); /* all, but room for one */
    assert_ptr_equal(out[0], j[2]);
    wk_job_unref(out[0]);
    assert_ptr_equal(wk_job_queue_pop(&q), j[3]);
    wk_job_unref(j[3]);
    assert_null(wk_job_queue_pop(&q));
    wk_job_queue_free(&q);
    for (int i = 0; i < 4; i++) wk_job_unref(j[i]);
}

static void test_env_flags(void **state) {
    (void)state;
    char env[64];
    wk_config_env_name("heartbeat-interval-ms", env, sizeof env);
    assert_string_equal(env, "RBEE_HEARTBEAT_INTERVAL_MS");
    int64_t extra = 0;
    wk_opt opts[] = {{"extra-knob", WK_OPT_INT, &extra, 0, 100, "N", "test"}};
    wk_config_info ci = {.name = "t", .version = "0", .opts = opts, .n_opts = 1};
    wk_config c;
    setenv("RBEE_EXTRA_KNOB", "42", 1);
    setenv("RBEE_QUEUE_DEPTH", "9", 1);
    setenv("RBEE_NO_WARMUP", "yes", 1);
    setenv("RBEE_CORS_ORIGIN", "*", 1);
    wk_config_defaults(&c, "t");
    const char *a1[] = {"t", "--queue-depth", "3"};
    assert_int_equal(wk_config_parse(&c, &ci, 3, (char **)a1), 0);
    assert_int_equal(extra, 42);
    assert_int_equal(c.queue_depth, 3); /* the command line wins */
    assert_true(c.no_warmup);
    assert_string_equal(c.cors_origin, "*");
    setenv("RBEE_NO_WARMUP", "maybe", 1);
    wk_config_defaults(&c, "t");
    const char *a2[] = {"t"};
    assert_int_equal(wk_config_parse(&c, &ci, 1, (char **)a2), 2);
    unsetenv("RBEE_NO_WARMUP");
    setenv("RBEE_EXTRA_KNOB", "101", 1);
    wk_config_defaults(&c, "t");
    assert_int_equal(wk_config_parse(&c, &ci, 1, (char **)a2), 2);
    unsetenv("RBEE_EXTRA_KNOB");
    unsetenv("RBEE_QUEUE_DEPTH");
    unsetenv("RBEE_CORS_ORIGIN");
    setenv("LLORCH_LOG_FORMAT", "JSON", 1);
    wk_config_defaults(&c, "t");
    assert_int_equal(wk_config_parse(&c, &ci, 1, (char **)a2), 0);
    assert_true(c.log_json);
    const char *a3[] = {"t", "--log-format", "text"};
    wk_config_defaults(&c, "t");
    assert_int_equal(wk_config_parse(&c, &ci, 3, (char **)a3), 0);
    assert_false(c.log_json); /* the flag beats the legacy variable */
    unsetenv("LLORCH_LOG_FORMAT");
    const char *a4[] = {"t", "--log-format", "xml"};
    wk_config_defaults(&c, "t");
    assert_int_equal(wk_config_parse(&c, &ci, 3, (char **)a4), 2);
    setenv("RBEE_API_TOKEN", "new", 1);
    setenv("LLORCH_API_TOKEN", "old", 1);
    wk_config_defaults(&c, "t");
    assert_int_equal(wk_config_parse(&c, &ci, 1, (char **)a2), 0);
    assert_string_equal(c.api_token, "new");
    unsetenv("RBEE_API_TOKEN");
    wk_config_defaults(&c, "t");
    assert_int_equal(wk_config_parse(&c, &ci, 1, (char **)a2), 0);
    assert_string_equal(c.api_token, "old");
    unsetenv("LLORCH_API_TOKEN");
}

static void test_fmt_double(void **state) {
    (void)state;
    char b[40];
    assert_string_equal(wk_fmt_double(30.0, b, sizeof b), "30");
    assert_string_equal(wk_fmt_double(-7.0, b, sizeof b), "-7");
    assert_string_equal(wk_fmt_double(0.6, b, sizeof b), "0.6");
    assert_string_equal(wk_fmt_double(1e15, b, sizeof b), "1e+15");
    /* far past what a long long holds: printed, never cast (a fuzzer found the cast) */
    assert_string_equal(wk_fmt_double(8.888888888888889e74, b, sizeof b), "8.888888888888889e+74");
    assert_string_equal(wk_fmt_double(-1e300, b, sizeof b), "-1e+300");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_router), cmocka_unit_test(test_auth),      cmocka_unit_test(test_cors),
        cmocka_unit_test(test_job_events), cmocka_unit_test(test_job_queue), cmocka_unit_test(test_env_flags),
        cmocka_unit_test(test_fmt_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

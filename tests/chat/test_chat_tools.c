/* Tool-call parsing (include/rbee/chat_tools.h): the family detector on the
 * real chat templates of tests/data, every family's call syntax (one and
 * several calls, content before them, the "[ARGS]" form of newer Mistral
 * templates), malformed output that must stay content, and the stream
 * hold-back: fed byte by byte (and in random pieces), what may be sent is
 * always a prefix of the final parse's content and never shrinks. Expected
 * values are written out by hand from the formats the templates document;
 * the families of the official templates in tests/data/chat_tools/templates.json
 * are those of the models' documented call syntax. */
#include "testutil.h"

#include "rbee/chat_tools.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAMES[] = {"get_weather", "get_time"};

typedef struct want_call {
    const char *name, *args;
} want_call;

/* Parses text and checks content (NULL: none) and the calls. */
static void check(rb_tool_family f, const char *text, const char *const *names, size_t n_names, const char *content,
                  const want_call *calls, size_t n_calls) {
    rb_tool_parse p;
    rb_error err;
    TU_OK(rb_tool_calls_parse(f, text, strlen(text), names, n_names, &p, &err));
    if (p.n_calls != n_calls) fail_msg("%s: %zu calls, wanted %zu: %s", rb_tool_family_name(f), p.n_calls, n_calls, text);
    for (size_t i = 0; i < n_calls; i++) {
        assert_string_equal(p.calls[i].name, calls[i].name);
        assert_string_equal(p.calls[i].arguments, calls[i].args);
    }
    if (!content) {
        if (p.content) fail_msg("content \"%s\", wanted none: %s", p.content, text);
    } else {
        if (!p.content) fail_msg("no content, wanted \"%s\": %s", content, text);
        assert_string_equal(p.content, content);
        assert_int_equal(p.content_len, strlen(content));
    }
    rb_tool_parse_free(&p);
}

/* Output that is not a call: all of it is content. */
static void plain(rb_tool_family f, const char *text) { check(f, text, NAMES, 2, text[0] ? text : NULL, NULL, 0); }

static void test_llama3(void **state) {
    (void)state;
    const rb_tool_family L = RB_TOOLS_LLAMA3;
    const want_call paris = {"get_weather", "{\"city\":\"Paris\"}"};
    check(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", NAMES, 2, NULL, &paris, 1);
    check(L, " \n<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}\n", NAMES, 2, NULL,
          &paris, 1);
    check(L, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", NAMES, 2, NULL, &paris, 1);
    const want_call two[] = {{"get_time", "{\"zone\":\"CET\",\"hours24\":true}"}, {"get_weather", "{}"}};
    check(L, "{\"name\":\"get_time\",\"parameters\":{\"zone\":\"CET\",\"hours24\":true}}; {\"name\": \"get_weather\", "
             "\"parameters\": {}}",
          NAMES, 2, NULL, two, 2);
    /* strings holding brackets and escapes, nested values, unicode */
    const want_call tricky = {"get_weather", "{\"city\":\"}{\\\"]\",\"n\":[1,{\"a\":null}],\"u\":\"\xc3\xa9\"}"};
    check(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"}{\\\"]\", \"n\": [1, {\"a\": null}], "
             "\"u\": \"\\u00e9\"}}",
          NAMES, 2, NULL, &tricky, 1);
    /* any name when no list is given; only listed names otherwise */
    const want_call other = {"lookup", "{}"};
    check(L, "{\"name\": \"lookup\", \"parameters\": {}}", NULL, 0, NULL, &other, 1);
    plain(L, "{\"name\": \"lookup\", \"parameters\": {}}");
    /* not calls */
    plain(L, "");
    plain(L, "Paris is sunny.");
    plain(L, "Sure: {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
    plain(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}");         /* cut off */
    plain(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}} and more"); /* text after */
    plain(L, "{\"name\": \"get_weather\", \"parameters\": \"Paris\"}");                   /* not an object */
    plain(L, "{\"name\": \"get_weather\"}");
    plain(L, "{\"name\": \"\", \"parameters\": {}}");
    plain(L, "{\"name\": 7, \"parameters\": {}}");
    plain(L, "{\"name\": \"get_weather\", \"parameters\": {\"a\": 1, \"a\": 2}}"); /* duplicate key */
    plain(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": Paris}}");     /* bad JSON */
    plain(L, "[{\"name\": \"get_weather\", \"parameters\": {}}]");
    plain(L, "<|python_tag|>brave_search.call(query=\"x\")");
}

static void test_hermes(void **state) {
    (void)state;
    const rb_tool_family H = RB_TOOLS_HERMES;
    const want_call paris = {"get_weather", "{\"city\":\"Paris\"}"};
    check(H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", NAMES, 2,
          NULL, &paris, 1);
    const want_call two[] = {{"get_weather", "{\"city\":\"Paris\"}"}, {"get_time", "{\"zone\":\"UTC\"}"}};
    check(H, "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
             "</tool_call>\n<tool_call>{\"name\":\"get_time\",\"arguments\":{\"zone\":\"UTC\"}}</tool_call>\n",
          NAMES, 2, "Let me check.", two, 2);
    /* Qwen3 thinking before the call is content */
    check(H, "<think>\nweather tool\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
             "\"Paris\"}}\n</tool_call>",
          NAMES, 2, "<think>\nweather tool\n</think>", &paris, 1);
    check(H, "<tool_call>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}</tool_call>", NAMES, 2,
          NULL, &paris, 1);
    plain(H, "No call here.");
    plain(H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"); /* unclosed */
    plain(H, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call> then text");
    plain(H, "<tool_call>{\"name\": \"get_weather\"}</tool_call>");
    plain(H, "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": 1}\"}</tool_call>");
    plain(H, "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>");
    plain(H, "<tool_call></tool_call>");
    plain(H, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call><tool_call>{bad}</tool_call>");
    plain(H, "a <tool_call");
}

static void test_mistral(void **state) {
    (void)state;
    const want_call paris = {"get_weather", "{\"city\":\"Paris\"}"};
    const want_call two[] = {{"get_weather", "{\"city\":\"Paris\"}"}, {"get_time", "{\"zone\":\"UTC\"}"}};
    for (int k = 0; k < 2; k++) {
        const rb_tool_family M = k ? RB_TOOLS_MISTRAL_ARGS : RB_TOOLS_MISTRAL;
        check(M, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123XYZ\"}]",
              NAMES, 2, NULL, &paris, 1);
        check(M, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": "
                 "\"get_time\", \"arguments\": {\"zone\": \"UTC\"}}]",
              NAMES, 2, NULL, two, 2);
        check(M, "Checking. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", NAMES, 2, "Checking.", &paris, 1);
        check(M, "[TOOL_CALLS]get_weather[ARGS]{\"city\":\"Paris\"}[TOOL_CALLS]get_time[ARGS]{\"zone\":\"UTC\"}",
              NAMES, 2, NULL, two, 2);
        plain(M, "[TOOL_CALLS][]");
        plain(M, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}] extra");
        plain(M, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}, 3]");
        plain(M, "[TOOL_CALLS]get_weather{\"city\": \"Paris\"}");
        plain(M, "[TOOL_CALLS]get_weather[ARGS][1]");
        plain(M, "[TOOL_CALLS]get weather[ARGS]{}");
        plain(M, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}");
        plain(M, "[{\"name\": \"get_weather\", \"arguments\": {}}]"); /* no marker */
    }
    /* RB_TOOLS_NONE parses nothing */
    plain(RB_TOOLS_NONE, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>");
}

/* Streams text through rb_tool_calls_hold in pieces cut at cuts[] and
 * checks that what is sent grows, is a prefix of the final content and,
 * with the rest the end sends, equals it. */
static void stream_once(rb_tool_family f, const char *text, const size_t *cuts, size_t n_cuts) {
    const size_t len = strlen(text);
    rb_tool_parse p;
    rb_error err;
    TU_OK(rb_tool_calls_parse(f, text, len, NAMES, 2, &p, &err));
    const char *content = p.n_calls ? p.content : text;
    const size_t clen = p.n_calls ? p.content_len : len;
    size_t sent = 0;
    bool started = false;
    for (size_t c = 0; c <= n_cuts; c++) {
        const size_t upto = c < n_cuts ? cuts[c] : len;
        if (started) continue;
        const size_t h = rb_tool_calls_hold(f, text, upto, sent, &started);
        assert_true(h >= sent && h <= upto);
        sent = h;
        if (sent > clen || (sent && memcmp(text, content, sent) != 0))
            fail_msg("%s: sent %zu bytes of \"%s\", content \"%.*s\"", rb_tool_family_name(f), sent, text, (int)clen,
                     content ? content : "");
    }
    rb_tool_parse_free(&p);
}

static void test_stream_hold(void **state) {
    (void)state;
    static const struct {
        rb_tool_family f;
        const char *text;
    } cases[] = {
        {RB_TOOLS_LLAMA3, "  {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
        {RB_TOOLS_LLAMA3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {}}"},
        {RB_TOOLS_LLAMA3, "  <|python_nope"},
        {RB_TOOLS_LLAMA3, "Hello {\"name\": \"get_weather\", \"parameters\": {}}"},
        {RB_TOOLS_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {} oops"},
        {RB_TOOLS_HERMES, "Let me check. \n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"},
        {RB_TOOLS_HERMES, "a <tool b <tool_c <tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>  "},
        {RB_TOOLS_HERMES, "a <tool b\n\n <tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call> no"},
        {RB_TOOLS_HERMES, "plain text \n with spaces \t "},
        {RB_TOOLS_MISTRAL, "So [TOOL [TOOL_CALLS]get_time[ARGS]{\"zone\": \"UTC\"}"},
        {RB_TOOLS_MISTRAL_ARGS, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]"},
    };
    tu_rng rng;
    tu_rng_seed(&rng, 36);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const size_t len = strlen(cases[i].text);
        size_t cuts[256];
        for (size_t k = 0; k < len; k++) cuts[k] = k + 1; /* byte by byte */
        stream_once(cases[i].f, cases[i].text, cuts, len);
        for (int r = 0; r < 50; r++) { /* random pieces */
            size_t n = 0;
            for (size_t at = 0; at < len && n < 256;) {
                at += 1 + tu_rng_u64(&rng) % 7;
                cuts[n++] = at < len ? at : len;
            }
            stream_once(cases[i].f, cases[i].text, cuts, n);
        }
    }
    /* exact hold points */
    bool st = false;
    assert_int_equal(rb_tool_calls_hold(RB_TOOLS_HERMES, "Hi <tool", 8, 0, &st), 2);
    assert_false(st);
    assert_int_equal(rb_tool_calls_hold(RB_TOOLS_HERMES, "Hi <toolbox", 11, 2, &st), 11);
    assert_int_equal(rb_tool_calls_hold(RB_TOOLS_HERMES, "Hi \n<tool_call>{", 16, 0, &st), 2);
    assert_true(st);
    assert_int_equal(rb_tool_calls_hold(RB_TOOLS_LLAMA3, " \n", 2, 0, &st), 0);
    assert_false(st);
    assert_int_equal(rb_tool_calls_hold(RB_TOOLS_LLAMA3, " {", 2, 0, &st), 0);
    assert_true(st);
    assert_int_equal(rb_tool_calls_hold(RB_TOOLS_LLAMA3, " <|py", 5, 0, &st), 0);
    assert_false(st);
    assert_int_equal(rb_tool_calls_hold(RB_TOOLS_LLAMA3, " Hi {", 5, 0, &st), 5);
    assert_int_equal(rb_tool_calls_hold(RB_TOOLS_LLAMA3, " Hi {x", 6, 5, &st), 6);
    assert_int_equal(rb_tool_calls_hold(RB_TOOLS_MISTRAL, "ok [TOOL_CALLS", 14, 0, &st), 2);
    assert_int_equal(rb_tool_calls_hold(RB_TOOLS_NONE, "<tool_call>", 11, 0, &st), 11);
}

static char *template_of(const char *rel) {
    char path[1024];
    json_error_t je;
    json_t *d = json_load_file(tu_data(path, sizeof path, rel), 0, &je);
    if (!d) fail_msg("%s: %s", rel, je.text);
    char *t = strdup(json_string_value(json_object_get(d, "template")));
    json_decref(d);
    return t;
}

static void test_detect(void **state) {
    (void)state;
    static const struct {
        const char *file;
        rb_tool_family want;
    } real[] = {
        {"chat/qwen2_5.json", RB_TOOLS_HERMES},      {"chat/qwen3.json", RB_TOOLS_HERMES},
        {"chat/mistral_nemo.json", RB_TOOLS_MISTRAL}, {"chat_tools/llama3_1.json", RB_TOOLS_LLAMA3},
        {"chat/llama3_1.json", RB_TOOLS_NONE}, /* the npm release's template has no tools */
        {"chat/llama3.json", RB_TOOLS_NONE},         {"chat/gemma2.json", RB_TOOLS_NONE},
        {"chat/gemma3.json", RB_TOOLS_NONE},         {"chat/phi3_5.json", RB_TOOLS_NONE},
        {"chat/mixtral.json", RB_TOOLS_NONE},        {"chat/gpt_oss.json", RB_TOOLS_NONE},
    };
    for (size_t i = 0; i < sizeof real / sizeof real[0]; i++) {
        char *t = template_of(real[i].file);
        const rb_tool_family f = rb_tool_family_detect(t, strlen(t));
        if (f != real[i].want)
            fail_msg("%s: %s, wanted %s", real[i].file, rb_tool_family_name(f), rb_tool_family_name(real[i].want));
        free(t);
    }
    /* more official templates (tests/data/chat_tools/templates.json) */
    char path[1024];
    json_error_t je;
    json_t *d = json_load_file(tu_data(path, sizeof path, "chat_tools/templates.json"), 0, &je);
    if (!d) fail_msg("%s", je.text);
    size_t i, n_llama = 0;
    json_t *row;
    json_array_foreach(json_object_get(d, "templates"), i, row) {
        const char *t = json_string_value(json_object_get(row, "template"));
        const char *want = json_string_value(json_object_get(row, "family"));
        const char *got = rb_tool_family_name(rb_tool_family_detect(t, strlen(t)));
        if (strcmp(got, want) != 0) fail_msg("%s: %s, wanted %s", json_string_value(json_object_get(row, "file")), got, want);
        n_llama += strcmp(want, "llama3") == 0;
    }
    assert_int_equal(i, 11);
    assert_int_equal(n_llama, 3);
    json_decref(d);
    const char *args = "{% if m.tool_calls %}[TOOL_CALLS]{{ c.name }}[ARGS]{{ c.arguments }}{% endif %}";
    assert_int_equal(rb_tool_family_detect(args, strlen(args)), RB_TOOLS_MISTRAL_ARGS);
    assert_int_equal(rb_tool_family_detect(NULL, 0), RB_TOOLS_NONE);
    assert_string_equal(rb_tool_family_name(RB_TOOLS_HERMES), "hermes");
    assert_string_equal(rb_tool_family_marker(RB_TOOLS_MISTRAL_ARGS), "[TOOL_CALLS]");
    assert_null(rb_tool_family_marker(RB_TOOLS_LLAMA3));
    rb_tool_parse p;
    rb_error err;
    assert_int_equal(rb_tool_calls_parse(RB_TOOLS_HERMES, NULL, 3, NULL, 0, &p, &err), RB_E_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama3),      cmocka_unit_test(test_hermes), cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_stream_hold), cmocka_unit_test(test_detect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

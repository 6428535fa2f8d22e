/* Tool calling in the worker's chat path, without a model:
 * - rendering: conversations with tools, assistant tool_calls (arguments
 *   as OpenAI's JSON string, content null) and tool results, sent the way
 *   an OpenAI client sends them, through the worker's request reading and
 *   chat template must give the reference renders: transformers' for
 *   Qwen 2.5 and Mistral Nemo (tests/data/chat), jinja2's for Llama 3.1's
 *   official template (tests/data/chat_tools, tools/ref/gen_tool_chat_refs.py);
 * - validation: bad tools / tool_choice / functions / parallel_tool_calls
 *   are 400s naming the field; a model whose template has no known call
 *   syntax takes tools only with tool_choice "none";
 * - answers: the message a finished choice becomes (tool_calls with ids,
 *   arguments JSON text, content null or the text before the call,
 *   finish_reason "tool_calls"), and plain content for tool_choice "none"
 *   or output that is not a call. */
#include "testutil.h"

#include "llm_test_tokenizer.h"

#include "worker_llm/llm_chat.h"
#include "worker_llm/llm_openai_tools.h"
#include "worker_llm/llm_prompt.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *load_data(const char *rel) {
    char path[1024];
    json_error_t je;
    json_t *d = json_load_file(tu_data(path, sizeof path, rel), 0, &je);
    if (!d) fail_msg("%s: %s", rel, je.text);
    return d;
}

/* messages as an OpenAI client sends them: tool-call arguments as compact
 * JSON text, an assistant's content null when it calls. */
static json_t *to_wire(json_t *msgs) {
    json_t *w = json_deep_copy(msgs);
    size_t i;
    json_t *m;
    json_array_foreach(w, i, m) {
        json_t *calls = json_object_get(m, "tool_calls");
        if (!calls) continue;
        json_object_set_new(m, "content", json_null());
        size_t k;
        json_t *c;
        json_array_foreach(calls, k, c) {
            json_t *fn = json_object_get(c, "function");
            char *a = json_dumps(json_object_get(fn, "arguments"), JSON_COMPACT);
            json_object_set_new(fn, "arguments", json_string(a));
            free(a);
        }
    }
    return w;
}

/* The worker's chat path (tools, messages, template) on a body. */
static char *render_body(llm_chat *c, json_t *body) {
    wk_errors errs = {.n = 0};
    llm_tools tools;
    llm_tools_read(body, c->family, &tools, &errs);
    json_t *msgs = errs.n ? NULL : llm_request_read_chat(body, &errs);
    if (errs.n) fail_msg("%s: %s", errs.items[0].field, errs.items[0].message);
    char *mj = json_dumps(msgs, JSON_COMPACT);
    rb_chat_rendered rd;
    unsigned flags;
    rb_error e;
    if (llm_chat_render(c, mj, tools.tools_json, &rd, &flags, &e) != RB_OK) fail_msg("render: %s", e.msg);
    char *text = strdup(rd.text);
    rb_chat_rendered_free(&rd);
    free(mj);
    json_decref(msgs);
    llm_tools_free(&tools);
    return text;
}

/* Every case of a reference file that has tools or tool messages and a
 * generation prompt; wire: the file's messages are the template's shape
 * (convert them) or it carries messages_openai. */
static void check_renders(const char *rel, rb_tool_family family, int want_cases) {
    json_t *d = load_data(rel);
    rb_tokenizer *tok = llm_test_tokenizer_with_template(json_string_value(json_object_get(d, "template")));
    llm_chat c;
    rb_error e;
    TU_OK(llm_chat_init(&c, tok, &e));
    assert_int_equal(c.family, family);
    /* the special tokens of the reference's model */
    static const char *const specials[] = {"bos_token", "eos_token"};
    for (int k = 0; k < 2; k++)
        TU_OK(rb_chat_template_set_str(c.tpl, specials[k], json_string_value(json_object_get(d, specials[k])), &e));
    int n = 0;
    size_t i;
    json_t *cs;
    json_array_foreach(json_object_get(d, "cases"), i, cs) {
        json_t *extra = json_object_get(cs, "extra");
        json_t *tools = json_object_get(extra, "tools");
        const char *want = json_string_value(json_object_get(cs, "rendered"));
        char *dump = json_dumps(json_object_get(cs, "messages"), 0);
        const bool tooly = tools || strstr(dump, "\"tool");
        free(dump);
        if (!tooly || !want || !json_is_true(json_object_get(cs, "add_generation_prompt")) ||
            json_object_size(extra) != (tools ? 1u : 0u))
            continue;
        json_t *wire = json_object_get(cs, "messages_openai");
        json_t *body = json_pack("{s:o}", "messages", wire ? json_incref(wire) : to_wire(json_object_get(cs, "messages")));
        if (tools) json_object_set(body, "tools", tools);
        char *got = render_body(&c, body);
        if (strcmp(got, want) != 0) fail_msg("%s case %zu:\n got: %s\nwant: %s", rel, i, got, want);
        free(got);
        json_decref(body);
        n++;
    }
    assert_int_equal(n, want_cases);
    llm_chat_destroy(&c);
    rb_tokenizer_free(tok);
    json_decref(d);
}

static void test_render_references(void **state) {
    (void)state;
    check_renders("chat/qwen2_5.json", RB_TOOLS_HERMES, 3);
    check_renders("chat/mistral_nemo.json", RB_TOOLS_MISTRAL, 3);
    check_renders("chat/qwen3.json", RB_TOOLS_HERMES, 1);
    check_renders("chat_tools/llama3_1.json", RB_TOOLS_LLAMA3, 4);
}

/* The tool fields of body on a Qwen 2.5 (Hermes) template; returns the
 * number of errors and the first one's field. */
static int read_tools(const char *body_json, rb_tool_family family, llm_tools *out, char *field) {
    json_error_t je;
    json_t *body = json_loads(body_json, 0, &je);
    if (!body) fail_msg("%s: %s", body_json, je.text);
    wk_errors errs = {.n = 0};
    llm_tools_read(body, family, out, &errs);
    json_decref(body);
    if (field) strcpy(field, errs.n ? errs.items[0].field : "");
    return errs.n;
}

#define WEATHER "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}}"
#define TIME "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"description\":\"t\"}}"

static void test_validation(void **state) {
    (void)state;
    llm_tools t;
    char field[64];
    const rb_tool_family H = RB_TOOLS_HERMES;
    /* good requests */
    assert_int_equal(read_tools("{\"tools\":[" WEATHER "," TIME "]}", H, &t, NULL), 0);
    assert_int_equal(t.choice, LLM_TOOLS_AUTO);
    assert_int_equal(t.n, 2);
    assert_string_equal(t.names[1], "get_time");
    assert_string_equal(t.params[0], "{\"type\":\"object\"}");
    assert_string_equal(t.params[1], "{}");
    assert_true(t.parallel);
    assert_true(llm_tools_parsing(&t));
    llm_tools_free(&t);
    assert_int_equal(read_tools("{\"tools\":[" WEATHER "," TIME "],\"tool_choice\":{\"type\":\"function\","
                                "\"function\":{\"name\":\"get_time\"}},\"parallel_tool_calls\":false}",
                                H, &t, NULL), 0);
    assert_int_equal(t.choice, LLM_TOOLS_NAMED);
    assert_int_equal(t.named, 1);
    assert_false(t.parallel);
    llm_tools_free(&t);
    assert_int_equal(read_tools("{\"tools\":[" WEATHER "],\"tool_choice\":\"required\"}", H, &t, NULL), 0);
    assert_int_equal(t.choice, LLM_TOOLS_REQUIRED);
    llm_tools_free(&t);
    assert_int_equal(read_tools("{\"tools\":[" WEATHER "],\"tool_choice\":\"none\"}", H, &t, NULL), 0);
    assert_int_equal(t.choice, LLM_TOOLS_NONE);
    assert_false(llm_tools_parsing(&t));
    assert_non_null(t.tools_json); /* the template still sees the tools */
    llm_tools_free(&t);
    assert_int_equal(read_tools("{\"tool_choice\":\"auto\",\"tools\":[]}", H, &t, NULL), 0);
    assert_int_equal(t.choice, LLM_TOOLS_OFF);
    assert_null(t.tools_json);
    llm_tools_free(&t);
    /* the legacy fields map onto tools */
    assert_int_equal(read_tools("{\"functions\":[{\"name\":\"get_weather\",\"parameters\":{}}],"
                                "\"function_call\":{\"name\":\"get_weather\"}}", H, &t, NULL), 0);
    assert_int_equal(t.choice, LLM_TOOLS_NAMED);
    assert_string_equal(t.tools_json, "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{}}}]");
    llm_tools_free(&t);
    /* a template without call syntax: tools only with "none" */
    assert_int_equal(read_tools("{\"tools\":[" WEATHER "]}", RB_TOOLS_NONE, &t, field), 1);
    assert_string_equal(field, "tools");
    llm_tools_free(&t);
    assert_int_equal(read_tools("{\"tools\":[" WEATHER "],\"tool_choice\":\"none\"}", RB_TOOLS_NONE, &t, NULL), 0);
    llm_tools_free(&t);
    /* bad input: 400 naming the field */
    static const struct {
        const char *body, *field;
    } bad[] = {
        {"{\"tools\":{}}", "tools"},
        {"{\"tools\":[1]}", "tools[0]"},
        {"{\"tools\":[{\"type\":\"code\",\"function\":{\"name\":\"a\"}}]}", "tools[0]"},
        {"{\"tools\":[{\"type\":\"function\"}]}", "tools[0].function"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"bad name\"}}]}", "tools[0].function"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]}", "tools[0].function"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":[]}}]}", "tools[0].function"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"description\":3}}]}", "tools[0].function"},
        {"{\"tools\":[" WEATHER "," WEATHER "]}", "tools[1].function"},
        {"{\"tools\":[" WEATHER "],\"tool_choice\":\"always\"}", "tool_choice"},
        {"{\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}}",
         "tool_choice"},
        {"{\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"function\"}}", "tool_choice"},
        {"{\"tools\":[" WEATHER "],\"tool_choice\":3}", "tool_choice"},
        {"{\"tool_choice\":\"required\"}", "tool_choice"},
        {"{\"tools\":[" WEATHER "],\"parallel_tool_calls\":\"yes\"}", "parallel_tool_calls"},
        {"{\"tools\":[" WEATHER "],\"functions\":[{\"name\":\"a\"}]}", "functions"},
        {"{\"functions\":[{\"name\":\"a\"}],\"function_call\":{\"name\":\"b\"}}", "function_call"},
        {"{\"functions\":[{\"name\":\"a\"}],\"function_call\":\"required\"}", "function_call"},
        {"{\"tools\":[" WEATHER "],\"tool_choice\":\"auto\",\"function_call\":\"auto\"}", "function_call"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (read_tools(bad[i].body, H, &t, field) == 0) fail_msg("accepted: %s", bad[i].body);
        if (strcmp(field, bad[i].field) != 0) fail_msg("%s: field %s, wanted %s", bad[i].body, field, bad[i].field);
        llm_tools_free(&t);
    }
    /* tool_calls in messages */
    static const char *const bad_msgs[] = {
        "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":{}}]}",
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":3,"
        "\"arguments\":\"{}\"}}]}]}",
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"x\",\"function\":{\"name\":\"a\","
        "\"arguments\":\"{}\"}}]}]}",
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"a\",\"arguments\":7}}]}]}",
        "{\"messages\":[{\"role\":\"tool\",\"tool_call_id\":5,\"content\":\"x\"}]}",
    };
    for (size_t i = 0; i < sizeof bad_msgs / sizeof bad_msgs[0]; i++) {
        json_t *b = json_loads(bad_msgs[i], 0, NULL);
        wk_errors errs = {.n = 0};
        json_t *m = llm_request_read_chat(b, &errs);
        if (m || errs.n == 0) fail_msg("accepted: %s", bad_msgs[i]);
        assert_string_equal(errs.items[0].field, "messages[0]");
        json_decref(b);
    }
    /* arguments that are not an object's text reach the template as given */
    json_t *b = json_loads("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
                           "\"type\":\"function\",\"function\":{\"name\":\"a\",\"arguments\":\"not json\"}}]}]}",
                           0, NULL);
    wk_errors errs = {.n = 0};
    json_t *m = llm_request_read_chat(b, &errs);
    char *dump = json_dumps(m, JSON_COMPACT);
    assert_string_equal(dump, "[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":\"function\",\"function\":"
                              "{\"name\":\"a\",\"arguments\":\"not json\"},\"id\":\"c1\"}]}]");
    free(dump);
    json_decref(m);
    json_decref(b);
}

/* The message a finished choice of a chat with tools becomes. */
static json_t *message_of(rb_tool_family f, llm_tool_choice choice, const char *text, const char **finish) {
    llm_task t;
    memset(&t, 0, sizeof t);
    t.api = LLM_API_CHAT;
    char field[64];
    if (read_tools("{\"tools\":[" WEATHER "," TIME "]}", f, &t.req.tools, field)) fail_msg("%s", field);
    t.req.tools.choice = choice;
    *finish = "stop";
    json_t *m = llm_openai_tool_message(&t, text, strlen(text), finish);
    llm_tools_free(&t.req.tools);
    assert_non_null(m);
    return m;
}

static bool alnum(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9'))) return false;
    return s[n] == '\0';
}

static void test_answer_message(void **state) {
    (void)state;
    const char *finish;
    json_t *m = message_of(RB_TOOLS_HERMES, LLM_TOOLS_AUTO,
                           "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                           "</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
                           &finish);
    assert_string_equal(finish, "tool_calls");
    assert_string_equal(json_string_value(json_object_get(m, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(m, "content")), "Checking.");
    json_t *calls = json_object_get(m, "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    const char *id0 = json_string_value(json_object_get(json_array_get(calls, 0), "id"));
    const char *id1 = json_string_value(json_object_get(json_array_get(calls, 1), "id"));
    assert_true(strncmp(id0, "call_", 5) == 0 && alnum(id0 + 5, 24));
    assert_string_not_equal(id0, id1);
    char *dump = json_dumps(json_object_get(json_array_get(calls, 0), "function"), JSON_COMPACT);
    assert_string_equal(dump, "{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}");
    free(dump);
    assert_string_equal(json_string_value(json_object_get(json_array_get(calls, 1), "type")), "function");
    json_decref(m);
    /* Llama: no content; Mistral: 9-character ids */
    m = message_of(RB_TOOLS_LLAMA3, LLM_TOOLS_AUTO, "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}",
                   &finish);
    assert_true(json_is_null(json_object_get(m, "content")));
    assert_int_equal(json_array_size(json_object_get(m, "tool_calls")), 1);
    json_decref(m);
    m = message_of(RB_TOOLS_MISTRAL, LLM_TOOLS_AUTO, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]", &finish);
    const char *mid = json_string_value(json_object_get(json_array_get(json_object_get(m, "tool_calls"), 0), "id"));
    assert_true(alnum(mid, 9));
    json_decref(m);
    /* not a call, or "none": plain content, no tool_calls, finish unchanged */
    static const char *const plain[] = {"Paris is sunny.", "<tool_call>{\"name\": \"get_weather\"</tool_call>",
                                        "<tool_call>{\"name\": \"launch\", \"arguments\": {}}</tool_call>"};
    for (size_t i = 0; i < 3; i++) {
        m = message_of(RB_TOOLS_HERMES, LLM_TOOLS_AUTO, plain[i], &finish);
        assert_string_equal(finish, "stop");
        assert_string_equal(json_string_value(json_object_get(m, "content")), plain[i]);
        assert_null(json_object_get(m, "tool_calls"));
        json_decref(m);
    }
    m = message_of(RB_TOOLS_HERMES, LLM_TOOLS_NONE, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
                   &finish);
    assert_string_equal(finish, "stop");
    assert_null(json_object_get(m, "tool_calls"));
    json_decref(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_references),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_answer_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The grammar that forces tool calls (llm_tool_grammar_gbnf), compiled by
 * the grammar engine and run over text with its matcher: for every family,
 * calls written in the family's syntax with arguments that satisfy the
 * function's schema are accepted and complete the grammar, and each such
 * text parses (rb_tool_calls_parse) back into the same calls; a wrong or
 * unlisted name, a missing required property, a value outside an enum, an
 * extra property (additionalProperties false), a second call without
 * parallel_tool_calls, or another family's syntax are rejected. Schemas the
 * compiler refuses name the function. */
#include "testutil.h"

#include "rbee/grammar.h"
#include "worker_llm/llm_tool_grammar.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rb_tokenizer *g_tok;
static rb_grammar_vocab *g_vocab;

static int setup(void **state) {
    (void)state;
    size_t jl = 0;
    char *tj = tu_read_file(RBEE_DEFAULT_MODEL_DIR "/hf/tokenizer.json", &jl);
    rb_error e;
    size_t cl = 0;
    char *cj = tu_read_file(RBEE_DEFAULT_MODEL_DIR "/hf/tokenizer_config.json", &cl);
    rb_status s = rb_tokenizer_load_hf_memory(tj, jl, cj, cl, &g_tok, &e);
    free(tj);
    free(cj);
    if (s != RB_OK) {
        print_error("tokenizer: %s\n", e.msg);
        return -1;
    }
    const int32_t eos = rb_tokenizer_eos(g_tok);
    if (rb_grammar_vocab_create(g_tok, &eos, 1, &g_vocab, &e) != RB_OK) {
        print_error("vocab: %s\n", e.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rb_grammar_vocab_free(g_vocab);
    rb_tokenizer_free(g_tok);
    return 0;
}

#define WEATHER                                                                                                        \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"  \
    "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"],"                          \
    "\"additionalProperties\":false}}}"
#define TIME                                                                                                           \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"properties\":{\"zone\":{\"enum\":"     \
    "[\"UTC\",\"CET\"]}},\"required\":[\"zone\"],\"additionalProperties\":false}}}"

/* The tools of a body ({"tools":[WEATHER, TIME], ...extra}) on family f. */
static void tools_of(const char *extra, rb_tool_family f, llm_tools *t) {
    char body[2048];
    snprintf(body, sizeof body, "{\"tools\":[" WEATHER "," TIME "]%s}", extra);
    json_t *b = json_loads(body, 0, NULL);
    wk_errors errs = {.n = 0};
    llm_tools_read(b, f, t, &errs);
    if (errs.n) fail_msg("%s: %s", errs.items[0].field, errs.items[0].message);
    json_decref(b);
}

static rb_grammar *compile(const llm_tools *t) {
    char *g = NULL;
    int bad = 0;
    rb_error e;
    if (llm_tool_grammar_gbnf(t, &g, &bad, &e) != RB_OK) fail_msg("gbnf: %s", e.msg);
    rb_grammar *gr = NULL;
    if (rb_grammar_parse(g, strlen(g), NULL, &gr, &e) != RB_OK) fail_msg("parse: %s\n%s", e.msg, g);
    free(g);
    return gr;
}

/* Whether the grammar takes text whole (accepted and complete). */
static bool takes(const rb_grammar *g, const char *text) {
    rb_grammar_matcher *m = NULL;
    rb_error e;
    TU_OK(rb_grammar_matcher_create(g, g_vocab, &m, &e));
    const bool ok = rb_grammar_matcher_accept_bytes(m, text, strlen(text), &e) == RB_OK && rb_grammar_matcher_is_complete(m);
    rb_grammar_matcher_free(m);
    return ok;
}

static void yes(const rb_grammar *g, const llm_tools *t, const char *text, size_t n_calls) {
    if (!takes(g, text)) fail_msg("%s: rejected %s", rb_tool_family_name(t->family), text);
    rb_tool_parse p;
    rb_error e;
    TU_OK(rb_tool_calls_parse(t->family, text, strlen(text), (const char *const *)t->names, t->n, &p, &e));
    if (p.n_calls != n_calls) fail_msg("%s: parses into %zu calls, wanted %zu: %s", rb_tool_family_name(t->family),
                                       p.n_calls, n_calls, text);
    rb_tool_parse_free(&p);
}

static void no(const rb_grammar *g, const llm_tools *t, const char *text) {
    if (takes(g, text)) fail_msg("%s: accepted %s", rb_tool_family_name(t->family), text);
}

static void test_families(void **state) {
    (void)state;
    llm_tools t;
    rb_grammar *g;
    /* Hermes, required, parallel */
    tools_of(",\"tool_choice\":\"required\"", RB_TOOLS_HERMES, &t);
    g = compile(&t);
    yes(g, &t, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", 1);
    yes(g, &t, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 3}}\n</tool_call>",
        2);
    no(g, &t, "<tool_call>\n{\"name\": \"get_news\", \"arguments\": {}}\n</tool_call>");
    no(g, &t, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>");            /* required */
    no(g, &t, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"PST\"}}\n</tool_call>"); /* enum */
    no(g, &t, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"x\": 1}}\n</tool_call>");
    no(g, &t, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
    no(g, &t, "Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
    /* at most LLM_MAX_FORCED_CALLS calls */
    char many[4096] = "";
    for (int i = 0; i < LLM_MAX_FORCED_CALLS; i++)
        strcat(many, i ? "\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>"
                       : "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>");
    yes(g, &t, many, LLM_MAX_FORCED_CALLS);
    strcat(many, "\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>");
    no(g, &t, many);
    rb_grammar_free(g);
    llm_tools_free(&t);
    /* Hermes, named, one call */
    tools_of(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}},\"parallel_tool_calls\":false",
             RB_TOOLS_HERMES, &t);
    g = compile(&t);
    yes(g, &t, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>", 1);
    no(g, &t, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
    no(g, &t, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>\n"
              "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>");
    rb_grammar_free(g);
    llm_tools_free(&t);
    /* Llama 3: one call, "parameters" */
    tools_of(",\"tool_choice\":\"required\"", RB_TOOLS_LLAMA3, &t);
    g = compile(&t);
    yes(g, &t, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", 1);
    yes(g, &t, "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}", 1);
    no(g, &t, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}");
    no(g, &t, "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}; {\"name\": \"get_time\", \"parameters\": "
              "{\"zone\": \"UTC\"}}");
    rb_grammar_free(g);
    llm_tools_free(&t);
    /* Mistral arrays and the [ARGS] form */
    tools_of(",\"tool_choice\":\"required\"", RB_TOOLS_MISTRAL, &t);
    g = compile(&t);
    yes(g, &t, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", 1);
    yes(g, &t, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", "
               "\"arguments\": {\"zone\": \"UTC\"}}]",
        2);
    no(g, &t, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}");
    rb_grammar_free(g);
    llm_tools_free(&t);
    tools_of(",\"tool_choice\":\"required\"", RB_TOOLS_MISTRAL_ARGS, &t);
    g = compile(&t);
    yes(g, &t, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", 1);
    yes(g, &t, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{\"zone\": \"CET\"}", 2);
    no(g, &t, "[TOOL_CALLS]get_time[ARGS]{\"zone\": 5}");
    rb_grammar_free(g);
    llm_tools_free(&t);
}

static void test_bad_schemas(void **state) {
    (void)state;
    static const char *const bodies[] = {
        "{\"tools\":[" WEATHER ",{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"array\"}}}],"
        "\"tool_choice\":\"required\"}",
        "{\"tools\":[" WEATHER ",{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"a\":{\"type\":\"strange\"}}}}}],\"tool_choice\":\"required\"}",
    };
    for (size_t i = 0; i < 2; i++) {
        json_t *b = json_loads(bodies[i], 0, NULL);
        wk_errors errs = {.n = 0};
        llm_tools t;
        llm_tools_read(b, RB_TOOLS_HERMES, &t, &errs);
        assert_int_equal(errs.n, 0);
        char *g = NULL;
        int bad = -1;
        rb_error e;
        assert_int_not_equal(llm_tool_grammar_gbnf(&t, &g, &bad, &e), RB_OK);
        assert_null(g);
        assert_int_equal(bad, 1);
        assert_true(strlen(e.msg) > 0);
        llm_tools_free(&t);
        json_decref(b);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_families),
        cmocka_unit_test(test_bad_schemas),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

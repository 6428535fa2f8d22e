/* Implementation of llm_tool_grammar.h: the rules are written into a
 * growing buffer, each function's arguments rule set coming from the
 * grammar engine's schema compiler under the rule name "args-<i>" (its
 * helpers are "args-<i>-..."; no other rule here starts with "args-"). */
#include "worker_llm/llm_tool_grammar.h"
#include "rbee/grammar.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if (!b->p || b->len + (size_t)n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 1024;
        while (nc < b->len + (size_t)n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
        va_start(ap, fmt);
        vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

/* The arguments rules of function i: its schema as an object schema. */
static rb_status args_rules(const llm_tools *t, size_t i, sbuf *b, rb_error *err) {
    json_error_t je;
    json_t *schema = json_loads(t->params[i], 0, &je);
    if (!json_is_object(schema)) {
        json_decref(schema);
        return rb_error_set(err, RB_E_INVALID, "parameters must be a JSON schema object");
    }
    json_t *type = json_object_get(schema, "type");
    if (!type) {
        json_object_set_new(schema, "type", json_string("object"));
    } else if (!json_is_string(type) || strcmp(json_string_value(type), "object") != 0) {
        json_decref(schema);
        return rb_error_set(err, RB_E_INVALID, "parameters must describe an object (\"type\": \"object\")");
    }
    char name[32];
    snprintf(name, sizeof name, "args-%zu", i);
    char *g = NULL;
    size_t gl = 0;
    rb_status s = rb_json_schema_to_gbnf(schema, name, &g, &gl, err);
    json_decref(schema);
    if (s != RB_OK) return s;
    put(b, "%s\n", g);
    free(g);
    return RB_OK;
}

rb_status llm_tool_grammar_gbnf(const llm_tools *t, char **gbnf, int *bad_tool, rb_error *err) {
    *gbnf = NULL;
    *bad_tool = -1;
    if (t->n == 0 || (t->choice != LLM_TOOLS_REQUIRED && t->choice != LLM_TOOLS_NAMED))
        return rb_error_set(err, RB_E_INVALID, "no forced tool call");
    const char *key = t->family == RB_TOOLS_LLAMA3 ? "parameters" : "arguments";
    sbuf b = {0};
    /* the calls after the first one: none, or up to LLM_MAX_FORCED_CALLS - 1 */
    char more[16] = "{0}";
    if (t->parallel) snprintf(more, sizeof more, "{0,%d}", LLM_MAX_FORCED_CALLS - 1);
    switch (t->family) {
    case RB_TOOLS_LLAMA3: put(&b, "root ::= call\n"); break;
    case RB_TOOLS_HERMES:
        put(&b, "root ::= block (\"\\n\" block)%s\n", more);
        put(&b, "block ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n");
        break;
    case RB_TOOLS_MISTRAL: put(&b, "root ::= \"[TOOL_CALLS][\" call (\", \" call)%s \"]\"\n", more); break;
    case RB_TOOLS_MISTRAL_ARGS:
        put(&b, "root ::= \"[TOOL_CALLS]\" call (\"[TOOL_CALLS]\" call)%s\n", more);
        break;
    case RB_TOOLS_NONE:
        free(b.p);
        return rb_error_set(err, RB_E_UNSUPPORTED, "the chat template has no tool-call syntax");
    }
    const size_t first = t->choice == LLM_TOOLS_NAMED ? (size_t)t->named : 0;
    const size_t last = t->choice == LLM_TOOLS_NAMED ? (size_t)t->named + 1 : t->n;
    put(&b, "call ::=");
    for (size_t i = first; i < last; i++) put(&b, "%s fn-%zu", i > first ? " |" : "", i);
    put(&b, "\n");
    for (size_t i = first; i < last; i++) {
        /* names are letters, digits, '_' and '-' (llm_tools_read): nothing to escape */
        if (t->family == RB_TOOLS_MISTRAL_ARGS)
            put(&b, "fn-%zu ::= \"%s[ARGS]\" args-%zu\n", i, t->names[i], i);
        else
            put(&b, "fn-%zu ::= \"{\\\"name\\\": \\\"%s\\\", \\\"%s\\\": \" args-%zu \"}\"\n", i, t->names[i], key, i);
        rb_status s = args_rules(t, i, &b, err);
        if (s != RB_OK) {
            free(b.p);
            *bad_tool = (int)i;
            return s;
        }
    }
    if (b.oom) {
        free(b.p);
        return rb_error_set(err, RB_E_NOMEM, "out of memory building the tool-call grammar");
    }
    *gbnf = b.p;
    return RB_OK;
}

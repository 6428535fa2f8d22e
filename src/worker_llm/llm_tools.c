/* Implementation of llm_tools.h. */
#include "worker_llm/llm_tools.h"
#include "worker/wk_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void llm_tools_free(llm_tools *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) {
        free(t->names[i]);
        free(t->params[i]);
    }
    free(t->names);
    free(t->params);
    free(t->tools_json);
    memset(t, 0, sizeof *t);
}

static bool present(json_t *v) { return v && !json_is_null(v); }

/* OpenAI's rule for function names: 1 to 64 of a-z A-Z 0-9 _ - */
static bool valid_name(json_t *v) {
    if (!json_is_string(v)) return false;
    const char *s = json_string_value(v);
    const size_t n = json_string_length(v);
    if (n < 1 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* One function definition {name, description?, parameters?, strict?}; adds
 * it to out. field names it for errors. */
static void read_function(json_t *fn, const char *field, llm_tools *out, wk_errors *errs) {
    if (!json_is_object(fn)) {
        wk_errors_add(errs, field, "type:object", "%s must be an object {name, description, parameters}", field);
        return;
    }
    json_t *name = json_object_get(fn, "name");
    if (!valid_name(name)) {
        wk_errors_add(errs, field, "name", "%s.name must be 1 to 64 letters, digits, '_' or '-'", field);
        return;
    }
    json_t *desc = json_object_get(fn, "description");
    if (present(desc) && !json_is_string(desc)) {
        wk_errors_add(errs, field, "type:string", "%s.description must be a string", field);
        return;
    }
    json_t *params = json_object_get(fn, "parameters");
    if (present(params) && !json_is_object(params)) {
        wk_errors_add(errs, field, "type:object", "%s.parameters must be a JSON schema object", field);
        return;
    }
    json_t *strict = json_object_get(fn, "strict");
    if (present(strict) && !json_is_boolean(strict)) {
        wk_errors_add(errs, field, "type:boolean", "%s.strict must be true or false", field);
        return;
    }
    for (size_t i = 0; i < out->n; i++)
        if (strcmp(out->names[i], json_string_value(name)) == 0) {
            wk_errors_add(errs, field, "unique", "%s.name \"%s\" is defined twice", field, out->names[i]);
            return;
        }
    char *nm = strdup(json_string_value(name));
    char *ps = present(params) ? json_dumps(params, JSON_COMPACT) : strdup("{}");
    if (!nm || !ps) {
        free(nm);
        free(ps);
        wk_errors_add(errs, field, "memory", "out of memory");
        return;
    }
    out->names[out->n] = nm;
    out->params[out->n] = ps;
    out->n++;
}

/* tools (or the legacy functions, legacy true) into out; the array the
 * template sees is written to out->tools_json. */
static void read_tool_list(json_t *arr, bool legacy, llm_tools *out, wk_errors *errs) {
    const char *key = legacy ? "functions" : "tools";
    if (!json_is_array(arr)) {
        wk_errors_add(errs, key, "type:array", "%s must be an array", key);
        return;
    }
    const size_t n = json_array_size(arr);
    if (n > LLM_MAX_TOOLS) {
        wk_errors_add(errs, key, "max_items:128", "%s may hold at most %d functions, got %zu", key, LLM_MAX_TOOLS, n);
        return;
    }
    out->names = calloc(n ? n : 1, sizeof *out->names);
    out->params = calloc(n ? n : 1, sizeof *out->params);
    json_t *shown = legacy ? json_array() : json_incref(arr);
    if (!out->names || !out->params || !shown) {
        json_decref(shown);
        wk_errors_add(errs, key, "memory", "out of memory");
        return;
    }
    size_t i;
    json_t *t;
    json_array_foreach(arr, i, t) {
        char field[48];
        snprintf(field, sizeof field, "%s[%zu]", key, i);
        if (legacy) {
            read_function(t, field, out, errs);
            if (json_is_object(t) &&
                json_array_append_new(shown, json_pack("{s:s,s:O}", "type", "function", "function", t)) != 0)
                wk_errors_add(errs, key, "memory", "out of memory");
            continue;
        }
        json_t *type = json_object_get(t, "type");
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function") != 0) {
            wk_errors_add(errs, field, "type:function", "%s must be {\"type\": \"function\", \"function\": {...}}", field);
            continue;
        }
        char ff[64];
        snprintf(ff, sizeof ff, "%s.function", field);
        read_function(json_object_get(t, "function"), ff, out, errs);
    }
    if (errs->n == 0 && !(out->tools_json = json_dumps(shown, JSON_COMPACT)))
        wk_errors_add(errs, key, "memory", "out of memory");
    json_decref(shown);
}

static int find_name(const llm_tools *t, const char *name) {
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->names[i], name) == 0) return (int)i;
    return -1;
}

/* tool_choice / function_call. */
static void read_choice(json_t *v, bool legacy, llm_tools *out, wk_errors *errs) {
    const char *key = legacy ? "function_call" : "tool_choice";
    if (!present(v)) {
        out->choice = out->n > 0 ? LLM_TOOLS_AUTO : LLM_TOOLS_OFF;
        return;
    }
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    json_t *name = NULL;
    if (s && strcmp(s, "none") == 0) {
        out->choice = out->n > 0 ? LLM_TOOLS_NONE : LLM_TOOLS_OFF;
        return;
    }
    if (s && strcmp(s, "auto") == 0) {
        out->choice = out->n > 0 ? LLM_TOOLS_AUTO : LLM_TOOLS_OFF;
        return;
    }
    if (s && strcmp(s, "required") == 0 && !legacy) {
        out->choice = LLM_TOOLS_REQUIRED;
    } else if (json_is_object(v) && legacy) {
        name = json_object_get(v, "name");
    } else if (json_is_object(v)) {
        json_t *type = json_object_get(v, "type");
        json_t *fn = json_object_get(v, "function");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0 || !json_is_object(fn)) {
            wk_errors_add(errs, key, "type:function",
                          "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                          "\"function\": {\"name\": ...}}");
            return;
        }
        name = json_object_get(fn, "name");
    } else {
        if (legacy)
            wk_errors_add(errs, key, "value", "function_call must be \"none\", \"auto\" or {\"name\": ...}");
        else
            wk_errors_add(errs, key, "value",
                          "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                          "\"function\": {\"name\": ...}}");
        return;
    }
    if (out->choice != LLM_TOOLS_REQUIRED) {
        if (!json_is_string(name)) {
            wk_errors_add(errs, key, "name", "%s must name a function (a string)", key);
            return;
        }
        const int k = find_name(out, json_string_value(name));
        if (k < 0) {
            char shown[80];
            wk_utf8_sanitize(json_string_value(name), shown, sizeof shown);
            wk_errors_add(errs, key, "name", "%s names \"%s\", which is not among the %s", key, shown,
                          legacy ? "functions" : "tools");
            return;
        }
        out->choice = LLM_TOOLS_NAMED;
        out->named = k;
    }
    if (out->n == 0) {
        wk_errors_add(errs, key, "requires:tools", "%s \"%s\" needs %s", key, s ? s : "function",
                      legacy ? "functions" : "tools");
        out->choice = LLM_TOOLS_OFF;
    }
}

void llm_tools_read(json_t *body, rb_tool_family family, llm_tools *out, wk_errors *errs) {
    memset(out, 0, sizeof *out);
    out->family = family;
    out->parallel = true;
    const int e0 = errs->n;
    json_t *tools = json_object_get(body, "tools"), *fns = json_object_get(body, "functions");
    json_t *tc = json_object_get(body, "tool_choice"), *fc = json_object_get(body, "function_call");
    const bool has_tools = present(tools) && !(json_is_array(tools) && json_array_size(tools) == 0);
    const bool has_fns = present(fns) && !(json_is_array(fns) && json_array_size(fns) == 0);
    if (has_tools && has_fns) {
        wk_errors_add(errs, "functions", "exclusive", "give tools or the legacy functions, not both");
        return;
    }
    if (present(tc) && present(fc)) {
        wk_errors_add(errs, "function_call", "exclusive", "give tool_choice or the legacy function_call, not both");
        return;
    }
    if (has_tools) read_tool_list(tools, false, out, errs);
    else if (has_fns) read_tool_list(fns, true, out, errs);
    json_t *ptc = json_object_get(body, "parallel_tool_calls");
    if (present(ptc)) {
        if (!json_is_boolean(ptc)) wk_errors_add(errs, "parallel_tool_calls", "type:boolean",
                                                 "parallel_tool_calls must be true or false");
        else out->parallel = json_is_true(ptc);
    }
    if (errs->n > e0) return;
    if (present(fc)) read_choice(fc, true, out, errs);
    else read_choice(tc, false, out, errs);
    if (errs->n > e0) return;
    if (out->choice != LLM_TOOLS_OFF && out->choice != LLM_TOOLS_NONE && family == RB_TOOLS_NONE)
        wk_errors_add(errs, has_fns ? "functions" : "tools", "unsupported_parameter",
                      "the model's chat template shows no tool-call syntax this worker can parse (Llama 3.1+ JSON, "
                      "Qwen/Hermes <tool_call>, Mistral [TOOL_CALLS]); only tool_choice \"none\" is possible");
}

json_t *llm_tools_message_calls(json_t *calls, const char *field, wk_errors *errs) {
    if (!json_is_array(calls)) {
        wk_errors_add(errs, field, "type:array", "%s.tool_calls must be an array", field);
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *id = json_object_get(c, "id"), *type = json_object_get(c, "type");
        json_t *fn = json_object_get(c, "function");
        json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
        json_t *args = json_is_object(fn) ? json_object_get(fn, "arguments") : NULL;
        if (!json_is_object(c) || (present(id) && !json_is_string(id)) ||
            (present(type) && !(json_is_string(type) && strcmp(json_string_value(type), "function") == 0)) ||
            !json_is_string(name) || !(json_is_string(args) || json_is_object(args))) {
            wk_errors_add(errs, field, "type:tool_call",
                          "%s.tool_calls[%zu] must be {\"id\", \"type\": \"function\", \"function\": {\"name\": "
                          "string, \"arguments\": JSON text}}", field, i);
            json_decref(out);
            return NULL;
        }
        json_t *a = NULL;
        if (json_is_string(args)) {
            json_error_t je;
            a = json_loadb(json_string_value(args), json_string_length(args), 0, &je);
            if (!json_is_object(a)) {
                json_decref(a);
                a = json_incref(args); /* not an object's text: the template gets the string */
            }
        } else {
            a = json_incref(args);
        }
        json_t *o = json_pack("{s:s,s:{s:O,s:o}}", "type", "function", "function", "name", name, "arguments", a);
        if (o && present(id)) json_object_set(o, "id", id);
        if (!o || json_array_append_new(out, o) != 0) {
            wk_errors_add(errs, field, "memory", "out of memory");
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

void llm_tools_call_id(rb_tool_family family, char *out) {
    static const char an[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char r[24];
    wk_random_bytes(r, sizeof r);
    const bool mistral = family == RB_TOOLS_MISTRAL || family == RB_TOOLS_MISTRAL_ARGS;
    const size_t n = mistral ? 9 : 24;
    size_t w = 0;
    if (!mistral) {
        memcpy(out, "call_", 5);
        w = 5;
    }
    for (size_t i = 0; i < n; i++) out[w++] = an[r[i] % 62];
    out[w] = '\0';
}

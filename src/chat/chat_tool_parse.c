/* rb_tool_calls_parse and rb_tool_calls_hold (include/rbee/chat_tools.h):
 * the model output of each tool-call family split into content and calls.
 * A JSON value's extent is found by a small bracket/string scanner, then
 * the slice is parsed by jansson on its own, so nothing past the value can
 * change how it parses; a call's arguments are re-serialised compactly. */
#include "rbee/chat_tools.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define LLAMA_TAG "<|python_tag|>"
#define MISTRAL_ARGS "[ARGS]"
#define HERMES_CLOSE "</tool_call>"

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const char *s, size_t i, size_t len) {
    while (i < len && is_ws(s[i])) i++;
    return i;
}

static bool starts(const char *s, size_t i, size_t len, const char *lit) {
    const size_t n = strlen(lit);
    return len - i >= n && memcmp(s + i, lit, n) == 0;
}

/* The end (one past) of the JSON object or array opening at s[i], or 0 when
 * the text ends first or the brackets do not match. Only the extent: the
 * slice is validated by jansson afterwards. */
static size_t value_end(const char *s, size_t i, size_t len) {
    char stack[128];
    int depth = 0;
    bool in_str = false;
    for (; i < len; i++) {
        const char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
            continue;
        }
        if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            if (depth == (int)sizeof stack) return 0;
            stack[depth++] = c == '{' ? '}' : ']';
        } else if (c == '}' || c == ']') {
            if (depth == 0 || stack[depth - 1] != c) return 0;
            if (--depth == 0) return i + 1;
        } else if (depth == 0) {
            return 0; /* not an object or array */
        }
    }
    return 0;
}

/* The JSON value in s[i..end) (an object or array), or NULL. */
static json_t *load_slice(const char *s, size_t i, size_t end) {
    json_error_t je;
    return json_loadb(s + i, end - i, JSON_REJECT_DUPLICATES, &je);
}

typedef struct calls {
    rb_tool_call *v;
    size_t n, cap;
    const char *const *names;
    size_t n_names;
    bool oom;
} calls;

static bool name_ok(const calls *c, const char *name, size_t len) {
    if (len == 0 || memchr(name, '\0', len)) return false;
    if (!c->names) return true;
    for (size_t i = 0; i < c->n_names; i++)
        if (c->names[i] && strlen(c->names[i]) == len && memcmp(c->names[i], name, len) == 0) return true;
    return false;
}

/* Adds a call; false when the name is not callable or args is not an object
 * (or out of memory, with c->oom set). */
static bool add_call(calls *c, const char *name, size_t name_len, json_t *args) {
    if (!json_is_object(args) || !name_ok(c, name, name_len)) return false;
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 4;
        rb_tool_call *nv = realloc(c->v, nc * sizeof *nv);
        if (!nv) goto oom;
        c->v = nv;
        c->cap = nc;
    }
    char *a = json_dumps(args, JSON_COMPACT);
    char *nm = malloc(name_len + 1);
    if (!a || !nm) {
        free(a);
        free(nm);
        goto oom;
    }
    memcpy(nm, name, name_len);
    nm[name_len] = '\0';
    c->v[c->n].name = nm;
    c->v[c->n].arguments = a;
    c->n++;
    return true;
oom:
    c->oom = true;
    return false;
}

/* A call object {"name": N, <key>: {...}} with key one of k1, k2. */
static bool add_call_object(calls *c, json_t *o, const char *k1, const char *k2) {
    if (!json_is_object(o)) return false;
    json_t *name = json_object_get(o, "name");
    json_t *args = json_object_get(o, k1);
    if (!args) args = json_object_get(o, k2);
    if (!json_is_string(name)) return false;
    return add_call(c, json_string_value(name), json_string_length(name), args);
}

/* One call object at s[*i]; advances *i past it. */
static bool take_object(calls *c, const char *s, size_t *i, size_t len, const char *k1, const char *k2) {
    if (*i >= len || s[*i] != '{') return false;
    const size_t end = value_end(s, *i, len);
    if (!end) return false;
    json_t *o = load_slice(s, *i, end);
    const bool ok = add_call_object(c, o, k1, k2);
    json_decref(o);
    *i = end;
    return ok;
}

static bool parse_llama(calls *c, const char *s, size_t len) {
    size_t i = skip_ws(s, 0, len);
    if (starts(s, i, len, LLAMA_TAG)) i = skip_ws(s, i + strlen(LLAMA_TAG), len);
    if (!take_object(c, s, &i, len, "parameters", "arguments")) return false;
    for (;;) {
        i = skip_ws(s, i, len);
        if (i < len && s[i] == ';') i = skip_ws(s, i + 1, len);
        if (i == len) return true;
        if (!take_object(c, s, &i, len, "parameters", "arguments")) return false;
    }
}

/* Hermes blocks from s[i], the first "<tool_call>" there. */
static bool parse_hermes(calls *c, const char *s, size_t i, size_t len) {
    const char *open = rb_tool_family_marker(RB_TOOLS_HERMES);
    while (i < len) {
        if (!starts(s, i, len, open)) return false;
        i = skip_ws(s, i + strlen(open), len);
        if (!take_object(c, s, &i, len, "arguments", "parameters")) return false;
        i = skip_ws(s, i, len);
        if (!starts(s, i, len, HERMES_CLOSE)) return false;
        i = skip_ws(s, i + strlen(HERMES_CLOSE), len);
    }
    return true;
}

static bool ident_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
           ch == '-' || ch == '.';
}

/* Mistral groups from s[i], the first "[TOOL_CALLS]" there. */
static bool parse_mistral(calls *c, const char *s, size_t i, size_t len) {
    const char *open = rb_tool_family_marker(RB_TOOLS_MISTRAL);
    if (!starts(s, i, len, open)) return false;
    while (i < len) {
        if (starts(s, i, len, open)) i = skip_ws(s, i + strlen(open), len);
        else if (c->n == 0) return false;
        if (i < len && s[i] == '[') { /* [{"name", "arguments"}, ...] */
            const size_t end = value_end(s, i, len);
            json_t *a = end ? load_slice(s, i, end) : NULL;
            bool ok = json_is_array(a) && json_array_size(a) > 0;
            size_t k;
            json_t *o;
            json_array_foreach(a, k, o) {
                if (!ok) break;
                ok = add_call_object(c, o, "arguments", "parameters");
            }
            json_decref(a);
            if (!ok) return false;
            i = end;
        } else { /* name[ARGS]{...} */
            const size_t n0 = i;
            while (i < len && ident_char(s[i])) i++;
            const size_t n1 = i;
            if (n1 == n0 || !starts(s, i, len, MISTRAL_ARGS)) return false;
            i += strlen(MISTRAL_ARGS);
            if (i >= len || s[i] != '{') return false;
            const size_t end = value_end(s, i, len);
            json_t *o = end ? load_slice(s, i, end) : NULL;
            const bool ok = add_call(c, s + n0, n1 - n0, o);
            json_decref(o);
            if (!ok) return false;
            i = end;
        }
        i = skip_ws(s, i, len);
        if (i < len && !starts(s, i, len, open)) return false;
    }
    return true;
}

/* The first occurrence of lit in s, or len. */
static size_t find(const char *s, size_t len, const char *lit) {
    const size_t n = strlen(lit);
    for (size_t i = 0; i + n <= len; i++)
        if (s[i] == lit[0] && memcmp(s + i, lit, n) == 0) return i;
    return len;
}

static size_t rtrim(const char *s, size_t end) {
    while (end > 0 && is_ws(s[end - 1])) end--;
    return end;
}

static void free_calls(calls *c) {
    for (size_t i = 0; i < c->n; i++) {
        free(c->v[i].name);
        free(c->v[i].arguments);
    }
    free(c->v);
    memset(c, 0, sizeof *c);
}

static bool set_content(rb_tool_parse *out, const char *s, size_t n) {
    if (n == 0) return true;
    out->content = malloc(n + 1);
    if (!out->content) return false;
    memcpy(out->content, s, n);
    out->content[n] = '\0';
    out->content_len = n;
    return true;
}

rb_status rb_tool_calls_parse(rb_tool_family f, const char *text, size_t len, const char *const *names,
                              size_t n_names, rb_tool_parse *out, rb_error *err) {
    if (!out || (!text && len)) return rb_error_set(err, RB_E_INVALID, "rb_tool_calls_parse: bad arguments");
    memset(out, 0, sizeof *out);
    calls c = {.names = names, .n_names = n_names};
    size_t before = len; /* where the calls start */
    bool ok = false;
    if (f == RB_TOOLS_LLAMA3) {
        before = 0;
        ok = parse_llama(&c, text, len);
    } else if (f == RB_TOOLS_HERMES || f == RB_TOOLS_MISTRAL || f == RB_TOOLS_MISTRAL_ARGS) {
        before = find(text, len, rb_tool_family_marker(f));
        if (before < len)
            ok = f == RB_TOOLS_HERMES ? parse_hermes(&c, text, before, len) : parse_mistral(&c, text, before, len);
    }
    if (c.oom) {
        free_calls(&c);
        return rb_error_set(err, RB_E_NOMEM, "out of memory parsing tool calls");
    }
    if (!ok || c.n == 0) {
        free_calls(&c);
        if (!set_content(out, text, len)) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        return RB_OK;
    }
    if (!set_content(out, text, rtrim(text, before))) {
        free_calls(&c);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    out->calls = c.v;
    out->n_calls = c.n;
    return RB_OK;
}

void rb_tool_parse_free(rb_tool_parse *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    free(p->content);
    memset(p, 0, sizeof *p);
}

/* Whether s[i..len) is a proper prefix of lit (the text may go on into it). */
static bool partial(const char *s, size_t i, size_t len, const char *lit) {
    const size_t n = strlen(lit);
    return len - i < n && memcmp(s + i, lit, len - i) == 0;
}

size_t rb_tool_calls_hold(rb_tool_family f, const char *text, size_t len, size_t from, bool *started) {
    if (started) *started = false;
    if (from > len) from = len;
    if (f == RB_TOOLS_LLAMA3) {
        if (from > 0) return len; /* content was sent: not a call */
        const size_t i = skip_ws(text, 0, len);
        if (i == len || partial(text, i, len, LLAMA_TAG)) return 0;
        if (text[i] == '{' || starts(text, i, len, LLAMA_TAG)) {
            if (started) *started = true;
            return 0;
        }
        return len;
    }
    const char *marker = rb_tool_family_marker(f);
    if (!marker) return len;
    size_t hold = from + find(text + from, len - from, marker);
    if (hold < len) {
        if (started) *started = true;
    } else {
        for (size_t i = from; i < hold; i++)
            if (text[i] == marker[0] && partial(text, i, len, marker)) {
                hold = i;
                break;
            }
    }
    /* trailing whitespace is content only if more content follows */
    while (hold > from && is_ws(text[hold - 1])) hold--;
    return hold;
}

/* JSON schema -> GBNF text (rb_json_schema_to_gbnf). Each subschema becomes
 * a rule `P-N`; objects list their properties in schema order with optional
 * ones skippable (a chain of rules so commas stay right), arrays count their
 * items with GBNF repetitions, $ref targets become shared rules (so
 * recursive schemas work), and every keyword that is not understood is an
 * error naming it and where it is, so the grammar is never looser than the
 * schema. */
#include "grammar/gram_internal.h"
#include "grammar/json_schema_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#define JS_MAX_DEPTH 64

typedef struct js_ref {
    char *ref;
    int id;
} js_ref;

typedef struct js_ctx {
    const char *p; /* rule prefix */
    js_buf out;
    int counter;
    unsigned formats;
    bool need_kchar; /* P-kchar, emitted once */
    const json_t *root;
    js_ref *refs;
    size_t n_refs, cap_refs;
    rb_status st;
    rb_error *err;
    int depth;
} js_ctx;

static bool js_fail(js_ctx *c, rb_status st, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static bool js_fail(js_ctx *c, rb_status st, const char *path, const char *fmt, ...) {
    if (c->st != RB_OK) return false;
    char msg[RB_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = rb_error_set(c->err, st, "json schema: %s (at %s)", msg, path[0] ? path : "/");
    return false;
}

static const char *const annotations[] = {"title",    "description", "default",   "examples", "$schema",
                                          "$id",      "$comment",    "deprecated", "readOnly", "writeOnly",
                                          "$defs",    "definitions", NULL};
static const char *const object_kw[] = {"properties", "required", "additionalProperties", NULL};
static const char *const array_kw[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems",
                                       "uniqueItems", NULL};
static const char *const string_kw[] = {"minLength", "maxLength", "format", NULL};
static const char *const generic_kw[] = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

static bool has_any(const json_t *s, const char *const *l) {
    for (; *l; l++)
        if (json_object_get(s, *l)) return true;
    return false;
}

static void child_path(char *dst, size_t cap, const char *path, const char *seg) {
    snprintf(dst, cap, "%s/%s", path, seg);
}

static bool gen_rule(js_ctx *c, const json_t *schema, const char *path, int *id);
static bool js_gen_body(js_ctx *c, const json_t *s, const char *path, js_buf *b);

/* Non-negative integer keyword value (absent: def). */
static bool get_count(js_ctx *c, const json_t *s, const char *key, const char *path, long long def, long long *out) {
    const json_t *v = json_object_get(s, key);
    *out = def;
    if (!v) return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return js_fail(c, RB_E_INVALID, path, "'%s' must be a non-negative integer", key);
    if (json_integer_value(v) > GRAM_MAX_REPEAT)
        return js_fail(c, RB_E_UNSUPPORTED, path, "'%s' over 10000 is not supported", key);
    *out = json_integer_value(v);
    return true;
}

static void add_rep(js_buf *b, long long lo, long long hi) {
    if (hi < 0) js_addf(b, "{%lld,}", lo);
    else js_addf(b, "{%lld,%lld}", lo, hi);
}

static bool gen_string(js_ctx *c, const json_t *s, const char *path, js_buf *b) {
    const json_t *fmt = json_object_get(s, "format");
    long long lo, hi;
    if (!get_count(c, s, "minLength", path, 0, &lo) || !get_count(c, s, "maxLength", path, -1, &hi)) return false;
    if (hi >= 0 && lo > hi) return js_fail(c, RB_E_INVALID, path, "%s", "minLength > maxLength: no string fits");
    if (fmt) {
        const char *f = json_string_value(fmt);
        if (!f) return js_fail(c, RB_E_INVALID, path, "%s", "'format' must be a string");
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
            return js_fail(c, RB_E_UNSUPPORTED, path, "%s", "minLength/maxLength together with format");
        const char *rule;
        if (!strcmp(f, "date")) { rule = "date"; c->formats |= JS_FMT_DATE; }
        else if (!strcmp(f, "time")) { rule = "time"; c->formats |= JS_FMT_TIME; }
        else if (!strcmp(f, "date-time")) { rule = "date-time"; c->formats |= JS_FMT_DATE | JS_FMT_TIME; }
        else if (!strcmp(f, "uuid")) { rule = "uuid"; c->formats |= JS_FMT_UUID; }
        else return js_fail(c, RB_E_UNSUPPORTED, path, "unsupported string format '%s'", f);
        js_addf(b, "\"\\\"\" %s-%s \"\\\"\"", c->p, rule);
        return true;
    }
    if (lo == 0 && hi < 0) {
        js_addf(b, "%s-string", c->p);
        return true;
    }
    js_addf(b, "\"\\\"\" %s-char", c->p);
    add_rep(b, lo, hi);
    js_add(b, " \"\\\"\"");
    return true;
}

/* Code point trie of property names for "any key but these". */
typedef struct ktrie {
    uint32_t cp;
    bool end;
    struct ktrie *kids;
    size_t n_kids, cap;
} ktrie;

static void ktrie_free(ktrie *t) {
    for (size_t i = 0; i < t->n_kids; i++) ktrie_free(&t->kids[i]);
    free(t->kids);
}

static bool ktrie_add(ktrie *t, const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const unsigned char *u = (const unsigned char *)s + i;
        uint32_t cp;
        size_t l = u[0] < 0x80 ? 1 : u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
        if (i + l > n) return true;
        cp = l == 1 ? u[0] : l == 2 ? u[0] & 0x1Fu : l == 3 ? u[0] & 0x0Fu : u[0] & 0x07u;
        for (size_t k = 1; k < l; k++) cp = cp << 6 | (u[k] & 0x3Fu);
        if (cp < 0x20 || cp == '"' || cp == '\\') return true; /* needs an escape: no unescaped key equals it */
        ktrie *next = NULL;
        for (size_t k = 0; k < t->n_kids; k++)
            if (t->kids[k].cp == cp) next = &t->kids[k];
        if (!next) {
            if (t->n_kids == t->cap) {
                size_t nc = t->cap ? t->cap * 2 : 4;
                ktrie *x = realloc(t->kids, nc * sizeof *x);
                if (!x) return false;
                t->kids = x;
                t->cap = nc;
            }
            next = &t->kids[t->n_kids++];
            memset(next, 0, sizeof *next);
            next->cp = cp;
        }
        t = next;
        i += l;
    }
    t->end = true;
    return true;
}

/* Emits rule P-N matching the rest of an unescaped key below trie node t. */
static int ktrie_emit(js_ctx *c, const ktrie *t) {
    int id = c->counter++;
    js_buf body = {0};
    bool first = true;
    if (!t->end) {
        js_add(&body, "\"\"");
        first = false;
    }
    for (size_t k = 0; k < t->n_kids; k++) {
        int kid = ktrie_emit(c, &t->kids[k]);
        js_addf(&body, "%s[\\U%08X] %s-%d", first ? "" : " | ", (unsigned)t->kids[k].cp, c->p, kid);
        first = false;
    }
    js_addf(&body, "%s[^\"\\\\\\x00-\\x1F", first ? "" : " | ");
    for (size_t k = 0; k < t->n_kids; k++) js_addf(&body, "\\U%08X", (unsigned)t->kids[k].cp);
    js_addf(&body, "] %s-kchar*", c->p);
    js_addf(&c->out, "%s-%d ::= %s\n", c->p, id, body.p ? body.p : "\"\"");
    if (body.oom) c->out.oom = true;
    free(body.p);
    return id;
}

static bool gen_object(js_ctx *c, const json_t *s, const char *path, js_buf *b) {
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return js_fail(c, RB_E_INVALID, path, "%s", "'properties' must be an object");
    if (req && !json_is_array(req)) return js_fail(c, RB_E_INVALID, path, "%s", "'required' must be an array");
    if (addl && !json_is_object(addl) && !json_is_boolean(addl))
        return js_fail(c, RB_E_INVALID, path, "%s", "'additionalProperties' must be a schema");
    size_t n_req = req ? json_array_size(req) : 0;
    for (size_t i = 0; i < n_req; i++)
        if (!json_is_string(json_array_get(req, i)))
            return js_fail(c, RB_E_INVALID, path, "%s", "'required' must list strings");
    size_t n_props = props ? json_object_size(props) : 0;
    if (!n_props && !n_req && (!addl || json_is_true(addl))) {
        js_addf(b, "%s-object", c->p);
        return true;
    }
    /* Names: properties in order, then required names not among them. */
    size_t n = 0, cap = n_props + n_req + 1;
    const char **names = malloc(cap * sizeof *names);
    const json_t **schemas = malloc(cap * sizeof *schemas);
    bool *required = calloc(cap, sizeof *required);
    int *kv = malloc(cap * sizeof *kv);
    bool ok = names && schemas && required && kv;
    if (!ok) c->out.oom = true;
    const char *key;
    json_t *val;
    if (ok && props) {
        json_object_foreach((json_t *)props, key, val) {
            names[n] = key;
            schemas[n++] = val;
        }
    }
    for (size_t i = 0; ok && i < n_req; i++) {
        const char *r = json_string_value(json_array_get(req, i));
        size_t k = 0;
        while (k < n && strcmp(names[k], r)) k++;
        if (k == n) {
            names[n] = r;
            schemas[n++] = json_true();
        }
        required[k] = true;
    }
    /* additional members allowed? explicit true or a schema */
    bool extra = addl && !json_is_false(addl);
    int extra_val = -1, extra_key = -1;
    if (ok && extra && !json_is_true(addl)) {
        char sub[1024];
        child_path(sub, sizeof sub, path, "additionalProperties");
        ok = gen_rule(c, addl, sub, &extra_val);
    }
    if (ok && extra && n) {
        ktrie root = {0};
        for (size_t i = 0; ok && i < n; i++) ok = ktrie_add(&root, names[i], strlen(names[i]));
        if (!ok) c->out.oom = true;
        else extra_key = ktrie_emit(c, &root);
        ktrie_free(&root);
    }
    for (size_t i = 0; ok && i < n; i++) {
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/properties/%s", path, names[i]);
        int vid;
        ok = gen_rule(c, schemas[i], sub, &vid);
        if (!ok) break;
        kv[i] = c->counter++;
        json_t *js = json_string(names[i]);
        char *quoted = js ? json_dumps(js, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        json_decref(js);
        if (!quoted) {
            c->out.oom = true;
            ok = false;
            break;
        }
        js_addf(&c->out, "%s-%d ::= ", c->p, kv[i]);
        js_add_literal(&c->out, quoted, strlen(quoted));
        js_addf(&c->out, " %s-ws \":\" %s-ws %s-%d\n", c->p, c->p, c->p, vid);
        free(quoted);
    }
    if (ok) {
        /* extra member rule */
        int em = -1;
        if (extra) {
            em = c->counter++;
            js_addf(&c->out, "%s-%d ::= ", c->p, em);
            if (extra_key >= 0) js_addf(&c->out, "\"\\\"\" %s-%d \"\\\"\"", c->p, extra_key);
            else js_addf(&c->out, "%s-string", c->p);
            if (extra_val >= 0) js_addf(&c->out, " %s-ws \":\" %s-ws %s-%d\n", c->p, c->p, c->p, extra_val);
            else js_addf(&c->out, " %s-ws \":\" %s-ws %s-value\n", c->p, c->p, c->p);
            if (extra_key >= 0) c->need_kchar = true;
        }
        /* T_i: members i.. after at least one member; F_i: before any. */
        int base = c->counter;
        c->counter += 2 * (int)(n + 1);
        for (size_t i = 0; i <= n; i++) {
            int t = base + 2 * (int)i, f = t + 1;
            if (i == n) {
                if (extra) {
                    js_addf(&c->out, "%s-%d ::= ( %s-ws \",\" %s-ws %s-%d )*\n", c->p, t, c->p, c->p, c->p, em);
                    js_addf(&c->out, "%s-%d ::= ( %s-%d ( %s-ws \",\" %s-ws %s-%d )* )?\n", c->p, f, c->p, em, c->p,
                            c->p, c->p, em);
                } else {
                    js_addf(&c->out, "%s-%d ::= \"\"\n%s-%d ::= \"\"\n", c->p, t, c->p, f);
                }
                continue;
            }
            int tn = t + 2;
            if (required[i]) {
                js_addf(&c->out, "%s-%d ::= %s-ws \",\" %s-ws %s-%d %s-%d\n", c->p, t, c->p, c->p, c->p, kv[i], c->p, tn);
                js_addf(&c->out, "%s-%d ::= %s-%d %s-%d\n", c->p, f, c->p, kv[i], c->p, tn);
            } else {
                js_addf(&c->out, "%s-%d ::= ( %s-ws \",\" %s-ws %s-%d )? %s-%d\n", c->p, t, c->p, c->p, c->p, kv[i],
                        c->p, tn);
                js_addf(&c->out, "%s-%d ::= %s-%d %s-%d | %s-%d\n", c->p, f, c->p, kv[i], c->p, tn, c->p, f + 2);
            }
        }
        js_addf(b, "\"{\" %s-ws %s-%d %s-ws \"}\"", c->p, c->p, base + 1, c->p);
    }
    free(names);
    free(schemas);
    free(required);
    free(kv);
    return ok;
}

static bool gen_array(js_ctx *c, const json_t *s, const char *path, js_buf *b) {
    const json_t *items = json_object_get(s, "items");
    const json_t *prefix = json_object_get(s, "prefixItems");
    const json_t *rest = items;
    const char *rest_kw = "items";
    const json_t *uniq = json_object_get(s, "uniqueItems");
    if (uniq && !json_is_boolean(uniq)) return js_fail(c, RB_E_INVALID, path, "%s", "'uniqueItems' must be a boolean");
    if (json_is_true(uniq)) return js_fail(c, RB_E_UNSUPPORTED, path, "unsupported keyword '%s'", "uniqueItems: true");
    if (json_is_array(items)) { /* draft 7 tuple form */
        if (prefix) return js_fail(c, RB_E_INVALID, path, "%s", "both prefixItems and an items array");
        prefix = items;
        rest = json_object_get(s, "additionalItems");
        rest_kw = "additionalItems";
    } else if (json_object_get(s, "additionalItems")) {
        return js_fail(c, RB_E_UNSUPPORTED, path, "%s", "additionalItems without an items array");
    }
    if (prefix && !json_is_array(prefix)) return js_fail(c, RB_E_INVALID, path, "%s", "'prefixItems' must be an array");
    if (rest && !json_is_object(rest) && !json_is_boolean(rest))
        return js_fail(c, RB_E_INVALID, path, "'%s' must be a schema", rest_kw);
    long long lo, hi;
    if (!get_count(c, s, "minItems", path, 0, &lo) || !get_count(c, s, "maxItems", path, -1, &hi)) return false;
    size_t np = prefix ? json_array_size(prefix) : 0;
    if (json_is_false(rest) && (hi < 0 || hi > (long long)np)) hi = (long long)np;
    if (hi >= 0 && lo > hi) return js_fail(c, RB_E_INVALID, path, "%s", "minItems > maxItems (or more than the tuple allows)");
    int rest_id = -1;
    if (!json_is_false(rest) && (hi < 0 || hi > (long long)np)) {
        char sub[1024];
        child_path(sub, sizeof sub, path, rest_kw);
        if (rest && !json_is_true(rest)) {
            if (!gen_rule(c, rest, sub, &rest_id)) return false;
        }
    }
    char rest_name[96];
    if (rest_id >= 0) snprintf(rest_name, sizeof rest_name, "%s-%d", c->p, rest_id);
    else snprintf(rest_name, sizeof rest_name, "%s-value", c->p);
    /* tail: items beyond the prefix, count in [tlo, thi] */
    long long tlo = lo > (long long)np ? lo - (long long)np : 0;
    long long thi = hi < 0 ? -1 : hi - (long long)np;
    js_buf tail = {0};
    if (thi == 0 || (json_is_false(rest))) {
        js_add(&tail, "\"\"");
    } else if (np == 0) {
        if (tlo == 0) {
            js_addf(&tail, "( %s ( %s-ws \",\" %s-ws %s )", rest_name, c->p, c->p, rest_name);
            add_rep(&tail, 0, thi < 0 ? -1 : thi - 1);
            js_add(&tail, " )?");
        } else {
            js_addf(&tail, "%s ( %s-ws \",\" %s-ws %s )", rest_name, c->p, c->p, rest_name);
            add_rep(&tail, tlo - 1, thi < 0 ? -1 : thi - 1);
        }
    } else {
        js_addf(&tail, "( %s-ws \",\" %s-ws %s )", c->p, c->p, rest_name);
        add_rep(&tail, tlo, thi);
    }
    if (tail.oom) {
        free(tail.p);
        c->out.oom = true;
        return false;
    }
    /* E_i over the prefix, from the end */
    int next = c->counter++;
    js_addf(&c->out, "%s-%d ::= %s\n", c->p, next, tail.p);
    free(tail.p);
    for (size_t i = np; i-- > 0;) {
        int item;
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/prefixItems/%zu", path, i);
        if (!gen_rule(c, json_array_get(prefix, i), sub, &item)) return false;
        int e = c->counter++;
        char sep[96] = "";
        if (i > 0) snprintf(sep, sizeof sep, "%s-ws \",\" %s-ws ", c->p, c->p);
        if (hi >= 0 && (long long)i >= hi) js_addf(&c->out, "%s-%d ::= \"\"\n", c->p, e);
        else if ((long long)i < lo) js_addf(&c->out, "%s-%d ::= %s%s-%d %s-%d\n", c->p, e, sep, c->p, item, c->p, next);
        else js_addf(&c->out, "%s-%d ::= ( %s%s-%d %s-%d )?\n", c->p, e, sep, c->p, item, c->p, next);
        next = e;
    }
    js_addf(b, "\"[\" %s-ws %s-%d %s-ws \"]\"", c->p, c->p, next, c->p);
    return true;
}

static bool type_matches(const char *type, const json_t *v) {
    if (!strcmp(type, "string")) return json_is_string(v);
    if (!strcmp(type, "integer")) return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(type, "number")) return json_is_number(v);
    if (!strcmp(type, "boolean")) return json_is_boolean(v);
    if (!strcmp(type, "null")) return json_is_null(v);
    if (!strcmp(type, "object")) return json_is_object(v);
    if (!strcmp(type, "array")) return json_is_array(v);
    return false;
}

static bool check_type_name(js_ctx *c, const json_t *t, const char *path) {
    static const char *const types[] = {"string", "integer", "number", "boolean", "null", "object", "array", NULL};
    if (!json_is_string(t)) return js_fail(c, RB_E_INVALID, path, "%s", "'type' must be a string or a list of strings");
    if (!in_list(types, json_string_value(t))) return js_fail(c, RB_E_INVALID, path, "unknown type '%s'", json_string_value(t));
    return true;
}

static bool gen_typed(js_ctx *c, const json_t *s, const char *type, const char *path, js_buf *b) {
    if (!strcmp(type, "string")) return gen_string(c, s, path, b);
    if (!strcmp(type, "object")) return gen_object(c, s, path, b);
    if (!strcmp(type, "array")) return gen_array(c, s, path, b);
    js_addf(b, "%s-%s", c->p, type);
    return true;
}

static bool gen_enum(js_ctx *c, const json_t *s, const json_t *values, const char *path, js_buf *b) {
    const json_t *type = json_object_get(s, "type");
    size_t kept = 0;
    for (size_t i = 0; i < json_array_size(values); i++) {
        const json_t *v = json_array_get(values, i);
        bool ok = !type;
        if (json_is_string(type)) ok = type_matches(json_string_value(type), v);
        for (size_t k = 0; json_is_array(type) && k < json_array_size(type); k++)
            ok = ok || (json_is_string(json_array_get(type, k)) && type_matches(json_string_value(json_array_get(type, k)), v));
        if (!ok) continue;
        char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!text) {
            c->out.oom = true;
            return false;
        }
        if (kept++) js_add(b, " | ");
        js_add_literal(b, text, strlen(text));
        free(text);
    }
    if (!kept) return js_fail(c, RB_E_INVALID, path, "%s", "no value of 'enum'/'const' fits the schema");
    return true;
}

/* Resolves a local $ref to its schema. */
static const json_t *resolve(js_ctx *c, const char *ref, const char *path) {
    if (!strcmp(ref, "#")) return c->root;
    const char *name = NULL;
    const json_t *defs = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) { name = ref + 8; defs = json_object_get(c->root, "$defs"); }
    else if (!strncmp(ref, "#/definitions/", 14)) { name = ref + 14; defs = json_object_get(c->root, "definitions"); }
    else return js_fail(c, RB_E_UNSUPPORTED, path, "$ref '%s' (only #, #/$defs/... and #/definitions/...)", ref), NULL;
    /* JSON pointer unescaping of one segment */
    char key[512];
    size_t k = 0;
    for (const char *q = name; *q && k + 1 < sizeof key; q++) {
        if (*q == '/') return js_fail(c, RB_E_UNSUPPORTED, path, "$ref '%s' (nested path)", ref), NULL;
        if (*q == '~' && (q[1] == '0' || q[1] == '1')) { key[k++] = q[1] == '0' ? '~' : '/'; q++; }
        else key[k++] = *q;
    }
    key[k] = '\0';
    const json_t *t = defs ? json_object_get(defs, key) : NULL;
    if (!t) return js_fail(c, RB_E_INVALID, path, "$ref '%s' points nowhere", ref), NULL;
    return t;
}

static bool gen_ref(js_ctx *c, const char *ref, const char *path, js_buf *b) {
    for (size_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref)) {
            js_addf(b, "%s-%d", c->p, c->refs[i].id);
            return true;
        }
    const json_t *target = resolve(c, ref, path);
    if (!target) return false;
    if (c->n_refs == c->cap_refs) {
        size_t nc = c->cap_refs ? c->cap_refs * 2 : 8;
        js_ref *t = realloc(c->refs, nc * sizeof *t);
        if (!t) { c->out.oom = true; return false; }
        c->refs = t;
        c->cap_refs = nc;
    }
    int id = c->counter++;
    char *copy = strdup(ref);
    if (!copy) { c->out.oom = true; return false; }
    c->refs[c->n_refs++] = (js_ref){copy, id};
    js_addf(b, "%s-%d", c->p, id);
    /* the target's body goes into rule id (refs to it inside see the name) */
    js_buf body = {0};
    bool ok = js_gen_body(c, target, ref, &body);
    if (ok) js_addf(&c->out, "%s-%d ::= %s\n", c->p, id, body.p);
    if (body.oom) c->out.oom = true;
    free(body.p);
    return ok;
}

/* JSON types a schema may produce, as bits (integer and number share one),
 * following $ref and the type this compiler infers without "type". */
enum { JT_NULL = 1, JT_BOOL = 2, JT_NUM = 4, JT_STR = 8, JT_ARR = 16, JT_OBJ = 32, JT_ALL = 63 };

static const json_t *resolve(js_ctx *c, const char *ref, const char *path);

static unsigned value_type(const json_t *v) {
    if (json_is_null(v)) return JT_NULL;
    if (json_is_boolean(v)) return JT_BOOL;
    if (json_is_number(v)) return JT_NUM;
    if (json_is_string(v)) return JT_STR;
    if (json_is_array(v)) return JT_ARR;
    return JT_OBJ;
}

static unsigned type_name_bits(const char *t) {
    if (!t) return JT_ALL;
    if (!strcmp(t, "null")) return JT_NULL;
    if (!strcmp(t, "boolean")) return JT_BOOL;
    if (!strcmp(t, "integer") || !strcmp(t, "number")) return JT_NUM;
    if (!strcmp(t, "string")) return JT_STR;
    if (!strcmp(t, "array")) return JT_ARR;
    if (!strcmp(t, "object")) return JT_OBJ;
    return JT_ALL;
}

static unsigned type_mask(js_ctx *c, const json_t *s, int depth) {
    if (!json_is_object(s) || depth > 16) return JT_ALL;
    const json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref)) {
        rb_error *saved = c->err;
        rb_status st = c->st;
        c->err = NULL;
        const json_t *t = resolve(c, json_string_value(ref), "");
        c->err = saved;
        c->st = st; /* a bad $ref is reported where it is compiled */
        return t ? type_mask(c, t, depth + 1) : JT_ALL;
    }
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (cn) return value_type(cn);
    if (json_is_array(en)) {
        unsigned m = 0;
        for (size_t i = 0; i < json_array_size(en); i++) m |= value_type(json_array_get(en, i));
        return m;
    }
    const char *const lists[] = {"anyOf", "oneOf", "allOf"};
    for (int k = 0; k < 3; k++) {
        const json_t *l = json_object_get(s, lists[k]);
        if (!json_is_array(l)) continue;
        unsigned m = 0;
        for (size_t i = 0; i < json_array_size(l); i++) m |= type_mask(c, json_array_get(l, i), depth + 1);
        return m;
    }
    const json_t *type = json_object_get(s, "type");
    if (json_is_string(type)) return type_name_bits(json_string_value(type));
    if (json_is_array(type)) {
        unsigned m = 0;
        for (size_t i = 0; i < json_array_size(type); i++) m |= type_name_bits(json_string_value(json_array_get(type, i)));
        return m;
    }
    if (has_any(s, object_kw)) return JT_OBJ;
    if (has_any(s, array_kw)) return JT_ARR;
    if (has_any(s, string_kw)) return JT_STR;
    return JT_ALL;
}

/* The values a required property P is pinned to (const or enum) in an
 * object alternative, or NULL. */
static const json_t *pinned(js_ctx *c, const json_t *s, const char *p, int depth, bool *is_enum) {
    const json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref) && depth < 16) {
        rb_error *saved = c->err;
        rb_status st = c->st;
        c->err = NULL;
        const json_t *t = resolve(c, json_string_value(ref), "");
        c->err = saved;
        c->st = st;
        return t ? pinned(c, t, p, depth + 1, is_enum) : NULL;
    }
    const json_t *req = json_object_get(s, "required");
    bool is_req = false;
    for (size_t i = 0; json_is_array(req) && i < json_array_size(req); i++)
        if (json_is_string(json_array_get(req, i)) && !strcmp(json_string_value(json_array_get(req, i)), p)) is_req = true;
    const json_t *ps = json_object_get(json_object_get(s, "properties"), p);
    if (!is_req || !json_is_object(ps)) return NULL;
    *is_enum = json_object_get(ps, "enum") != NULL;
    return *is_enum ? json_object_get(ps, "enum") : json_object_get(ps, "const");
}

/* Do two value sets share a value? Each is an enum's array (ea) or one const value. */
static bool values_meet(const json_t *a, bool ea, const json_t *b, bool eb) {
    if (!a || !b || (ea && !json_is_array(a)) || (eb && !json_is_array(b))) return true; /* unknown: assume so */
    size_t na = ea ? json_array_size(a) : 1, nb = eb ? json_array_size(b) : 1;
    for (size_t i = 0; i < na; i++)
        for (size_t j = 0; j < nb; j++)
            if (json_equal(ea ? json_array_get(a, i) : (json_t *)a, eb ? json_array_get(b, j) : (json_t *)b)) return true;
    return false;
}

/* oneOf holds only if no value matches two alternatives: accepted when that
 * is evident (different JSON types; objects told apart by a required
 * property pinned to different values; enums/consts without common values). */
static bool one_of_disjoint(js_ctx *c, const json_t *list) {
    size_t n = json_array_size(list);
    unsigned *m = calloc(n ? n : 1, sizeof *m);
    if (!m) return false;
    bool by_type = true;
    for (size_t i = 0; i < n; i++) {
        m[i] = type_mask(c, json_array_get(list, i), 0);
        for (size_t j = 0; j < i; j++)
            if (m[i] & m[j]) by_type = false;
    }
    bool ok = by_type;
    if (!ok) { /* objects with a discriminating property */
        bool all_obj = true;
        for (size_t i = 0; i < n; i++) all_obj = all_obj && m[i] == JT_OBJ;
        const json_t *first = json_array_get(list, 0);
        const json_t *props = NULL;
        if (all_obj) {
            const json_t *f = first;
            for (int d = 0; d < 16 && json_is_string(json_object_get(f, "$ref")); d++) {
                rb_error *saved = c->err;
                rb_status st = c->st;
                c->err = NULL;
                f = resolve(c, json_string_value(json_object_get(f, "$ref")), "");
                c->err = saved;
                c->st = st;
                if (!f) break;
            }
            props = f ? json_object_get(f, "properties") : NULL;
        }
        const char *key;
        json_t *unused;
        if (json_is_object(props)) {
            json_object_foreach((json_t *)props, key, unused) {
                bool good = true;
                for (size_t i = 0; i < n && good; i++) {
                    bool ei = false, ej = false;
                    const json_t *vi = pinned(c, json_array_get(list, i), key, 0, &ei);
                    if (!vi) good = false;
                    for (size_t j = 0; j < i && good; j++) {
                        const json_t *vj = pinned(c, json_array_get(list, j), key, 0, &ej);
                        if (values_meet(vi, ei, vj, ej)) good = false;
                    }
                }
                if (good) { ok = true; break; }
            }
        }
    }
    if (!ok) { /* enums / consts only */
        bool lits = true;
        for (size_t i = 0; i < n && lits; i++) {
            const json_t *a = json_array_get(list, i);
            lits = json_is_object(a) && (json_object_get(a, "enum") || json_object_get(a, "const"));
        }
        ok = lits;
        for (size_t i = 0; i < n && ok; i++) {
            const json_t *a = json_array_get(list, i);
            const bool ea = json_object_get(a, "enum") != NULL;
            const json_t *va = ea ? json_object_get(a, "enum") : json_object_get(a, "const");
            for (size_t j = 0; j < i && ok; j++) {
                const json_t *b = json_array_get(list, j);
                const bool eb = json_object_get(b, "enum") != NULL;
                const json_t *vb = eb ? json_object_get(b, "enum") : json_object_get(b, "const");
                if (values_meet(va, ea, vb, eb)) ok = false;
            }
        }
    }
    free(m);
    return ok;
}

static bool js_gen_body(js_ctx *c, const json_t *s, const char *path, js_buf *b) {
    if (c->st != RB_OK || c->out.oom) return false;
    if (json_is_true(s)) { js_addf(b, "%s-value", c->p); return true; }
    if (json_is_false(s)) return js_fail(c, RB_E_UNSUPPORTED, path, "%s", "schema false (no value fits)");
    if (!json_is_object(s)) return js_fail(c, RB_E_INVALID, path, "%s", "a schema must be an object or a boolean");
    if (++c->depth > JS_MAX_DEPTH) return js_fail(c, RB_E_UNSUPPORTED, path, "%s", "schema nested too deeply");
    bool ok = true;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)s, key, val) {
        if (in_list(annotations, key) || in_list(object_kw, key) || in_list(array_kw, key) || in_list(string_kw, key) ||
            in_list(generic_kw, key))
            continue;
        if (!strcmp(key, "pattern"))
            ok = js_fail(c, RB_E_UNSUPPORTED, path, "%s", "unsupported keyword 'pattern' (regular expressions are not compiled)");
        else
            ok = js_fail(c, RB_E_UNSUPPORTED, path, "unsupported keyword '%s'", key);
        break;
    }
    const json_t *type = json_object_get(s, "type");
    if (ok && type) {
        if (json_is_array(type)) {
            if (!json_array_size(type)) ok = js_fail(c, RB_E_INVALID, path, "%s", "empty 'type' list");
            for (size_t i = 0; ok && i < json_array_size(type); i++) ok = check_type_name(c, json_array_get(type, i), path);
        } else {
            ok = check_type_name(c, type, path);
        }
    }
    const json_t *ref = json_object_get(s, "$ref");
    const json_t *en = json_object_get(s, "enum");
    const json_t *cn = json_object_get(s, "const");
    const json_t *any = json_object_get(s, "anyOf");
    const json_t *one = json_object_get(s, "oneOf");
    const json_t *all = json_object_get(s, "allOf");
    bool typed_kw = has_any(s, object_kw) || has_any(s, array_kw) || has_any(s, string_kw);
    int combos = !!ref + !!(en || cn) + !!any + !!one + !!all;
    if (!ok) {
    } else if (combos > 1 || (combos && typed_kw) || (combos && type && !(en || cn))) {
        ok = js_fail(c, RB_E_UNSUPPORTED, path, "%s",
                     "combining $ref, enum/const, anyOf, oneOf, allOf with each other or with other constraints");
    } else if (ref) {
        if (!json_is_string(ref)) ok = js_fail(c, RB_E_INVALID, path, "%s", "'$ref' must be a string");
        else ok = gen_ref(c, json_string_value(ref), path, b);
    } else if (en || cn) {
        if (en && cn) ok = js_fail(c, RB_E_UNSUPPORTED, path, "%s", "both enum and const");
        else if (en && (!json_is_array(en) || !json_array_size(en))) ok = js_fail(c, RB_E_INVALID, path, "%s", "'enum' must be a non-empty array");
        else if (en) ok = gen_enum(c, s, en, path, b);
        else {
            json_t *one_v = json_array();
            if (!one_v || json_array_append((json_t *)one_v, (json_t *)cn)) { c->out.oom = true; ok = false; }
            else ok = gen_enum(c, s, one_v, path, b);
            json_decref(one_v);
        }
    } else if (any || one || all) {
        const json_t *list = any ? any : one ? one : all;
        const char *kw = any ? "anyOf" : one ? "oneOf" : "allOf";
        if (!json_is_array(list) || !json_array_size(list)) ok = js_fail(c, RB_E_INVALID, path, "'%s' must be a non-empty array", kw);
        else if (all && json_array_size(list) != 1) ok = js_fail(c, RB_E_UNSUPPORTED, path, "%s", "allOf with more than one schema");
        else if (one && !one_of_disjoint(c, list))
            ok = js_fail(c, RB_E_UNSUPPORTED, path, "%s",
                         "oneOf whose alternatives may overlap (a value matching two would be accepted; use anyOf, or "
                         "tell them apart by type or by a required property with different const/enum values)");
        for (size_t i = 0; ok && i < json_array_size(list); i++) {
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s/%zu", path, kw, i);
            int id;
            ok = gen_rule(c, json_array_get(list, i), sub, &id);
            if (ok) js_addf(b, "%s%s-%d", i ? " | " : "", c->p, id);
        }
    } else if (type) {
        if (json_is_string(type)) ok = gen_typed(c, s, json_string_value(type), path, b);
        else {
            for (size_t i = 0; ok && i < json_array_size(type); i++) {
                if (i) js_add(b, " | ");
                js_add(b, "( ");
                ok = gen_typed(c, s, json_string_value(json_array_get(type, i)), path, b);
                js_add(b, " )");
            }
        }
    } else {
        int fam = has_any(s, object_kw) + has_any(s, array_kw) + has_any(s, string_kw);
        if (fam > 1) ok = js_fail(c, RB_E_UNSUPPORTED, path, "%s", "keywords of several types without 'type'");
        else if (has_any(s, object_kw)) ok = gen_object(c, s, path, b);
        else if (has_any(s, array_kw)) ok = gen_array(c, s, path, b);
        else if (has_any(s, string_kw)) ok = gen_string(c, s, path, b);
        else js_addf(b, "%s-value", c->p);
    }
    c->depth--;
    if (b->oom) c->out.oom = true;
    return ok && !c->out.oom;
}

/* New rule P-N for schema. */
static bool gen_rule(js_ctx *c, const json_t *schema, const char *path, int *id) {
    js_buf body = {0};
    bool ok = js_gen_body(c, schema, path, &body);
    if (ok) {
        *id = c->counter++;
        js_addf(&c->out, "%s-%d ::= %s\n", c->p, *id, body.p);
    }
    free(body.p);
    return ok && !c->out.oom;
}

static bool valid_rule_name(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '_'))
            return false;
    return true;
}

rb_status rb_json_schema_to_gbnf(const json_t *schema, const char *rule_name, char **gbnf, size_t *len,
                                 rb_error *err) {
    if (!schema || !gbnf) return rb_error_set(err, RB_E_INVALID, "json schema: NULL argument");
    *gbnf = NULL;
    const char *p = rule_name ? rule_name : "root";
    if (!valid_rule_name(p) || strlen(p) > 64)
        return rb_error_set(err, RB_E_INVALID, "json schema: bad rule name '%.64s'", p);
    js_ctx c = {.p = p, .root = schema, .err = err};
    js_buf body = {0};
    bool ok = js_gen_body(&c, schema, "", &body);
    if (ok) {
        js_addf(&c.out, "%s ::= %s\n", p, body.p);
        js_emit_base(&c.out, p);
        js_emit_formats(&c.out, p, c.formats);
        if (c.need_kchar) js_addf(&c.out, "%s-kchar ::= [^\"\\\\\\x00-\\x1F]\n", p);
    }
    free(body.p);
    for (size_t i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    if (c.st == RB_OK && (c.out.oom || body.oom)) c.st = rb_error_set(err, RB_E_NOMEM, "json schema: out of memory");
    if (c.st != RB_OK || !ok) {
        free(c.out.p);
        return c.st != RB_OK ? c.st : rb_error_set(err, RB_E_INVALID, "json schema: compile failed");
    }
    *gbnf = c.out.p;
    if (len) *len = c.out.n;
    return RB_OK;
}

rb_status rb_json_schema_text_to_gbnf(const char *schema, size_t schema_len, const char *rule_name, char **gbnf,
                                      size_t *len, rb_error *err) {
    if (!schema || !gbnf) return rb_error_set(err, RB_E_INVALID, "json schema: NULL argument");
    json_error_t je;
    json_t *s = json_loadb(schema, schema_len, JSON_DECODE_ANY, &je);
    if (!s) return rb_error_set(err, RB_E_INVALID, "json schema: not JSON: %s (line %d)", je.text, je.line);
    rb_status st = rb_json_schema_to_gbnf(s, rule_name, gbnf, len, err);
    json_decref(s);
    return st;
}

rb_status rb_grammar_from_json_schema(const json_t *schema, rb_grammar **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "json schema: NULL argument");
    *out = NULL;
    char *text;
    size_t len;
    rb_status st = rb_json_schema_to_gbnf(schema, "root", &text, &len, err);
    if (st != RB_OK) return st;
    st = rb_grammar_parse(text, len, "root", out, err);
    if (st != RB_OK) rb_error_prefix(err, "json schema compiled to a bad grammar: ");
    free(text);
    return st;
}

rb_status rb_grammar_json_object(rb_grammar **out, rb_error *err) {
    json_t *s = json_pack("{s:s}", "type", "object");
    if (!s) return rb_error_set(err, RB_E_NOMEM, "json schema: out of memory");
    rb_status st = rb_grammar_from_json_schema(s, out, err);
    json_decref(s);
    return st;
}

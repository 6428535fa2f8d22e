/* JSON at the interpreter's edges: converting jansson values (messages,
 * tools, extra variables) into template values with key order kept, and
 * serialising template values exactly as Python's json.dumps does for the
 * tojson filter (separators, indent, ensure_ascii, sort_keys, float repr). */
#include "chat/jinja.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool jx_from_json(jctx *cx, const void *json, bool request, jv *out, int depth) {
    const json_t *j = json;
    if (depth > JINJA_MAX_DEPTH_DATA) return jx_fail(cx, RB_E_FORMAT, "JSON input nested too deeply");
    const uint8_t req = request ? JV_F_REQ : 0;
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jv_none(); out->flags = req; return true;
    case JSON_TRUE: *out = jv_bool(true); out->flags = req; return true;
    case JSON_FALSE: *out = jv_bool(false); out->flags = req; return true;
    case JSON_INTEGER: *out = jv_int((int64_t)json_integer_value(j)); out->flags = req; return true;
    case JSON_REAL: *out = jv_float(json_real_value(j)); out->flags = req; return true;
    case JSON_STRING: {
        size_t n = json_string_length(j);
        char *s = jmem_strdup(cx->mem, json_string_value(j), n);
        if (!s) return jx_oom(cx);
        *out = jv_str(s, n);
        if (request) out->u.s.t = &jtaint_all;
        return true;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jv_list *l = jv_list_new(cx->mem, n);
        if (!l) return jx_oom(cx);
        for (size_t i = 0; i < n; i++)
            if (!jx_from_json(cx, json_array_get(j, i), request, &l->v[i], depth + 1)) return false;
        out->type = JV_LIST;
        out->flags = 0;
        out->u.l = l;
        return true;
    }
    case JSON_OBJECT: {
        jv_dict *d = jv_dict_new(cx->mem, json_object_size(j));
        if (!d) return jx_oom(cx);
        const char *key;
        json_t *val;
        /* jansson iterates objects in insertion (file) order, like Python dicts */
        json_object_foreach((json_t *)j, key, val) {
            jv k = {0}, v = {0};
            size_t kn = strlen(key);
            char *ks = jmem_strdup(cx->mem, key, kn);
            if (!ks) return jx_oom(cx);
            k = jv_str(ks, kn);
            if (request) k.u.s.t = &jtaint_all;
            if (!jx_from_json(cx, val, request, &v, depth + 1)) return false;
            d->k[d->n] = k;
            d->v[d->n] = v;
            d->n++;
        }
        out->type = JV_DICT;
        out->flags = 0;
        out->u.d = d;
        return true;
    }
    }
    return jx_fail(cx, RB_E_FORMAT, "unknown JSON value type");
}

/* JSON string literal of s; request text when any byte of s is (quotes included). */
static void dump_string(jbuf *b, jv sv, bool ascii) {
    const char *s = sv.u.s.p;
    size_t n = sv.u.s.n, start = b->n;
    jbuf_putc(b, '"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        char t[16];
        switch (c) {
        case '"': jbuf_puts(b, "\\\""); i++; continue;
        case '\\': jbuf_puts(b, "\\\\"); i++; continue;
        case '\n': jbuf_puts(b, "\\n"); i++; continue;
        case '\r': jbuf_puts(b, "\\r"); i++; continue;
        case '\t': jbuf_puts(b, "\\t"); i++; continue;
        case '\b': jbuf_puts(b, "\\b"); i++; continue;
        case '\f': jbuf_puts(b, "\\f"); i++; continue;
        default: break;
        }
        if (c < 0x20 || (ascii && c == 0x7F)) {
            snprintf(t, sizeof(t), "\\u%04x", c);
            jbuf_puts(b, t);
            i++;
        } else if (c < 0x80 || !ascii) {
            jbuf_putc(b, (char)c);
            i++;
        } else {
            size_t adv = 0;
            uint32_t cp = utf8_decode(s, n, i, &adv);
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(t, sizeof(t), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                snprintf(t, sizeof(t), "\\u%04x", cp);
            }
            jbuf_puts(b, t);
            i += adv;
        }
    }
    jbuf_putc(b, '"');
    if (jtaint_hit(sv.u.s.t, 0, n)) jbuf_mark(b, start, b->n);
}

static void newline_indent(jbuf *b, const jdump_opts *o, int level) {
    jbuf_putc(b, '\n');
    for (int i = 0; i < level; i++) jbuf_puts(b, o->indent);
}

static bool key_string(jctx *cx, jv k, jv *out, char tmp[32]) {
    switch ((jv_type)k.type) {
    case JV_STR: *out = k; return true;
    case JV_INT: snprintf(tmp, 32, "%lld", (long long)k.u.i); *out = jv_cstr(tmp); return true;
    case JV_FLOAT:
        if (isnan(k.u.f)) strcpy(tmp, "NaN");
        else if (isinf(k.u.f)) strcpy(tmp, k.u.f < 0 ? "-Infinity" : "Infinity");
        else jv_format_float(k.u.f, tmp);
        *out = jv_cstr(tmp);
        return true;
    case JV_BOOL: *out = jv_cstr(k.u.b ? "true" : "false"); return true;
    case JV_NONE: *out = jv_cstr("null"); return true;
    default:
        return jx_fail(cx, RB_E_INVALID, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

bool jx_tojson(jctx *cx, jbuf *b, jv v, const jdump_opts *o, int depth) {
    if (depth > JINJA_MAX_DEPTH_DATA) return jx_fail(cx, RB_E_RANGE, "tojson: value nested too deeply");
    char t[40];
    size_t start = b->n;
    switch ((jv_type)v.type) {
    case JV_NONE: jbuf_puts(b, "null"); break;
    case JV_BOOL: jbuf_puts(b, v.u.b ? "true" : "false"); break;
    case JV_INT: snprintf(t, sizeof(t), "%lld", (long long)v.u.i); jbuf_puts(b, t); break;
    case JV_FLOAT:
        if (isnan(v.u.f)) jbuf_puts(b, "NaN");
        else if (isinf(v.u.f)) jbuf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else { jv_format_float(v.u.f, t); jbuf_puts(b, t); }
        break;
    default: break;
    }
    switch ((jv_type)v.type) {
    case JV_NONE: case JV_BOOL: case JV_INT: case JV_FLOAT:
        if (v.flags & JV_F_REQ) jbuf_mark(b, start, b->n); /* a request scalar */
        break;
    case JV_STR: dump_string(b, v, o->ensure_ascii); break;
    case JV_LIST:
        if (v.u.l->n == 0) { jbuf_puts(b, "[]"); break; }
        jbuf_putc(b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jbuf_puts(b, o->item_sep);
            if (o->indent) newline_indent(b, o, depth + 1);
            if (!jx_tojson(cx, b, v.u.l->v[i], o, depth + 1)) return false;
        }
        if (o->indent) newline_indent(b, o, depth);
        jbuf_putc(b, ']');
        break;
    case JV_DICT: {
        const jv_dict *d = v.u.d;
        if (d->n == 0) { jbuf_puts(b, "{}"); break; }
        size_t *order = jmem_alloc(cx->mem, d->n * sizeof(size_t));
        if (!order) return jx_oom(cx);
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) {
            for (size_t i = 0; i < d->n; i++) {
                if (d->k[i].type != JV_STR && !jv_is_num(d->k[i]))
                    return jx_fail(cx, RB_E_INVALID, "tojson: cannot sort keys of type %s", jv_type_name(d->k[i]));
            }
            for (size_t i = 1; i < d->n; i++) { /* insertion sort: stable, small dicts */
                size_t x = order[i], j = i;
                while (j > 0) {
                    bool lt = false;
                    if (!jx_compare(cx, OP_LT, d->k[x], d->k[order[j - 1]], &lt)) return false;
                    if (!lt) break;
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        jbuf_putc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            size_t k = order[i];
            jv ks = {0};
            char tmp[32];
            if (!key_string(cx, d->k[k], &ks, tmp)) return false;
            if (d->k[k].type != JV_STR && (d->k[k].flags & JV_F_REQ)) ks.u.s.t = &jtaint_all;
            if (i) jbuf_puts(b, o->item_sep);
            if (o->indent) newline_indent(b, o, depth + 1);
            dump_string(b, ks, o->ensure_ascii);
            jbuf_puts(b, o->key_sep);
            if (!jx_tojson(cx, b, d->v[k], o, depth + 1)) return false;
        }
        if (o->indent) newline_indent(b, o, depth);
        jbuf_putc(b, '}');
        break;
    }
    default:
        return jx_fail(cx, RB_E_INVALID, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
    if (b->failed) {
        if (b->over_limit) return jx_fail(cx, RB_E_RANGE, "tojson output exceeds the size limit");
        return jx_oom(cx);
    }
    return true;
}

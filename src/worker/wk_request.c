/* Implementation of wk_request.h. */
#include "worker/wk_request.h"
#include "worker/wk_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void wk_errors_add(wk_errors *e, const char *field, const char *constraint, const char *fmt, ...) {
    if (e->n >= WK_MAX_FIELD_ERRORS) return;
    wk_field_error *f = &e->items[e->n++];
    snprintf(f->field, sizeof f->field, "%s", field);
    snprintf(f->constraint, sizeof f->constraint, "%s", constraint);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->message, sizeof f->message, fmt, ap);
    va_end(ap);
}

json_t *wk_errors_json(const wk_errors *e) {
    json_t *arr = json_array();
    for (int i = 0; i < e->n; i++)
        json_array_append_new(arr, json_pack("{s:s,s:s,s:s}", "field", e->items[i].field, "constraint",
                                             e->items[i].constraint, "message", e->items[i].message));
    return json_pack("{s:o}", "errors", arr);
}

json_t *wk_errors_openai_json(const wk_errors *e) {
    char msg[1024];
    size_t n = 0;
    msg[0] = '\0';
    for (int i = 0; i < e->n && n < sizeof msg; i++) {
        int w = snprintf(msg + n, sizeof msg - n, "%s%s", i ? "; " : "", e->items[i].message);
        if (w < 0) break;
        n += (size_t)w;
    }
    const wk_field_error *f0 = e->n ? &e->items[0] : NULL;
    return json_pack("{s:{s:s,s:s,s:s?,s:s?}}", "error", "message", msg, "type", "invalid_request_error", "param",
                     f0 ? f0->field : NULL, "code", f0 ? f0->constraint : NULL);
}

json_t *wk_parse_body(const char *body, size_t len, wk_errors *errs) {
    size_t bad = 0;
    if (!wk_utf8_valid(body, len, &bad)) {
        wk_errors_add(errs, "body", "utf8", "the request body is not valid UTF-8 (byte offset %zu)", bad);
        return NULL;
    }
    if (len == 0) {
        wk_errors_add(errs, "body", "json", "the request body is empty; a JSON object is required");
        return NULL;
    }
    json_error_t je;
    json_t *v = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!v) {
        wk_errors_add(errs, "body", "json", "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        wk_errors_add(errs, "body", "json_object", "the request body must be a JSON object");
        return NULL;
    }
    return v;
}

bool wk_get_number(json_t *o, const char *k, double lo, double hi, double *out, wk_errors *errs) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return false;
    if (!json_is_number(v)) {
        wk_errors_add(errs, k, "type:number", "%s must be a number", k);
        return false;
    }
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi) {
        char c[80], a[32], b[32], g[32];
        wk_fmt_double(lo, a, sizeof a);
        wk_fmt_double(hi, b, sizeof b);
        snprintf(c, sizeof c, "range:%s..%s", a, b);
        wk_errors_add(errs, k, c, "%s must be between %s and %s, got %s", k, a, b, wk_fmt_double(d, g, sizeof g));
        return false;
    }
    *out = d;
    return true;
}

bool wk_get_int(json_t *o, const char *k, int64_t lo, int64_t hi, int64_t *out, wk_errors *errs) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return false;
    if (!json_is_integer(v)) {
        wk_errors_add(errs, k, "type:integer", "%s must be an integer", k);
        return false;
    }
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        char c[64];
        snprintf(c, sizeof c, "range:%lld..%lld", (long long)lo, (long long)hi);
        wk_errors_add(errs, k, c, "%s must be between %lld and %lld, got %lld", k, (long long)lo, (long long)hi,
                      (long long)x);
        return false;
    }
    *out = (int64_t)x;
    return true;
}

bool wk_get_bool(json_t *o, const char *k, bool *out, wk_errors *errs) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return false;
    if (!json_is_boolean(v)) {
        wk_errors_add(errs, k, "type:boolean", "%s must be true or false", k);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

bool wk_get_string(json_t *o, const char *k, size_t max_len, const char **out, wk_errors *errs) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return false;
    if (!json_is_string(v)) {
        wk_errors_add(errs, k, "type:string", "%s must be a string", k);
        return false;
    }
    if (max_len > 0 && json_string_length(v) > max_len) {
        char c[64];
        snprintf(c, sizeof c, "max_length:%zu", max_len);
        wk_errors_add(errs, k, c, "%s must have at most %zu bytes, got %zu", k, max_len, json_string_length(v));
        return false;
    }
    *out = json_string_value(v);
    return true;
}

/* Validation of request bodies before anything is queued, shared by every
 * worker: the body is checked for UTF-8 and JSON syntax, fields are read
 * with typed readers that check types and ranges, and every problem found is
 * collected as {field, constraint, message}, so a client sees all of them in
 * one 400 answer (rbee's shape, or OpenAI's for OpenAI routes). */
#ifndef RBEE_WK_REQUEST_H
#define RBEE_WK_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WK_MAX_FIELD_ERRORS 16

typedef struct wk_field_error {
    char field[64];
    char constraint[64];
    char message[256];
} wk_field_error;

typedef struct wk_errors {
    wk_field_error items[WK_MAX_FIELD_ERRORS];
    int n;
} wk_errors;

void wk_errors_add(wk_errors *e, const char *field, const char *constraint, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* {"errors":[{"field","constraint","message"}, ...]} */
json_t *wk_errors_json(const wk_errors *e);
/* OpenAI's shape: {"error":{"message","type":"invalid_request_error","param","code"}} */
json_t *wk_errors_openai_json(const wk_errors *e);

/* Parses body bytes: checks UTF-8 and JSON syntax (duplicate keys are
 * rejected) and that the top level is an object. Returns the object or NULL
 * with errors recorded. */
json_t *wk_parse_body(const char *body, size_t len, wk_errors *errs);

/* Typed field readers. An absent or null field returns false and records
 * nothing; a present field of the wrong type or out of [lo, hi] records an
 * error ("type:number", "range:lo..hi", ...) and returns false. */
bool wk_get_number(json_t *obj, const char *key, double lo, double hi, double *out, wk_errors *errs);
bool wk_get_int(json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out, wk_errors *errs);
bool wk_get_bool(json_t *obj, const char *key, bool *out, wk_errors *errs);
/* A string field (borrowed from obj); max_len 0 means no limit. */
bool wk_get_string(json_t *obj, const char *key, size_t max_len, const char **out, wk_errors *errs);

#endif

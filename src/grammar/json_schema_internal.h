/* Shared pieces of the JSON schema -> GBNF compiler: a growable text buffer
 * with a sticky out-of-memory flag, GBNF literal quoting, and the fixed
 * helper rules (JSON values, whitespace, string formats). */
#ifndef RBEE_GRAMMAR_JSON_SCHEMA_INTERNAL_H
#define RBEE_GRAMMAR_JSON_SCHEMA_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct js_buf {
    char *p;
    size_t n, cap;
    bool oom;
} js_buf;

void js_add(js_buf *b, const char *s);
void js_addn(js_buf *b, const char *s, size_t n);
void js_addf(js_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Appends s (n bytes) as a GBNF string literal, quotes included. */
void js_add_literal(js_buf *b, const char *s, size_t n);

/* Helper rule sets, each emitted once as `P-...` rules. */
enum {
    JS_FMT_DATE = 1u << 0,
    JS_FMT_TIME = 1u << 1,
    JS_FMT_UUID = 1u << 2,
};
/* The JSON value rules every compiled schema may use: P-ws, P-value,
 * P-object, P-array, P-string, P-char, P-integer, P-number, P-boolean,
 * P-null. */
void js_emit_base(js_buf *b, const char *p);
/* P-date (and P-date-time), P-time, P-uuid as flagged. */
void js_emit_formats(js_buf *b, const char *p, unsigned flags);

#endif

/* Fixed GBNF rules of the JSON schema compiler: the generic JSON value
 * grammar with bounded whitespace and digit counts, and the string formats
 * (RFC 3339 date with month lengths and leap years, full-time with a
 * mandatory offset, date-time, RFC 4122 uuid text). */
#include "grammar/json_schema_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void js_addn(js_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *t = realloc(b->p, nc);
        if (!t) {
            b->oom = true;
            return;
        }
        b->p = t;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void js_add(js_buf *b, const char *s) { js_addn(b, s, strlen(s)); }

void js_addf(js_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        js_addn(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    js_addn(b, big, (size_t)n);
    free(big);
}

void js_add_literal(js_buf *b, const char *s, size_t n) {
    js_add(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"') js_add(b, "\\\"");
        else if (c == '\\') js_add(b, "\\\\");
        else if (c == '\n') js_add(b, "\\n");
        else if (c == '\r') js_add(b, "\\r");
        else if (c == '\t') js_add(b, "\\t");
        else if (c < 0x20 || c == 0x7F) js_addf(b, "\\x%02X", c);
        else js_addn(b, (const char *)&s[i], 1);
    }
    js_add(b, "\"");
}

void js_emit_base(js_buf *b, const char *p) {
    js_addf(b, "%s-ws ::= ( \" \" | \"\\n\" \" \"{0,16} )?\n", p);
    js_addf(b, "%s-value ::= %s-object | %s-array | %s-string | %s-number | %s-boolean | %s-null\n", p, p, p, p, p,
            p, p);
    js_addf(b, "%s-object ::= \"{\" %s-ws ( %s-member ( %s-ws \",\" %s-ws %s-member )* %s-ws )? \"}\"\n", p, p, p,
            p, p, p, p);
    js_addf(b, "%s-member ::= %s-string %s-ws \":\" %s-ws %s-value\n", p, p, p, p, p);
    js_addf(b, "%s-array ::= \"[\" %s-ws ( %s-value ( %s-ws \",\" %s-ws %s-value )* %s-ws )? \"]\"\n", p, p, p, p,
            p, p, p);
    js_addf(b, "%s-string ::= \"\\\"\" %s-char* \"\\\"\"\n", p, p);
    /* \u escapes of surrogates are left out: a pair would be one character to
     * JSON Schema's lengths but two here (raw UTF-8 spells those characters) */
    js_addf(b,
            "%s-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | "
            "[dD] [0-7] [0-9a-fA-F]{2} ) )\n",
            p);
    js_addf(b, "%s-integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n", p);
    js_addf(b, "%s-number ::= %s-integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n", p, p);
    js_addf(b, "%s-boolean ::= \"true\" | \"false\"\n", p);
    js_addf(b, "%s-null ::= \"null\"\n", p);
}

void js_emit_formats(js_buf *b, const char *p, unsigned flags) {
    if (flags & JS_FMT_DATE) {
        js_addf(b, "%s-date ::= [0-9]{4} \"-\" %s-md | %s-leap \"-02-29\"\n", p, p, p);
        js_addf(b,
                "%s-md ::= ( \"01\" | \"03\" | \"05\" | \"07\" | \"08\" | \"10\" | \"12\" ) \"-\" %s-d31 | "
                "( \"04\" | \"06\" | \"09\" | \"11\" ) \"-\" %s-d30 | \"02-\" %s-d28\n",
                p, p, p, p);
        js_addf(b, "%s-d28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n", p);
        js_addf(b, "%s-d30 ::= %s-d28 | \"29\" | \"30\"\n", p, p);
        js_addf(b, "%s-d31 ::= %s-d30 | \"31\"\n", p, p);
        js_addf(b,
                "%s-leap ::= [0-9] [0-9] ( \"0\" [48] | [2468] [048] | [13579] [26] ) | "
                "( \"0\" [048] | [2468] [048] | [13579] [26] ) \"00\"\n",
                p);
    }
    if (flags & JS_FMT_TIME) {
        js_addf(b, "%s-time ::= %s-hh \":\" %s-mi \":\" %s-mi ( \".\" [0-9]{1,9} )? ( \"Z\" | [-+] %s-hh \":\" %s-mi )\n",
                p, p, p, p, p, p);
        js_addf(b, "%s-hh ::= [01] [0-9] | \"2\" [0-3]\n", p);
        js_addf(b, "%s-mi ::= [0-5] [0-9]\n", p);
    }
    if ((flags & JS_FMT_DATE) && (flags & JS_FMT_TIME)) js_addf(b, "%s-date-time ::= %s-date \"T\" %s-time\n", p, p, p);
    if (flags & JS_FMT_UUID)
        js_addf(b,
                "%s-uuid ::= [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
                "[0-9a-fA-F]{12}\n",
                p);
}

/* PCRE2 wrapper for the pre-tokenizer and normalizer regexes: compiles with
 * UTF|UCP (Unicode \p classes), JIT when available, and rewrites \s so it also
 * matches U+0085 as Oniguruma (used by HF tokenizers) does. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* Rewrites \s / \S outside classes and \s inside classes to include NEL. */
static rb_status rewrite(const char *p, size_t n, tok_buf *o) {
    int in_class = 0;
    rb_status st = RB_OK;
    for (size_t i = 0; i < n && !st; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            if (d == 's') st = tok_buf_append(o, in_class ? "\\s\\x{85}" : "[\\s\\x{85}]", in_class ? 8 : 10);
            else if (d == 'S' && !in_class) st = tok_buf_append(o, "[^\\s\\x{85}]", 11);
            else st = tok_buf_append(o, p + i, 2);
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            st = tok_buf_putc(o, c);
            /* a ']' right after '[' or '[^' is literal */
            if (!st && i + 1 < n && p[i + 1] == '^') { st = tok_buf_putc(o, '^'); i++; }
            if (!st && i + 1 < n && p[i + 1] == ']') { st = tok_buf_putc(o, ']'); i++; }
            continue;
        }
        if (c == ']' && in_class) in_class = 0;
        st = tok_buf_putc(o, c);
    }
    return st;
}

rb_status tok_regex_compile(const char *pattern, size_t len, pcre2_code **out, rb_error *err) {
    tok_buf b = {0};
    rb_status st = rewrite(pattern, len, &b);
    if (st) {
        tok_buf_free(&b);
        return rb_error_set(err, st, "out of memory compiling regex");
    }
    int ec = 0;
    PCRE2_SIZE eo = 0;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(b.p ? b.p : ""), b.len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    tok_buf_free(&b);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return rb_error_set(err, RB_E_FORMAT, "bad regex '%.*s' at %zu: %s", (int)(len > 200 ? 200 : len), pattern,
                            (size_t)eo, (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
    *out = re;
    return RB_OK;
}

rb_status tok_regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t len, size_t start,
                         bool *found, size_t *ms, size_t *me) {
    /* the input was validated as UTF-8 once, so skip PCRE2's own check */
    int rc = pcre2_match(re, (PCRE2_SPTR)s, len, start, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT)
        rc = pcre2_match(re, (PCRE2_SPTR)s, len, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) {
        *found = false;
        return RB_OK;
    }
    if (rc < 0) return rc == PCRE2_ERROR_NOMEMORY ? RB_E_NOMEM : RB_E_RANGE;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *found = true;
    *ms = ov[0];
    *me = ov[1];
    return RB_OK;
}

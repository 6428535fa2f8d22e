/* GBNF text -> rb_grammar. A recursive-descent parser over llama.cpp's
 * grammar dialect that builds rules of symbol sequences, rewrites groups and
 * repetitions into generated rules, checks that every referenced rule exists
 * and that no rule can reach itself without consuming a character (left
 * recursion would make the matcher loop), and flattens the result into the
 * element arrays of gram_internal.h. */
#include "grammar/gram_build.h"

#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *s;
    size_t len, pos;
    gram_builder *b;
    rb_error *err;
    rb_status st;
} parser;

static void line_col(const char *s, size_t pos, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < pos; i++) {
        if (s[i] == '\n') { l++; c = 1; }
        else if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    }
    *line = l;
    *col = c;
}

static bool fail_at(parser *p, size_t pos, const char *what) {
    if (p->st != RB_OK) return false;
    int line, col;
    line_col(p->s, pos < p->len ? pos : p->len, &line, &col);
    p->st = rb_error_set(p->err, RB_E_FORMAT, "grammar: line %d, column %d: %s", line, col, what);
    return false;
}

static bool fail_status(parser *p, rb_status st) {
    if (p->st == RB_OK) p->st = st;
    return false;
}

static bool at_end(const parser *p) { return p->pos >= p->len; }
static int peek(const parser *p) { return at_end(p) ? -1 : (unsigned char)p->s[p->pos]; }

static bool is_name_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Spaces, tabs, CR, newlines and # comments. */
static void skip_space(parser *p) {
    while (!at_end(p)) {
        int c = peek(p);
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') p->pos++;
        else if (c == '#') {
            while (!at_end(p) && peek(p) != '\n') p->pos++;
        } else break;
    }
}

/* Spaces, tabs and comments on the current line only. */
static void skip_inline_space(parser *p) {
    while (!at_end(p)) {
        int c = peek(p);
        if (c == ' ' || c == '\t') p->pos++;
        else break;
    }
}

static size_t name_len_at(const parser *p, size_t pos) {
    size_t n = 0;
    while (pos + n < p->len && is_name_char((unsigned char)p->s[pos + n])) n++;
    return n;
}

/* Does a rule definition (`name ::=`) start at the current position? */
static bool rule_starts_here(const parser *p) {
    size_t n = name_len_at(p, p->pos);
    if (!n) return false;
    size_t q = p->pos + n;
    while (q < p->len && (p->s[q] == ' ' || p->s[q] == '\t')) q++;
    return q + 3 <= p->len && !memcmp(p->s + q, "::=", 3);
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One UTF-8 character or escape inside a literal or class. */
static bool read_char(parser *p, uint32_t *out) {
    size_t start = p->pos;
    int c = peek(p);
    if (c < 0) return fail_at(p, start, "unexpected end of input");
    if (c == '\\') {
        p->pos++;
        int e = peek(p);
        if (e < 0) return fail_at(p, start, "unfinished escape");
        p->pos++;
        int digits = 0;
        switch (e) {
        case 'n': *out = '\n'; return true;
        case 'r': *out = '\r'; return true;
        case 't': *out = '\t'; return true;
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^': case '.':
            *out = (uint32_t)e;
            return true;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default: return fail_at(p, start, "unknown escape");
        }
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = hexval(peek(p));
            if (h < 0) return fail_at(p, p->pos, "bad hexadecimal digit in escape");
            v = v << 4 | (uint32_t)h;
            p->pos++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail_at(p, start, "escape is not a Unicode scalar value");
        *out = v;
        return true;
    }
    const unsigned char *u = (const unsigned char *)p->s + p->pos;
    size_t avail = p->len - p->pos;
    uint32_t cp;
    size_t n;
    if (u[0] < 0x80) { cp = u[0]; n = 1; }
    else if (u[0] >= 0xC2 && u[0] <= 0xDF) { cp = u[0] & 0x1Fu; n = 2; }
    else if (u[0] >= 0xE0 && u[0] <= 0xEF) { cp = u[0] & 0x0Fu; n = 3; }
    else if (u[0] >= 0xF0 && u[0] <= 0xF4) { cp = u[0] & 0x07u; n = 4; }
    else return fail_at(p, start, "invalid UTF-8");
    if (n > avail) return fail_at(p, start, "invalid UTF-8");
    for (size_t i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) return fail_at(p, start, "invalid UTF-8");
        cp = cp << 6 | (u[i] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return fail_at(p, start, "invalid UTF-8");
    p->pos += n;
    *out = cp;
    return true;
}

static bool add_sym(parser *p, gram_ivec *v, int32_t sym) {
    if (!gram_ivec_push(v, sym)) return fail_status(p, rb_error_set(p->err, RB_E_NOMEM, "grammar: out of memory"));
    return true;
}

static bool literal(parser *p, gram_ivec *item) {
    int quote = peek(p);
    size_t start = p->pos++;
    for (;;) {
        int c = peek(p);
        if (c < 0 || c == '\n') return fail_at(p, start, "unterminated string literal");
        if (c == quote) { p->pos++; return true; }
        uint32_t cp;
        if (!read_char(p, &cp)) return false;
        gram_range r = {cp, cp};
        int32_t sym = 0;
        rb_status st = gram_builder_class(p->b, &r, 1, false, &sym, p->err);
        if (st != RB_OK) return fail_status(p, st);
        if (!add_sym(p, item, sym)) return false;
    }
}

static bool char_class(parser *p, gram_ivec *item) {
    size_t start = p->pos++;
    bool negate = false;
    if (peek(p) == '^') { negate = true; p->pos++; }
    gram_range *rs = NULL;
    size_t n = 0, cap = 0;
    bool ok = true;
    for (;;) {
        int c = peek(p);
        if (c < 0 || c == '\n') { ok = fail_at(p, start, "unterminated character class"); break; }
        if (c == ']') { p->pos++; break; }
        uint32_t lo, hi;
        if (!(ok = read_char(p, &lo))) break;
        hi = lo;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->s[p->pos + 1] != ']') {
            size_t dash = p->pos++;
            if (!(ok = read_char(p, &hi))) break;
            if (hi < lo) { ok = fail_at(p, dash, "character range is backwards"); break; }
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            gram_range *t = realloc(rs, nc * sizeof *t);
            if (!t) { ok = fail_status(p, rb_error_set(p->err, RB_E_NOMEM, "grammar: out of memory")); break; }
            rs = t;
            cap = nc;
        }
        rs[n].lo = lo;
        rs[n].hi = hi;
        n++;
    }
    if (ok) {
        int32_t sym = 0;
        rb_status st = gram_builder_class(p->b, rs, n, negate, &sym, p->err);
        if (st != RB_OK) ok = fail_status(p, st);
        else ok = add_sym(p, item, sym);
    }
    free(rs);
    return ok;
}

static bool parse_alternates(parser *p, int32_t rule, int depth);

static bool read_uint(parser *p, int *out) {
    size_t start = p->pos;
    long v = 0;
    while (peek(p) >= '0' && peek(p) <= '9') {
        v = v * 10 + (peek(p) - '0');
        if (v > GRAM_MAX_REPEAT) return fail_at(p, start, "repetition count too large");
        p->pos++;
    }
    if (p->pos == start) return false;
    *out = (int)v;
    return true;
}

/* Applies a postfix operator, if any, to item (one symbol after wrapping). */
static bool postfix(parser *p, gram_ivec *item) {
    skip_inline_space(p);
    int c = peek(p);
    if (c != '*' && c != '+' && c != '?' && c != '{') return true;
    size_t start = p->pos++;
    int lo = 0, hi = -1;
    if (c == '+') lo = 1;
    else if (c == '?') hi = 1;
    else if (c == '{') {
        skip_inline_space(p);
        bool have_lo = read_uint(p, &lo);
        if (p->st != RB_OK) return false;
        skip_inline_space(p);
        if (peek(p) == ',') {
            p->pos++;
            skip_inline_space(p);
            if (!read_uint(p, &hi)) {
                if (p->st != RB_OK) return false;
                hi = -1;
            }
            if (!have_lo) lo = 0;
        } else {
            if (!have_lo) return fail_at(p, start, "expected a number in {m,n}");
            hi = lo;
        }
        skip_inline_space(p);
        if (peek(p) != '}') return fail_at(p, p->pos, "expected '}'");
        p->pos++;
        if (hi >= 0 && hi < lo) return fail_at(p, start, "repetition {m,n} with n < m");
    }
    int32_t sym = 0;
    rb_status st = gram_builder_wrap(p->b, item, &sym, p->err);
    if (st == RB_OK) st = gram_builder_repeat(p->b, sym, lo, hi, item, p->err);
    if (st != RB_OK) return fail_status(p, st);
    return true;
}

static bool parse_sequence(parser *p, gram_ivec *alt, int depth) {
    for (;;) {
        skip_space(p);
        if (at_end(p)) return true;
        if (depth == 0 && rule_starts_here(p)) return true;
        int c = peek(p);
        size_t start = p->pos;
        gram_ivec item = {0};
        bool ok;
        if (c == '"' || c == '\'') ok = literal(p, &item);
        else if (c == '[') ok = char_class(p, &item);
        else if (c == '.') {
            p->pos++;
            gram_range any = {0, 0x10FFFF};
            int32_t sym = 0;
            rb_status st = gram_builder_class(p->b, &any, 1, false, &sym, p->err);
            ok = st == RB_OK ? add_sym(p, &item, sym) : fail_status(p, st);
        } else if (c == '(') {
            p->pos++;
            if (depth >= GRAM_MAX_NEST) {
                ok = fail_at(p, start, "groups nested too deeply");
            } else {
                int32_t r = -1;
                rb_status st = gram_builder_new_rule(p->b, NULL, 0, &r, p->err);
                ok = st == RB_OK ? parse_alternates(p, r, depth + 1) : fail_status(p, st);
                if (ok) {
                    skip_space(p);
                    if (peek(p) != ')') ok = fail_at(p, p->pos, "expected ')'");
                    else {
                        p->pos++;
                        ok = add_sym(p, &item, r);
                    }
                }
            }
        } else if (is_name_char(c)) {
            size_t n = name_len_at(p, p->pos);
            int32_t r = -1;
            rb_status st = gram_builder_ref(p->b, p->s + p->pos, n, p->pos, &r, p->err);
            p->pos += n;
            ok = st == RB_OK ? add_sym(p, &item, r) : fail_status(p, st);
        } else if (c == '|' || c == ')') {
            return true;
        } else {
            return fail_at(p, start, "unexpected character");
        }
        if (ok) ok = postfix(p, &item);
        for (size_t i = 0; ok && i < item.n; i++) ok = add_sym(p, alt, item.v[i]);
        free(item.v);
        if (!ok) return false;
        if (alt->n > GRAM_MAX_SYMBOLS) return fail_at(p, start, "grammar too large");
    }
}

static bool parse_alternates(parser *p, int32_t rule, int depth) {
    for (;;) {
        gram_ivec alt = {0};
        bool ok = parse_sequence(p, &alt, depth);
        if (ok) {
            rb_status st = gram_builder_add_alt(p->b, rule, &alt, p->err);
            if (st != RB_OK) ok = fail_status(p, st);
        }
        free(alt.v);
        if (!ok) return false;
        skip_space(p);
        if (peek(p) != '|') return true;
        p->pos++;
    }
}

static bool parse_all(parser *p) {
    for (;;) {
        skip_space(p);
        if (at_end(p)) return true;
        size_t start = p->pos;
        size_t n = name_len_at(p, p->pos);
        if (!n) return fail_at(p, start, "expected a rule name");
        p->pos += n;
        skip_inline_space(p);
        if (p->pos + 3 > p->len || memcmp(p->s + p->pos, "::=", 3)) return fail_at(p, p->pos, "expected '::='");
        p->pos += 3;
        int32_t r = -1;
        rb_status st = gram_builder_define(p->b, p->s + start, n, &r, p->err);
        if (st == RB_E_INVALID) {
            p->st = RB_OK;
            rb_error_clear(p->err);
            return fail_at(p, start, "rule defined twice");
        }
        if (st != RB_OK) return fail_status(p, st);
        if (!parse_alternates(p, r, 0)) return false;
        skip_space(p);
        if (!at_end(p) && !rule_starts_here(p)) return fail_at(p, p->pos, "unexpected character");
    }
}

rb_status rb_grammar_parse(const char *text, size_t len, const char *root, rb_grammar **out, rb_error *err) {
    if (!out || (!text && len)) return rb_error_set(err, RB_E_INVALID, "grammar: NULL argument");
    *out = NULL;
    if (len > GRAM_MAX_TEXT) return rb_error_set(err, RB_E_RANGE, "grammar: text over %u bytes", GRAM_MAX_TEXT);
    gram_builder *b;
    rb_status st = gram_builder_create(&b, err);
    if (st != RB_OK) return st;
    parser p = {.s = text, .len = len, .b = b, .err = err, .st = RB_OK};
    if (!parse_all(&p)) {
        st = p.st != RB_OK ? p.st : RB_E_FORMAT;
    } else {
        size_t ref_pos;
        const char *undef = gram_builder_undefined(b, &ref_pos);
        if (undef) {
            int line, col;
            line_col(text, ref_pos, &line, &col);
            st = rb_error_set(err, RB_E_NOT_FOUND, "grammar: line %d, column %d: undefined rule '%s'", line, col,
                              undef);
        } else {
            st = gram_builder_finish(b, root ? root : "root", out, err);
        }
    }
    gram_builder_free(b);
    return st;
}

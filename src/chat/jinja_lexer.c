/* Lexer for the Jinja subset: splits template source into data text and tag
 * tokens, applying jinja2's whitespace rules as transformers configures them
 * (trim_blocks, lstrip_blocks, '-'/'+' markers, one trailing newline of the
 * source dropped, newlines normalised to "\n"), and tokenises expressions. */
#include "chat/jinja.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    jmem *m;
    const char *src;
    size_t len, pos;
    int line;
    jtoks *out;
    rb_error *err;
    bool line_starting;
} lexer;

static rb_status lex_fail(lexer *L, int line, const char *what) {
    return rb_error_set(L->err, RB_E_FORMAT, "chat template syntax error at line %d: %s", line, what);
}

static bool push(lexer *L, jtok t) {
    jtoks *o = L->out;
    if (o->n == o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 256;
        jtok *nv = jmem_alloc(L->m, nc * sizeof(jtok));
        if (!nv) return false;
        if (o->n) memcpy(nv, o->v, o->n * sizeof(jtok));
        o->v = nv;
        o->cap = nc;
    }
    o->v[o->n++] = t;
    return true;
}

static int count_nl(const char *s, size_t a, size_t b) {
    int c = 0;
    for (size_t i = a; i < b; i++) c += s[i] == '\n';
    return c;
}

/* Emits text [a, b) as a DATA token with newlines normalised. */
static bool emit_data(lexer *L, size_t a, size_t b, int line) {
    if (b <= a) return true;
    char *d = jmem_alloc(L->m, b - a + 1);
    if (!d) return false;
    size_t n = 0;
    for (size_t i = a; i < b; i++) {
        char c = L->src[i];
        if (c == '\r') {
            d[n++] = '\n';
            if (i + 1 < b && L->src[i + 1] == '\n') i++;
        } else {
            d[n++] = c;
        }
    }
    jtok t = {.type = T_DATA, .line = line, .s = d, .n = n};
    return push(L, t);
}

static size_t rstrip_ws(const char *s, size_t a, size_t b) {
    size_t adv = 0;
    while (b > a && py_space_before(s, b, &adv)) b -= adv;
    return b;
}

static size_t skip_ws(const lexer *L, size_t p) {
    size_t adv = 0;
    while (p < L->len && py_space_at(L->src, L->len, p, &adv)) p += adv;
    return p;
}

/* "{%" [-+]? ws "raw" ws [-]? "%}" at p; returns end of the tag or 0. */
static size_t match_raw_begin(const lexer *L, size_t p, bool *strip_after) {
    const char *s = L->src;
    size_t n = L->len, i = p + 2;
    if (i < n && (s[i] == '-' || s[i] == '+')) i++;
    while (i < n && isspace((unsigned char)s[i])) i++;
    if (n - i < 3 || memcmp(s + i, "raw", 3) != 0) return 0;
    i += 3;
    while (i < n && isspace((unsigned char)s[i])) i++;
    *strip_after = false;
    if (i < n && s[i] == '-') { *strip_after = true; i++; }
    if (n - i < 2 || s[i] != '%' || s[i + 1] != '}') return 0;
    return i + 2;
}

/* Looks for "{%" [-+]? ws "endraw" ws [-+]? "%}" from p. */
static bool find_endraw(const lexer *L, size_t p, size_t *start, size_t *end, char *open_sign, char *close_sign) {
    const char *s = L->src;
    size_t n = L->len;
    for (size_t q = p; q + 1 < n; q++) {
        if (s[q] != '{' || s[q + 1] != '%') continue;
        size_t i = q + 2;
        char os = 0, cs = 0;
        if (i < n && (s[i] == '-' || s[i] == '+')) os = s[i++];
        while (i < n && isspace((unsigned char)s[i])) i++;
        if (n - i < 6 || memcmp(s + i, "endraw", 6) != 0) continue;
        i += 6;
        while (i < n && isspace((unsigned char)s[i])) i++;
        if (i < n && (s[i] == '-' || s[i] == '+')) cs = s[i++];
        if (n - i < 2 || s[i] != '%' || s[i + 1] != '}') continue;
        *start = q;
        *end = i + 2;
        *open_sign = os;
        *close_sign = cs;
        return true;
    }
    return false;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes a string literal body [a, b) like Python's unicode-escape codec
 * after newline normalisation. */
static rb_status decode_string(lexer *L, size_t a, size_t b, int line, jtok *t) {
    const char *s = L->src;
    char *d = jmem_alloc(L->m, (b - a) * 4 + 1);
    if (!d) return RB_E_NOMEM;
    size_t n = 0;
    for (size_t i = a; i < b; i++) {
        char c = s[i];
        if (c == '\r') {
            d[n++] = '\n';
            if (i + 1 < b && s[i + 1] == '\n') i++;
            continue;
        }
        if (c != '\\' || i + 1 >= b) {
            d[n++] = c;
            continue;
        }
        char e = s[++i];
        uint32_t cp;
        int digits = 0;
        switch (e) {
        case '\n': break;
        case '\r': if (i + 1 < b && s[i + 1] == '\n') i++; break;
        case '\\': d[n++] = '\\'; break;
        case '\'': d[n++] = '\''; break;
        case '"': d[n++] = '"'; break;
        case 'a': d[n++] = '\a'; break;
        case 'b': d[n++] = '\b'; break;
        case 'f': d[n++] = '\f'; break;
        case 'n': d[n++] = '\n'; break;
        case 'r': d[n++] = '\r'; break;
        case 't': d[n++] = '\t'; break;
        case 'v': d[n++] = '\v'; break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i + 1 < b && s[i + 1] >= '0' && s[i + 1] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[++i] - '0');
                n += utf8_encode(cp, d + n);
            } else {
                d[n++] = '\\';
                d[n++] = e;
            }
        }
        if (digits) {
            cp = 0;
            for (int k = 0; k < digits; k++) {
                int h = (i + 1 < b) ? hexval(s[i + 1]) : -1;
                if (h < 0) return lex_fail(L, line, "truncated \\x/\\u escape in string literal");
                cp = cp * 16 + (uint32_t)h;
                i++;
            }
            if (cp > 0x10FFFF) return lex_fail(L, line, "escape out of Unicode range in string literal");
            n += utf8_encode(cp, d + n);
        }
    }
    d[n] = '\0';
    t->s = d;
    t->n = n;
    return RB_OK;
}

static rb_status lex_number(lexer *L, size_t *pp, int line, bool after_dot) {
    const char *s = L->src;
    size_t p = *pp, n = L->len;
    char buf[128];
    size_t bn = 0;
    bool is_float = false;
    if (s[p] == '0' && p + 1 < n && strchr("xXoObB", s[p + 1]) && !after_dot) {
        int base = (s[p + 1] == 'x' || s[p + 1] == 'X') ? 16 : (s[p + 1] == 'o' || s[p + 1] == 'O') ? 8 : 2;
        p += 2;
        while (p < n && (isalnum((unsigned char)s[p]) || s[p] == '_')) {
            if (s[p] != '_' && bn < sizeof(buf) - 1) buf[bn++] = s[p];
            p++;
        }
        buf[bn] = '\0';
        char *end;
        errno = 0;
        long long v = strtoll(buf, &end, base);
        if (bn == 0 || *end || errno) return lex_fail(L, line, "invalid integer literal");
        jtok t = {.type = T_INT, .line = line, .ival = v};
        *pp = p;
        return push(L, t) ? RB_OK : RB_E_NOMEM;
    }
    while (p < n && (isdigit((unsigned char)s[p]) || s[p] == '_')) {
        if (s[p] != '_' && bn < sizeof(buf) - 1) buf[bn++] = s[p];
        p++;
    }
    if (!after_dot && p + 1 < n && s[p] == '.' && isdigit((unsigned char)s[p + 1])) {
        is_float = true;
        if (bn < sizeof(buf) - 1) buf[bn++] = '.';
        p++;
        while (p < n && (isdigit((unsigned char)s[p]) || s[p] == '_')) {
            if (s[p] != '_' && bn < sizeof(buf) - 1) buf[bn++] = s[p];
            p++;
        }
    }
    if (!after_dot && p < n && (s[p] == 'e' || s[p] == 'E')) {
        size_t q = p + 1;
        if (q < n && (s[q] == '+' || s[q] == '-')) q++;
        if (q < n && isdigit((unsigned char)s[q])) {
            is_float = true;
            if (bn < sizeof(buf) - 1) buf[bn++] = 'e';
            for (size_t k = p + 1; k < q; k++)
                if (bn < sizeof(buf) - 1) buf[bn++] = s[k];
            p = q;
            while (p < n && (isdigit((unsigned char)s[p]) || s[p] == '_')) {
                if (s[p] != '_' && bn < sizeof(buf) - 1) buf[bn++] = s[p];
                p++;
            }
        }
    }
    buf[bn] = '\0';
    if (bn >= sizeof(buf) - 1) return lex_fail(L, line, "numeric literal too long");
    jtok t = {.line = line};
    errno = 0;
    if (is_float) {
        t.type = T_FLOAT;
        t.fval = strtod(buf, NULL);
    } else {
        t.type = T_INT;
        t.ival = strtoll(buf, NULL, 10);
        if (errno) return lex_fail(L, line, "integer literal out of range");
    }
    *pp = p;
    return push(L, t) ? RB_OK : RB_E_NOMEM;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", "<=", ">="};
static const char OPS1[] = "+-*/%~<>=.,:|()[]{}";

/* Tokenises the inside of a {{ }} or {% %} tag starting at *pp. */
static rb_status lex_tag(lexer *L, size_t *pp, bool is_block, int open_line) {
    const char *s = L->src;
    size_t n = L->len, p = *pp;
    char stack[256];
    size_t depth = 0;
    for (;;) {
        while (p < n && isspace((unsigned char)s[p])) {
            if (s[p] == '\n') L->line++;
            p++;
        }
        if (p >= n) return lex_fail(L, open_line, is_block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
        if (depth == 0) {
            size_t end = 0;
            bool strip = false, keep = false;
            if (is_block) {
                if (s[p] == '-' && n - p >= 3 && s[p + 1] == '%' && s[p + 2] == '}') { end = p + 3; strip = true; }
                else if (s[p] == '+' && n - p >= 3 && s[p + 1] == '%' && s[p + 2] == '}') { end = p + 3; keep = true; }
                else if (s[p] == '%' && n - p >= 2 && s[p + 1] == '}') end = p + 2;
            } else {
                if (s[p] == '-' && n - p >= 3 && s[p + 1] == '}' && s[p + 2] == '}') { end = p + 3; strip = true; }
                else if (s[p] == '}' && n - p >= 2 && s[p + 1] == '}') { end = p + 2; keep = true; }
            }
            if (end) {
                jtok t = {.type = is_block ? T_BLOCK_END : T_VAR_END, .line = L->line};
                if (!push(L, t)) return RB_E_NOMEM;
                if (strip) {
                    size_t q = skip_ws(L, end);
                    L->line += count_nl(s, end, q);
                    end = q;
                } else if (!keep && end < n && s[end] == '\n') {
                    end++;
                    L->line++;
                }
                L->line_starting = s[end - 1] == '\n';
                *pp = end;
                return RB_OK;
            }
        }
        char c = s[p];
        rb_status st;
        if (isalpha((unsigned char)c) || c == '_') {
            size_t a = p;
            while (p < n && (isalnum((unsigned char)s[p]) || s[p] == '_')) p++;
            jtok t = {.type = T_NAME, .line = L->line, .s = s + a, .n = p - a};
            if (!push(L, t)) return RB_E_NOMEM;
        } else if (isdigit((unsigned char)c)) {
            bool after_dot = L->out->n > 0 && L->out->v[L->out->n - 1].type == T_OP &&
                             L->out->v[L->out->n - 1].s[0] == '.';
            if ((st = lex_number(L, &p, L->line, after_dot)) != RB_OK) return st;
        } else if (c == '\'' || c == '"') {
            size_t a = ++p;
            int line = L->line;
            while (p < n && s[p] != c) {
                if (s[p] == '\\' && p + 1 < n) p++;
                p++;
            }
            if (p >= n) return lex_fail(L, line, "unterminated string literal");
            jtok t = {.type = T_STRING, .line = line};
            if ((st = decode_string(L, a, p, line, &t)) != RB_OK) return st;
            L->line += count_nl(s, a, p);
            p++;
            if (!push(L, t)) return RB_E_NOMEM;
        } else {
            size_t len = 0;
            for (size_t k = 0; k < sizeof(OPS2) / sizeof(OPS2[0]); k++)
                if (n - p >= 2 && s[p] == OPS2[k][0] && s[p + 1] == OPS2[k][1]) len = 2;
            if (!len && strchr(OPS1, c)) len = 1;
            if (!len) {
                char msg[48];
                snprintf(msg, sizeof(msg), "unexpected character '%c'", c);
                return lex_fail(L, L->line, msg);
            }
            if (len == 1 && (c == '(' || c == '[' || c == '{')) {
                if (depth >= sizeof(stack)) return lex_fail(L, L->line, "brackets nested too deeply");
                stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
            } else if (len == 1 && (c == ')' || c == ']' || c == '}')) {
                if (depth == 0 || stack[depth - 1] != c) {
                    char msg[48];
                    snprintf(msg, sizeof(msg), "unexpected '%c'", c);
                    return lex_fail(L, L->line, msg);
                }
                depth--;
            }
            jtok t = {.type = T_OP, .line = L->line, .s = s + p, .n = len};
            if (!push(L, t)) return RB_E_NOMEM;
            p += len;
        }
    }
}

rb_status jinja_lex(jmem *m, const char *src, size_t len, jtoks *out, rb_error *err) {
    /* jinja2 turns every "\r\n" and "\r" of the source into "\n" before lexing */
    char *norm = jmem_alloc(m, len + 1);
    if (!norm) return RB_E_NOMEM;
    size_t nl = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[nl++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            norm[nl++] = src[i];
        }
    }
    src = norm;
    len = nl;
    lexer L = {.m = m, .src = src, .len = len, .line = 1, .out = out, .err = err, .line_starting = true};
    /* keep_trailing_newline=False: one trailing newline is not part of the template */
    if (L.len && src[L.len - 1] == '\n') L.len--;
    const char *s = src;
    size_t n = L.len;
    rb_status st;
    while (L.pos < n) {
        size_t q = L.pos;
        while (q + 1 < n && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#'))) q++;
        if (q + 1 >= n) {
            if (!emit_data(&L, L.pos, n, L.line)) return RB_E_NOMEM;
            break;
        }
        char kind = s[q + 1];
        char sign = (q + 2 < n && (s[q + 2] == '-' || s[q + 2] == '+')) ? s[q + 2] : 0;
        size_t text_end = q;
        if (sign == '-') {
            text_end = rstrip_ws(s, L.pos, q);
        } else if (sign != '+' && kind != '{') {
            size_t l_pos = L.pos;
            bool has_nl = false;
            for (size_t k = q; k > L.pos; k--) {
                if (s[k - 1] == '\n') { l_pos = k; has_nl = true; break; }
            }
            if (has_nl || L.line_starting) {
                size_t k = l_pos, adv;
                while (k < q && py_space_at(s, q, k, &adv)) k += adv;
                if (k == q) text_end = l_pos;
            }
        }
        int text_line = L.line;
        if (!emit_data(&L, L.pos, text_end, text_line)) return RB_E_NOMEM;
        L.line += count_nl(s, L.pos, q);
        int tag_line = L.line;
        if (kind == '#') {
            size_t a = q + 2 + (sign ? 1 : 0), e = a;
            bool found = false;
            for (; e + 1 < n; e++)
                if (s[e] == '#' && s[e + 1] == '}') { found = true; break; }
            if (!found) return lex_fail(&L, tag_line, "missing end of comment tag");
            size_t end = e + 2;
            L.line += count_nl(s, q, end);
            if (e > a && s[e - 1] == '-') {
                size_t z = skip_ws(&L, end);
                L.line += count_nl(s, end, z);
                end = z;
            } else if (!(e > a && s[e - 1] == '+') && end < n && s[end] == '\n') {
                end++;
                L.line++;
            }
            L.line_starting = s[end - 1] == '\n';
            L.pos = end;
            continue;
        }
        bool raw_strip = false;
        size_t raw_end = kind == '%' ? match_raw_begin(&L, q, &raw_strip) : 0;
        if (raw_end) {
            size_t es, ee;
            char os, cs;
            if (!find_endraw(&L, raw_end, &es, &ee, &os, &cs)) return lex_fail(&L, tag_line, "missing endraw tag");
            size_t a = raw_end, b = es;
            if (raw_strip) a = skip_ws(&L, a);
            if (os == '-') b = rstrip_ws(s, a, b);
            L.line += count_nl(s, q, a);
            if (!emit_data(&L, a, b, L.line)) return RB_E_NOMEM;
            L.line += count_nl(s, a, ee);
            size_t end = ee;
            if (cs == '-') {
                size_t z = skip_ws(&L, end);
                L.line += count_nl(s, end, z);
                end = z;
            } else if (cs != '+' && end < n && s[end] == '\n') {
                end++;
                L.line++;
            }
            L.line_starting = s[end - 1] == '\n';
            L.pos = end;
            continue;
        }
        jtok t = {.type = kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, .line = tag_line};
        if (!push(&L, t)) return RB_E_NOMEM;
        size_t p = q + 2 + (sign ? 1 : 0);
        if ((st = lex_tag(&L, &p, kind == '%', tag_line)) != RB_OK) return st;
        L.pos = p;
    }
    jtok eof = {.type = T_EOF, .line = L.line};
    return push(&L, eof) ? RB_OK : RB_E_NOMEM;
}

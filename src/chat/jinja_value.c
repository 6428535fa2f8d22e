/* Value model of the template interpreter: truthiness, equality, Python-style
 * str()/repr() (including repr of floats), small list/dict containers and the
 * UTF-8 / Python-whitespace helpers the string operations build on. */
#include "chat/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

jv jv_cstr(const char *s) { return jv_str(s, strlen(s)); }

bool jv_truthy(jv v) {
    switch ((jv_type)v.type) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

bool jv_is_num(jv v) { return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL; }

double jv_num(jv v) {
    if (v.type == JV_INT) return (double)v.u.i;
    if (v.type == JV_FLOAT) return v.u.f;
    if (v.type == JV_BOOL) return v.u.b ? 1.0 : 0.0;
    return 0.0;
}

static bool is_intlike(jv v) { return v.type == JV_INT || v.type == JV_BOOL; }
static int64_t intval(jv v) { return v.type == JV_BOOL ? (int64_t)v.u.b : v.u.i; }

bool jv_equal(jv a, jv b) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (is_intlike(a) && is_intlike(b)) return intval(a) == intval(b);
        return jv_num(a) == jv_num(b);
    }
    if (a.type != b.type) return false;
    switch ((jv_type)a.type) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR:
        return a.u.s.n == b.u.s.n && (a.u.s.n == 0 || memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0);
    case JV_LIST:
        if ((a.flags & JV_F_TUPLE) != (b.flags & JV_F_TUPLE) || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            const jv *o = jv_dict_get(b.u.d, a.u.d->k[i]);
            if (!o || !jv_equal(a.u.d->v[i], *o)) return false;
        }
        return true;
    case JV_NS: return a.u.d == b.u.d;
    case JV_FUNC: return a.u.fn == b.u.fn;
    case JV_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

const char *jv_type_name(jv v) {
    switch ((jv_type)v.type) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return (v.flags & JV_F_TUPLE) ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "function";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

jv_list *jv_list_new(jmem *m, size_t n) {
    jv_list *l = jmem_alloc(m, sizeof(*l));
    if (!l) return NULL;
    l->n = n;
    if (n) {
        if (n > SIZE_MAX / sizeof(jv)) return NULL;
        l->v = jmem_alloc(m, n * sizeof(jv));
        if (!l->v) return NULL;
    }
    return l;
}

jv_dict *jv_dict_new(jmem *m, size_t cap) {
    jv_dict *d = jmem_alloc(m, sizeof(*d));
    if (!d) return NULL;
    if (cap) {
        if (cap > SIZE_MAX / sizeof(jv)) return NULL;
        d->k = jmem_alloc(m, cap * sizeof(jv));
        d->v = jmem_alloc(m, cap * sizeof(jv));
        if (!d->k || !d->v) return NULL;
        d->cap = cap;
    }
    return d;
}

const jv *jv_dict_get(const jv_dict *d, jv k) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k)) return &d->v[i];
    return NULL;
}

const jv *jv_dict_get_str(const jv_dict *d, const char *k, size_t n) {
    for (size_t i = 0; i < d->n; i++) {
        const jv *key = &d->k[i];
        if (key->type == JV_STR && key->u.s.n == n && memcmp(key->u.s.p, k, n) == 0) return &d->v[i];
    }
    return NULL;
}

bool jv_dict_set(jmem *m, jv_dict *d, jv k, jv v) {
    for (size_t i = 0; i < d->n; i++) {
        if (jv_equal(d->k[i], k)) {
            d->v[i] = v;
            return true;
        }
    }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        jv *nk = jmem_alloc(m, nc * sizeof(jv));
        jv *nv = jmem_alloc(m, nc * sizeof(jv));
        if (!nk || !nv) return false;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jv));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return true;
}

/* ---- numbers ---- */

void jv_format_float(double f, char out[32]) {
    if (isnan(f)) { strcpy(out, "nan"); return; }
    if (isinf(f)) { strcpy(out, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0.0) { strcpy(out, signbit(f) ? "-0.0" : "0.0"); return; }
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]d[.ddd]e(+|-)XX */
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') { neg = true; p++; }
    char digits[24];
    size_t nd = 0;
    while (*p && *p != 'e') {
        if (*p != '.' && nd < sizeof(digits) - 1) digits[nd++] = *p;
        p++;
    }
    int exp = (*p == 'e') ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    char *o = out;
    if (neg) *o++ = '-';
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) *o++ = (size_t)i < nd ? digits[i] : '0';
            *o++ = '.';
            if ((size_t)exp + 1 < nd) {
                for (size_t i = (size_t)exp + 1; i < nd; i++) *o++ = digits[i];
            } else {
                *o++ = '0';
            }
        } else {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -exp - 1; i++) *o++ = '0';
            for (size_t i = 0; i < nd; i++) *o++ = digits[i];
        }
        *o = '\0';
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (size_t i = 1; i < nd; i++) *o++ = digits[i];
        }
        char e[16];
        snprintf(e, sizeof(e), "e%c%02d", exp < 0 ? '-' : '+', (exp < 0 ? -exp : exp) % 1000);
        strcpy(o, e);
    }
}

/* ---- UTF-8 ---- */

uint32_t utf8_decode(const char *s, size_t n, size_t i, size_t *adv) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[i];
    size_t len = 1;
    uint32_t cp = c;
    if (c >= 0xF0 && i + 3 < n) {
        len = 4;
        cp = ((c & 0x07u) << 18) | ((u[i + 1] & 0x3Fu) << 12) | ((u[i + 2] & 0x3Fu) << 6) | (u[i + 3] & 0x3Fu);
    } else if (c >= 0xE0 && i + 2 < n) {
        len = 3;
        cp = ((c & 0x0Fu) << 12) | ((u[i + 1] & 0x3Fu) << 6) | (u[i + 2] & 0x3Fu);
    } else if (c >= 0xC0 && i + 1 < n) {
        len = 2;
        cp = ((c & 0x1Fu) << 6) | (u[i + 1] & 0x3Fu);
    }
    if (adv) *adv = len;
    return cp;
}

size_t utf8_next(const char *s, size_t n, size_t i) {
    size_t adv = 0;
    (void)utf8_decode(s, n, i, &adv);
    return i + adv > n ? n : i + adv;
}

size_t utf8_len(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0u) != 0x80u) c++;
    return c;
}

size_t utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static bool cp_is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

bool py_space_at(const char *s, size_t n, size_t i, size_t *adv) {
    uint32_t c = utf8_decode(s, n, i, adv);
    return cp_is_space(c);
}

bool py_space_before(const char *s, size_t end, size_t *adv) {
    if (end == 0) return false;
    size_t st = end - 1;
    while (st > 0 && end - st < 4 && ((unsigned char)s[st] & 0xC0u) == 0x80u) st--;
    size_t a;
    uint32_t c = utf8_decode(s, end, st, &a);
    if (st + a != end) return false;
    *adv = a;
    return cp_is_space(c);
}

/* ---- str() / repr() ---- */

static bool cp_needs_escape(uint32_t c) {
    if (c < 0x20 || c == 0x7F) return true;
    if (c >= 0x80 && c <= 0xA0) return true;
    if (c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
        (c >= 0x205F && c <= 0x2064) || c == 0x3000 || c == 0xFEFF)
        return true;
    return false;
}

static bool write_str_repr(jbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    jbuf_putc(b, q);
    for (size_t i = 0; i < n;) {
        size_t adv = 0;
        uint32_t c = utf8_decode(s, n, i, &adv);
        char t[16];
        if (c == (uint32_t)q || c == '\\') {
            jbuf_putc(b, '\\');
            jbuf_putc(b, (char)c);
        } else if (c == '\n') {
            jbuf_puts(b, "\\n");
        } else if (c == '\r') {
            jbuf_puts(b, "\\r");
        } else if (c == '\t') {
            jbuf_puts(b, "\\t");
        } else if (cp_needs_escape(c)) {
            if (c < 0x100) snprintf(t, sizeof(t), "\\x%02x", (unsigned)c);
            else snprintf(t, sizeof(t), "\\u%04x", (unsigned)c);
            jbuf_puts(b, t);
        } else {
            jbuf_put(b, s + i, adv);
        }
        i += adv;
    }
    return jbuf_putc(b, q);
}

/* Writes a scalar's text, as request text when it came from the request. */
static bool write_scalar(jbuf *b, jv v, const char *text) {
    size_t start = b->n;
    if (!jbuf_puts(b, text)) return false;
    return (v.flags & JV_F_REQ) ? jbuf_mark(b, start, b->n) : true;
}

bool jv_write_repr(jbuf *b, jv v, int depth) {
    if (depth > JINJA_MAX_DEPTH_DATA) {
        b->failed = true;
        return false;
    }
    char t[32];
    size_t start = b->n;
    switch ((jv_type)v.type) {
    case JV_STR:
        if (!write_str_repr(b, v.u.s.p, v.u.s.n)) return false;
        return jtaint_hit(v.u.s.t, 0, v.u.s.n) ? jbuf_mark(b, start, b->n) : true;
    case JV_UNDEF: return true;
    case JV_NONE: return write_scalar(b, v, "None");
    case JV_BOOL: return write_scalar(b, v, v.u.b ? "True" : "False");
    case JV_INT: snprintf(t, sizeof(t), "%lld", (long long)v.u.i); return write_scalar(b, v, t);
    case JV_FLOAT: jv_format_float(v.u.f, t); return write_scalar(b, v, t);
    case JV_LIST: {
        bool tup = (v.flags & JV_F_TUPLE) != 0;
        jbuf_putc(b, tup ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jbuf_puts(b, ", ");
            if (!jv_write_repr(b, v.u.l->v[i], depth + 1)) return false;
        }
        if (tup && v.u.l->n == 1) jbuf_putc(b, ',');
        return jbuf_putc(b, tup ? ')' : ']');
    }
    case JV_DICT:
        jbuf_putc(b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jbuf_puts(b, ", ");
            if (!jv_write_repr(b, v.u.d->k[i], depth + 1)) return false;
            jbuf_puts(b, ": ");
            if (!jv_write_repr(b, v.u.d->v[i], depth + 1)) return false;
        }
        return jbuf_putc(b, '}');
    case JV_NS: return jbuf_puts(b, "<Namespace>");
    case JV_FUNC: return jbuf_puts(b, "<function>");
    case JV_LOOP: return jbuf_puts(b, "<LoopContext>");
    }
    return false;
}

bool jv_write_str(jbuf *b, jv v) {
    if (v.type == JV_STR) return jbuf_put_t(b, v.u.s.p, v.u.s.n, v.u.s.t);
    return jv_write_repr(b, v, 0);
}

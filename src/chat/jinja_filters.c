/* Built-in filters ({{ x | name(args) }}) and tests ({% if x is name %}) of
 * the Jinja subset, following jinja2's documented behaviour plus the tojson
 * override transformers installs (json.dumps with ensure_ascii=False). */
#include "chat/jinja.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const jv *jargs_get(const jargs *a, size_t i, const char *kw) {
    if (i < a->npos) return &a->pos[i];
    if (kw) {
        size_t l = strlen(kw);
        for (size_t k = 0; k < a->nkw; k++)
            if (a->kwl[k] == l && memcmp(a->kwn[k], kw, l) == 0) return &a->kwv[k];
    }
    return NULL;
}

#define NAME_IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)

static bool case_conv(jctx *cx, jv s, jcase mode, jv *out) {
    jbuf b;
    jbuf_init(&b, cx->max_output);
    jinja_case(&b, s, mode);
    return jx_buf_to_str(cx, &b, out);
}

static bool str_arg(jctx *cx, jv v, jv *out) { return jx_to_str(cx, v, out); }

/* Python str.strip family with an optional set of characters. */
bool jinja_strip(jctx *cx, jv s, const jv *chars, bool left, bool right, jv *out);
bool jinja_strip(jctx *cx, jv s, const jv *chars, bool left, bool right, jv *out) {
    const char *p = s.u.s.p;
    size_t a = 0, b = s.u.s.n, adv;
    if (chars && chars->type != JV_NONE && chars->type != JV_UNDEF) {
        if (chars->type != JV_STR) return jx_fail(cx, RB_E_INVALID, "strip arg must be None or str");
        const char *cs = chars->u.s.p;
        size_t cn = chars->u.s.n;
        while (left && a < b) {
            size_t e = utf8_next(p, b, a);
            if (!cn || !memmem(cs, cn, p + a, e - a)) break;
            a = e;
        }
        while (right && b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)p[st] & 0xC0u) == 0x80u) st--;
            if (!cn || !memmem(cs, cn, p + st, b - st)) break;
            b = st;
        }
    } else {
        while (left && a < b && py_space_at(p, b, a, &adv)) a += adv;
        while (right && b > a && py_space_before(p, b, &adv)) b -= adv;
    }
    return jx_substr(cx, s, a, b - a, out);
}

bool jinja_replace(jctx *cx, jv s, jv old, jv nw, int64_t count, jv *out);
bool jinja_replace(jctx *cx, jv s, jv old, jv nw, int64_t count, jv *out) {
    jbuf b;
    jbuf_init(&b, cx->max_output);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) {
        while (i <= n) {
            if (count < 0 || done < count) {
                jbuf_put_t(&b, nw.u.s.p, nw.u.s.n, nw.u.s.t);
                done++;
            } else {
                jbuf_put_sub(&b, s, i, n - i);
                break;
            }
            if (i == n) break;
            size_t e = utf8_next(p, n, i);
            jbuf_put_sub(&b, s, i, e - i);
            i = e;
        }
        return jx_buf_to_str(cx, &b, out);
    }
    while (i < n) {
        const char *hit = (count < 0 || done < count) ? memmem(p + i, n - i, old.u.s.p, old.u.s.n) : NULL;
        if (!hit) {
            jbuf_put_sub(&b, s, i, n - i);
            break;
        }
        size_t at = (size_t)(hit - p);
        jbuf_put_sub(&b, s, i, at - i);
        jbuf_put_t(&b, nw.u.s.p, nw.u.s.n, nw.u.s.t);
        i = at + old.u.s.n;
        done++;
    }
    return jx_buf_to_str(cx, &b, out);
}

static bool seq_len(jctx *cx, jv v, int64_t *n) {
    switch ((jv_type)v.type) {
    case JV_STR: *n = (int64_t)utf8_len(v.u.s.p, v.u.s.n); return true;
    case JV_LIST: *n = (int64_t)v.u.l->n; return true;
    case JV_DICT: case JV_NS: *n = (int64_t)v.u.d->n; return true;
    case JV_UNDEF: *n = 0; return true;
    default: return jx_fail(cx, RB_E_INVALID, "object of type '%s' has no len()", jv_type_name(v));
    }
}

/* Attribute path "a.b.0" looked up with getitem semantics (jinja2's make_attrgetter). */
static bool attr_path(jctx *cx, jv item, jv attr, jv *out) {
    if (attr.type != JV_STR) return jx_getitem(cx, item, attr, out);
    const char *p = attr.u.s.p;
    size_t n = attr.u.s.n, i = 0;
    while (i <= n) {
        size_t e = i;
        while (e < n && p[e] != '.') e++;
        jv key = jv_str(p + i, e - i);
        bool digits = e > i;
        int64_t iv = 0;
        for (size_t k = i; k < e; k++) {
            if (p[k] < '0' || p[k] > '9' || iv > INT64_MAX / 10 - 10) { digits = false; break; }
            iv = iv * 10 + (p[k] - '0');
        }
        if (digits) key = jv_int(iv);
        if (!jx_getitem(cx, item, key, &item)) return false;
        i = e + 1;
    }
    *out = item;
    return true;
}

static bool make_list(jctx *cx, size_t n, jv_list **l, jv *out) {
    *l = jv_list_new(cx->mem, n);
    if (!*l) return jx_oom(cx);
    out->type = JV_LIST;
    out->flags = 0;
    out->u.l = *l;
    return true;
}

/* select/reject/selectattr/rejectattr */
static bool filter_select(jctx *cx, jv in, const jargs *a, bool by_attr, bool keep_if, jv *out) {
    jv_list *items, *res;
    if (!jx_iterate(cx, in, &items) || !make_list(cx, items->n, &res, out)) return false;
    size_t first = 0;
    jv attr = {0};
    if (by_attr) {
        const jv *av = jargs_get(a, 0, NULL);
        if (!av) return jx_fail(cx, RB_E_INVALID, "missing parameter for attribute name");
        attr = *av;
        first = 1;
    }
    const jv *tn = jargs_get(a, first, NULL);
    jv tname = {0};
    if (tn && !str_arg(cx, *tn, &tname)) return false;
    jargs targs = {.pos = a->npos > first + 1 ? a->pos + first + 1 : NULL,
                   .npos = a->npos > first + 1 ? a->npos - first - 1 : 0,
                   .kwn = a->kwn, .kwl = a->kwl, .kwv = a->kwv, .nkw = a->nkw};
    size_t k = 0;
    for (size_t i = 0; i < items->n; i++) {
        jv v = items->v[i];
        if (by_attr && !attr_path(cx, v, attr, &v)) return false;
        bool r = false;
        if (tn) {
            if (!jinja_test(cx, tname.u.s.p, tname.u.s.n, v, &targs, &r)) return false;
        } else {
            r = jv_truthy(v);
        }
        if (r == keep_if) res->v[k++] = items->v[i];
    }
    res->n = k;
    return true;
}

static bool filter_map(jctx *cx, jv in, const jargs *a, jv *out) {
    jv_list *items, *res;
    if (!jx_iterate(cx, in, &items) || !make_list(cx, items->n, &res, out)) return false;
    const jv *attr = jargs_get(a, a->npos, "attribute");
    if (attr) {
        const jv *def = jargs_get(a, a->npos, "default");
        for (size_t i = 0; i < items->n; i++) {
            if (!attr_path(cx, items->v[i], *attr, &res->v[i])) return false;
            if (def && res->v[i].type == JV_UNDEF) res->v[i] = *def;
        }
        return true;
    }
    if (a->npos < 1) return jx_fail(cx, RB_E_INVALID, "map requires a filter name or attribute=");
    jv fname = {0};
    if (!str_arg(cx, a->pos[0], &fname)) return false;
    jargs fa = {.pos = a->pos + 1, .npos = a->npos - 1, .kwn = a->kwn, .kwl = a->kwl, .kwv = a->kwv, .nkw = a->nkw};
    for (size_t i = 0; i < items->n; i++)
        if (!jinja_filter(cx, fname.u.s.p, fname.u.s.n, items->v[i], &fa, &res->v[i])) return false;
    return true;
}

static bool filter_indent(jctx *cx, jv s, const jargs *a, jv *out) {
    const jv *w = jargs_get(a, 0, "width");
    const jv *first = jargs_get(a, 1, "first");
    const jv *blank = jargs_get(a, 2, "blank");
    jv ind = jv_str("    ", 4);
    char *sp = NULL;
    if (w && w->type == JV_STR) {
        ind = *w;
    } else if (w) {
        if (!jv_is_num(*w)) return jx_fail(cx, RB_E_INVALID, "indent width must be a number or string");
        int64_t k = (int64_t)jv_num(*w);
        if (k < 0) k = 0;
        if ((uint64_t)k > cx->max_output) return jx_fail(cx, RB_E_RANGE, "indent width too large");
        sp = jmem_alloc(cx->mem, (size_t)k + 1);
        if (!sp) return jx_oom(cx);
        memset(sp, ' ', (size_t)k);
        ind = jv_str(sp, (size_t)k);
    }
    /* jinja2 splits s + "\n" with str.splitlines(): the segments of s between
     * line boundaries, the last one possibly empty; all but the first get
     * the indent unless empty (blank=True indents those too). */
    jbuf b;
    jbuf_init(&b, cx->max_output);
    if (first && jv_truthy(*first)) jbuf_put_t(&b, ind.u.s.p, ind.u.s.n, ind.u.s.t);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    bool line0 = true, brk_req = false; /* brk_req: the line break just passed was request text */
    /* splitlines of s + "\n": the final "\n" terminates the last line */
    for (;;) {
        size_t e = i;
        while (e < n && !strchr("\n\r\v\f\x1c\x1d\x1e", p[e])) e++;
        bool at_end = e >= n;
        if (!line0) {
            size_t at = b.n;
            if (jbuf_putc(&b, '\n') && brk_req) jbuf_mark(&b, at, b.n);
            bool empty = e == i;
            if (!empty || (blank && jv_truthy(*blank))) jbuf_put_t(&b, ind.u.s.p, ind.u.s.n, ind.u.s.t);
        }
        jbuf_put_sub(&b, s, i, e - i);
        line0 = false;
        if (at_end) break;
        size_t bs = e;
        if (p[e] == '\r' && e + 1 < n && p[e + 1] == '\n') e++;
        brk_req = jtaint_hit(s.u.s.t, bs, e + 1);
        i = e + 1;
    }
    return jx_buf_to_str(cx, &b, out);
}

static bool filter_tojson(jctx *cx, jv in, const jargs *a, jv *out) {
    const jv *ea = jargs_get(a, 0, "ensure_ascii");
    const jv *ind = jargs_get(a, 1, "indent");
    const jv *seps = jargs_get(a, 2, "separators");
    const jv *sk = jargs_get(a, 3, "sort_keys");
    jdump_opts o = {.indent = NULL, .item_sep = ", ", .key_sep = ": ",
                    .sort_keys = sk && jv_truthy(*sk), .ensure_ascii = ea && jv_truthy(*ea)};
    if (ind && ind->type != JV_NONE) {
        if (ind->type == JV_STR) {
            char *s = jmem_strdup(cx->mem, ind->u.s.p, ind->u.s.n);
            if (!s) return jx_oom(cx);
            o.indent = s;
        } else if (ind->type == JV_INT || ind->type == JV_BOOL) {
            int64_t k = ind->type == JV_BOOL ? ind->u.b : ind->u.i;
            if (k < 0) k = 0;
            if (k > 256) return jx_fail(cx, RB_E_RANGE, "tojson indent too large");
            char *s = jmem_alloc(cx->mem, (size_t)k + 1);
            if (!s) return jx_oom(cx);
            memset(s, ' ', (size_t)k);
            o.indent = s;
        } else {
            return jx_fail(cx, RB_E_INVALID, "tojson indent must be an int or a string");
        }
        o.item_sep = ",";
    }
    if (seps && seps->type != JV_NONE) {
        if (seps->type != JV_LIST || seps->u.l->n != 2 || seps->u.l->v[0].type != JV_STR ||
            seps->u.l->v[1].type != JV_STR)
            return jx_fail(cx, RB_E_INVALID, "tojson separators must be a pair of strings");
        char *s0 = jmem_strdup(cx->mem, seps->u.l->v[0].u.s.p, seps->u.l->v[0].u.s.n);
        char *s1 = jmem_strdup(cx->mem, seps->u.l->v[1].u.s.p, seps->u.l->v[1].u.s.n);
        if (!s0 || !s1) return jx_oom(cx);
        o.item_sep = s0;
        o.key_sep = s1;
    }
    jbuf b;
    jbuf_init(&b, cx->max_output);
    if (!jx_tojson(cx, &b, in, &o, 0)) {
        jbuf_free(&b);
        return false;
    }
    return jx_buf_to_str(cx, &b, out);
}

static bool parse_int_str(const char *p, size_t n, int base, int64_t *out) {
    char buf[128];
    size_t a = 0, b = n, adv;
    while (a < b && py_space_at(p, b, a, &adv)) a += adv;
    while (b > a && py_space_before(p, b, &adv)) b -= adv;
    size_t k = 0;
    for (size_t i = a; i < b; i++) {
        if (p[i] == '_') continue;
        if (k >= sizeof(buf) - 1) return false;
        buf[k++] = p[i];
    }
    buf[k] = '\0';
    if (!k) return false;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, base);
    if (*end || errno) return false;
    *out = v;
    return true;
}

static bool parse_float_str(const char *p, size_t n, double *out) {
    char buf[128];
    size_t a = 0, b = n, adv;
    while (a < b && py_space_at(p, b, a, &adv)) a += adv;
    while (b > a && py_space_before(p, b, &adv)) b -= adv;
    if (b - a == 0 || b - a >= sizeof(buf)) return false;
    memcpy(buf, p + a, b - a);
    buf[b - a] = '\0';
    if (strchr(buf, 'x') || strchr(buf, 'X')) return false; /* no hex floats in Python */
    char *end;
    *out = strtod(buf, &end);
    return *end == '\0';
}

static bool html_escape(jctx *cx, jv s, jv *out) {
    jbuf b;
    jbuf_init(&b, cx->max_output);
    jtcur tc = {s.u.s.t, 0};
    for (size_t i = 0; i < s.u.s.n; i++) {
        char c = s.u.s.p[i];
        size_t at = b.n;
        switch (c) {
        case '&': jbuf_puts(&b, "&amp;"); break;
        case '<': jbuf_puts(&b, "&lt;"); break;
        case '>': jbuf_puts(&b, "&gt;"); break;
        case '"': jbuf_puts(&b, "&#34;"); break;
        case '\'': jbuf_puts(&b, "&#39;"); break;
        default: jbuf_putc(&b, c);
        }
        if (jtcur_hit(&tc, i, i + 1)) jbuf_mark(&b, at, b.n); /* the escape of a request byte */
    }
    return jx_buf_to_str(cx, &b, out);
}

/* A number made from request data (text or a request number) stays request data. */
static void req_number(jv in, jv *out) {
    bool req = (in.type == JV_STR && jtaint_hit(in.u.s.t, 0, in.u.s.n)) ||
               (in.type != JV_STR && (in.flags & JV_F_REQ));
    if (req && (out->type == JV_INT || out->type == JV_FLOAT)) out->flags |= JV_F_REQ;
}

bool jinja_filter(jctx *cx, const char *name, size_t n, jv in, const jargs *a, jv *out) {
    jv s = {0};
    if (NAME_IS("default") || NAME_IS("d")) {
        const jv *def = jargs_get(a, 0, "default_value");
        const jv *boolean = jargs_get(a, 1, "boolean");
        bool use = in.type == JV_UNDEF || (boolean && jv_truthy(*boolean) && !jv_truthy(in));
        *out = use ? (def ? *def : jv_str("", 0)) : in;
        return true;
    }
    if (NAME_IS("safe")) { *out = in; return true; }
    if (NAME_IS("string")) return jx_to_str(cx, in, out);
    if (NAME_IS("tojson")) return filter_tojson(cx, in, a, out);
    if (NAME_IS("trim")) {
        if (!str_arg(cx, in, &s)) return false;
        return jinja_strip(cx, s, jargs_get(a, 0, "chars"), true, true, out);
    }
    if (NAME_IS("upper") || NAME_IS("lower")) {
        if (!str_arg(cx, in, &s)) return false;
        return case_conv(cx, s, name[0] == 'u' ? JCASE_UPPER : JCASE_LOWER, out);
    }
    if (NAME_IS("capitalize")) {
        return str_arg(cx, in, &s) && case_conv(cx, s, JCASE_CAPITALIZE, out);
    }
    if (NAME_IS("title")) return str_arg(cx, in, &s) && case_conv(cx, s, JCASE_TITLE_JINJA, out);
    if (NAME_IS("escape") || NAME_IS("e")) return str_arg(cx, in, &s) && html_escape(cx, s, out);
    if (NAME_IS("length") || NAME_IS("count")) {
        int64_t len = 0;
        if (!seq_len(cx, in, &len)) return false;
        *out = jv_int(len);
        return true;
    }
    if (NAME_IS("first") || NAME_IS("last")) {
        jv_list *items;
        if (!jx_iterate(cx, in, &items)) return false;
        if (!items->n) *out = jv_undef();
        else *out = items->v[name[0] == 'f' ? 0 : items->n - 1];
        return true;
    }
    if (NAME_IS("join")) {
        const jv *d = jargs_get(a, 0, "d");
        const jv *attr = jargs_get(a, 1, "attribute");
        jv sep = jv_str("", 0);
        if (d && !str_arg(cx, *d, &sep)) return false;
        jv_list *items;
        if (!jx_iterate(cx, in, &items)) return false;
        jbuf b;
        jbuf_init(&b, cx->max_output);
        for (size_t i = 0; i < items->n; i++) {
            jv v = items->v[i];
            if (attr && !attr_path(cx, v, *attr, &v)) {
                jbuf_free(&b);
                return false;
            }
            if (i) jbuf_put_t(&b, sep.u.s.p, sep.u.s.n, sep.u.s.t);
            jv_write_str(&b, v);
        }
        return jx_buf_to_str(cx, &b, out);
    }
    if (NAME_IS("replace")) {
        const jv *o = jargs_get(a, 0, "old"), *nw = jargs_get(a, 1, "new"), *c = jargs_get(a, 2, "count");
        jv os = {0}, ns = {0};
        if (!o || !nw) return jx_fail(cx, RB_E_INVALID, "replace needs old and new arguments");
        if (!str_arg(cx, in, &s) || !str_arg(cx, *o, &os) || !str_arg(cx, *nw, &ns)) return false;
        int64_t cnt = -1;
        if (c && c->type != JV_NONE) {
            if (c->type != JV_INT) return jx_fail(cx, RB_E_INVALID, "replace count must be an integer");
            cnt = c->u.i;
        }
        return jinja_replace(cx, s, os, ns, cnt, out);
    }
    if (NAME_IS("int")) {
        const jv *def = jargs_get(a, 0, "default");
        const jv *base = jargs_get(a, 1, "base");
        int64_t iv = 0;
        double fv = 0;
        int b = base && base->type == JV_INT ? (int)base->u.i : 10;
        if (in.type == JV_INT) *out = in;
        else if (in.type == JV_BOOL) *out = jv_int(in.u.b);
        else if (in.type == JV_FLOAT && isfinite(in.u.f) && fabs(in.u.f) < 9.2e18) *out = jv_int((int64_t)in.u.f);
        else if (in.type == JV_STR && parse_int_str(in.u.s.p, in.u.s.n, b, &iv)) *out = jv_int(iv);
        else if (in.type == JV_STR && parse_float_str(in.u.s.p, in.u.s.n, &fv) && isfinite(fv) && fabs(fv) < 9.2e18)
            *out = jv_int((int64_t)fv);
        else *out = def ? *def : jv_int(0);
        req_number(in, out);
        return true;
    }
    if (NAME_IS("float")) {
        const jv *def = jargs_get(a, 0, "default");
        double fv = 0;
        if (jv_is_num(in)) *out = jv_float(jv_num(in));
        else if (in.type == JV_STR && parse_float_str(in.u.s.p, in.u.s.n, &fv)) *out = jv_float(fv);
        else *out = def ? *def : jv_float(0.0);
        req_number(in, out);
        return true;
    }
    if (NAME_IS("abs")) {
        if (in.type == JV_INT && in.u.i != INT64_MIN) *out = jv_int(in.u.i < 0 ? -in.u.i : in.u.i);
        else if (in.type == JV_BOOL) *out = jv_int(in.u.b);
        else if (in.type == JV_FLOAT) *out = jv_float(fabs(in.u.f));
        else return jx_fail(cx, RB_E_INVALID, "bad operand type for abs(): '%s'", jv_type_name(in));
        req_number(in, out);
        return true;
    }
    if (NAME_IS("items")) {
        if (in.type == JV_UNDEF) {
            jv_list *l;
            return make_list(cx, 0, &l, out);
        }
        if (in.type != JV_DICT && in.type != JV_NS) return jx_fail(cx, RB_E_INVALID, "can only get item pairs from a mapping");
        jv_list *l;
        if (!make_list(cx, in.u.d->n, &l, out)) return false;
        for (size_t i = 0; i < in.u.d->n; i++) {
            jv_list *pair = jv_list_new(cx->mem, 2);
            if (!pair) return jx_oom(cx);
            pair->v[0] = in.u.d->k[i];
            pair->v[1] = in.u.d->v[i];
            l->v[i].type = JV_LIST;
            l->v[i].flags = JV_F_TUPLE;
            l->v[i].u.l = pair;
        }
        return true;
    }
    if (NAME_IS("list")) {
        jv_list *items, *l;
        if (!jx_iterate(cx, in, &items) || !make_list(cx, items->n, &l, out)) return false;
        if (items->n) memcpy(l->v, items->v, items->n * sizeof(jv));
        return true;
    }
    if (NAME_IS("reverse")) {
        if (in.type == JV_STR) { /* characters last to first, each with its ranges */
            size_t nc = utf8_len(in.u.s.p, in.u.s.n), k = 0;
            size_t *offs = jmem_alloc(cx->mem, (nc + 1) * sizeof(size_t));
            if (!offs) return jx_oom(cx);
            for (size_t i = 0; i < in.u.s.n && k < nc; i = utf8_next(in.u.s.p, in.u.s.n, i)) offs[k++] = i;
            offs[k] = in.u.s.n;
            jbuf b;
            jbuf_init(&b, cx->max_output);
            for (size_t c = k; c-- > 0;) jbuf_put_sub(&b, in, offs[c], offs[c + 1] - offs[c]);
            return jx_buf_to_str(cx, &b, out);
        }
        jv_list *items, *l;
        if (!jx_iterate(cx, in, &items) || !make_list(cx, items->n, &l, out)) return false;
        for (size_t i = 0; i < items->n; i++) l->v[i] = items->v[items->n - 1 - i];
        return true;
    }
    if (NAME_IS("selectattr")) return filter_select(cx, in, a, true, true, out);
    if (NAME_IS("rejectattr")) return filter_select(cx, in, a, true, false, out);
    if (NAME_IS("select")) return filter_select(cx, in, a, false, true, out);
    if (NAME_IS("reject")) return filter_select(cx, in, a, false, false, out);
    if (NAME_IS("map")) return filter_map(cx, in, a, out);
    if (NAME_IS("indent")) return str_arg(cx, in, &s) && filter_indent(cx, s, a, out);
    if (NAME_IS("unique")) {
        jv_list *items, *l;
        if (!jx_iterate(cx, in, &items) || !make_list(cx, items->n, &l, out)) return false;
        size_t k = 0;
        for (size_t i = 0; i < items->n; i++) {
            bool seen = false;
            for (size_t j = 0; j < k && !seen; j++) seen = jv_equal(l->v[j], items->v[i]);
            if (!seen) l->v[k++] = items->v[i];
        }
        l->n = k;
        return true;
    }
    return jx_fail(cx, RB_E_UNSUPPORTED, "no filter named '%.*s'", (int)n, name);
}

static bool str_all(jv v, bool (*pred)(char), bool *has_cased) {
    *has_cased = false;
    for (size_t i = 0; i < v.u.s.n; i++) {
        char c = v.u.s.p[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            *has_cased = true;
            if (!pred(c)) return false;
        }
    }
    return true;
}
static bool is_lo(char c) { return c >= 'a' && c <= 'z'; }
static bool is_up(char c) { return c >= 'A' && c <= 'Z'; }

bool jinja_test(jctx *cx, const char *name, size_t n, jv in, const jargs *a, bool *r) {
    const jv *arg = jargs_get(a, 0, NULL);
    if (NAME_IS("defined")) { *r = in.type != JV_UNDEF; return true; }
    if (NAME_IS("undefined")) { *r = in.type == JV_UNDEF; return true; }
    if (NAME_IS("none")) { *r = in.type == JV_NONE; return true; }
    if (NAME_IS("boolean")) { *r = in.type == JV_BOOL; return true; }
    if (NAME_IS("true")) { *r = in.type == JV_BOOL && in.u.b; return true; }
    if (NAME_IS("false")) { *r = in.type == JV_BOOL && !in.u.b; return true; }
    if (NAME_IS("string")) { *r = in.type == JV_STR; return true; }
    if (NAME_IS("number")) { *r = jv_is_num(in); return true; }
    if (NAME_IS("integer")) { *r = in.type == JV_INT; return true; }
    if (NAME_IS("float")) { *r = in.type == JV_FLOAT; return true; }
    if (NAME_IS("mapping")) { *r = in.type == JV_DICT; return true; }
    if (NAME_IS("iterable")) {
        *r = in.type == JV_STR || in.type == JV_LIST || in.type == JV_DICT || in.type == JV_UNDEF;
        return true;
    }
    if (NAME_IS("sequence")) {
        *r = in.type == JV_STR || in.type == JV_LIST || in.type == JV_DICT || in.type == JV_UNDEF;
        return true;
    }
    if (NAME_IS("callable")) { *r = in.type == JV_FUNC; return true; }
    if (NAME_IS("escaped")) { *r = false; return true; }
    if (NAME_IS("lower") || NAME_IS("upper")) {
        jv s = {0};
        bool cased;
        if (!jx_to_str(cx, in, &s)) return false;
        *r = str_all(s, name[0] == 'l' ? is_lo : is_up, &cased) && cased;
        return true;
    }
    if (NAME_IS("odd") || NAME_IS("even")) {
        if (in.type != JV_INT && in.type != JV_BOOL)
            return jx_fail(cx, RB_E_INVALID, "'%.*s' test needs an integer", (int)n, name);
        int64_t v = in.type == JV_BOOL ? in.u.b : in.u.i;
        *r = ((v % 2) != 0) == (name[0] == 'o');
        return true;
    }
    if (NAME_IS("divisibleby")) {
        if (!arg || !jv_is_num(*arg) || !jv_is_num(in)) return jx_fail(cx, RB_E_INVALID, "divisibleby needs numbers");
        jv m = {0};
        if (!jx_binop(cx, OP_MOD, in, *arg, &m)) return false;
        *r = !jv_truthy(m);
        return true;
    }
    if (NAME_IS("sameas")) {
        if (!arg) return jx_fail(cx, RB_E_INVALID, "sameas needs an argument");
        if (in.type != arg->type) *r = false;
        else if (in.type == JV_NONE || in.type == JV_UNDEF) *r = true;
        else if (in.type == JV_BOOL) *r = in.u.b == arg->u.b;
        else *r = jv_equal(in, *arg) && (in.type == JV_INT || in.type == JV_FLOAT ||
                                         memcmp(&in.u, &arg->u, sizeof(in.u)) == 0);
        return true;
    }
    static const struct { const char *n; jop op; } cmps[] = {
        {"eq", OP_EQ}, {"equalto", OP_EQ}, {"==", OP_EQ}, {"ne", OP_NE}, {"!=", OP_NE},
        {"lt", OP_LT}, {"lessthan", OP_LT}, {"<", OP_LT}, {"le", OP_LE}, {"<=", OP_LE},
        {"gt", OP_GT}, {"greaterthan", OP_GT}, {">", OP_GT}, {"ge", OP_GE}, {">=", OP_GE},
        {"in", OP_IN},
    };
    for (size_t i = 0; i < sizeof(cmps) / sizeof(cmps[0]); i++) {
        if (strlen(cmps[i].n) == n && memcmp(cmps[i].n, name, n) == 0) {
            if (!arg) return jx_fail(cx, RB_E_INVALID, "test '%.*s' needs an argument", (int)n, name);
            return jx_compare(cx, cmps[i].op, in, *arg, r);
        }
    }
    return jx_fail(cx, RB_E_UNSUPPORTED, "no test named '%.*s'", (int)n, name);
}

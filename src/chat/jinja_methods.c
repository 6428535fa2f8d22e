/* Python-style methods callable from templates (str.strip(), str.split(),
 * dict.get(), dict.items(), loop.cycle(), ...) and the global functions
 * transformers exposes (range, namespace, dict, raise_exception,
 * strftime_now). Mutating methods are absent, as in jinja2's immutable
 * sandbox. */
#include "chat/jinja.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

bool jinja_strip(jctx *cx, jv s, const jv *chars, bool left, bool right, jv *out);
bool jinja_replace(jctx *cx, jv s, jv old, jv nw, int64_t count, jv *out);

static const char *const STR_METHODS[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower", "title",
    "capitalize", "replace", "find", "rfind", "count", "join", "splitlines", "isdigit", "isspace", "isalpha",
    "isalnum", "islower", "isupper",
};
static const char *const DICT_METHODS[] = {"get", "items", "keys", "values"};

static bool in_table(const char *const *t, size_t n, const char *name, size_t len) {
    for (size_t i = 0; i < n; i++)
        if (strlen(t[i]) == len && memcmp(t[i], name, len) == 0) return true;
    return false;
}

bool jinja_method_exists(jv self, const char *name, size_t n) {
    if (self.type == JV_STR) return in_table(STR_METHODS, sizeof(STR_METHODS) / sizeof(*STR_METHODS), name, n);
    if (self.type == JV_DICT) return in_table(DICT_METHODS, sizeof(DICT_METHODS) / sizeof(*DICT_METHODS), name, n);
    if (self.type == JV_LOOP) return n == 5 && memcmp(name, "cycle", 5) == 0;
    return false;
}

#define NAME_IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)

static bool need_str(jctx *cx, const jv *v, const char *what, jv *out) {
    if (!v || v->type != JV_STR) return jx_fail(cx, RB_E_INVALID, "%s must be a string", what);
    *out = *v;
    return true;
}

static bool new_list(jctx *cx, size_t n, jv_list **l, jv *out) {
    *l = jv_list_new(cx->mem, n);
    if (!*l) return jx_oom(cx);
    out->type = JV_LIST;
    out->flags = 0;
    out->u.l = *l;
    return true;
}

/* Python str.split / rsplit. */
static bool str_split(jctx *cx, jv s, const jargs *a, bool from_right, jv *out) {
    const jv *sepv = jargs_get(a, 0, "sep");
    const jv *maxv = jargs_get(a, 1, "maxsplit");
    int64_t maxsplit = (maxv && maxv->type == JV_INT) ? maxv->u.i : -1;
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    jv parts[64];
    size_t np = 0, cap = 64;
    jv *v = parts;
#define PUSH(x)                                                             \
    do {                                                                    \
        if (np == cap) {                                                    \
            jv *nv = jmem_alloc(cx->mem, cap * 2 * sizeof(jv));             \
            if (!nv) return jx_oom(cx);                                     \
            memcpy(nv, v, np * sizeof(jv));                                 \
            v = nv;                                                         \
            cap *= 2;                                                       \
        }                                                                   \
        v[np++] = (x);                                                      \
    } while (0)
    /* a piece of s, with its request ranges */
#define PUSH_SUB(off, len)                                                  \
    do {                                                                    \
        jv piece_;                                                          \
        if (!jx_substr(cx, s, (off), (len), &piece_)) return false;         \
        PUSH(piece_);                                                       \
    } while (0)
    if (!sepv || sepv->type == JV_NONE) {
        size_t adv = 0;
        if (!from_right) {
            size_t i = 0;
            int64_t done = 0;
            for (;;) {
                while (i < n && py_space_at(p, n, i, &adv)) i += adv;
                if (i >= n) break;
                if (maxsplit >= 0 && done >= maxsplit) { /* the rest keeps its trailing space */
                    PUSH_SUB(i, n - i);
                    break;
                }
                size_t st = i;
                while (i < n && !py_space_at(p, n, i, &adv)) i = utf8_next(p, n, i);
                PUSH_SUB(st, i - st);
                done++;
            }
        } else {
            size_t e = n;
            int64_t done = 0;
            for (;;) {
                while (e > 0 && py_space_before(p, e, &adv)) e -= adv;
                if (e == 0) break;
                if (maxsplit >= 0 && done >= maxsplit) { /* the rest keeps its leading space */
                    PUSH_SUB(0, e);
                    break;
                }
                size_t st = e;
                while (st > 0 && !py_space_before(p, st, &adv)) {
                    st--;
                    while (st > 0 && ((unsigned char)p[st] & 0xC0u) == 0x80u) st--;
                }
                PUSH_SUB(st, e - st);
                e = st;
                done++;
            }
        }
    } else {
        jv sep = {0};
        if (!need_str(cx, sepv, "split separator", &sep)) return false;
        if (sep.u.s.n == 0) return jx_fail(cx, RB_E_INVALID, "empty separator");
        if (!from_right) {
            size_t i = 0;
            int64_t done = 0;
            for (;;) {
                const char *hit = (maxsplit < 0 || done < maxsplit) ? memmem(p + i, n - i, sep.u.s.p, sep.u.s.n) : NULL;
                if (!hit) {
                    PUSH_SUB(i, n - i);
                    break;
                }
                PUSH_SUB(i, (size_t)(hit - p) - i);
                i = (size_t)(hit - p) + sep.u.s.n;
                done++;
            }
        } else {
            size_t e = n;
            int64_t done = 0;
            for (;;) {
                size_t hit = SIZE_MAX;
                if ((maxsplit < 0 || done < maxsplit) && e >= sep.u.s.n) {
                    for (size_t k = e - sep.u.s.n + 1; k-- > 0;)
                        if (memcmp(p + k, sep.u.s.p, sep.u.s.n) == 0) { hit = k; break; }
                }
                if (hit == SIZE_MAX) {
                    PUSH_SUB(0, e);
                    break;
                }
                PUSH_SUB(hit + sep.u.s.n, e - hit - sep.u.s.n);
                e = hit;
                done++;
            }
        }
    }
#undef PUSH_SUB
#undef PUSH
    jv_list *l;
    if (!new_list(cx, np, &l, out)) return false;
    for (size_t i = 0; i < np; i++) l->v[i] = from_right ? v[np - 1 - i] : v[i];
    return true;
}

static bool affix(jctx *cx, jv s, const jv *arg, bool prefix, bool *r) {
    if (!arg) return jx_fail(cx, RB_E_INVALID, "%s takes at least 1 argument", prefix ? "startswith" : "endswith");
    size_t cnt = 1;
    const jv *opts = arg;
    if (arg->type == JV_LIST && (arg->flags & JV_F_TUPLE)) {
        cnt = arg->u.l->n;
        opts = arg->u.l->v;
    }
    *r = false;
    for (size_t i = 0; i < cnt; i++) {
        if (opts[i].type != JV_STR)
            return jx_fail(cx, RB_E_INVALID, "%s first arg must be str or a tuple of str", prefix ? "startswith" : "endswith");
        size_t k = opts[i].u.s.n;
        if (k > s.u.s.n) continue;
        const char *at = prefix ? s.u.s.p : s.u.s.p + s.u.s.n - k;
        if (k == 0 || memcmp(at, opts[i].u.s.p, k) == 0) *r = true;
    }
    return true;
}

static bool str_case(jctx *cx, jv s, jcase mode, jv *out) {
    jbuf b;
    jbuf_init(&b, cx->max_output);
    jinja_case(&b, s, mode);
    return jx_buf_to_str(cx, &b, out);
}

static bool str_pred(jv s, int kind) {
    if (s.u.s.n == 0) return false;
    bool cased = false;
    for (size_t i = 0; i < s.u.s.n; i++) {
        unsigned char c = (unsigned char)s.u.s.p[i];
        bool d = c >= '0' && c <= '9', al = (c | 32) >= 'a' && (c | 32) <= 'z';
        switch (kind) {
        case 0: if (!d) return false; break;
        case 1: if (!(c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f))) return false; break;
        case 2: if (!al) return false; break;
        case 3: if (!al && !d) return false; break;
        case 4: if (c >= 'A' && c <= 'Z') return false; cased |= c >= 'a' && c <= 'z'; break;
        case 5: if (c >= 'a' && c <= 'z') return false; cased |= c >= 'A' && c <= 'Z'; break;
        }
    }
    return kind < 4 ? true : cased;
}

static bool str_method(jctx *cx, jv s, const char *name, size_t n, const jargs *a, jv *out) {
    const jv *a0 = jargs_get(a, 0, NULL);
    if (NAME_IS("strip")) return jinja_strip(cx, s, a0, true, true, out);
    if (NAME_IS("lstrip")) return jinja_strip(cx, s, a0, true, false, out);
    if (NAME_IS("rstrip")) return jinja_strip(cx, s, a0, false, true, out);
    if (NAME_IS("split")) return str_split(cx, s, a, false, out);
    if (NAME_IS("rsplit")) return str_split(cx, s, a, true, out);
    if (NAME_IS("startswith") || NAME_IS("endswith")) {
        bool r = false;
        if (!affix(cx, s, a0, name[0] == 's', &r)) return false;
        *out = jv_bool(r);
        return true;
    }
    if (NAME_IS("upper")) return str_case(cx, s, JCASE_UPPER, out);
    if (NAME_IS("lower")) return str_case(cx, s, JCASE_LOWER, out);
    if (NAME_IS("title")) return str_case(cx, s, JCASE_TITLE_PY, out);
    if (NAME_IS("capitalize")) return str_case(cx, s, JCASE_CAPITALIZE, out);
    if (NAME_IS("replace")) {
        jv o = {0}, nw = {0};
        const jv *c = jargs_get(a, 2, "count");
        if (!need_str(cx, a0, "replace old", &o) || !need_str(cx, jargs_get(a, 1, NULL), "replace new", &nw)) return false;
        return jinja_replace(cx, s, o, nw, c && c->type == JV_INT ? c->u.i : -1, out);
    }
    if (NAME_IS("find") || NAME_IS("rfind") || NAME_IS("count")) {
        jv sub = {0};
        if (!need_str(cx, a0, "substring", &sub)) return false;
        int64_t found = -1, cnt = 0;
        const char *p = s.u.s.p;
        for (size_t i = 0; i + sub.u.s.n <= s.u.s.n;) {
            if (memcmp(p + i, sub.u.s.p, sub.u.s.n) == 0) {
                int64_t cp = (int64_t)utf8_len(p, i);
                if (found < 0 || name[0] == 'r') found = cp;
                cnt++;
                if (name[0] == 'f') break;
                i += sub.u.s.n ? sub.u.s.n : 1;
            } else {
                i++;
            }
        }
        if (sub.u.s.n == 0 && name[0] == 'c') cnt = (int64_t)utf8_len(p, s.u.s.n) + 1;
        if (sub.u.s.n == 0 && name[0] == 'r') found = (int64_t)utf8_len(p, s.u.s.n);
        *out = jv_int(name[0] == 'c' ? cnt : found);
        return true;
    }
    if (NAME_IS("join")) {
        jv_list *items;
        if (!a0 || !jx_iterate(cx, *a0, &items)) return a0 ? false : jx_fail(cx, RB_E_INVALID, "join takes 1 argument");
        jbuf b;
        jbuf_init(&b, cx->max_output);
        for (size_t i = 0; i < items->n; i++) {
            if (items->v[i].type != JV_STR) {
                jbuf_free(&b);
                return jx_fail(cx, RB_E_INVALID, "sequence item %zu: expected str instance, %s found", i,
                               jv_type_name(items->v[i]));
            }
            if (i) jbuf_put_t(&b, s.u.s.p, s.u.s.n, s.u.s.t);
            jbuf_put_t(&b, items->v[i].u.s.p, items->v[i].u.s.n, items->v[i].u.s.t);
        }
        return jx_buf_to_str(cx, &b, out);
    }
    if (NAME_IS("splitlines")) {
        size_t cnt = 0, cap = 16;
        jv *v = jmem_alloc(cx->mem, cap * sizeof(jv));
        if (!v) return jx_oom(cx);
        const char *p = s.u.s.p;
        size_t i = 0, len = s.u.s.n;
        while (i < len) {
            size_t e = i;
            while (e < len && !strchr("\n\r\v\f\x1c\x1d\x1e", p[e])) e++;
            if (cnt == cap) {
                jv *nv = jmem_alloc(cx->mem, cap * 2 * sizeof(jv));
                if (!nv) return jx_oom(cx);
                memcpy(nv, v, cnt * sizeof(jv));
                v = nv;
                cap *= 2;
            }
            if (!jx_substr(cx, s, i, e - i, &v[cnt++])) return false;
            if (e < len && p[e] == '\r' && e + 1 < len && p[e + 1] == '\n') e++;
            i = e + 1;
        }
        jv_list *l;
        if (!new_list(cx, cnt, &l, out)) return false;
        if (cnt) memcpy(l->v, v, cnt * sizeof(jv));
        return true;
    }
    static const char *const preds[] = {"isdigit", "isspace", "isalpha", "isalnum", "islower", "isupper"};
    for (int k = 0; k < 6; k++) {
        if (strlen(preds[k]) == n && memcmp(preds[k], name, n) == 0) {
            *out = jv_bool(str_pred(s, k));
            return true;
        }
    }
    return jx_fail(cx, RB_E_UNSUPPORTED, "str has no method '%.*s'", (int)n, name);
}

static bool dict_method(jctx *cx, jv d, const char *name, size_t n, const jargs *a, jv *out) {
    if (NAME_IS("get")) {
        const jv *k = jargs_get(a, 0, NULL), *def = jargs_get(a, 1, NULL);
        if (!k) return jx_fail(cx, RB_E_INVALID, "get expected at least 1 argument");
        const jv *v = jv_dict_get(d.u.d, *k);
        *out = v ? *v : (def ? *def : jv_none());
        return true;
    }
    jv_list *l;
    if (!new_list(cx, d.u.d->n, &l, out)) return false;
    for (size_t i = 0; i < d.u.d->n; i++) {
        if (NAME_IS("keys")) {
            l->v[i] = d.u.d->k[i];
        } else if (NAME_IS("values")) {
            l->v[i] = d.u.d->v[i];
        } else {
            jv_list *pair = jv_list_new(cx->mem, 2);
            if (!pair) return jx_oom(cx);
            pair->v[0] = d.u.d->k[i];
            pair->v[1] = d.u.d->v[i];
            l->v[i].type = JV_LIST;
            l->v[i].flags = JV_F_TUPLE;
            l->v[i].u.l = pair;
        }
    }
    return true;
}

bool jinja_method(jctx *cx, jv self, const char *name, size_t n, const jargs *a, jv *out) {
    if (self.type == JV_STR) return str_method(cx, self, name, n, a, out);
    if (self.type == JV_DICT && jinja_method_exists(self, name, n)) return dict_method(cx, self, name, n, a, out);
    if (self.type == JV_LOOP && NAME_IS("cycle")) {
        if (a->npos == 0) return jx_fail(cx, RB_E_INVALID, "no items for cycling given");
        *out = a->pos[(size_t)self.u.loop->index0 % a->npos];
        return true;
    }
    return jx_fail(cx, RB_E_UNSUPPORTED, "'%s' object has no method '%.*s'", jv_type_name(self), (int)n, name);
}

/* ---- globals ---- */

static const jv_func GLOBALS[] = {
    {.kind = JFN_RANGE, .name = "range"},
    {.kind = JFN_NAMESPACE, .name = "namespace"},
    {.kind = JFN_DICT, .name = "dict"},
    {.kind = JFN_RAISE, .name = "raise_exception"},
    {.kind = JFN_STRFTIME, .name = "strftime_now"},
};

bool jinja_global(const char *name, size_t n, jv *out, jmem *m) {
    (void)m;
    for (size_t i = 0; i < sizeof(GLOBALS) / sizeof(GLOBALS[0]); i++) {
        if (strlen(GLOBALS[i].name) == n && memcmp(GLOBALS[i].name, name, n) == 0) {
            jv v = {0};
            v.type = JV_FUNC;
            v.u.fn = (jv_func *)&GLOBALS[i];
            *out = v;
            return true;
        }
    }
    return false;
}

#define MAX_RANGE 100000

bool jinja_call_builtin(jctx *cx, const jv_func *fn, const jargs *a, jv *out) {
    switch (fn->kind) {
    case JFN_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (a->npos < 1 || a->npos > 3 || a->nkw) return jx_fail(cx, RB_E_INVALID, "range expects 1 to 3 integer arguments");
        for (size_t i = 0; i < a->npos; i++) {
            if (a->pos[i].type != JV_INT && a->pos[i].type != JV_BOOL)
                return jx_fail(cx, RB_E_INVALID, "range arguments must be integers, not '%s'", jv_type_name(a->pos[i]));
        }
        int64_t p[3];
        for (size_t i = 0; i < a->npos; i++) p[i] = a->pos[i].type == JV_BOOL ? a->pos[i].u.b : a->pos[i].u.i;
        if (a->npos == 1) v[1] = p[0];
        else { v[0] = p[0]; v[1] = p[1]; if (a->npos == 3) v[2] = p[2]; }
        if (v[2] == 0) return jx_fail(cx, RB_E_INVALID, "range() arg 3 must not be zero");
        double cntd = 0;
        if (v[2] > 0 && v[1] > v[0]) cntd = ((double)v[1] - (double)v[0] + (double)v[2] - 1) / (double)v[2];
        if (v[2] < 0 && v[0] > v[1]) cntd = ((double)v[0] - (double)v[1] - (double)v[2] - 1) / (double)(-v[2]);
        if (cntd > MAX_RANGE) return jx_fail(cx, RB_E_RANGE, "range too big (at most %d items)", MAX_RANGE);
        size_t cnt = (size_t)cntd;
        jv_list *l;
        if (!new_list(cx, cnt, &l, out)) return false;
        for (size_t i = 0; i < cnt; i++) l->v[i] = jv_int(v[0] + (int64_t)i * v[2]);
        return true;
    }
    case JFN_NAMESPACE:
    case JFN_DICT: {
        jv_dict *d = jv_dict_new(cx->mem, 4);
        if (!d) return jx_oom(cx);
        for (size_t i = 0; i < a->npos; i++) {
            if (a->pos[i].type != JV_DICT && a->pos[i].type != JV_NS)
                return jx_fail(cx, RB_E_INVALID, "%s() positional argument must be a mapping", fn->name);
            for (size_t k = 0; k < a->pos[i].u.d->n; k++)
                if (!jv_dict_set(cx->mem, d, a->pos[i].u.d->k[k], a->pos[i].u.d->v[k])) return jx_oom(cx);
        }
        for (size_t k = 0; k < a->nkw; k++)
            if (!jv_dict_set(cx->mem, d, jv_str(a->kwn[k], a->kwl[k]), a->kwv[k])) return jx_oom(cx);
        out->type = fn->kind == JFN_NAMESPACE ? JV_NS : JV_DICT;
        out->flags = 0;
        out->u.d = d;
        return true;
    }
    case JFN_RAISE: {
        jv msg = jv_str("", 0);
        if (a->npos && !jx_to_str(cx, a->pos[0], &msg)) return false;
        return jx_fail(cx, RB_E_INVALID, "raise_exception: %.*s", (int)(msg.u.s.n > 400 ? 400 : msg.u.s.n), msg.u.s.p);
    }
    case JFN_STRFTIME: {
        jv fmt = {0};
        if (a->npos != 1 || a->pos[0].type != JV_STR) return jx_fail(cx, RB_E_INVALID, "strftime_now takes one string");
        fmt = a->pos[0];
        if (fmt.u.s.n > 256) return jx_fail(cx, RB_E_RANGE, "strftime_now format too long");
        char f[260], buf[1024];
        memcpy(f, fmt.u.s.p, fmt.u.s.n);
        f[fmt.u.s.n] = '\0';
        time_t t = (time_t)cx->now;
        struct tm tmv;
        if (!localtime_r(&t, &tmv)) return jx_fail(cx, RB_E_INVALID, "strftime_now: bad clock");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        size_t len = strftime(buf, sizeof(buf), f, &tmv); /* the template supplies the format */
#pragma GCC diagnostic pop
        if (len == 0 && fmt.u.s.n) return jx_fail(cx, RB_E_RANGE, "strftime_now result too long or empty");
        char *s = jmem_strdup(cx->mem, buf, len);
        if (!s) return jx_oom(cx);
        *out = jv_str(s, len);
        if (jtaint_hit(fmt.u.s.t, 0, fmt.u.s.n)) out->u.s.t = &jtaint_all; /* text made from a request format */
        return true;
    }
    default:
        return jx_fail(cx, RB_E_INVALID, "bad builtin");
    }
}

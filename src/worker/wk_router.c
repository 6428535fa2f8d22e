/* Implementation of wk_router.h: a linear scan over a few dozen routes,
 * matching segment by segment. */
#include "worker/wk_router.h"

#include <stdlib.h>
#include <string.h>

struct wk_static_file {
    wk_static_file *next;
    const char *ctype;
    const void *data;
    size_t len;
};

void wk_router_init(wk_router *rt) { memset(rt, 0, sizeof *rt); }

void wk_router_destroy(wk_router *rt) {
    for (size_t i = 0; i < rt->n; i++) {
        free(rt->items[i].pattern);
        free(rt->items[i].label);
    }
    free(rt->items);
    for (wk_static_file *f = rt->statics; f;) {
        wk_static_file *next = f->next;
        free(f);
        f = next;
    }
    memset(rt, 0, sizeof *rt);
}

static bool valid_pattern(const char *p) {
    if (p[0] != '/') return false;
    int params = 0;
    for (const char *s = p; *s; s++) {
        if (*s == '{') {
            const char *e = strchr(s, '}');
            if (!e || e == s + 1 || s[-1] != '/' || (e[1] != '/' && e[1] != '\0')) return false;
            if (++params > WK_MAX_PARAMS) return false;
            s = e;
        } else if (*s == '}') {
            return false;
        }
    }
    return true;
}

rb_status wk_router_add(wk_router *rt, const char *method, const char *pattern, wk_handler_fn fn, void *ctx,
                        const char *label, unsigned flags, rb_error *err) {
    if (!method || !pattern || !fn || strlen(method) >= sizeof rt->items[0].method || !valid_pattern(pattern))
        return rb_error_set(err, RB_E_INVALID, "bad route %s %s", method ? method : "?", pattern ? pattern : "?");
    for (size_t i = 0; i < rt->n; i++)
        if (strcmp(rt->items[i].method, method) == 0 && strcmp(rt->items[i].pattern, pattern) == 0)
            return rb_error_set(err, RB_E_INVALID, "route %s %s is registered twice", method, pattern);
    if (rt->n == rt->cap) {
        size_t nc = rt->cap ? rt->cap * 2 : 16;
        wk_route *ni = realloc(rt->items, nc * sizeof *ni);
        if (!ni) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        rt->items = ni;
        rt->cap = nc;
    }
    wk_route *r = &rt->items[rt->n];
    memset(r, 0, sizeof *r);
    strcpy(r->method, method);
    r->pattern = strdup(pattern);
    r->label = strdup(label ? label : pattern);
    if (!r->pattern || !r->label) {
        free(r->pattern);
        free(r->label);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    r->fn = fn;
    r->ctx = ctx;
    r->flags = flags;
    rt->n++;
    return RB_OK;
}

static bool serve_static(wk_req *r, void *ctx) {
    const wk_static_file *f = ctx;
    return wk_reply_static(r, 200, f->ctype, f->data, f->len);
}

rb_status wk_router_add_static(wk_router *rt, const char *path, const char *ctype, const void *data, size_t len,
                               rb_error *err) {
    wk_static_file *f = calloc(1, sizeof *f);
    if (!f) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    f->ctype = ctype;
    f->data = data;
    f->len = len;
    rb_status s = wk_router_add(rt, "GET", path, serve_static, f, NULL, WK_ROUTE_PUBLIC, err);
    if (s != RB_OK) {
        free(f);
        return s;
    }
    f->next = rt->statics;
    rt->statics = f;
    return RB_OK;
}

/* Matches path against pattern; fills p on success. */
static bool match(const char *pattern, const char *path, wk_params *p) {
    p->n = 0;
    const char *a = pattern, *b = path;
    while (*a && *b) {
        if (*a == '{') {
            const char *close = strchr(a, '}');
            const char *end = strchr(b, '/');
            size_t n = end ? (size_t)(end - b) : strlen(b);
            if (n == 0 || n >= WK_PARAM_MAX) return false;
            p->names[p->n] = a + 1;
            p->name_lens[p->n] = (size_t)(close - a - 1);
            memcpy(p->values[p->n], b, n);
            p->values[p->n][n] = '\0';
            p->n++;
            a = close + 1;
            b += n;
            continue;
        }
        if (*a != *b) return false;
        a++;
        b++;
    }
    return *a == '\0' && *b == '\0';
}

static void add_allow(char *allow, size_t len, const char *m) {
    if (!allow || len == 0) return;
    size_t ml = strlen(m);
    for (const char *s = allow; (s = strstr(s, m)) != NULL; s += ml)
        if ((s == allow || s[-1] == ' ') && (s[ml] == ',' || s[ml] == '\0')) return;
    size_t n = strlen(allow);
    if (n + ml + 3 > len) return;
    if (n) {
        memcpy(allow + n, ", ", 2);
        n += 2;
    }
    memcpy(allow + n, m, ml + 1);
}

const wk_route *wk_router_match(const wk_router *rt, const char *method, const char *path, wk_params *p,
                                char *allow, size_t allow_len) {
    if (allow && allow_len) allow[0] = '\0';
    const char *m = strcmp(method, "HEAD") == 0 ? "GET" : method;
    wk_params tmp;
    for (size_t i = 0; i < rt->n; i++) {
        if (!match(rt->items[i].pattern, path, &tmp)) continue;
        if (strcmp(rt->items[i].method, m) == 0) {
            *p = tmp;
            return &rt->items[i];
        }
        add_allow(allow, allow_len, rt->items[i].method);
    }
    p->n = 0;
    return NULL;
}

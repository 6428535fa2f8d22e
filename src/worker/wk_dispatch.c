/* Implementation of wk_dispatch.h. */
#include "worker/wk_dispatch.h"
#include "worker/wk_auth.h"
#include "worker/wk_cors.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool wk_method_ok(const char *m) {
    if (!*m) return false;
    for (const char *p = m; *p; p++)
        if (!(isalnum((unsigned char)*p) || strchr("!#$%&'*+-.^_`|~", *p))) return false;
    return strlen(m) < 16;
}

typedef struct length_scan {
    int n;
    bool differs;
    const char *value;
    size_t len;
} length_scan;

static void scan_length(void *acc, const char *key, size_t key_len, const char *value, size_t value_len) {
    length_scan *s = acc;
    if (key_len != 14 || strncasecmp(key, "Content-Length", 14) != 0 || !value) return;
    if (s->n > 0 && (value_len != s->len || memcmp(value, s->value, value_len) != 0)) s->differs = true;
    s->value = value;
    s->len = value_len;
    s->n++;
}

/* Framing a proxy and this server could read differently is refused:
 * Transfer-Encoding other than chunked (501), chunked with a length, or two
 * different lengths (400). */
static bool framing_ok(const wk_head *h, wk_dispatch *d) {
    length_scan ls = {0};
    h->each(h->ctx, scan_length, &ls);
    const char *te = h->header(h->ctx, "Transfer-Encoding");
    if (te) {
        while (*te == ' ') te++;
        size_t n = strlen(te);
        while (n > 0 && te[n - 1] == ' ') n--;
        if (n != 7 || strncasecmp(te, "chunked", 7) != 0) {
            d->verdict = WK_BAD_TE;
            return false;
        }
        if (ls.n > 0) {
            d->verdict = WK_BAD_FRAMING;
            d->msg = "Content-Length together with Transfer-Encoding";
            return false;
        }
    }
    if (ls.differs) {
        d->verdict = WK_BAD_FRAMING;
        d->msg = "two different Content-Length headers";
        return false;
    }
    return true;
}

void wk_dispatch_head(const wk_config *cfg, const wk_router *rt, const wk_head *h, wk_dispatch *d) {
    memset(d, 0, sizeof *d);
    if (!wk_method_ok(h->method)) {
        d->verdict = WK_BAD_METHOD;
        return;
    }
    if (!framing_ok(h, d)) return;
    const char *origin = h->header(h->ctx, "Origin");
    if (cfg->cors_origin && origin) wk_cors_allow(cfg->cors_origin, origin, d->cors, sizeof d->cors);
    d->route = wk_router_match(rt, h->method, h->url, &d->params, d->allow, sizeof d->allow);
    if (cfg->cors_origin && strcmp(h->method, "OPTIONS") == 0 && origin &&
        h->header(h->ctx, "Access-Control-Request-Method")) {
        if (!d->cors[0]) {
            d->verdict = WK_CORS_DENIED;
            return;
        }
        if (d->allow[0]) {
            wk_cors_allow_headers(h->header(h->ctx, "Access-Control-Request-Headers"), d->allow_headers,
                                  sizeof d->allow_headers);
            d->verdict = WK_PREFLIGHT;
            return;
        }
    }
    if (!d->route || !(d->route->flags & WK_ROUTE_PUBLIC)) {
        d->code = wk_auth_check(h->header(h->ctx, "Authorization"), cfg->api_token);
        if (d->code) {
            d->verdict = WK_UNAUTHORIZED;
            return;
        }
    }
    if (!d->route && d->allow[0]) {
        d->verdict = WK_NOT_ALLOWED;
        return;
    }
    const char *cl = h->header(h->ctx, "Content-Length");
    if (cl) {
        char *end = NULL;
        unsigned long long v = strtoull(cl, &end, 10);
        if (end != cl && v > (unsigned long long)cfg->max_body_bytes) d->verdict = WK_TOO_BIG;
    }
}

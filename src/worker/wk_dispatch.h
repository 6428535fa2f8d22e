/* What a worker answers a request head, decided without the transport:
 * the method's syntax, framing a proxy could read differently
 * (Transfer-Encoding, Content-Length), the CORS origin and preflight, the
 * route, bearer auth, 405 and the body-size cap. wk_http.c applies the
 * verdict with libmicrohttpd; the request fuzzer feeds it framed bytes. */
#ifndef RBEE_WK_DISPATCH_H
#define RBEE_WK_DISPATCH_H

#include "worker/wk_config.h"
#include "worker/wk_router.h"

#include <stddef.h>

/* A request head as the transport sees it. */
typedef void (*wk_header_fn)(void *acc, const char *key, size_t key_len, const char *value, size_t value_len);
typedef struct wk_head {
    const char *method, *url;
    void *ctx;
    /* First value of the named header (case-insensitive), NULL if absent. */
    const char *(*header)(void *ctx, const char *name);
    /* Calls fn for every header line, in order (value may be NULL). */
    void (*each)(void *ctx, wk_header_fn fn, void *acc);
} wk_head;

typedef enum wk_verdict {
    WK_GO = 0,          /* read the body; then 404 without a route, else the route's handler */
    WK_BAD_METHOD,      /* 501 BAD_METHOD: the method is not an RFC 9110 token */
    WK_BAD_TE,          /* 501 UNSUPPORTED_TRANSFER_ENCODING */
    WK_BAD_FRAMING,     /* 400 BAD_FRAMING, message in msg */
    WK_CORS_DENIED,     /* 403 CORS_ORIGIN_NOT_ALLOWED (a preflight from another origin) */
    WK_PREFLIGHT,       /* 204 with allow and allow_headers */
    WK_UNAUTHORIZED,    /* 401, code in code */
    WK_NOT_ALLOWED,     /* 405 with allow */
    WK_TOO_BIG,         /* 413: Content-Length over --max-body-bytes */
} wk_verdict;

typedef struct wk_dispatch {
    wk_verdict verdict;
    const wk_route *route; /* NULL: no route (or decided before routing) */
    wk_params params;
    char cors[256];          /* Access-Control-Allow-Origin value, "" for none */
    char allow[128];         /* methods the path accepts, "" when the path is unknown */
    char allow_headers[512]; /* WK_PREFLIGHT: Access-Control-Allow-Headers */
    const char *code;        /* WK_UNAUTHORIZED: MISSING_API_KEY or INVALID_API_KEY */
    const char *msg;         /* WK_BAD_FRAMING */
} wk_dispatch;

/* True if m is a request method the worker reads (an RFC 9110 token of at
 * most 15 bytes). */
bool wk_method_ok(const char *m);

void wk_dispatch_head(const wk_config *cfg, const wk_router *rt, const wk_head *h, wk_dispatch *out);

#endif

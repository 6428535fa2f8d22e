/* The HTTP transport of a worker on libmicrohttpd: one thread per
 * connection (streams and long requests may block), IPv4 and IPv6 (dual
 * stack on "::"), optional TLS (GnuTLS inside libmicrohttpd), CORS, request
 * bodies collected up to the cap, bearer-token auth, dispatch through the
 * router, and the request counters and duration histogram per route. */
#ifndef RBEE_WK_HTTP_H
#define RBEE_WK_HTTP_H

#include "rbee/status.h"
#include "worker/wk_config.h"
#include "worker/wk_log.h"
#include "worker/wk_metrics.h"
#include "worker/wk_router.h"

typedef struct wk_http wk_http;

typedef struct wk_http_opts {
    const wk_config *cfg;     /* listening, TLS, CORS, limits, token */
    const wk_router *router;  /* must not change while serving */
    wk_metrics *metrics;
    wk_log *log;
} wk_http_opts;

/* Binds and starts serving. *out_port gets the bound port. */
rb_status wk_http_start(const wk_http_opts *o, wk_http **out, int *out_port, rb_error *err);
/* "127.0.0.1", "[::1]", ...: the address as it goes before ":port". */
const char *wk_http_listen_host(const wk_http *h);
/* Stops accepting new connections (existing ones go on). */
void wk_http_quiesce(wk_http *h);
/* Number of open connections. */
unsigned wk_http_connections(wk_http *h);
/* Closes everything, joins the connection threads and frees h. */
void wk_http_stop(wk_http *h);

#endif

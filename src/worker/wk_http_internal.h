/* Internal to the transport: the per-request state kept between
 * libmicrohttpd's calls, shared by wk_http.c (requests and replies) and
 * wk_sse.c (streams). */
#ifndef RBEE_WK_HTTP_INTERNAL_H
#define RBEE_WK_HTTP_INTERNAL_H

#include "worker/wk_http.h"
#include "worker/wk_req.h"
#include "worker/wk_router.h"

#include <microhttpd.h>

struct wk_req {
    wk_http *h;
    struct MHD_Connection *conn;
    const wk_route *route; /* NULL: no route matched */
    wk_params params;
    char method[16];
    char *path;
    char *body;
    size_t len, cap;
    bool too_big;
    double t0;
    bool begun;   /* the head was complete and the access handler has seen it */
    bool counted; /* the request is in the request counters */
    char cors[256]; /* Access-Control-Allow-Origin value, "" for none */
};

wk_log *wk_http_log(const wk_http *h);
/* How long a stream may stay silent before it sends a keep-alive comment:
 * well within the idle timeout, so the server never times out a stream it
 * owes (half of --http-timeout, at most 15 s). */
double wk_http_keepalive_ms(const wk_http *h);
/* True when the peer of c has closed its side of the connection. */
bool wk_http_conn_gone(struct MHD_Connection *c);
/* Adds the CORS headers r may carry to resp. */
void wk_http_add_cors(wk_req *r, struct MHD_Response *resp);
/* Queues resp (may be NULL: a 500), destroys it and counts it. */
bool wk_http_queue(wk_req *r, int status, struct MHD_Response *resp);

#endif

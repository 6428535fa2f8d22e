/* What a route handler sees of an HTTP request, and how it answers. Every
 * reply is counted in the request metrics under the route's label, carries
 * the CORS headers the configuration allows, and is sent in the error shape
 * of the route (rbee's, or OpenAI's for routes flagged WK_ROUTE_OPENAI). A
 * handler returns true when it queued a reply, false to drop the connection
 * (a client that has gone). */
#ifndef RBEE_WK_REQ_H
#define RBEE_WK_REQ_H

#include "worker/wk_request.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct wk_req wk_req;
typedef bool (*wk_handler_fn)(wk_req *r, void *ctx);

enum {
    WK_ROUTE_PUBLIC = 1u, /* no bearer token needed (health, a worker's web page) */
    WK_ROUTE_OPENAI = 2u, /* field errors and 503s in OpenAI's error shape */
};

const char *wk_req_method(const wk_req *r);
const char *wk_req_path(const wk_req *r);
/* Value of {name} in the route's pattern, or NULL. */
const char *wk_req_param(const wk_req *r, const char *name);
/* The request body, NUL-terminated ("" when there is none). */
const char *wk_req_body(const wk_req *r, size_t *len);
const char *wk_req_header(wk_req *r, const char *name);
/* Value of a query-string argument ("?name=value", decoded), NULL if absent. */
const char *wk_req_query(wk_req *r, const char *name);
const char *wk_req_route_label(const wk_req *r);
bool wk_req_openai(const wk_req *r);
/* Monotonic time (ms) the request arrived. */
double wk_req_start_ms(const wk_req *r);
/* True when the peer has closed its side of the connection. */
bool wk_req_client_gone(wk_req *r);

/* JSON reply; body is consumed (NULL gives a 500). */
bool wk_reply_json(wk_req *r, int status, json_t *body);
/* Same with one extra header (hname NULL for none). */
bool wk_reply_json_hdr(wk_req *r, int status, json_t *body, const char *hname, const char *hval);
/* text is malloc'ed and taken over (NULL gives a 500). */
bool wk_reply_text(wk_req *r, int status, const char *ctype, char *text);
/* data outlives the server (a built-in file). */
bool wk_reply_static(wk_req *r, int status, const char *ctype, const void *data, size_t len);
/* {"error":{"code","message","type"}} */
bool wk_reply_error(wk_req *r, int status, const char *code, const char *type, const char *msg);
/* 400 with every field error, in the route's error shape. */
bool wk_reply_invalid(wk_req *r, const wk_errors *errs);
/* 503 + Retry-After (queue full, loading, shutting down). */
bool wk_reply_unavailable(wk_req *r, const char *code, const char *msg);
/* Counts a request that ends without a reply (status 499: client gone). */
void wk_req_count(wk_req *r, int status);

#endif

/* The route table a worker fills at startup: (method, path pattern,
 * handler, metric label, flags). Patterns are literal segments and {name}
 * placeholders ("/v1/jobs/{id}/stream"); a path that matches a pattern but
 * not its method gets a 405 with the methods that would match. Workers add
 * their routes here; no central list of routes exists anywhere else. */
#ifndef RBEE_WK_ROUTER_H
#define RBEE_WK_ROUTER_H

#include "rbee/status.h"
#include "worker/wk_req.h"

#include <stddef.h>

#define WK_MAX_PARAMS 4
#define WK_PARAM_MAX 128

typedef struct wk_route {
    char method[8];
    char *pattern;
    char *label; /* the route's name in metrics: the pattern unless given */
    wk_handler_fn fn;
    void *ctx;
    unsigned flags; /* WK_ROUTE_* */
} wk_route;

typedef struct wk_params {
    int n;
    const char *names[WK_MAX_PARAMS]; /* point into the route's pattern */
    size_t name_lens[WK_MAX_PARAMS];
    char values[WK_MAX_PARAMS][WK_PARAM_MAX];
} wk_params;

typedef struct wk_static_file wk_static_file;

typedef struct wk_router {
    wk_route *items;
    size_t n, cap;
    wk_static_file *statics; /* files registered with wk_router_add_static */
} wk_router;

void wk_router_init(wk_router *rt);
void wk_router_destroy(wk_router *rt);

/* method: "GET" (also serves HEAD), "POST", "DELETE", ...; label NULL: the
 * pattern. A second route with the same method and pattern is an error. */
rb_status wk_router_add(wk_router *rt, const char *method, const char *pattern, wk_handler_fn fn, void *ctx,
                        const char *label, unsigned flags, rb_error *err);
/* A public GET route answering a built-in file (data must outlive the
 * router). */
rb_status wk_router_add_static(wk_router *rt, const char *path, const char *ctype, const void *data, size_t len,
                               rb_error *err);

/* The route for (method, path), with its parameters in *p; NULL when none.
 * Then allow gets the comma-separated methods the path does accept ("" when
 * the path is unknown). */
const wk_route *wk_router_match(const wk_router *rt, const char *method, const char *path, wk_params *p,
                                char *allow, size_t allow_len);

#endif

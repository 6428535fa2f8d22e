/* Routes that describe the worker: /health (public, 200 while the process
 * runs), /v1/ready (200 once loaded and warm, 503 before and while
 * stopping), /v1/info and /metrics. */
#include "worker/wk_util.h"
#include "worker/wk_worker.h"

#include <string.h>

static bool route_health(wk_req *r, void *ctx) {
    wk_worker *w = ctx;
    return wk_reply_json(r, 200, json_pack("{s:s,s:s}", "status", "ok", "state", wk_worker_state_name(w)));
}

static bool route_ready(wk_req *r, void *ctx) {
    wk_worker *w = ctx;
    wk_state st = wk_worker_state(w);
    bool ready = st == WK_STATE_READY;
    json_t *j = json_pack("{s:b,s:s,s:b}", "ready", ready, "state", wk_worker_state_name(w), "model_loaded",
                          st == WK_STATE_READY || st == WK_STATE_STOPPING);
    if (st == WK_STATE_ERROR && j) json_object_set_new(j, "error", wk_json_text(w->load_error, strlen(w->load_error)));
    if (ready) return wk_reply_json(r, 200, j);
    return wk_reply_json_hdr(r, 503, j, "Retry-After", "1");
}

static bool route_info(wk_req *r, void *ctx) {
    wk_worker *w = ctx;
    wk_state st = wk_worker_state(w);
    bool loaded = st == WK_STATE_READY || st == WK_STATE_STOPPING;
    json_t *j = json_pack("{s:s,s:s,s:o,s:s,s:s,s:s,s:i,s:I,s:s,s:s,s:b,s:b}", "worker_id", w->cfg.worker_id,
                          "model", w->model_id, "model_path", wk_json_text(w->model_path, strlen(w->model_path)),
                          "state", wk_worker_state_name(w),
                          "backend", w->cfg.backend, "device", w->device, "port", w->port, "queue_depth",
                          (json_int_t)w->cfg.queue_depth, "implementation", w->def->name, "version",
                          w->def->version ? w->def->version : "", "tls", w->cfg.tls_cert != NULL, "auth",
                          w->cfg.api_token != NULL);
    if (j && w->def->info) w->def->info(w->def->user, j, loaded);
    return wk_reply_json(r, 200, j);
}

static bool route_metrics(wk_req *r, void *ctx) {
    wk_worker *w = ctx;
    return wk_reply_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", wk_metrics_render(&w->metrics));
}

rb_status wk_routes_info_add(wk_worker *w, rb_error *err) {
    rb_status s;
    if ((s = wk_router_add(&w->router, "GET", "/health", route_health, w, NULL, WK_ROUTE_PUBLIC, err)) != RB_OK ||
        (s = wk_router_add(&w->router, "GET", "/v1/health", route_health, w, "/health", WK_ROUTE_PUBLIC, err)) != RB_OK ||
        (s = wk_router_add(&w->router, "GET", "/v1/ready", route_ready, w, NULL, 0, err)) != RB_OK ||
        (s = wk_router_add(&w->router, "GET", "/v1/info", route_info, w, NULL, 0, err)) != RB_OK ||
        (s = wk_router_add(&w->router, "GET", "/metrics", route_metrics, w, NULL, 0, err)) != RB_OK)
        return s;
    return RB_OK;
}

/* Routes that describe the worker: /health, /v1/ready, /v1/info, /metrics
 * and the OpenAI model list. */
#include "server/srv_http_internal.h"
#include "server/srv_util.h"

#include <stdlib.h>
#include <string.h>

#ifndef RBEE_VERSION
#define RBEE_VERSION "0.0.0"
#endif

enum MHD_Result srv_route_health(struct MHD_Connection *c, srv_req *r) {
    return srv_reply_json(c, r, 200, json_pack("{s:s,s:s}", "status", "ok", "state", srv_worker_state_name(r->w)));
}

enum MHD_Result srv_route_ready(struct MHD_Connection *c, srv_req *r) {
    srv_worker *w = r->w;
    int st = atomic_load(&w->state);
    bool loaded = st == SRV_STATE_READY || (st == SRV_STATE_STOPPING && w->model);
    json_t *j = json_pack("{s:b,s:s,s:b}", "ready", st == SRV_STATE_READY, "state", srv_worker_state_name(w),
                          "model_loaded", loaded);
    if (st == SRV_STATE_ERROR && j) json_object_set_new(j, "error", srv_json_text(w->load_error, strlen(w->load_error)));
    return srv_reply_json(c, r, 200, j);
}

static json_t *memory_json(srv_worker *w, size_t *model_b, size_t *kv_b, rb_device_info *di) {
    memset(di, 0, sizeof *di);
    *model_b = w->model ? rb_model_weight_bytes(w->model) : 0;
    *kv_b = 0;
    pthread_rwlock_rdlock(&w->engine_lock);
    if (w->engine) *kv_b = srv_engine_kv_bytes(w->engine);
    pthread_rwlock_unlock(&w->engine_lock);
    if (w->be) rb_backend_device_info(w->be, di);
    int64_t rss = srv_process_rss();
    return json_pack("{s:I,s:I,s:I,s:I,s:I}", "model_bytes", (json_int_t)*model_b, "kv_cache_bytes", (json_int_t)*kv_b,
                     "process_rss_bytes", (json_int_t)rss, "device_total_bytes", (json_int_t)di->mem_total,
                     "device_free_bytes", (json_int_t)di->mem_free);
}

enum MHD_Result srv_route_info(struct MHD_Connection *c, srv_req *r) {
    srv_worker *w = r->w;
    int st = atomic_load(&w->state);
    bool loaded = w->model && st != SRV_STATE_LOADING && st != SRV_STATE_ERROR;
    size_t mb = 0, kb = 0;
    rb_device_info di;
    memset(&di, 0, sizeof di);
    json_t *mem = loaded ? memory_json(w, &mb, &kb, &di) : json_null();
    const rb_model_config *mc = loaded ? rb_model_get_config(w->model) : NULL;
    json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:i,s:I,s:i,s:i,s:o,s:s,s:s}",
                          "worker_id", w->cfg.worker_id, "model", w->model_id, "model_path", w->model_path,
                          "state", srv_worker_state_name(w), "backend", w->be ? rb_backend_name(w->be) : w->cfg.backend,
                          "device", w->device, "port", w->port, "context_size", (json_int_t)w->ctx_size,
                          "parallel", w->cfg.parallel, "queue_depth", w->cfg.queue_depth, "memory", mem,
                          "implementation", "llm-worker-rbee", "version", RBEE_VERSION);
    if (j && mc) {
        json_object_set_new(j, "architecture", json_string(rb_arch_name(mc->arch)));
        json_object_set_new(j, "dtype", json_string(rb_dtype_name(rb_model_weight_dtype(w->model))));
        json_object_set_new(j, "quantization", json_string(rb_dtype_name(rb_model_weight_dtype(w->model))));
        json_object_set_new(j, "n_ctx_train", json_integer((json_int_t)mc->n_ctx_train));
        json_object_set_new(j, "n_vocab", json_integer((json_int_t)mc->n_vocab));
        json_object_set_new(j, "device_name", json_string(di.name));
        json_object_set_new(j, "chat_template", json_string(w->chat.is_fallback ? "fallback" : "model"));
    }
    return srv_reply_json(c, r, 200, j);
}

enum MHD_Result srv_route_metrics(struct MHD_Connection *c, srv_req *r) {
    srv_worker *w = r->w;
    srv_gauges g;
    memset(&g, 0, sizeof g);
    int st = atomic_load(&w->state);
    pthread_rwlock_rdlock(&w->engine_lock);
    if (w->engine) {
        srv_engine_stats(w->engine, &g.queue_depth, &g.active_sequences);
        g.kv_bytes = srv_engine_kv_bytes(w->engine);
    }
    pthread_rwlock_unlock(&w->engine_lock);
    g.queue_capacity = w->cfg.queue_depth;
    g.parallel = w->cfg.parallel;
    g.jobs_tracked = srv_jobs_count(&w->jobs);
    if (w->model && st != SRV_STATE_LOADING && st != SRV_STATE_ERROR) {
        g.model_bytes = rb_model_weight_bytes(w->model);
        rb_device_info di;
        memset(&di, 0, sizeof di);
        if (w->be && rb_backend_device_info(w->be, &di) == RB_OK) {
            g.device_mem_total = di.mem_total;
            g.device_mem_free = di.mem_free;
        }
    }
    g.rss_bytes = srv_process_rss();
    g.ready = st == SRV_STATE_READY;
    return srv_reply_text(c, r, 200, "text/plain; version=0.0.4; charset=utf-8", srv_metrics_render(&w->metrics, &g));
}

enum MHD_Result srv_route_models(struct MHD_Connection *c, srv_req *r) {
    srv_worker *w = r->w;
    json_t *data = json_array();
    if (w->model_id[0])
        json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s}", "id", w->model_id, "object", "model", "created",
                                              (json_int_t)srv_unix_time(), "owned_by", "rbee"));
    return srv_reply_json(c, r, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

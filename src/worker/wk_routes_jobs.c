/* The generic half of the rbee job API: GET /v1/jobs/{id} reports a job's
 * state (with the worker's fields and, once finished, its final event),
 * GET /v1/jobs/{id}/stream streams its events, DELETE /v1/jobs/{id}
 * cancels it. Creating jobs (POST /v1/jobs) is the worker's: only it knows
 * the payload. */
#include "worker/wk_sse.h"
#include "worker/wk_worker.h"

#include <stdio.h>
#include <string.h>

static wk_job *find_job(wk_req *r, wk_worker *w) {
    const char *id = wk_req_param(r, "id");
    wk_job *j = id ? wk_jobs_find(&w->jobs, id) : NULL;
    if (!j) {
        char msg[200];
        snprintf(msg, sizeof msg, "no job with id '%s'", id ? id : "");
        wk_reply_error(r, 404, "JOB_NOT_FOUND", "invalid_request_error", msg);
    }
    return j;
}

static bool route_job_get(wk_req *r, void *ctx) {
    wk_job *j = find_job(r, ctx);
    if (!j) return true;
    pthread_mutex_lock(&j->mu);
    json_t *o = json_pack("{s:s,s:s}", "job_id", j->id, "state", wk_job_state_name(j->state));
    if (o && j->kind && j->kind->describe) j->kind->describe(j, o);
    if (o && j->state == WK_JOB_FAILED) json_object_set_new(o, "error_code", json_string(j->err_code));
    const wk_event *last = j->n_events ? &j->events[j->n_events - 1] : NULL;
    if (o && last && (!strcmp(last->type, "end") || !strcmp(last->type, "error")))
        json_object_set_new(o, "result", json_deep_copy(last->data)); /* the final event as streamed */
    pthread_mutex_unlock(&j->mu);
    wk_job_unref(j);
    return wk_reply_json(r, 200, o);
}

static bool route_job_stream(wk_req *r, void *ctx) {
    wk_job *j = find_job(r, ctx);
    if (!j) return true;
    bool ok = wk_sse_reply(r, j, NULL, NULL);
    wk_job_unref(j);
    return ok;
}

static bool route_job_delete(wk_req *r, void *ctx) {
    wk_worker *w = ctx;
    wk_job *j = find_job(r, w);
    if (!j) return true;
    bool was_finished = wk_job_is_finished(j);
    if (!was_finished) {
        wk_job_cancel(j);
        wk_log_event(&w->log, WK_LOG_INFO, "job_cancel", json_pack("{s:s}", "job_id", j->id), "cancel requested");
    }
    json_t *o = json_pack("{s:s,s:b,s:s}", "job_id", j->id, "cancelled", !was_finished, "status",
                          was_finished ? "already_finished" : "cancelling");
    wk_job_unref(j);
    return wk_reply_json(r, 200, o);
}

rb_status wk_routes_jobs_add(wk_worker *w, rb_error *err) {
    rb_status s;
    if ((s = wk_router_add(&w->router, "GET", "/v1/jobs/{id}", route_job_get, w, NULL, 0, err)) != RB_OK ||
        (s = wk_router_add(&w->router, "GET", "/v1/jobs/{id}/stream", route_job_stream, w, NULL, 0, err)) != RB_OK ||
        (s = wk_router_add(&w->router, "DELETE", "/v1/jobs/{id}", route_job_delete, w, "DELETE /v1/jobs/{id}", 0,
                           err)) != RB_OK)
        return s;
    return RB_OK;
}

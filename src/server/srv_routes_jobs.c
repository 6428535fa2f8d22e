/* The rbee job API: POST /v1/jobs and /v1/inference create a job and answer
 * {job_id, sse_url}; GET /v1/jobs/{id}/stream streams it; GET /v1/jobs/{id}
 * reports its state; DELETE /v1/jobs/{id} cancels it. */
#include "server/srv_http_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum MHD_Result srv_reply_not_ready(struct MHD_Connection *c, srv_req *r, bool openai) {
    int st = atomic_load(&r->w->state);
    if (st == SRV_STATE_LOADING) return srv_reply_unavailable(c, r, "MODEL_LOADING", "the model is still loading", openai);
    if (st == SRV_STATE_STOPPING)
        return srv_reply_unavailable(c, r, "SHUTTING_DOWN", "the worker is shutting down", openai);
    return srv_reply_error(c, r, 500, "MODEL_LOAD_FAILED", "server_error", r->w->load_error);
}

enum MHD_Result srv_route_jobs_create(struct MHD_Connection *c, srv_req *r) {
    srv_worker *w = r->w;
    if (atomic_load(&w->state) != SRV_STATE_READY) return srv_reply_not_ready(c, r, false);
    srv_errors errs = {.n = 0};
    json_t *body = srv_parse_body(r->body ? r->body : "", r->len, &errs);
    if (!body) return srv_reply_invalid(c, r, &errs, false);
    srv_gen_request req;
    memset(&req, 0, sizeof req);
    const char *prompt = NULL;
    srv_request_read_rbee(body, &prompt, &errs);
    srv_request_read_params(body, SRV_API_RBEE, &req, &errs);
    if (errs.n == 0)
        srv_request_set_prompt(&req, w->tok, prompt, strlen(prompt), RB_TOK_ADD_SPECIAL, w->ctx_size, 0, &errs);
    json_decref(body);
    if (errs.n > 0) {
        srv_gen_request_free(&req);
        return srv_reply_invalid(c, r, &errs, false);
    }
    srv_job *j = srv_job_new(SRV_API_RBEE, "job-", &req);
    if (!j) return srv_reply_error(c, r, 500, "INTERNAL", "server_error", "out of memory");
    rb_status s = srv_worker_submit(w, j);
    if (s == RB_OK && !srv_jobs_add(&w->jobs, j)) {
        srv_job_request_cancel(j);
        srv_worker_poke(w);
        s = RB_E_NOMEM;
    }
    enum MHD_Result ret;
    if (s == RB_E_RANGE) {
        srv_metrics_queue_full(&w->metrics);
        ret = srv_reply_unavailable(c, r, "QUEUE_FULL", "the request queue is full; retry later", false);
    } else if (s == RB_E_CANCELLED || s == RB_E_UNSUPPORTED) {
        ret = srv_reply_not_ready(c, r, false);
    } else if (s != RB_OK) {
        ret = srv_reply_error(c, r, 500, "INTERNAL", "server_error", "out of memory");
    } else {
        char url[160];
        snprintf(url, sizeof url, "/v1/jobs/%s/stream", j->id);
        srv_log_event(&w->log, SRV_LOG_INFO, "job_created",
                      json_pack("{s:s,s:I,s:I}", "job_id", j->id, "prompt_tokens", (json_int_t)j->req.n_prompt,
                                "max_tokens", (json_int_t)j->req.max_tokens),
                      "job queued");
        ret = srv_reply_json(c, r, 200, json_pack("{s:s,s:s}", "job_id", j->id, "sse_url", url));
    }
    srv_job_unref(j);
    return ret;
}

static const char *state_name(srv_job_state s) {
    switch (s) {
    case SRV_JOB_QUEUED: return "queued";
    case SRV_JOB_RUNNING: return "running";
    case SRV_JOB_DONE: return "done";
    default: return "failed";
    }
}

static enum MHD_Result job_not_found(struct MHD_Connection *c, srv_req *r) {
    char msg[160];
    snprintf(msg, sizeof msg, "no job with id '%s'", r->path_id);
    return srv_reply_error(c, r, 404, "JOB_NOT_FOUND", "invalid_request_error", msg);
}

enum MHD_Result srv_route_job_get(struct MHD_Connection *c, srv_req *r) {
    srv_job *j = srv_jobs_find(&r->w->jobs, r->path_id);
    if (!j) return job_not_found(c, r);
    pthread_mutex_lock(&j->mu);
    json_t *o = json_pack("{s:s,s:s,s:I,s:I}", "job_id", j->id, "state", state_name(j->state), "prompt_tokens",
                          (json_int_t)j->req.n_prompt, "pieces", (json_int_t)j->n_pieces);
    if (o && j->state == SRV_JOB_DONE) {
        json_object_set_new(o, "stop_reason", json_string(rb_stop_reason_name(j->stop_reason)));
        json_object_set_new(o, "tokens_out", json_integer((json_int_t)j->tokens_out));
    }
    if (o && j->state == SRV_JOB_FAILED) json_object_set_new(o, "error_code", json_string(j->err_code));
    pthread_mutex_unlock(&j->mu);
    srv_job_unref(j);
    return srv_reply_json(c, r, 200, o);
}

enum MHD_Result srv_route_job_stream(struct MHD_Connection *c, srv_req *r) {
    srv_job *j = srv_jobs_find(&r->w->jobs, r->path_id);
    if (!j) return job_not_found(c, r);
    enum MHD_Result ret = srv_stream_reply(c, r, j);
    srv_job_unref(j);
    return ret;
}

enum MHD_Result srv_route_job_delete(struct MHD_Connection *c, srv_req *r) {
    srv_job *j = srv_jobs_find(&r->w->jobs, r->path_id);
    if (!j) return job_not_found(c, r);
    bool was_finished = srv_job_is_finished(j);
    if (!was_finished) {
        srv_job_request_cancel(j);
        srv_worker_poke(r->w);
        srv_log_event(&r->w->log, SRV_LOG_INFO, "job_cancel", json_pack("{s:s}", "job_id", j->id), "cancel requested");
    }
    json_t *o = json_pack("{s:s,s:b,s:s}", "job_id", j->id, "cancelled", !was_finished, "status",
                          was_finished ? "already_finished" : "cancelling");
    srv_job_unref(j);
    return srv_reply_json(c, r, 200, o);
}

/* The SD half of the rbee job API: POST /v1/jobs validates an image
 * request (sd_request_from_rbee, then the engine's own checks), queues it
 * and answers {job_id, sse_url}; the stream, status and cancel routes are
 * the worker layer's. */
#include "worker/wk_submit.h"
#include "worker_sd/sd_job.h"
#include "worker_sd/sd_worker.h"

#include <stdio.h>
#include <string.h>

static const sd_field_names k_fields = {
    .clip_skip = "clip_skip", .strength = "strength", .sampler = "sampler", .mask = "mask", .steps = "steps"};

static bool route_jobs_create(wk_req *r, void *ctx) {
    sd_worker *sw = ctx;
    wk_worker *w = sw->w;
    if (wk_worker_state(w) != WK_STATE_READY) return wk_reply_not_ready(r, w);
    wk_errors errs = {.n = 0};
    size_t blen = 0;
    const char *body_text = wk_req_body(r, &blen);
    json_t *body = wk_parse_body(body_text, blen, &errs);
    if (!body) return wk_reply_invalid(r, &errs);
    sd_gen_request req;
    sd_request_init(&req, SD_API_RBEE, &sw->limits);
    sd_request_from_rbee(body, &sw->limits, &req, &errs);
    json_decref(body);
    sd_worker_check(sw, &req, &k_fields, &errs);
    if (errs.n > 0) {
        sd_request_free(&req);
        return wk_reply_invalid(r, &errs);
    }
    wk_job *j = sd_job_new(&req, w->model_id, wk_req_route_label(r));
    if (!j) return wk_reply_error(r, 500, "INTERNAL", "server_error", "out of memory");
    bool ret;
    if (wk_job_submit(w, r, j, true, &ret)) {
        char url[160];
        snprintf(url, sizeof url, "/v1/jobs/%s/stream", j->id);
        const sd_task *t = sd_job_task(j);
        wk_log_event(&w->log, WK_LOG_INFO, "job_created",
                     json_pack("{s:s,s:i,s:i,s:i,s:i,s:I}", "job_id", j->id, "width", t->req.width, "height",
                               t->req.height, "steps", t->req.steps, "batch_size", t->req.batch, "seed",
                               (json_int_t)t->req.seed),
                     "job queued");
        ret = wk_reply_json(r, 200, json_pack("{s:s,s:s,s:I}", "job_id", j->id, "sse_url", url, "seed",
                                              (json_int_t)t->req.seed));
    }
    wk_job_unref(j);
    return ret;
}

rb_status sd_routes_jobs_add(sd_worker *sw, rb_error *err) {
    wk_router *rt = &sw->w->router;
    rb_status s;
    if ((s = wk_router_add(rt, "POST", "/v1/jobs", route_jobs_create, sw, NULL, 0, err)) != RB_OK) return s;
    return wk_router_add(rt, "POST", "/v1/inference", route_jobs_create, sw, NULL, 0, err);
}

/* The LLM half of the rbee job API: POST /v1/jobs and /v1/inference
 * validate a generation request, queue it and answer {job_id, sse_url};
 * the stream, status and cancel routes are the worker layer's. */
#include "worker/wk_submit.h"
#include "worker_llm/llm_prompt.h"
#include "worker_llm/llm_worker.h"

#include <stdio.h>
#include <string.h>

static bool route_jobs_create(wk_req *r, void *ctx) {
    llm_worker *lw = ctx;
    wk_worker *w = lw->w;
    if (wk_worker_state(w) != WK_STATE_READY) return wk_reply_not_ready(r, w);
    wk_errors errs = {.n = 0};
    size_t blen = 0;
    const char *body_text = wk_req_body(r, &blen);
    json_t *body = wk_parse_body(body_text, blen, &errs);
    if (!body) return wk_reply_invalid(r, &errs);
    llm_gen_request req;
    memset(&req, 0, sizeof req);
    const llm_prompt_ctx pc = llm_worker_prompt_ctx(lw);
    llm_prompt_build(&pc, body, LLM_API_RBEE, &req, &errs);
    json_decref(body);
    if (errs.n > 0) {
        llm_gen_request_free(&req);
        return wk_reply_invalid(r, &errs);
    }
    const char *model = req.model && req.model[0] ? req.model : w->model_id;
    wk_job *j = llm_job_new(LLM_API_RBEE, &req, model, wk_req_route_label(r));
    if (!j) return wk_reply_error(r, 500, "INTERNAL", "server_error", "out of memory");
    bool ret;
    if (wk_job_submit(w, r, j, true, &ret)) {
        char url[160];
        snprintf(url, sizeof url, "/v1/jobs/%s/stream", j->id);
        const llm_task *t = llm_job_task(j);
        wk_log_event(&w->log, WK_LOG_INFO, "job_created",
                     json_pack("{s:s,s:I,s:I}", "job_id", j->id, "prompt_tokens", (json_int_t)t->req.n_prompt,
                               "max_tokens", (json_int_t)t->req.max_tokens),
                     "job queued");
        ret = wk_reply_json(r, 200, json_pack("{s:s,s:s}", "job_id", j->id, "sse_url", url));
    }
    wk_job_unref(j);
    return ret;
}

rb_status llm_routes_jobs_add(llm_worker *lw, rb_error *err) {
    wk_router *rt = &lw->w->router;
    rb_status s;
    if ((s = wk_router_add(rt, "POST", "/v1/jobs", route_jobs_create, lw, NULL, 0, err)) != RB_OK) return s;
    return wk_router_add(rt, "POST", "/v1/inference", route_jobs_create, lw, NULL, 0, err);
}

/* OpenAI-compatible generation: GET /v1/models, POST /v1/completions and
 * /v1/chat/completions (several choices, log probabilities), streaming
 * (server-sent events) or not. A non-streaming request waits in its
 * connection thread for the job and cancels it if the client disconnects
 * meanwhile. Fields this worker does not implement are refused, not
 * ignored. */
#include "worker/wk_sse.h"
#include "worker/wk_submit.h"
#include "worker/wk_util.h"
#include "worker_llm/llm_openai.h"
#include "worker_llm/llm_prompt.h"
#include "worker_llm/llm_worker.h"

#include <stdlib.h>
#include <string.h>

/* Answers a finished job in one piece. */
static bool reply_full(wk_req *r, wk_job *j) {
    const llm_task *t = llm_job_task(j);
    pthread_mutex_lock(&j->mu);
    if (j->state == WK_JOB_FAILED) {
        json_t *e = llm_openai_error("server_error", j->err_code, j->err_msg);
        pthread_mutex_unlock(&j->mu);
        return wk_reply_json(r, 500, e);
    }
    if (t->stop_reason == RB_STOP_CANCELLED) {
        pthread_mutex_unlock(&j->mu);
        return wk_reply_json(r, 503, llm_openai_error("server_error", "cancelled", "the request was cancelled"));
    }
    json_t *o = llm_openai_full(j);
    pthread_mutex_unlock(&j->mu);
    if (!o) return wk_reply_json(r, 500, llm_openai_error("server_error", "out_of_memory", "out of memory"));
    return wk_reply_json(r, 200, o);
}

static bool route_generate(wk_req *r, llm_worker *lw, bool chat) {
    wk_worker *w = lw->w;
    if (wk_worker_state(w) != WK_STATE_READY) return wk_reply_not_ready(r, w);
    wk_errors errs = {.n = 0};
    size_t blen = 0;
    const char *body_text = wk_req_body(r, &blen);
    json_t *body = wk_parse_body(body_text, blen, &errs);
    if (!body) return wk_reply_invalid(r, &errs);
    const llm_api api = chat ? LLM_API_CHAT : LLM_API_COMPLETION;
    llm_gen_request req;
    memset(&req, 0, sizeof req);
    const llm_prompt_ctx pc = llm_worker_prompt_ctx(lw);
    llm_prompt_build(&pc, body, api, &req, &errs);
    json_decref(body);
    if (errs.n > 0) {
        llm_gen_request_free(&req);
        return wk_reply_invalid(r, &errs);
    }
    const bool stream = req.stream;
    const char *model = req.model && req.model[0] ? req.model : w->model_id;
    wk_job *j = llm_job_new(api, &req, model, wk_req_route_label(r));
    if (!j) return wk_reply_json(r, 500, llm_openai_error("server_error", "out_of_memory", "out of memory"));
    bool ret;
    if (!wk_job_submit(w, r, j, false, &ret)) {
        /* answered */
    } else if (stream) {
        void *sc = llm_openai_sse_ctx(j);
        if (sc) {
            ret = wk_sse_reply(r, j, &llm_openai_sse, sc);
        } else {
            wk_job_cancel(j);
            ret = wk_reply_json(r, 500, llm_openai_error("server_error", "out_of_memory", "out of memory"));
        }
    } else if (wk_job_wait_finished(r, j)) {
        ret = reply_full(r, j);
    } else {
        wk_req_count(r, 499);
        ret = false; /* client gone: close */
    }
    wk_job_unref(j);
    return ret;
}

static bool route_completions(wk_req *r, void *ctx) { return route_generate(r, ctx, false); }
static bool route_chat(wk_req *r, void *ctx) { return route_generate(r, ctx, true); }

static bool route_models(wk_req *r, void *ctx) {
    llm_worker *lw = ctx;
    json_t *data = json_array();
    if (lw->w->model_id[0])
        json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s}", "id", lw->w->model_id, "object", "model", "created",
                                              (json_int_t)wk_unix_time(), "owned_by", "rbee"));
    return wk_reply_json(r, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

rb_status llm_routes_openai_add(llm_worker *lw, rb_error *err) {
    wk_router *rt = &lw->w->router;
    rb_status s;
    if ((s = wk_router_add(rt, "GET", "/v1/models", route_models, lw, NULL, WK_ROUTE_OPENAI, err)) != RB_OK ||
        (s = wk_router_add(rt, "POST", "/v1/completions", route_completions, lw, NULL, WK_ROUTE_OPENAI, err)) != RB_OK ||
        (s = wk_router_add(rt, "POST", "/v1/chat/completions", route_chat, lw, NULL, WK_ROUTE_OPENAI, err)) != RB_OK)
        return s;
    return RB_OK;
}

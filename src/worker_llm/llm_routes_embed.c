/* POST /v1/embeddings (OpenAI's shape): one unit-length vector per input,
 * the model's final hidden states after the output norm pooled by the
 * worker's --pooling (mean or the last token). Answered only when the
 * worker runs with --embedding (else 501 saying so); the inputs are one
 * engine job, run in one sequence slot between decode steps. */
#include "worker/wk_base64.h"
#include "worker/wk_submit.h"
#include "worker/wk_util.h"
#include "worker_llm/llm_embed.h"
#include "worker_llm/llm_openai.h"
#include "worker_llm/llm_worker.h"

#include <stdlib.h>
#include <string.h>

static json_t *vector_json(const float *v, int64_t n, bool base64) {
    if (base64) return wk_base64_json(v, sizeof(float) * (size_t)n); /* little-endian float32, as OpenAI sends */
    json_t *a = json_array();
    for (int64_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_real((double)v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static bool reply_embeddings(wk_req *r, wk_job *j) {
    const llm_task *t = llm_job_task(j);
    pthread_mutex_lock(&j->mu);
    const bool failed = j->state == WK_JOB_FAILED, cancelled = t->stop_reason == RB_STOP_CANCELLED;
    json_t *err = failed ? llm_openai_error("server_error", j->err_code, j->err_msg) : NULL;
    pthread_mutex_unlock(&j->mu);
    if (failed) return wk_reply_json(r, 500, err);
    if (cancelled) return wk_reply_json(r, 503, llm_openai_error("server_error", "cancelled", "the request was cancelled"));
    const llm_embed_request *er = &t->emb;
    json_t *data = json_array();
    for (size_t i = 0; data && i < er->n_inputs; i++) {
        json_t *v = vector_json(er->vectors + i * (size_t)er->n_embd, er->n_embd, er->base64);
        json_t *o = v ? json_pack("{s:s,s:I,s:o}", "object", "embedding", "index", (json_int_t)i, "embedding", v) : NULL;
        if (!o || json_array_append_new(data, o) != 0) {
            json_decref(data);
            data = NULL;
        }
    }
    if (!data) return wk_reply_json(r, 500, llm_openai_error("server_error", "out_of_memory", "out of memory"));
    const json_int_t n_tok = (json_int_t)er->offs[er->n_inputs];
    return wk_reply_json(r, 200,
                         json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model", t->model_name,
                                   "usage", "prompt_tokens", n_tok, "total_tokens", n_tok));
}

static bool route_embeddings(wk_req *r, void *ctx) {
    llm_worker *lw = ctx;
    wk_worker *w = lw->w;
    if (!lw->embedding)
        return wk_reply_error(r, 501, "embeddings_disabled", "invalid_request_error",
                              "embeddings are off: start llm-worker-rbee with --embedding (and --pooling mean|last)");
    if (wk_worker_state(w) != WK_STATE_READY) return wk_reply_not_ready(r, w);
    wk_errors errs = {.n = 0};
    size_t blen = 0;
    const char *body_text = wk_req_body(r, &blen);
    json_t *body = wk_parse_body(body_text, blen, &errs);
    if (!body) return wk_reply_invalid(r, &errs);
    const rb_model_config *mc = rb_model_get_config(lw->model);
    const llm_embed_ctx ec = {.tok = lw->tok, .ctx_size = lw->ctx_size, .n_vocab = mc->n_vocab, .n_embd = mc->n_embd,
                              .pooling = lw->pooling};
    llm_embed_request req;
    const char *model = NULL;
    llm_embed_read(&ec, body, &req, &model, &errs);
    char *name = strdup(model && model[0] ? model : w->model_id);
    json_decref(body);
    if (errs.n > 0 || !name) {
        llm_embed_request_free(&req);
        free(name);
        if (errs.n == 0) return wk_reply_json(r, 500, llm_openai_error("server_error", "out_of_memory", "out of memory"));
        return wk_reply_invalid(r, &errs);
    }
    wk_job *j = llm_job_new_embed(&req, name, wk_req_route_label(r));
    free(name);
    if (!j) return wk_reply_json(r, 500, llm_openai_error("server_error", "out_of_memory", "out of memory"));
    bool ret;
    if (!wk_job_submit(w, r, j, false, &ret)) {
        /* answered */
    } else if (wk_job_wait_finished(r, j)) {
        ret = reply_embeddings(r, j);
    } else {
        wk_req_count(r, 499);
        ret = false;
    }
    wk_job_unref(j);
    return ret;
}

rb_status llm_routes_embed_add(llm_worker *lw, rb_error *err) {
    rb_status s = wk_router_add(&lw->w->router, "POST", "/v1/embeddings", route_embeddings, lw, NULL, WK_ROUTE_OPENAI,
                                err);
    if (s != RB_OK) return s;
    return wk_router_add(&lw->w->router, "POST", "/embeddings", route_embeddings, lw, "/v1/embeddings",
                         WK_ROUTE_OPENAI, err);
}

/* OpenAI-compatible generation: POST /v1/completions and
 * /v1/chat/completions, streaming (server-sent events) or not. A
 * non-streaming request waits in its connection thread for the job and
 * cancels it if the client disconnects meanwhile. */
#include "server/srv_http_internal.h"

#include <stdlib.h>
#include <string.h>

static json_t *openai_error(const char *type, const char *code, const char *msg) {
    return json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", msg, "type", type, "param", "code", code);
}

/* Builds the prompt tokens for either API into req. */
static void build_prompt(srv_worker *w, json_t *body, bool chat, srv_gen_request *req, srv_errors *errs) {
    if (!chat) {
        const char *prompt = NULL;
        srv_request_read_completion(body, &prompt, errs);
        if (errs->n == 0)
            srv_request_set_prompt(req, w->tok, prompt, strlen(prompt), RB_TOK_ADD_SPECIAL, w->ctx_size, 0, errs);
        return;
    }
    json_t *msgs = srv_request_read_chat(body, errs);
    if (!msgs) return;
    char *mj = json_dumps(msgs, JSON_COMPACT);
    json_decref(msgs);
    if (!mj) {
        srv_errors_add(errs, "messages", "memory", "out of memory");
        return;
    }
    char *text = NULL;
    size_t len = 0;
    unsigned flags = 0;
    rb_error err;
    rb_error_clear(&err);
    if (srv_chat_render(&w->chat, mj, &text, &len, &flags, &err) != RB_OK) {
        srv_errors_add(errs, "messages", "chat_template", "the chat template failed on these messages: %s", err.msg);
    } else if (errs->n == 0) {
        srv_request_set_prompt(req, w->tok, text, len, flags, w->ctx_size, 0, errs);
    }
    free(text);
    free(mj);
}

/* Waits for j to finish; false if the client went away first. */
static bool wait_finished(struct MHD_Connection *c, srv_worker *w, srv_job *j) {
    for (;;) {
        pthread_mutex_lock(&j->mu);
        srv_job_state st = j->state;
        size_t n = j->n_pieces;
        pthread_mutex_unlock(&j->mu);
        if (st == SRV_JOB_DONE || st == SRV_JOB_FAILED) return true;
        if (srv_conn_closed(c)) {
            srv_job_request_cancel(j);
            srv_worker_poke(w);
            return false;
        }
        srv_job_wait_change(j, n, st, 25);
    }
}

static enum MHD_Result reply_full(struct MHD_Connection *c, srv_req *r, srv_job *j) {
    pthread_mutex_lock(&j->mu);
    if (j->state == SRV_JOB_FAILED) {
        json_t *e = openai_error("server_error", j->err_code, j->err_msg);
        pthread_mutex_unlock(&j->mu);
        return srv_reply_json(c, r, 500, e);
    }
    if (j->stop_reason == RB_STOP_CANCELLED) {
        pthread_mutex_unlock(&j->mu);
        return srv_reply_json(c, r, 503, openai_error("server_error", "cancelled", "the request was cancelled"));
    }
    size_t total = 0;
    for (size_t i = 0; i < j->n_pieces; i++) total += j->pieces[i].len;
    char *text = malloc(total + 1);
    if (!text) {
        pthread_mutex_unlock(&j->mu);
        return srv_reply_json(c, r, 500, openai_error("server_error", "out_of_memory", "out of memory"));
    }
    size_t w = 0;
    for (size_t i = 0; i < j->n_pieces; i++) {
        memcpy(text + w, j->pieces[i].text, j->pieces[i].len);
        w += j->pieces[i].len;
    }
    json_t *o = srv_openai_full(j, srv_openai_model_name(r->w, j), text, w);
    pthread_mutex_unlock(&j->mu);
    free(text);
    return srv_reply_json(c, r, 200, o);
}

enum MHD_Result srv_route_openai(struct MHD_Connection *c, srv_req *r, bool chat) {
    srv_worker *w = r->w;
    if (atomic_load(&w->state) != SRV_STATE_READY) return srv_reply_not_ready(c, r, true);
    srv_errors errs = {.n = 0};
    json_t *body = srv_parse_body(r->body ? r->body : "", r->len, &errs);
    if (!body) return srv_reply_invalid(c, r, &errs, true);
    srv_gen_request req;
    memset(&req, 0, sizeof req);
    srv_request_read_params(body, chat ? SRV_API_CHAT : SRV_API_COMPLETION, &req, &errs);
    if (errs.n == 0) build_prompt(w, body, chat, &req, &errs);
    json_decref(body);
    if (errs.n > 0) {
        srv_gen_request_free(&req);
        return srv_reply_invalid(c, r, &errs, true);
    }
    const bool stream = req.stream;
    srv_job *j = srv_job_new(chat ? SRV_API_CHAT : SRV_API_COMPLETION, chat ? "chatcmpl-" : "cmpl-", &req);
    if (!j) return srv_reply_json(c, r, 500, openai_error("server_error", "out_of_memory", "out of memory"));
    rb_status s = srv_worker_submit(w, j);
    enum MHD_Result ret;
    if (s == RB_E_RANGE) {
        srv_metrics_queue_full(&w->metrics);
        ret = srv_reply_unavailable(c, r, "QUEUE_FULL", "the request queue is full; retry later", true);
    } else if (s != RB_OK) {
        ret = srv_reply_not_ready(c, r, true);
    } else if (stream) {
        ret = srv_stream_reply(c, r, j);
    } else if (wait_finished(c, w, j)) {
        ret = reply_full(c, r, j);
    } else {
        srv_metrics_request(&w->metrics, r->route, 499);
        ret = MHD_NO; /* client gone: close */
    }
    srv_job_unref(j);
    return ret;
}

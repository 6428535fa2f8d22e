/* Implementation of llm_job.h. */
#include "worker_llm/llm_job.h"
#include "worker/wk_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void llm_gen_request_free(llm_gen_request *r) {
    if (!r) return;
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->model);
    memset(r, 0, sizeof *r);
}

static void free_task(void *p) {
    llm_task *t = p;
    if (!t) return;
    llm_gen_request_free(&t->req);
    free(t->model_name);
    free(t);
}

static void describe(const wk_job *j, json_t *o) {
    const llm_task *t = llm_job_task(j);
    json_object_set_new(o, "prompt_tokens", json_integer((json_int_t)t->req.n_prompt));
    json_object_set_new(o, "pieces", json_integer((json_int_t)t->n_pieces));
    if (j->state == WK_JOB_DONE) {
        json_object_set_new(o, "stop_reason", json_string(rb_stop_reason_name(t->stop_reason)));
        json_object_set_new(o, "tokens_out", json_integer((json_int_t)t->tokens_out));
    }
}

const wk_job_kind llm_job_kind = {.free_payload = free_task, .describe = describe};

wk_job *llm_job_new(llm_api api, llm_gen_request *req, const char *model_name, const char *route_label) {
    llm_task *t = calloc(1, sizeof *t);
    char *name = strdup(model_name ? model_name : "");
    if (!t || !name) {
        free(t);
        free(name);
        llm_gen_request_free(req);
        return NULL;
    }
    t->api = api;
    t->req = *req;
    memset(req, 0, sizeof *req);
    t->model_name = name;
    t->route_label = route_label;
    const char *prefix = api == LLM_API_CHAT ? "chatcmpl-" : api == LLM_API_COMPLETION ? "cmpl-" : "job-";
    return wk_job_new(&llm_job_kind, prefix, t);
}

bool llm_job_push_piece(wk_job *j, const char *text, size_t len) {
    if (len == 0) return true;
    llm_task *t = llm_job_task(j);
    pthread_mutex_lock(&j->mu);
    size_t i = t->n_pieces;
    pthread_mutex_unlock(&j->mu);
    json_t *ev = json_pack("{s:o,s:I}", "t", wk_json_text(text, len), "i", (json_int_t)i);
    if (!ev || !wk_job_push(j, "token", ev, text, len)) return false;
    pthread_mutex_lock(&j->mu);
    t->n_pieces++;
    pthread_mutex_unlock(&j->mu);
    return true;
}

void llm_job_finish(wk_job *j, rb_stop_reason why, int64_t tokens_out, double prefill_ms, double decode_ms) {
    llm_task *t = llm_job_task(j);
    pthread_mutex_lock(&j->mu);
    t->stop_reason = why;
    t->tokens_out = tokens_out;
    t->prefill_ms = prefill_ms;
    t->decode_ms = decode_ms;
    pthread_mutex_unlock(&j->mu);
    wk_job_end(j, json_pack("{s:I,s:I,s:f,s:f,s:s}", "tokens_out", (json_int_t)tokens_out, "prompt_tokens",
                            (json_int_t)t->req.n_prompt, "decode_time_ms", decode_ms, "prefill_time_ms", prefill_ms,
                            "stop_reason", rb_stop_reason_name(why)));
}

/* Implementation of llm_job.h. */
#include "worker_llm/llm_job.h"
#include "worker/wk_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void llm_gen_request_free(llm_gen_request *r) {
    if (!r) return;
    free(r->prompt);
    free(r->bias);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->model);
    llm_tools_free(&r->tools);
    rb_grammar_free(r->grammar);
    memset(r, 0, sizeof *r);
}

void llm_embed_request_free(llm_embed_request *r) {
    if (!r) return;
    free(r->tokens);
    free(r->offs);
    free(r->vectors);
    memset(r, 0, sizeof *r);
}

static void free_task(void *p) {
    llm_task *t = p;
    if (!t) return;
    llm_gen_request_free(&t->req);
    llm_embed_request_free(&t->emb);
    free(t->choices);
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

/* A task of api with n_choices result slots, or NULL (out of memory). */
static llm_task *task_new(llm_api api, int n_choices, const char *model_name, const char *route_label) {
    llm_task *t = calloc(1, sizeof *t);
    char *name = strdup(model_name ? model_name : "");
    llm_choice_out *ch = calloc((size_t)n_choices, sizeof *ch);
    if (!t || !name || !ch) {
        free(t);
        free(name);
        free(ch);
        return NULL;
    }
    t->api = api;
    t->choices = ch;
    t->model_name = name;
    t->route_label = route_label;
    return t;
}

wk_job *llm_job_new(llm_api api, llm_gen_request *req, const char *model_name, const char *route_label) {
    llm_task *t = task_new(api, llm_gen_choices(req), model_name, route_label);
    if (!t) {
        llm_gen_request_free(req);
        return NULL;
    }
    t->req = *req;
    memset(req, 0, sizeof *req);
    const char *prefix = api == LLM_API_CHAT ? "chatcmpl-" : api == LLM_API_COMPLETION ? "cmpl-" : "job-";
    return wk_job_new(&llm_job_kind, prefix, t);
}

wk_job *llm_job_new_embed(llm_embed_request *req, const char *model_name, const char *route_label) {
    llm_task *t = task_new(LLM_API_EMBED, 1, model_name, route_label);
    if (!t) {
        llm_embed_request_free(req);
        return NULL;
    }
    t->emb = *req;
    memset(req, 0, sizeof *req);
    return wk_job_new(&llm_job_kind, "embd-", t);
}

bool llm_job_push_piece(wk_job *j, int choice, const char *text, size_t len) {
    if (len == 0) return true;
    llm_task *t = llm_job_task(j);
    pthread_mutex_lock(&j->mu);
    size_t i = t->n_pieces;
    pthread_mutex_unlock(&j->mu);
    json_t *ev = json_pack("{s:o,s:I}", "t", wk_json_text(text, len), "i", (json_int_t)i);
    if (ev && llm_gen_choices(&t->req) > 1) json_object_set_new(ev, "choice", json_integer(choice));
    if (!ev || !wk_job_push(j, "token", ev, text, len)) return false;
    pthread_mutex_lock(&j->mu);
    t->n_pieces++;
    pthread_mutex_unlock(&j->mu);
    return true;
}

bool llm_job_push_logprobs(wk_job *j, int choice, json_t *entry) {
    json_t *ev = entry ? json_pack("{s:i,s:o}", "choice", choice, "entry", entry) : NULL;
    return ev && wk_job_push(j, "logprobs", ev, NULL, 0);
}

bool llm_job_choice_end(wk_job *j, int choice, rb_stop_reason why, int64_t tokens_out) {
    llm_task *t = llm_job_task(j);
    pthread_mutex_lock(&j->mu);
    t->choices[choice].stop_reason = why;
    t->choices[choice].tokens_out = tokens_out;
    pthread_mutex_unlock(&j->mu);
    if (t->api != LLM_API_COMPLETION && t->api != LLM_API_CHAT) return true;
    return wk_job_push(j, "choice_end",
                       json_pack("{s:i,s:s,s:I}", "choice", choice, "stop_reason", rb_stop_reason_name(why),
                                 "tokens_out", (json_int_t)tokens_out),
                       NULL, 0);
}

void llm_job_finish(wk_job *j, rb_stop_reason why, int64_t tokens_out, double prefill_ms, double decode_ms) {
    llm_task *t = llm_job_task(j);
    pthread_mutex_lock(&j->mu);
    t->stop_reason = why;
    t->tokens_out = tokens_out;
    t->prefill_ms = prefill_ms;
    t->decode_ms = decode_ms;
    pthread_mutex_unlock(&j->mu);
    size_t n_prompt = t->req.n_prompt;
    if (t->api == LLM_API_EMBED) n_prompt = t->emb.n_inputs ? t->emb.offs[t->emb.n_inputs] : 0;
    wk_job_end(j, json_pack("{s:I,s:I,s:I,s:f,s:f,s:s}", "tokens_out", (json_int_t)tokens_out, "prompt_tokens",
                            (json_int_t)n_prompt, "cached_tokens", (json_int_t)t->cached_tokens, "decode_time_ms",
                            decode_ms, "prefill_time_ms", prefill_ms, "stop_reason", rb_stop_reason_name(why)));
}

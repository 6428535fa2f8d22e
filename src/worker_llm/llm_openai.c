/* Implementation of llm_openai.h. */
#include "worker_llm/llm_openai.h"
#include "worker/wk_util.h"

#include <string.h>

const char *llm_openai_finish_reason(rb_stop_reason why) { return why == RB_STOP_MAX_TOKENS ? "length" : "stop"; }

json_t *llm_openai_error(const char *type, const char *code, const char *msg) {
    return json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", msg, "type", type, "param", "code", code);
}

json_t *llm_openai_chunk(const wk_job *j, const char *text, size_t len, const char *finish, bool role_delta) {
    const llm_task *t = llm_job_task(j);
    json_t *choice;
    const bool chat = t->api == LLM_API_CHAT;
    if (chat) {
        json_t *delta = json_object();
        if (role_delta) {
            json_object_set_new(delta, "role", json_string("assistant"));
            json_object_set_new(delta, "content", json_string(""));
        } else if (text) {
            json_object_set_new(delta, "content", wk_json_text(text, len));
        }
        choice = json_pack("{s:i,s:o,s:n,s:s?}", "index", 0, "delta", delta, "logprobs", "finish_reason", finish);
    } else {
        choice = json_pack("{s:i,s:o,s:n,s:s?}", "index", 0, "text", text ? wk_json_text(text, len) : json_string(""),
                           "logprobs", "finish_reason", finish);
    }
    if (choice && !finish) json_object_set_new(choice, "finish_reason", json_null());
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", j->id, "object", chat ? "chat.completion.chunk" : "text_completion",
                     "created", (json_int_t)j->created_unix, "model", t->model_name, "choices", choice);
}

json_t *llm_openai_usage(const wk_job *j) {
    const llm_task *t = llm_job_task(j);
    return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)t->req.n_prompt, "completion_tokens",
                     (json_int_t)t->tokens_out, "total_tokens", (json_int_t)(t->req.n_prompt + (size_t)t->tokens_out));
}

json_t *llm_openai_full(const wk_job *j, const char *text, size_t len) {
    const llm_task *t = llm_job_task(j);
    const bool chat = t->api == LLM_API_CHAT;
    json_t *choice;
    const char *finish = llm_openai_finish_reason(t->stop_reason);
    if (chat)
        choice = json_pack("{s:i,s:{s:s,s:o},s:n,s:s}", "index", 0, "message", "role", "assistant", "content",
                           wk_json_text(text, len), "logprobs", "finish_reason", finish);
    else
        choice = json_pack("{s:i,s:o,s:n,s:s}", "index", 0, "text", wk_json_text(text, len), "logprobs",
                           "finish_reason", finish);
    return json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id", j->id, "object", chat ? "chat.completion" : "text_completion",
                     "created", (json_int_t)j->created_unix, "model", t->model_name, "choices", choice, "usage",
                     llm_openai_usage(j));
}

static void sse_event(void *ctx, const wk_job *j, const wk_event *e, wk_sse_out *o) {
    (void)ctx;
    const llm_task *t = llm_job_task(j);
    if (!strcmp(e->type, "started")) {
        if (t->api == LLM_API_CHAT) wk_sse_put(o, llm_openai_chunk(j, NULL, 0, NULL, true));
    } else if (!strcmp(e->type, "token")) {
        wk_sse_put(o, llm_openai_chunk(j, e->raw, e->raw_len, NULL, false));
    } else if (!strcmp(e->type, "error")) {
        wk_sse_put(o, json_pack("{s:{s:s,s:s,s:s}}", "error", "message", j->err_msg, "type", "server_error", "code",
                                j->err_code));
    } else if (!strcmp(e->type, "end")) {
        if (t->stop_reason == RB_STOP_CANCELLED) {
            wk_sse_put(o, json_pack("{s:{s:s,s:s,s:s}}", "error", "message", "the request was cancelled", "type",
                                    "server_error", "code", "cancelled"));
            return;
        }
        wk_sse_put(o, llm_openai_chunk(j, NULL, 0, llm_openai_finish_reason(t->stop_reason), false));
        if (t->req.include_usage)
            wk_sse_put(o, json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", j->id, "object",
                                    t->api == LLM_API_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                                    (json_int_t)j->created_unix, "model", t->model_name, "choices", "usage",
                                    llm_openai_usage(j)));
    }
}

const wk_sse_flavor llm_openai_sse = {.event = sse_event, .free_ctx = NULL};

/* The objects of OpenAI's completions and chat completions APIs built from
 * a job: stream chunks, usage, and the full non-streaming answer. */
#include "server/srv_http_internal.h"

#include <string.h>

const char *srv_openai_finish_reason(rb_stop_reason why) {
    return why == RB_STOP_MAX_TOKENS ? "length" : "stop";
}

const char *srv_openai_model_name(srv_worker *w, const srv_job *j) {
    return j->req.model && j->req.model[0] ? j->req.model : w->model_id;
}

json_t *srv_openai_chunk(const srv_job *j, const char *model, const char *text, size_t len, const char *finish,
                         bool role_delta) {
    json_t *choice;
    const bool chat = j->api == SRV_API_CHAT;
    if (chat) {
        json_t *delta = json_object();
        if (role_delta) {
            json_object_set_new(delta, "role", json_string("assistant"));
            json_object_set_new(delta, "content", json_string(""));
        } else if (text) {
            json_object_set_new(delta, "content", srv_json_text(text, len));
        }
        choice = json_pack("{s:i,s:o,s:n,s:s?}", "index", 0, "delta", delta, "logprobs", "finish_reason", finish);
    } else {
        choice = json_pack("{s:i,s:o,s:n,s:s?}", "index", 0, "text", text ? srv_json_text(text, len) : json_string(""),
                           "logprobs", "finish_reason", finish);
    }
    if (choice && !finish) json_object_set_new(choice, "finish_reason", json_null());
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", j->id, "object", chat ? "chat.completion.chunk" : "text_completion",
                     "created", (json_int_t)j->created_unix, "model", model, "choices", choice);
}

json_t *srv_openai_usage(const srv_job *j) {
    return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)j->req.n_prompt, "completion_tokens",
                     (json_int_t)j->tokens_out, "total_tokens", (json_int_t)(j->req.n_prompt + (size_t)j->tokens_out));
}

json_t *srv_openai_full(const srv_job *j, const char *model, const char *text, size_t len) {
    const bool chat = j->api == SRV_API_CHAT;
    json_t *choice;
    const char *finish = srv_openai_finish_reason(j->stop_reason);
    if (chat)
        choice = json_pack("{s:i,s:{s:s,s:o},s:n,s:s}", "index", 0, "message", "role", "assistant", "content",
                           srv_json_text(text, len), "logprobs", "finish_reason", finish);
    else
        choice = json_pack("{s:i,s:o,s:n,s:s}", "index", 0, "text", srv_json_text(text, len), "logprobs",
                           "finish_reason", finish);
    return json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id", j->id, "object", chat ? "chat.completion" : "text_completion",
                     "created", (json_int_t)j->created_unix, "model", model, "choices", choice, "usage",
                     srv_openai_usage(j));
}

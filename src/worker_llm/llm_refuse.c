/* llm_request_refuse_unsupported: OpenAI request fields that ask for
 * behaviour this worker does not implement get a 400 naming the field
 * instead of being ignored (a client asking for tool calls or a JSON schema
 * must not get a plain answer it takes for the real thing). Fields that
 * change nothing (user, metadata, service_tier, parallel_tool_calls
 * without tools) pass. logprobs, top_logprobs, logit_bias and n are
 * implemented and checked by llm_request_read_params; response_format and
 * the other structured-output fields by llm_grammar_read; tools,
 * tool_choice, functions and function_call on chat completions by
 * llm_tools_read. */
#include "worker_llm/llm_request.h"

#include <string.h>

static void refuse(wk_errors *errs, const char *field, const char *why) {
    wk_errors_add(errs, field, "unsupported_parameter", "%s is not supported by this worker yet (%s)", field, why);
}

static bool present(json_t *v) { return v && !json_is_null(v); }

/* A value that asks for nothing: absent, null, false, 0, "", [] or {}. */
static bool is_empty(json_t *v) {
    if (!present(v) || json_is_false(v)) return true;
    if (json_is_integer(v)) return json_integer_value(v) == 0;
    if (json_is_string(v)) return json_string_length(v) == 0;
    if (json_is_array(v)) return json_array_size(v) == 0;
    if (json_is_object(v)) return json_object_size(v) == 0;
    return false;
}

void llm_request_refuse_unsupported(json_t *o, llm_api api, wk_errors *errs) {
    json_t *v;
    if (api == LLM_API_RBEE) return;
    if (api != LLM_API_CHAT) { /* chat completions read them (llm_tools_read) */
        if (!is_empty(json_object_get(o, "tools"))) refuse(errs, "tools", "tool calls: use /v1/chat/completions");
        if (!is_empty(json_object_get(o, "functions"))) refuse(errs, "functions", "function calls: use /v1/chat/completions");
        v = json_object_get(o, "tool_choice");
        if (present(v) && !(json_is_string(v) && (!strcmp(json_string_value(v), "none") ||
                                                   !strcmp(json_string_value(v), "auto"))))
            refuse(errs, "tool_choice", "tool calls: use /v1/chat/completions");
        v = json_object_get(o, "function_call");
        if (present(v) && !(json_is_string(v) && (!strcmp(json_string_value(v), "none") ||
                                                   !strcmp(json_string_value(v), "auto"))))
            refuse(errs, "function_call", "function calls: use /v1/chat/completions");
    }
    v = json_object_get(o, "best_of");
    if (present(v) && !(json_is_integer(v) && json_integer_value(v) == 1)) refuse(errs, "best_of", "only best_of = 1");
    if (json_is_true(json_object_get(o, "echo"))) refuse(errs, "echo", "echoing the prompt");
    if (!is_empty(json_object_get(o, "suffix"))) refuse(errs, "suffix", "insertion");
    if (present(json_object_get(o, "audio"))) refuse(errs, "audio", "audio output");
    v = json_object_get(o, "modalities");
    if (present(v) && !(json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)) &&
                        strcmp(json_string_value(json_array_get(v, 0)), "text") == 0))
        refuse(errs, "modalities", "only [\"text\"]");
    if (present(json_object_get(o, "prediction"))) refuse(errs, "prediction", "predicted outputs");
    if (present(json_object_get(o, "web_search_options"))) refuse(errs, "web_search_options", "web search");
    if (present(json_object_get(o, "reasoning_effort"))) refuse(errs, "reasoning_effort", "reasoning models");
    if (json_is_true(json_object_get(o, "store"))) refuse(errs, "store", "stored completions");
}

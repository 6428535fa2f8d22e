/* Parsing and validation of generation requests (rbee jobs, OpenAI
 * completions and chat completions) before anything is queued: types,
 * ranges, stop strings, the context fit, and every OpenAI field that asks
 * for behaviour this worker does not implement (refused with a 400 naming
 * the field, never silently ignored). Errors are collected in a wk_errors
 * so a client sees all of them in one answer. */
#ifndef RBEE_LLM_REQUEST_H
#define RBEE_LLM_REQUEST_H

#include "rbee/tokenizer.h"
#include "worker/wk_request.h"
#include "worker_llm/llm_job.h"

#include <jansson.h>

/* What the loaded model and the worker allow (0: unknown or 1). */
typedef struct llm_limits {
    int64_t n_vocab;  /* the model's: logit_bias ids must be below it (0: not checked here) */
    int max_choices;  /* n at most this (min(LLM_MAX_CHOICES, --parallel)); 0: 1 */
} llm_limits;

/* Reads the sampling and length fields shared by every API into req:
 * max_tokens (and max_completion_tokens for chat, which wins when both are
 * given), temperature, top_p, top_k, min_p, repetition_penalty,
 * frequency_penalty, presence_penalty, seed, logit_bias (token id strings
 * to biases in -100..100), stop (at most LLM_MAX_STOP strings), stream,
 * stream_options, ignore_eos, n (the OpenAI APIs: 1..lim->max_choices),
 * logprobs (chat: a boolean with top_logprobs 0..20; completions: the
 * number of top tokens 0..20; the rbee job API has none), model. lim may
 * be NULL. max_tokens is left at 0 when absent (filled by
 * llm_request_set_prompt). */
void llm_request_read_params(json_t *obj, llm_api api, const llm_limits *lim, llm_gen_request *req,
                             wk_errors *errs);

/* OpenAI fields that ask for behaviour not implemented yet: tools /
 * tool_choice / functions / function_call outside chat completions,
 * best_of, echo, suffix, audio / modalities, prediction,
 * web_search_options, reasoning_effort, store. Each present one that asks
 * for something is an error {field, "unsupported_parameter"}. */
void llm_request_refuse_unsupported(json_t *obj, llm_api api, wk_errors *errs);

/* rbee job body: {"operation":"infer",...} or the untagged form; the prompt
 * text is returned (borrowed from obj) in *prompt. */
void llm_request_read_rbee(json_t *obj, const char **prompt, wk_errors *errs);
/* OpenAI completions body: prompt is a string or an array of one string. */
void llm_request_read_completion(json_t *obj, const char **prompt, wk_errors *errs);
/* OpenAI chat body: messages must be a non-empty array of {role, content}
 * objects (content a string or an array of {type:"text", text} parts, null
 * for ""), with tool_calls (llm_tools_message_calls), tool_call_id and name
 * kept. Returns a new JSON array of {role, content-string, ...} messages or
 * NULL. */
json_t *llm_request_read_chat(json_t *obj, wk_errors *errs);

/* Tokenizes text into req->prompt and checks it against ctx_size: the
 * prompt must leave room for one token and prompt + max_tokens must fit.
 * The plain ranges of text (request text inside a rendered chat prompt)
 * never become special tokens (rb_tokenizer_encode_plain).
 * default_max_tokens (0: all the room left) fills an absent max_tokens. */
void llm_request_set_prompt(llm_gen_request *req, const rb_tokenizer *tok, const char *text, size_t len,
                            unsigned encode_flags, const rb_text_range *plain, size_t n_plain, int64_t ctx_size,
                            int64_t default_max_tokens, wk_errors *errs);

#endif

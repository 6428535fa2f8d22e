/* A generation request body of any of the worker's APIs (rbee jobs, OpenAI
 * completions, chat completions) turned into a validated llm_gen_request:
 * fields read and checked, unimplemented OpenAI fields refused, the prompt
 * (or the conversation through the chat template, its request text kept
 * plain) tokenized and fitted to the context. The routes and the request
 * fuzzer share it. */
#ifndef RBEE_LLM_PROMPT_H
#define RBEE_LLM_PROMPT_H

#include "worker_llm/llm_chat.h"
#include "worker_llm/llm_request.h"

typedef struct llm_prompt_ctx {
    const rb_tokenizer *tok;
    llm_chat *chat; /* used for LLM_API_CHAT */
    int64_t ctx_size;
    llm_limits lim; /* zero: unknown vocabulary size, one choice */
} llm_prompt_ctx;

/* Fills req from body; every problem found goes to errs (req must then be
 * freed with llm_gen_request_free all the same). */
void llm_prompt_build(const llm_prompt_ctx *pc, json_t *body, llm_api api, llm_gen_request *req, wk_errors *errs);

#endif

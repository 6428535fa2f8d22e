/* Structured output fields of a generation request compiled into the
 * request's grammar: OpenAI's response_format (json_object, json_schema),
 * llama-server's grammar (GBNF) and json_schema, vLLM's guided_json and
 * guided_grammar. At most one of them; a bad schema or grammar is a 400
 * naming the field with the compiler's message (code invalid_json_schema /
 * invalid_grammar; a schema keyword the compiler does not implement:
 * unsupported_parameter). */
#ifndef RBEE_LLM_GRAMMAR_H
#define RBEE_LLM_GRAMMAR_H

#include "worker_llm/llm_request.h"

/* Sets req->grammar (NULL when none of the fields asks for one). */
void llm_grammar_read(json_t *body, llm_api api, llm_gen_request *req, wk_errors *errs);

#endif

/* The objects of OpenAI's completions and chat completions APIs built from
 * an LLM job: stream chunks, usage, the full non-streaming answer, and the
 * SSE flavour that turns a job's events into OpenAI's stream (a role delta
 * per chat choice, one chunk per text piece, a finish chunk per choice,
 * optional usage). Log probabilities go out in the route's shape: chat
 * {"content": [{token, logprob, bytes, top_logprobs}...]}, completions the
 * legacy {tokens, token_logprobs, top_logprobs, text_offset}, whose
 * text_offset counts characters from the start of the prompt. In a stream a
 * token's entry rides on the chunk that carries its text (or, for text held
 * back and never sent, such as a stop string, on the choice's finish chunk),
 * so a stream's entries are the same as the full answer's. A chat whose
 * tool calls are parsed gets its message and stream from llm_openai_tools.h. */
#ifndef RBEE_LLM_OPENAI_H
#define RBEE_LLM_OPENAI_H

#include "worker/wk_sse.h"
#include "worker_llm/llm_job.h"

const char *llm_openai_finish_reason(rb_stop_reason why);
/* One stream chunk for a choice: text (may be NULL), log-probability
 * entries (a JSON array in the chat shape, consumed; NULL: "logprobs":
 * null), finish reason (NULL: not yet) or the initial role delta of a chat.
 * *offset is the choice's legacy text_offset, advanced past the entries. */
json_t *llm_openai_chunk(const wk_job *j, int choice, const char *text, size_t len, json_t *entries,
                         int64_t *offset, const char *finish, bool role_delta);
json_t *llm_openai_usage(const wk_job *j);
/* The whole answer from the job's events (call with the job's mutex held). */
json_t *llm_openai_full(const wk_job *j);
/* {"error":{"message","type","param":null,"code"}} */
json_t *llm_openai_error(const char *type, const char *code, const char *msg);

/* The SSE flavour of OpenAI streams; its context comes from
 * llm_openai_sse_ctx (NULL when out of memory). */
extern const wk_sse_flavor llm_openai_sse;
void *llm_openai_sse_ctx(const wk_job *j);

#endif

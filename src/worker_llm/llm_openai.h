/* The objects of OpenAI's completions and chat completions APIs built from
 * an LLM job: stream chunks, usage, the full non-streaming answer, and the
 * SSE flavour that turns a job's events into OpenAI's stream (a role delta
 * for chat, one chunk per text piece, the finish chunk, optional usage). */
#ifndef RBEE_LLM_OPENAI_H
#define RBEE_LLM_OPENAI_H

#include "worker/wk_sse.h"
#include "worker_llm/llm_job.h"

const char *llm_openai_finish_reason(rb_stop_reason why);
/* One stream chunk: text (may be NULL), finish reason (NULL: not yet) or the
 * initial role delta of a chat. */
json_t *llm_openai_chunk(const wk_job *j, const char *text, size_t len, const char *finish, bool role_delta);
json_t *llm_openai_usage(const wk_job *j);
/* The whole answer; text is the concatenation of the job's pieces. */
json_t *llm_openai_full(const wk_job *j, const char *text, size_t len);
/* {"error":{"message","type","param":null,"code"}} */
json_t *llm_openai_error(const char *type, const char *code, const char *msg);

/* The SSE flavour of OpenAI streams (no context). */
extern const wk_sse_flavor llm_openai_sse;

#endif

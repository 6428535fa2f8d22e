/* Tool calls in OpenAI's chat answers. A finished choice's text is parsed
 * (rb_tool_calls_parse, the model family's syntax, the request's function
 * names) into message.tool_calls [{id, type: "function", function: {name,
 * arguments}}] with the text before the calls as content (null when none)
 * and finish_reason "tool_calls"; text that is not a call stays content.
 * A stream sends content while the output cannot be a call
 * (rb_tool_calls_hold) and holds back the rest; at the choice's end it
 * parses the whole text as the full answer does and sends what is left:
 * content, then per call a delta {index, id, type, function: {name,
 * arguments: ""}} and the arguments in fragments {index, function:
 * {arguments}}, then the finish chunk. The reassembled stream is the full
 * answer (the ids aside, random per answer). */
#ifndef RBEE_LLM_OPENAI_TOOLS_H
#define RBEE_LLM_OPENAI_TOOLS_H

#include "worker_llm/llm_job.h"

/* The message of a finished chat choice: {role, content} or, when the
 * request's tools are parsed and the text holds calls, {role, content,
 * tool_calls} with *finish set to "tool_calls". NULL when out of memory. */
json_t *llm_openai_tool_message(const llm_task *t, const char *text, size_t len, const char **finish);

/* One choice's stream state. */
typedef struct llm_tool_stream {
    char *buf; /* every byte of the choice's text so far */
    size_t len, cap;
    size_t sent;  /* bytes of buf sent as content */
    bool started; /* a call has begun: nothing more is sent before the end */
} llm_tool_stream;

void llm_tool_stream_free(llm_tool_stream *s);
/* Adds a piece of text; *out / *out_len: the content that may go out now
 * (inside s->buf, valid until the next call; *out_len may be 0). false:
 * out of memory. */
bool llm_tool_stream_push(llm_tool_stream *s, rb_tool_family f, const char *text, size_t len, const char **out,
                          size_t *out_len);
/* The end of the choice: the deltas left (content, then per call its
 * {id, type, name} delta and its arguments fragments) appended to deltas
 * (a JSON array), and *finish set to "tool_calls" when the text holds calls
 * (else left as the choice's own reason). false: out of memory. */
bool llm_tool_stream_end(llm_tool_stream *s, const llm_task *t, json_t *deltas, const char **finish);

#endif

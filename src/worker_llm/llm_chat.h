/* Turns an OpenAI chat conversation into prompt tokens: renders the model's
 * own chat template (or, for models that ship none, a small plain-text
 * fallback template), keeps the ranges of the prompt that came from the
 * request (to be encoded as plain text: a message cannot forge a turn with
 * special-token text), tells the template's tool-call syntax, and picks the encode flags that avoid a double BOS. */
#ifndef RBEE_LLM_CHAT_H
#define RBEE_LLM_CHAT_H

#include "rbee/chat_template.h"
#include "rbee/chat_tools.h"
#include "rbee/tokenizer.h"

#include <pthread.h>
#include <stdbool.h>

typedef struct llm_chat {
    rb_chat_template *tpl;
    bool is_fallback;
    rb_tool_family family; /* the template's tool-call syntax (rb_tool_family_detect) */
    char bos_text[128];
    pthread_mutex_t mu; /* renders are serialized (cheap next to inference) */
} llm_chat;

/* The template used when the model has none: "role: content" lines, then
 * "assistant:" as the generation prompt, after the BOS token. */
extern const char llm_chat_fallback_template[];

rb_status llm_chat_init(llm_chat *c, const rb_tokenizer *tok, rb_error *err);
void llm_chat_destroy(llm_chat *c);

/* messages_json: array of {role, content, ...}; tools_json: the request's
 * tools array for the template, or NULL. On success *out holds the prompt
 * and its request ranges (release with rb_chat_rendered_free) and *flags
 * the flags to encode it with, through rb_tokenizer_encode_plain with
 * out->request as the plain ranges. */
rb_status llm_chat_render(llm_chat *c, const char *messages_json, const char *tools_json, rb_chat_rendered *out,
                          unsigned *flags, rb_error *err);

#endif

/* Tool calling on chat completions, request side: reads and validates
 * `tools` (function tools: name, description, parameters JSON schema),
 * `tool_choice` ("auto", the default when tools are given, "none",
 * "required" or {"type": "function", "function": {"name"}}),
 * `parallel_tool_calls`, and the legacy `functions` / `function_call`,
 * which map onto them; and turns an assistant message's OpenAI
 * `tool_calls` (arguments as a JSON string) into what chat templates read
 * (arguments as a mapping, as transformers' convention has it). Every bad
 * field is a 400 naming it. */
#ifndef RBEE_LLM_TOOLS_H
#define RBEE_LLM_TOOLS_H

#include "rbee/chat_tools.h"
#include "worker/wk_request.h"

#include <jansson.h>
#include <stdbool.h>

#define LLM_MAX_TOOLS 128

typedef enum llm_tool_choice {
    LLM_TOOLS_OFF = 0,   /* no tools in the request */
    LLM_TOOLS_AUTO,      /* the model may call one */
    LLM_TOOLS_NONE,      /* tools are shown to the template, calls never parsed */
    LLM_TOOLS_REQUIRED,  /* the output must be one or more calls */
    LLM_TOOLS_NAMED,     /* the output must be a call of tools.names[named] */
} llm_tool_choice;

typedef struct llm_tools {
    llm_tool_choice choice;
    int named;            /* LLM_TOOLS_NAMED: index into names */
    bool parallel;        /* parallel_tool_calls (default true) */
    rb_tool_family family;
    char *tools_json;     /* the tools array passed to the chat template (NULL: none) */
    char **names;         /* function names, n of them */
    char **params;        /* each function's parameters schema as JSON text ("{}" when absent) */
    size_t n;
} llm_tools;

void llm_tools_free(llm_tools *t);

/* Whether a finished output is parsed for calls. */
static inline bool llm_tools_parsing(const llm_tools *t) {
    return t->choice != LLM_TOOLS_OFF && t->choice != LLM_TOOLS_NONE && t->family != RB_TOOLS_NONE;
}

/* Reads the tool fields of a chat body into *out (zeroed first). family is
 * the model's (rb_tool_family_detect of its chat template): tools with any
 * choice but "none" need one. */
void llm_tools_read(json_t *body, rb_tool_family family, llm_tools *out, wk_errors *errs);

/* An assistant message's tool_calls (field names the message, for errors)
 * as the template gets them: [{id, type: "function", function: {name,
 * arguments}}] with arguments parsed into an object when they are a JSON
 * object's text (else kept as given). NULL after an error. */
json_t *llm_tools_message_calls(json_t *tool_calls, const char *field, wk_errors *errs);

/* A new tool-call id: "call_" and 24 letters and digits, or for the Mistral
 * families 9 letters and digits (their templates reject other ids). out
 * holds at least 32 bytes. */
void llm_tools_call_id(rb_tool_family family, char *out);

#endif

/* Tool calls in model output: which call syntax a model uses (told from its
 * chat template's text), parsing a finished output into the calls it makes
 * (OpenAI's tool_calls: a function name and its arguments as JSON text) and
 * the part of a growing output a stream must hold back because it may still
 * turn out to be a call. The parse is all-or-nothing per output: text that
 * is not a well-formed call in the family's syntax stays plain content, so a
 * stream that sends what rb_tool_calls_hold allows and parses the rest at
 * the end gives the same split as one parse of the whole output.
 *
 * Families and the output each one parses (whitespace = JSON whitespace):
 *  - RB_TOOLS_LLAMA3 (Llama 3.1 / 3.2 / 3.3): the whole output, after
 *    optional leading whitespace and an optional "<|python_tag|>", is one or
 *    more objects {"name": N, "parameters": {...}} ("arguments" accepted for
 *    "parameters") separated by whitespace or ';'. No content.
 *  - RB_TOOLS_HERMES (Qwen 2.5 / 3, Hermes 2 / 3): content, then one or more
 *    "<tool_call>" {"name": N, "arguments": {...}} "</tool_call>" blocks
 *    with only whitespace between and after them.
 *  - RB_TOOLS_MISTRAL (Mistral Nemo / Small / Mixtral v3 tokenizers) and
 *    RB_TOOLS_MISTRAL_ARGS (the newer "[ARGS]" templates): content, then
 *    "[TOOL_CALLS]" followed by a JSON array of {"name", "arguments"}
 *    objects or by name "[ARGS]" {...}; several "[TOOL_CALLS]" groups may
 *    follow each other, whitespace between them. Both families parse both
 *    forms; they differ in the form a forced call is written in.
 * A call's name must be non-empty and, when names are given, one of them;
 * its arguments must be a JSON object. Content is the text before the first
 * call with trailing whitespace removed (NULL when nothing is left). */
#ifndef RBEE_CHAT_TOOLS_H
#define RBEE_CHAT_TOOLS_H

#include "rbee/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rb_tool_family {
    RB_TOOLS_NONE = 0, /* the template shows no call syntax this parser knows */
    RB_TOOLS_LLAMA3,
    RB_TOOLS_HERMES,
    RB_TOOLS_MISTRAL,
    RB_TOOLS_MISTRAL_ARGS,
} rb_tool_family;

/* The family of a chat template, from its text, first match wins:
 *  "<tool_call>" -> HERMES; "[TOOL_CALLS]" -> MISTRAL_ARGS if the text also
 *  has "[ARGS]", else MISTRAL; "<|python_tag|>", or "<|start_header_id|>"
 *  together with the words "parameters" and "tool_calls" -> LLAMA3; else NONE. */
rb_tool_family rb_tool_family_detect(const char *tpl, size_t len);
/* "none", "llama3", "hermes", "mistral", "mistral_args". */
const char *rb_tool_family_name(rb_tool_family f);

/* The marker text that opens a call in the family's output (NULL for
 * LLAMA3 and NONE: a Llama call opens with '{' or "<|python_tag|>"). */
const char *rb_tool_family_marker(rb_tool_family f);

typedef struct rb_tool_call {
    char *name;      /* NUL-terminated */
    char *arguments; /* the arguments object as compact JSON text */
} rb_tool_call;

typedef struct rb_tool_parse {
    char *content;  /* NUL-terminated; NULL: none */
    size_t content_len;
    rb_tool_call *calls;
    size_t n_calls; /* 0: the output is all content */
} rb_tool_parse;

/* Parses a finished output. names (n_names of them) restricts the callable
 * function names; NULL accepts any. Output that is not a well-formed call
 * gives n_calls 0 and content = the whole text. Errors only for allocation
 * (RB_E_NOMEM) and bad arguments; *out is zeroed first. */
rb_status rb_tool_calls_parse(rb_tool_family f, const char *text, size_t len, const char *const *names,
                              size_t n_names, rb_tool_parse *out, rb_error *err);
void rb_tool_parse_free(rb_tool_parse *p);

/* For a stream: the length of the prefix of text (all the output so far)
 * that is content whatever follows; the rest must be held back. from is
 * what an earlier call returned for a shorter text (0 at first): only
 * text[from..len) is looked at, and the result is at least from, so a
 * stream does linear work overall. A prefix sent this way is a prefix of
 * the content rb_tool_calls_parse gives for any continuation. *started
 * (may be NULL) tells that a call has begun (its marker, or for LLAMA3 a
 * '{' or "<|python_tag|>" opening the output): the result will not grow
 * again, so a stream may stop asking. NONE: len. */
size_t rb_tool_calls_hold(rb_tool_family f, const char *text, size_t len, size_t from, bool *started);

#ifdef __cplusplus
}
#endif
#endif

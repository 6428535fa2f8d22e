/* Chat templates: renders a model's own Jinja chat template (GGUF
 * `tokenizer.chat_template` or tokenizer_config.json `chat_template`) over a
 * conversation, producing the same text as transformers'
 * apply_chat_template(..., tokenize=False). The interpreter implements the
 * Jinja subset used by real chat templates with jinja2's semantics under
 * trim_blocks/lstrip_blocks, and bounds output size, memory, steps and
 * recursion so templates from untrusted model files cannot hang or exhaust
 * the process. rb_chat_template_render* also report which bytes of the
 * output came from the request rather than from the template, so a caller
 * can tokenize those as plain text: special-token text inside a message
 * must not become a control token that forges a turn. */
#ifndef RBEE_CHAT_TEMPLATE_H
#define RBEE_CHAT_TEMPLATE_H

#include "rbee/status.h"
#include "rbee/text_range.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rb_chat_template rb_chat_template;

/* Hard limits of one render; a zero field takes the default. */
typedef struct rb_chat_limits {
    size_t max_output_bytes; /* default 16 MiB: rendered text and any one string */
    size_t max_memory_bytes; /* default 256 MiB: all values built while rendering */
    uint64_t max_steps;      /* default 10,000,000: statements + loop iterations */
    uint32_t max_depth;      /* default 64: block nesting + macro recursion */
} rb_chat_limits;

typedef struct rb_chat_message {
    const char *role;    /* "system", "user", "assistant", "tool", ... */
    const char *content; /* NUL-terminated UTF-8; NULL renders as None */
} rb_chat_message;

typedef struct rb_chat_options {
    bool add_generation_prompt;
    /* JSON array of tool schemas, or NULL for tools=None. */
    const char *tools_json;
    /* JSON object of further template variables (e.g. {"enable_thinking": false}),
     * applied last so they override everything else; NULL for none. */
    const char *extra_vars_json;
    /* Clock for strftime_now(), unix seconds, local time zone; 0 = now. */
    int64_t now;
    rb_chat_limits limits;
} rb_chat_options;

/* Compiles template source (UTF-8). Syntax errors give RB_E_FORMAT with the
 * line number in err. The template starts with no special-token variables. */
rb_status rb_chat_template_parse(const char *src, size_t len, rb_chat_template **out, rb_error *err);

/* Reads a tokenizer_config.json (buffer or file, at most 64 MiB): its
 * `chat_template` (a string, or a list of {name, template} from which `name`
 * is picked; name NULL means "default") and the special tokens transformers
 * passes to templates (bos_token, eos_token, unk_token, sep_token, pad_token,
 * cls_token, mask_token as strings or AddedToken {content} objects, and
 * additional_special_tokens). RB_E_NOT_FOUND if there is no such template. */
rb_status rb_chat_template_from_tokenizer_config(const char *json, size_t len, const char *name,
                                                 rb_chat_template **out, rb_error *err);
rb_status rb_chat_template_load_tokenizer_config(const char *path, const char *name, rb_chat_template **out,
                                                 rb_error *err);
void rb_chat_template_free(rb_chat_template *t);

/* Template source as given (owned by t). */
const char *rb_chat_template_source(const rb_chat_template *t, size_t *len);

/* Default variables seen by every render (e.g. "bos_token" from GGUF
 * metadata). set_str stores a string, set_json any JSON value; a NULL value
 * removes the variable. */
rb_status rb_chat_template_set_str(rb_chat_template *t, const char *name, const char *value, rb_error *err);
rb_status rb_chat_template_set_json(rb_chat_template *t, const char *name, const char *value_json, rb_error *err);

/* Renders messages (roles/contents) with the options (NULL = defaults:
 * no generation prompt, tools=None). Variables seen by the template: the
 * defaults above, then messages, tools, documents (None),
 * add_generation_prompt, then extra_vars_json. On success *out is a
 * malloc'ed NUL-terminated string (release with free()) and *out_len its
 * length (out_len may be NULL). raise_exception() in the template, undefined
 * values used in operations and type errors return RB_E_INVALID; limit
 * breaches RB_E_RANGE or RB_E_NOMEM; messages name the template line. */
rb_status rb_chat_template_apply(const rb_chat_template *t, const rb_chat_message *msgs, size_t n_msgs,
                                 const rb_chat_options *opts, char **out, size_t *out_len, rb_error *err);

/* Same, with messages given as a JSON array of message objects, which may
 * carry any fields (tool_calls, reasoning_content, list contents, ...). */
rb_status rb_chat_template_apply_json(const rb_chat_template *t, const char *messages_json,
                                      const rb_chat_options *opts, char **out, size_t *out_len, rb_error *err);

/* A render with the byte ranges of its text that came from request data:
 * the messages (roles, contents, every other field and key), tools_json
 * and extra_vars_json. The template's literal text and the default
 * variables (set_str / set_json: the model's own bos_token and the like)
 * are the template's. Ranges follow the text through every operation of
 * the template (concatenation, slicing, trim, replace, split, join, loops,
 * macros, ...); text derived from request text (upper/lower, escaping,
 * repr, tojson of a request string, a request number printed) counts as
 * request data as a whole where a finer split is not kept. */
typedef struct rb_chat_rendered {
    char *text;             /* malloc'ed, NUL-terminated */
    size_t len;
    rb_text_range *request; /* sorted, disjoint, not adjacent, non-empty; malloc'ed or NULL */
    size_t n_request;
} rb_chat_rendered;

/* rb_chat_template_apply / _apply_json with the request ranges. On error
 * *out is zeroed. Release with rb_chat_rendered_free. */
rb_status rb_chat_template_render(const rb_chat_template *t, const rb_chat_message *msgs, size_t n_msgs,
                                  const rb_chat_options *opts, rb_chat_rendered *out, rb_error *err);
rb_status rb_chat_template_render_json(const rb_chat_template *t, const char *messages_json,
                                       const rb_chat_options *opts, rb_chat_rendered *out, rb_error *err);
void rb_chat_rendered_free(rb_chat_rendered *r);

#ifdef __cplusplus
}
#endif
#endif

/* Parsing and validation of generation requests (rbee jobs, OpenAI
 * completions and chat completions) before anything is queued: types,
 * ranges, stop strings, UTF-8 and context fit. Every problem found is
 * collected as {field, constraint, message}, so a client sees all of them
 * in one 400 answer. */
#ifndef RBEE_SRV_REQUEST_H
#define RBEE_SRV_REQUEST_H

#include "rbee/tokenizer.h"
#include "server/srv_job.h"

#include <jansson.h>

#define SRV_MAX_FIELD_ERRORS 16

typedef struct srv_field_error {
    char field[64];
    char constraint[64];
    char message[256];
} srv_field_error;

typedef struct srv_errors {
    srv_field_error items[SRV_MAX_FIELD_ERRORS];
    int n;
} srv_errors;

void srv_errors_add(srv_errors *e, const char *field, const char *constraint, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* {"errors":[{"field","constraint","message"}, ...]} */
json_t *srv_errors_json(const srv_errors *e);
/* OpenAI's shape: {"error":{"message","type":"invalid_request_error","param","code"}} */
json_t *srv_errors_openai_json(const srv_errors *e);

/* Parses body bytes: checks UTF-8 and JSON syntax and that the top level is
 * an object. Returns the object or NULL with errors recorded. */
json_t *srv_parse_body(const char *body, size_t len, srv_errors *errs);

/* Reads the sampling and length fields shared by every API into req:
 * max_tokens (and max_completion_tokens for chat), temperature, top_p,
 * top_k, min_p, repetition_penalty, frequency_penalty, presence_penalty,
 * seed, stop, stream, stream_options, ignore_eos, model. max_tokens is left at 0 when
 * absent (filled by srv_request_set_prompt). */
void srv_request_read_params(json_t *obj, srv_api api, srv_gen_request *req, srv_errors *errs);

/* rbee job body: {"operation":"infer",...} or the untagged form; the prompt
 * text is returned (borrowed from obj) in *prompt. */
void srv_request_read_rbee(json_t *obj, const char **prompt, srv_errors *errs);
/* OpenAI completions body: prompt is a string or an array of one string. */
void srv_request_read_completion(json_t *obj, const char **prompt, srv_errors *errs);
/* OpenAI chat body: messages must be a non-empty array of {role, content}
 * objects (content a string or an array of {type:"text", text} parts).
 * Returns a new JSON array of {role, content-string} messages or NULL. */
json_t *srv_request_read_chat(json_t *obj, srv_errors *errs);

/* Tokenizes text into req->prompt and checks it against ctx_size: the
 * prompt must leave room for one token and prompt + max_tokens must fit.
 * default_max_tokens (0: all the room left) fills an absent max_tokens. */
void srv_request_set_prompt(srv_gen_request *req, const rb_tokenizer *tok, const char *text, size_t len,
                            unsigned encode_flags, int64_t ctx_size, int64_t default_max_tokens, srv_errors *errs);

#endif

/* Helpers shared by the chat-template tests: render a template source with a
 * JSON variable set (messages + extra variables) and report the status,
 * output and error message in one call. */
#ifndef RBEE_CHAT_TESTUTIL_H
#define RBEE_CHAT_TESTUTIL_H

#include "rbee/chat_template.h"

#include <stddef.h>

typedef struct ct_result {
    rb_status st;
    char *out; /* malloc'ed, NULL on error */
    size_t len;
    rb_error err;
} ct_result;

/* vars_json: JSON object; its "messages" (default []) and
 * "add_generation_prompt" go through the API's dedicated arguments, the
 * rest through extra_vars_json. limits may be NULL. */
ct_result ct_render(const char *tpl, const char *vars_json, const rb_chat_limits *limits);
void ct_result_free(ct_result *r);

#endif

/* HTML form bodies (multipart/form-data with files, and
 * application/x-www-form-urlencoded), parsed by libmicrohttpd's post
 * processor from a request body the transport has collected: the parts in
 * order, each with its field name, file name and content type (files) and
 * its bytes. Used by upload routes such as OpenAI's images/edits. */
#ifndef RBEE_WK_FORM_H
#define RBEE_WK_FORM_H

#include "rbee/status.h"
#include "worker/wk_req.h"

#include <stddef.h>
#include <stdint.h>

#define WK_FORM_MAX_PARTS 64

typedef struct wk_form_part {
    char *name;
    char *filename;     /* NULL for a plain field */
    char *content_type; /* NULL when the part has none */
    uint8_t *data;      /* len bytes, plus a NUL after them */
    size_t len;
} wk_form_part;

typedef struct wk_form {
    wk_form_part *parts;
    size_t n, cap;
    bool oom, too_many;
} wk_form;

/* Parses r's body. RB_E_FORMAT (message) when the content type is not a
 * form or the body is malformed or truncated, RB_E_RANGE over
 * WK_FORM_MAX_PARTS parts, RB_E_NOMEM. out is zeroed first; free it with
 * wk_form_free in every case. */
rb_status wk_req_form(wk_req *r, wk_form *out, rb_error *err);
/* The first part called name, or NULL. */
const wk_form_part *wk_form_get(const wk_form *f, const char *name);
/* How many parts are called name. */
size_t wk_form_count(const wk_form *f, const char *name);
void wk_form_free(wk_form *f);

#endif

/* Status names and error-message formatting (see include/rbee/status.h). */
#include "rbee/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *rb_status_str(rb_status s) {
    switch (s) {
    case RB_OK: return "ok";
    case RB_E_INVALID: return "invalid argument";
    case RB_E_NOMEM: return "out of memory";
    case RB_E_IO: return "i/o error";
    case RB_E_FORMAT: return "malformed input";
    case RB_E_UNSUPPORTED: return "unsupported";
    case RB_E_NOT_FOUND: return "not found";
    case RB_E_BACKEND: return "backend error";
    case RB_E_RANGE: return "out of range";
    case RB_E_CANCELLED: return "cancelled";
    default: return "unknown error";
    }
}

rb_status rb_error_set(rb_error *err, rb_status code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void rb_error_prefix(rb_error *err, const char *fmt, ...) {
    if (!err) return;
    char prefix[RB_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[RB_ERROR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    /* truncation is intended: the message is capped at RB_ERROR_MSG_MAX - 1 */
    size_t np = strnlen(prefix, sizeof err->msg - 1);
    memcpy(err->msg, prefix, np);
    size_t room = sizeof err->msg - 1 - np;
    size_t no = strnlen(old, room);
    memcpy(err->msg + np, old, no);
    err->msg[np + no] = '\0';
}

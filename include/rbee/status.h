/* Error codes and error messages shared by every layer of librbee.
 * Functions that can fail return an rb_status; functions that parse external
 * input also take an optional rb_error* that receives a human-readable message
 * naming the problem. Nothing here is global state. */
#ifndef RBEE_STATUS_H
#define RBEE_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rb_status {
    RB_OK = 0,
    RB_E_INVALID,     /* bad argument, shape or dtype combination */
    RB_E_NOMEM,       /* host or device allocation failed */
    RB_E_IO,          /* open/read/write/mmap failed */
    RB_E_FORMAT,      /* malformed, truncated or hostile input data */
    RB_E_UNSUPPORTED, /* well-formed request this build or backend cannot do */
    RB_E_NOT_FOUND,   /* named item (tensor, key, backend, file) does not exist */
    RB_E_BACKEND,     /* device runtime failure */
    RB_E_RANGE,       /* value out of allowed range (index, size, limit) */
    RB_E_CANCELLED,   /* operation cancelled by the caller */
    RB_STATUS_COUNT_
} rb_status;

#define RB_ERROR_MSG_MAX 512

typedef struct rb_error {
    rb_status code;
    char msg[RB_ERROR_MSG_MAX];
} rb_error;

/* Short stable name of a status code ("ok", "invalid argument", ...). */
const char *rb_status_str(rb_status s);

/* Records code and a printf-style message in err (err may be NULL) and
 * returns code, so callers can write `return rb_error_set(err, RB_E_FORMAT, ...)`. */
rb_status rb_error_set(rb_error *err, rb_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Prepends context ("while loading x: ") to an existing message. Returns
 * nothing on purpose: the caller returns the status it already holds (with
 * a NULL err there is no code to return, and a returned RB_OK would turn a
 * failure into success). */
void rb_error_prefix(rb_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static inline void rb_error_clear(rb_error *err) {
    if (err) { err->code = RB_OK; err->msg[0] = '\0'; }
}

#ifdef __cplusplus
}
#endif
#endif

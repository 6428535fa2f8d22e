/* Internal: text-level stop-string matching with hold-back, so a piece of
 * text that may be the start of a stop string is not emitted until it is
 * known not to be one. */
#ifndef RBEE_STOP_MATCHER_H
#define RBEE_STOP_MATCHER_H

#include "rbee/status.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct rb_stop_matcher {
    const char *const *stop;
    int n_stop;
    char *pending;
    size_t len, cap;
} rb_stop_matcher;

void rb_stop_matcher_init(rb_stop_matcher *sm, const char *const *stop, int n_stop);
void rb_stop_matcher_free(rb_stop_matcher *sm);
/* Appends text; sets *emit_len to how many bytes at the front of
 * sm->pending may be emitted now, and *hit to whether a stop string was found
 * (then the emit part ends right before it and the rest is to be dropped). */
rb_status rb_stop_matcher_push(rb_stop_matcher *sm, const char *text, size_t len, size_t *emit_len, bool *hit);
/* Removes the first n bytes of pending (after they were emitted). */
void rb_stop_matcher_consume(rb_stop_matcher *sm, size_t n);

#endif

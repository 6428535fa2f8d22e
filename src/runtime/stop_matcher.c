/* Implementation of stop_matcher.h. */
#include "runtime/stop_matcher.h"

#include <stdlib.h>
#include <string.h>

void rb_stop_matcher_init(rb_stop_matcher *sm, const char *const *stop, int n_stop) {
    memset(sm, 0, sizeof *sm);
    sm->stop = stop;
    sm->n_stop = n_stop;
}

void rb_stop_matcher_free(rb_stop_matcher *sm) {
    free(sm->pending);
    memset(sm, 0, sizeof *sm);
}

rb_status rb_stop_matcher_push(rb_stop_matcher *sm, const char *text, size_t len, size_t *emit_len, bool *hit) {
    if (sm->len + len + 1 > sm->cap) {
        size_t cap = (sm->len + len + 1) * 2;
        char *p = realloc(sm->pending, cap);
        if (!p) return RB_E_NOMEM;
        sm->pending = p;
        sm->cap = cap;
    }
    memcpy(sm->pending + sm->len, text, len);
    sm->len += len;
    sm->pending[sm->len] = '\0';
    *hit = false;
    /* earliest complete occurrence of any stop string */
    size_t first = sm->len;
    for (int i = 0; i < sm->n_stop; i++) {
        size_t sl = strlen(sm->stop[i]);
        if (sl == 0 || sl > sm->len) continue;
        for (size_t at = 0; at + sl <= sm->len && at < first; at++)
            if (memcmp(sm->pending + at, sm->stop[i], sl) == 0) {
                first = at;
                break;
            }
    }
    if (first < sm->len) {
        *hit = true;
        *emit_len = first;
        return RB_OK;
    }
    /* hold back the longest suffix that is a proper prefix of a stop string */
    size_t hold = 0;
    for (int i = 0; i < sm->n_stop; i++) {
        size_t sl = strlen(sm->stop[i]);
        if (sl == 0) continue;
        size_t maxk = sl - 1 < sm->len ? sl - 1 : sm->len;
        for (size_t k = maxk; k > hold; k--)
            if (memcmp(sm->pending + sm->len - k, sm->stop[i], k) == 0) {
                hold = k;
                break;
            }
    }
    *emit_len = sm->len - hold;
    return RB_OK;
}

void rb_stop_matcher_consume(rb_stop_matcher *sm, size_t n) {
    if (n >= sm->len) {
        sm->len = 0;
    } else {
        memmove(sm->pending, sm->pending + n, sm->len - n);
        sm->len -= n;
    }
    if (sm->pending) sm->pending[sm->len] = '\0';
}

/* Implementation of wk_job_queue.h. */
#include "worker/wk_job_queue.h"

#include <jansson.h>
#include <stdlib.h>

rb_status wk_job_queue_init(wk_job_queue *q, int cap) {
    q->items = calloc(cap > 0 ? (size_t)cap : 1, sizeof *q->items);
    q->cap = cap > 0 ? cap : 1;
    q->head = q->n = 0;
    return q->items ? RB_OK : RB_E_NOMEM;
}

void wk_job_queue_free(wk_job_queue *q) {
    free(q->items);
    q->items = NULL;
    q->n = 0;
}

rb_status wk_job_queue_push(wk_job_queue *q, wk_job *j, int depth, int free_places) {
    if (free_places < 0) free_places = 0;
    if (q->n >= depth + free_places || q->n >= q->cap) return RB_E_RANGE;
    if (q->n >= free_places) /* it will wait: say where it stands */
        wk_job_push(j, "queued", json_pack("{s:i}", "position", q->n - free_places + 1), NULL, 0);
    q->items[(q->head + q->n) % q->cap] = wk_job_ref(j);
    q->n++;
    return RB_OK;
}

wk_job *wk_job_queue_pop(wk_job_queue *q) {
    if (q->n == 0) return NULL;
    wk_job *j = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    return j;
}

wk_job *wk_job_queue_at(const wk_job_queue *q, int i) {
    return i >= 0 && i < q->n ? q->items[(q->head + i) % q->cap] : NULL;
}

int wk_job_queue_take_cancelled(wk_job_queue *q, bool all, wk_job **out, int max) {
    int w = 0, nd = 0;
    for (int i = 0; i < q->n; i++) {
        wk_job *j = q->items[(q->head + i) % q->cap];
        if ((all || wk_job_cancel_requested(j)) && nd < max) out[nd++] = j;
        else q->items[(q->head + w++) % q->cap] = j;
    }
    q->n = w;
    return nd;
}

/* The bounded FIFO of jobs waiting for a worker's executor (the LLM
 * engine's sequence slots, the SD generation thread). Not locked: the
 * engine calls it under its own mutex. Admission: depth places wait in
 * front of the executor's free places, so at most depth + free jobs are
 * queued; a job that will wait behind others is told its position (a
 * "queued" event) before the executor can take it, so the event precedes
 * "started". */
#ifndef RBEE_WK_JOB_QUEUE_H
#define RBEE_WK_JOB_QUEUE_H

#include "rbee/status.h"
#include "worker/wk_job.h"

#include <stdbool.h>

typedef struct wk_job_queue {
    wk_job **items; /* ring */
    int cap, head, n;
} wk_job_queue;

/* Room for cap jobs; RB_E_NOMEM. */
rb_status wk_job_queue_init(wk_job_queue *q, int cap);
/* Frees the ring; the jobs still in it are the caller's to end first. */
void wk_job_queue_free(wk_job_queue *q);
/* Appends j (a new reference) when fewer than depth + free_places wait and
 * the ring has room, else RB_E_RANGE. */
rb_status wk_job_queue_push(wk_job_queue *q, wk_job *j, int depth, int free_places);
/* Removes and returns the oldest job (its reference passes to the caller), or NULL. */
wk_job *wk_job_queue_pop(wk_job_queue *q);
/* The i-th oldest waiting job (borrowed). */
wk_job *wk_job_queue_at(const wk_job_queue *q, int i);
/* Removes the jobs whose cancel was requested (all of them with all set),
 * keeping the others in order; writes at most max of them to out (their
 * references pass to the caller) and returns how many. A job past max stays
 * queued for the next call. */
int wk_job_queue_take_cancelled(wk_job_queue *q, bool all, wk_job **out, int max);

#endif

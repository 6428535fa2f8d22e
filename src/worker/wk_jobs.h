/* The table of addressable jobs (POST /v1/jobs), looked up by id for
 * streaming and cancellation, and reaped a grace period after they finish. */
#ifndef RBEE_WK_JOBS_H
#define RBEE_WK_JOBS_H

#include "worker/wk_job.h"

typedef struct wk_jobs {
    pthread_mutex_t mu;
    wk_job **items;
    size_t n, cap;
} wk_jobs;

void wk_jobs_init(wk_jobs *t);
void wk_jobs_destroy(wk_jobs *t); /* drops every remaining job */
bool wk_jobs_add(wk_jobs *t, wk_job *j); /* takes a new reference */
/* Returns a new reference, or NULL. */
wk_job *wk_jobs_find(wk_jobs *t, const char *id);
/* Removes jobs finished more than ttl_ms ago; returns how many. */
size_t wk_jobs_reap(wk_jobs *t, double now_ms, int64_t ttl_ms);
size_t wk_jobs_count(wk_jobs *t);

#endif

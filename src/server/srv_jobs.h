/* The table of addressable rbee jobs (POST /v1/jobs), looked up by id for
 * streaming and cancellation, and reaped a grace period after they finish. */
#ifndef RBEE_SRV_JOBS_H
#define RBEE_SRV_JOBS_H

#include "server/srv_job.h"

typedef struct srv_jobs {
    pthread_mutex_t mu;
    srv_job **items;
    size_t n, cap;
} srv_jobs;

void srv_jobs_init(srv_jobs *t);
void srv_jobs_destroy(srv_jobs *t); /* drops every remaining job */
bool srv_jobs_add(srv_jobs *t, srv_job *j); /* takes a new reference */
/* Returns a new reference, or NULL. */
srv_job *srv_jobs_find(srv_jobs *t, const char *id);
/* Removes jobs finished more than ttl_ms ago; returns how many. */
size_t srv_jobs_reap(srv_jobs *t, double now_ms, int64_t ttl_ms);
size_t srv_jobs_count(srv_jobs *t);

#endif

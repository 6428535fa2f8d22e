/* Handing a request's job to the worker's executor, for every route that
 * starts work (the rbee job API and the workers' compatible APIs): one
 * place answers a full queue (503 QUEUE_FULL, counted in
 * llorch_rejected_queue_full_total), a worker that no longer takes work
 * and a failed allocation, and one place waits for a job a route answers
 * in one piece. */
#ifndef RBEE_WK_SUBMIT_H
#define RBEE_WK_SUBMIT_H

#include "worker/wk_job.h"
#include "worker/wk_req.h"
#include "worker/wk_worker.h"

#include <stdbool.h>

/* Gives job j to def->submit with def->poke as its cancel hook and, when
 * track is set (the job API: GET/DELETE /v1/jobs/{id} find it), adds it to
 * the job table. True when queued. Otherwise the request has been answered
 * (503 QUEUE_FULL for RB_E_RANGE, wk_reply_not_ready for RB_E_CANCELLED
 * and RB_E_UNSUPPORTED, 500 otherwise; a job the table refused is
 * cancelled) and *ret holds the route's return value. The caller keeps its
 * reference either way. */
bool wk_job_submit(wk_worker *w, wk_req *r, wk_job *j, bool track, bool *ret);

/* Waits until j is done or failed; false (after cancelling j) when the
 * client disconnected first. */
bool wk_job_wait_finished(wk_req *r, wk_job *j);

#endif

/* Implementation of wk_submit.h. */
#include "worker/wk_submit.h"
#include "worker/wk_util.h"

#include <pthread.h>

bool wk_job_submit(wk_worker *w, wk_req *r, wk_job *j, bool track, bool *ret) {
    const wk_worker_def *def = w->def;
    wk_job_set_cancel_hook(j, def->poke, def->user);
    rb_status s = def->submit(def->user, j);
    if (s == RB_OK && track && !wk_jobs_add(&w->jobs, j)) {
        wk_job_cancel(j);
        s = RB_E_NOMEM;
    }
    if (s == RB_OK) return true;
    if (s == RB_E_RANGE) {
        wk_counter_add(w->queue_full, NULL, 1);
        *ret = wk_reply_unavailable(r, "QUEUE_FULL", "the request queue is full; retry later");
    } else if (s == RB_E_CANCELLED || s == RB_E_UNSUPPORTED) {
        *ret = wk_reply_not_ready(r, w);
    } else {
        *ret = wk_reply_error(r, 500, "INTERNAL", "server_error", "out of memory");
    }
    return false;
}

bool wk_job_wait_finished(wk_req *r, wk_job *j) {
    for (;;) {
        pthread_mutex_lock(&j->mu);
        bool done = j->state == WK_JOB_DONE || j->state == WK_JOB_FAILED;
        size_t n = j->n_events;
        pthread_mutex_unlock(&j->mu);
        if (done) return true;
        if (wk_req_client_gone(r)) {
            wk_job_cancel(j);
            return false;
        }
        wk_job_wait_events(j, n, 25);
    }
}

/* Implementation of srv_job.h. */
#include "server/srv_job.h"
#include "server/srv_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void srv_gen_request_free(srv_gen_request *r) {
    if (!r) return;
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->model);
    memset(r, 0, sizeof *r);
}

srv_job *srv_job_new(srv_api api, const char *id_prefix, srv_gen_request *req) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) {
        srv_gen_request_free(req);
        return NULL;
    }
    srv_random_id(id_prefix, j->id, sizeof j->id);
    j->api = api;
    j->req = *req;
    memset(req, 0, sizeof *req);
    j->created_unix = srv_unix_time();
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->refs = 1;
    j->state = SRV_JOB_QUEUED;
    atomic_init(&j->cancel, false);
    return j;
}

srv_job *srv_job_ref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    return j;
}

void srv_job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    for (size_t i = 0; i < j->n_pieces; i++) free(j->pieces[i].text);
    free(j->pieces);
    srv_gen_request_free(&j->req);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void srv_job_set_running(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    if (j->state == SRV_JOB_QUEUED) j->state = SRV_JOB_RUNNING;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

bool srv_job_push_piece(srv_job *j, const char *text, size_t len) {
    if (len == 0) return true;
    char *copy = malloc(len + 1);
    if (!copy) return false;
    memcpy(copy, text, len);
    copy[len] = '\0';
    pthread_mutex_lock(&j->mu);
    if (j->n_pieces == j->cap_pieces) {
        size_t nc = j->cap_pieces ? j->cap_pieces * 2 : 16;
        srv_piece *np = realloc(j->pieces, nc * sizeof *np);
        if (!np) {
            pthread_mutex_unlock(&j->mu);
            free(copy);
            return false;
        }
        j->pieces = np;
        j->cap_pieces = nc;
    }
    j->pieces[j->n_pieces].text = copy;
    j->pieces[j->n_pieces].len = len;
    j->n_pieces++;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return true;
}

void srv_job_finish(srv_job *j, rb_stop_reason why, int64_t tokens_out, double prefill_ms, double decode_ms) {
    pthread_mutex_lock(&j->mu);
    j->state = SRV_JOB_DONE;
    j->stop_reason = why;
    j->tokens_out = tokens_out;
    j->prefill_ms = prefill_ms;
    j->decode_ms = decode_ms;
    j->finished_ms = srv_now_ms();
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_fail(srv_job *j, const char *code, const char *msg) {
    pthread_mutex_lock(&j->mu);
    j->state = SRV_JOB_FAILED;
    snprintf(j->err_code, sizeof j->err_code, "%s", code ? code : "INTERNAL");
    snprintf(j->err_msg, sizeof j->err_msg, "%s", msg ? msg : "internal error");
    j->finished_ms = srv_now_ms();
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_request_cancel(srv_job *j) { atomic_store(&j->cancel, true); }

bool srv_job_cancel_requested(const srv_job *j) { return atomic_load(&((srv_job *)j)->cancel); }

bool srv_job_is_finished(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    bool f = j->state == SRV_JOB_DONE || j->state == SRV_JOB_FAILED;
    pthread_mutex_unlock(&j->mu);
    return f;
}

void srv_job_wait_change(srv_job *j, size_t n_seen, srv_job_state seen_state, int timeout_ms) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    dl.tv_sec += timeout_ms / 1000 + dl.tv_nsec / 1000000000L;
    dl.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&j->mu);
    while (j->n_pieces == n_seen && j->state == seen_state) {
        if (pthread_cond_timedwait(&j->cv, &j->mu, &dl) == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&j->mu);
}

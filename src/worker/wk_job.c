/* Implementation of wk_job.h. */
#include "worker/wk_job.h"
#include "worker/wk_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

wk_job *wk_job_new(const wk_job_kind *kind, const char *id_prefix, void *payload) {
    wk_job *j = calloc(1, sizeof *j);
    if (!j) {
        if (kind && kind->free_payload) kind->free_payload(payload);
        return NULL;
    }
    wk_random_id(id_prefix, j->id, sizeof j->id);
    j->kind = kind;
    j->payload = payload;
    j->created_unix = wk_unix_time();
    j->created_ms = wk_now_ms();
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->refs = 1;
    j->state = WK_JOB_QUEUED;
    atomic_init(&j->cancel, false);
    return j;
}

wk_job *wk_job_ref(wk_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    return j;
}

void wk_job_unref(wk_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    for (size_t i = 0; i < j->n_events; i++) {
        json_decref(j->events[i].data);
        free(j->events[i].raw);
    }
    free(j->events);
    if (j->kind && j->kind->free_payload) j->kind->free_payload(j->payload);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* Appends an event; called with mu held. Takes over data. */
static bool append(wk_job *j, const char *type, json_t *data, const char *raw, size_t raw_len) {
    char *copy = NULL;
    if (!data) return false;
    if (raw) {
        copy = malloc(raw_len + 1);
        if (!copy) goto oom;
        memcpy(copy, raw, raw_len);
        copy[raw_len] = '\0';
    }
    if (json_object_set_new(data, "type", json_string(type)) != 0) goto oom;
    if (j->n_events == j->cap_events) {
        size_t nc = j->cap_events ? j->cap_events * 2 : 16;
        wk_event *ne = realloc(j->events, nc * sizeof *ne);
        if (!ne) goto oom;
        j->events = ne;
        j->cap_events = nc;
    }
    wk_event *e = &j->events[j->n_events++];
    memset(e, 0, sizeof *e);
    snprintf(e->type, sizeof e->type, "%s", type);
    e->data = data;
    e->raw = copy;
    e->raw_len = copy ? raw_len : 0;
    e->t_ms = wk_now_ms();
    pthread_cond_broadcast(&j->cv);
    return true;
oom:
    free(copy);
    json_decref(data);
    return false;
}

/* A job that ends straight from the queue (cancelled, refused) still opens
 * its stream with "started": every stream is started, events..., end|error.
 * Called with mu held. */
static void start_if_queued(wk_job *j) {
    if (j->state != WK_JOB_QUEUED) return;
    char ts[40];
    wk_rfc3339_now(ts, sizeof ts);
    append(j, "started", json_pack("{s:s,s:s,s:s}", "type", "started", "job_id", j->id, "started_at", ts), NULL, 0);
}

bool wk_job_start(wk_job *j, json_t *fields) {
    char ts[40];
    wk_rfc3339_now(ts, sizeof ts);
    json_t *o = json_object();
    if (o) {
        json_object_set_new(o, "type", json_string("started"));
        json_object_set_new(o, "job_id", json_string(j->id));
        if (fields) json_object_update(o, fields);
        json_object_set_new(o, "started_at", json_string(ts));
    }
    json_decref(fields);
    pthread_mutex_lock(&j->mu);
    bool ok = false;
    if (j->state == WK_JOB_QUEUED) {
        j->state = WK_JOB_RUNNING;
        ok = append(j, "started", o, NULL, 0);
        o = NULL;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    json_decref(o);
    return ok;
}

bool wk_job_push(wk_job *j, const char *type, json_t *data, const char *raw, size_t raw_len) {
    json_t *o = json_object();
    if (o) json_object_set_new(o, "type", json_string(type));
    if (o && data) json_object_update(o, data);
    json_decref(data);
    pthread_mutex_lock(&j->mu);
    bool ok = false;
    if (j->state == WK_JOB_RUNNING || j->state == WK_JOB_QUEUED) {
        ok = append(j, type, o, raw, raw_len);
        o = NULL;
    }
    pthread_mutex_unlock(&j->mu);
    json_decref(o);
    return ok;
}

void wk_job_end(wk_job *j, json_t *fields) {
    json_t *o = json_object();
    if (o) json_object_set_new(o, "type", json_string("end"));
    if (o && fields) json_object_update(o, fields);
    json_decref(fields);
    pthread_mutex_lock(&j->mu);
    if (j->state == WK_JOB_DONE || j->state == WK_JOB_FAILED) {
        pthread_mutex_unlock(&j->mu);
        json_decref(o);
        return;
    }
    start_if_queued(j);
    append(j, "end", o, NULL, 0); /* on OOM the stream reports the end itself */
    j->state = WK_JOB_DONE;
    j->finished_ms = wk_now_ms();
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void wk_job_fail(wk_job *j, const char *code, const char *msg) {
    code = code ? code : "INTERNAL";
    msg = msg ? msg : "internal error";
    json_t *o = json_pack("{s:s,s:s,s:o}", "type", "error", "code", code, "message", wk_json_text(msg, strlen(msg)));
    pthread_mutex_lock(&j->mu);
    if (j->state == WK_JOB_DONE || j->state == WK_JOB_FAILED) {
        pthread_mutex_unlock(&j->mu);
        json_decref(o);
        return;
    }
    start_if_queued(j);
    snprintf(j->err_code, sizeof j->err_code, "%s", code);
    snprintf(j->err_msg, sizeof j->err_msg, "%s", msg);
    append(j, "error", o, NULL, 0);
    j->state = WK_JOB_FAILED;
    j->finished_ms = wk_now_ms();
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void wk_job_set_cancel_hook(wk_job *j, wk_cancel_hook fn, void *user) {
    pthread_mutex_lock(&j->mu);
    j->on_cancel = fn;
    j->on_cancel_user = user;
    pthread_mutex_unlock(&j->mu);
}

void wk_job_cancel(wk_job *j) {
    atomic_store(&j->cancel, true);
    pthread_mutex_lock(&j->mu);
    wk_cancel_hook fn = j->on_cancel;
    void *user = j->on_cancel_user;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (fn) fn(user);
}

bool wk_job_cancel_requested(const wk_job *j) { return atomic_load(&((wk_job *)j)->cancel); }

bool wk_job_is_finished(wk_job *j) {
    pthread_mutex_lock(&j->mu);
    bool f = j->state == WK_JOB_DONE || j->state == WK_JOB_FAILED;
    pthread_mutex_unlock(&j->mu);
    return f;
}

const char *wk_job_state_name(wk_job_state s) {
    switch (s) {
    case WK_JOB_QUEUED: return "queued";
    case WK_JOB_RUNNING: return "running";
    case WK_JOB_DONE: return "done";
    default: return "failed";
    }
}

void wk_job_subscribe(wk_job *j) {
    pthread_mutex_lock(&j->mu);
    j->subscribers++;
    pthread_mutex_unlock(&j->mu);
}

int wk_job_unsubscribe(wk_job *j) {
    pthread_mutex_lock(&j->mu);
    int left = j->subscribers > 0 ? --j->subscribers : 0;
    pthread_mutex_unlock(&j->mu);
    return left;
}

void wk_job_wait_events(wk_job *j, size_t n_seen, int timeout_ms) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    dl.tv_sec += timeout_ms / 1000 + dl.tv_nsec / 1000000000L;
    dl.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&j->mu);
    while (j->n_events == n_seen && j->state != WK_JOB_DONE && j->state != WK_JOB_FAILED) {
        if (pthread_cond_timedwait(&j->cv, &j->mu, &dl) == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&j->mu);
}

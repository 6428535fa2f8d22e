/* One unit of work a worker runs for a client (an LLM generation, an image),
 * travelling from the HTTP thread that created it to whatever executes it
 * and back to the streams that read it. It carries a worker-defined payload
 * and an ordered list of events: "started", worker-defined ones ("token",
 * "progress", ...), then exactly one "end" or "error". Each event is the
 * JSON object sent on the rbee event stream, optionally with raw bytes for
 * other API flavours to format. A cancel request (DELETE, a client gone) sets
 * a flag and calls the executor's hook. Shared by reference count; mutable
 * fields are guarded by the job's own mutex. */
#ifndef RBEE_WK_JOB_H
#define RBEE_WK_JOB_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum wk_job_state { WK_JOB_QUEUED = 0, WK_JOB_RUNNING, WK_JOB_DONE, WK_JOB_FAILED } wk_job_state;

typedef struct wk_event {
    char type[24];  /* "started", "token", "progress", "end", "error", ... */
    json_t *data;   /* the event object, with "type" */
    char *raw;      /* optional bytes behind the event (a text piece), NUL-terminated */
    size_t raw_len;
    double t_ms;    /* monotonic time it was pushed */
} wk_event;

struct wk_job;

/* What a worker's payload needs from the job machinery. */
typedef struct wk_job_kind {
    void (*free_payload)(void *payload);
    /* Adds the worker's fields to GET /v1/jobs/{id}; called with the job's
     * mutex held (may be NULL). */
    void (*describe)(const struct wk_job *j, json_t *status);
} wk_job_kind;

typedef void (*wk_cancel_hook)(void *user);

typedef struct wk_job {
    char id[64];
    int64_t created_unix;
    double created_ms; /* monotonic */
    const wk_job_kind *kind;
    void *payload;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    wk_job_state state;
    wk_event *events;
    size_t n_events, cap_events;
    char err_code[48];
    char err_msg[256];
    double finished_ms; /* monotonic time of the end/error */
    atomic_bool cancel;
    int subscribers; /* streams reading the job */
    wk_cancel_hook on_cancel;
    void *on_cancel_user;
} wk_job;

/* A new job with one reference; its id is id_prefix + 24 random hex digits.
 * Takes over payload (freed with kind->free_payload on failure). */
wk_job *wk_job_new(const wk_job_kind *kind, const char *id_prefix, void *payload);
wk_job *wk_job_ref(wk_job *j);
void wk_job_unref(wk_job *j);

/* Executor side. Each call takes over `fields` (may be NULL). */
/* QUEUED -> RUNNING, and the event {"type":"started","job_id",...fields,"started_at"}. */
bool wk_job_start(wk_job *j, json_t *fields);
/* A worker event {"type": type, ...data}; raw (may be NULL) is copied. False when
 * out of memory or the job already ended. */
bool wk_job_push(wk_job *j, const char *type, json_t *data, const char *raw, size_t raw_len);
/* The final {"type":"end", ...fields}: state DONE. */
void wk_job_end(wk_job *j, json_t *fields);
/* The final {"type":"error","code","message"}: state FAILED. */
void wk_job_fail(wk_job *j, const char *code, const char *msg);

/* Either side. */
/* Sets the cancel flag and calls the hook (once per call). */
void wk_job_cancel(wk_job *j);
bool wk_job_cancel_requested(const wk_job *j);
/* The executor's wake-up for cancel requests (set before the job is shared). */
void wk_job_set_cancel_hook(wk_job *j, wk_cancel_hook fn, void *user);
bool wk_job_is_finished(wk_job *j);
const char *wk_job_state_name(wk_job_state s); /* "queued", "running", "done", "failed" */

/* Streams: a job whose last subscriber leaves before its end is cancelled
 * (not when one of several goes). unsubscribe returns how many remain. */
void wk_job_subscribe(wk_job *j);
int wk_job_unsubscribe(wk_job *j);

/* Waits up to timeout_ms for an event beyond the first n_seen. */
void wk_job_wait_events(wk_job *j, size_t n_seen, int timeout_ms);

#endif

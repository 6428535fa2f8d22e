/* A worker process as one object, and its lifecycle: parse the flags, set
 * up the routes, listen (so /health answers and /v1/ready says 503 while the
 * model loads), load and warm up, report to the hive, serve, and on
 * SIGTERM/SIGINT stop accepting, drain running work up to a deadline, send a
 * final "stopping" heartbeat and exit 0. What the worker does (LLM
 * generation, images) comes in through a wk_worker_def; this layer knows
 * nothing of tokens or images. */
#ifndef RBEE_WK_WORKER_H
#define RBEE_WK_WORKER_H

#include "rbee/status.h"
#include "rbee/tensor.h" /* rb_backend */
#include "worker/wk_config.h"
#include "worker/wk_hive.h"
#include "worker/wk_http.h"
#include "worker/wk_jobs.h"
#include "worker/wk_log.h"
#include "worker/wk_metrics.h"
#include "worker/wk_router.h"

#include <stdatomic.h>

typedef enum wk_state { WK_STATE_LOADING = 0, WK_STATE_READY, WK_STATE_ERROR, WK_STATE_STOPPING } wk_state;

typedef struct wk_worker wk_worker;

/* What a worker plugs into the lifecycle. Every callback gets def->user. */
typedef struct wk_worker_def {
    const char *name;           /* "llm-worker-rbee": logs, --help, heartbeats ("implementation") */
    const char *version;
    const char *summary;        /* one line for --help */
    const wk_opt *opts;         /* the worker's own flags */
    int n_opts;
    const char *env_help;       /* extra environment lines for --help (may be NULL) */
    int64_t max_body_default;   /* --max-body-bytes default; 0: the layer's (1 MiB) */
    void *user;
    /* The bundled model used without --model: writes its path into buf; false
     * when there is none (buf then says where it looked and what to do). May
     * be NULL. */
    bool (*default_model)(char *buf, size_t len);
    /* Before listening: checks the options, registers routes and metrics. */
    rb_status (*setup)(wk_worker *w, void *user, rb_error *err);
    /* While the HTTP server already answers: loads the model, warms it up
     * (unless --no-warmup) and starts executing jobs. */
    rb_status (*load)(wk_worker *w, void *user, rb_error *err);
    /* Takes a job for execution (wk_job_submit calls it): RB_OK when queued,
     * RB_E_RANGE when the queue is full, RB_E_CANCELLED or RB_E_UNSUPPORTED
     * when the worker takes no more work. May be NULL for a worker whose
     * routes never call wk_job_submit. */
    rb_status (*submit)(void *user, wk_job *j);
    /* A job's cancel hook: wakes the executor so it sees the cancel. May be NULL. */
    void (*poke)(void *user);
    /* Jobs waiting and running (busy state, drain). May be NULL. */
    void (*load_stats)(void *user, int *queued, int *active);
    /* The load gauges the layer adds to /metrics from load_stats, when
     * active_metric is set: llorch_queue_depth (help queue_help),
     * llorch_queue_capacity (--queue-depth) and active_metric (help
     * active_help), e.g. "llorch_active_jobs". */
    const char *queue_help, *active_metric, *active_help;
    /* The model's weight bytes and the backend holding them (false: no model).
     * The layer asks only while the worker is ready or stopping (so never
     * during the load) and renders llorch_model_bytes and
     * llorch_device_memory_{total,used}_bytes, 0 otherwise. May be NULL. */
    bool (*memory)(void *user, uint64_t *weight_bytes, rb_backend **be);
    /* SIGTERM: take no new work; running and queued work goes on. May be NULL. */
    void (*stop_accepting)(void *user);
    /* After the drain: cancel what is left and stop executing. Called again at
     * exit, so it must be idempotent. May be NULL. */
    void (*stop)(void *user);
    /* Adds the worker's fields to /v1/info (loaded: the model is in memory). May be NULL. */
    void (*info)(void *user, json_t *info, bool loaded);
    /* Frees what setup and load made; called last, in every case. May be NULL. */
    void (*destroy)(void *user);
} wk_worker_def;

struct wk_worker {
    const wk_worker_def *def;
    wk_config cfg;
    wk_log log;
    wk_metrics metrics;
    wk_jobs jobs;
    wk_router router;
    wk_http *http;
    wk_hive *hive;
    wk_metric *queue_full; /* llorch_rejected_queue_full_total, with def->submit */
    atomic_int state; /* wk_state */
    int port;
    char model_path[4096];
    char model_id[512];
    char device[32]; /* "cpu:0", "cuda:1", ... */
    char load_error[512];
};

/* Runs the worker until SIGTERM/SIGINT; returns the process exit code
 * (0 after a clean shutdown or --help, 1 on a startup failure, 2 on a usage
 * error). */
int wk_worker_main(const wk_worker_def *def, int argc, char **argv);

wk_state wk_worker_state(wk_worker *w);
/* "loading" | "idle" | "busy" | "error" | "stopping" */
const char *wk_worker_state_name(wk_worker *w);
/* queued + running work, through the worker's load_stats. */
int wk_worker_busy(wk_worker *w);
/* 503 while loading or shutting down, 500 after a failed load. */
bool wk_reply_not_ready(wk_req *r, wk_worker *w);

/* The generic routes (wk_routes_*.c), registered by wk_worker_main. */
rb_status wk_routes_info_add(wk_worker *w, rb_error *err);
rb_status wk_routes_jobs_add(wk_worker *w, rb_error *err);

#endif

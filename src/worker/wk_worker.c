/* Implementation of wk_worker.h: the lifecycle. The HTTP server comes up
 * first (so /health and /v1/ready answer while loading), then the worker
 * loads, the hive is told, and the main thread waits for SIGTERM/SIGINT while
 * it reaps finished jobs. Shutdown stops accepting, drains running work up
 * to a deadline, lets streams flush, sends a final "stopping" heartbeat and
 * returns 0. */
#include "worker/wk_worker.h"
#include "worker/wk_util.h"

#include "rbee/backend.h"

#include <curl/curl.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

wk_state wk_worker_state(wk_worker *w) { return (wk_state)atomic_load(&w->state); }

int wk_worker_busy(wk_worker *w) {
    int q = 0, a = 0;
    if (w->def->load_stats) w->def->load_stats(w->def->user, &q, &a);
    return q + a;
}

const char *wk_worker_state_name(wk_worker *w) {
    switch (wk_worker_state(w)) {
    case WK_STATE_LOADING: return "loading";
    case WK_STATE_ERROR: return "error";
    case WK_STATE_STOPPING: return "stopping";
    default: break;
    }
    return wk_worker_busy(w) > 0 ? "busy" : "idle";
}

bool wk_reply_not_ready(wk_req *r, wk_worker *w) {
    wk_state st = wk_worker_state(w);
    if (st == WK_STATE_LOADING) return wk_reply_unavailable(r, "MODEL_LOADING", "the model is still loading");
    if (st == WK_STATE_STOPPING) return wk_reply_unavailable(r, "SHUTTING_DOWN", "the worker is shutting down");
    return wk_reply_error(r, 500, "MODEL_LOAD_FAILED", "server_error", w->load_error);
}

static void derive_model_id(wk_worker *w) {
    if (w->cfg.model_ref && *w->cfg.model_ref) {
        snprintf(w->model_id, sizeof w->model_id, "%s", w->cfg.model_ref);
        return;
    }
    if (!w->cfg.model_path) {
        snprintf(w->model_id, sizeof w->model_id, "rbee-default");
        return;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", w->model_path);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = '\0';
    const char *base = strrchr(tmp, '/');
    base = base ? base + 1 : tmp;
    wk_utf8_sanitize(base, w->model_id, sizeof w->model_id); /* a file name need not be UTF-8; answers must */
}

static const char *hive_status(void *user) {
    wk_worker *w = user;
    switch (wk_worker_state(w)) {
    case WK_STATE_LOADING:
    case WK_STATE_ERROR: return "starting";
    case WK_STATE_STOPPING: return "stopping";
    default: break;
    }
    return wk_worker_busy(w) > 0 ? "busy" : "ready";
}

/* Waits up to ms for SIGTERM/SIGINT; returns the signal or 0. */
static int wait_signal(const sigset_t *set, int64_t ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    int sig = sigtimedwait(set, NULL, &ts);
    return sig > 0 ? sig : 0;
}

static void housekeeping(wk_worker *w) {
    size_t reaped = wk_jobs_reap(&w->jobs, wk_now_ms(), w->cfg.job_ttl_ms);
#if defined(__GLIBC__)
    if (reaped > 0 && wk_worker_busy(w) == 0) malloc_trim(0);
#else
    (void)reaped;
#endif
}

static void write_port_file(wk_worker *w) {
    if (!w->cfg.port_file) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", w->cfg.port_file);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", w->port) < 0 || fclose(f) != 0 || rename(tmp, w->cfg.port_file) != 0)
        WK_WARN(&w->log, "port_file", "cannot write %s: %s", w->cfg.port_file, strerror(errno));
}

static double gauge_jobs(void *user) { return (double)wk_jobs_count(&((wk_worker *)user)->jobs); }
static double gauge_rss(void *user) {
    (void)user;
    return (double)wk_process_rss();
}
static double gauge_ready(void *user) { return wk_worker_state(user) == WK_STATE_READY; }

/* ---- the load and memory gauges every model worker shows (wk_worker_def) ---- */

static double gauge_queue(void *user) {
    wk_worker *w = user;
    int q = 0, a = 0;
    w->def->load_stats(w->def->user, &q, &a);
    return q;
}
static double gauge_active(void *user) {
    wk_worker *w = user;
    int q = 0, a = 0;
    w->def->load_stats(w->def->user, &q, &a);
    return a;
}
static double gauge_queue_cap(void *user) { return (double)((wk_worker *)user)->cfg.queue_depth; }

/* The model's memory, only while it is surely loaded (not during the load). */
static bool model_memory(wk_worker *w, uint64_t *bytes, rb_backend **be) {
    wk_state st = wk_worker_state(w);
    *bytes = 0;
    *be = NULL;
    return (st == WK_STATE_READY || st == WK_STATE_STOPPING) && w->def->memory(w->def->user, bytes, be);
}
static double gauge_model_bytes(void *user) {
    uint64_t bytes;
    rb_backend *be;
    return model_memory(user, &bytes, &be) ? (double)bytes : 0.0;
}
static bool device_info(wk_worker *w, rb_device_info *di) {
    uint64_t bytes;
    rb_backend *be;
    memset(di, 0, sizeof *di);
    return model_memory(w, &bytes, &be) && be && rb_backend_device_info(be, di) == RB_OK;
}
static double gauge_dev_total(void *user) {
    rb_device_info di;
    return device_info(user, &di) ? (double)di.mem_total : 0.0;
}
static double gauge_dev_used(void *user) {
    rb_device_info di;
    if (!device_info(user, &di)) return 0.0;
    return (double)(di.mem_total - (di.mem_free < di.mem_total ? di.mem_free : di.mem_total));
}

static void add_model_gauges(wk_worker *w, const wk_worker_def *def) {
    wk_metrics *m = &w->metrics;
    if (def->submit)
        w->queue_full = wk_metrics_counter(m, "llorch_rejected_queue_full_total",
                                           "Requests answered 503 because the queue was full.", NULL);
    if (def->load_stats && def->active_metric) {
        wk_metrics_gauge_fn(m, "llorch_queue_depth", def->queue_help, gauge_queue, w);
        wk_metrics_gauge_fn(m, "llorch_queue_capacity", "Queue size before requests get 503.", gauge_queue_cap, w);
        wk_metrics_gauge_fn(m, def->active_metric, def->active_help, gauge_active, w);
    }
    if (def->memory) {
        wk_metrics_gauge_fn(m, "llorch_model_bytes", "Bytes of model weights.", gauge_model_bytes, w);
        wk_metrics_gauge_fn(m, "llorch_device_memory_total_bytes", "Device memory, total.", gauge_dev_total, w);
        wk_metrics_gauge_fn(m, "llorch_device_memory_used_bytes", "Device memory in use (total - free).",
                            gauge_dev_used, w);
    }
}

/* Checks the configuration against the build; false (message printed) to exit 2. */
static bool startup_checks(const wk_worker_def *def, const wk_config *cfg) {
    /* a GPU backend is a module loaded at run time: say now, in one line, when it cannot be */
    if (strcmp(cfg->backend, "cpu") != 0) {
        char path[4096];
        rb_error err;
        rb_error_clear(&err);
        if (rb_backend_module_probe(strcmp(cfg->backend, "cuda") == 0 ? RB_DEVICE_CUDA : RB_DEVICE_ROCM, path,
                                    sizeof path, &err) != RB_OK) {
            fprintf(stderr, "%s: %s; %s-cpu runs on the CPU\n", def->name, err.msg, def->name);
            return false;
        }
    }
    /* every JSON answer carries these: they must be text */
    const char *texts[][2] = {{"--worker-id", cfg->worker_id}, {"--model-ref", cfg->model_ref}};
    for (int i = 0; i < 2; i++)
        if (texts[i][1] && !wk_utf8_valid(texts[i][1], strlen(texts[i][1]), NULL)) {
            fprintf(stderr, "%s: %s is not valid UTF-8\n", def->name, texts[i][0]);
            return false;
        }
    if (!cfg->local_mode && !cfg->api_token) {
        fprintf(stderr, "%s: refusing to start without authentication: set RBEE_API_TOKEN (or LLORCH_API_TOKEN), "
                        "or pass --local-mode to serve on 127.0.0.1 only\n",
                def->name);
        return false;
    }
    return true;
}

static rb_status init(wk_worker *w, const wk_worker_def *def, rb_error *err) {
    wk_log_init(&w->log, stderr, w->cfg.log_json, WK_LOG_INFO, def->name);
    wk_metrics_init(&w->metrics);
    wk_jobs_init(&w->jobs);
    wk_router_init(&w->router);
    atomic_init(&w->state, WK_STATE_LOADING);
    snprintf(w->device, sizeof w->device, "%s:%lld", w->cfg.backend, (long long)w->cfg.device);
    if (w->cfg.model_path) {
        snprintf(w->model_path, sizeof w->model_path, "%s", w->cfg.model_path);
    } else if (def->default_model && !def->default_model(w->model_path, sizeof w->model_path)) {
        return rb_error_set(err, RB_E_NOT_FOUND, "no --model given and the bundled default model was not found: %s",
                            w->model_path);
    }
    derive_model_id(w);
    wk_metrics_gauge_fn(&w->metrics, "llorch_jobs_tracked", "Jobs held by the job table.", gauge_jobs, w);
    wk_metrics_gauge_fn(&w->metrics, "llorch_process_resident_bytes", "Resident set size of the worker.", gauge_rss,
                        w);
    wk_metrics_gauge_fn(&w->metrics, "llorch_ready", "1 when the model is loaded and the worker accepts jobs.",
                        gauge_ready, w);
    add_model_gauges(w, def);
    rb_status s;
    if ((s = wk_routes_info_add(w, err)) != RB_OK) return s;
    if ((s = wk_routes_jobs_add(w, err)) != RB_OK) return s;
    if (def->setup && (s = def->setup(w, def->user, err)) != RB_OK) return s;
    return RB_OK;
}

static void drain(wk_worker *w, const sigset_t *set, int sig) {
    WK_INFO(&w->log, "shutdown", "received %s: draining (deadline %lld ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
            (long long)w->cfg.drain_timeout_ms);
    atomic_store(&w->state, WK_STATE_STOPPING);
    wk_http_quiesce(w->http);
    if (w->def->stop_accepting) w->def->stop_accepting(w->def->user);
    wk_hive_kick(w->hive);
    double deadline = wk_now_ms() + (double)w->cfg.drain_timeout_ms;
    for (;;) {
        int q = 0, a = 0;
        if (w->def->load_stats) w->def->load_stats(w->def->user, &q, &a);
        if (q + a == 0) break;
        if (wk_now_ms() >= deadline) {
            WK_WARN(&w->log, "shutdown", "drain deadline reached with %d running and %d queued; cancelling", a, q);
            break;
        }
        if (wait_signal(set, 50)) {
            WK_WARN(&w->log, "shutdown", "second signal: cancelling running requests");
            break;
        }
    }
    if (w->def->stop) w->def->stop(w->def->user); /* cancels whatever is left; streams then end */
    /* Let streams flush their last events before connections close. */
    double flush_deadline = wk_now_ms() + 2000.0;
    while (wk_http_connections(w->http) > 0 && wk_now_ms() < flush_deadline) wk_sleep_ms(20);
    WK_INFO(&w->log, "shutdown", "stopped; bye");
}

static int run(wk_worker *w, const sigset_t *set) {
    const wk_worker_def *def = w->def;
    rb_error err;
    rb_error_clear(&err);
    if (init(w, def, &err) != RB_OK) {
        WK_ERROR(&w->log, "startup_failed", "%s", err.msg);
        return 1;
    }
    wk_http_opts ho = {.cfg = &w->cfg, .router = &w->router, .metrics = &w->metrics, .log = &w->log};
    if (wk_http_start(&ho, &w->http, &w->port, &err) != RB_OK) {
        WK_ERROR(&w->log, "listen_failed", "%s", err.msg);
        return 1;
    }
    wk_log_event(&w->log, WK_LOG_INFO, "listening",
                 json_pack("{s:i,s:s,s:b,s:b,s:b}", "port", w->port, "worker_id", w->cfg.worker_id, "local_mode",
                           w->cfg.local_mode, "auth", w->cfg.api_token != NULL, "tls", w->cfg.tls_cert != NULL),
                 "%s %s listening on %s://%s:%d", def->name, def->version ? def->version : "",
                 w->cfg.tls_cert ? "https" : "http", wk_http_listen_host(w->http), w->port);
    write_port_file(w);
    wk_hive_opts ho2 = {.hive_url = w->cfg.hive_url, .callback_url = w->cfg.callback_url,
                        .worker_id = w->cfg.worker_id, .model_id = w->model_id, .device = w->device,
                        .version = def->version, .implementation = def->name, .port = w->port,
                        .interval_ms = w->cfg.heartbeat_ms, .api_token = w->cfg.api_token};
    if (wk_hive_start(&ho2, hive_status, w, &w->log, &w->hive) != 0)
        WK_WARN(&w->log, "hive", "cannot start the heartbeat thread; serving without it");
    if (def->load(w, def->user, &err) != RB_OK) {
        snprintf(w->load_error, sizeof w->load_error, "%s", err.msg);
        atomic_store(&w->state, WK_STATE_ERROR);
        WK_ERROR(&w->log, "model_load_failed", "%s", err.msg);
        return 1;
    }
    atomic_store(&w->state, WK_STATE_READY);
    wk_hive_notify_ready(w->hive);
    int sig = 0;
    while (!(sig = wait_signal(set, 200))) housekeeping(w);
    drain(w, set, sig);
    return 0;
}

int wk_worker_main(const wk_worker_def *def, int argc, char **argv) {
    /* Signals are taken synchronously by this thread only. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* a connection is a descriptor: the soft limit (often 1024) would cap
     * --max-connections below what it says */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    wk_worker *w = calloc(1, sizeof *w);
    if (!w) {
        fprintf(stderr, "%s: out of memory\n", def->name);
        return 1;
    }
    w->def = def;
    wk_config_defaults(&w->cfg, def->name);
    wk_config_info ci = {.name = def->name, .version = def->version, .summary = def->summary, .opts = def->opts,
                         .n_opts = def->n_opts, .env_help = def->env_help, .max_body_default = def->max_body_default};
    int pr = wk_config_parse(&w->cfg, &ci, argc, argv);
    if (pr != 0 || !startup_checks(def, &w->cfg)) {
        if (def->destroy) def->destroy(def->user);
        free(w);
        return pr == 1 ? 0 : 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = run(w, &set);
    wk_http_stop(w->http); /* no handler runs past this point */
    w->http = NULL;
    if (def->stop) def->stop(def->user);
    wk_hive_stop(w->hive); /* final "stopping" heartbeat */
    w->hive = NULL;
    wk_jobs_destroy(&w->jobs);
    if (def->destroy) def->destroy(def->user);
    wk_router_destroy(&w->router);
    wk_metrics_destroy(&w->metrics);
    wk_log_destroy(&w->log);
    free(w);
    curl_global_cleanup();
    return rc;
}

/* Implementation of srv_worker.h: the worker's lifecycle. The HTTP server
 * comes up first (so /health and /v1/ready answer while loading), then the
 * model is loaded and warmed up, the inference engine starts, the hive is
 * told, and the main thread waits for SIGTERM/SIGINT while it reaps
 * finished jobs. Shutdown stops accepting, drains running requests up to a
 * deadline, sends a final "stopping" heartbeat and returns 0. */
#include "server/srv_worker.h"
#include "server/srv_http.h"
#include "server/srv_util.h"

#include "rbee/gguf.h"

#include <curl/curl.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#ifndef RBEE_VERSION
#define RBEE_VERSION "0.0.0"
#endif

const char *srv_worker_state_name(srv_worker *w) {
    switch (atomic_load(&w->state)) {
    case SRV_STATE_LOADING: return "loading";
    case SRV_STATE_ERROR: return "error";
    case SRV_STATE_STOPPING: return "stopping";
    default: break;
    }
    int q = 0, a = 0;
    srv_worker_engine_stats(w, &q, &a);
    return q + a > 0 ? "busy" : "idle";
}

rb_status srv_worker_submit(srv_worker *w, srv_job *j) {
    pthread_rwlock_rdlock(&w->engine_lock);
    rb_status s = w->engine ? srv_engine_submit(w->engine, j) : RB_E_UNSUPPORTED;
    pthread_rwlock_unlock(&w->engine_lock);
    return s;
}

void srv_worker_engine_stats(srv_worker *w, int *queued, int *active) {
    *queued = *active = 0;
    pthread_rwlock_rdlock(&w->engine_lock);
    if (w->engine) srv_engine_stats(w->engine, queued, active);
    pthread_rwlock_unlock(&w->engine_lock);
}

void srv_worker_poke(srv_worker *w) {
    pthread_rwlock_rdlock(&w->engine_lock);
    if (w->engine) srv_engine_poke(w->engine);
    pthread_rwlock_unlock(&w->engine_lock);
}

static void derive_model_id(srv_worker *w) {
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
    size_t bl = strlen(base);
    if (bl >= sizeof w->model_id) bl = sizeof w->model_id - 1;
    memcpy(w->model_id, base, bl);
    w->model_id[bl] = '\0';
}

rb_status srv_worker_init(srv_worker *w, const srv_config *cfg, rb_error *err) {
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    srv_log_init(&w->log, stderr, cfg->log_json, SRV_LOG_INFO);
    srv_metrics_init(&w->metrics);
    srv_jobs_init(&w->jobs);
    pthread_rwlock_init(&w->engine_lock, NULL);
    atomic_init(&w->state, SRV_STATE_LOADING);
    snprintf(w->device, sizeof w->device, "%s:%d", cfg->backend, cfg->device);
    if (cfg->model_path) snprintf(w->model_path, sizeof w->model_path, "%s", cfg->model_path);
    else if (!srv_default_model_path(w->model_path, sizeof w->model_path))
        return rb_error_set(err, RB_E_NOT_FOUND,
                            "no --model given and the bundled default model was not found (looked for %s); set "
                            "RBEE_DEFAULT_MODEL or pass --model",
                            w->model_path);
    derive_model_id(w);
    return RB_OK;
}

static bool file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static rb_status load_tokenizer(srv_worker *w, rb_error *err) {
    const rb_gguf *g = rb_model_gguf(w->model);
    if (g) return rb_tokenizer_load_gguf(g, &w->tok, err);
    char tj[4200], tc[4200];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", w->model_path);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", w->model_path);
    if (!file_exists(tj)) return rb_error_set(err, RB_E_NOT_FOUND, "%s has no tokenizer.json", w->model_path);
    return rb_tokenizer_load_hf(tj, file_exists(tc) ? tc : NULL, &w->tok, err);
}

static void warmup(srv_worker *w) {
    rb_error err;
    rb_error_clear(&err);
    rb_kv_cache *kv = NULL;
    const rb_model_config *mc = rb_model_get_config(w->model);
    float *logits = malloc(sizeof(float) * (size_t)mc->n_vocab);
    double t0 = srv_now_ms();
    int32_t toks[2] = {rb_tokenizer_bos(w->tok) >= 0 ? rb_tokenizer_bos(w->tok) : 0, 0};
    if (logits && rb_kv_cache_create(w->model, 8, RB_F16, &kv, &err) == RB_OK &&
        rb_model_forward(w->model, kv, toks, 2, false, logits, &err) == RB_OK)
        SRV_INFO(&w->log, "warmup", "warmup done in %.1f ms", srv_now_ms() - t0);
    else
        SRV_WARN(&w->log, "warmup_failed", "warmup failed: %s", err.msg);
    rb_kv_cache_free(kv);
    free(logits);
}

rb_status srv_worker_load(srv_worker *w, rb_error *err) {
    rb_status s;
    char spec[64];
    if (strcmp(w->cfg.backend, "cpu") == 0) snprintf(spec, sizeof spec, "cpu");
    else snprintf(spec, sizeof spec, "%s:%d", w->cfg.backend, w->cfg.device);
    rb_backend_config bc = {.n_threads = w->cfg.threads, .cpu_isa = NULL};
    double t0 = srv_now_ms();
    SRV_INFO(&w->log, "model_load", "loading %s on %s", w->model_path, spec);
    if ((s = rb_backend_create(spec, &bc, &w->be, err)) != RB_OK) return s;
    SRV_INFO(&w->log, "model_load", "backend %s ready; reading weights", rb_backend_name(w->be));
    if ((s = rb_model_load(w->model_path, w->be, NULL, &w->model, err)) != RB_OK) return s;
    const rb_model_config *mc = rb_model_get_config(w->model);
    srv_log_event(&w->log, SRV_LOG_INFO, "model_load",
                  json_pack("{s:s,s:I,s:I,s:s}", "arch", rb_arch_name(mc->arch), "weight_bytes",
                            (json_int_t)rb_model_weight_bytes(w->model), "n_layer", (json_int_t)mc->n_layer, "dtype",
                            rb_dtype_name(rb_model_weight_dtype(w->model))),
                  "weights loaded in %.0f ms; loading the tokenizer", srv_now_ms() - t0);
    if ((s = load_tokenizer(w, err)) != RB_OK) return rb_error_prefix(err, "tokenizer: ");
    if ((s = srv_chat_init(&w->chat, w->tok, err)) != RB_OK) return s;
    w->chat_ok = true;
    int64_t ctx = w->cfg.ctx_size;
    if (ctx <= 0) ctx = mc->n_ctx_train > 0 && mc->n_ctx_train < 4096 ? mc->n_ctx_train : 4096;
    w->ctx_size = ctx;
    if (!w->cfg.no_warmup) warmup(w);
    srv_engine_opts eo = {.parallel = w->cfg.parallel, .ctx_size = ctx, .queue_depth = w->cfg.queue_depth, .step = NULL};
    srv_engine *e = NULL;
    if ((s = srv_engine_create(w->model, w->tok, &eo, &w->log, &w->metrics, &e, err)) != RB_OK) return s;
    if ((s = srv_engine_start(e, err)) != RB_OK) {
        srv_engine_destroy(e);
        return s;
    }
    pthread_rwlock_wrlock(&w->engine_lock);
    w->engine = e;
    pthread_rwlock_unlock(&w->engine_lock);
    SRV_INFO(&w->log, "model_ready", "model %s ready in %.0f ms (context %lld x %d sequences, queue %d)", w->model_id,
             srv_now_ms() - t0, (long long)ctx, w->cfg.parallel, w->cfg.queue_depth);
    return RB_OK;
}

static void stop_engine(srv_worker *w) {
    pthread_rwlock_wrlock(&w->engine_lock);
    srv_engine *e = w->engine;
    w->engine = NULL;
    pthread_rwlock_unlock(&w->engine_lock);
    srv_engine_destroy(e);
}

void srv_worker_destroy(srv_worker *w) {
    srv_http_stop(w);
    stop_engine(w);
    srv_jobs_destroy(&w->jobs);
    if (w->chat_ok) srv_chat_destroy(&w->chat);
    rb_tokenizer_free(w->tok);
    rb_model_free(w->model);
    if (w->be) rb_backend_destroy(w->be);
    pthread_rwlock_destroy(&w->engine_lock);
    srv_metrics_destroy(&w->metrics);
    srv_log_destroy(&w->log);
}

static const char *hive_status(void *user) {
    srv_worker *w = user;
    switch (atomic_load(&w->state)) {
    case SRV_STATE_LOADING: return "starting";
    case SRV_STATE_STOPPING: return "stopping";
    case SRV_STATE_ERROR: return "starting";
    default: break;
    }
    int q = 0, a = 0;
    srv_worker_engine_stats(w, &q, &a);
    return q + a > 0 ? "busy" : "ready";
}

/* Waits up to ms for SIGTERM/SIGINT; returns the signal or 0. */
static int wait_signal(const sigset_t *set, int64_t ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    int sig = sigtimedwait(set, NULL, &ts);
    return sig > 0 ? sig : 0;
}

static void housekeeping(srv_worker *w) {
    size_t reaped = srv_jobs_reap(&w->jobs, srv_now_ms(), w->cfg.job_ttl_ms);
#if defined(__GLIBC__)
    int q = 0, a = 0;
    srv_worker_engine_stats(w, &q, &a);
    if (reaped > 0 && q + a == 0) malloc_trim(0);
#else
    (void)reaped;
#endif
}

static void write_port_file(srv_worker *w) {
    if (!w->cfg.port_file) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", w->cfg.port_file);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", w->port) < 0 || fclose(f) != 0 || rename(tmp, w->cfg.port_file) != 0)
        SRV_WARN(&w->log, "port_file", "cannot write %s: %s", w->cfg.port_file, strerror(errno));
}

static bool backend_compiled(const char *list, const char *kind) {
    size_t n = strlen(kind);
    for (const char *p = list; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && strncmp(p, kind, n) == 0) return true;
        p = comma ? comma + 1 : NULL;
    }
    return false;
}

int srv_worker_main(const srv_config *cfg) {
    /* Signals are taken synchronously by this thread only. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    srv_worker *w = calloc(1, sizeof *w);
    if (!w) {
        fprintf(stderr, "llm-worker-rbee: out of memory\n");
        return 1;
    }
    rb_error err;
    rb_error_clear(&err);
    const char *compiled = rb_backends_compiled();
    if (!backend_compiled(compiled, cfg->backend)) {
        fprintf(stderr,
                "llm-worker-rbee: the %s backend is not compiled into this binary (compiled backends: %s); use "
                "llm-worker-rbee-cpu or rebuild with -DRBEE_%s=ON\n",
                cfg->backend, compiled, strcmp(cfg->backend, "cuda") == 0 ? "CUDA" : "HIP");
        free(w);
        return 2;
    }
    if (!cfg->local_mode && !cfg->api_token) {
        fprintf(stderr, "llm-worker-rbee: refusing to start without authentication: set LLORCH_API_TOKEN, or pass "
                        "--local-mode to serve on 127.0.0.1 only\n");
        free(w);
        return 2;
    }
    if (srv_worker_init(w, cfg, &err) != RB_OK) {
        fprintf(stderr, "llm-worker-rbee: %s\n", err.msg);
        srv_worker_destroy(w);
        free(w);
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = 0;
    if (srv_http_start(w, &err) != RB_OK) {
        SRV_ERROR(&w->log, "listen_failed", "%s", err.msg);
        rc = 1;
        goto out;
    }
    srv_log_event(&w->log, SRV_LOG_INFO, "listening",
                  json_pack("{s:i,s:s,s:b,s:b}", "port", w->port, "worker_id", w->cfg.worker_id, "local_mode",
                            w->cfg.local_mode, "auth", w->cfg.api_token != NULL),
                  "llm-worker-rbee %s listening on %s:%d", RBEE_VERSION,
                  w->cfg.bind_addr ? w->cfg.bind_addr : w->cfg.local_mode ? "127.0.0.1" : "0.0.0.0", w->port);
    write_port_file(w);
    srv_hive_opts ho = {.hive_url = cfg->hive_url, .callback_url = cfg->callback_url, .worker_id = cfg->worker_id,
                        .model_id = w->model_id, .device = w->device, .version = RBEE_VERSION, .port = w->port,
                        .interval_ms = cfg->heartbeat_ms, .api_token = cfg->api_token};
    if (srv_hive_start(&ho, hive_status, w, &w->log, &w->hive) != 0)
        SRV_WARN(&w->log, "hive", "cannot start the heartbeat thread; serving without it");

    if (srv_worker_load(w, &err) != RB_OK) {
        snprintf(w->load_error, sizeof w->load_error, "%s", err.msg);
        atomic_store(&w->state, SRV_STATE_ERROR);
        SRV_ERROR(&w->log, "model_load_failed", "%s", err.msg);
        rc = 1;
        goto out;
    }
    atomic_store(&w->state, SRV_STATE_READY);
    srv_hive_notify_ready(w->hive);

    int sig = 0;
    while (!(sig = wait_signal(&set, 200))) housekeeping(w);

    /* Graceful shutdown. */
    SRV_INFO(&w->log, "shutdown", "received %s: draining (deadline %lld ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
             (long long)cfg->drain_timeout_ms);
    atomic_store(&w->state, SRV_STATE_STOPPING);
    srv_http_quiesce(w);
    pthread_rwlock_rdlock(&w->engine_lock);
    if (w->engine) srv_engine_stop_accepting(w->engine);
    pthread_rwlock_unlock(&w->engine_lock);
    srv_hive_kick(w->hive);
    double deadline = srv_now_ms() + (double)cfg->drain_timeout_ms;
    for (;;) {
        int q = 0, a = 0;
        srv_worker_engine_stats(w, &q, &a);
        if (q + a == 0) break;
        if (srv_now_ms() >= deadline) {
            SRV_WARN(&w->log, "shutdown", "drain deadline reached with %d running and %d queued; cancelling", a, q);
            break;
        }
        if (wait_signal(&set, 50)) {
            SRV_WARN(&w->log, "shutdown", "second signal: cancelling running requests");
            break;
        }
    }
    stop_engine(w); /* cancels whatever is left; streams then end */
    /* Let streams flush their last events before connections close. */
    double flush_deadline = srv_now_ms() + 2000.0;
    while (srv_http_connections(w) > 0 && srv_now_ms() < flush_deadline) srv_sleep_ms(20);
    SRV_INFO(&w->log, "shutdown", "stopped; bye");
out:
    srv_http_stop(w);
    srv_hive_stop(w->hive); /* final "stopping" heartbeat */
    w->hive = NULL;
    srv_worker_destroy(w);
    free(w);
    curl_global_cleanup();
    return rc;
}

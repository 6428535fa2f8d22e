/* echo-worker-rbee: a minimal worker built on the shared worker layer
 * (src/worker) alone, as proof that a worker needs nothing from the LLM
 * side. POST /v1/jobs {"n": N, "text": T} queues a job whose stream carries
 * N "echo" events {"i", "text"} a few milliseconds apart, then "end";
 * POST /v1/echo streams the same directly. It declares a public page at /,
 * takes --load-delay-ms to make its "model load" slow (for readiness tests)
 * and --event-delay-ms for the pace. One executor thread runs jobs in
 * order, honouring cancellation between events. */
#include "worker/wk_request.h"
#include "worker/wk_sse.h"
#include "worker/wk_util.h"
#include "worker/wk_worker.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct echo_task {
    int64_t n;
    char *text;
} echo_task;

typedef struct echo_worker {
    wk_worker *w;
    int64_t load_delay_ms, event_delay_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    wk_job **queue;
    int q_n, q_cap;
    wk_job *running;
    bool accepting, stop, started;
    pthread_t th;
} echo_worker;

static const char page[] = "<!doctype html><title>echo</title><p>echo-worker-rbee</p>\n";

static void free_task(void *p) {
    echo_task *t = p;
    if (t) free(t->text);
    free(t);
}

static void describe(const wk_job *j, json_t *o) {
    json_object_set_new(o, "n", json_integer((json_int_t)((const echo_task *)j->payload)->n));
}

static const wk_job_kind echo_kind = {.free_payload = free_task, .describe = describe};

static void poke(void *user) {
    echo_worker *e = user;
    pthread_mutex_lock(&e->mu);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void run_job(echo_worker *e, wk_job *j) {
    const echo_task *t = j->payload;
    wk_job_start(j, json_pack("{s:I}", "n", (json_int_t)t->n));
    for (int64_t i = 0; i < t->n; i++) {
        if (wk_job_cancel_requested(j)) {
            wk_job_end(j, json_pack("{s:s,s:I}", "stop_reason", "CANCELLED", "events", (json_int_t)i));
            return;
        }
        if (!wk_job_push(j, "echo", json_pack("{s:I,s:s}", "i", (json_int_t)i, "text", t->text), NULL, 0)) {
            wk_job_fail(j, "OUT_OF_MEMORY", "out of memory");
            return;
        }
        wk_sleep_ms(e->event_delay_ms);
    }
    wk_job_end(j, json_pack("{s:s,s:I}", "stop_reason", "DONE", "events", (json_int_t)t->n));
}

static void *executor(void *arg) {
    echo_worker *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && e->q_n == 0) pthread_cond_wait(&e->cv, &e->mu);
        if (e->q_n == 0) { /* stopping with nothing left */
            pthread_mutex_unlock(&e->mu);
            return NULL;
        }
        wk_job *j = e->queue[0];
        memmove(e->queue, e->queue + 1, sizeof *e->queue * (size_t)(e->q_n - 1));
        e->q_n--;
        if (e->stop) wk_job_cancel(j);
        e->running = j;
        pthread_mutex_unlock(&e->mu);
        run_job(e, j);
        pthread_mutex_lock(&e->mu);
        e->running = NULL;
        pthread_mutex_unlock(&e->mu);
        wk_job_unref(j);
    }
}

/* Parses the body into a new job; replies and returns NULL on bad input. */
static wk_job *make_job(wk_req *r, echo_worker *e) {
    if (wk_worker_state(e->w) != WK_STATE_READY) {
        wk_reply_not_ready(r, e->w);
        return NULL;
    }
    wk_errors errs = {.n = 0};
    size_t len = 0;
    const char *b = wk_req_body(r, &len);
    json_t *body = wk_parse_body(b, len, &errs);
    int64_t n = 3;
    const char *text = "echo";
    if (body) {
        wk_get_int(body, "n", 0, 100000, &n, &errs);
        wk_get_string(body, "text", 1000, &text, &errs);
    }
    echo_task *t = errs.n == 0 ? calloc(1, sizeof *t) : NULL;
    if (t) {
        t->n = n;
        t->text = strdup(text);
    }
    json_decref(body);
    if (errs.n > 0) {
        free_task(t);
        wk_reply_invalid(r, &errs);
        return NULL;
    }
    wk_job *j = t && t->text ? wk_job_new(&echo_kind, "echo-", t) : NULL;
    if (!j) {
        if (t && !t->text) free_task(t);
        wk_reply_error(r, 500, "INTERNAL", "server_error", "out of memory");
        return NULL;
    }
    wk_job_set_cancel_hook(j, poke, e);
    pthread_mutex_lock(&e->mu);
    /* queue_depth jobs may wait beyond a free executor */
    bool full = e->q_n >= e->q_cap - (e->running ? 1 : 0), closed = !e->accepting;
    if (!full && !closed) {
        e->queue[e->q_n++] = wk_job_ref(j);
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (full || closed) {
        wk_job_unref(j);
        if (closed) wk_reply_not_ready(r, e->w);
        else wk_reply_unavailable(r, "QUEUE_FULL", "the request queue is full; retry later");
        return NULL;
    }
    return j;
}

static bool route_jobs(wk_req *r, void *ctx) {
    echo_worker *e = ctx;
    wk_job *j = make_job(r, e);
    if (!j) return true;
    bool ok = wk_jobs_add(&e->w->jobs, j);
    if (!ok) wk_job_cancel(j);
    char url[160];
    snprintf(url, sizeof url, "/v1/jobs/%s/stream", j->id);
    bool ret = ok ? wk_reply_json(r, 200, json_pack("{s:s,s:s}", "job_id", j->id, "sse_url", url))
                  : wk_reply_error(r, 500, "INTERNAL", "server_error", "out of memory");
    wk_job_unref(j);
    return ret;
}

static bool route_echo(wk_req *r, void *ctx) {
    wk_job *j = make_job(r, ctx);
    if (!j) return true;
    bool ret = wk_sse_reply(r, j, NULL, NULL);
    wk_job_unref(j);
    return ret;
}

static rb_status setup(wk_worker *w, void *user, rb_error *err) {
    echo_worker *e = user;
    e->w = w;
    e->q_cap = (int)w->cfg.queue_depth + 1;
    e->queue = calloc((size_t)e->q_cap, sizeof *e->queue);
    if (!e->queue) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    rb_status s;
    if ((s = wk_router_add(&w->router, "POST", "/v1/jobs", route_jobs, e, NULL, 0, err)) != RB_OK ||
        (s = wk_router_add(&w->router, "POST", "/v1/echo", route_echo, e, NULL, 0, err)) != RB_OK ||
        (s = wk_router_add_static(&w->router, "/", "text/html; charset=utf-8", page, sizeof page - 1, err)) != RB_OK)
        return s;
    return RB_OK;
}

static rb_status load(wk_worker *w, void *user, rb_error *err) {
    echo_worker *e = user;
    WK_INFO(&w->log, "model_load", "loading for %lld ms", (long long)e->load_delay_ms);
    wk_sleep_ms(e->load_delay_ms);
    e->accepting = true;
    if (pthread_create(&e->th, NULL, executor, e) != 0)
        return rb_error_set(err, RB_E_NOMEM, "cannot start the executor thread");
    e->started = true;
    return RB_OK;
}

static void load_stats(void *user, int *queued, int *active) {
    echo_worker *e = user;
    pthread_mutex_lock(&e->mu);
    *queued = e->q_n;
    *active = e->running != NULL;
    pthread_mutex_unlock(&e->mu);
}

static void stop_accepting(void *user) {
    echo_worker *e = user;
    pthread_mutex_lock(&e->mu);
    e->accepting = false;
    pthread_mutex_unlock(&e->mu);
}

static void stop(void *user) {
    echo_worker *e = user;
    pthread_mutex_lock(&e->mu);
    e->accepting = false;
    e->stop = true;
    if (e->running) wk_job_cancel(e->running);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->started) pthread_join(e->th, NULL);
    e->started = false;
}

static void info(void *user, json_t *j, bool loaded) {
    echo_worker *e = user;
    json_object_set_new(j, "event_delay_ms", json_integer((json_int_t)e->event_delay_ms));
    json_object_set_new(j, "loaded", json_boolean(loaded));
}

static void destroy(void *user) {
    echo_worker *e = user;
    stop(e);
    for (int i = 0; i < e->q_n; i++) wk_job_unref(e->queue[i]);
    free(e->queue);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
}

int main(int argc, char **argv) {
    echo_worker e;
    memset(&e, 0, sizeof e);
    e.event_delay_ms = 5;
    pthread_mutex_init(&e.mu, NULL);
    pthread_cond_init(&e.cv, NULL);
    const wk_opt opts[] = {
        {"load-delay-ms", WK_OPT_INT, &e.load_delay_ms, 0, 600000, "N", "pretend the model takes N ms to load"},
        {"event-delay-ms", WK_OPT_INT, &e.event_delay_ms, 0, 10000, "N", "pause between events (default 5)"},
    };
    const wk_worker_def def = {
        .name = "echo-worker-rbee",
        .version = "0.0.0",
        .summary = "A test worker on the shared worker layer: streams N echo events per job.",
        .opts = opts,
        .n_opts = 2,
        .user = &e,
        .setup = setup,
        .load = load,
        .load_stats = load_stats,
        .stop_accepting = stop_accepting,
        .stop = stop,
        .info = info,
        .destroy = destroy,
    };
    return wk_worker_main(&def, argc, argv);
}

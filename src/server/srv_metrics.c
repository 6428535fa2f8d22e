/* Implementation of srv_metrics.h. */
#include "server/srv_metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const int k_status_codes[SRV_METRICS_STATUS_SLOTS] = {200, 400, 401, 404, 405, 409, 413, 500, 503, 0, 0, 0};

const char *srv_route_label(srv_route r) {
    static const char *const names[SRV_ROUTE_COUNT_] = {
        "/health", "/v1/ready", "/v1/info", "/metrics", "/v1/jobs", "/v1/inference", "/v1/jobs/{id}/stream",
        "DELETE /v1/jobs/{id}", "/v1/models", "/v1/completions", "/v1/chat/completions", "other"};
    return (unsigned)r < SRV_ROUTE_COUNT_ ? names[r] : "other";
}

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void srv_metrics_destroy(srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

static int status_slot(int status) {
    for (int i = 0; i < SRV_METRICS_STATUS_SLOTS; i++)
        if (k_status_codes[i] == status) return i;
    return SRV_METRICS_STATUS_SLOTS - 1; /* "other" */
}

void srv_metrics_request(srv_metrics *m, srv_route r, int http_status) {
    if ((unsigned)r >= SRV_ROUTE_COUNT_) r = SRV_ROUTE_UNKNOWN;
    pthread_mutex_lock(&m->mu);
    m->requests[r][status_slot(http_status)]++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_prefill(srv_metrics *m, uint64_t tokens, double ms) {
    pthread_mutex_lock(&m->mu);
    m->tokens_in += tokens;
    m->prefill_tokens += tokens;
    m->prefill_ms += ms;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_decode_step(srv_metrics *m, uint64_t tokens, double ms, double now_ms) {
    pthread_mutex_lock(&m->mu);
    m->decode_tokens += tokens;
    m->decode_ms += ms;
    if (m->decode_window_start_ms == 0) m->decode_window_start_ms = now_ms - ms;
    m->decode_window_tokens += tokens;
    double span = now_ms - m->decode_window_start_ms;
    if (span >= 2000.0) {
        m->decode_rate_recent = 1e3 * (double)m->decode_window_tokens / span;
        m->decode_window_start_ms = now_ms;
        m->decode_window_tokens = 0;
    }
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_tokens_out(srv_metrics *m, uint64_t n) {
    pthread_mutex_lock(&m->mu);
    m->tokens_out += n;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_job_outcome(srv_metrics *m, int cancelled, int failed) {
    pthread_mutex_lock(&m->mu);
    if (cancelled) m->jobs_cancelled++;
    if (failed) m->jobs_failed++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_queue_full(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->rejected_queue_full++;
    pthread_mutex_unlock(&m->mu);
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (w < 0) { b->oom = 1; return; }
        if ((size_t)w < b->cap - b->n) { b->n += (size_t)w; return; }
        size_t nc = (b->cap + (size_t)w + 1) * 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = nc;
    }
}

static void gauge(sbuf *b, const char *name, const char *help, double v) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

static void counter(sbuf *b, const char *name, const char *help, double v) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %.17g\n", name, help, name, name, v);
}

char *srv_metrics_render(srv_metrics *m, const srv_gauges *g) {
    sbuf b = {malloc(8192), 0, 8192, 0};
    if (!b.p) return NULL;
    b.p[0] = '\0';
    pthread_mutex_lock(&m->mu);
    srv_metrics s = *m; /* copy under the lock, render outside of it */
    pthread_mutex_unlock(&m->mu);
    sb_printf(&b, "# HELP llorch_requests_total HTTP requests by route and status code.\n"
                  "# TYPE llorch_requests_total counter\n");
    for (int r = 0; r < SRV_ROUTE_COUNT_; r++)
        for (int k = 0; k < SRV_METRICS_STATUS_SLOTS; k++)
            if (s.requests[r][k])
                sb_printf(&b, "llorch_requests_total{route=\"%s\",status=\"%s%d\"} %llu\n", srv_route_label((srv_route)r),
                          k_status_codes[k] ? "" : "other", k_status_codes[k] ? k_status_codes[k] : 0,
                          (unsigned long long)s.requests[r][k]);
    counter(&b, "llorch_tokens_in_total", "Prompt tokens processed.", (double)s.tokens_in);
    counter(&b, "llorch_tokens_out_total", "Tokens generated.", (double)s.tokens_out);
    counter(&b, "llorch_jobs_cancelled_total", "Jobs that ended CANCELLED.", (double)s.jobs_cancelled);
    counter(&b, "llorch_jobs_failed_total", "Jobs that ended with an error.", (double)s.jobs_failed);
    counter(&b, "llorch_rejected_queue_full_total", "Requests answered 503 because the queue was full.",
            (double)s.rejected_queue_full);
    gauge(&b, "llorch_prefill_tokens_per_second", "Prompt tokens per second, average over all prefills.",
          s.prefill_ms > 0 ? 1e3 * (double)s.prefill_tokens / s.prefill_ms : 0.0);
    gauge(&b, "llorch_decode_tokens_per_second", "Aggregate decode tokens per second over all batched steps.",
          s.decode_ms > 0 ? 1e3 * (double)s.decode_tokens / s.decode_ms : 0.0);
    gauge(&b, "llorch_decode_tokens_per_second_recent", "Aggregate decode tokens per second, last window.",
          s.decode_rate_recent);
    gauge(&b, "llorch_queue_depth", "Requests waiting for a sequence slot.", g->queue_depth);
    gauge(&b, "llorch_queue_capacity", "Queue size before requests get 503.", g->queue_capacity);
    gauge(&b, "llorch_active_sequences", "Sequences being generated.", g->active_sequences);
    gauge(&b, "llorch_parallel_slots", "Sequence slots (--parallel).", g->parallel);
    gauge(&b, "llorch_jobs_tracked", "rbee jobs held by the job table.", (double)g->jobs_tracked);
    gauge(&b, "llorch_model_bytes", "Bytes of model weights.", (double)g->model_bytes);
    gauge(&b, "llorch_kv_cache_bytes", "Bytes of KV cache slots.", (double)g->kv_bytes);
    gauge(&b, "llorch_device_memory_total_bytes", "Device memory, total.", (double)g->device_mem_total);
    gauge(&b, "llorch_device_memory_used_bytes", "Device memory in use (total - free).",
          (double)(g->device_mem_total - (g->device_mem_free < g->device_mem_total ? g->device_mem_free : g->device_mem_total)));
    gauge(&b, "llorch_process_resident_bytes", "Resident set size of the worker.", (double)g->rss_bytes);
    gauge(&b, "llorch_ready", "1 when the model is loaded and the worker accepts jobs.", g->ready);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

int64_t srv_process_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    long long size = 0, res = 0;
    int n = fscanf(f, "%lld %lld", &size, &res);
    fclose(f);
    if (n != 2) return -1;
    long ps = sysconf(_SC_PAGESIZE);
    return (int64_t)res * (ps > 0 ? ps : 4096);
}

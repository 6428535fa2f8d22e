/* Counters behind GET /metrics: requests by route and status, tokens in and
 * out, prefill/decode time, and the Prometheus text rendering. Gauges that
 * live elsewhere (queue, active sequences, memory) are passed in when
 * rendering. */
#ifndef RBEE_SRV_METRICS_H
#define RBEE_SRV_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef enum srv_route {
    SRV_ROUTE_HEALTH = 0,
    SRV_ROUTE_READY,
    SRV_ROUTE_INFO,
    SRV_ROUTE_METRICS,
    SRV_ROUTE_JOBS,
    SRV_ROUTE_INFERENCE,
    SRV_ROUTE_JOB_STREAM,
    SRV_ROUTE_JOB_DELETE,
    SRV_ROUTE_MODELS,
    SRV_ROUTE_COMPLETIONS,
    SRV_ROUTE_CHAT,
    SRV_ROUTE_UNKNOWN,
    SRV_ROUTE_COUNT_
} srv_route;

const char *srv_route_label(srv_route r); /* "/v1/jobs", "/v1/jobs/{id}/stream", ... */

#define SRV_METRICS_STATUS_SLOTS 12

typedef struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t requests[SRV_ROUTE_COUNT_][SRV_METRICS_STATUS_SLOTS];
    uint64_t tokens_in, tokens_out;
    double prefill_ms, decode_ms;        /* summed over sequences' wall time */
    uint64_t prefill_tokens, decode_tokens;
    double decode_window_start_ms;       /* for the recent aggregate decode rate */
    uint64_t decode_window_tokens;
    double decode_rate_recent;           /* tokens/s over the last window */
    uint64_t jobs_cancelled, jobs_failed, rejected_queue_full;
} srv_metrics;

/* Snapshot of gauges owned by other parts, for rendering. */
typedef struct srv_gauges {
    int queue_depth, queue_capacity, active_sequences, parallel;
    size_t jobs_tracked;
    size_t model_bytes, kv_bytes;
    size_t device_mem_total, device_mem_free;
    int64_t rss_bytes;
    int ready;
} srv_gauges;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_destroy(srv_metrics *m);
void srv_metrics_request(srv_metrics *m, srv_route r, int http_status);
void srv_metrics_prefill(srv_metrics *m, uint64_t tokens, double ms);
/* One scheduler step: tokens decoded across all sequences in ms wall time. */
void srv_metrics_decode_step(srv_metrics *m, uint64_t tokens, double ms, double now_ms);
void srv_metrics_tokens_out(srv_metrics *m, uint64_t n);
void srv_metrics_job_outcome(srv_metrics *m, int cancelled, int failed);
void srv_metrics_queue_full(srv_metrics *m);

/* Renders Prometheus text exposition format 0.0.4 into a malloc'ed string. */
char *srv_metrics_render(srv_metrics *m, const srv_gauges *g);

/* Resident set size of this process in bytes (from /proc), or -1. */
int64_t srv_process_rss(void);

#endif

/* The metrics registry behind GET /metrics: counters, gauges and histograms,
 * each a family with up to WK_METRIC_MAX_LABELS label names and one series
 * per distinct label-value tuple, rendered in the Prometheus text exposition
 * format 0.0.4. Families are registered once at startup (the worker layer
 * registers the HTTP ones, each worker its own); observations are
 * thread-safe. Gauges may also be computed at render time by a callback
 * (queue depth, memory), so the registry holds no copy of other parts'
 * state. */
#ifndef RBEE_WK_METRICS_H
#define RBEE_WK_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define WK_METRIC_MAX_LABELS 3
#define WK_METRIC_MAX_BUCKETS 24

typedef enum wk_metric_kind { WK_COUNTER = 0, WK_GAUGE, WK_HISTOGRAM } wk_metric_kind;

typedef struct wk_series wk_series;
typedef struct wk_metric wk_metric;
typedef double (*wk_gauge_fn)(void *user);

typedef struct wk_metrics {
    pthread_mutex_t mu;
    wk_metric *first, *last;
} wk_metrics;

void wk_metrics_init(wk_metrics *m);
void wk_metrics_destroy(wk_metrics *m);

/* Registers a family. labels: NULL-terminated label names (NULL: none).
 * Returns NULL when out of memory or when the name is already taken (the
 * observation calls accept NULL and do nothing). */
wk_metric *wk_metrics_counter(wk_metrics *m, const char *name, const char *help, const char *const *labels);
wk_metric *wk_metrics_gauge(wk_metrics *m, const char *name, const char *help, const char *const *labels);
/* A gauge without labels whose value is fn(user) at render time. */
wk_metric *wk_metrics_gauge_fn(wk_metrics *m, const char *name, const char *help, wk_gauge_fn fn, void *user);
/* The same for a counter another part keeps (fn must never decrease). */
wk_metric *wk_metrics_counter_fn(wk_metrics *m, const char *name, const char *help, wk_gauge_fn fn, void *user);
/* buckets: n ascending upper bounds (the +Inf bucket is implicit). */
wk_metric *wk_metrics_histogram(wk_metrics *m, const char *name, const char *help, const char *const *labels,
                                const double *buckets, int n);

/* values: one string per label name (NULL when the family has none). */
void wk_counter_add(wk_metric *c, const char *const *values, double v);
void wk_gauge_set(wk_metric *g, const char *const *values, double v);
void wk_histogram_observe(wk_metric *h, const char *const *values, double v);

/* Current value of a counter or gauge series (0 if it has none yet), or a
 * histogram series' count; for tests and for workers that derive rates. */
double wk_metric_value(wk_metric *mt, const char *const *values);

/* Renders every family in registration order; malloc'ed, NULL when out of
 * memory. */
char *wk_metrics_render(wk_metrics *m);

/* Bucket bounds in seconds suited to request and token latencies
 * (1 ms .. 120 s). */
extern const double wk_latency_buckets[];
extern const int wk_latency_buckets_n;

/* Resident set size of this process in bytes (from /proc), or -1. */
int64_t wk_process_rss(void);

#endif

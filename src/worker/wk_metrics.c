/* Implementation of wk_metrics.h: families in a linked list, series in a
 * small array per family (label tuples are few: routes x status codes), all
 * under one mutex; rendering copies nothing it does not print. */
#include "worker/wk_metrics.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const double wk_latency_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                     0.5,   1,      2.5,   5,    10,    30,   60,  120};
const int wk_latency_buckets_n = (int)(sizeof wk_latency_buckets / sizeof wk_latency_buckets[0]);

struct wk_series {
    char *values[WK_METRIC_MAX_LABELS];
    double value;                            /* counter / gauge; histogram sum */
    uint64_t count;                          /* histogram */
    uint64_t buckets[WK_METRIC_MAX_BUCKETS]; /* histogram, not cumulative */
};

struct wk_metric {
    wk_metrics *reg;
    wk_metric *next;
    wk_metric_kind kind;
    char *name, *help;
    char *labels[WK_METRIC_MAX_LABELS];
    int n_labels;
    double bounds[WK_METRIC_MAX_BUCKETS];
    int n_bounds;
    wk_gauge_fn fn;
    void *fn_user;
    wk_series *series;
    size_t n_series, cap_series;
};

void wk_metrics_init(wk_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

static void free_metric(wk_metric *mt) {
    for (size_t i = 0; i < mt->n_series; i++)
        for (int k = 0; k < mt->n_labels; k++) free(mt->series[i].values[k]);
    free(mt->series);
    for (int k = 0; k < mt->n_labels; k++) free(mt->labels[k]);
    free(mt->name);
    free(mt->help);
    free(mt);
}

void wk_metrics_destroy(wk_metrics *m) {
    for (wk_metric *mt = m->first; mt;) {
        wk_metric *next = mt->next;
        free_metric(mt);
        mt = next;
    }
    pthread_mutex_destroy(&m->mu);
    memset(m, 0, sizeof *m);
}

static wk_metric *add_family(wk_metrics *m, wk_metric_kind kind, const char *name, const char *help,
                             const char *const *labels) {
    wk_metric *mt = calloc(1, sizeof *mt);
    if (!mt) return NULL;
    mt->reg = m;
    mt->kind = kind;
    mt->name = strdup(name);
    mt->help = strdup(help ? help : "");
    bool ok = mt->name && mt->help;
    for (int k = 0; ok && labels && labels[k]; k++) {
        if (k == WK_METRIC_MAX_LABELS) {
            ok = false;
            break;
        }
        mt->labels[k] = strdup(labels[k]);
        ok = mt->labels[k] != NULL;
        mt->n_labels = k + 1;
    }
    pthread_mutex_lock(&m->mu);
    for (wk_metric *o = m->first; ok && o; o = o->next)
        if (strcmp(o->name, name) == 0) ok = false;
    if (ok) {
        if (m->last) m->last->next = mt;
        else m->first = mt;
        m->last = mt;
    }
    pthread_mutex_unlock(&m->mu);
    if (!ok) {
        free_metric(mt);
        return NULL;
    }
    return mt;
}

wk_metric *wk_metrics_counter(wk_metrics *m, const char *name, const char *help, const char *const *labels) {
    return add_family(m, WK_COUNTER, name, help, labels);
}

wk_metric *wk_metrics_gauge(wk_metrics *m, const char *name, const char *help, const char *const *labels) {
    return add_family(m, WK_GAUGE, name, help, labels);
}

static wk_metric *family_fn(wk_metrics *m, wk_metric_kind kind, const char *name, const char *help, wk_gauge_fn fn,
                            void *user) {
    wk_metric *mt = add_family(m, kind, name, help, NULL);
    if (mt) { /* published by add_family; fn is read under the registry lock only */
        pthread_mutex_lock(&m->mu);
        mt->fn = fn;
        mt->fn_user = user;
        pthread_mutex_unlock(&m->mu);
    }
    return mt;
}

wk_metric *wk_metrics_gauge_fn(wk_metrics *m, const char *name, const char *help, wk_gauge_fn fn, void *user) {
    return family_fn(m, WK_GAUGE, name, help, fn, user);
}

wk_metric *wk_metrics_counter_fn(wk_metrics *m, const char *name, const char *help, wk_gauge_fn fn, void *user) {
    return family_fn(m, WK_COUNTER, name, help, fn, user);
}

wk_metric *wk_metrics_histogram(wk_metrics *m, const char *name, const char *help, const char *const *labels,
                                const double *buckets, int n) {
    if (n < 1 || n > WK_METRIC_MAX_BUCKETS) return NULL;
    for (int i = 1; i < n; i++)
        if (!(buckets[i] > buckets[i - 1])) return NULL;
    wk_metric *mt = add_family(m, WK_HISTOGRAM, name, help, labels);
    if (mt) {
        pthread_mutex_lock(&m->mu);
        memcpy(mt->bounds, buckets, sizeof(double) * (size_t)n);
        mt->n_bounds = n;
        pthread_mutex_unlock(&m->mu);
    }
    return mt;
}

/* The series for values, created on first use; NULL when out of memory.
 * Called with the registry lock held. */
static wk_series *series_for(wk_metric *mt, const char *const *values) {
    for (size_t i = 0; i < mt->n_series; i++) {
        int k = 0;
        while (k < mt->n_labels && strcmp(mt->series[i].values[k], values[k] ? values[k] : "") == 0) k++;
        if (k == mt->n_labels) return &mt->series[i];
    }
    if (mt->n_series == mt->cap_series) {
        size_t nc = mt->cap_series ? mt->cap_series * 2 : 8;
        wk_series *ns = realloc(mt->series, nc * sizeof *ns);
        if (!ns) return NULL;
        mt->series = ns;
        mt->cap_series = nc;
    }
    wk_series *s = &mt->series[mt->n_series];
    memset(s, 0, sizeof *s);
    for (int k = 0; k < mt->n_labels; k++) {
        s->values[k] = strdup(values && values[k] ? values[k] : "");
        if (!s->values[k]) {
            while (k-- > 0) free(s->values[k]);
            return NULL;
        }
    }
    mt->n_series++;
    return s;
}

static void update(wk_metric *mt, const char *const *values, double v, int how) {
    if (!mt) return;
    pthread_mutex_lock(&mt->reg->mu);
    wk_series *s = series_for(mt, values);
    if (s) {
        if (how == 0) s->value += v;
        else if (how == 1) s->value = v;
        else {
            s->value += v;
            s->count++;
            int b = 0;
            while (b < mt->n_bounds && v > mt->bounds[b]) b++;
            if (b < mt->n_bounds) s->buckets[b]++;
        }
    }
    pthread_mutex_unlock(&mt->reg->mu);
}

void wk_counter_add(wk_metric *c, const char *const *values, double v) {
    if (c && c->kind == WK_COUNTER && !c->fn && v >= 0) update(c, values, v, 0);
}

void wk_gauge_set(wk_metric *g, const char *const *values, double v) {
    if (g && g->kind == WK_GAUGE && !g->fn) update(g, values, v, 1);
}

void wk_histogram_observe(wk_metric *h, const char *const *values, double v) {
    if (h && h->kind == WK_HISTOGRAM) update(h, values, v, 2);
}

double wk_metric_value(wk_metric *mt, const char *const *values) {
    if (!mt) return 0;
    pthread_mutex_lock(&mt->reg->mu);
    double v = 0;
    for (size_t i = 0; i < mt->n_series; i++) {
        int k = 0;
        while (k < mt->n_labels && strcmp(mt->series[i].values[k], values && values[k] ? values[k] : "") == 0) k++;
        if (k == mt->n_labels) {
            v = mt->kind == WK_HISTOGRAM ? (double)mt->series[i].count : mt->series[i].value;
            break;
        }
    }
    pthread_mutex_unlock(&mt->reg->mu);
    return v;
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)w < b->cap - b->n) {
            b->n += (size_t)w;
            return;
        }
        size_t nc = (b->cap + (size_t)w + 1) * 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
}

/* A label value escaped as the exposition format wants (\\, \", \n). */
static void sb_label_value(sbuf *b, const char *v) {
    for (; *v; v++) {
        if (*v == '\\') sb_printf(b, "\\\\");
        else if (*v == '"') sb_printf(b, "\\\"");
        else if (*v == '\n') sb_printf(b, "\\n");
        else sb_printf(b, "%c", *v);
    }
}

/* {a="x",b="y"[,le="..."]} or nothing */
static void sb_labels(sbuf *b, const wk_metric *mt, const wk_series *s, const char *le) {
    if (mt->n_labels == 0 && !le) return;
    sb_printf(b, "{");
    for (int k = 0; k < mt->n_labels; k++) {
        sb_printf(b, "%s%s=\"", k ? "," : "", mt->labels[k]);
        sb_label_value(b, s->values[k]);
        sb_printf(b, "\"");
    }
    if (le) sb_printf(b, "%sle=\"%s\"", mt->n_labels ? "," : "", le);
    sb_printf(b, "}");
}

static void render_family(sbuf *b, const wk_metric *mt, double fn_value) {
    static const char *const types[] = {"counter", "gauge", "histogram"};
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", mt->name, mt->help, mt->name, types[mt->kind]);
    if (mt->fn) {
        sb_printf(b, "%s %.17g\n", mt->name, fn_value);
        return;
    }
    if (mt->kind != WK_HISTOGRAM && mt->n_labels == 0 && mt->n_series == 0) {
        sb_printf(b, "%s 0\n", mt->name);
        return;
    }
    for (size_t i = 0; i < mt->n_series; i++) {
        const wk_series *s = &mt->series[i];
        if (mt->kind != WK_HISTOGRAM) {
            sb_printf(b, "%s", mt->name);
            sb_labels(b, mt, s, NULL);
            sb_printf(b, " %.17g\n", s->value);
            continue;
        }
        uint64_t cum = 0;
        for (int k = 0; k < mt->n_bounds; k++) {
            char le[32];
            snprintf(le, sizeof le, "%g", mt->bounds[k]);
            cum += s->buckets[k];
            sb_printf(b, "%s_bucket", mt->name);
            sb_labels(b, mt, s, le);
            sb_printf(b, " %llu\n", (unsigned long long)cum);
        }
        sb_printf(b, "%s_bucket", mt->name);
        sb_labels(b, mt, s, "+Inf");
        sb_printf(b, " %llu\n%s_sum", (unsigned long long)s->count, mt->name);
        sb_labels(b, mt, s, NULL);
        sb_printf(b, " %.17g\n%s_count", s->value, mt->name);
        sb_labels(b, mt, s, NULL);
        sb_printf(b, " %llu\n", (unsigned long long)s->count);
    }
}

char *wk_metrics_render(wk_metrics *m) {
    sbuf b = {malloc(8192), 0, 8192, false};
    if (!b.p) return NULL;
    b.p[0] = '\0';
    /* Callback gauges read other parts' locks: call them outside ours. */
    typedef struct { wk_gauge_fn fn; void *user; double v; } gauge_call;
    size_t n_fn = 0, k = 0;
    pthread_mutex_lock(&m->mu);
    for (wk_metric *mt = m->first; mt; mt = mt->next) n_fn += mt->fn != NULL;
    gauge_call *calls = calloc(n_fn ? n_fn : 1, sizeof *calls);
    for (wk_metric *mt = m->first; calls && mt; mt = mt->next)
        if (mt->fn) calls[k++] = (gauge_call){mt->fn, mt->fn_user, 0.0};
    pthread_mutex_unlock(&m->mu);
    if (!calls) {
        free(b.p);
        return NULL;
    }
    for (size_t i = 0; i < k; i++) calls[i].v = calls[i].fn(calls[i].user);
    pthread_mutex_lock(&m->mu);
    k = 0;
    for (wk_metric *mt = m->first; mt; mt = mt->next) render_family(&b, mt, mt->fn && k < n_fn ? calls[k++].v : 0.0);
    pthread_mutex_unlock(&m->mu);
    free(calls);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

int64_t wk_process_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    long long size = 0, res = 0;
    int n = fscanf(f, "%lld %lld", &size, &res);
    fclose(f);
    if (n != 2) return -1;
    long ps = sysconf(_SC_PAGESIZE);
    return (int64_t)res * (ps > 0 ? ps : 4096);
}

/* Implementation of llm_metrics.h. */
#include "worker_llm/llm_metrics.h"

#include <string.h>

static double prefill_rate(void *user) {
    llm_metrics *m = user;
    pthread_mutex_lock(&m->mu);
    double v = m->prefill_ms > 0 ? 1e3 * (double)m->prefill_tokens / m->prefill_ms : 0.0;
    pthread_mutex_unlock(&m->mu);
    return v;
}

static double decode_rate(void *user) {
    llm_metrics *m = user;
    pthread_mutex_lock(&m->mu);
    double v = m->decode_ms > 0 ? 1e3 * (double)m->decode_tokens / m->decode_ms : 0.0;
    pthread_mutex_unlock(&m->mu);
    return v;
}

static double decode_rate_recent(void *user) {
    llm_metrics *m = user;
    pthread_mutex_lock(&m->mu);
    double v = m->decode_rate_recent;
    pthread_mutex_unlock(&m->mu);
    return v;
}

void llm_metrics_init(llm_metrics *m, wk_metrics *reg) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->tokens_in = wk_metrics_counter(reg, "llorch_tokens_in_total", "Prompt tokens processed.", NULL);
    m->tokens_out = wk_metrics_counter(reg, "llorch_tokens_out_total", "Tokens generated.", NULL);
    m->tokens_cached = wk_metrics_counter(reg, "llorch_prompt_tokens_cached_total",
                                          "Prompt tokens taken from a KV cache instead of run (--cache-prompt).", NULL);
    m->cancelled = wk_metrics_counter(reg, "llorch_jobs_cancelled_total", "Jobs that ended CANCELLED.", NULL);
    m->failed = wk_metrics_counter(reg, "llorch_jobs_failed_total", "Jobs that ended with an error.", NULL);
    wk_metrics_gauge_fn(reg, "llorch_prefill_tokens_per_second",
                        "Prompt tokens per second, average over all prefills.", prefill_rate, m);
    wk_metrics_gauge_fn(reg, "llorch_decode_tokens_per_second",
                        "Aggregate decode tokens per second over all batched steps.", decode_rate, m);
    wk_metrics_gauge_fn(reg, "llorch_decode_tokens_per_second_recent",
                        "Aggregate decode tokens per second, last window.", decode_rate_recent, m);
    const char *const route[] = {"route", NULL};
    m->ttft = wk_metrics_histogram(reg, "llorch_time_to_first_token_seconds",
                                   "Time from a request's arrival to its first generated token.", route,
                                   wk_latency_buckets, wk_latency_buckets_n);
    m->itl = wk_metrics_histogram(reg, "llorch_inter_token_latency_seconds",
                                  "Time between consecutive generated tokens of one sequence.", route,
                                  wk_latency_buckets, wk_latency_buckets_n);
}

void llm_metrics_destroy(llm_metrics *m) { pthread_mutex_destroy(&m->mu); }

void llm_metrics_prefill(llm_metrics *m, uint64_t tokens, uint64_t cached, double ms) {
    wk_counter_add(m->tokens_in, NULL, (double)tokens);
    if (cached > 0) wk_counter_add(m->tokens_cached, NULL, (double)cached);
    pthread_mutex_lock(&m->mu);
    m->prefill_tokens += tokens - cached;
    m->prefill_ms += ms;
    pthread_mutex_unlock(&m->mu);
}

void llm_metrics_decode_step(llm_metrics *m, uint64_t tokens, double ms, double now_ms) {
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

void llm_metrics_tokens_out(llm_metrics *m, uint64_t n) { wk_counter_add(m->tokens_out, NULL, (double)n); }

void llm_metrics_job_outcome(llm_metrics *m, int cancelled, int failed) {
    if (cancelled) wk_counter_add(m->cancelled, NULL, 1);
    if (failed) wk_counter_add(m->failed, NULL, 1);
}


void llm_metrics_first_token(llm_metrics *m, const char *route, double ms) {
    const char *v[] = {route ? route : "other"};
    wk_histogram_observe(m->ttft, v, ms / 1e3);
}

void llm_metrics_token_gap(llm_metrics *m, const char *route, double ms) {
    const char *v[] = {route ? route : "other"};
    wk_histogram_observe(m->itl, v, ms / 1e3);
}

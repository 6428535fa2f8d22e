/* The LLM worker's metrics in the worker's registry: tokens in and out,
 * prompt tokens taken from a KV cache (prefix reuse), job outcomes, queue
 * rejections, prefill and aggregate decode rates, and
 * per route the time to first token and the inter-token latency
 * histograms. The engine reports into it; gauges owned by other parts
 * (queue, slots, memory) are registered by the worker as callbacks. */
#ifndef RBEE_LLM_METRICS_H
#define RBEE_LLM_METRICS_H

#include "worker/wk_metrics.h"

#include <pthread.h>
#include <stdint.h>

typedef struct llm_metrics {
    wk_metric *tokens_in, *tokens_out, *tokens_cached, *cancelled, *failed;
    wk_metric *ttft, *itl; /* histograms by route, seconds */
    pthread_mutex_t mu;    /* the rate sums below */
    double prefill_ms, decode_ms;
    uint64_t prefill_tokens, decode_tokens;
    double decode_window_start_ms; /* for the recent aggregate decode rate */
    uint64_t decode_window_tokens;
    double decode_rate_recent;     /* tokens/s over the last window */
} llm_metrics;

/* Registers the families in reg (which must outlive m). */
void llm_metrics_init(llm_metrics *m, wk_metrics *reg);
void llm_metrics_destroy(llm_metrics *m);

/* A prompt of `tokens` tokens, `cached` of them taken from a KV cache, the
 * rest run in ms (the prefill rate counts the run ones). */
void llm_metrics_prefill(llm_metrics *m, uint64_t tokens, uint64_t cached, double ms);
/* One scheduler step: tokens decoded across all sequences in ms wall time. */
void llm_metrics_decode_step(llm_metrics *m, uint64_t tokens, double ms, double now_ms);
void llm_metrics_tokens_out(llm_metrics *m, uint64_t n);
void llm_metrics_job_outcome(llm_metrics *m, int cancelled, int failed);
/* A sequence's first token ms after its request arrived / the gap between
 * two of its tokens, under the route's label. */
void llm_metrics_first_token(llm_metrics *m, const char *route, double ms);
void llm_metrics_token_gap(llm_metrics *m, const char *route, double ms);

#endif

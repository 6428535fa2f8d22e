/* The LLM worker's job payload: a validated generation request (prompt
 * tokens, sampling, limits, stop strings), which API asked for it (rbee jobs,
 * OpenAI completions or chat) and the route it came in on (for the latency
 * metrics), plus the outcome the engine records. Text goes out as "token"
 * events ({"t": text, "i": index}, the raw bytes kept for other formats);
 * the "end" event carries tokens_out, prompt_tokens, prefill/decode times
 * and stop_reason. */
#ifndef RBEE_LLM_JOB_H
#define RBEE_LLM_JOB_H

#include "rbee/generate.h"
#include "rbee/sampler.h"
#include "worker/wk_job.h"

#define LLM_MAX_STOP 4
#define LLM_MAX_STOP_BYTES 100

typedef enum llm_api { LLM_API_RBEE = 0, LLM_API_COMPLETION, LLM_API_CHAT } llm_api;

typedef struct llm_gen_request {
    int32_t *prompt; /* token ids, BOS included when the model wants one */
    size_t n_prompt;
    rb_sampler_params sampling;
    int64_t max_tokens;
    char *stop[LLM_MAX_STOP];
    int n_stop;
    bool stream;
    bool include_usage; /* OpenAI stream_options.include_usage */
    bool ignore_eos;    /* keep generating past end-of-sequence (benchmarks) */
    char *model;        /* model name as the client gave it (echoed back), may be NULL */
} llm_gen_request;

void llm_gen_request_free(llm_gen_request *r);

typedef struct llm_task {
    llm_api api;
    llm_gen_request req;
    char *model_name;        /* the name answers carry: the client's, else the worker's model id */
    const char *route_label; /* borrowed from the router (lives as long as the worker) */
    /* outcome, written by the engine under the job's mutex */
    rb_stop_reason stop_reason;
    int64_t tokens_out;
    size_t n_pieces;
    double prefill_ms, decode_ms;
} llm_task;

extern const wk_job_kind llm_job_kind;

/* A new job owning *req (zeroed on return; freed on failure). NULL when out
 * of memory. */
wk_job *llm_job_new(llm_api api, llm_gen_request *req, const char *model_name, const char *route_label);

static inline llm_task *llm_job_task(const wk_job *j) { return (llm_task *)j->payload; }

/* Engine side. */
bool llm_job_push_piece(wk_job *j, const char *text, size_t len); /* false: out of memory */
void llm_job_finish(wk_job *j, rb_stop_reason why, int64_t tokens_out, double prefill_ms, double decode_ms);

#endif

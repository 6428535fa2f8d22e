/* The LLM worker's job payload: a validated generation request (prompt
 * tokens, sampling, limits, stop strings, choices, log probabilities) or an
 * embedding request (token lists, pooling), which API asked for it (rbee
 * jobs, OpenAI completions, chat or embeddings) and the route it came in on
 * (for the latency metrics), plus the outcome the engine records. Text goes
 * out as "token" events ({"t": text, "i": index, "choice": c when there are
 * several choices}, the raw bytes kept for other formats); a token's log
 * probabilities as a "logprobs" event {"choice", "entry"} before its text;
 * the end of one of several choices, for the OpenAI APIs, as "choice_end"
 * {"choice", "stop_reason", "tokens_out"}; the "end" event carries
 * tokens_out, prompt_tokens, cached_tokens (prompt tokens taken from a KV
 * cache, not run), prefill/decode times and stop_reason. */
#ifndef RBEE_LLM_JOB_H
#define RBEE_LLM_JOB_H

#include "rbee/generate.h"
#include "rbee/grammar.h"
#include "rbee/sampler.h"
#include "worker/wk_job.h"
#include "worker_llm/llm_tools.h"

#define LLM_MAX_STOP 16          /* stop strings per request */
#define LLM_MAX_STOP_BYTES 100   /* bytes of one stop string */
#define LLM_MAX_CHOICES 16       /* n; also at most the worker's --parallel */
#define LLM_MAX_TOP_LOGPROBS 20  /* top_logprobs (chat), logprobs (completions) */
#define LLM_MAX_LOGIT_BIAS 1024  /* logit_bias entries */
#define LLM_MAX_EMBED_INPUTS 2048

typedef enum llm_api { LLM_API_RBEE = 0, LLM_API_COMPLETION, LLM_API_CHAT, LLM_API_EMBED } llm_api;

typedef struct llm_gen_request {
    int32_t *prompt; /* token ids, BOS included when the model wants one */
    size_t n_prompt;
    rb_sampler_params sampling; /* sampling.logit_bias points at bias */
    rb_logit_bias *bias;        /* logit_bias entries (owned) */
    int64_t max_tokens;
    const char *max_tokens_field; /* the field max_tokens came from, for messages (NULL: "max_tokens") */
    char *stop[LLM_MAX_STOP];
    int n_stop;
    int n_choices;     /* OpenAI n (0 counts as 1); choice i samples with seed sampling.seed + i */
    bool logprobs;     /* each generated token's log probability */
    int top_logprobs;  /* and the k most likely tokens at its position (0..LLM_MAX_TOP_LOGPROBS) */
    int64_t prompt_chars; /* characters of a completions prompt: where the legacy text_offset starts */
    bool stream;
    bool include_usage; /* OpenAI stream_options.include_usage */
    bool ignore_eos;    /* keep generating past end-of-sequence (benchmarks) */
    char *model;        /* model name as the client gave it (echoed back), may be NULL */
    rb_grammar *grammar; /* structured output: every choice's tokens follow it (owned; NULL: free text) */
    llm_tools tools;    /* chat tool calling (choice LLM_TOOLS_OFF: none) */
    /* special tokens the output keeps as text though special tokens are
     * otherwise dropped: the tool-call markers of the model's family */
    int32_t keep_ids[4];
    int n_keep;
} llm_gen_request;

void llm_gen_request_free(llm_gen_request *r);
/* Choices of a request (n_choices, at least 1). */
static inline int llm_gen_choices(const llm_gen_request *r) { return r->n_choices > 1 ? r->n_choices : 1; }

typedef enum llm_pooling { LLM_POOL_MEAN = 0, LLM_POOL_LAST } llm_pooling;

/* An embeddings request: the token lists, one vector per list. */
typedef struct llm_embed_request {
    int32_t *tokens;  /* every input's tokens back to back */
    size_t *offs;     /* input i is tokens[offs[i] .. offs[i + 1]) */
    size_t n_inputs;
    llm_pooling pooling;
    bool base64;      /* encoding_format "base64" */
    float *vectors;   /* outcome: n_inputs rows of n_embd, unit length */
    int64_t n_embd;
} llm_embed_request;

void llm_embed_request_free(llm_embed_request *r);

/* How one choice ended. */
typedef struct llm_choice_out {
    rb_stop_reason stop_reason;
    int64_t tokens_out;
} llm_choice_out;

typedef struct llm_task {
    llm_api api;
    llm_gen_request req;
    llm_embed_request emb; /* LLM_API_EMBED */
    char *model_name;        /* the name answers carry: the client's, else the worker's model id */
    const char *route_label; /* borrowed from the router (lives as long as the worker) */
    /* outcome, written by the engine under the job's mutex */
    rb_stop_reason stop_reason;
    int64_t tokens_out;
    size_t n_pieces;
    double prefill_ms, decode_ms;
    int64_t cached_tokens; /* prompt tokens whose keys and values came from a cache (set at the prefill) */
    llm_choice_out *choices; /* llm_gen_choices(&req) entries */
    /* the engine's own running totals (its thread only) */
    int choices_left;
    int64_t tokens_sum;
    rb_stop_reason why_sum;
} llm_task;

extern const wk_job_kind llm_job_kind;

/* A new job owning *req (zeroed on return; freed on failure). NULL when out
 * of memory. */
wk_job *llm_job_new(llm_api api, llm_gen_request *req, const char *model_name, const char *route_label);
/* A new embeddings job owning *req (the same way). */
wk_job *llm_job_new_embed(llm_embed_request *req, const char *model_name, const char *route_label);

static inline llm_task *llm_job_task(const wk_job *j) { return (llm_task *)j->payload; }

/* Engine side; false: out of memory. */
bool llm_job_push_piece(wk_job *j, int choice, const char *text, size_t len);
/* A token's log probabilities (entry consumed). */
bool llm_job_push_logprobs(wk_job *j, int choice, json_t *entry);
/* Records how a choice ended (and tells the OpenAI streams). */
bool llm_job_choice_end(wk_job *j, int choice, rb_stop_reason why, int64_t tokens_out);
void llm_job_finish(wk_job *j, rb_stop_reason why, int64_t tokens_out, double prefill_ms, double decode_ms);

#endif

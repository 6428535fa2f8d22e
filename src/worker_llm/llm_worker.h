/* llm-worker-rbee on the shared worker layer: its options (--parallel,
 * --ctx-size, --embedding, --pooling, --deterministic, --cache-prompt, --prefill-chunk), the loaded model, tokenizer and chat
 * template, the inference engine behind a read-write lock (handlers use it,
 * shutdown takes it away), the metrics, and the routes it adds (rbee job
 * creation, the OpenAI API with embeddings, llama-server's /tokenize,
 * /detokenize and /props). llm_worker_main is the whole process. */
#ifndef RBEE_LLM_WORKER_H
#define RBEE_LLM_WORKER_H

#include "rbee/backend.h"
#include "rbee/model.h"
#include "rbee/tokenizer.h"
#include "worker/wk_worker.h"
#include "worker_llm/llm_chat.h"
#include "worker_llm/llm_engine.h"
#include "worker_llm/llm_metrics.h"
#include "worker_llm/llm_prompt.h"

#include <pthread.h>

typedef struct llm_worker {
    wk_worker *w;
    int64_t parallel; /* --parallel: concurrent sequences */
    int64_t ctx_size; /* --ctx-size (0: min(model, 4096)); the size in use once loaded */
    bool embedding;   /* --embedding: POST /v1/embeddings answers */
    const char *pooling_name; /* --pooling mean|last */
    llm_pooling pooling;
    const char *deterministic_name; /* --deterministic auto|on|off */
    bool deterministic;             /* batch-invariant backend (resolved when loading) */
    const char *cache_prompt_name;  /* --cache-prompt on|off */
    bool cache_prompt;              /* reuse cached prompt prefixes (resolved at setup) */
    int64_t prefill_chunk;          /* --prefill-chunk: prompt tokens a step runs beside the decode tokens (0: off) */
    llm_metrics metrics;
    bool metrics_ok;

    /* model: written once by the main thread before the worker is READY */
    rb_backend *be;
    rb_model *model;
    rb_tokenizer *tok;
    llm_chat chat;
    bool chat_ok;

    /* engine: handlers use it under the read lock; shutdown takes it away */
    pthread_rwlock_t engine_lock;
    llm_engine *engine;
} llm_worker;

/* The worker's own flags, writing into lw (at most max; returns how many). */
int llm_worker_options(llm_worker *lw, wk_opt *out, int max);

/* Runs llm-worker-rbee; returns the process exit code. */
int llm_worker_main(int argc, char **argv);

/* What request validation needs of the loaded worker. */
llm_prompt_ctx llm_worker_prompt_ctx(llm_worker *lw);

/* Route registration (llm_routes_*.c). */
rb_status llm_routes_jobs_add(llm_worker *lw, rb_error *err);
rb_status llm_routes_openai_add(llm_worker *lw, rb_error *err);
rb_status llm_routes_embed_add(llm_worker *lw, rb_error *err);
rb_status llm_routes_tokens_add(llm_worker *lw, rb_error *err);
rb_status llm_routes_props_add(llm_worker *lw, rb_error *err);

#endif

/* The inference thread: it alone touches the model. It runs continuous
 * batching over a fixed set of sequence slots (each with its own KV cache,
 * sampler, detokenizer stream and stop-string matcher): queued jobs join
 * at the next step, finished or cancelled ones leave, and every step
 * advances all active sequences by one token through one llm_step_fn call.
 * A job of n choices takes n slots at once: its prompt is prefilled once,
 * the KV cache copied to the other slots (rb_kv_cache_copy) and every
 * choice samples its first token from the same logits with its own seed
 * (seed + choice). Requests beyond the free slots wait in a bounded queue,
 * first come first served. Log probabilities are computed from a sequence's
 * raw logits row only when its request asks for them. Embedding jobs run
 * whole in one slot when admitted. With cache_prompt a prompt that starts
 * with tokens a slot's cache already holds (this slot's or, copied on the
 * device, another's) prefills only the rest (llm_prefix.h). Jobs carry an
 * llm_task payload (llm_job.h). */
#ifndef RBEE_LLM_ENGINE_H
#define RBEE_LLM_ENGINE_H

#include "rbee/model.h"
#include "rbee/tokenizer.h"
#include "worker/wk_job.h"
#include "worker/wk_log.h"
#include "worker_llm/llm_metrics.h"
#include "worker_llm/llm_step.h"

typedef struct llm_engine_opts {
    int parallel;      /* sequence slots */
    int64_t ctx_size;  /* KV positions per slot */
    int queue_depth;   /* jobs that may wait beyond the free slots */
    llm_step_fn step;  /* NULL: llm_step_default() */
    bool cache_prompt; /* reuse cached prompt prefixes (--cache-prompt; false: every prompt prefilled whole) */
} llm_engine_opts;

typedef struct llm_engine llm_engine;

/* Allocates the slots' KV caches. log and metrics may be NULL. */
rb_status llm_engine_create(rb_model *m, const rb_tokenizer *tok, const llm_engine_opts *o, wk_log *log,
                            llm_metrics *metrics, llm_engine **out, rb_error *err);
rb_status llm_engine_start(llm_engine *e, rb_error *err);
/* Cancels whatever is queued or running, joins the thread and frees. */
void llm_engine_destroy(llm_engine *e);

/* Queues a job (takes a new reference); a job that has to wait for a slot
 * gets a "queued" event {"position": 1..} first. RB_E_RANGE: the queue is full;
 * RB_E_CANCELLED: the engine no longer accepts work (draining);
 * RB_E_INVALID: more choices than the engine has slots. */
rb_status llm_engine_submit(llm_engine *e, wk_job *j);
/* Stops accepting new jobs (queued and running ones go on). */
void llm_engine_stop_accepting(llm_engine *e);
/* Wakes the thread so it notices cancelled jobs at once. */
void llm_engine_poke(llm_engine *e);
void llm_engine_stats(llm_engine *e, int *queued, int *active);
int llm_engine_parallel(const llm_engine *e);
int64_t llm_engine_ctx_size(const llm_engine *e);
int llm_engine_queue_capacity(const llm_engine *e);
size_t llm_engine_kv_bytes(const llm_engine *e);

#endif

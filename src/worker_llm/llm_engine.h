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
 * device, another's) prefills only the rest (llm_prefix.h). With
 * prefill_chunk N > 0 a prompt is not prefilled at admission but piece by
 * piece inside the steps: each step runs, in one rb_model_forward_seqs pass,
 * one token of every decoding sequence plus up to N prompt tokens of the
 * jobs still prefilling, first admitted first, so a long prompt never stalls
 * the running streams (0: each prompt whole at admission, the running
 * streams waiting meanwhile). Jobs carry an llm_task payload (llm_job.h). */
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
    llm_seqs_fn seqs;  /* steps that run prompt pieces (NULL: llm_seqs_forward) */
    bool cache_prompt; /* reuse cached prompt prefixes (--cache-prompt; false: every prompt prefilled whole) */
    /* prompt tokens a step may run beside the decode tokens (--prefill-chunk,
     * 0..LLM_MAX_PREFILL_CHUNK; 0: every prompt whole at admission). On a
     * batch-invariant backend a prompt's pieces do not depend on the load:
     * each is the next N tokens (the last one the rest), run whole in one
     * step. Where cached positions must give a cold run's bits (a
     * batch-invariant CPU backend) a prompt of more than
     * RB_BATCH_INVARIANT_ROWS tokens runs in pieces of more than that many
     * (the rows of a product of more rows take other arithmetic), so a piece
     * holds at least RB_BATCH_INVARIANT_ROWS + 1 tokens and a prompt's last
     * piece up to RB_BATCH_INVARIANT_ROWS more than N. */
    int prefill_chunk;
} llm_engine_opts;

/* The largest prefill_chunk; with prefill_chunk > 0 parallel may be at most
 * this too, so that a step (at most RB_MODEL_MAX_STEP_TOKENS tokens) always
 * has room for a piece of prompt. */
#define LLM_MAX_PREFILL_CHUNK 256

typedef struct llm_engine llm_engine;

/* Allocates the slots' KV caches. log and metrics may be NULL.
 * RB_E_INVALID: parallel < 1, ctx_size < 2, a negative queue depth,
 * prefill_chunk out of 0..LLM_MAX_PREFILL_CHUNK, or prefill_chunk > 0 with
 * more than LLM_MAX_PREFILL_CHUNK slots. */
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

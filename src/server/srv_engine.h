/* The inference thread: it alone touches the model. It runs continuous
 * batching over a fixed set of sequence slots (each with its own KV cache,
 * sampler, detokenizer stream and stop-string matcher): queued jobs join
 * at the next step, finished or cancelled ones leave, and every step
 * advances all active sequences by one token through one srv_step_fn call.
 * Requests beyond the free slots wait in a bounded queue. */
#ifndef RBEE_SRV_ENGINE_H
#define RBEE_SRV_ENGINE_H

#include "rbee/model.h"
#include "rbee/tokenizer.h"
#include "server/srv_job.h"
#include "server/srv_log.h"
#include "server/srv_metrics.h"
#include "server/srv_step.h"

typedef struct srv_engine_opts {
    int parallel;      /* sequence slots */
    int64_t ctx_size;  /* KV positions per slot */
    int queue_depth;   /* jobs that may wait beyond the free slots */
    srv_step_fn step;  /* NULL: srv_step_default() */
} srv_engine_opts;

typedef struct srv_engine srv_engine;

/* Allocates the slots' KV caches. log and metrics may be NULL. */
rb_status srv_engine_create(rb_model *m, const rb_tokenizer *tok, const srv_engine_opts *o, srv_log *log,
                            srv_metrics *metrics, srv_engine **out, rb_error *err);
rb_status srv_engine_start(srv_engine *e, rb_error *err);
/* Cancels whatever is queued or running, joins the thread and frees. */
void srv_engine_destroy(srv_engine *e);

/* Queues a job (takes a new reference). RB_E_RANGE: the queue is full;
 * RB_E_CANCELLED: the engine no longer accepts work (draining). */
rb_status srv_engine_submit(srv_engine *e, srv_job *j);
/* Stops accepting new jobs (queued and running ones go on). */
void srv_engine_stop_accepting(srv_engine *e);
/* Wakes the thread so it notices cancelled jobs at once. */
void srv_engine_poke(srv_engine *e);
void srv_engine_stats(srv_engine *e, int *queued, int *active);
int srv_engine_parallel(const srv_engine *e);
int64_t srv_engine_ctx_size(const srv_engine *e);
int srv_engine_queue_capacity(const srv_engine *e);
size_t srv_engine_kv_bytes(const srv_engine *e);

#endif

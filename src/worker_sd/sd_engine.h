/* The generation thread: it alone touches the model (a model runs one
 * generation at a time). Jobs wait in a bounded queue (--queue-depth
 * beyond the one running) and run in order; each runs its iterations
 * through rb_sd_generate with a step callback that reports progress,
 * makes previews and stops the run within one step of a cancel (DELETE, a
 * client gone, A1111's interrupt) or a skip; then the latents are decoded,
 * in tiles if the whole decode runs out of memory, and every image is
 * encoded (PNG with its infotext, or JPEG) and handed to the job. Jobs
 * carry an sd_task payload (sd_job.h). */
#ifndef RBEE_SD_ENGINE_H
#define RBEE_SD_ENGINE_H

#include "rbee/sd_pipeline.h"
#include "worker/wk_job.h"
#include "worker/wk_log.h"
#include "worker_sd/sd_metrics.h"

typedef struct sd_engine_opts {
    int queue_depth; /* jobs that may wait beyond the running one */
    rb_taesd *taesd; /* previews through this decoder (the caller's, on the model's backend), or NULL */
} sd_engine_opts;

typedef struct sd_engine sd_engine;

/* log and metrics may be NULL. */
rb_status sd_engine_create(rb_sd_model *m, const sd_engine_opts *o, wk_log *log, sd_metrics *metrics,
                           sd_engine **out, rb_error *err);
rb_status sd_engine_start(sd_engine *e, rb_error *err);
/* Cancels what is queued or running, joins the thread and frees. */
void sd_engine_destroy(sd_engine *e);

/* Queues a job (takes a new reference). RB_E_RANGE: the queue is full;
 * RB_E_CANCELLED: the engine no longer accepts work (draining). */
rb_status sd_engine_submit(sd_engine *e, wk_job *j);
void sd_engine_stop_accepting(sd_engine *e);
/* Wakes the thread so it drops a cancelled queued job at once (a job's
 * cancel hook; a running one notices at its next step). */
void sd_engine_poke(sd_engine *e);
void sd_engine_stats(sd_engine *e, int *queued, int *active);
/* The running job (a new reference), or NULL. */
wk_job *sd_engine_current(sd_engine *e);

/* The decode with its fallback, exposed for tests: fn(user, p, out) as
 * rb_sd_decode; when it fails with RB_E_NOMEM and p did not ask for tiles,
 * it runs again with tiling on and tiles of retry_tile latent pixels
 * (*retried set). */
typedef rb_status (*sd_decode_fn)(void *user, const rb_sd_params *p, rb_sd_output *out, rb_error *err);
rb_status sd_decode_fallback(sd_decode_fn fn, void *user, const rb_sd_params *p, int retry_tile, rb_sd_output *out,
                             bool *retried, rb_error *err);

#endif

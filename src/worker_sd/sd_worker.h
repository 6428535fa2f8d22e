/* sd-worker-rbee on the shared worker layer: its flags (--sd-version,
 * --use-f16, --vae, --taesd, --max-size), the loaded model and its limits,
 * the generation engine behind a read-write lock (handlers use it,
 * shutdown takes it away), the metrics, the AUTOMATIC1111 options this
 * worker keeps (POST /sdapi/v1/options), and the routes it adds: rbee job
 * creation, /sdapi/v1 and the OpenAI images API. sd_worker_main is the
 * whole process. */
#ifndef RBEE_SD_WORKER_H
#define RBEE_SD_WORKER_H

#include "rbee/backend.h"
#include "rbee/sd_pipeline.h"
#include "worker/wk_worker.h"
#include "worker_sd/sd_a1111.h"
#include "worker_sd/sd_engine.h"
#include "worker_sd/sd_metrics.h"
#include "worker_sd/sd_request.h"

#include <pthread.h>

typedef struct sd_worker {
    wk_worker *w;
    /* flags */
    const char *sd_version, *vae_path, *taesd_path, *config_dir;
    bool use_f16;
    bool no_t5; /* --no-t5: SD3 without its T5 encoder */
    int64_t max_size;
    sd_metrics metrics;
    bool metrics_ok;

    /* model: written once by the main thread before the worker is READY */
    rb_backend *be;
    rb_sd_model *model;
    rb_taesd *taesd; /* --taesd, or NULL */
    rb_sd_model_info info;
    sd_model_limits limits;
    bool turbo;

    pthread_rwlock_t engine_lock;
    sd_engine *engine;

    pthread_mutex_t opts_mu;
    sd_a1111_options a1111;
} sd_worker;

/* Runs sd-worker-rbee; returns the process exit code. */
int sd_worker_main(int argc, char **argv);

/* The worker's own flags, writing into sw (at most max; returns how many). */
int sd_worker_options(sd_worker *sw, wk_opt *out, int max);
/* --sd-version: "auto" or a family; the arch it implies (*arch_set false
 * for auto), the prediction for SD 2.x and whether it is SDXL-Turbo.
 * False for an unknown name. */
bool sd_version_parse(const char *v, rb_sd_arch *arch, bool *arch_set, rb_sd_predict_opt *pred, bool *turbo);

/* The running job (new reference) or NULL. */
wk_job *sd_worker_current(sd_worker *sw);

/* Field names an API uses for the engine's own checks. */
typedef struct sd_field_names {
    const char *clip_skip, *strength, *sampler, *mask, *steps;
} sd_field_names;
/* The engine's checks of a parsed request against the model (clip skip
 * within the text encoders, a schedule the sampler takes, a strength that
 * leaves a step, an inpainting model's mask...), recorded as field errors. */
void sd_worker_check(sd_worker *sw, const sd_gen_request *r, const sd_field_names *names, wk_errors *errs);

/* Route registration (sd_routes_*.c). */
rb_status sd_routes_jobs_add(sd_worker *sw, rb_error *err);
rb_status sd_routes_a1111_add(sd_worker *sw, rb_error *err);
rb_status sd_routes_openai_add(sd_worker *sw, rb_error *err);

#endif

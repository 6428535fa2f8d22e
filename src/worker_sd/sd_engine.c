/* Implementation of sd_engine.h: the queue, the job loop, the step
 * callback (progress, previews, cancel) and the output encoding. */
#include "worker_sd/sd_engine.h"
#include "worker/wk_base64.h"
#include "worker/wk_job_queue.h"
#include "worker/wk_util.h"
#include "worker_sd/sd_job.h"
#include "worker_sd/sd_preview.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sd_engine {
    rb_sd_model *m;
    rb_sd_model_info info;
    sd_engine_opts o;
    wk_log *log;
    sd_metrics *metrics;
    pthread_t th;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    wk_job_queue q;
    wk_job *running; /* the engine's reference is the one taken from the queue */
    bool stop, accepting;
};

rb_status sd_engine_create(rb_sd_model *m, const sd_engine_opts *o, wk_log *log, sd_metrics *metrics,
                           sd_engine **out, rb_error *err) {
    if (!m || !o || !out || o->queue_depth < 0) return rb_error_set(err, RB_E_INVALID, "sd_engine_create: bad arguments");
    *out = NULL;
    sd_engine *e = calloc(1, sizeof *e);
    if (!e) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    e->m = m;
    rb_sd_model_get_info(m, &e->info);
    e->o = *o;
    e->log = log;
    e->metrics = metrics;
    e->accepting = true;
    const rb_status qs = wk_job_queue_init(&e->q, o->queue_depth + 2);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (qs != RB_OK) {
        sd_engine_destroy(e);
        return rb_error_set(err, RB_E_NOMEM, "out of memory for a queue of %d", o->queue_depth);
    }
    *out = e;
    return RB_OK;
}

/* ---- one run's step callback ---- */

typedef struct run_ctx {
    sd_engine *e;
    wk_job *j;
    sd_task *t;
    int last_step;
    double t0;
} run_ctx;

static bool stop_requested(const run_ctx *c) {
    return wk_job_cancel_requested(c->j) || atomic_load(&c->t->skip);
}

static rb_status on_step(void *user, const rb_sd_step_info *info) {
    run_ctx *c = user;
    if (stop_requested(c)) return RB_E_CANCELLED;
    if (info->step == c->last_step) return RB_OK; /* the first half of a two-evaluation step */
    c->last_step = info->step;
    const double elapsed = wk_now_ms() - c->t0;
    const double eta = info->eval > 0 ? elapsed / info->eval * (info->n_evals - info->eval) : 0.0;
    if (c->e->metrics) sd_metrics_step(c->e->metrics);
    const sd_gen_request *r = &c->t->req;
    char *b64 = NULL;
    if (r->preview_every > 0 && info->step % r->preview_every == 0 && info->step < info->n_steps) {
        uint8_t *png = NULL;
        size_t len = 0;
        rb_error err;
        rb_error_clear(&err);
        /* the clean image this step predicts, not the noisy latents */
        const float *lat = info->denoised ? info->denoised : info->latents;
        if (sd_preview_png(c->e->o.taesd, c->e->info.arch, lat, info->batch, info->channels, info->latent_h,
                           info->latent_w, &png, &len, &err) == RB_OK)
            b64 = wk_base64_encode(png, len);
        free(png);
    }
    pthread_mutex_lock(&c->j->mu);
    c->t->step = info->step;
    c->t->total_steps = info->n_steps;
    c->t->eta_ms = eta;
    if (b64 && r->api != SD_API_RBEE) { /* the synchronous APIs' progress route shows the last one */
        free(c->t->preview_b64);
        c->t->preview_b64 = b64;
        b64 = NULL;
    }
    pthread_mutex_unlock(&c->j->mu);
    if (r->api == SD_API_RBEE) {
        json_t *ev = json_pack("{s:i,s:i,s:I}", "step", info->step, "total", info->n_steps, "eta_ms", (json_int_t)(eta + 0.5));
        if (ev && b64) json_object_set_new(ev, "preview", json_stringn_nocheck(b64, strlen(b64)));
        if (!ev || !wk_job_push(c->j, "progress", ev, NULL, 0)) {
            free(b64);
            return RB_E_NOMEM;
        }
    }
    free(b64);
    return RB_OK;
}

/* ---- decoding with the tiled fallback ---- */

rb_status sd_decode_fallback(sd_decode_fn fn, void *user, const rb_sd_params *p, int retry_tile, rb_sd_output *out,
                             bool *retried, rb_error *err) {
    *retried = false;
    rb_status s = fn(user, p, out, err);
    if (s != RB_E_NOMEM || p->vae_tiling == RB_SD_TILING_ON || retry_tile < 8) return s;
    rb_sd_params q = *p;
    q.vae_tiling = RB_SD_TILING_ON;
    q.vae_tile = retry_tile;
    *retried = true;
    rb_error_clear(err);
    return fn(user, &q, out, err);
}

static rb_status decode_model(void *user, const rb_sd_params *p, rb_sd_output *out, rb_error *err) {
    return rb_sd_decode(user, p, out, err);
}

/* Tiles for the retry: half the model's tile, and at most half the latents' longer side. */
static int retry_tile(const sd_engine *e, const rb_sd_output *o) {
    int tile = e->info.default_height / (e->info.vae_scale > 0 ? e->info.vae_scale : 8);
    const int longer = o->latent_h > o->latent_w ? o->latent_h : o->latent_w;
    if (tile >= longer) tile = (longer + 1) / 2;
    tile = tile / 8 * 8;
    return tile >= 8 ? tile : 0;
}

/* ---- encoding ---- */

static rb_status encode(const sd_gen_request *r, const rb_image *img, const char *infotext, uint8_t **data,
                        size_t *len, rb_error *err) {
    if (r->format == SD_OUT_JPEG) return rb_jpeg_encode(img, r->jpeg_quality, data, len, err);
    char key[] = "parameters";
    rb_png_text text = {.key = key, .text = (char *)infotext, .len = strlen(infotext)};
    rb_png_encode_opts po = {.compression = -1, .texts = &text, .n_texts = 1};
    return rb_png_encode(img, &po, data, len, err);
}

static const char *error_code(rb_status s) {
    switch (s) {
    case RB_E_NOMEM: return "OUT_OF_MEMORY";
    case RB_E_INVALID:
    case RB_E_RANGE:
    case RB_E_UNSUPPORTED: return "INVALID_PARAMS";
    default: return "GENERATION_FAILED";
    }
}

static void fail(sd_engine *e, wk_job *j, rb_status s, const char *msg) {
    if (s == RB_E_NOMEM && e->metrics) sd_metrics_oom(e->metrics);
    if (e->metrics) sd_metrics_outcome(e->metrics, false, true);
    wk_job_fail(j, error_code(s), msg);
    wk_log_event(e->log, WK_LOG_ERROR, "job_failed", json_pack("{s:s}", "job_id", j->id), "%s: %s", error_code(s), msg);
}

/* One iteration: generate, decode, encode, hand over. Returns RB_OK,
 * RB_E_CANCELLED (cancel or skip; nothing failed) or the failure
 * (already reported). */
static rb_status run_iter(sd_engine *e, wk_job *j, int iter, int *index) {
    sd_task *t = sd_job_task(j);
    const sd_gen_request *r = &t->req;
    rb_sd_params p;
    sd_request_params(r, iter, &p);
    sd_request_params_arch(r, e->info.arch, &p);
    p.skip_decode = true;
    run_ctx c = {.e = e, .j = j, .t = t, .last_step = 0, .t0 = wk_now_ms()};
    rb_sd_callbacks cb = {.progress = NULL, .on_step = on_step, .cancel = NULL, .user = &c};
    rb_sd_output out;
    rb_error err;
    rb_error_clear(&err);
    pthread_mutex_lock(&j->mu);
    t->iter = iter;
    t->step = 0;
    pthread_mutex_unlock(&j->mu);
    rb_status s = rb_sd_generate(e->m, &p, &cb, &out, &err);
    if (s == RB_OK && stop_requested(&c)) { /* stopped during the last step: no decode */
        rb_sd_output_free(&out);
        s = RB_E_CANCELLED;
    }
    if (s == RB_E_CANCELLED) return s;
    if (s != RB_OK) {
        fail(e, j, s, err.msg);
        return s;
    }
    bool retried = false;
    p.skip_decode = false;
    s = sd_decode_fallback(decode_model, e->m, &p, retry_tile(e, &out), &out, &retried, &err);
    if (retried && e->metrics) sd_metrics_tiled_retry(e->metrics);
    if (retried)
        wk_log_event(e->log, WK_LOG_WARN, "vae_tiled_retry", json_pack("{s:s,s:b}", "job_id", j->id, "ok", s == RB_OK),
                     "the VAE decode ran out of memory; decoded in tiles instead");
    if (s != RB_OK) {
        rb_sd_output_free(&out);
        fail(e, j, s, err.msg);
        return s;
    }
    for (int i = 0; i < out.count && s == RB_OK; i++) {
        char *info = NULL;
        uint8_t *data = NULL;
        size_t len = 0;
        if ((s = rb_sd_infotext(e->m, &p, &out, i, &info, &err)) == RB_OK &&
            (s = encode(r, &out.images[i], info, &data, &len, &err)) == RB_OK) {
            if (r->api == SD_API_RBEE) {
                json_t *ev = json_pack("{s:i,s:I,s:o,s:s}", "index", *index, "seed", (json_int_t)p.seed, "png",
                                       wk_base64_json(data, len), "infotext", info);
                if (!ev || !wk_job_push(j, "image", ev, NULL, 0)) s = rb_error_set(&err, RB_E_NOMEM, "out of memory");
            }
            if (s == RB_OK && !sd_job_add_result(j, data, len, p.seed, info)) {
                s = rb_error_set(&err, RB_E_NOMEM, "out of memory");
            }
            data = NULL;
            info = NULL;
            (*index)++;
        }
        free(data);
        free(info);
    }
    if (e->metrics && s == RB_OK)
        sd_metrics_run(e->metrics, t->route_label, out.count, out.n_evals > 0 ? t->total_steps : 0, out.denoise_ms,
                       out.text_ms + out.denoise_ms + out.decode_ms);
    rb_sd_output_free(&out);
    if (s != RB_OK) fail(e, j, s, err.msg);
    return s;
}

static void end_job(sd_engine *e, wk_job *j, bool cancelled, double t0) {
    sd_task *t = sd_job_task(j);
    pthread_mutex_lock(&j->mu);
    snprintf(t->stop_reason, sizeof t->stop_reason, "%s", cancelled ? "cancelled" : "completed");
    t->time_ms = t0 > 0 ? wk_now_ms() - t0 : 0.0;
    const int n = t->n_results;
    pthread_mutex_unlock(&j->mu);
    if (e->metrics) sd_metrics_outcome(e->metrics, cancelled, false);
    wk_job_end(j, json_pack("{s:i,s:I,s:s,s:I}", "images", n, "seed", (json_int_t)t->req.seed, "stop_reason",
                            cancelled ? "cancelled" : "completed", "time_ms", (json_int_t)(t->time_ms + 0.5)));
}

static void run_job(sd_engine *e, wk_job *j) {
    sd_task *t = sd_job_task(j);
    const sd_gen_request *r = &t->req;
    if (wk_job_cancel_requested(j)) {
        end_job(e, j, true, 0);
        return;
    }
    const double t0 = wk_now_ms();
    json_t *fields = json_pack("{s:s,s:I,s:i,s:i,s:i,s:i,s:i}", "model", t->model_name, "seed", (json_int_t)r->seed,
                               "width", r->width, "height", r->height, "steps", r->steps, "batch_size", r->batch,
                               "n_iter", r->n_iter);
    if (!wk_job_start(j, fields)) {
        fail(e, j, RB_E_NOMEM, "out of memory starting the job");
        return;
    }
    int index = 0;
    bool cancelled = false;
    for (int it = 0; it < r->n_iter; it++) {
        if (wk_job_cancel_requested(j)) {
            cancelled = true;
            break;
        }
        atomic_store(&t->skip, false);
        rb_status s = run_iter(e, j, it, &index);
        if (s == RB_E_CANCELLED) {
            if (wk_job_cancel_requested(j)) {
                cancelled = true;
                break;
            }
            continue; /* skipped: the next run */
        }
        if (s != RB_OK) return; /* failed and reported */
    }
    end_job(e, j, cancelled, t0);
}

static void *engine_main(void *arg) {
    sd_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && e->q.n == 0) pthread_cond_wait(&e->cv, &e->mu);
        wk_job *j = wk_job_queue_pop(&e->q);
        if (!j) { /* stopping, nothing left */
            pthread_mutex_unlock(&e->mu);
            return NULL;
        }
        const bool stopping = e->stop;
        e->running = j;
        pthread_mutex_unlock(&e->mu);
        if (stopping) wk_job_cancel(j); /* outside the lock: the job's hook may poke the engine */
        run_job(e, j);
        pthread_mutex_lock(&e->mu);
        e->running = NULL;
        pthread_mutex_unlock(&e->mu);
        wk_job_unref(j);
    }
}

rb_status sd_engine_start(sd_engine *e, rb_error *err) {
    if (pthread_create(&e->th, NULL, engine_main, e) != 0)
        return rb_error_set(err, RB_E_NOMEM, "cannot start the generation thread");
    e->thread_started = true;
    return RB_OK;
}

void sd_engine_destroy(sd_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    e->accepting = false;
    wk_job *cur = e->running ? wk_job_ref(e->running) : NULL;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (cur) { /* queued jobs are cancelled by the thread as it takes them */
        wk_job_cancel(cur);
        wk_job_unref(cur);
    }
    if (e->thread_started) pthread_join(e->th, NULL);
    for (wk_job *j; (j = wk_job_queue_pop(&e->q));) { /* never taken by a thread */
        end_job(e, j, true, 0);
        wk_job_unref(j);
    }
    wk_job_queue_free(&e->q);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

rb_status sd_engine_submit(sd_engine *e, wk_job *j) {
    pthread_mutex_lock(&e->mu);
    rb_status s = RB_OK;
    if (!e->accepting || e->stop) s = RB_E_CANCELLED;
    else if ((s = wk_job_queue_push(&e->q, j, e->o.queue_depth, e->running ? 0 : 1)) == RB_OK)
        pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return s;
}

void sd_engine_stop_accepting(sd_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->accepting = false;
    pthread_mutex_unlock(&e->mu);
}

/* Drops cancelled jobs from the queue at once (their streams end now,
 * not when their turn comes). */
void sd_engine_poke(sd_engine *e) {
    wk_job *dropped[64];
    pthread_mutex_lock(&e->mu);
    const int nd = wk_job_queue_take_cancelled(&e->q, false, dropped, 64);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < nd; i++) {
        end_job(e, dropped[i], true, 0);
        wk_job_unref(dropped[i]);
    }
}

void sd_engine_stats(sd_engine *e, int *queued, int *active) {
    pthread_mutex_lock(&e->mu);
    if (queued) *queued = e->q.n;
    if (active) *active = e->running != NULL;
    pthread_mutex_unlock(&e->mu);
}

wk_job *sd_engine_current(sd_engine *e) {
    pthread_mutex_lock(&e->mu);
    wk_job *j = e->running ? wk_job_ref(e->running) : NULL;
    pthread_mutex_unlock(&e->mu);
    return j;
}

/* Implementation of sd_worker.h: the worker definition handed to the
 * worker layer (flags, setup, load with warm-up, busy counts, drain and
 * stop, /v1/info fields, teardown), the bundled default model's lookup and
 * the helpers the routes share. */
#include "worker_sd/sd_worker.h"
#include "worker/wk_util.h"
#include "worker/wk_web.h"
#include "worker_sd/sd_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef RBEE_VERSION
#define RBEE_VERSION "0.0.0"
#endif
/* the built-in page (src/worker_sd/web, embedded by the build) */
extern const rb_embedded_file sd_web_files[];
extern const int sd_web_n_files;

/* The bundled model (rb_sd_default_model), or the reason there is none in buf. */
static bool default_model(char *buf, size_t len) {
    rb_error err = {0};
    if (rb_sd_default_model(buf, len, &err) == RB_OK) return true;
    snprintf(buf, len, "%s", err.msg);
    return false;
}

bool sd_version_parse(const char *v, rb_sd_arch *arch, bool *arch_set, rb_sd_predict_opt *pred, bool *turbo) {
    *arch_set = true;
    *pred = RB_SD_PREDICT_AUTO;
    *turbo = false;
    if (!v || !strcasecmp(v, "auto")) {
        *arch_set = false;
        return true;
    }
    if (!strcasecmp(v, "v1") || !strcasecmp(v, "v1-5") || !strcasecmp(v, "sd1") || !strcasecmp(v, "sd15")) {
        *arch = RB_SD_ARCH_SD1;
    } else if (!strcasecmp(v, "v2") || !strcasecmp(v, "v2-1") || !strcasecmp(v, "sd2") || !strcasecmp(v, "sd21")) {
        *arch = RB_SD_ARCH_SD2; /* 768-v: v-prediction for single files; folders say it themselves */
    } else if (!strcasecmp(v, "v2-1-base") || !strcasecmp(v, "v2-base")) {
        *arch = RB_SD_ARCH_SD2;
        *pred = RB_SD_PREDICT_EPSILON;
    } else if (!strcasecmp(v, "xl") || !strcasecmp(v, "sdxl")) {
        *arch = RB_SD_ARCH_SDXL;
    } else if (!strcasecmp(v, "turbo") || !strcasecmp(v, "xl-turbo") || !strcasecmp(v, "sdxl-turbo")) {
        *arch = RB_SD_ARCH_SDXL;
        *turbo = true;
    } else if (!strcasecmp(v, "xl-refiner") || !strcasecmp(v, "refiner") || !strcasecmp(v, "sdxl-refiner")) {
        *arch = RB_SD_ARCH_SDXL_REFINER;
    } else if (!strcasecmp(v, "3-medium") || !strcasecmp(v, "3.5-medium") || !strcasecmp(v, "3.5-large") ||
               !strcasecmp(v, "sd3") || !strcasecmp(v, "3")) {
        *arch = RB_SD_ARCH_SD3; /* Stable Diffusion 3 / 3.5 (MMDiT, flow matching) */
    } else {
        return false;
    }
    return true;
}

static rb_status submit(void *user, wk_job *j) {
    sd_worker *sw = user;
    pthread_rwlock_rdlock(&sw->engine_lock);
    rb_status s = sw->engine ? sd_engine_submit(sw->engine, j) : RB_E_UNSUPPORTED;
    pthread_rwlock_unlock(&sw->engine_lock);
    return s;
}

/* The jobs' cancel hook: wakes the engine so it notices a cancel at once. */
static void sd_worker_poke(void *user) {
    sd_worker *sw = user;
    pthread_rwlock_rdlock(&sw->engine_lock);
    if (sw->engine) sd_engine_poke(sw->engine);
    pthread_rwlock_unlock(&sw->engine_lock);
}

wk_job *sd_worker_current(sd_worker *sw) {
    pthread_rwlock_rdlock(&sw->engine_lock);
    wk_job *j = sw->engine ? sd_engine_current(sw->engine) : NULL;
    pthread_rwlock_unlock(&sw->engine_lock);
    return j;
}

void sd_worker_check(sd_worker *sw, const sd_gen_request *r, const sd_field_names *names, wk_errors *errs) {
    if (errs->n > 0 || !sw->model) return;
    rb_sd_params p;
    sd_request_params(r, 0, &p);
    sd_request_params_arch(r, sw->info.arch, &p);
    rb_error err;
    rb_error_clear(&err);
    rb_status s = rb_sd_check_params(sw->model, &p, &err);
    if (s == RB_OK) return;
    const char *field = "parameters";
    if (strstr(err.msg, "clip skip")) field = names->clip_skip;
    else if (strstr(err.msg, "strength")) field = names->strength;
    else if (strstr(err.msg, "schedule") || strstr(err.msg, "sampler")) field = names->sampler;
    else if (strstr(err.msg, "mask") || strstr(err.msg, "inpainting")) field = names->mask;
    else if (strstr(err.msg, "steps")) field = names->steps;
    wk_errors_add(errs, field, s == RB_E_UNSUPPORTED ? "unsupported" : "model", "%s", err.msg);
}

static void load_stats(void *user, int *queued, int *active) {
    sd_worker *sw = user;
    *queued = *active = 0;
    pthread_rwlock_rdlock(&sw->engine_lock);
    if (sw->engine) sd_engine_stats(sw->engine, queued, active);
    pthread_rwlock_unlock(&sw->engine_lock);
}

static bool memory(void *user, uint64_t *weight_bytes, rb_backend **be) {
    sd_worker *sw = user;
    *weight_bytes = sw->info.weight_bytes;
    *be = sw->be;
    return sw->model != NULL;
}

static rb_status setup(wk_worker *w, void *user, rb_error *err) {
    sd_worker *sw = user;
    sw->w = w;
    rb_sd_arch arch;
    bool arch_set, turbo;
    rb_sd_predict_opt pred;
    if (!sd_version_parse(sw->sd_version, &arch, &arch_set, &pred, &turbo))
        return rb_error_set(err, RB_E_INVALID, "--sd-version must be auto, v1-5, v2-1, v2-1-base, xl, turbo or "
                            "xl-refiner (got '%s')", sw->sd_version);
    sd_metrics_init(&sw->metrics, &w->metrics);
    sw->metrics_ok = true;
    rb_status s;
    if ((s = sd_routes_jobs_add(sw, err)) != RB_OK) return s;
    if (!w->cfg.no_webui && (s = wk_web_add(&w->router, sd_web_files, sd_web_n_files, err)) != RB_OK) return s;
    if ((s = sd_routes_a1111_add(sw, err)) != RB_OK) return s;
    return sd_routes_openai_add(sw, err);
}

/* One small generation (1 step, CFG, decode), so the first request does
 * not pay for first-use allocations. */
static void warmup(sd_worker *sw) {
    rb_sd_params p;
    rb_sd_params_init(&p);
    p.prompt = "warm-up";
    p.steps = 1;
    p.guidance_scale = 7.5f;
    p.width = p.height = 8 * sw->limits.vae_scale;
    rb_sd_output out;
    rb_error err;
    rb_error_clear(&err);
    const double t0 = wk_now_ms();
    if (rb_sd_generate(sw->model, &p, NULL, &out, &err) == RB_OK)
        WK_INFO(&sw->w->log, "warmup", "warmup done in %.1f ms", wk_now_ms() - t0);
    else
        WK_WARN(&sw->w->log, "warmup_failed", "warmup failed: %s", err.msg);
    rb_sd_output_free(&out);
}

static rb_status load(wk_worker *w, void *user, rb_error *err) {
    sd_worker *sw = user;
    rb_status s;
    rb_sd_arch want;
    bool arch_set, turbo;
    rb_sd_predict_opt pred;
    sd_version_parse(sw->sd_version, &want, &arch_set, &pred, &turbo);
    char spec[64];
    if (strcmp(w->cfg.backend, "cpu") == 0) snprintf(spec, sizeof spec, "cpu");
    else snprintf(spec, sizeof spec, "%s:%lld", w->cfg.backend, (long long)w->cfg.device);
    rb_backend_config bc = {.n_threads = (int)w->cfg.threads, .cpu_isa = NULL};
    const double t0 = wk_now_ms();
    WK_INFO(&w->log, "model_load", "loading %s on %s", w->model_path, spec);
    if ((s = rb_backend_create(spec, &bc, &sw->be, err)) != RB_OK) return s;
    rb_sd_model_opts mo;
    rb_sd_model_opts_init(&mo);
    mo.prediction = pred;
    mo.config_dir = sw->config_dir;
    mo.no_t5 = sw->no_t5;
    if (sw->use_f16) {
        mo.weight_dtype = RB_F16;
        mo.act_dtype = RB_F16;
    }
    /* random:sd15|sd21|sdxl: random weights at the published shapes, for benchmarks without a
     * download (the weights `rbee bench-sd --random` times: seed 1) */
    if (strncmp(w->model_path, "random:", 7) == 0) s = rb_sd_model_create_random(w->model_path + 7, sw->be, &mo, 1,
                                                                                  &sw->model, err);
    else s = rb_sd_model_load(w->model_path, sw->be, &mo, &sw->model, err);
    if (s != RB_OK) return s;
    if (sw->vae_path && (s = rb_sd_model_set_vae(sw->model, sw->vae_path, &mo, err)) != RB_OK) {
        rb_error_prefix(err, "--vae: ");
        return s;
    }
    if (turbo) { /* SDXL-Turbo's scheduler (Euler ancestral, trailing), which a single file cannot show */
        rb_sd_sched_config sc;
        if ((s = rb_sd_sched_config_family(&sc, RB_SD_FAMILY_SDXL_TURBO, err)) != RB_OK ||
            (s = rb_sd_model_set_sched_config(sw->model, &sc, err)) != RB_OK)
            return s;
    }
    rb_sd_model_get_info(sw->model, &sw->info);
    if (arch_set && sw->info.arch != want)
        return rb_error_set(err, RB_E_INVALID, "--sd-version %s expects a %s model, but %s is %s", sw->sd_version,
                            rb_sd_arch_name(want), w->model_path, rb_sd_arch_name(sw->info.arch));
    sw->turbo = turbo;
    sw->limits = (sd_model_limits){.max_size = (int)sw->max_size,
                                   .default_width = sw->info.default_width,
                                   .default_height = sw->info.default_height,
                                   /* SD3: StableDiffusion3Pipeline's defaults (28 steps, guidance 7) */
                                   .default_steps = turbo ? 4 : sw->info.arch == RB_SD_ARCH_SD3 ? 28 : 20,
                                   .default_cfg = turbo ? 0.0f : sw->info.arch == RB_SD_ARCH_SD3 ? 7.0f : 7.5f,
                                   .vae_scale = sw->info.vae_scale > 0 ? sw->info.vae_scale : 8};
    if (sw->limits.default_width > sw->max_size) sw->limits.default_width = (int)sw->max_size / 8 * 8;
    if (sw->limits.default_height > sw->max_size) sw->limits.default_height = (int)sw->max_size / 8 * 8;
    wk_log_event(&w->log, WK_LOG_INFO, "model_load",
                 json_pack("{s:s,s:s,s:I,s:i,s:i}", "arch", rb_sd_arch_name(sw->info.arch), "source", sw->info.source,
                           "weight_bytes", (json_int_t)sw->info.weight_bytes, "default_width",
                           sw->info.default_width, "default_height", sw->info.default_height),
                 "model loaded in %.0f ms", wk_now_ms() - t0);
    if (sw->taesd_path) {
        if ((s = rb_taesd_load(sw->taesd_path, sw->be, NULL, &sw->taesd, err)) != RB_OK) {
            rb_error_prefix(err, "--taesd: ");
            return s;
        }
        if (rb_taesd_latent_channels(sw->taesd) != sw->info.latent_channels)
            return rb_error_set(err, RB_E_INVALID, "--taesd: %s decodes %d latent channels, the model makes %d",
                                sw->taesd_path, rb_taesd_latent_channels(sw->taesd), sw->info.latent_channels);
    }
    if (!w->cfg.no_warmup) warmup(sw);
    sd_engine_opts eo = {.queue_depth = (int)w->cfg.queue_depth, .taesd = sw->taesd};
    sd_engine *e = NULL;
    if ((s = sd_engine_create(sw->model, &eo, &w->log, &sw->metrics, &e, err)) != RB_OK) return s;
    if ((s = sd_engine_start(e, err)) != RB_OK) {
        sd_engine_destroy(e);
        return s;
    }
    pthread_rwlock_wrlock(&sw->engine_lock);
    sw->engine = e;
    pthread_rwlock_unlock(&sw->engine_lock);
    WK_INFO(&w->log, "model_ready", "model %s ready in %.0f ms (queue %lld)", w->model_id, wk_now_ms() - t0,
            (long long)w->cfg.queue_depth);
    return RB_OK;
}

static void stop_accepting(void *user) {
    sd_worker *sw = user;
    pthread_rwlock_rdlock(&sw->engine_lock);
    if (sw->engine) sd_engine_stop_accepting(sw->engine);
    pthread_rwlock_unlock(&sw->engine_lock);
}

static void stop(void *user) {
    sd_worker *sw = user;
    pthread_rwlock_wrlock(&sw->engine_lock);
    sd_engine *e = sw->engine;
    sw->engine = NULL;
    pthread_rwlock_unlock(&sw->engine_lock);
    sd_engine_destroy(e);
}

static void info(void *user, json_t *j, bool loaded) {
    sd_worker *sw = user;
    loaded = loaded && sw->model;
    json_object_set_new(j, "max_size", json_integer((json_int_t)sw->max_size));
    /* the latent-to-RGB approximation knows the 4-channel latent spaces only (SD3's 16 need --taesd) */
    const bool rgb = !sw->model || sw->info.latent_channels == 4;
    json_object_set_new(j, "previews", json_string(sw->taesd ? "taesd" : rgb ? "latent-rgb" : "none"));
    if (sw->be) json_object_set_new(j, "backend", json_string(rb_backend_name(sw->be)));
    if (!loaded) {
        json_object_set_new(j, "memory", json_null());
        return;
    }
    rb_device_info di;
    memset(&di, 0, sizeof di);
    if (sw->be && rb_backend_device_info(sw->be, &di) != RB_OK) memset(&di, 0, sizeof di);
    json_object_set_new(j, "memory", json_pack("{s:I,s:I,s:I,s:I}", "model_bytes", (json_int_t)sw->info.weight_bytes,
                                               "process_rss_bytes", (json_int_t)wk_process_rss(),
                                               "device_total_bytes", (json_int_t)di.mem_total, "device_free_bytes",
                                               (json_int_t)di.mem_free));
    json_object_set_new(j, "architecture", json_string(rb_sd_arch_name(sw->info.arch)));
    json_object_set_new(j, "source", json_string(sw->info.source));
    json_object_set_new(j, "default_width", json_integer(sw->info.default_width));
    json_object_set_new(j, "default_height", json_integer(sw->info.default_height));
    json_object_set_new(j, "default_steps", json_integer(sw->limits.default_steps));
    json_object_set_new(j, "default_sampler", json_string(rb_sd_sampler_kind_name(sw->info.default_sampler)));
    json_object_set_new(j, "inpainting_model", json_boolean(sw->info.unet_in_channels == 9));
    json_object_set_new(j, "dtype", json_string(sw->use_f16 ? "f16" : "f32"));
    json_object_set_new(j, "device_name", json_string(di.name));
}

static void destroy(void *user) {
    sd_worker *sw = user;
    stop(sw);
    rb_taesd_free(sw->taesd);
    sw->taesd = NULL;
    rb_sd_model_free(sw->model);
    sw->model = NULL;
    if (sw->be) rb_backend_destroy(sw->be);
    sw->be = NULL;
    pthread_rwlock_destroy(&sw->engine_lock);
    pthread_mutex_destroy(&sw->opts_mu);
}

int sd_worker_options(sd_worker *sw, wk_opt *out, int max) {
    const wk_opt opts[] = {
        {"sd-version", WK_OPT_STRING, &sw->sd_version, 0, 0, "V",
         "auto (detected, default), v1-5, v2-1 (768-v), v2-1-base, xl, turbo (SDXL-Turbo: 4 steps, no CFG by "
         "default), xl-refiner or 3-medium (SD3 / SD3.5); a model of another family is refused"},
        {"no-t5", WK_OPT_FLAG, &sw->no_t5, 0, 0, NULL,
         "SD3: leave the T5 text encoder out (its part of the context is zeros; less memory)"},
        {"use-f16", WK_OPT_FLAG, &sw->use_f16, 0, 0, NULL, "half-precision weights and activations (default f32)"},
        {"vae", WK_OPT_STRING, &sw->vae_path, 0, 0, "DIR", "a diffusers vae/ folder used instead of the model's VAE"},
        {"config-dir", WK_OPT_STRING, &sw->config_dir, 0, 0, "DIR",
         "single-file and GGUF models: configs, tokenizers and scheduler from this diffusers folder (for "
         "checkpoints whose structure the tensors cannot show)"},
        {"taesd", WK_OPT_STRING, &sw->taesd_path, 0, 0, "PATH",
         "live previews through this TAESD decoder (taesd_decoder.safetensors for SD 1.x/2.x, taesdxl_decoder for "
         "SDXL, or a diffusers AutoencoderTiny folder) instead of the latent-to-RGB approximation"},
        {"max-size", WK_OPT_INT, &sw->max_size, 64, RB_SD_MAX_SIDE, "N",
         "largest width or height a request may ask for, in pixels (default 2048)"},
    };
    const int n = (int)(sizeof opts / sizeof opts[0]);
    if (max < n) return 0;
    memcpy(out, opts, sizeof opts);
    return n;
}

int sd_worker_main(int argc, char **argv) {
    sd_worker sw;
    memset(&sw, 0, sizeof sw);
    sw.sd_version = "auto";
    sw.max_size = 2048;
    sd_a1111_options_init(&sw.a1111);
    pthread_rwlock_init(&sw.engine_lock, NULL);
    pthread_mutex_init(&sw.opts_mu, NULL);
    wk_opt opts[8];
    const int n_opts = sd_worker_options(&sw, opts, 8);
    const wk_worker_def def = {
        .name = "sd-worker-rbee",
        .version = RBEE_VERSION,
        .summary = "Serves a Stable Diffusion model (diffusers folder, .safetensors checkpoint or GGUF) over HTTP: "
                   "rbee jobs with live progress, AUTOMATIC1111's /sdapi/v1 and the OpenAI images API.",
        .opts = opts,
        .n_opts = n_opts,
        .env_help = "RBEE_DEFAULT_SD_MODEL: the model served without --model (default: the bundled model in "
                    "models/default-sd).\n"
                    "--model random:sd15 (or sd21, sdxl) serves random weights at the published shapes, as `rbee "
                    "bench-sd --random` times them (benchmarks without a download).\n",
        .max_body_default = (int64_t)64 << 20,
        .user = &sw,
        .default_model = default_model,
        .setup = setup,
        .load = load,
        .submit = submit,
        .poke = sd_worker_poke,
        .load_stats = load_stats,
        .queue_help = "Requests waiting for the generation thread.",
        .active_metric = "llorch_active_jobs",
        .active_help = "Generations running (0 or 1).",
        .memory = memory,
        .stop_accepting = stop_accepting,
        .stop = stop,
        .info = info,
        .destroy = destroy,
    };
    return wk_worker_main(&def, argc, argv);
}

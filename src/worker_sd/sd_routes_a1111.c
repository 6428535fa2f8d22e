/* AUTOMATIC1111's API under /sdapi/v1: txt2img and img2img (synchronous:
 * the connection waits for the job, which is cancelled if the client goes
 * away), progress (the running job, with its last preview as
 * current_image), interrupt and skip, the sampler, scheduler and model
 * lists, options (GET and POST) and png-info. Bad requests get a 400 with
 * every field error and A1111's "detail" text. */
#include "worker/wk_base64.h"
#include "worker/wk_submit.h"
#include "worker/wk_util.h"
#include "worker_sd/sd_a1111.h"
#include "worker_sd/sd_job.h"
#include "worker_sd/sd_samplers.h"
#include "worker_sd/sd_worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const sd_field_names k_fields = {.clip_skip = "CLIP_stop_at_last_layers",
                                        .strength = "denoising_strength",
                                        .sampler = "sampler_name",
                                        .mask = "mask",
                                        .steps = "steps"};

/* 400 with the rbee field errors plus A1111's "detail" (its clients print that). */
static bool reply_invalid(wk_req *r, const wk_errors *errs) {
    json_t *o = wk_errors_json(errs);
    char detail[2048];
    size_t n = 0;
    detail[0] = '\0';
    for (int i = 0; i < errs->n && n < sizeof detail; i++) {
        int w = snprintf(detail + n, sizeof detail - n, "%s%s", i ? "; " : "", errs->items[i].message);
        if (w < 0) break;
        n += (size_t)w;
    }
    if (o) json_object_set_new(o, "detail", wk_json_text(detail, strlen(detail)));
    return wk_reply_json(r, 400, o);
}

static bool reply_failed(wk_req *r, const char *code, const char *msg) {
    return wk_reply_json(r, 500, json_pack("{s:s,s:o,s:s,s:o}", "error", code, "detail", wk_json_text(msg, strlen(msg)),
                                           "body", "", "errors", wk_json_text(msg, strlen(msg))));
}

static bool route_generate(wk_req *r, sd_worker *sw, bool img2img) {
    wk_worker *w = sw->w;
    if (wk_worker_state(w) != WK_STATE_READY) return wk_reply_not_ready(r, w);
    wk_errors errs = {.n = 0};
    size_t blen = 0;
    const char *text = wk_req_body(r, &blen);
    json_t *body = wk_parse_body(text, blen, &errs);
    if (!body) return reply_invalid(r, &errs);
    sd_a1111_options opts;
    pthread_mutex_lock(&sw->opts_mu);
    opts = sw->a1111;
    pthread_mutex_unlock(&sw->opts_mu);
    sd_gen_request req;
    sd_request_init(&req, SD_API_A1111, &sw->limits);
    sd_a1111_parse(body, img2img, &sw->limits, &opts, w->model_id, &req, &errs);
    sd_worker_check(sw, &req, &k_fields, &errs);
    if (errs.n > 0) {
        json_decref(body);
        sd_request_free(&req);
        return reply_invalid(r, &errs);
    }
    wk_job *j = sd_job_new(&req, w->model_id, wk_req_route_label(r));
    if (!j) {
        json_decref(body);
        return reply_failed(r, "INTERNAL", "out of memory");
    }
    bool ret;
    if (!wk_job_submit(w, r, j, false, &ret)) {
        /* answered */
    } else if (!wk_job_wait_finished(r, j)) {
        wk_req_count(r, 499);
        ret = false;
    } else {
        const sd_task *t = sd_job_task(j);
        pthread_mutex_lock(&j->mu);
        if (j->state == WK_JOB_FAILED) {
            char code[48], msg[256];
            snprintf(code, sizeof code, "%s", j->err_code);
            snprintf(msg, sizeof msg, "%s", j->err_msg);
            pthread_mutex_unlock(&j->mu);
            ret = reply_failed(r, code, msg);
        } else {
            json_t *images = json_array();
            for (int i = 0; t->req.send_images && i < t->n_results; i++)
                json_array_append_new(images, wk_base64_json(t->results[i].data, t->results[i].len));
            json_t *info = sd_a1111_info(j, w->model_id, img2img);
            char *info_s = info ? json_dumps(info, JSON_COMPACT) : NULL;
            json_decref(info);
            json_t *params = sd_a1111_parameters(body, &t->req, img2img);
            pthread_mutex_unlock(&j->mu);
            json_t *o = info_s ? json_pack("{s:o,s:o,s:s}", "images", images, "parameters", params, "info", info_s) : NULL;
            free(info_s);
            if (!o) {
                json_decref(images);
                json_decref(params);
            }
            ret = wk_reply_json(r, 200, o);
        }
    }
    json_decref(body);
    wk_job_unref(j);
    return ret;
}

static bool route_txt2img(wk_req *r, void *ctx) { return route_generate(r, ctx, false); }
static bool route_img2img(wk_req *r, void *ctx) { return route_generate(r, ctx, true); }

static bool route_progress(wk_req *r, void *ctx) {
    sd_worker *sw = ctx;
    const char *skip = wk_req_query(r, "skip_current_image");
    const bool want_image = !(skip && (!strcmp(skip, "true") || !strcmp(skip, "True") || !strcmp(skip, "1")));
    wk_job *j = sd_worker_current(sw);
    if (!j)
        return wk_reply_json(r, 200, json_pack("{s:f,s:f,s:{s:b,s:b,s:b,s:s,s:i,s:s,s:i,s:i,s:i},s:n,s:n,s:n}",
                                               "progress", 0.0, "eta_relative", 0.0, "state", "skipped", 0,
                                               "interrupted", 0, "stopping_generation", 0, "job", "", "job_count", 0,
                                               "job_timestamp", "0", "job_no", 0, "sampling_step", 0,
                                               "sampling_steps", 0, "current_image", "textinfo", "current_task"));
    const sd_task *t = sd_job_task(j);
    pthread_mutex_lock(&j->mu);
    const int n_iter = t->req.n_iter > 0 ? t->req.n_iter : 1;
    const double frac = t->total_steps > 0 ? (double)t->step / t->total_steps : 0.0;
    const double progress = (t->iter + frac) / n_iter;
    json_t *img = want_image && t->preview_b64 ? json_string(t->preview_b64) : json_null();
    char ts[32];
    const time_t created = (time_t)j->created_unix;
    struct tm tmv;
    gmtime_r(&created, &tmv);
    strftime(ts, sizeof ts, "%Y%m%d%H%M%S", &tmv);
    json_t *o = json_pack("{s:f,s:f,s:{s:b,s:b,s:b,s:s,s:i,s:s,s:i,s:i,s:i},s:o,s:n,s:s}", "progress", progress,
                          "eta_relative", t->eta_ms / 1e3, "state", "skipped", atomic_load(&((sd_task *)t)->skip),
                          "interrupted", wk_job_cancel_requested(j), "stopping_generation", 0, "job", j->id,
                          "job_count", n_iter, "job_timestamp", ts, "job_no", t->iter,
                          "sampling_step", t->step, "sampling_steps", t->total_steps, "current_image", img,
                          "textinfo", "current_task", j->id);
    pthread_mutex_unlock(&j->mu);
    wk_job_unref(j);
    return wk_reply_json(r, 200, o);
}

static bool route_interrupt(wk_req *r, void *ctx) {
    sd_worker *sw = ctx;
    wk_job *j = sd_worker_current(sw);
    if (j) {
        wk_job_cancel(j);
        wk_log_event(&sw->w->log, WK_LOG_INFO, "job_cancel", json_pack("{s:s}", "job_id", j->id), "interrupted");
        wk_job_unref(j);
    }
    return wk_reply_json(r, 200, json_object());
}

static bool route_skip(wk_req *r, void *ctx) {
    sd_worker *sw = ctx;
    wk_job *j = sd_worker_current(sw);
    if (j) {
        atomic_store(&sd_job_task(j)->skip, true);
        wk_job_unref(j);
    }
    return wk_reply_json(r, 200, json_object());
}

static bool route_samplers(wk_req *r, void *ctx) {
    (void)ctx;
    return wk_reply_json(r, 200, sd_a1111_samplers_json());
}

static bool route_schedulers(wk_req *r, void *ctx) {
    (void)ctx;
    return wk_reply_json(r, 200, sd_a1111_schedulers_json());
}

static bool route_models(wk_req *r, void *ctx) {
    sd_worker *sw = ctx;
    wk_worker *w = sw->w;
    return wk_reply_json(r, 200, json_pack("[{s:s,s:s,s:n,s:n,s:o,s:n}]", "title", w->model_id, "model_name",
                                           w->model_id, "hash", "sha256", "filename",
                                           wk_json_text(w->model_path, strlen(w->model_path)), "config"));
}

static bool route_options_get(wk_req *r, void *ctx) {
    sd_worker *sw = ctx;
    pthread_mutex_lock(&sw->opts_mu);
    json_t *o = sd_a1111_options_json(&sw->a1111, sw->w->model_id);
    pthread_mutex_unlock(&sw->opts_mu);
    return wk_reply_json(r, 200, o);
}

static bool route_options_post(wk_req *r, void *ctx) {
    sd_worker *sw = ctx;
    wk_errors errs = {.n = 0};
    size_t blen = 0;
    const char *text = wk_req_body(r, &blen);
    json_t *body = wk_parse_body(text, blen, &errs);
    if (!body) return reply_invalid(r, &errs);
    pthread_mutex_lock(&sw->opts_mu);
    sd_a1111_options o = sw->a1111;
    sd_a1111_options_apply(body, &o, sw->w->model_id, "", &errs);
    if (errs.n == 0) sw->a1111 = o; /* all or nothing */
    pthread_mutex_unlock(&sw->opts_mu);
    json_decref(body);
    if (errs.n > 0) return reply_invalid(r, &errs);
    return wk_reply_text(r, 200, "application/json", strdup("null")); /* what A1111 answers */
}

static bool route_png_info(wk_req *r, void *ctx) {
    (void)ctx;
    wk_errors errs = {.n = 0};
    size_t blen = 0;
    const char *text = wk_req_body(r, &blen);
    json_t *body = wk_parse_body(text, blen, &errs);
    if (!body) return reply_invalid(r, &errs);
    json_t *v = json_object_get(body, "image");
    uint8_t *bytes = NULL;
    size_t n = 0, bad = 0;
    if (!json_is_string(v)) {
        wk_errors_add(&errs, "image", "required", "image must be a base64-encoded PNG");
    } else {
        wk_b64_result br = wk_base64_decode(json_string_value(v), json_string_length(v), (size_t)1 << 30, &bytes, &n, &bad);
        if (br != WK_B64_OK)
            wk_errors_add(&errs, "image", "base64", "image: %s%s", wk_base64_error(br),
                          br == WK_B64_EMPTY ? " (no data)" : "");
    }
    json_decref(body);
    rb_png_text *texts = NULL;
    size_t nt = 0;
    if (errs.n == 0) {
        rb_error err;
        rb_error_clear(&err);
        if (rb_image_detect(bytes, n) != RB_IMAGE_FORMAT_PNG)
            wk_errors_add(&errs, "image", "format", "image is not a PNG (only PNG text chunks are read)");
        else if (rb_png_read_text(bytes, n, &texts, &nt, &err) != RB_OK)
            wk_errors_add(&errs, "image", "png", "image: %s", err.msg);
    }
    free(bytes);
    if (errs.n > 0) return reply_invalid(r, &errs);
    const char *params = "";
    json_t *items = json_object();
    for (size_t i = 0; i < nt; i++) {
        if (!strcmp(texts[i].key, "parameters")) params = texts[i].text;
        else json_object_set_new(items, texts[i].key, wk_json_text(texts[i].text, texts[i].len));
    }
    json_t *parsed = params[0] ? sd_infotext_parse(params) : json_object();
    json_t *o = json_pack("{s:o,s:o,s:o}", "info", wk_json_text(params, strlen(params)), "items", items, "parameters",
                          parsed ? parsed : json_object());
    rb_png_texts_free(texts, nt);
    return wk_reply_json(r, 200, o);
}

rb_status sd_routes_a1111_add(sd_worker *sw, rb_error *err) {
    wk_router *rt = &sw->w->router;
    static const struct {
        const char *method, *path;
        wk_handler_fn fn;
    } routes[] = {
        {"POST", "/sdapi/v1/txt2img", route_txt2img},     {"POST", "/sdapi/v1/img2img", route_img2img},
        {"GET", "/sdapi/v1/progress", route_progress},    {"POST", "/sdapi/v1/interrupt", route_interrupt},
        {"POST", "/sdapi/v1/skip", route_skip},           {"GET", "/sdapi/v1/samplers", route_samplers},
        {"GET", "/sdapi/v1/schedulers", route_schedulers}, {"GET", "/sdapi/v1/sd-models", route_models},
        {"GET", "/sdapi/v1/options", route_options_get},  {"POST", "/sdapi/v1/options", route_options_post},
        {"POST", "/sdapi/v1/png-info", route_png_info},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        char label[64];
        snprintf(label, sizeof label, "%s %s", routes[i].method, routes[i].path);
        /* GET and POST of options share a path: each gets its own metric label */
        const bool shared = !strcmp(routes[i].path, "/sdapi/v1/options");
        rb_status s = wk_router_add(rt, routes[i].method, routes[i].path, routes[i].fn, sw, shared ? label : NULL, 0, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

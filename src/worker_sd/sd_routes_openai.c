/* OpenAI's images API: POST /v1/images/generations (JSON) and
 * POST /v1/images/edits (multipart/form-data), synchronous: the connection
 * waits for the job, which is cancelled if the client goes away. Errors in
 * OpenAI's shape. */
#include "worker/wk_base64.h"
#include "worker/wk_form.h"
#include "worker/wk_submit.h"
#include "worker/wk_util.h"
#include "worker_sd/sd_job.h"
#include "worker_sd/sd_openai.h"
#include "worker_sd/sd_worker.h"

#include <stdio.h>
#include <string.h>

static const sd_field_names k_fields = {
    .clip_skip = "clip_skip", .strength = "strength", .sampler = "sampler", .mask = "mask", .steps = "steps"};

static json_t *openai_error(const char *type, const char *code, const char *msg) {
    return json_pack("{s:{s:o,s:s,s:n,s:s}}", "error", "message", wk_json_text(msg, strlen(msg)), "type", type, "param",
                     "code", code);
}

static bool run(wk_req *r, sd_worker *sw, sd_gen_request *req) {
    wk_worker *w = sw->w;
    wk_job *j = sd_job_new(req, w->model_id, wk_req_route_label(r));
    if (!j) return wk_reply_json(r, 500, openai_error("server_error", "out_of_memory", "out of memory"));
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
            json_t *e = openai_error("server_error", j->err_code, j->err_msg);
            pthread_mutex_unlock(&j->mu);
            ret = wk_reply_json(r, 500, e);
        } else if (strcmp(t->stop_reason, "cancelled") == 0) {
            pthread_mutex_unlock(&j->mu);
            ret = wk_reply_json(r, 503, openai_error("server_error", "cancelled", "the request was cancelled"));
        } else {
            json_t *data = json_array();
            for (int i = 0; i < t->n_results; i++)
                json_array_append_new(data, json_pack("{s:o,s:n,s:I}", "b64_json",
                                                      wk_base64_json(t->results[i].data, t->results[i].len),
                                                      "revised_prompt", "seed", (json_int_t)t->results[i].seed));
            char size[32];
            snprintf(size, sizeof size, "%dx%d", t->req.width, t->req.height);
            json_t *o = json_pack("{s:I,s:o,s:s,s:s}", "created", (json_int_t)j->created_unix, "data", data,
                                  "output_format", t->req.format == SD_OUT_JPEG ? "jpeg" : "png", "size", size);
            pthread_mutex_unlock(&j->mu);
            ret = wk_reply_json(r, 200, o);
        }
    }
    wk_job_unref(j);
    return ret;
}

static bool route_generations(wk_req *r, void *ctx) {
    sd_worker *sw = ctx;
    if (wk_worker_state(sw->w) != WK_STATE_READY) return wk_reply_not_ready(r, sw->w);
    wk_errors errs = {.n = 0};
    size_t blen = 0;
    const char *text = wk_req_body(r, &blen);
    json_t *body = wk_parse_body(text, blen, &errs);
    if (!body) return wk_reply_invalid(r, &errs);
    sd_gen_request req;
    sd_request_init(&req, SD_API_OPENAI, &sw->limits);
    sd_openai_parse(body, false, &sw->limits, &req, &errs);
    json_decref(body);
    sd_worker_check(sw, &req, &k_fields, &errs);
    if (errs.n > 0) {
        sd_request_free(&req);
        return wk_reply_invalid(r, &errs);
    }
    return run(r, sw, &req);
}

static bool route_edits(wk_req *r, void *ctx) {
    sd_worker *sw = ctx;
    if (wk_worker_state(sw->w) != WK_STATE_READY) return wk_reply_not_ready(r, sw->w);
    wk_errors errs = {.n = 0};
    wk_form form;
    rb_error err;
    rb_error_clear(&err);
    rb_status s = wk_req_form(r, &form, &err);
    if (s != RB_OK) {
        wk_form_free(&form);
        if (s == RB_E_NOMEM) return wk_reply_json(r, 500, openai_error("server_error", "out_of_memory", err.msg));
        wk_errors_add(&errs, "body", "multipart", "%s", err.msg);
        return wk_reply_invalid(r, &errs);
    }
    sd_gen_request req;
    sd_request_init(&req, SD_API_OPENAI, &sw->limits);
    json_t *fields = sd_openai_form(&form, &sw->limits, &req, &errs);
    wk_form_free(&form);
    if (fields) sd_openai_parse(fields, true, &sw->limits, &req, &errs);
    json_decref(fields);
    sd_worker_check(sw, &req, &k_fields, &errs);
    if (errs.n > 0) {
        sd_request_free(&req);
        return wk_reply_invalid(r, &errs);
    }
    return run(r, sw, &req);
}

rb_status sd_routes_openai_add(sd_worker *sw, rb_error *err) {
    wk_router *rt = &sw->w->router;
    rb_status s;
    if ((s = wk_router_add(rt, "POST", "/v1/images/generations", route_generations, sw, NULL, WK_ROUTE_OPENAI, err)) !=
        RB_OK)
        return s;
    return wk_router_add(rt, "POST", "/v1/images/edits", route_edits, sw, NULL, WK_ROUTE_OPENAI, err);
}

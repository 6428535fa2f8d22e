/* Implementation of sd_request.h. */
#include "worker_sd/sd_request.h"
#include "worker/wk_base64.h"
#include "worker/wk_util.h"
#include "worker_sd/sd_samplers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sd_request_init(sd_gen_request *r, sd_api api, const sd_model_limits *lim) {
    memset(r, 0, sizeof *r);
    r->api = api;
    r->steps = lim->default_steps > 0 ? lim->default_steps : 20;
    r->cfg_scale = lim->default_cfg;
    r->eta = -1.0;
    r->batch = 1;
    r->n_iter = 1;
    r->rng = RB_TORCH_RNG_CPU;
    r->prompt_mode = RB_SD_PROMPT_TRUNCATE;
    r->preview_every = 5;
    r->format = SD_OUT_PNG;
    r->jpeg_quality = 100;
    r->send_images = true;
    r->seed = 0;
}

void sd_request_free(sd_gen_request *r) {
    if (!r) return;
    free(r->prompt);
    free(r->negative_prompt);
    rb_image_free(&r->init);
    rb_image_free(&r->mask);
    memset(r, 0, sizeof *r);
}

void sd_read_text(json_t *o, const char *key, bool required, char **out, wk_errors *errs) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) wk_errors_add(errs, key, "required", "%s is required", key);
        return;
    }
    if (!json_is_string(v)) {
        wk_errors_add(errs, key, "type:string", "%s must be a string", key);
        return;
    }
    const size_t n = json_string_length(v);
    if (n > SD_MAX_PROMPT_BYTES) {
        wk_errors_add(errs, key, "max_length:16384", "%s must have at most %d bytes, got %zu", key,
                      SD_MAX_PROMPT_BYTES, n);
        return;
    }
    if (memchr(json_string_value(v), '\0', n)) {
        wk_errors_add(errs, key, "no_nul", "%s must not contain NUL characters", key);
        return;
    }
    char *d = malloc(n + 1);
    if (!d) {
        wk_errors_add(errs, key, "memory", "out of memory");
        return;
    }
    memcpy(d, json_string_value(v), n + 1);
    free(*out);
    *out = d;
}

static const char *string_field(json_t *o, const char *key, wk_errors *errs) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return NULL;
    if (!json_is_string(v)) {
        wk_errors_add(errs, key, "type:string", "%s must be a string", key);
        return NULL;
    }
    return json_string_value(v);
}

void sd_read_sampler(json_t *o, const char *key, const char *schedule_key, bool a1111, sd_gen_request *r,
                     wk_errors *errs) {
    const char *name = string_field(o, key, errs);
    if (name) {
        bool given = false;
        rb_sd_schedule sch;
        if (!sd_sampler_lookup(name, &r->sampler, &sch, &given)) {
            char list[400];
            sd_sampler_names(a1111, list, sizeof list);
            char shown[80];
            wk_utf8_sanitize(name, shown, sizeof shown);
            wk_errors_add(errs, key, "enum", "unknown sampler '%s'; valid samplers: %s%s", shown, list,
                          a1111 ? "" : " (optionally with a schedule suffix: _karras, _exponential, _sgm_uniform, "
                                       "_simple), or an AUTOMATIC1111 name such as \"DPM++ 2M Karras\"");
        } else {
            r->sampler_set = true;
            if (given) {
                r->schedule = sch;
                r->schedule_set = true;
            }
        }
    }
    const char *sname = schedule_key ? string_field(o, schedule_key, errs) : NULL;
    if (sname) {
        rb_sd_schedule sch;
        if (!sd_schedule_lookup(sname, &sch)) {
            char list[300], shown[80];
            sd_schedule_names(a1111, list, sizeof list);
            wk_utf8_sanitize(sname, shown, sizeof shown);
            wk_errors_add(errs, schedule_key, "enum", "unknown scheduler '%s'; valid schedulers: %s", shown, list);
        } else if (!(r->schedule_set && sch == RB_SD_SCHEDULE_DEFAULT)) {
            /* "Automatic" beside "DPM++ 2M Karras" keeps the name's schedule, as A1111 does */
            r->schedule = sch;
            r->schedule_set = true;
        }
    }
}

void sd_read_seed(json_t *o, const char *key, sd_gen_request *r, wk_errors *errs) {
    int64_t s = -1;
    if (wk_get_int(o, key, -1, INT64_MAX, &s, errs) && s >= 0) {
        r->seed = (uint64_t)s;
        return;
    }
    uint32_t v = 0; /* 32 random bits, as A1111 and the CLI pick seeds */
    wk_random_bytes(&v, sizeof v);
    r->seed = v;
}

void sd_read_size(json_t *o, const char *key, const sd_model_limits *lim, int *out, wk_errors *errs) {
    int64_t v = 0;
    if (!wk_get_int(o, key, SD_MIN_SIDE, lim->max_size, &v, errs)) return;
    const int scale = lim->vae_scale > 0 ? lim->vae_scale : 8;
    if (v % scale != 0) {
        char c[32];
        snprintf(c, sizeof c, "multiple_of:%d", scale);
        wk_errors_add(errs, key, c, "%s must be a multiple of %d, got %lld", key, scale, (long long)v);
        return;
    }
    *out = (int)v;
}

void sd_decode_image(const char *field, const uint8_t *data, size_t n, int channels, const sd_model_limits *lim,
                     rb_image *img, wk_errors *errs) {
    if (rb_image_detect(data, n) == RB_IMAGE_FORMAT_UNKNOWN) {
        wk_errors_add(errs, field, "format", "%s is not a PNG or JPEG image", field);
        return;
    }
    rb_image_decode_opts o = {.channels = channels,
                              .max_pixels = (uint64_t)lim->max_size * (uint64_t)lim->max_size,
                              .max_side = (uint32_t)lim->max_size};
    rb_error err;
    rb_error_clear(&err);
    rb_image tmp = {0};
    rb_status s = rb_image_decode(data, n, &o, &tmp, &err);
    if (s != RB_OK) {
        wk_errors_add(errs, field, s == RB_E_RANGE ? "max_size" : s == RB_E_UNSUPPORTED ? "unsupported" : "image",
                      "%s: %s", field, err.msg);
        return;
    }
    rb_image_free(img);
    *img = tmp;
}

void sd_read_image(json_t *o, const char *key, int channels, const sd_model_limits *lim, rb_image *img,
                   wk_errors *errs) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return;
    if (!json_is_string(v)) {
        wk_errors_add(errs, key, "type:string", "%s must be a base64-encoded PNG or JPEG", key);
        return;
    }
    uint8_t *bytes = NULL;
    size_t n = 0, bad = 0;
    wk_b64_result br = wk_base64_decode(json_string_value(v), json_string_length(v), (size_t)1 << 30, &bytes, &n, &bad);
    if (br != WK_B64_OK) {
        if (br == WK_B64_BAD_CHAR)
            wk_errors_add(errs, key, "base64", "%s is not valid base64 (bad character at offset %zu)", key, bad);
        else if (br == WK_B64_EMPTY)
            wk_errors_add(errs, key, "base64", "%s is empty", key);
        else
            wk_errors_add(errs, key, "base64", "%s: %s", key, wk_base64_error(br));
        return;
    }
    sd_decode_image(key, bytes, n, channels, lim, img, errs);
    free(bytes);
}

void sd_read_rng(json_t *o, const char *key, sd_gen_request *r, wk_errors *errs) {
    const char *s = string_field(o, key, errs);
    if (!s) return;
    if (!strcmp(s, "cpu")) r->rng = RB_TORCH_RNG_CPU;
    else if (!strcmp(s, "cuda")) r->rng = RB_TORCH_RNG_CUDA;
    else wk_errors_add(errs, key, "enum:cpu,cuda", "%s must be \"cpu\" (diffusers, ComfyUI) or \"cuda\" (A1111's GPU "
                       "seeds)", key);
}

void sd_request_finish(sd_gen_request *r, const sd_model_limits *lim, wk_errors *errs) {
    if (errs->n > 0) return;
    if (r->mask.data && !r->init.data) {
        wk_errors_add(errs, "mask", "needs:init_image", "a mask needs an init image");
        return;
    }
    if (r->init.data) {
        const int iw = r->init.width, ih = r->init.height;
        if ((r->width && r->width != iw) || (r->height && r->height != ih)) {
            wk_errors_add(errs, r->width && r->width != iw ? "width" : "height", "equals:init_image",
                          "the init image is %dx%d but the requested size is %dx%d; images are not resized: send "
                          "the image at the output size", iw, ih, r->width ? r->width : iw, r->height ? r->height : ih);
            return;
        }
        const int scale = lim->vae_scale > 0 ? lim->vae_scale : 8;
        if (iw % scale || ih % scale) {
            wk_errors_add(errs, "init_image", "multiple_of:8", "the init image is %dx%d; width and height must be "
                          "multiples of %d", iw, ih, scale);
            return;
        }
        r->width = iw;
        r->height = ih;
        if (r->mask.data && (r->mask.width != iw || r->mask.height != ih)) {
            wk_errors_add(errs, "mask", "equals:init_image", "the mask is %dx%d but the init image is %dx%d",
                          (int)r->mask.width, (int)r->mask.height, iw, ih);
            return;
        }
    } else if (r->strength != 0.0) {
        wk_errors_add(errs, "strength", "needs:init_image", "strength needs an init image (img2img or inpainting)");
        return;
    }
    if (!r->width) r->width = lim->default_width;
    if (!r->height) r->height = lim->default_height;
    if (r->width > lim->max_size || r->height > lim->max_size) {
        wk_errors_add(errs, r->width > lim->max_size ? "width" : "height", "max_size",
                      "%dx%d exceeds --max-size %d", r->width, r->height, lim->max_size);
        return;
    }
    if (r->preview_every > r->steps) r->preview_every = 0;
}

/* Every field of the rbee job body. */
static const char *const k_rbee_fields[] = {
    "operation", "prompt", "negative_prompt", "width", "height", "steps", "cfg_scale", "sampler", "scheduler",
    "seed", "batch_size", "clip_skip", "init_image", "strength", "mask", "eta", "rng", "prompt_mode",
    "preview_every", "model", NULL};

void sd_request_from_rbee(json_t *o, const sd_model_limits *lim, sd_gen_request *r, wk_errors *errs) {
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        bool known = false;
        for (int i = 0; k_rbee_fields[i] && !known; i++) known = !strcmp(key, k_rbee_fields[i]);
        if (!known) {
            char shown[64];
            wk_utf8_sanitize(key, shown, sizeof shown);
            wk_errors_add(errs, shown, "unknown_field", "unknown field '%s' (see the rbee job API in README.md)", shown);
        }
    }
    const char *op = string_field(o, "operation", errs);
    if (op && strcmp(op, "image_generation") && strcmp(op, "txt2img") && strcmp(op, "img2img") && strcmp(op, "inpaint"))
        wk_errors_add(errs, "operation", "enum", "operation must be \"image_generation\" (or txt2img, img2img, inpaint)");
    sd_read_text(o, "prompt", true, &r->prompt, errs);
    sd_read_text(o, "negative_prompt", false, &r->negative_prompt, errs);
    sd_read_size(o, "width", lim, &r->width, errs);
    sd_read_size(o, "height", lim, &r->height, errs);
    int64_t iv;
    double dv;
    if (wk_get_int(o, "steps", 1, SD_MAX_STEPS, &iv, errs)) r->steps = (int)iv;
    if (wk_get_number(o, "cfg_scale", 0, SD_MAX_CFG, &dv, errs)) r->cfg_scale = (float)dv;
    sd_read_sampler(o, "sampler", "scheduler", false, r, errs);
    sd_read_seed(o, "seed", r, errs);
    if (wk_get_int(o, "batch_size", 1, SD_MAX_BATCH, &iv, errs)) r->batch = (int)iv;
    if (wk_get_int(o, "clip_skip", 0, 11, &iv, errs)) r->clip_skip = (int)iv;
    sd_read_image(o, "init_image", 3, lim, &r->init, errs);
    sd_read_image(o, "mask", 1, lim, &r->mask, errs);
    json_t *st = json_object_get(o, "strength");
    if (st && !json_is_null(st) && wk_get_number(o, "strength", 0, 1, &dv, errs)) {
        if (dv <= 0) wk_errors_add(errs, "strength", "range:>0..1", "strength must be in (0, 1]");
        else r->strength = dv;
    }
    if (wk_get_number(o, "eta", 0, 10, &dv, errs)) r->eta = dv;
    sd_read_rng(o, "rng", r, errs);
    const char *pm = string_field(o, "prompt_mode", errs);
    if (pm) {
        if (!strcmp(pm, "diffusers")) r->prompt_mode = RB_SD_PROMPT_TRUNCATE;
        else if (!strcmp(pm, "a1111")) {
            r->prompt_mode = RB_SD_PROMPT_A1111;
            r->emphasis = true;
        } else
            wk_errors_add(errs, "prompt_mode", "enum:diffusers,a1111", "prompt_mode must be \"diffusers\" (77 tokens) "
                          "or \"a1111\" (75-token chunks, (emphasis:1.2))");
    }
    if (wk_get_int(o, "preview_every", 0, SD_MAX_STEPS, &iv, errs)) r->preview_every = (int)iv;
    const char *model = string_field(o, "model", errs);
    (void)model; /* one model per worker: any name is accepted, as the OpenAI routes do */
    if (op && errs->n == 0) {
        if (!strcmp(op, "txt2img") && r->init.data)
            wk_errors_add(errs, "init_image", "operation", "operation txt2img takes no init_image");
        else if (!strcmp(op, "img2img") && (!r->init.data || r->mask.data))
            wk_errors_add(errs, r->init.data ? "mask" : "init_image", "operation",
                          "operation img2img takes an init_image and no mask");
        else if (!strcmp(op, "inpaint") && (!r->init.data || !r->mask.data))
            wk_errors_add(errs, r->init.data ? "mask" : "init_image", "operation",
                          "operation inpaint takes an init_image and a mask");
    }
    sd_request_finish(r, lim, errs);
}

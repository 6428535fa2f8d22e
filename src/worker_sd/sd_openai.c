/* Implementation of sd_openai.h. */
#include "worker_sd/sd_openai.h"
#include "worker/wk_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool present(json_t *v) { return v && !json_is_null(v); }

static void refuse(wk_errors *errs, const char *field, const char *why) {
    wk_errors_add(errs, field, "unsupported_parameter", "%s is not supported by this worker (%s)", field, why);
}

/* A string field whose value must be one of ok (NULL-terminated); absent is fine. */
static const char *enum_field(json_t *o, const char *key, const char *const *ok, const char *why, wk_errors *errs) {
    json_t *v = json_object_get(o, key);
    if (!present(v)) return NULL;
    if (!json_is_string(v)) {
        wk_errors_add(errs, key, "type:string", "%s must be a string", key);
        return NULL;
    }
    for (int i = 0; ok[i]; i++)
        if (!strcmp(json_string_value(v), ok[i])) return ok[i];
    char shown[48];
    wk_utf8_sanitize(json_string_value(v), shown, sizeof shown);
    wk_errors_add(errs, key, "unsupported_value", "%s '%s' is not supported by this worker (%s)", key, shown, why);
    return NULL;
}

static void read_size(json_t *o, const sd_model_limits *lim, sd_gen_request *r, wk_errors *errs) {
    json_t *v = json_object_get(o, "size");
    if (!present(v)) return;
    if (!json_is_string(v)) {
        wk_errors_add(errs, "size", "type:string", "size must be a string such as \"512x512\" or \"auto\"");
        return;
    }
    const char *s = json_string_value(v);
    if (!strcmp(s, "auto")) return;
    char *e = NULL;
    errno = 0;
    long w = strtol(s, &e, 10);
    long h = 0;
    bool ok = e != s && *e == 'x' && errno == 0;
    if (ok) {
        const char *hs = e + 1;
        h = strtol(hs, &e, 10);
        ok = e != hs && *e == '\0' && errno == 0 && hs[0] >= '0' && hs[0] <= '9' && s[0] >= '0' && s[0] <= '9';
    }
    if (!ok) {
        wk_errors_add(errs, "size", "format:WxH", "size must be \"WIDTHxHEIGHT\" (such as \"512x512\") or \"auto\"");
        return;
    }
    const int scale = lim->vae_scale > 0 ? lim->vae_scale : 8;
    if (w < SD_MIN_SIDE || h < SD_MIN_SIDE || w > lim->max_size || h > lim->max_size || w % scale || h % scale) {
        wk_errors_add(errs, "size", "range", "size %ldx%ld: width and height must be multiples of %d from %d to %d "
                      "(--max-size)", w, h, scale, SD_MIN_SIDE, lim->max_size);
        return;
    }
    r->width = (int)w;
    r->height = (int)h;
}

void sd_openai_parse(json_t *o, bool edits, const sd_model_limits *lim, sd_gen_request *r, wk_errors *errs) {
    r->prompt_mode = RB_SD_PROMPT_A1111; /* long prompts in 75-token chunks; no (emphasis) syntax */
    r->emphasis = false;
    r->preview_every = 0;
    json_t *p = json_object_get(o, "prompt");
    if (!present(p)) wk_errors_add(errs, "prompt", "required", "prompt is required");
    else if (json_is_string(p) && json_string_length(p) == 0)
        wk_errors_add(errs, "prompt", "non_empty", "prompt must not be empty");
    else sd_read_text(o, "prompt", true, &r->prompt, errs);
    sd_read_text(o, "negative_prompt", false, &r->negative_prompt, errs);
    int64_t iv;
    double dv;
    if (wk_get_int(o, "n", 1, SD_MAX_BATCH, &iv, errs)) r->batch = (int)iv;
    read_size(o, lim, r, errs);
    static const char *const rf[] = {"b64_json", NULL};
    enum_field(o, "response_format", rf, "only b64_json: the worker keeps no files to link to", errs);
    static const char *const of[] = {"png", "jpeg", NULL};
    const char *fmt = enum_field(o, "output_format", of, "png or jpeg", errs);
    if (fmt && !strcmp(fmt, "jpeg")) r->format = SD_OUT_JPEG;
    json_t *oc = json_object_get(o, "output_compression");
    if (present(oc) && wk_get_int(o, "output_compression", 1, 100, &iv, errs)) {
        if (r->format != SD_OUT_JPEG)
            wk_errors_add(errs, "output_compression", "needs:jpeg", "output_compression applies to output_format jpeg only");
        else r->jpeg_quality = (int)iv;
    }
    static const char *const qual[] = {"auto", "standard", NULL};
    enum_field(o, "quality", qual, "auto or standard; set steps for more detail", errs);
    static const char *const bg[] = {"auto", "opaque", NULL};
    enum_field(o, "background", bg, "images are opaque", errs);
    static const char *const mod[] = {"auto", "low", NULL};
    enum_field(o, "moderation", mod, "auto or low", errs);
    if (present(json_object_get(o, "style"))) refuse(errs, "style", "styles");
    json_t *st = json_object_get(o, "stream");
    if (json_is_true(st)) refuse(errs, "stream", "streaming partial images; use the rbee job API for live previews");
    json_t *pi = json_object_get(o, "partial_images");
    if (present(pi) && !(json_is_integer(pi) && json_integer_value(pi) == 0)) refuse(errs, "partial_images", "partial images");
    if (edits) {
        static const char *const fid[] = {"low", NULL};
        enum_field(o, "input_fidelity", fid, "low only", errs);
    }
    /* rbee extensions */
    if (wk_get_int(o, "steps", 1, SD_MAX_STEPS, &iv, errs)) r->steps = (int)iv;
    if (wk_get_number(o, "cfg_scale", 0, SD_MAX_CFG, &dv, errs)) r->cfg_scale = (float)dv;
    sd_read_sampler(o, "sampler", "scheduler", false, r, errs);
    sd_read_seed(o, "seed", r, errs);
    if (wk_get_int(o, "clip_skip", 0, 11, &iv, errs)) r->clip_skip = (int)iv;
    json_t *sv = json_object_get(o, "strength");
    if (present(sv)) {
        if (!edits) wk_errors_add(errs, "strength", "needs:image", "strength applies to /v1/images/edits");
        else if (wk_get_number(o, "strength", 0, 1, &dv, errs)) {
            if (dv <= 0) wk_errors_add(errs, "strength", "range:>0..1", "strength must be in (0, 1]");
            else r->strength = dv;
        }
    }
    if (r->init.data && r->width && (r->width != r->init.width || r->height != r->init.height) && errs->n == 0)
        wk_errors_add(errs, "size", "equals:image", "size %dx%d differs from the image's %dx%d; images are not "
                      "resized: leave size out or send the image at the output size", r->width, r->height,
                      (int)r->init.width, (int)r->init.height);
    sd_request_finish(r, lim, errs);
}

/* Text fields whose value is a number. */
static const char *const k_numeric[] = {"n", "output_compression", "partial_images", "steps", "cfg_scale", "seed",
                                        "clip_skip", "strength", NULL};

static json_t *field_value(const char *name, const wk_form_part *p) {
    const char *s = (const char *)p->data;
    for (int i = 0; k_numeric[i]; i++) {
        if (strcmp(name, k_numeric[i]) != 0) continue;
        char *e = NULL;
        errno = 0;
        long long v = strtoll(s, &e, 10);
        if (e != s && *e == '\0' && errno == 0) return json_integer(v);
        errno = 0;
        double d = strtod(s, &e);
        if (e != s && *e == '\0' && errno == 0) return json_real(d);
        break; /* not a number: stays a string, and the reader says so */
    }
    if (!strcmp(name, "stream")) return json_boolean(!strcmp(s, "true") || !strcmp(s, "1"));
    return wk_json_text(s, p->len);
}

/* Alpha == 0 -> 255 (repaint), else 0; false when nothing is transparent. */
static bool alpha_mask(const rb_image *rgba, rb_image *mask, wk_errors *errs, const char *field) {
    rb_error err;
    rb_error_clear(&err);
    if (rb_image_alloc(mask, rgba->width, rgba->height, 1, &err) != RB_OK) {
        wk_errors_add(errs, field, "memory", "out of memory");
        return false;
    }
    const size_t n = (size_t)rgba->width * (size_t)rgba->height;
    size_t holes = 0;
    for (size_t i = 0; i < n; i++) {
        const bool clear = rgba->data[4 * i + 3] == 0;
        mask->data[i] = clear ? 255 : 0;
        holes += clear;
    }
    return holes > 0;
}

json_t *sd_openai_form(const wk_form *f, const sd_model_limits *lim, sd_gen_request *r, wk_errors *errs) {
    json_t *o = json_object();
    if (!o) {
        wk_errors_add(errs, "body", "memory", "out of memory");
        return NULL;
    }
    size_t n_images = 0;
    const wk_form_part *image = NULL, *mask = NULL;
    for (size_t i = 0; i < f->n; i++) {
        const wk_form_part *p = &f->parts[i];
        if (!strcmp(p->name, "image") || !strcmp(p->name, "image[]")) {
            n_images++;
            image = image ? image : p;
            continue;
        }
        if (!strcmp(p->name, "mask")) {
            mask = p;
            continue;
        }
        char name[64];
        wk_utf8_sanitize(p->name, name, sizeof name);
        if (json_object_get(o, name)) {
            wk_errors_add(errs, name, "duplicate", "the form field %s is given twice", name);
            continue;
        }
        if (!wk_utf8_valid((const char *)p->data, p->len, NULL) || memchr(p->data, '\0', p->len)) {
            wk_errors_add(errs, name, "utf8", "the form field %s is not UTF-8 text", name);
            continue;
        }
        json_object_set_new(o, name, field_value(name, p));
    }
    if (!image) wk_errors_add(errs, "image", "required", "image (a PNG or JPEG file) is required");
    else if (n_images > 1) wk_errors_add(errs, "image", "max_items:1", "only one image can be edited at a time");
    if (errs->n > 0) {
        json_decref(o);
        return NULL;
    }
    rb_image rgba = {0};
    sd_decode_image("image", image->data, image->len, 4, lim, &rgba, errs);
    if (mask) {
        rb_image mrgba = {0};
        sd_decode_image("mask", mask->data, mask->len, 4, lim, &mrgba, errs);
        if (mrgba.data && rgba.data && (mrgba.width != rgba.width || mrgba.height != rgba.height))
            wk_errors_add(errs, "mask", "equals:image", "the mask is %dx%d but the image is %dx%d", (int)mrgba.width,
                          (int)mrgba.height, (int)rgba.width, (int)rgba.height);
        else if (mrgba.data && !alpha_mask(&mrgba, &r->mask, errs, "mask") && errs->n == 0)
            wk_errors_add(errs, "mask", "transparent", "the mask has no fully transparent pixels: OpenAI masks mark "
                          "the area to edit with alpha 0 (a PNG with an alpha channel)");
        rb_image_free(&mrgba);
    } else if (rgba.data) {
        rb_image m = {0};
        if (alpha_mask(&rgba, &m, errs, "image")) r->mask = m; /* the image's own transparency */
        else rb_image_free(&m);
    }
    if (errs->n > 0) {
        rb_image_free(&rgba);
        json_decref(o);
        return NULL;
    }
    r->init = rgba; /* the engine ignores alpha */
    return o;
}

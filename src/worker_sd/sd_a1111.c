/* Implementation of sd_a1111.h. */
#include "worker_sd/sd_a1111.h"
#include "worker/wk_util.h"
#include "worker_sd/sd_job.h"
#include "worker_sd/sd_samplers.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void sd_a1111_options_init(sd_a1111_options *o) {
    *o = (sd_a1111_options){.clip_stop_at_last_layers = 1, .rng = RB_TORCH_RNG_CUDA,
                            .show_progress_every_n_steps = 10, .live_previews_enable = true};
}

/* ---- options ---- */

json_t *sd_a1111_options_json(const sd_a1111_options *o, const char *model_title) {
    return json_pack("{s:s,s:i,s:s,s:i,s:b,s:s,s:i,s:b,s:s}", "sd_model_checkpoint", model_title,
                     "CLIP_stop_at_last_layers", o->clip_stop_at_last_layers, "randn_source",
                     o->rng == RB_TORCH_RNG_CUDA ? "GPU" : "CPU", "show_progress_every_n_steps",
                     o->show_progress_every_n_steps, "live_previews_enable", o->live_previews_enable,
                     "samples_format", "png", "eta_noise_seed_delta", 0, "return_grid", 0, "sd_vae", "Automatic");
}

static void opt_error(wk_errors *errs, const char *prefix, const char *key, const char *constraint, const char *msg) {
    char field[64], shown[48];
    wk_utf8_sanitize(key, shown, sizeof shown);
    snprintf(field, sizeof field, "%s%s", prefix, shown);
    wk_errors_add(errs, field, constraint, "%s: %s", field, msg);
}

void sd_a1111_options_apply(json_t *o, sd_a1111_options *opts, const char *model_title, const char *prefix,
                            wk_errors *errs) {
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        if (!strcmp(key, "CLIP_stop_at_last_layers")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 12)
                opt_error(errs, prefix, key, "range:1..12", "must be an integer from 1 to 12");
            else opts->clip_stop_at_last_layers = (int)json_integer_value(v);
        } else if (!strcmp(key, "randn_source")) {
            const char *s = json_is_string(v) ? json_string_value(v) : "";
            if (!strcmp(s, "GPU")) opts->rng = RB_TORCH_RNG_CUDA;
            else if (!strcmp(s, "CPU")) opts->rng = RB_TORCH_RNG_CPU;
            else if (!strcmp(s, "NV"))
                opt_error(errs, prefix, key, "unsupported", "\"NV\" (NVIDIA's generator) is not supported; use GPU or CPU");
            else opt_error(errs, prefix, key, "enum:GPU,CPU", "must be \"GPU\" or \"CPU\"");
        } else if (!strcmp(key, "show_progress_every_n_steps")) {
            if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) > SD_MAX_STEPS)
                opt_error(errs, prefix, key, "range:-1..150", "must be an integer from -1 to 150");
            else opts->show_progress_every_n_steps = (int)json_integer_value(v);
        } else if (!strcmp(key, "live_previews_enable")) {
            if (!json_is_boolean(v)) opt_error(errs, prefix, key, "type:boolean", "must be true or false");
            else opts->live_previews_enable = json_is_true(v);
        } else if (!strcmp(key, "sd_model_checkpoint")) {
            if (!json_is_string(v) || strcmp(json_string_value(v), model_title) != 0)
                opt_error(errs, prefix, key, "read_only", "this worker serves one model; it cannot load another");
        } else if (!strcmp(key, "samples_format")) {
            if (!json_is_string(v) || strcmp(json_string_value(v), "png") != 0)
                opt_error(errs, prefix, key, "unsupported", "only \"png\" (images carry their infotext in PNG text)");
        } else if (!strcmp(key, "eta_noise_seed_delta")) {
            if (!json_is_integer(v) || json_integer_value(v) != 0)
                opt_error(errs, prefix, key, "unsupported", "only 0 (no ENSD offset)");
        } else if (!strcmp(key, "return_grid")) {
            if (!json_is_false(v)) opt_error(errs, prefix, key, "unsupported", "only false (no grid images)");
        } else if (!strcmp(key, "sd_vae")) {
            if (!json_is_string(v) || (strcmp(json_string_value(v), "Automatic") && strcmp(json_string_value(v), "None")))
                opt_error(errs, prefix, key, "unsupported", "only \"Automatic\" (the VAE is chosen with --vae)");
        } else {
            opt_error(errs, prefix, key, "unknown_option",
                      "unknown or unsupported option (known: sd_model_checkpoint, CLIP_stop_at_last_layers, "
                      "randn_source, show_progress_every_n_steps, live_previews_enable, samples_format, "
                      "eta_noise_seed_delta, return_grid, sd_vae)");
        }
    }
}

/* ---- requests ---- */

static bool present(json_t *v) { return v && !json_is_null(v); }

static void refuse(wk_errors *errs, const char *field, const char *why) {
    wk_errors_add(errs, field, "unsupported_parameter", "%s is not supported by this worker (%s)", field, why);
}

/* Number fields that ask for nothing at their A1111 default. */
static void refuse_number_unless(json_t *o, const char *key, double ok_value, const char *why, wk_errors *errs) {
    json_t *v = json_object_get(o, key);
    if (!present(v)) return;
    if (!json_is_number(v)) {
        wk_errors_add(errs, key, "type:number", "%s must be a number", key);
        return;
    }
    if (json_number_value(v) != ok_value) refuse(errs, key, why);
}

static void refuse_true(json_t *o, const char *key, const char *why, wk_errors *errs) {
    json_t *v = json_object_get(o, key);
    if (present(v) && !json_is_boolean(v)) wk_errors_add(errs, key, "type:boolean", "%s must be true or false", key);
    else if (json_is_true(v)) refuse(errs, key, why);
}

/* Absent, null, "", [] or {}. */
static bool empty(json_t *v) {
    if (!present(v)) return true;
    if (json_is_string(v)) return json_string_length(v) == 0;
    if (json_is_array(v)) return json_array_size(v) == 0;
    if (json_is_object(v)) return json_object_size(v) == 0;
    return false;
}

static void refuse_non_empty(json_t *o, const char *key, const char *why, wk_errors *errs) {
    if (!empty(json_object_get(o, key))) refuse(errs, key, why);
}

static void refuse_unsupported(json_t *o, bool img2img, wk_errors *errs) {
    refuse_non_empty(o, "styles", "prompt styles", errs);
    json_t *ss = json_object_get(o, "subseed_strength");
    if (present(ss) && (!json_is_number(ss) || json_number_value(ss) != 0)) refuse(errs, "subseed_strength", "variation seeds");
    json_t *rh = json_object_get(o, "seed_resize_from_h"), *rw = json_object_get(o, "seed_resize_from_w");
    if ((json_is_number(rh) && json_number_value(rh) > 0)) refuse(errs, "seed_resize_from_h", "seed resizing");
    if ((json_is_number(rw) && json_number_value(rw) > 0)) refuse(errs, "seed_resize_from_w", "seed resizing");
    refuse_true(o, "restore_faces", "face restoration", errs);
    refuse_true(o, "tiling", "tiling", errs);
    refuse_true(o, "enable_hr", "the hires fix", errs);
    refuse_true(o, "save_images", "saving on the server", errs);
    refuse_number_unless(o, "s_min_uncond", 0, "s_min_uncond", errs);
    refuse_number_unless(o, "s_churn", 0, "churn", errs);
    refuse_number_unless(o, "s_noise", 1, "s_noise", errs);
    refuse_non_empty(o, "refiner_checkpoint", "a refiner model", errs);
    refuse_non_empty(o, "firstpass_image", "a first-pass image", errs);
    refuse_non_empty(o, "script_name", "scripts", errs);
    refuse_non_empty(o, "script_args", "scripts", errs);
    refuse_non_empty(o, "alwayson_scripts", "scripts", errs);
    refuse_non_empty(o, "infotext", "settings from an infotext", errs);
    if (!img2img) return;
    if (present(json_object_get(o, "mask"))) {
        refuse_number_unless(o, "mask_blur", 0, "mask blur: send an already blurred mask", errs);
        refuse_number_unless(o, "mask_blur_x", 0, "mask blur: send an already blurred mask", errs);
        refuse_number_unless(o, "mask_blur_y", 0, "mask blur: send an already blurred mask", errs);
        refuse_number_unless(o, "inpainting_fill", 1, "masked content other than 1 (original)", errs);
    }
    refuse_true(o, "inpaint_full_res", "inpainting at full resolution (only masked)", errs);
    refuse_number_unless(o, "initial_noise_multiplier", 1, "an initial noise multiplier", errs);
    refuse_non_empty(o, "latent_mask", "a latent mask", errs);
    refuse_true(o, "include_init_images", "init images in the answer", errs);
    json_t *ii = json_object_get(o, "init_images");
    if (json_is_array(ii) && json_array_size(ii) > 1) refuse(errs, "init_images", "more than one init image");
}

void sd_a1111_parse(json_t *o, bool img2img, const sd_model_limits *lim, sd_a1111_options *opts,
                    const char *model_title, sd_gen_request *r, wk_errors *errs) {
    refuse_unsupported(o, img2img, errs);
    json_t *ov = json_object_get(o, "override_settings");
    if (present(ov)) {
        if (!json_is_object(ov)) wk_errors_add(errs, "override_settings", "type:object", "override_settings must be an object");
        else sd_a1111_options_apply(ov, opts, model_title, "override_settings.", errs);
    }
    /* A1111's API defaults */
    r->steps = 50;
    r->cfg_scale = 7.0f;
    r->width = r->height = 512;
    if (r->width > lim->max_size) r->width = r->height = lim->max_size / 8 * 8;
    r->prompt_mode = RB_SD_PROMPT_A1111;
    r->emphasis = true;
    r->rng = opts->rng;
    r->clip_skip = opts->clip_stop_at_last_layers - 1;
    r->preview_every = opts->live_previews_enable && opts->show_progress_every_n_steps > 0
                           ? opts->show_progress_every_n_steps
                           : 0;
    r->sampler = RB_SD_SAMPLER_EULER; /* sampler_index's default */
    r->sampler_set = true;
    sd_read_text(o, "prompt", false, &r->prompt, errs);
    if (!r->prompt && errs->n == 0) {
        r->prompt = calloc(1, 1);
        if (!r->prompt) wk_errors_add(errs, "prompt", "memory", "out of memory");
    }
    sd_read_text(o, "negative_prompt", false, &r->negative_prompt, errs);
    sd_read_size(o, "width", lim, &r->width, errs);
    sd_read_size(o, "height", lim, &r->height, errs);
    int64_t iv;
    double dv;
    if (wk_get_int(o, "steps", 1, SD_MAX_STEPS, &iv, errs)) r->steps = (int)iv;
    if (wk_get_number(o, "cfg_scale", 0, SD_MAX_CFG, &dv, errs)) r->cfg_scale = (float)dv;
    json_t *sn = json_object_get(o, "sampler_name");
    sd_read_sampler(o, present(sn) ? "sampler_name" : "sampler_index", "scheduler", true, r, errs);
    sd_read_seed(o, "seed", r, errs);
    if (wk_get_int(o, "batch_size", 1, SD_MAX_BATCH, &iv, errs)) r->batch = (int)iv;
    if (wk_get_int(o, "n_iter", 1, SD_MAX_ITER, &iv, errs)) r->n_iter = (int)iv;
    if (r->batch * r->n_iter > SD_MAX_IMAGES)
        wk_errors_add(errs, "n_iter", "max_images:64", "batch_size x n_iter is %d images; at most %d per request",
                      r->batch * r->n_iter, SD_MAX_IMAGES);
    if (wk_get_number(o, "eta", 0, 10, &dv, errs)) r->eta = dv;
    bool b;
    if (wk_get_bool(o, "send_images", &b, errs)) r->send_images = b;
    if (img2img) {
        r->strength = 0.75;
        json_t *ds = json_object_get(o, "denoising_strength");
        if (present(ds) && wk_get_number(o, "denoising_strength", 0, 1, &dv, errs)) {
            if (dv <= 0) wk_errors_add(errs, "denoising_strength", "range:>0..1", "denoising_strength must be in (0, 1]");
            else r->strength = dv;
        }
        json_t *ii = json_object_get(o, "init_images");
        if (!json_is_array(ii) || json_array_size(ii) == 0) {
            wk_errors_add(errs, "init_images", "required", "init_images must be a list with one base64 image");
        } else {
            json_t *one = json_object();
            json_object_set(one, "init_images", json_array_get(ii, 0));
            sd_read_image(one, "init_images", 3, lim, &r->init, errs);
            json_decref(one);
        }
        sd_read_image(o, "mask", 1, lim, &r->mask, errs);
        if (wk_get_int(o, "inpainting_mask_invert", 0, 1, &iv, errs) && iv == 1 && r->mask.data) {
            const size_t n = (size_t)r->mask.width * (size_t)r->mask.height;
            for (size_t i = 0; i < n; i++) r->mask.data[i] = (uint8_t)(255 - r->mask.data[i]);
        }
        /* the init image sets the size when width/height were not given */
        if (r->init.data && !present(json_object_get(o, "width"))) r->width = 0;
        if (r->init.data && !present(json_object_get(o, "height"))) r->height = 0;
    }
    sd_request_finish(r, lim, errs);
}

/* ---- answers ---- */

json_t *sd_a1111_parameters(json_t *request, const sd_gen_request *r, bool img2img) {
    json_t *p = json_deep_copy(request);
    if (!p) return NULL;
    char name[64];
    sd_sampler_a1111_full_name(r->sampler, RB_SD_SCHEDULE_DEFAULT, name, sizeof name);
    json_object_set_new(p, "prompt", json_string(r->prompt ? r->prompt : ""));
    json_object_set_new(p, "negative_prompt", json_string(r->negative_prompt ? r->negative_prompt : ""));
    json_object_set_new(p, "seed", json_integer((json_int_t)r->seed));
    json_object_set_new(p, "sampler_name", json_string(name));
    json_object_set_new(p, "scheduler", json_string(r->schedule_set ? rb_sd_schedule_a1111_name(r->schedule) : "Automatic"));
    json_object_set_new(p, "steps", json_integer(r->steps));
    json_object_set_new(p, "cfg_scale", json_real(r->cfg_scale));
    json_object_set_new(p, "width", json_integer(r->width));
    json_object_set_new(p, "height", json_integer(r->height));
    json_object_set_new(p, "batch_size", json_integer(r->batch));
    json_object_set_new(p, "n_iter", json_integer(r->n_iter));
    if (img2img) {
        json_object_set_new(p, "denoising_strength", json_real(r->strength));
        json_object_set_new(p, "init_images", json_null());
        json_object_set_new(p, "mask", json_null());
    }
    return p;
}

json_t *sd_a1111_info(const wk_job *j, const char *model_name, bool img2img) {
    const sd_task *t = sd_job_task(j);
    const sd_gen_request *r = &t->req;
    const char *neg = r->negative_prompt ? r->negative_prompt : "";
    json_t *prompts = json_array(), *negs = json_array(), *seeds = json_array(), *subseeds = json_array(),
           *infos = json_array();
    for (int i = 0; i < t->n_results; i++) {
        json_array_append_new(prompts, json_string(r->prompt ? r->prompt : ""));
        json_array_append_new(negs, json_string(neg));
        json_array_append_new(seeds, json_integer((json_int_t)t->results[i].seed));
        json_array_append_new(subseeds, json_integer(-1));
        json_array_append_new(infos, wk_json_text(t->results[i].infotext, strlen(t->results[i].infotext)));
    }
    char sampler[64], ts[32];
    sd_sampler_a1111_full_name(r->sampler, RB_SD_SCHEDULE_DEFAULT, sampler, sizeof sampler);
    const time_t now = (time_t)j->created_unix;
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(ts, sizeof ts, "%Y%m%d%H%M%S", &tmv);
    json_t *extra = json_pack("{s:s}", "Schedule type",
                              r->schedule_set ? rb_sd_schedule_a1111_name(r->schedule) : "Automatic");
    json_t *o = json_pack("{s:s,s:o,s:s,s:o,s:I,s:o,s:i,s:o,s:f,s:i,s:i,s:s,s:f,s:i,s:i,s:b,s:n,s:s,s:n,s:n,s:n}",
                          "prompt", r->prompt ? r->prompt : "", "all_prompts", prompts, "negative_prompt", neg,
                          "all_negative_prompts", negs, "seed", (json_int_t)r->seed, "all_seeds", seeds, "subseed", -1,
                          "all_subseeds", subseeds, "subseed_strength", 0.0, "width", r->width, "height", r->height,
                          "sampler_name", sampler, "cfg_scale", (double)r->cfg_scale, "steps", r->steps, "batch_size",
                          r->batch, "restore_faces", 0, "face_restoration_model", "sd_model_name", model_name,
                          "sd_model_hash", "sd_vae_name", "sd_vae_hash");
    if (!o) {
        json_decref(extra);
        json_decref(infos);
        return NULL;
    }
    json_object_set_new(o, "seed_resize_from_w", json_integer(-1));
    json_object_set_new(o, "seed_resize_from_h", json_integer(-1));
    json_object_set_new(o, "denoising_strength", img2img ? json_real(r->strength) : json_null());
    json_object_set_new(o, "extra_generation_params", extra);
    json_object_set_new(o, "index_of_first_image", json_integer(0));
    json_object_set_new(o, "infotexts", infos);
    json_object_set_new(o, "styles", json_array());
    json_object_set_new(o, "job_timestamp", json_string(ts));
    json_object_set_new(o, "clip_skip", json_integer(r->clip_skip + 1));
    json_object_set_new(o, "is_using_inpainting_conditioning", json_boolean(r->mask.data != NULL));
    json_object_set_new(o, "version", json_string("rbee"));
    return o;
}

/* ---- infotext ---- */

static bool word_char(unsigned char c) { return isalnum(c) || c == '_' || c >= 0x80; }
static bool key_char(unsigned char c) { return word_char(c) || c == ' ' || c == '-' || c == '/'; }

/* One match of A1111's re_param at s[i..]: \s*(\w[\w \-/]+):\s*("(?:\\.|[^\\"])+"|[^,]*)(?:,|$).
 * Fills key/value spans; returns the end of the match, or 0 for none at i. */
static size_t param_at(const char *s, size_t n, size_t i, size_t *k0, size_t *k1, size_t *v0, size_t *v1) {
    while (i < n && isspace((unsigned char)s[i])) i++;
    if (i >= n || !word_char((unsigned char)s[i])) return 0;
    size_t k = i + 1;
    while (k < n && key_char((unsigned char)s[k])) k++;
    if (k == i + 1 || k >= n || s[k] != ':') return 0; /* \w[...]+ needs two characters */
    *k0 = i;
    *k1 = k;
    size_t v = k + 1;
    while (v < n && isspace((unsigned char)s[v])) v++;
    if (v < n && s[v] == '"') { /* the quoted alternative, if a comma or the end follows it */
        size_t q = v + 1;
        bool any = false;
        while (q < n && s[q] != '"') {
            if (s[q] == '\\' && q + 1 < n) q++;
            q++;
            any = true;
        }
        if (q < n && any && (q + 1 == n || s[q + 1] == ',')) {
            *v0 = v;
            *v1 = q + 1;
            return q + 1 < n ? q + 2 : q + 1;
        }
    }
    size_t e = v;
    while (e < n && s[e] != ',') e++;
    *v0 = v;
    *v1 = e;
    return e < n ? e + 1 : e;
}

static size_t count_params(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n;) {
        size_t k0, k1, v0, v1, e = param_at(s, n, i, &k0, &k1, &v0, &v1);
        if (e) {
            c++;
            i = e;
        } else {
            i++;
        }
    }
    return c;
}

static char *span(const char *s, size_t a, size_t b) {
    char *d = malloc(b - a + 1);
    if (d) {
        memcpy(d, s + a, b - a);
        d[b - a] = '\0';
    }
    return d;
}

static void set_str(json_t *o, const char *key, const char *s, size_t n) {
    json_object_set_new(o, key, wk_json_text(s, n));
}

static bool is_size(const char *v, long *a, long *b) {
    char *e;
    if (!isdigit((unsigned char)*v)) return false;
    *a = strtol(v, &e, 10);
    if (*e != 'x' || !isdigit((unsigned char)e[1])) return false;
    *b = strtol(e + 1, &e, 10);
    return *e == '\0';
}

/* Appends line to *acc ("\n"-joined), as A1111 builds prompts. */
static bool join_line(char **acc, const char *line, size_t n) {
    const size_t have = *acc ? strlen(*acc) : 0;
    char *d = realloc(*acc, have + n + 2);
    if (!d) return false;
    if (*acc && have) d[have] = '\n';
    const size_t at = *acc && have ? have + 1 : 0;
    memcpy(d + at, line, n);
    d[at + n] = '\0';
    *acc = d;
    return true;
}

json_t *sd_infotext_parse(const char *text) {
    json_t *res = json_object();
    if (!res) return NULL;
    /* x.strip() */
    size_t a = 0, b = strlen(text);
    while (a < b && isspace((unsigned char)text[a])) a++;
    while (b > a && isspace((unsigned char)text[b - 1])) b--;
    /* the last line holds the parameters when it has at least 3 of them */
    size_t last = b;
    while (last > a && text[last - 1] != '\n') last--;
    size_t body_end = b, p0 = b, p1 = b;
    if (count_params(text + last, b - last) >= 3) {
        p0 = last;
        p1 = b;
        body_end = last > a ? last - 1 : a;
    }
    char *prompt = NULL, *negative = NULL;
    bool neg_mode = false, ok = true;
    for (size_t i = a; i < body_end && ok;) {
        size_t e = i;
        while (e < body_end && text[e] != '\n') e++;
        const char *line = text + i;
        size_t n = e - i;
        /* line.strip() */
        while (n && isspace((unsigned char)*line)) {
            line++;
            n--;
        }
        while (n && isspace((unsigned char)line[n - 1])) n--;
        if (n >= 16 && !strncmp(line, "Negative prompt:", 16)) {
            neg_mode = true;
            line += 16;
            n -= 16;
            while (n && isspace((unsigned char)*line)) {
                line++;
                n--;
            }
        }
        ok = join_line(neg_mode ? &negative : &prompt, line, n);
        i = e + 1;
    }
    set_str(res, "Prompt", prompt ? prompt : "", prompt ? strlen(prompt) : 0);
    set_str(res, "Negative prompt", negative ? negative : "", negative ? strlen(negative) : 0);
    free(prompt);
    free(negative);
    for (size_t i = p0; i < p1 && ok;) {
        size_t k0, k1, v0, v1, e = param_at(text, p1, i, &k0, &k1, &v0, &v1);
        if (!e) {
            i++;
            continue;
        }
        i = e;
        char *key = span(text, k0, k1), *val = span(text, v0, v1);
        if (!key || !val) {
            free(key);
            free(val);
            ok = false;
            break;
        }
        size_t vn = strlen(val);
        json_t *unq = NULL;
        if (vn >= 2 && val[0] == '"' && val[vn - 1] == '"') unq = json_loads(val, JSON_DECODE_ANY, NULL);
        if (json_is_string(unq)) {
            set_str(res, key, json_string_value(unq), json_string_length(unq));
        } else {
            long w, h;
            if (is_size(val, &w, &h)) {
                char k2[160];
                snprintf(k2, sizeof k2, "%s-1", key);
                json_object_set_new(res, k2, json_sprintf("%ld", w));
                snprintf(k2, sizeof k2, "%s-2", key);
                json_object_set_new(res, k2, json_sprintf("%ld", h));
            } else {
                set_str(res, key, val, vn);
            }
        }
        json_decref(unq);
        free(key);
        free(val);
    }
    if (!json_object_get(res, "Clip skip")) json_object_set_new(res, "Clip skip", json_string("1"));
    if (!ok) {
        json_decref(res);
        return NULL;
    }
    return res;
}

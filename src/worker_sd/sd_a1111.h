/* AUTOMATIC1111's web API as this worker speaks it: the txt2img / img2img
 * request models (A1111's field names and defaults: 512x512, 50 steps,
 * CFG 7, "Euler", denoising strength 0.75, A1111's prompt chunking and
 * (emphasis:1.2), its "Clip skip" and GPU seeds by default), the fields
 * that ask for something this worker does not do (hires fix, face
 * restoration, tiling, subseeds, scripts, styles, mask blur, ...), which
 * are refused by name rather than ignored, the options it keeps, the
 * response's "info" document, and the infotext parser behind png-info (A1111's
 * parse_generation_parameters: prompt, "Negative prompt:", then "Key:
 * value" pairs with JSON-quoted values and WxH sizes split in two). */
#ifndef RBEE_SD_A1111_H
#define RBEE_SD_A1111_H

#include "worker/wk_job.h"
#include "worker_sd/sd_request.h"

#include <jansson.h>

/* AUTOMATIC1111 settings that change what its API does here (the worker
 * keeps one set; POST /sdapi/v1/options changes it). */
typedef struct sd_a1111_options {
    int clip_stop_at_last_layers;    /* CLIP_stop_at_last_layers: 1 = the last layer */
    rb_torch_rng_kind rng;           /* randn_source: "GPU" (A1111's default) or "CPU" */
    int show_progress_every_n_steps; /* previews for /sdapi/v1/progress; 0 or -1: none */
    bool live_previews_enable;
} sd_a1111_options;

/* A1111's defaults: clip skip 1, GPU seeds, a preview every 10 steps. */
void sd_a1111_options_init(sd_a1111_options *o);

/* The request body of /sdapi/v1/txt2img (img2img false) or img2img, with
 * the worker's A1111 options (opts may be changed by override_settings,
 * for this request only). model_title: what sd_model_checkpoint must be. */
void sd_a1111_parse(json_t *o, bool img2img, const sd_model_limits *lim, sd_a1111_options *opts,
                    const char *model_title, sd_gen_request *r, wk_errors *errs);

/* GET /sdapi/v1/options. */
json_t *sd_a1111_options_json(const sd_a1111_options *o, const char *model_title);
/* POST /sdapi/v1/options and override_settings: applies every known key to
 * opts; an unknown key, a bad value or a read-only one changed is a field
 * error (then opts may be partly changed: apply to a copy). field_prefix
 * names the errors ("override_settings." or ""). */
void sd_a1111_options_apply(json_t *o, sd_a1111_options *opts, const char *model_title, const char *field_prefix,
                            wk_errors *errs);

/* The "info" document (as a JSON object; A1111 sends it as a string) of a
 * finished job: prompts, seeds, size, sampler, steps, infotexts, ... */
json_t *sd_a1111_info(const wk_job *j, const char *model_name, bool img2img);
/* The "parameters" echo: the request with the values used filled in. */
json_t *sd_a1111_parameters(json_t *request, const sd_gen_request *r, bool img2img);

/* A1111's parse_generation_parameters of an infotext: {"Prompt",
 * "Negative prompt", key: value, "Size-1", "Size-2", ...}, values as
 * strings; "Clip skip" defaults to "1" as A1111 fills it. NULL when out of
 * memory. */
json_t *sd_infotext_parse(const char *text);

#endif

/* OpenAI's images API as this worker speaks it: POST /v1/images/generations
 * (JSON) and POST /v1/images/edits (multipart/form-data: image, optional
 * mask), answered with base64 images ({"created", "data": [{"b64_json"}]}).
 * OpenAI's fields: prompt, n (one batch: the images share the seed, as
 * diffusers' num_images_per_prompt), size ("WxH" or "auto"), response_format
 * (b64_json only: the worker keeps no files to link to), output_format png
 * or jpeg, output_compression (JPEG quality). A mask marks the area to
 * repaint with transparent pixels (alpha 0), as OpenAI's masks do; without
 * one, an image with transparent pixels is repainted there, any other is
 * redrawn as a whole (img2img). Fields that ask for what this worker does
 * not do (url responses, webp, styles, streaming partial images, ...) are
 * refused by name. rbee's extensions, for reproducible results: seed,
 * steps, cfg_scale, negative_prompt, sampler, scheduler, clip_skip, strength. */
#ifndef RBEE_SD_OPENAI_H
#define RBEE_SD_OPENAI_H

#include "worker/wk_form.h"
#include "worker_sd/sd_request.h"

#include <jansson.h>

/* A JSON body of /v1/images/generations (edits: false) or the fields of an
 * edits form turned into JSON (edits: true; the images are read by
 * sd_openai_form). */
void sd_openai_parse(json_t *o, bool edits, const sd_model_limits *lim, sd_gen_request *r, wk_errors *errs);

/* The edits form: its text fields as a JSON object (numbers where the
 * field is numeric) and its image / mask files decoded into r. Returns the
 * object for sd_openai_parse (NULL with errors recorded). */
json_t *sd_openai_form(const wk_form *f, const sd_model_limits *lim, sd_gen_request *r, wk_errors *errs);

#endif

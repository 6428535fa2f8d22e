/* An image-generation request as the SD worker runs it, whichever API it
 * came from (rbee jobs, AUTOMATIC1111's /sdapi/v1, OpenAI's images API):
 * prompts, size, steps, guidance, sampler and schedule, seed, batch and
 * iterations, clip skip, init image, mask and strength, previews and the
 * output encoding. The readers here are shared by the APIs' parsers: each
 * checks type and range and records every problem as a field error (400
 * naming the field), images arrive as base64 (or raw multipart bytes) and
 * are decoded here with size limits, and sd_request_finish applies the
 * model's defaults and the cross-field rules. Limits (SD_MAX_*) are the
 * worker's, tighter than the engine's. */
#ifndef RBEE_SD_REQUEST_H
#define RBEE_SD_REQUEST_H

#include "rbee/image.h"
#include "rbee/sd_pipeline.h"
#include "worker/wk_request.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define SD_MAX_STEPS 150
#define SD_MAX_CFG 30.0
#define SD_MAX_BATCH 8
#define SD_MAX_ITER 32
#define SD_MAX_IMAGES 64 /* batch x iterations of one request */
#define SD_MAX_PROMPT_BYTES 16384
#define SD_MIN_SIDE 8

typedef enum sd_api { SD_API_RBEE = 0, SD_API_A1111, SD_API_OPENAI } sd_api;
typedef enum sd_out_format { SD_OUT_PNG = 0, SD_OUT_JPEG } sd_out_format;

/* What the loaded model and the flags allow. */
typedef struct sd_model_limits {
    int max_size;                   /* --max-size: width and height at most this */
    int default_width, default_height;
    int default_steps;
    float default_cfg;
    int vae_scale;                  /* sizes are multiples of this (8) */
} sd_model_limits;

typedef struct sd_gen_request {
    sd_api api;
    char *prompt;                   /* required ("" allowed) */
    char *negative_prompt;          /* NULL: none */
    int width, height;              /* 0 until finished: the init image's, else the model's default */
    int steps;
    float cfg_scale;
    bool sampler_set, schedule_set;
    rb_sd_sampler_kind sampler;
    rb_sd_schedule schedule;
    double eta;                     /* < 0: the sampler's default */
    uint64_t seed;                  /* the seed used (a random one when the request said -1) */
    int batch, n_iter;              /* images per run; runs (seeds seed, seed + batch, ...) */
    int clip_skip;                  /* diffusers' convention: 0 = the last layer */
    rb_torch_rng_kind rng;
    rb_sd_prompt_mode prompt_mode;
    bool emphasis;
    double strength;                /* 0: the engine's default */
    rb_image init, mask;            /* data NULL when absent; mask 1 channel */
    int preview_every;              /* steps between previews; 0: none */
    sd_out_format format;
    int jpeg_quality;
    bool send_images;               /* A1111's send_images */
} sd_gen_request;

/* Defaults: empty prompt, the model's steps and guidance, one image, seed
 * random, CPU generator, diffusers prompt mode, previews every 5 steps, PNG. */
void sd_request_init(sd_gen_request *r, sd_api api, const sd_model_limits *lim);
void sd_request_free(sd_gen_request *r);

/* ---- field readers: an absent or null field leaves the default ---- */

/* A UTF-8 string of at most SD_MAX_PROMPT_BYTES without NUL, copied. */
void sd_read_text(json_t *o, const char *key, bool required, char **out, wk_errors *errs);
/* Sampler name (ours or A1111's); schedule_key (may be NULL) names the
 * separate schedule field. a1111: error messages list A1111's names. */
void sd_read_sampler(json_t *o, const char *key, const char *schedule_key, bool a1111, sd_gen_request *r,
                     wk_errors *errs);
/* -1 (or absent): a random 32-bit seed; else 0..2^63-1. */
void sd_read_seed(json_t *o, const char *key, sd_gen_request *r, wk_errors *errs);
void sd_read_size(json_t *o, const char *key, const sd_model_limits *lim, int *out, wk_errors *errs);
/* A base64 PNG or JPEG (data URLs accepted) decoded to `channels`
 * channels within the size limits. */
void sd_read_image(json_t *o, const char *key, int channels, const sd_model_limits *lim, rb_image *img,
                   wk_errors *errs);
/* The same from raw bytes (a multipart file). */
void sd_decode_image(const char *field, const uint8_t *data, size_t n, int channels, const sd_model_limits *lim,
                     rb_image *img, wk_errors *errs);
/* "cpu" (torch.Generator('cpu'), diffusers / ComfyUI) or "cuda" (Philox, A1111's GPU seeds). */
void sd_read_rng(json_t *o, const char *key, sd_gen_request *r, wk_errors *errs);

/* After an API's reader: the size from the init image or the model,
 * multiples of the VAE scale within --max-size, the mask with its image,
 * image sizes equal to the output size (nothing is resized). */
void sd_request_finish(sd_gen_request *r, const sd_model_limits *lim, wk_errors *errs);

/* POST /v1/jobs: the rbee job body (every field is known; an unknown one
 * is an error, so a typo is never ignored). */
void sd_request_from_rbee(json_t *o, const sd_model_limits *lim, sd_gen_request *r, wk_errors *errs);

/* The engine's parameters for run `iter` (seed + iter x batch). p points
 * into r, which must outlive it. */
void sd_request_params(const sd_gen_request *r, int iter, rb_sd_params *p);
/* What the model family changes in p: AUTOMATIC1111 calls SD3's flow-matching
 * Euler "Euler", so its requests for Euler run flow_euler on an SD3 model. */
void sd_request_params_arch(const sd_gen_request *r, rb_sd_arch arch, rb_sd_params *p);

#endif

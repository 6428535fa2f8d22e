/* The sampler object of include/rbee/sd_sampler.h and the per-sampler step
 * functions. A run is a list of E model evaluations (diffusers'
 * scheduler.timesteps); evaluation k reads the latents x, the sampler's
 * tables at k, and its own state. Every step mirrors the float32 operation
 * order of the diffusers class it reproduces. */
#ifndef RBEE_SD_SAMPLER_INTERNAL_H
#define RBEE_SD_SAMPLER_INTERNAL_H

#include "rbee/sd_sampler.h"

#include <stdint.h>

typedef struct rb_sd_sampler_ops {
    /* model input for evaluation k (x -> out, n floats; may not alias) */
    void (*scale_in)(const rb_sd_sampler *s, int k, const float *x, float *out);
    /* the update after evaluation k with guided output m */
    rb_status (*step)(rb_sd_sampler *s, int k, const float *m, rb_error *err);
    /* image latents noised to the level of evaluation k (img2img start, inpaint blend) */
    void (*add_noise)(const rb_sd_sampler *s, int k, const float *img, const float *noise, float *out);
} rb_sd_sampler_ops;

enum { RB_SD_PHASE_NEW = 0, RB_SD_PHASE_READY, RB_SD_PHASE_WAIT_FEED, RB_SD_PHASE_DONE };

struct rb_sd_sampler {
    rb_sd_sampler_kind kind;
    rb_sd_schedule schedule;
    rb_sd_sched_config cfg; /* resolved against the sampler's class */
    const rb_sd_sampler_ops *ops;
    size_t n;
    int steps;  /* num_inference_steps */
    int order;  /* evaluations per step (1, or 2 for heun / dpmpp_sde) */
    int E;      /* evaluations of the full schedule */
    int begin;  /* first evaluation of the run */
    float *timesteps;     /* E: what the UNet gets */
    float *sigmas;        /* E + 1, or NULL (ddim, lcm) */
    int64_t *t_int;       /* E integer training timesteps (ddim, lcm, dpmpp_2m), else NULL */
    float *acp;           /* T alphabar (ddim, lcm) */
    float final_acp;      /* alphabar before timestep 0 */
    float init_noise_sigma;
    float eta;
    bool raw_in;          /* rb_sd_sampler_opts.raw_model_input */
    rb_sd_noise_fn noise;
    void *noise_user;
    /* run state */
    int phase;
    int k;                /* next evaluation */
    float *x;             /* latents */
    float *noise0;        /* starting noise (inpaint blend) */
    float *w1, *w2, *w3;  /* sampler work: saved sample, derivative / model history, noise */
    int has_history;      /* heun / dpmpp_sde: inside a step; dpmpp_2m: previous x0 kept */
    int lower_order_nums; /* dpmpp_2m */
    float saved_dt;       /* heun */
    float mid_sigma;      /* dpmpp_sde */
    /* inpainting */
    float *inp_image, *inp_mask;
};

/* Draws n values of noise into out through the callback. */
rb_status rb_sd_sampler_draw(rb_sd_sampler *s, float *out, rb_error *err);

extern const rb_sd_sampler_ops rb_sd_ops_euler, rb_sd_ops_euler_a, rb_sd_ops_heun, rb_sd_ops_dpmpp_2m,
    rb_sd_ops_dpmpp_sde, rb_sd_ops_ddim, rb_sd_ops_lcm, rb_sd_ops_flow_euler;

/* Shared pieces: sample / sqrt(sigma^2 + 1); image + noise * sigma; the
 * variance-preserving noising sqrt(acp) img + sqrt(1 - acp) noise. */
void rb_sd_scale_by_sigma(float sigma, const float *x, float *out, size_t n);
void rb_sd_add_noise_sigma(float sigma, const float *img, const float *noise, float *out, size_t n);
void rb_sd_add_noise_acp(float acp, const float *img, const float *noise, float *out, size_t n);
/* x0 from a model output in sigma space (euler family), float32 as diffusers. */
void rb_sd_x0_sigma(rb_sd_prediction p, float sigma, const float *x, const float *m, float *x0, size_t n);

/* Builds the schedule tables of s (kind, schedule, steps, cfg set). */
rb_status rb_sd_sampler_schedule(rb_sd_sampler *s, rb_error *err);
/* The flow_euler tables (sampler_flow.c). */
rb_status rb_sd_flow_schedule(rb_sd_sampler *s, rb_error *err);

#endif

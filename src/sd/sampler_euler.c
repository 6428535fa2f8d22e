/* Euler and Euler-ancestral steps in sigma space, float32 operation for
 * operation as diffusers' EulerDiscreteScheduler (s_churn 0) and
 * EulerAncestralDiscreteScheduler compute them. Model input: latents /
 * sqrt(sigma^2 + 1); img2img / inpaint noising: image + noise * sigma. */
#include "sched_fp_contract.h"

#include "sampler_internal.h"

#include <math.h>

static void scale_in(const rb_sd_sampler *s, int k, const float *x, float *out) {
    rb_sd_scale_by_sigma(s->sigmas[k], x, out, s->n);
}

static void add_noise(const rb_sd_sampler *s, int k, const float *img, const float *noise, float *out) {
    rb_sd_add_noise_sigma(s->sigmas[k], img, noise, out, s->n);
}

static rb_status step_euler(rb_sd_sampler *s, int k, const float *m, rb_error *err) {
    (void)err;
    float sigma = s->sigmas[k];
    float sigma_hat = sigma * 1.0f; /* gamma = 0 */
    float dt = s->sigmas[k + 1] - sigma_hat;
    float *x = s->x, *x0 = s->w3;
    /* epsilon uses sigma_hat, v-prediction sigma: equal without churn */
    rb_sd_x0_sigma(s->cfg.prediction_type, sigma_hat, x, m, x0, s->n);
    for (size_t i = 0; i < s->n; i++) {
        float d = (x[i] - x0[i]) / sigma_hat;
        x[i] = x[i] + d * dt;
    }
    return RB_OK;
}

static rb_status step_euler_a(rb_sd_sampler *s, int k, const float *m, rb_error *err) {
    float *noise = s->w2, *x0 = s->w3, *x = s->x;
    rb_status st = rb_sd_sampler_draw(s, noise, err);
    if (st != RB_OK) return st;
    float sigma = s->sigmas[k], sf = sigma, sto = s->sigmas[k + 1];
    float up = sqrtf(sto * sto * (sf * sf - sto * sto) / (sf * sf));
    if (s->eta != 1.0f) up = fminf(sto, s->eta * up); /* k-diffusion's eta; diffusers has eta 1 */
    float down = sqrtf(sto * sto - up * up);
    float dt = down - sigma;
    rb_sd_x0_sigma(s->cfg.prediction_type, sigma, x, m, x0, s->n);
    for (size_t i = 0; i < s->n; i++) {
        float d = (x[i] - x0[i]) / sigma;
        float prev = x[i] + d * dt;
        x[i] = prev + noise[i] * up;
    }
    return RB_OK;
}

const rb_sd_sampler_ops rb_sd_ops_euler = {scale_in, step_euler, add_noise};
const rb_sd_sampler_ops rb_sd_ops_euler_a = {scale_in, step_euler_a, add_noise};

/* Heun steps (diffusers' HeunDiscreteScheduler, Karras et al. 2022 alg. 1
 * without churn): the first evaluation of a step takes an Euler step to
 * sigma_next and keeps its derivative, the second averages the two
 * derivatives and redoes the step from the kept sample; the last step (to
 * sigma 0) stays an Euler step. Tables are doubled, so the model input of
 * evaluation k uses sigma[k] in both stages. */
#include "sched_fp_contract.h"

#include "sampler_internal.h"

#include <math.h>
#include <string.h>

static void scale_in(const rb_sd_sampler *s, int k, const float *x, float *out) {
    rb_sd_scale_by_sigma(s->sigmas[k], x, out, s->n);
}

static void add_noise(const rb_sd_sampler *s, int k, const float *img, const float *noise, float *out) {
    rb_sd_add_noise_sigma(s->sigmas[k], img, noise, out, s->n);
}

static rb_status step(rb_sd_sampler *s, int k, const float *m, rb_error *err) {
    (void)err;
    int first = !s->has_history;
    float sigma = first ? s->sigmas[k] : s->sigmas[k - 1];
    float sigma_next = first ? s->sigmas[k + 1] : s->sigmas[k];
    float sigma_hat = sigma * 1.0f;
    float sigma_in = first ? sigma_hat : sigma_next;
    float *x = s->x, *sample = s->w1, *deriv = s->w2, *x0 = s->w3;
    rb_sd_x0_sigma(s->cfg.prediction_type, sigma_in, x, m, x0, s->n);
    if (s->cfg.clip_sample) {
        float r = (float)s->cfg.clip_sample_range;
        for (size_t i = 0; i < s->n; i++) x0[i] = fminf(fmaxf(x0[i], -r), r);
    }
    if (first) {
        float dt = sigma_next - sigma_hat;
        for (size_t i = 0; i < s->n; i++) {
            float d = (x[i] - x0[i]) / sigma_hat;
            deriv[i] = d;
            sample[i] = x[i];
            x[i] = x[i] + d * dt;
        }
        s->saved_dt = dt;
        s->has_history = 1;
    } else {
        float dt = s->saved_dt;
        for (size_t i = 0; i < s->n; i++) {
            float d = (x[i] - x0[i]) / sigma_next;
            d = (deriv[i] + d) / 2.0f;
            x[i] = sample[i] + d * dt;
        }
        s->has_history = 0;
    }
    return RB_OK;
}

const rb_sd_sampler_ops rb_sd_ops_heun = {scale_in, step, add_noise};

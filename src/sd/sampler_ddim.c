/* DDIM steps (diffusers' DDIMScheduler, Song et al. 2021 eq. 12): from the
 * model output the x0 and epsilon predictions at alphabar_t, then
 * x = sqrt(alphabar_prev) x0 + sqrt(1 - alphabar_prev - std^2) eps
 * (+ std * noise when eta > 0), std = eta * sqrt(variance), with
 * prev = t - T / steps as diffusers takes it. Latents are variance
 * preserving: the model input is the latents. float32 as diffusers. */
#include "sched_fp_contract.h"

#include "sampler_internal.h"

#include <math.h>
#include <string.h>

static void scale_in(const rb_sd_sampler *s, int k, const float *x, float *out) {
    (void)k;
    memcpy(out, x, s->n * sizeof(float));
}

static void add_noise(const rb_sd_sampler *s, int k, const float *img, const float *noise, float *out) {
    rb_sd_add_noise_acp(s->acp[s->t_int[k]], img, noise, out, s->n);
}

static rb_status step(rb_sd_sampler *s, int k, const float *m, rb_error *err) {
    float *x = s->x, *noise = s->w3;
    if (s->eta > 0.0f) {
        rb_status st = rb_sd_sampler_draw(s, noise, err);
        if (st != RB_OK) return st;
    }
    int64_t t = s->t_int[k], prev = t - s->cfg.num_train_timesteps / s->steps;
    float a_t = s->acp[t], a_prev = prev >= 0 ? s->acp[prev] : s->final_acp;
    float b_t = 1.0f - a_t, b_prev = 1.0f - a_prev;
    float sa = sqrtf(a_t), sb = sqrtf(b_t);
    float variance = b_prev / b_t * (1.0f - a_t / a_prev);
    float std = s->eta * sqrtf(variance);
    float dir = sqrtf(1.0f - a_prev - std * std);
    float sa_prev = sqrtf(a_prev);
    float r = (float)s->cfg.clip_sample_range;
    for (size_t i = 0; i < s->n; i++) {
        float x0, eps;
        switch (s->cfg.prediction_type) {
        case RB_SD_PRED_EPSILON:
            x0 = (x[i] - sb * m[i]) / sa;
            eps = m[i];
            break;
        case RB_SD_PRED_V:
            x0 = sa * x[i] - sb * m[i];
            eps = sa * m[i] + sb * x[i];
            break;
        default:
            x0 = m[i];
            eps = (x[i] - sa * x0) / sb;
            break;
        }
        if (s->cfg.clip_sample) x0 = fminf(fmaxf(x0, -r), r);
        float v = sa_prev * x0 + dir * eps;
        if (s->eta > 0.0f) v = v + std * noise[i];
        x[i] = v;
    }
    return RB_OK;
}

const rb_sd_sampler_ops rb_sd_ops_ddim = {scale_in, step, add_noise};

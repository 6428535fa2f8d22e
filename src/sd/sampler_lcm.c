/* LCM steps (diffusers' LCMScheduler, Luo et al. 2023): x0 from the model
 * output at alphabar_t, the consistency boundary condition denoised =
 * c_out x0 + c_skip x with c_skip = 0.25 / (s^2 + 0.25), c_out =
 * s / sqrt(s^2 + 0.25), s = t * timestep_scaling, then, except after the
 * last step, a fresh noising to the next timestep. float32 as diffusers. */
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
    int last = k == s->steps - 1;
    if (!last) {
        rb_status st = rb_sd_sampler_draw(s, noise, err);
        if (st != RB_OK) return st;
    }
    int64_t t = s->t_int[k], prev = k + 1 < s->E ? s->t_int[k + 1] : t;
    float a_t = s->acp[t], a_prev = prev >= 0 ? s->acp[prev] : s->final_acp;
    float b_t = 1.0f - a_t, b_prev = 1.0f - a_prev;
    float scaled = (float)t * (float)s->cfg.timestep_scaling;
    float den = scaled * scaled + 0.25f;
    float c_skip = (1.0f / den) * 0.25f; /* python float / tensor: reciprocal, then the product */
    float c_out = scaled / sqrtf(den);
    float sa = sqrtf(a_t), sb = sqrtf(b_t), sa_prev = sqrtf(a_prev), sb_prev = sqrtf(b_prev);
    float r = (float)s->cfg.clip_sample_range;
    for (size_t i = 0; i < s->n; i++) {
        float x0;
        switch (s->cfg.prediction_type) {
        case RB_SD_PRED_EPSILON: x0 = (x[i] - sb * m[i]) / sa; break;
        case RB_SD_PRED_V: x0 = sa * x[i] - sb * m[i]; break;
        default: x0 = m[i]; break;
        }
        if (s->cfg.clip_sample) x0 = fminf(fmaxf(x0, -r), r);
        float denoised = c_out * x0 + c_skip * x[i];
        x[i] = last ? denoised : sa_prev * denoised + sb_prev * noise[i];
    }
    return RB_OK;
}

const rb_sd_sampler_ops rb_sd_ops_lcm = {scale_in, step, add_noise};

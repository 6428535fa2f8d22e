/* DPM-Solver++ SDE steps (diffusers' DPMSolverSDEScheduler = k-diffusion's
 * sample_dpmpp_sde with r = 1/2), in t = -log(sigma): the first evaluation
 * of a step takes an ancestral step from sigma to the midpoint
 * sigma_mid = exp(-(t + (t_next - t)/2)) and keeps the starting sample; the
 * second, evaluated at sigma_mid, takes the ancestral step from the kept
 * sample to sigma_next with its data prediction. Each ancestral step is
 * x' = (sigma_down/sigma) x - expm1(t - t_down) x0 + noise * sigma_up.
 * A step to sigma 0 is a plain Euler step. float32 as diffusers. */
#include "sched_fp_contract.h"

#include "sampler_internal.h"

#include <math.h>

static void scale_in(const rb_sd_sampler *s, int k, const float *x, float *out) {
    float sigma_in = s->has_history ? s->mid_sigma : s->sigmas[k];
    rb_sd_scale_by_sigma(sigma_in, x, out, s->n);
}

static void add_noise(const rb_sd_sampler *s, int k, const float *img, const float *noise, float *out) {
    rb_sd_add_noise_sigma(s->sigmas[k], img, noise, out, s->n);
}

static rb_status step(rb_sd_sampler *s, int k, const float *m, rb_error *err) {
    int first = !s->has_history;
    float sigma = first ? s->sigmas[k] : s->sigmas[k - 1];
    float sigma_next = first ? s->sigmas[k + 1] : s->sigmas[k];
    float t = -logf(sigma), t_next = -logf(sigma_next);
    float t_mid = t + (t_next - t) * 0.5f;
    float sigma_in = first ? sigma : expf(-t_mid);
    float *x = s->x, *sample = s->w1, *x0 = s->w2, *noise = s->w3;
    rb_sd_x0_sigma(s->cfg.prediction_type, sigma_in, x, m, x0, s->n);
    if (sigma_next == 0.0f) {
        float dt = sigma_next - sigma;
        for (size_t i = 0; i < s->n; i++) {
            float d = (x[i] - x0[i]) / sigma;
            x[i] = x[i] + d * dt;
        }
        return RB_OK;
    }
    rb_status st = rb_sd_sampler_draw(s, noise, err);
    if (st != RB_OK) return st;
    if (first) t_next = t_mid;
    float sf = expf(-t), sto = expf(-t_next);
    float up = sqrtf(sto * sto * (sf * sf - sto * sto) / (sf * sf));
    up = fminf(sto, s->eta * up);
    float down = sqrtf(sto * sto - up * up);
    float t_down = -logf(down);
    float ratio = expf(-t_down) / expf(-t);
    float c = expm1f(t - t_down);
    for (size_t i = 0; i < s->n; i++) {
        float base = first ? x[i] : sample[i];
        if (first) sample[i] = x[i];
        float prev = ratio * base - c * x0[i];
        x[i] = prev + noise[i] * 1.0f * up;
    }
    if (first) {
        s->mid_sigma = expf(-t_next);
        s->has_history = 1;
    } else {
        s->has_history = 0;
    }
    return RB_OK;
}

const rb_sd_sampler_ops rb_sd_ops_dpmpp_sde = {scale_in, step, add_noise};

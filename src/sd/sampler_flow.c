/* The flow-matching Euler sampler (FlowMatchEulerDiscreteScheduler, the SD3
 * pipelines' scheduler): its schedule and its step, float32 operation for
 * operation as diffusers computes them. The model predicts the velocity v
 * of x_sigma = (1 - sigma) x0 + sigma noise, so a step is
 * x += (sigma_next - sigma) v and the model input is x itself.
 *
 * Schedule (no dynamic shifting): the class first builds training sigmas
 * t / T for t = T..1 (float32) and shifts them, sigma' = s sigma / (1 +
 * (s - 1) sigma) (float32 tensor ops); set_timesteps(n) then spaces n
 * timesteps linearly (numpy, float64) from sigma_max T to sigma_min T,
 * divides by T, shifts again (float64), rounds to float32, and appends 0;
 * the model's timesteps are sigma x T in float32. */
#include "sched_fp_contract.h"

#include "sampler_internal.h"
#include "sched_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void scale_in(const rb_sd_sampler *s, int k, const float *x, float *out) {
    (void)k;
    memcpy(out, x, s->n * sizeof(float));
}

/* scale_noise: sigma * noise + (1 - sigma) * image */
static void add_noise(const rb_sd_sampler *s, int k, const float *img, const float *noise, float *out) {
    const float sigma = s->sigmas[k], keep = 1.0f - sigma;
    for (size_t i = 0; i < s->n; i++) out[i] = sigma * noise[i] + keep * img[i];
}

static rb_status step(rb_sd_sampler *s, int k, const float *m, rb_error *err) {
    (void)err;
    const float dt = s->sigmas[k + 1] - s->sigmas[k];
    float *x = s->x;
    for (size_t i = 0; i < s->n; i++) x[i] = x[i] + dt * m[i];
    return RB_OK;
}

const rb_sd_sampler_ops rb_sd_ops_flow_euler = {scale_in, step, add_noise};

/* The training-table shift in float32 tensor ops (shift - 1 is a Python float). */
static float shift_f32(float sigma, double shift) {
    const float num = (float)shift * sigma, den = 1.0f + (float)(shift - 1.0) * sigma;
    return num / den;
}

rb_status rb_sd_flow_schedule(rb_sd_sampler *s, rb_error *err) {
    const rb_sd_sched_config *c = &s->cfg;
    if (c->use_karras_sigmas || c->use_exponential_sigmas)
        return rb_error_set(err, RB_E_UNSUPPORTED, "sampler flow_euler: karras / exponential flow sigmas are not supported");
    const int T = c->num_train_timesteps, n = s->steps;
    const double shift = c->shift;
    /* the class's table: linspace(1, T, T) reversed, / T, shifted; its first and last entries */
    const double smax = shift_f32((float)T / (float)T, shift), smin = shift_f32(1.0f / (float)T, shift);
    s->E = n;
    s->timesteps = calloc((size_t)n, sizeof(float));
    s->sigmas = calloc((size_t)n + 1, sizeof(float));
    if (!s->timesteps || !s->sigmas) return rb_error_set(err, RB_E_NOMEM, "sampler: out of memory");
    for (int i = 0; i < n; i++) {
        const double t = rb_np_linspace_at(smax * T, smin * T, n, i);
        const double sg = t / T;
        const double sh = shift * sg / (1.0 + (shift - 1.0) * sg);
        s->sigmas[i] = (float)sh;
        s->timesteps[i] = s->sigmas[i] * (float)T;
    }
    s->sigmas[n] = 0.0f;
    s->init_noise_sigma = 1.0f;
    return RB_OK;
}

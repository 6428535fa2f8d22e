/* DPM-Solver++(2M) steps (diffusers' DPMSolverMultistepScheduler with
 * algorithm_type dpmsolver++, solver_order 2): model outputs become data
 * predictions x0 in the variance-preserving parametrisation (alpha =
 * 1/sqrt(sigma^2+1), sigma_vp = sigma*alpha, lambda = log alpha - log
 * sigma_vp), then the first-order update or the multistep second-order one
 * (midpoint or heun form), float32 operation for operation. */
#include "sched_fp_contract.h"

#include "sampler_internal.h"

#include <math.h>
#include <string.h>

typedef struct vp {
    float alpha, sigma, lambda;
} vp;

static vp vp_of(float sigma) {
    vp v;
    v.alpha = 1.0f / sqrtf(sigma * sigma + 1.0f);
    v.sigma = sigma * v.alpha;
    v.lambda = logf(v.alpha) - logf(v.sigma);
    return v;
}

static void scale_in(const rb_sd_sampler *s, int k, const float *x, float *out) {
    (void)k;
    memcpy(out, x, s->n * sizeof(float));
}

static void add_noise(const rb_sd_sampler *s, int k, const float *img, const float *noise, float *out) {
    vp v = vp_of(s->sigmas[k]);
    for (size_t i = 0; i < s->n; i++) out[i] = v.alpha * img[i] + v.sigma * noise[i];
}

static rb_status step(rb_sd_sampler *s, int k, const float *m, rb_error *err) {
    (void)err;
    float *x = s->x, *m0 = s->w3, *m1 = s->w2;
    vp s0 = vp_of(s->sigmas[k]), t = vp_of(s->sigmas[k + 1]);
    /* data prediction */
    switch (s->cfg.prediction_type) {
    case RB_SD_PRED_EPSILON:
        for (size_t i = 0; i < s->n; i++) m0[i] = (x[i] - s0.sigma * m[i]) / s0.alpha;
        break;
    case RB_SD_PRED_V:
        for (size_t i = 0; i < s->n; i++) m0[i] = s0.alpha * x[i] - s0.sigma * m[i];
        break;
    default: memcpy(m0, m, s->n * sizeof(float)); break;
    }
    int last = k == s->E - 1;
    int lower_final = last && (s->cfg.euler_at_final || (s->cfg.lower_order_final && s->E < 15) ||
                               s->cfg.final_sigmas_type == RB_SD_FINAL_SIGMA_ZERO);
    float h = t.lambda - s0.lambda;
    float e = expf(-h) - 1.0f;
    float ratio = t.sigma / s0.sigma;
    if (s->lower_order_nums < 1 || lower_final) {
        float c0 = t.alpha * e;
        for (size_t i = 0; i < s->n; i++) x[i] = ratio * x[i] - c0 * m0[i];
    } else {
        vp s1 = vp_of(s->sigmas[k - 1]);
        float h0 = s0.lambda - s1.lambda;
        float r0 = h0 / h;
        float inv_r0 = 1.0f / r0;
        float c0 = t.alpha * e;
        if (s->cfg.solver_type == RB_SD_SOLVER_MIDPOINT) {
            float c1 = 0.5f * (t.alpha * e);
            for (size_t i = 0; i < s->n; i++) {
                float d1 = inv_r0 * (m0[i] - m1[i]);
                x[i] = ratio * x[i] - c0 * m0[i] - c1 * d1;
            }
        } else {
            float c1 = t.alpha * (e / h + 1.0f);
            for (size_t i = 0; i < s->n; i++) {
                float d1 = inv_r0 * (m0[i] - m1[i]);
                x[i] = ratio * x[i] - c0 * m0[i] + c1 * d1;
            }
        }
    }
    if (s->lower_order_nums < 2) s->lower_order_nums++;
    s->w2 = m0, s->w3 = m1; /* this x0 is the next step's previous one */
    return RB_OK;
}

const rb_sd_sampler_ops rb_sd_ops_dpmpp_2m = {scale_in, step, add_noise};

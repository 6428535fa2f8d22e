/* Training noise tables of a scheduler config, in float32 as torch computes
 * them in diffusers' scheduler constructors: betas (torch.linspace's
 * two-sided formula, or the squaredcos_cap_v2 alpha-bar product in double),
 * the optional zero-terminal-SNR rescale (Lin et al. 2023), alphabar =
 * cumprod(1 - beta) accumulated in double, sigma = sqrt((1 - alphabar) /
 * alphabar) and log sigma. */
#include "sched_fp_contract.h"

#include "sched_internal.h"

#include <math.h>
#include <stdlib.h>

/* torch.linspace(start, end, T, dtype=float32) on the CPU: the first half
 * counts up from start, the second half down from end. */
static void linspace_f32(float start, float end, int T, float *out) {
    float step = (end - start) / (float)(T - 1);
    int half = T / 2;
    for (int i = 0; i < T; i++)
        out[i] = i < half ? start + step * (float)i : end - step * (float)(T - i - 1);
}

static double alpha_bar_cos(double t) {
    double c = cos((t + 0.008) / 1.008 * 3.14159265358979323846 / 2.0);
    return c * c;
}

/* Rescales betas to zero terminal SNR, float32 tensor ops as in diffusers. */
static int rescale_zero_snr(float *betas, int T) {
    if (T < 2) return -1;
    float *ab = calloc((size_t)T, sizeof *ab);
    if (!ab) return -1;
    double acc = 1.0;
    for (int i = 0; i < T; i++) {
        acc *= (double)(1.0f - betas[i]);
        ab[i] = sqrtf((float)acc);
    }
    float a0 = ab[0], aT = ab[T - 1];
    float scale = a0 / (a0 - aT);
    for (int i = 0; i < T; i++) {
        float v = (ab[i] - aT) * scale;
        ab[i] = v * v; /* alphas_bar */
    }
    float prev = ab[0];
    betas[0] = 1.0f - ab[0];
    for (int i = 1; i < T; i++) {
        betas[i] = 1.0f - ab[i] / prev;
        prev = ab[i];
    }
    free(ab);
    return 0;
}

void rb_sd_train_free(rb_sd_train *t) {
    if (!t) return;
    free(t->betas);
    free(t->acp);
    free(t->sigmas);
    free(t->log_sigmas);
    t->betas = t->acp = t->sigmas = t->log_sigmas = NULL;
}

rb_status rb_sd_train_build(const rb_sd_sched_config *c, rb_sd_train *t, rb_error *err) {
    int T = c->num_train_timesteps;
    t->T = T;
    t->betas = malloc((size_t)T * sizeof(float));
    t->acp = malloc((size_t)T * sizeof(float));
    t->sigmas = malloc((size_t)T * sizeof(float));
    t->log_sigmas = malloc((size_t)T * sizeof(float));
    if (!t->betas || !t->acp || !t->sigmas || !t->log_sigmas) {
        rb_sd_train_free(t);
        return rb_error_set(err, RB_E_NOMEM, "scheduler: out of memory for %d training steps", T);
    }
    switch (c->beta_schedule) {
    case RB_SD_BETAS_LINEAR: linspace_f32((float)c->beta_start, (float)c->beta_end, T, t->betas); break;
    case RB_SD_BETAS_SCALED_LINEAR:
        linspace_f32((float)sqrt(c->beta_start), (float)sqrt(c->beta_end), T, t->betas);
        for (int i = 0; i < T; i++) t->betas[i] = t->betas[i] * t->betas[i];
        break;
    default:
        for (int i = 0; i < T; i++) {
            double b = 1.0 - alpha_bar_cos((double)(i + 1) / T) / alpha_bar_cos((double)i / T);
            t->betas[i] = (float)(b < 0.999 ? b : 0.999);
        }
        break;
    }
    if (c->rescale_betas_zero_snr && rescale_zero_snr(t->betas, T) != 0) {
        rb_sd_train_free(t);
        return rb_error_set(err, RB_E_NOMEM, "scheduler: out of memory");
    }
    double acc = 1.0;
    for (int i = 0; i < T; i++) {
        acc *= (double)(1.0f - t->betas[i]);
        t->acp[i] = (float)acc;
    }
    if (c->rescale_betas_zero_snr) t->acp[T - 1] = 0x1p-24f;
    for (int i = 0; i < T; i++) {
        t->sigmas[i] = sqrtf((1.0f - t->acp[i]) / t->acp[i]);
        t->log_sigmas[i] = logf(t->sigmas[i]);
    }
    for (int i = 0; i < T; i++) {
        if (!(t->acp[i] > 0.0f && t->sigmas[i] > 0.0f) || !isfinite(t->sigmas[i])) {
            double a = t->acp[i];
            rb_sd_train_free(t);
            return rb_error_set(err, RB_E_FORMAT, "scheduler: the betas give alphabar %g at training step %d "
                                "(no usable noise level)", a, i);
        }
    }
    return RB_OK;
}

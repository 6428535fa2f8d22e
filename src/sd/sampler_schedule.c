/* The tables of a sampler run (diffusers' scheduler state after
 * set_timesteps): per model evaluation the timestep the UNet gets and the
 * sigma table entry, for each sampler class and sigma schedule, with the
 * doubled tables of the two-evaluation samplers, the final sigma and
 * init_noise_sigma. */
#include "sched_fp_contract.h"

#include "sampler_internal.h"
#include "sched_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static rb_sd_schedule effective_schedule(const rb_sd_sampler *s) {
    if (s->schedule != RB_SD_SCHEDULE_DEFAULT) return s->schedule;
    if (s->cfg.use_karras_sigmas) return RB_SD_SCHEDULE_KARRAS;
    if (s->cfg.use_exponential_sigmas) return RB_SD_SCHEDULE_EXPONENTIAL;
    return RB_SD_SCHEDULE_DEFAULT;
}

/* sqrt((1 - acp_0) / acp_0): the smallest training sigma, float32 ops. */
static float sigma_min_train(const rb_sd_train *t) { return sqrtf((1.0f - t->acp[0]) / t->acp[0]); }

static rb_status alloc_tables(rb_sd_sampler *s, int E, int with_sigmas, int with_int, rb_error *err) {
    s->E = E;
    s->timesteps = calloc((size_t)E, sizeof(float));
    s->sigmas = with_sigmas ? calloc((size_t)E + 1, sizeof(float)) : NULL;
    s->t_int = with_int ? calloc((size_t)E, sizeof(int64_t)) : NULL;
    if (!s->timesteps || (with_sigmas && !s->sigmas) || (with_int && !s->t_int))
        return rb_error_set(err, RB_E_NOMEM, "sampler: out of memory");
    return RB_OK;
}

/* init_noise_sigma of the sigma-space classes: the largest sigma, or
 * sqrt(max^2 + 1) for leading spacing (float32 tensor ops). */
static float init_sigma(const rb_sd_sampler *s) {
    float mx = 0.0f;
    for (int i = 0; i <= s->E; i++)
        if (s->sigmas[i] > mx) mx = s->sigmas[i];
    if (s->cfg.timestep_spacing != RB_SD_SPACING_LEADING) return mx;
    return sqrtf(mx * mx + 1.0f);
}

/* The n sigmas (float64) and timesteps of a sigma-space schedule. */
static rb_status sigma_schedule(rb_sd_sampler *s, const rb_sd_train *t, double *sig, double *ts, rb_error *err) {
    int n = s->steps;
    rb_sd_schedule sch = effective_schedule(s);
    if (sch == RB_SD_SCHEDULE_SGM_UNIFORM) {
        rb_sd_sigmas_sgm_uniform(t, n, sig, ts);
        return RB_OK;
    }
    if (sch == RB_SD_SCHEDULE_SIMPLE) {
        rb_sd_sigmas_simple(t, n, sig, ts);
        return RB_OK;
    }
    double smin, smax;
    if (s->kind == RB_SD_SAMPLER_DPMPP_2M) {
        int last = t->T;
        if (s->cfg.lambda_min_clipped > -INFINITY) { /* searchsorted over the ascending flipped log-SNR */
            int idx = 0;
            while (idx < t->T) {
                float a = sqrtf(t->acp[t->T - 1 - idx]), sg = sqrtf(1.0f - t->acp[t->T - 1 - idx]);
                if ((double)(logf(a) - logf(sg)) >= s->cfg.lambda_min_clipped) break;
                idx++;
            }
            last = t->T - idx;
            if (last < 1) return rb_error_set(err, RB_E_RANGE, "dpmpp_2m: lambda_min_clipped leaves no timestep");
        }
        int64_t *ti = malloc((size_t)n * sizeof *ti);
        if (!ti) return rb_error_set(err, RB_E_NOMEM, "sampler: out of memory");
        rb_status st = rb_sd_spacing_dpm(&s->cfg, n, last, ti, err);
        for (int i = 0; st == RB_OK && i < n; i++) {
            ts[i] = (double)ti[i];
            sig[i] = rb_sd_interp(ts[i], t->sigmas, t->T);
        }
        free(ti);
        if (st != RB_OK) return st;
        smin = t->sigmas[0], smax = t->sigmas[t->T - 1]; /* the full training range */
    } else {
        rb_status st = rb_sd_spacing_float(&s->cfg, n, s->kind != RB_SD_SAMPLER_DPMPP_SDE, ts, err);
        if (st != RB_OK) return st;
        for (int i = 0; i < n; i++) sig[i] = rb_sd_interp(ts[i], t->sigmas, t->T);
        smin = sig[n - 1], smax = sig[0];
        if (s->cfg.set & RB_SD_CFG_SIGMA_MIN) smin = s->cfg.sigma_min;
        if (s->cfg.set & RB_SD_CFG_SIGMA_MAX) smax = s->cfg.sigma_max;
    }
    if (sch == RB_SD_SCHEDULE_KARRAS) rb_sd_sigmas_karras(smin, smax, n, sig);
    else if (sch == RB_SD_SCHEDULE_EXPONENTIAL) rb_sd_sigmas_exponential(smin, smax, n, sig);
    else return RB_OK;
    for (int i = 0; i < n; i++) ts[i] = rb_sd_sigma_to_t(sig[i], t);
    if (s->kind == RB_SD_SAMPLER_DPMPP_2M && sch == RB_SD_SCHEDULE_KARRAS &&
        s->cfg.beta_schedule != RB_SD_BETAS_SQUAREDCOS_CAP_V2)
        for (int i = 0; i < n; i++) ts[i] = nearbyint(ts[i]);
    return RB_OK;
}

static rb_status build_sigma_sampler(rb_sd_sampler *s, const rb_sd_train *t, rb_error *err) {
    int n = s->steps;
    double *sig = malloc((size_t)n * sizeof *sig), *ts = malloc((size_t)n * sizeof *ts);
    rb_status st = (sig && ts) ? sigma_schedule(s, t, sig, ts, err) : rb_error_set(err, RB_E_NOMEM, "sampler: out of memory");
    if (st != RB_OK) goto done;
    float last = 0.0f;
    if (s->cfg.final_sigmas_type == RB_SD_FINAL_SIGMA_MIN) last = sigma_min_train(t);
    if (s->order == 1) {
        st = alloc_tables(s, n, 1, s->kind == RB_SD_SAMPLER_DPMPP_2M, err);
        if (st != RB_OK) goto done;
        for (int i = 0; i < n; i++) {
            s->sigmas[i] = (float)sig[i];
            if (s->kind == RB_SD_SAMPLER_DPMPP_2M) { /* int64 timesteps: truncation */
                s->t_int[i] = (int64_t)ts[i];
                s->timesteps[i] = (float)s->t_int[i];
            } else {
                s->timesteps[i] = (float)ts[i];
            }
        }
        s->sigmas[n] = last;
    } else { /* heun, dpmpp_sde: [s0, s1, s1, ..., s_{n-1}, s_{n-1}, 0], timesteps alike */
        st = alloc_tables(s, 2 * n - 1, 1, 0, err);
        if (st != RB_OK) goto done;
        s->sigmas[0] = (float)sig[0];
        s->timesteps[0] = (float)ts[0];
        for (int i = 1; i < n; i++) {
            s->sigmas[2 * i - 1] = s->sigmas[2 * i] = (float)sig[i];
            s->timesteps[2 * i - 1] = s->timesteps[2 * i] = (float)ts[i];
        }
        s->sigmas[2 * n - 1] = 0.0f;
        if (s->kind == RB_SD_SAMPLER_DPMPP_SDE) { /* midpoint timesteps between consecutive sigmas */
            for (int i = 0; i + 1 < n; i++) {
                double ta = -log(sig[i]), tb = -log(sig[i + 1]);
                double mid = exp(-(ta + (tb - ta) * 0.5));
                s->timesteps[2 * i + 1] = (float)rb_sd_sigma_to_t(mid, t);
            }
        }
    }
    s->init_noise_sigma = s->kind == RB_SD_SAMPLER_DPMPP_2M ? 1.0f : init_sigma(s);
done:
    free(sig);
    free(ts);
    return st;
}

static rb_status build_alpha_sampler(rb_sd_sampler *s, const rb_sd_train *t, rb_error *err) {
    int n = s->steps, T = t->T;
    rb_status st = alloc_tables(s, n, 0, 1, err);
    if (st != RB_OK) return st;
    st = s->kind == RB_SD_SAMPLER_DDIM ? rb_sd_spacing_ddim(&s->cfg, n, s->t_int, err)
                                       : rb_sd_spacing_lcm(&s->cfg, n, s->t_int, err);
    if (st != RB_OK) return st;
    for (int i = 0; i < n; i++) {
        if (s->t_int[i] < 0 || s->t_int[i] >= T)
            return rb_error_set(err, RB_E_RANGE, "%s: %d steps with steps_offset %d give timestep %lld outside [0, %d]",
                                rb_sd_sampler_kind_name(s->kind), n, s->cfg.steps_offset, (long long)s->t_int[i], T - 1);
        s->timesteps[i] = (float)s->t_int[i];
    }
    s->acp = malloc((size_t)T * sizeof(float));
    if (!s->acp) return rb_error_set(err, RB_E_NOMEM, "sampler: out of memory");
    memcpy(s->acp, t->acp, (size_t)T * sizeof(float));
    s->final_acp = s->cfg.set_alpha_to_one ? 1.0f : t->acp[0];
    s->init_noise_sigma = 1.0f;
    return RB_OK;
}

rb_status rb_sd_sampler_schedule(rb_sd_sampler *s, rb_error *err) {
    if (s->kind == RB_SD_SAMPLER_FLOW_EULER) return rb_sd_flow_schedule(s, err);
    rb_sd_train t;
    memset(&t, 0, sizeof t);
    rb_status st = rb_sd_train_build(&s->cfg, &t, err);
    if (st != RB_OK) return st;
    if (s->kind == RB_SD_SAMPLER_DDIM || s->kind == RB_SD_SAMPLER_LCM) st = build_alpha_sampler(s, &t, err);
    else st = build_sigma_sampler(s, &t, err);
    rb_sd_train_free(&t);
    return st;
}

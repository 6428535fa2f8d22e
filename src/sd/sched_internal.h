/* Shared pieces of the schedule computation (include/rbee/sd_sampler.h):
 * config resolution against a sampler class's defaults, the training tables
 * (betas, alphabar, sigmas in float32 as torch computes them), timestep
 * spacings as numpy computes them, and the sigma schedules. */
#ifndef RBEE_SD_SCHED_INTERNAL_H
#define RBEE_SD_SCHED_INTERNAL_H

#include "rbee/sd_sampler.h"

#include <stdint.h>

/* Fills every field `in` does not set with the default of the diffusers class
 * behind `kind`, and clears the options that class does not read (e.g.
 * rescale_betas_zero_snr for heun / dpmpp_sde), so the result describes
 * exactly what that class computes. */
void rb_sd_config_resolve(const rb_sd_sched_config *in, rb_sd_sampler_kind kind, rb_sd_sched_config *out);
/* Range and consistency checks of every field (a resolved config). */
rb_status rb_sd_config_check(const rb_sd_sched_config *c, rb_error *err);

/* Training tables of T entries (index = training timestep). */
typedef struct rb_sd_train {
    int T;
    float *betas;      /* float32 as torch.linspace / betas_for_alpha_bar give them */
    float *acp;        /* alphabar: cumprod(1 - beta) accumulated in double, stored float32 */
    float *sigmas;     /* sqrt((1 - acp) / acp) in float32 ops */
    float *log_sigmas; /* logf(sigmas), as np.log of the float32 array */
} rb_sd_train;

rb_status rb_sd_train_build(const rb_sd_sched_config *c, rb_sd_train *t, rb_error *err);
void rb_sd_train_free(rb_sd_train *t);

/* numpy.arange(start, stop, step) for doubles: its length, and element i
 * (numpy forms start, start + step, then start + i * (second - start)). */
int64_t rb_np_arange_len(double start, double stop, double step);
double rb_np_arange_at(double start, double step, int64_t i);
/* numpy.linspace(start, stop, num) element i (endpoint included). */
double rb_np_linspace_at(double start, double stop, int64_t num, int64_t i);

/* Timesteps of n steps by config spacing (descending):
 * float family (EulerDiscrete, EulerAncestral, Heun: as float32 values when
 * f32, DPMSolverSDE: float64), DDIM, DPMSolverMultistep (last_timestep from
 * lambda_min_clipped), LCM. RB_E_UNSUPPORTED when numpy would make a
 * schedule of another length. */
rb_status rb_sd_spacing_float(const rb_sd_sched_config *c, int n, int f32, double *ts, rb_error *err);
rb_status rb_sd_spacing_ddim(const rb_sd_sched_config *c, int n, int64_t *ts, rb_error *err);
rb_status rb_sd_spacing_dpm(const rb_sd_sched_config *c, int n, int last_timestep, int64_t *ts, rb_error *err);
rb_status rb_sd_spacing_lcm(const rb_sd_sched_config *c, int n, int64_t *ts, rb_error *err);

/* np.interp(x, arange(T), table) */
double rb_sd_interp(double x, const float *table, int T);
/* diffusers' _sigma_to_t: log-sigma interpolation of the training table. */
double rb_sd_sigma_to_t(double sigma, const rb_sd_train *t);
/* Karras rho=7 and exponential sigma ramps of n values, smax first. */
void rb_sd_sigmas_karras(double smin, double smax, int n, double *out);
void rb_sd_sigmas_exponential(double smin, double smax, int n, double *out);
/* ComfyUI's sgm_uniform and simple: n sigmas and their timesteps. */
void rb_sd_sigmas_sgm_uniform(const rb_sd_train *t, int n, double *sig, double *ts);
void rb_sd_sigmas_simple(const rb_sd_train *t, int n, double *sig, double *ts);

#endif

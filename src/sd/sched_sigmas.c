/* Sigma schedules over the training sigmas (include/rbee/sd_sampler.h):
 * numpy's interp at the spacing timesteps, diffusers' sigma -> timestep
 * inversion, the Karras (rho 7) and exponential ramps, and ComfyUI's
 * sgm_uniform and simple schedules, in float64 like the numpy / python code
 * that defines them. */
#include "sched_fp_contract.h"

#include "sched_internal.h"

#include <math.h>

double rb_sd_interp(double x, const float *table, int T) {
    if (isnan(x)) return x;
    if (x <= 0.0) return table[0];
    if (x >= (double)(T - 1)) return table[T - 1];
    int j = (int)floor(x);
    if ((double)j == x) return table[j];
    double slope = ((double)table[j + 1] - (double)table[j]) / 1.0;
    return slope * (x - (double)j) + (double)table[j];
}

/* log sigma between the two training steps that bracket it, linearly; the
 * bracket difference is taken in float32 as numpy does for the float32 table. */
double rb_sd_sigma_to_t(double sigma, const rb_sd_train *t) {
    const float *ls = t->log_sigmas;
    int T = t->T;
    double log_sigma = log(sigma > 1e-10 ? sigma : 1e-10);
    int low = -1;
    for (int j = 0; j < T; j++)
        if (log_sigma - (double)ls[j] >= 0.0) low = j; /* last step not above log_sigma */
    if (low < 0) low = 0;
    if (low > T - 2) low = T - 2;
    float lo = ls[low], hi = ls[low + 1];
    double w = ((double)lo - log_sigma) / (double)(lo - hi);
    if (w < 0.0) w = 0.0;
    if (w > 1.0) w = 1.0;
    return (1.0 - w) * low + w * (low + 1);
}

void rb_sd_sigmas_karras(double smin, double smax, int n, double *out) {
    const double rho = 7.0;
    double min_inv = pow(smin, 1.0 / rho), max_inv = pow(smax, 1.0 / rho);
    for (int i = 0; i < n; i++) {
        double ramp = rb_np_linspace_at(0.0, 1.0, n, i);
        out[i] = pow(max_inv + ramp * (min_inv - max_inv), rho);
    }
}

void rb_sd_sigmas_exponential(double smin, double smax, int n, double *out) {
    double a = log(smax), b = log(smin);
    for (int i = 0; i < n; i++) out[i] = exp(rb_np_linspace_at(a, b, n, i));
}

void rb_sd_sigmas_sgm_uniform(const rb_sd_train *t, int n, double *sig, double *ts) {
    int T = t->T;
    for (int i = 0; i < n; i++) {
        double tt = rb_np_linspace_at((double)(T - 1), 0.0, n + 1, i);
        int lo = (int)floor(tt), hi = (int)ceil(tt);
        double w = tt - lo;
        ts[i] = tt;
        sig[i] = exp((1.0 - w) * (double)t->log_sigmas[lo] + w * (double)t->log_sigmas[hi]);
    }
}

void rb_sd_sigmas_simple(const rb_sd_train *t, int n, double *sig, double *ts) {
    int T = t->T;
    double ss = (double)T / n;
    for (int i = 0; i < n; i++) {
        int idx = T - 1 - (int)((double)i * ss);
        ts[i] = idx;
        sig[i] = t->sigmas[idx];
    }
}

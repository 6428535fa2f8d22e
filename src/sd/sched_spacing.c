/* Timesteps of an n-step run by timestep_spacing, computed as diffusers
 * computes them with numpy (float64 arange / linspace, round half to even,
 * then the class's dtype): the float family (EulerDiscrete, EulerAncestral,
 * Heun, DPMSolverSDE), DDIM, DPMSolverMultistep (which spaces n+1 points)
 * and LCM (a subset of its distillation schedule). */
#include "sched_fp_contract.h"

#include "sched_internal.h"

#include <math.h>

int64_t rb_np_arange_len(double start, double stop, double step) {
    double len = ceil((stop - start) / step);
    return len > 0 ? (int64_t)len : 0;
}

double rb_np_arange_at(double start, double step, int64_t i) {
    if (i == 0) return start;
    double second = start + step;
    if (i == 1) return second;
    return start + (double)i * (second - start);
}

double rb_np_linspace_at(double start, double stop, int64_t num, int64_t i) {
    if (num > 1 && i == num - 1) return stop;
    if (num <= 1) return start;
    double step = (stop - start) / (double)(num - 1);
    return (double)i * step + start;
}

static rb_status bad_length(rb_error *err, int64_t got, int n) {
    return rb_error_set(err, RB_E_UNSUPPORTED, "trailing timestep spacing gives %lld timesteps for %d steps here",
                        (long long)got, n);
}

rb_status rb_sd_spacing_float(const rb_sd_sched_config *c, int n, int f32, double *ts, rb_error *err) {
    int T = c->num_train_timesteps;
    switch (c->timestep_spacing) {
    case RB_SD_SPACING_LINSPACE:
        for (int i = 0; i < n; i++) {
            double v = rb_np_linspace_at(0.0, (double)(T - 1), n, n - 1 - i);
            ts[i] = f32 ? (double)(float)v : v;
        }
        break;
    case RB_SD_SPACING_LEADING: {
        int ratio = T / n;
        for (int i = 0; i < n; i++) {
            double v = (double)(n - 1 - i) * ratio;
            ts[i] = f32 ? (double)((float)v + (float)c->steps_offset) : v + c->steps_offset;
        }
        break;
    }
    default: {
        double ratio = (double)T / n;
        int64_t len = rb_np_arange_len((double)T, 0.0, -ratio);
        if (len != n) return bad_length(err, len, n);
        for (int i = 0; i < n; i++) {
            double v = nearbyint(rb_np_arange_at((double)T, -ratio, i));
            ts[i] = f32 ? (double)((float)v - 1.0f) : v - 1.0;
        }
        break;
    }
    }
    return RB_OK;
}

rb_status rb_sd_spacing_ddim(const rb_sd_sched_config *c, int n, int64_t *ts, rb_error *err) {
    int T = c->num_train_timesteps;
    switch (c->timestep_spacing) {
    case RB_SD_SPACING_LINSPACE:
        for (int i = 0; i < n; i++) ts[i] = (int64_t)nearbyint(rb_np_linspace_at(0.0, (double)(T - 1), n, n - 1 - i));
        break;
    case RB_SD_SPACING_LEADING:
        for (int i = 0; i < n; i++) ts[i] = (int64_t)(n - 1 - i) * (T / n) + c->steps_offset;
        break;
    default: {
        double ratio = (double)T / n;
        int64_t len = rb_np_arange_len((double)T, 0.0, -ratio);
        if (len != n) return bad_length(err, len, n);
        for (int i = 0; i < n; i++) ts[i] = (int64_t)nearbyint(rb_np_arange_at((double)T, -ratio, i)) - 1;
        break;
    }
    }
    return RB_OK;
}

rb_status rb_sd_spacing_dpm(const rb_sd_sched_config *c, int n, int last, int64_t *ts, rb_error *err) {
    int T = c->num_train_timesteps;
    switch (c->timestep_spacing) {
    case RB_SD_SPACING_LINSPACE: /* n+1 points over [0, last-1], descending, the last (0) dropped */
        for (int i = 0; i < n; i++) ts[i] = (int64_t)nearbyint(rb_np_linspace_at(0.0, (double)(last - 1), n + 1, n - i));
        break;
    case RB_SD_SPACING_LEADING: {
        int ratio = last / (n + 1);
        for (int i = 0; i < n; i++) ts[i] = (int64_t)(n - i) * ratio + c->steps_offset;
        break;
    }
    default: {
        double ratio = (double)T / n;
        int64_t len = rb_np_arange_len((double)last, 0.0, -ratio);
        if (len != n) return bad_length(err, len, n);
        for (int i = 0; i < n; i++) ts[i] = (int64_t)nearbyint(rb_np_arange_at((double)last, -ratio, i)) - 1;
        break;
    }
    }
    return RB_OK;
}

rb_status rb_sd_spacing_lcm(const rb_sd_sched_config *c, int n, int64_t *ts, rb_error *err) {
    int T = c->num_train_timesteps, orig = c->original_inference_steps;
    int k = T / orig;
    /* the distillation schedule k*j - 1, j = 1..orig, descending; n of them at floor(i * orig / n) */
    if (orig / n < 1 || n > orig)
        return rb_error_set(err, RB_E_INVALID, "lcm: %d steps exceed original_inference_steps %d", n, orig);
    for (int i = 0; i < n; i++) {
        int64_t idx = (int64_t)floor(rb_np_linspace_at(0.0, (double)orig, n + 1, i)); /* endpoint=False */
        ts[i] = (int64_t)(orig - idx) * k - 1;
    }
    return RB_OK;
}

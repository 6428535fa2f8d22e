/* Samplers and schedules the diffusers fixtures do not cover (heun,
 * dpmpp_sde, dpmpp_2m without karras, euler_a with karras, the exponential,
 * sgm_uniform and simple schedules, every timestep spacing, v-prediction and
 * x0-prediction with each sampler, DDIM with eta > 0, img2img starts and the
 * inpainting blend of the variance-preserving samplers) against naive
 * double-precision implementations written here from the published
 * definitions: the training schedule (betas, alphabar, sigma), Karras et al.
 * 2022 eq. 5, the Euler / Heun steps of the probability-flow ODE, the
 * ancestral step, DPM-Solver++(2M) and the SDE variant of Lu et al. 2022 in
 * k-diffusion's sigma form, DDIM (Song et al. 2021 eq. 12) and LCM's
 * boundary condition. The denoiser is analytic: for data x0 ~ N(mu_i, 0.5^2)
 * per element the exact denoiser is D(x, sigma) = (0.25 x + sigma^2 mu_i) /
 * (0.25 + sigma^2), returned as epsilon, v or x0. Both sides evaluate it at
 * the reference's sigma, so only the samplers differ; each evaluation's
 * denoised estimate (rb_sd_sampler_x0, what previews show) must be the
 * analytic denoiser's own value. */
#include "testutil.h"

#include "rbee/sd_sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64
#define MAX_EVALS 64
#define MAX_DRAWS 80
#define T_TRAIN 1000
#define SD2 0.25 /* data variance */

/* ---------------------------------------------------------------- the reference */
typedef struct table {
    double sig[T_TRAIN], acp[T_TRAIN], logsig[T_TRAIN];
} table;

static void make_table(table *t, double b0, double b1) {
    double a = 1.0;
    for (int i = 0; i < T_TRAIN; i++) {
        double b = sqrt(b0) + (sqrt(b1) - sqrt(b0)) * i / (T_TRAIN - 1);
        a *= 1.0 - b * b;
        t->acp[i] = a;
        t->sig[i] = sqrt((1.0 - a) / a);
        t->logsig[i] = log(t->sig[i]);
    }
}

static double sig_at(const table *t, double ts) { /* linear in sigma between training steps */
    if (ts <= 0) return t->sig[0];
    if (ts >= T_TRAIN - 1) return t->sig[T_TRAIN - 1];
    int j = (int)floor(ts);
    return t->sig[j] + (t->sig[j + 1] - t->sig[j]) * (ts - j);
}

static double t_of_sigma(const table *t, double s) { /* inverse of the log-linear interpolation */
    double ls = log(s);
    if (ls <= t->logsig[0]) return 0;
    if (ls >= t->logsig[T_TRAIN - 1]) return T_TRAIN - 1;
    int j = 0;
    while (t->logsig[j + 1] < ls) j++;
    return j + (ls - t->logsig[j]) / (t->logsig[j + 1] - t->logsig[j]);
}

static double mu(int i) { return 0.8 * sin(0.37 * i + 0.2); }

/* the analytic model at VP input x_in and noise level sigma */
static double model(double x_in, double sigma, int i, rb_sd_prediction p) {
    double a = 1.0 / sqrt(sigma * sigma + 1.0), xve = x_in / a;
    double D = (SD2 * xve + sigma * sigma * mu(i)) / (SD2 + sigma * sigma);
    double eps = (xve - D) / sigma;
    if (p == RB_SD_PRED_EPSILON) return eps;
    if (p == RB_SD_PRED_V) return a * eps - sigma * a * D;
    return D;
}

/* x0 from a model output, the published conversions (x in sigma space) */
static double x0_of(double xve, double m, double sigma, rb_sd_prediction p) {
    double a = 1.0 / sqrt(sigma * sigma + 1.0);
    if (p == RB_SD_PRED_EPSILON) return xve - sigma * m;
    if (p == RB_SD_PRED_V) return a * (a * xve) - sigma * a * m;
    return m;
}

typedef struct plan {
    int n;                 /* steps */
    double sig[MAX_EVALS]; /* n + 1 (sigma samplers) */
    double ts[MAX_EVALS];  /* n */
    double init;    /* init_noise_sigma */
    double init_ve; /* the starting noise's factor in sigma space */
} plan;

typedef struct spec {
    rb_sd_sampler_kind kind;
    rb_sd_schedule schedule;
    rb_sd_spacing spacing;
    rb_sd_prediction pred;
    int steps;
    double eta;      /* < 0 default */
    double strength; /* 1 = txt2img */
    int inpaint;
} spec;

/* The documented schedule of include/rbee/sd_sampler.h, in double. */
static void make_plan(const spec *sp, const table *tb, plan *p) {
    int n = sp->steps, T = T_TRAIN, dpm = sp->kind == RB_SD_SAMPLER_DPMPP_2M;
    p->n = n;
    for (int i = 0; i < n; i++) {
        if (dpm) {
            if (sp->spacing == RB_SD_SPACING_LEADING) p->ts[i] = (n - i) * (T / (n + 1)) + 1;
            else if (sp->spacing == RB_SD_SPACING_LINSPACE) p->ts[i] = nearbyint((T - 1.0) * (n - i) / n);
            else p->ts[i] = nearbyint(T - i * (double)T / n) - 1;
        } else {
            if (sp->spacing == RB_SD_SPACING_LEADING) p->ts[i] = (n - 1 - i) * (T / n) + 1;
            else if (sp->spacing == RB_SD_SPACING_LINSPACE) p->ts[i] = n > 1 ? (T - 1.0) * (n - 1 - i) / (n - 1) : 0.0;
            else p->ts[i] = nearbyint(T - i * (double)T / n) - 1;
        }
        p->sig[i] = sig_at(tb, p->ts[i]);
    }
    double smin = dpm ? tb->sig[0] : p->sig[n - 1], smax = dpm ? tb->sig[T - 1] : p->sig[0];
    for (int i = 0; i < n; i++) {
        double r = n > 1 ? (double)i / (n - 1) : 0.0;
        switch (sp->schedule) {
        case RB_SD_SCHEDULE_KARRAS:
            p->sig[i] = pow(pow(smax, 1 / 7.0) + r * (pow(smin, 1 / 7.0) - pow(smax, 1 / 7.0)), 7.0);
            p->ts[i] = t_of_sigma(tb, p->sig[i]);
            if (dpm) p->ts[i] = nearbyint(p->ts[i]);
            break;
        case RB_SD_SCHEDULE_EXPONENTIAL:
            p->sig[i] = exp(log(smax) + r * (log(smin) - log(smax)));
            p->ts[i] = t_of_sigma(tb, p->sig[i]);
            if (dpm) p->ts[i] = trunc(p->ts[i]);
            break;
        case RB_SD_SCHEDULE_SGM_UNIFORM: {
            double tt = (T - 1.0) * (1.0 - (double)i / n);
            int lo = (int)floor(tt);
            double w = tt - lo;
            p->sig[i] = exp((1 - w) * tb->logsig[lo] + w * tb->logsig[lo + (w > 0)]);
            p->ts[i] = dpm ? trunc(tt) : tt;
            break;
        }
        case RB_SD_SCHEDULE_SIMPLE:
            p->ts[i] = T - 1 - floor(i * (double)T / n);
            p->sig[i] = tb->sig[(int)p->ts[i]];
            break;
        default: break;
        }
    }
    p->sig[n] = 0.0;
    p->init = dpm ? 1.0 : (sp->spacing == RB_SD_SPACING_LEADING ? sqrt(p->sig[0] * p->sig[0] + 1) : p->sig[0]);
    /* dpmpp_2m starts from unit noise in the variance-preserving space: sigma-space factor sqrt(sigma^2 + 1) */
    p->init_ve = dpm ? sqrt(p->sig[0] * p->sig[0] + 1) : p->init;
}

/* A run of evaluations: sigma of each (the model's input level), its
 * timestep, and the reference state after it (in the sampler's own space:
 * sigma space for the euler family, variance preserving for the others). */
typedef struct trace {
    int E;
    double sig_eval[MAX_EVALS], t_eval[MAX_EVALS], x_in[MAX_EVALS][N], state[MAX_EVALS][N];
    double noise[MAX_DRAWS][N];
    int draws;
} trace;

static void ancestral(double sf, double st, double eta, double *down, double *up) {
    *up = fmin(st, eta * sqrt(st * st * (sf * sf - st * st) / (sf * sf)));
    *down = sqrt(st * st - *up * *up);
}

/* image latents and mask for the img2img / inpaint cases */
static double img_lat(int i) { return 0.6 * cos(0.23 * i); }
static double mask_at(int i) { return (i % 16) < 8 ? 1.0 : 0.0; } /* per plane position, batch 1 */

/* noised image at sigma (sigma space) or alphabar (VP) */
static double noised_sigma(double sigma, double noise, int i) { return img_lat(i) + sigma * noise; }

static void reference_sigma_run(const spec *sp, const plan *p, trace *tr) {
    int n = p->n, E = 0;
    double eta = sp->eta >= 0 ? sp->eta : 1.0;
    double x[N], *z0 = tr->noise[0];
    int start = n - (int)fmin(floor(n * sp->strength), n);
    int vp = sp->kind == RB_SD_SAMPLER_DPMPP_2M;
    for (int i = 0; i < N; i++) x[i] = sp->strength < 1 ? noised_sigma(p->sig[start], z0[i], i) : z0[i] * p->init_ve;
    int next_draw = 1;
    double oldD[N], t_prev = 0;
    int have_old = 0;
#define EVAL(sigma_, tval_, xs_, m_)                                                                                   \
    do {                                                                                                               \
        tr->sig_eval[E] = sigma_;                                                                                      \
        tr->t_eval[E] = tval_;                                                                                         \
        double a_ = 1.0 / sqrt((sigma_) * (sigma_) + 1.0);                                                             \
        for (int q = 0; q < N; q++) {                                                                                  \
            tr->x_in[E][q] = (xs_)[q] * a_;                                                                            \
            (m_)[q] = model(tr->x_in[E][q], sigma_, q, sp->pred);                                                      \
        }                                                                                                              \
    } while (0)
#define RECORD(xs_, vp_sigma_)                                                                                         \
    do {                                                                                                               \
        double a_ = vp ? 1.0 / sqrt((vp_sigma_) * (vp_sigma_) + 1.0) : 1.0;                                            \
        for (int q = 0; q < N; q++) {                                                                                  \
            if (sp->inpaint && mask_at(q) == 0.0) {                                                                    \
                int last_ = E + 1 == tr->E;                                                                            \
                (xs_)[q] = last_ ? img_lat(q) : noised_sigma(vp_sigma_, z0[q], q);                                     \
            }                                                                                                          \
            tr->state[E][q] = (xs_)[q] * a_;                                                                           \
        }                                                                                                              \
        E++;                                                                                                           \
    } while (0)
    for (int i = start; i < n; i++) {
        double s = p->sig[i], sn = p->sig[i + 1], m[N], D[N];
        switch (sp->kind) {
        case RB_SD_SAMPLER_EULER:
            EVAL(s, p->ts[i], x, m);
            for (int q = 0; q < N; q++) {
                D[q] = x0_of(x[q], m[q], s, sp->pred);
                x[q] += (x[q] - D[q]) / s * (sn - s);
            }
            RECORD(x, sn);
            break;
        case RB_SD_SAMPLER_EULER_A: {
            EVAL(s, p->ts[i], x, m);
            double down, up;
            ancestral(s, sn, eta, &down, &up);
            double *z = tr->noise[next_draw++];
            for (int q = 0; q < N; q++) {
                D[q] = x0_of(x[q], m[q], s, sp->pred);
                x[q] += (x[q] - D[q]) / s * (down - s) + z[q] * up;
            }
            RECORD(x, sn);
            break;
        }
        case RB_SD_SAMPLER_HEUN: {
            double d[N], x2[N], m2[N];
            EVAL(s, p->ts[i], x, m);
            for (int q = 0; q < N; q++) {
                d[q] = (x[q] - x0_of(x[q], m[q], s, sp->pred)) / s;
                x2[q] = x[q] + d[q] * (sn - s);
            }
            RECORD(x2, sn);
            if (sn == 0) {
                memcpy(x, x2, sizeof x);
                break;
            }
            EVAL(sn, p->ts[i + 1], x2, m2);
            for (int q = 0; q < N; q++) {
                double d2 = (x2[q] - x0_of(x2[q], m2[q], sn, sp->pred)) / sn;
                x[q] += (d[q] + d2) / 2 * (sn - s);
            }
            RECORD(x, sn);
            break;
        }
        case RB_SD_SAMPLER_DPMPP_SDE: {
            EVAL(s, p->ts[i], x, m);
            for (int q = 0; q < N; q++) D[q] = x0_of(x[q], m[q], s, sp->pred);
            if (sn == 0) {
                for (int q = 0; q < N; q++) x[q] += (x[q] - D[q]) / s * (sn - s);
                RECORD(x, sn);
                break;
            }
            double t = -log(s), tn = -log(sn), smid = exp(-(t + (tn - t) / 2)), down, up, x2[N], m2[N];
            ancestral(s, smid, eta, &down, &up);
            double *z1 = tr->noise[next_draw++];
            for (int q = 0; q < N; q++) x2[q] = down / s * x[q] - expm1(t + log(down)) * D[q] + z1[q] * up;
            RECORD(x2, sn); /* the blend of diffusers' inpaint noises to the table's next sigma */
            EVAL(smid, tr->t_eval[E], x2, m2); /* its timestep: filled in by check_spec */
            ancestral(s, sn, eta, &down, &up);
            double *z2 = tr->noise[next_draw++];
            for (int q = 0; q < N; q++)
                x[q] = down / s * x[q] - expm1(t + log(down)) * x0_of(x2[q], m2[q], smid, sp->pred) + z2[q] * up;
            RECORD(x, sn);
            break;
        }
        default: { /* dpmpp_2m in sigma space (k-diffusion form) */
            EVAL(s, p->ts[i], x, m);
            for (int q = 0; q < N; q++) D[q] = x0_of(x[q], m[q], s, sp->pred);
            double t = -log(s);
            if (sn == 0) {
                memcpy(x, D, sizeof x);
            } else {
                double h = -log(sn) - t;
                double r = have_old ? (t - t_prev) / h : 0;
                for (int q = 0; q < N; q++) {
                    double Dd = have_old ? (1 + 1 / (2 * r)) * D[q] - 1 / (2 * r) * oldD[q] : D[q];
                    x[q] = sn / s * x[q] - expm1(-h) * Dd;
                }
            }
            memcpy(oldD, D, sizeof oldD);
            t_prev = t;
            have_old = 1;
            RECORD(x, sn);
            break;
        }
        }
    }
    tr->draws = next_draw;
    assert_int_equal(E, tr->E);
#undef EVAL
#undef RECORD
}

/* DDIM and LCM in the variance-preserving space */
static void reference_alpha_run(const spec *sp, const table *tb, trace *tr) {
    int n = sp->steps, T = T_TRAIN, lcm = sp->kind == RB_SD_SAMPLER_LCM;
    double ts[MAX_EVALS], eta = sp->eta >= 0 ? sp->eta : 0.0, x[N];
    for (int i = 0; i < n; i++) {
        if (lcm) ts[i] = (50 - floor(i * 50.0 / n)) * (T / 50) - 1;
        else if (sp->spacing == RB_SD_SPACING_LEADING) ts[i] = (n - 1 - i) * (T / n) + 1;
        else if (sp->spacing == RB_SD_SPACING_LINSPACE) ts[i] = nearbyint((T - 1.0) * (n - 1 - i) / (n - 1));
        else ts[i] = nearbyint(T - i * (double)T / n) - 1;
    }
    for (int q = 0; q < N; q++) x[q] = tr->noise[0][q];
    int next_draw = 1, E = 0;
    for (int i = 0; i < n; i++) {
        int t = (int)ts[i];
        double a = tb->acp[t], sig = sqrt((1 - a) / a);
        tr->sig_eval[E] = sig;
        tr->t_eval[E] = t;
        double ap;
        if (lcm) ap = tb->acp[i + 1 < n ? (int)ts[i + 1] : t];
        else ap = t - T / n >= 0 ? tb->acp[t - T / n] : tb->acp[0]; /* set_alpha_to_one false */
        double std = eta * sqrt((1 - ap) / (1 - a)) * sqrt(1 - a / ap);
        double st = 10.0 * t, c_skip = 0.25 / (st * st + 0.25), c_out = st / sqrt(st * st + 0.25);
        double *z = NULL;
        if ((!lcm && eta > 0) || (lcm && i != n - 1)) z = tr->noise[next_draw++];
        for (int q = 0; q < N; q++) {
            tr->x_in[E][q] = x[q];
            double m = model(x[q], sig, q, sp->pred), x0, eps;
            if (sp->pred == RB_SD_PRED_EPSILON) x0 = (x[q] - sqrt(1 - a) * m) / sqrt(a), eps = m;
            else if (sp->pred == RB_SD_PRED_V) x0 = sqrt(a) * x[q] - sqrt(1 - a) * m, eps = sqrt(a) * m + sqrt(1 - a) * x[q];
            else x0 = m, eps = (x[q] - sqrt(a) * m) / sqrt(1 - a);
            if (lcm) {
                double den = c_out * x0 + c_skip * x[q];
                x[q] = z ? sqrt(ap) * den + sqrt(1 - ap) * z[q] : den;
            } else {
                x[q] = sqrt(ap) * x0 + sqrt(1 - ap - std * std) * eps + (z ? std * z[q] : 0.0);
            }
            tr->state[E][q] = x[q];
        }
        E++;
    }
    tr->E = E;
    tr->draws = next_draw;
}

/* ---------------------------------------------------------------- the sampler under test */
typedef struct noise_feed {
    const trace *tr;
    int next;
} noise_feed;

static rb_status feed_noise(void *user, float *out, size_t n) {
    noise_feed *f = user;
    if (n != N || f->next >= MAX_DRAWS) return RB_E_RANGE;
    for (int i = 0; i < N; i++) out[i] = (float)f->tr->noise[f->next][i];
    f->next++;
    return RB_OK;
}

static double scaled_err_d(const float *a, const double *ref, int n) {
    double mx = 1.0, d = 0.0;
    for (int i = 0; i < n; i++) mx = fmax(mx, fabs(ref[i]));
    for (int i = 0; i < n; i++) d = fmax(d, fabs(a[i] - ref[i]));
    return d / mx;
}

static void config_for(const spec *sp, rb_sd_sched_config *c) {
    char json[512];
    static const char *const pred[] = {"epsilon", "v_prediction", "sample"};
    static const char *const spacing[] = {"leading", "trailing", "linspace"};
    snprintf(json, sizeof json,
             "{\"num_train_timesteps\": 1000, \"beta_start\": 0.00085, \"beta_end\": 0.012, "
             "\"beta_schedule\": \"scaled_linear\", \"prediction_type\": \"%s\", \"timestep_spacing\": \"%s\", "
             "\"steps_offset\": 1, \"set_alpha_to_one\": false, \"clip_sample\": false}",
             pred[sp->pred], spacing[sp->spacing]);
    rb_error err;
    if (rb_sd_sched_config_parse(c, json, strlen(json), &err) != RB_OK) fail_msg("%s", err.msg);
}

static const char *describe(const spec *sp, char *buf, size_t len) {
    static const char *const pred[] = {"eps", "v", "x0"};
    static const char *const spacing[] = {"leading", "trailing", "linspace"};
    snprintf(buf, len, "%s/%s/%s/%s/%d steps/eta %g/strength %g%s", rb_sd_sampler_kind_name(sp->kind),
             rb_sd_schedule_name(sp->schedule), spacing[sp->spacing], pred[sp->pred], sp->steps, sp->eta, sp->strength,
             sp->inpaint ? "/inpaint" : "");
    return buf;
}

/* Relative tolerance of a float32 training-table sigma against the double
 * one: diffusers forms 1 - alphabar in float32, which loses about 6e-8 /
 * (1 - alphabar) relative at small sigma (1 - alphabar = sigma^2 / (1 +
 * sigma^2)); half of that reaches sigma through the square root. */
static double sigma_tol(double sigma) {
    double one_minus = sigma * sigma / (1.0 + sigma * sigma);
    return 2e-6 + 0.5 * 1.2e-7 / one_minus;
}

/* Runs spec both ways and compares timesteps, model inputs and states. */
static double check_spec(const spec *sp) {
    static table tb;
    static int have_tb = 0;
    if (!have_tb) make_table(&tb, 0.00085, 0.012), have_tb = 1;
    char what[160];
    describe(sp, what, sizeof what);
    trace *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    tu_rng r;
    tu_rng_seed(&r, 1234 + (uint64_t)sp->kind * 7 + (uint64_t)sp->steps);
    for (int d = 0; d < MAX_DRAWS; d++)
        for (int i = 0; i < N; i++) tr->noise[d][i] = (double)tu_rng_normal(&r);
    plan p;
    memset(&p, 0, sizeof p);
    int alpha = sp->kind == RB_SD_SAMPLER_DDIM || sp->kind == RB_SD_SAMPLER_LCM;
    if (alpha) {
        reference_alpha_run(sp, &tb, tr);
    } else {
        make_plan(sp, &tb, &p);
        /* evaluation count first (the inpaint blend needs to know the last one) */
        int start = p.n - (int)fmin(floor(p.n * sp->strength), p.n);
        int order2 = sp->kind == RB_SD_SAMPLER_HEUN || sp->kind == RB_SD_SAMPLER_DPMPP_SDE;
        tr->E = order2 ? 2 * (p.n - start) - 1 : p.n - start;
        if (sp->kind == RB_SD_SAMPLER_DPMPP_SDE) { /* midpoint timesteps for the reference trace */
            for (int i = start; i + 1 < p.n; i++) {
                double smid = sqrt(p.sig[i] * p.sig[i + 1]);
                tr->t_eval[2 * (i - start) + 1] = t_of_sigma(&tb, smid);
            }
        }
        reference_sigma_run(sp, &p, tr);
    }

    rb_sd_sched_config cfg;
    config_for(sp, &cfg);
    rb_sd_sampler_opts o;
    rb_sd_sampler_opts_init(&o);
    o.kind = sp->kind;
    o.schedule = sp->schedule;
    o.steps = sp->steps;
    o.eta = sp->eta;
    o.strength = sp->strength;
    o.n = N;
    noise_feed nf = {tr, 1};
    o.noise = feed_noise;
    o.noise_user = &nf;
    rb_sd_sampler *s = NULL;
    rb_error err;
    if (rb_sd_sampler_create(&cfg, &o, &s, &err) != RB_OK) fail_msg("%s: %s", what, err.msg);
    assert_int_equal(rb_sd_sampler_n_evals(s), tr->E);
    if (!alpha && fabs(rb_sd_sampler_init_noise_sigma(s) - p.init) > sigma_tol(p.sig[0]) * p.init)
        fail_msg("%s: init_noise_sigma %.9g, reference %.9g", what, rb_sd_sampler_init_noise_sigma(s), p.init);
    if (!alpha) { /* the sigma table of every evaluation */
        int cnt;
        const float *sg = rb_sd_sampler_sigmas(s, &cnt);
        assert_int_equal(cnt, tr->E + rb_sd_sampler_first_eval(s) + 1);
        for (int k = 0; k < tr->E; k++) {
            double ref = tr->sig_eval[k];
            if (sp->kind == RB_SD_SAMPLER_DPMPP_SDE && k % 2 == 1) continue; /* midpoints are not in the table */
            double got = sg[rb_sd_sampler_first_eval(s) + k];
            /* a karras / exponential ramp carries its end point's error into every sigma */
            double tol = sigma_tol(ref);
            if (sp->schedule == RB_SD_SCHEDULE_KARRAS || sp->schedule == RB_SD_SCHEDULE_EXPONENTIAL)
                tol += sigma_tol(p.sig[p.n - 1]);
            if (fabs(got - ref) > tol * ref) fail_msg("%s: sigma %d %.9g, reference %.9g", what, k, got, ref);
        }
    }
    float z0[N], img[N], mask[16];
    for (int i = 0; i < N; i++) z0[i] = (float)tr->noise[0][i], img[i] = (float)img_lat(i);
    for (int i = 0; i < 16; i++) mask[i] = (float)mask_at(i);
    TU_OK(rb_sd_sampler_begin(s, sp->strength < 1 ? img : NULL, z0, &err));
    if (sp->inpaint) TU_OK(rb_sd_sampler_set_inpaint(s, img, mask, 1, 4, &err));
    float in[N], out[N], t;
    double worst = 0;
    int e = 0;
    while (rb_sd_sampler_next(s, in, &t)) {
        assert_true(e < tr->E);
        double te = tr->t_eval[e];
        /* integer timesteps: ddim, lcm, dpmpp_2m, and the leading / trailing / simple
         * schedules; the others are log-sigma inversions, compared to 2e-3 */
        int integer_t = alpha || sp->kind == RB_SD_SAMPLER_DPMPP_2M || sp->schedule == RB_SD_SCHEDULE_SIMPLE ||
                        (sp->schedule == RB_SD_SCHEDULE_DEFAULT && sp->spacing != RB_SD_SPACING_LINSPACE);
        if (sp->kind == RB_SD_SAMPLER_DPMPP_SDE && e % 2 == 1) integer_t = 0; /* midpoints */
        /* dpmpp_2m truncates non-karras inversions to int64 as diffusers does: a value
         * a hair below an integer there is the integer below */
        int truncated = sp->kind == RB_SD_SAMPLER_DPMPP_2M && (sp->schedule == RB_SD_SCHEDULE_EXPONENTIAL ||
                                                              sp->schedule == RB_SD_SCHEDULE_SGM_UNIFORM);
        if (truncated && t == (float)(te - 1) && fabs(te - nearbyint(te)) < 1e-9) te -= 1;
        if (integer_t ? t != (float)te : fabs(t - te) > 2e-3)
            fail_msg("%s: eval %d timestep %.6f, reference %.6f", what, e, t, te);
        double ein = scaled_err_d(in, tr->x_in[e], N);
        if (ein > 1e-5) fail_msg("%s: eval %d model input off by %.3g", what, e, ein);
        for (int i = 0; i < N; i++) out[i] = (float)model(in[i], tr->sig_eval[e], i, sp->pred);
        /* the denoised estimate of this output: the analytic denoiser's own x0 */
        float x0[N];
        double x0_ref[N];
        TU_OK(rb_sd_sampler_x0(s, out, x0, &err));
        for (int i = 0; i < N; i++) x0_ref[i] = model(in[i], tr->sig_eval[e], i, RB_SD_PRED_SAMPLE);
        double ex0 = scaled_err_d(x0, x0_ref, N);
        if (ex0 > 1e-4) fail_msg("%s: eval %d denoised estimate off by %.3g", what, e, ex0);
        if (rb_sd_sampler_feed(s, out, &err) != RB_OK) fail_msg("%s: %s", what, err.msg);
        assert_int_equal(rb_sd_sampler_x0(s, out, x0, &err), RB_E_INVALID); /* nothing pending after a feed */
        double es = scaled_err_d(rb_sd_sampler_latents(s), tr->state[e], N);
        worst = fmax(worst, es);
        if (es > 2e-5) fail_msg("%s: eval %d state off by %.3g", what, e, es);
        e++;
    }
    assert_int_equal(e, tr->E);
    assert_true(rb_sd_sampler_finished(s));
    assert_int_equal(nf.next, tr->draws); /* same number of noise draws, consumed in order */
    rb_sd_sampler_free(s);
    free(tr);
    return worst;
}

static void run_specs(const spec *specs, size_t count) {
    for (size_t i = 0; i < count; i++) {
        char what[160];
        double w = check_spec(&specs[i]);
        printf("  %-62s max scaled error %.2e\n", describe(&specs[i], what, sizeof what), w);
    }
}

#define S(kind, sched, spacing, pred, steps, eta, strength, inp)                                                       \
    { RB_SD_SAMPLER_##kind, RB_SD_SCHEDULE_##sched, RB_SD_SPACING_##spacing, RB_SD_PRED_##pred, steps, eta, strength, inp }

static void test_euler_schedules(void **state) {
    (void)state;
    static const spec specs[] = {
        S(EULER, DEFAULT, LEADING, EPSILON, 6, -1, 1, 0),      S(EULER, DEFAULT, TRAILING, EPSILON, 6, -1, 1, 0),
        S(EULER, DEFAULT, LINSPACE, EPSILON, 7, -1, 1, 0),     S(EULER, KARRAS, LEADING, EPSILON, 8, -1, 1, 0),
        S(EULER, KARRAS, TRAILING, V, 8, -1, 1, 0),            S(EULER, EXPONENTIAL, LINSPACE, EPSILON, 6, -1, 1, 0),
        S(EULER, SGM_UNIFORM, TRAILING, EPSILON, 5, -1, 1, 0), S(EULER, SIMPLE, TRAILING, V, 6, -1, 1, 0),
        S(EULER, DEFAULT, TRAILING, V, 5, -1, 1, 0),           S(EULER, DEFAULT, LEADING, SAMPLE, 5, -1, 1, 0),
        S(EULER, KARRAS, TRAILING, EPSILON, 10, -1, 0.6, 0),   S(EULER, DEFAULT, LINSPACE, EPSILON, 1, -1, 1, 0),
    };
    run_specs(specs, sizeof specs / sizeof specs[0]);
}

static void test_euler_ancestral(void **state) {
    (void)state;
    static const spec specs[] = {
        S(EULER_A, DEFAULT, TRAILING, EPSILON, 6, -1, 1, 0), S(EULER_A, KARRAS, TRAILING, EPSILON, 6, -1, 1, 0),
        S(EULER_A, KARRAS, LEADING, V, 6, -1, 1, 0),         S(EULER_A, DEFAULT, LINSPACE, V, 5, 0.5, 1, 0),
        S(EULER_A, SIMPLE, TRAILING, EPSILON, 4, 0.0, 1, 0), S(EULER_A, EXPONENTIAL, TRAILING, SAMPLE, 4, -1, 1, 0),
    };
    run_specs(specs, sizeof specs / sizeof specs[0]);
}

static void test_heun(void **state) {
    (void)state;
    static const spec specs[] = {
        S(HEUN, DEFAULT, TRAILING, EPSILON, 5, -1, 1, 0), S(HEUN, DEFAULT, LINSPACE, V, 4, -1, 1, 0),
        S(HEUN, KARRAS, TRAILING, EPSILON, 6, -1, 1, 0),  S(HEUN, KARRAS, LEADING, V, 5, -1, 1, 0),
        S(HEUN, SGM_UNIFORM, TRAILING, SAMPLE, 4, -1, 1, 0), S(HEUN, DEFAULT, TRAILING, EPSILON, 6, -1, 0.5, 0),
        S(HEUN, DEFAULT, TRAILING, EPSILON, 5, -1, 1, 1),
    };
    run_specs(specs, sizeof specs / sizeof specs[0]);
}

static void test_dpmpp_2m(void **state) {
    (void)state;
    static const spec specs[] = {
        S(DPMPP_2M, DEFAULT, LEADING, EPSILON, 6, -1, 1, 0),   S(DPMPP_2M, DEFAULT, TRAILING, V, 6, -1, 1, 0),
        S(DPMPP_2M, DEFAULT, LINSPACE, EPSILON, 7, -1, 1, 0),  S(DPMPP_2M, KARRAS, LEADING, V, 8, -1, 1, 0),
        S(DPMPP_2M, EXPONENTIAL, LEADING, EPSILON, 6, -1, 1, 0), S(DPMPP_2M, SGM_UNIFORM, TRAILING, EPSILON, 5, -1, 1, 0),
        S(DPMPP_2M, SIMPLE, TRAILING, SAMPLE, 5, -1, 1, 0),    S(DPMPP_2M, KARRAS, LEADING, EPSILON, 10, -1, 0.7, 0),
        S(DPMPP_2M, DEFAULT, TRAILING, EPSILON, 6, -1, 1, 1),
    };
    run_specs(specs, sizeof specs / sizeof specs[0]);
}

static void test_dpmpp_sde(void **state) {
    (void)state;
    static const spec specs[] = {
        S(DPMPP_SDE, DEFAULT, TRAILING, EPSILON, 5, -1, 1, 0), S(DPMPP_SDE, KARRAS, LEADING, EPSILON, 5, -1, 1, 0),
        S(DPMPP_SDE, KARRAS, TRAILING, V, 6, -1, 1, 0),        S(DPMPP_SDE, DEFAULT, LINSPACE, V, 4, 0.5, 1, 0),
        S(DPMPP_SDE, EXPONENTIAL, TRAILING, SAMPLE, 4, -1, 1, 0),
    };
    run_specs(specs, sizeof specs / sizeof specs[0]);
}

static void test_ddim_lcm(void **state) {
    (void)state;
    static const spec specs[] = {
        S(DDIM, DEFAULT, LEADING, EPSILON, 5, 0.0, 1, 0),  S(DDIM, DEFAULT, LEADING, EPSILON, 5, 0.5, 1, 0),
        S(DDIM, DEFAULT, TRAILING, V, 6, 1.0, 1, 0),       S(DDIM, DEFAULT, LINSPACE, V, 6, 0.3, 1, 0),
        S(DDIM, DEFAULT, TRAILING, SAMPLE, 4, 0.0, 1, 0),  S(LCM, DEFAULT, LEADING, EPSILON, 4, -1, 1, 0),
        S(LCM, DEFAULT, LEADING, V, 6, -1, 1, 0),          S(LCM, DEFAULT, LEADING, SAMPLE, 3, -1, 1, 0),
    };
    run_specs(specs, sizeof specs / sizeof specs[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_euler_schedules), cmocka_unit_test(test_euler_ancestral), cmocka_unit_test(test_heun),
        cmocka_unit_test(test_dpmpp_2m),        cmocka_unit_test(test_dpmpp_sde),        cmocka_unit_test(test_ddim_lcm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The sampler object of include/rbee/sd_sampler.h: option checks, buffers,
 * the begin / next / feed state machine shared by all samplers, the
 * inpainting blend after each update, progress and schedule accessors, and
 * classifier-free guidance. The per-sampler arithmetic is in sampler_*.c. */
#include "sched_fp_contract.h"

#include "sampler_internal.h"
#include "sched_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void rb_sd_sampler_opts_init(rb_sd_sampler_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->kind = RB_SD_SAMPLER_EULER;
    o->schedule = RB_SD_SCHEDULE_DEFAULT;
    o->steps = 20;
    o->strength = 1.0;
    o->eta = -1.0;
}

static const rb_sd_sampler_ops *ops_for(rb_sd_sampler_kind k) {
    switch (k) {
    case RB_SD_SAMPLER_EULER: return &rb_sd_ops_euler;
    case RB_SD_SAMPLER_EULER_A: return &rb_sd_ops_euler_a;
    case RB_SD_SAMPLER_HEUN: return &rb_sd_ops_heun;
    case RB_SD_SAMPLER_DPMPP_2M: return &rb_sd_ops_dpmpp_2m;
    case RB_SD_SAMPLER_DPMPP_SDE: return &rb_sd_ops_dpmpp_sde;
    case RB_SD_SAMPLER_DDIM: return &rb_sd_ops_ddim;
    case RB_SD_SAMPLER_FLOW_EULER: return &rb_sd_ops_flow_euler;
    default: return &rb_sd_ops_lcm;
    }
}

void rb_sd_sampler_free(rb_sd_sampler *s) {
    if (!s) return;
    free(s->timesteps);
    free(s->sigmas);
    free(s->t_int);
    free(s->acp);
    free(s->x);
    free(s->noise0);
    free(s->w1);
    free(s->w2);
    free(s->w3);
    free(s->inp_image);
    free(s->inp_mask);
    free(s);
}

static rb_status check_opts(const rb_sd_sampler_opts *o, rb_error *err) {
    if ((int)o->kind < 0 || o->kind >= RB_SD_SAMPLER_COUNT_)
        return rb_error_set(err, RB_E_INVALID, "sampler: unknown sampler %d", (int)o->kind);
    if ((int)o->schedule < 0 || o->schedule >= RB_SD_SCHEDULE_COUNT_)
        return rb_error_set(err, RB_E_INVALID, "sampler: unknown schedule %d", (int)o->schedule);
    if (o->n == 0 || o->n > SIZE_MAX / (8 * sizeof(float)))
        return rb_error_set(err, RB_E_INVALID, "sampler: latent size %zu", o->n);
    if (o->steps < 1) return rb_error_set(err, RB_E_INVALID, "sampler: steps must be at least 1 (got %d)", o->steps);
    if (!(o->strength > 0.0 && o->strength <= 1.0))
        return rb_error_set(err, RB_E_INVALID, "sampler: strength %g is outside (0, 1]", o->strength);
    if (isnan(o->eta) || isinf(o->eta)) return rb_error_set(err, RB_E_INVALID, "sampler: eta must be finite");
    if ((o->kind == RB_SD_SAMPLER_DDIM || o->kind == RB_SD_SAMPLER_LCM || o->kind == RB_SD_SAMPLER_FLOW_EULER) &&
        o->schedule != RB_SD_SCHEDULE_DEFAULT)
        return rb_error_set(err, RB_E_UNSUPPORTED, "sampler %s takes only the default schedule, not %s",
                            rb_sd_sampler_kind_name(o->kind), rb_sd_schedule_name(o->schedule));
    return RB_OK;
}

rb_status rb_sd_sampler_create(const rb_sd_sched_config *cfg, const rb_sd_sampler_opts *o, rb_sd_sampler **out,
                               rb_error *err) {
    if (!cfg || !o || !out) return rb_error_set(err, RB_E_INVALID, "sampler: NULL argument");
    *out = NULL;
    rb_status st = check_opts(o, err);
    if (st != RB_OK) return st;
    rb_sd_sampler *s = calloc(1, sizeof *s);
    if (!s) return rb_error_set(err, RB_E_NOMEM, "sampler: out of memory");
    s->kind = o->kind;
    s->schedule = o->schedule;
    rb_sd_config_resolve(cfg, o->kind, &s->cfg);
    st = rb_sd_config_check(&s->cfg, err);
    if (st != RB_OK) goto fail;
    int T = s->cfg.num_train_timesteps;
    if (o->steps > T) {
        st = rb_error_set(err, RB_E_INVALID, "sampler: %d steps exceed num_train_timesteps %d", o->steps, T);
        goto fail;
    }
    s->ops = ops_for(o->kind);
    s->n = o->n;
    s->steps = o->steps;
    s->order = (o->kind == RB_SD_SAMPLER_HEUN || o->kind == RB_SD_SAMPLER_DPMPP_SDE) ? 2 : 1;
    s->eta = (float)(o->eta >= 0.0 ? o->eta : (o->kind == RB_SD_SAMPLER_DDIM ? 0.0 : 1.0));
    s->noise = o->noise;
    s->noise_user = o->noise_user;
    s->raw_in = o->raw_model_input;
    st = rb_sd_sampler_schedule(s, err);
    if (st != RB_OK) goto fail;
    /* diffusers' get_timesteps: the run starts t_start steps in */
    int init = (int)((double)s->steps * o->strength);
    if (init > s->steps) init = s->steps;
    int t_start = s->steps - init;
    if (t_start < 0) t_start = 0;
    if (s->kind == RB_SD_SAMPLER_FLOW_EULER) { /* StableDiffusion3Img2ImgPipeline: no int() before the subtraction */
        const double fi = fmin((double)s->steps * o->strength, (double)s->steps);
        t_start = (int)fmax((double)s->steps - fi, 0.0);
        init = s->steps - t_start;
    }
    s->begin = t_start * s->order;
    if (init < 1 || s->begin >= s->E) {
        st = rb_error_set(err, RB_E_RANGE, "sampler: strength %g with %d steps leaves no denoising step", o->strength,
                          s->steps);
        goto fail;
    }
    int draws = s->kind == RB_SD_SAMPLER_EULER_A || s->kind == RB_SD_SAMPLER_DPMPP_SDE ||
                (s->kind == RB_SD_SAMPLER_DDIM && s->eta > 0.0f) || (s->kind == RB_SD_SAMPLER_LCM && s->E - s->begin > 1);
    if (draws && !s->noise) {
        st = rb_error_set(err, RB_E_INVALID, "sampler %s draws noise during the run: give a noise callback",
                          rb_sd_sampler_kind_name(s->kind));
        goto fail;
    }
    size_t bytes = s->n * sizeof(float);
    s->x = malloc(bytes), s->noise0 = malloc(bytes);
    s->w1 = malloc(bytes), s->w2 = malloc(bytes), s->w3 = malloc(bytes);
    if (!s->x || !s->noise0 || !s->w1 || !s->w2 || !s->w3) {
        st = rb_error_set(err, RB_E_NOMEM, "sampler: out of memory for %zu latent values", s->n);
        goto fail;
    }
    memset(s->x, 0, bytes);
    s->phase = RB_SD_PHASE_NEW;
    *out = s;
    return RB_OK;
fail:
    rb_sd_sampler_free(s);
    return st;
}

rb_status rb_sd_sampler_draw(rb_sd_sampler *s, float *out, rb_error *err) {
    if (!s->noise) return rb_error_set(err, RB_E_INVALID, "sampler: noise needed but no noise callback");
    rb_status st = s->noise(s->noise_user, out, s->n);
    if (st != RB_OK) return rb_error_set(err, st, "sampler: the noise callback failed (%s)", rb_status_str(st));
    return RB_OK;
}

rb_status rb_sd_sampler_begin(rb_sd_sampler *s, const float *image_latents, const float *noise, rb_error *err) {
    if (!s) return rb_error_set(err, RB_E_INVALID, "sampler: NULL sampler");
    if (!image_latents && s->begin > 0)
        return rb_error_set(err, RB_E_INVALID, "sampler: strength below 1 needs the image latents");
    if (noise) memcpy(s->noise0, noise, s->n * sizeof(float));
    else {
        rb_status st = rb_sd_sampler_draw(s, s->noise0, err);
        if (st != RB_OK) return st;
    }
    if (image_latents) s->ops->add_noise(s, s->begin, image_latents, s->noise0, s->x);
    else
        for (size_t i = 0; i < s->n; i++) s->x[i] = s->raw_in ? s->noise0[i] : s->noise0[i] * s->init_noise_sigma;
    s->k = s->begin;
    s->has_history = 0;
    s->lower_order_nums = 0;
    s->saved_dt = 0.0f;
    s->mid_sigma = 0.0f;
    s->phase = RB_SD_PHASE_READY;
    return RB_OK;
}

rb_status rb_sd_sampler_set_inpaint(rb_sd_sampler *s, const float *image_latents, const float *mask, size_t batch,
                                    size_t channels, rb_error *err) {
    if (!s || !image_latents || !mask) return rb_error_set(err, RB_E_INVALID, "inpaint: NULL argument");
    if (batch == 0 || channels == 0 || batch > s->n || channels > s->n / batch || s->n % (batch * channels) != 0)
        return rb_error_set(err, RB_E_INVALID, "inpaint: %zu latent values are not %zu x %zu x h x w", s->n, batch,
                            channels);
    if (s->phase != RB_SD_PHASE_NEW && !(s->phase == RB_SD_PHASE_READY && s->k == s->begin))
        return rb_error_set(err, RB_E_INVALID, "inpaint: set before the first model evaluation is fed");
    size_t hw = s->n / (batch * channels);
    if (!s->inp_image) s->inp_image = malloc(s->n * sizeof(float));
    if (!s->inp_mask) s->inp_mask = malloc(s->n * sizeof(float));
    if (!s->inp_image || !s->inp_mask) return rb_error_set(err, RB_E_NOMEM, "inpaint: out of memory");
    memcpy(s->inp_image, image_latents, s->n * sizeof(float));
    for (size_t i = 0; i < s->n; i++) {
        float m = mask[(i / (channels * hw)) * hw + i % hw];
        if (!(m >= 0.0f && m <= 1.0f)) return rb_error_set(err, RB_E_RANGE, "inpaint: mask value %g is outside [0, 1]", m);
        s->inp_mask[i] = m;
    }
    return RB_OK;
}

bool rb_sd_sampler_next(rb_sd_sampler *s, float *model_in, float *timestep) {
    if (!s || !model_in || !timestep) return false;
    if (s->phase != RB_SD_PHASE_READY && s->phase != RB_SD_PHASE_WAIT_FEED) return false;
    if (s->raw_in) memcpy(model_in, s->x, s->n * sizeof(float));
    else s->ops->scale_in(s, s->k, s->x, model_in);
    *timestep = s->timesteps[s->k];
    s->phase = RB_SD_PHASE_WAIT_FEED;
    return true;
}

/* latents = (1 - mask) * image noised to evaluation k + mask * latents */
static void inpaint_blend(rb_sd_sampler *s, int k) {
    float *proper = s->w3;
    if (k < s->E) s->ops->add_noise(s, k, s->inp_image, s->noise0, proper);
    else memcpy(proper, s->inp_image, s->n * sizeof(float));
    for (size_t i = 0; i < s->n; i++) {
        float m = s->inp_mask[i];
        s->x[i] = (1.0f - m) * proper[i] + m * s->x[i];
    }
}

rb_status rb_sd_sampler_feed(rb_sd_sampler *s, const float *model_out, rb_error *err) {
    if (!s || !model_out) return rb_error_set(err, RB_E_INVALID, "sampler: NULL argument");
    if (s->phase != RB_SD_PHASE_WAIT_FEED)
        return rb_error_set(err, RB_E_INVALID, "sampler: no model evaluation is pending (call rb_sd_sampler_next)");
    rb_status st = s->ops->step(s, s->k, model_out, err);
    if (st != RB_OK) return st;
    if (s->inp_image) inpaint_blend(s, s->k + 1);
    s->k++;
    s->phase = s->k >= s->E ? RB_SD_PHASE_DONE : RB_SD_PHASE_READY;
    for (size_t i = 0; i < s->n; i++) {
        if (!isfinite(s->x[i])) {
            s->phase = RB_SD_PHASE_DONE;
            return rb_error_set(err, RB_E_RANGE, "sampler: latents became non-finite at evaluation %d", s->k - 1);
        }
    }
    return RB_OK;
}

rb_status rb_sd_sampler_x0(const rb_sd_sampler *s, const float *model_out, float *x0, rb_error *err) {
    if (!s || !model_out || !x0) return rb_error_set(err, RB_E_INVALID, "sampler: NULL argument");
    if (s->phase != RB_SD_PHASE_WAIT_FEED)
        return rb_error_set(err, RB_E_INVALID, "sampler: no model evaluation is pending (call rb_sd_sampler_next)");
    const int k = s->k;
    if (s->kind == RB_SD_SAMPLER_FLOW_EULER) { /* x0 = x - sigma v */
        for (size_t i = 0; i < s->n; i++) x0[i] = s->x[i] - s->sigmas[k] * model_out[i];
        return RB_OK;
    }
    double abar;
    if (s->sigmas) { /* the sigma the evaluation's input was scaled with (dpmpp_sde: its midpoint) */
        const double sg = s->kind == RB_SD_SAMPLER_DPMPP_SDE && s->has_history ? s->mid_sigma : s->sigmas[k];
        abar = 1.0 / (sg * sg + 1.0);
    } else {
        abar = s->acp[s->t_int[k]];
    }
    const float a = (float)sqrt(abar), b = (float)sqrt(1.0 - abar);
    s->ops->scale_in(s, k, s->x, x0); /* x_t */
    switch (s->cfg.prediction_type) {
    case RB_SD_PRED_V:
        for (size_t i = 0; i < s->n; i++) x0[i] = a * x0[i] - b * model_out[i];
        break;
    case RB_SD_PRED_SAMPLE: memcpy(x0, model_out, s->n * sizeof(float)); break;
    default:
        for (size_t i = 0; i < s->n; i++) x0[i] = (x0[i] - b * model_out[i]) / a;
        break;
    }
    return RB_OK;
}

const float *rb_sd_sampler_latents(const rb_sd_sampler *s) { return s ? s->x : NULL; }
bool rb_sd_sampler_finished(const rb_sd_sampler *s) { return s && s->phase == RB_SD_PHASE_DONE; }
int rb_sd_sampler_n_evals(const rb_sd_sampler *s) { return s ? s->E - s->begin : 0; }

int rb_sd_sampler_evals_done(const rb_sd_sampler *s) {
    if (!s || s->phase == RB_SD_PHASE_NEW) return 0;
    return s->k - s->begin;
}

int rb_sd_sampler_n_steps(const rb_sd_sampler *s) { return s ? s->steps - s->begin / s->order : 0; }

int rb_sd_sampler_steps_done(const rb_sd_sampler *s) {
    if (!s) return 0;
    int done = rb_sd_sampler_evals_done(s);
    if (s->order == 1) return done;
    if (done >= rb_sd_sampler_n_evals(s)) return rb_sd_sampler_n_steps(s);
    return done / 2; /* a step completes with its second evaluation */
}

const float *rb_sd_sampler_timesteps(const rb_sd_sampler *s, int *count) {
    if (count) *count = s ? s->E : 0;
    return s ? s->timesteps : NULL;
}

const float *rb_sd_sampler_sigmas(const rb_sd_sampler *s, int *count) {
    if (count) *count = s && s->sigmas ? s->E + 1 : 0;
    return s ? s->sigmas : NULL;
}

int rb_sd_sampler_first_eval(const rb_sd_sampler *s) { return s ? s->begin : 0; }
float rb_sd_sampler_init_noise_sigma(const rb_sd_sampler *s) { return s ? s->init_noise_sigma : 0.0f; }

void rb_sd_cfg_guidance(float *out, const float *uncond, const float *cond, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) {
        float u = uncond[i];
        out[i] = u + scale * (cond[i] - u);
    }
}

/* ---------------------------------------------------------------- shared arithmetic */
void rb_sd_scale_by_sigma(float sigma, const float *x, float *out, size_t n) {
    float d = sqrtf(sigma * sigma + 1.0f);
    for (size_t i = 0; i < n; i++) out[i] = x[i] / d;
}

void rb_sd_add_noise_sigma(float sigma, const float *img, const float *noise, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = img[i] + noise[i] * sigma;
}

void rb_sd_add_noise_acp(float acp, const float *img, const float *noise, float *out, size_t n) {
    float a = sqrtf(acp), b = sqrtf(1.0f - acp);
    for (size_t i = 0; i < n; i++) out[i] = a * img[i] + b * noise[i];
}

void rb_sd_x0_sigma(rb_sd_prediction p, float sigma, const float *x, const float *m, float *x0, size_t n) {
    if (p == RB_SD_PRED_EPSILON) {
        for (size_t i = 0; i < n; i++) x0[i] = x[i] - sigma * m[i];
    } else if (p == RB_SD_PRED_V) {
        float c2 = sigma * sigma + 1.0f;
        float c_out = -sigma / sqrtf(c2);
        for (size_t i = 0; i < n; i++) x0[i] = m[i] * c_out + x[i] / c2;
    } else {
        memcpy(x0, m, n * sizeof(float));
    }
}

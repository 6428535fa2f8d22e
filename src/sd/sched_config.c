/* Scheduler configuration (include/rbee/sd_sampler.h): parsing diffusers'
 * scheduler_config.json into rb_sd_sched_config with its "given" bits,
 * range and consistency checks, and the published configs of the model
 * families for checkpoints that carry none. */
#include "sched_internal.h"
#include "sched_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void rb_sd_sched_config_init(rb_sd_sched_config *c) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    /* placeholders only: every field is "not given" until set */
    c->num_train_timesteps = 1000;
    c->beta_start = 0.0001;
    c->beta_end = 0.02;
    c->clip_sample_range = 1.0;
    c->lambda_min_clipped = -INFINITY;
    c->lower_order_final = true;
    c->original_inference_steps = 50;
    c->timestep_scaling = 10.0;
    c->shift = 1.0;
}

/* ---------------------------------------------------------------- key readers */
typedef struct parse_ctx {
    rb_sd_sched_config *c;
    json_t *root;
    json_t *defaults; /* "_use_default_values" */
    rb_error *err;
} parse_ctx;

/* The value of key if given (present, not null, not listed as a default). */
static json_t *given(const parse_ctx *p, const char *key) {
    json_t *v = json_object_get(p->root, key);
    if (!v || json_is_null(v)) return NULL;
    size_t i;
    json_t *d;
    json_array_foreach(p->defaults, i, d) {
        if (json_is_string(d) && strcmp(json_string_value(d), key) == 0) return NULL;
    }
    return v;
}

static rb_status get_bool(const parse_ctx *p, const char *key, bool *out, uint32_t bit) {
    json_t *v = given(p, key);
    if (!v) return RB_OK;
    if (!json_is_boolean(v)) return rb_error_set(p->err, RB_E_FORMAT, "scheduler config: %s must be true or false", key);
    *out = json_is_true(v);
    p->c->set |= bit;
    return RB_OK;
}

static rb_status get_num(const parse_ctx *p, const char *key, double *out, uint32_t bit) {
    json_t *v = given(p, key);
    if (!v) return RB_OK;
    double d;
    if (!rb_sched_json_number(v, &d) || isnan(d))
        return rb_error_set(p->err, RB_E_FORMAT, "scheduler config: %s must be a number", key);
    *out = d;
    p->c->set |= bit;
    return RB_OK;
}

static rb_status get_int(const parse_ctx *p, const char *key, int lo, int hi, int *out, uint32_t bit) {
    json_t *v = given(p, key);
    if (!v) return RB_OK;
    double d;
    if (!rb_sched_json_number(v, &d) || d != floor(d) || d < lo || d > hi)
        return rb_error_set(p->err, RB_E_FORMAT, "scheduler config: %s must be an integer in [%d, %d]", key, lo, hi);
    *out = (int)d;
    p->c->set |= bit;
    return RB_OK;
}

/* A string key with valid values names[0..n): index into *out. */
static rb_status get_enum(const parse_ctx *p, const char *key, const char *const *names, int n, int *out,
                          uint32_t bit) {
    json_t *v = given(p, key);
    if (!v) return RB_OK;
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    for (int i = 0; s && i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            p->c->set |= bit;
            return RB_OK;
        }
    }
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, names[i], sizeof list - strlen(list) - 1);
        if (i + 1 < n) strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    return rb_error_set(p->err, RB_E_FORMAT, "scheduler config: %s '%s' is not one of: %s", key, s ? s : "(not a string)",
                        list);
}

/* Keys whose "on" value selects a feature this engine does not have. */
static rb_status reject_true(const parse_ctx *p, const char *key, const char *what) {
    json_t *v = given(p, key);
    if (!v) return RB_OK;
    if (!json_is_boolean(v)) return rb_error_set(p->err, RB_E_FORMAT, "scheduler config: %s must be true or false", key);
    if (json_is_true(v)) return rb_error_set(p->err, RB_E_UNSUPPORTED, "scheduler config: %s (%s) is not supported", key, what);
    return RB_OK;
}

/* A string key whose listed values are fine and whose other known values
 * are unsupported features. */
static rb_status check_string(const parse_ctx *p, const char *key, const char *const *ok, int n_ok,
                              const char *const *unsupported, int n_uns) {
    json_t *v = given(p, key);
    if (!v) return RB_OK;
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    if (!s) return rb_error_set(p->err, RB_E_FORMAT, "scheduler config: %s must be a string", key);
    for (int i = 0; i < n_ok; i++)
        if (strcmp(s, ok[i]) == 0) return RB_OK;
    for (int i = 0; i < n_uns; i++)
        if (strcmp(s, unsupported[i]) == 0)
            return rb_error_set(p->err, RB_E_UNSUPPORTED, "scheduler config: %s '%s' is not supported", key, s);
    return rb_error_set(p->err, RB_E_FORMAT, "scheduler config: unknown %s '%s'", key, s);
}

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        rb_status st_ = (x);                                                                                           \
        if (st_ != RB_OK) return st_;                                                                                  \
    } while (0)

static const char *const BETA_NAMES[] = {"linear", "scaled_linear", "squaredcos_cap_v2"};
static const char *const PRED_NAMES[] = {"epsilon", "v_prediction", "sample"};
static const char *const SPACING_NAMES[] = {"leading", "trailing", "linspace"};
static const char *const FINAL_NAMES[] = {"zero", "sigma_min"};
static const char *const SOLVER_NAMES[] = {"midpoint", "heun", "logrho", "bh1", "bh2"};

static rb_status parse_keys(parse_ctx *p) {
    rb_sd_sched_config *c = p->c;
    json_t *cls = json_object_get(p->root, "_class_name");
    if (cls && json_is_string(cls)) snprintf(c->class_name, sizeof c->class_name, "%s", json_string_value(cls));

    json_t *tb = given(p, "trained_betas");
    if (tb) return rb_error_set(p->err, RB_E_UNSUPPORTED, "scheduler config: trained_betas is not supported");
    TRY(get_int(p, "num_train_timesteps", 2, 100000, &c->num_train_timesteps, RB_SD_CFG_NUM_TRAIN_TIMESTEPS));
    TRY(get_num(p, "beta_start", &c->beta_start, RB_SD_CFG_BETA_START));
    TRY(get_num(p, "beta_end", &c->beta_end, RB_SD_CFG_BETA_END));
    json_t *bs = given(p, "beta_schedule");
    if (bs && json_is_string(bs) && strcmp(json_string_value(bs), "exp") == 0)
        return rb_error_set(p->err, RB_E_UNSUPPORTED, "scheduler config: beta_schedule 'exp' is not supported");
    int e = 0;
    TRY(get_enum(p, "beta_schedule", BETA_NAMES, 3, &e, RB_SD_CFG_BETA_SCHEDULE));
    c->beta_schedule = (rb_sd_beta_schedule)e;
    json_t *pt = given(p, "prediction_type");
    if (pt && json_is_string(pt) && strcmp(json_string_value(pt), "flow_prediction") == 0)
        return rb_error_set(p->err, RB_E_UNSUPPORTED, "scheduler config: prediction_type 'flow_prediction' is not supported");
    e = 0;
    TRY(get_enum(p, "prediction_type", PRED_NAMES, 3, &e, RB_SD_CFG_PREDICTION_TYPE));
    c->prediction_type = (rb_sd_prediction)e;
    e = 0;
    TRY(get_enum(p, "timestep_spacing", SPACING_NAMES, 3, &e, RB_SD_CFG_TIMESTEP_SPACING));
    c->timestep_spacing = (rb_sd_spacing)e;
    TRY(get_int(p, "steps_offset", 0, 100000, &c->steps_offset, RB_SD_CFG_STEPS_OFFSET));
    TRY(get_bool(p, "set_alpha_to_one", &c->set_alpha_to_one, RB_SD_CFG_SET_ALPHA_TO_ONE));
    TRY(get_bool(p, "rescale_betas_zero_snr", &c->rescale_betas_zero_snr, RB_SD_CFG_RESCALE_ZERO_SNR));
    TRY(get_bool(p, "clip_sample", &c->clip_sample, RB_SD_CFG_CLIP_SAMPLE));
    TRY(get_num(p, "clip_sample_range", &c->clip_sample_range, RB_SD_CFG_CLIP_SAMPLE_RANGE));
    TRY(get_bool(p, "use_karras_sigmas", &c->use_karras_sigmas, RB_SD_CFG_USE_KARRAS));
    TRY(get_bool(p, "use_exponential_sigmas", &c->use_exponential_sigmas, RB_SD_CFG_USE_EXPONENTIAL));
    TRY(get_num(p, "sigma_min", &c->sigma_min, RB_SD_CFG_SIGMA_MIN));
    TRY(get_num(p, "sigma_max", &c->sigma_max, RB_SD_CFG_SIGMA_MAX));
    e = 0;
    TRY(get_enum(p, "final_sigmas_type", FINAL_NAMES, 2, &e, RB_SD_CFG_FINAL_SIGMAS_TYPE));
    c->final_sigmas_type = (rb_sd_final_sigma)e;
    TRY(get_num(p, "lambda_min_clipped", &c->lambda_min_clipped, RB_SD_CFG_LAMBDA_MIN_CLIPPED));
    e = 0;
    TRY(get_enum(p, "solver_type", SOLVER_NAMES, 5, &e, RB_SD_CFG_SOLVER_TYPE));
    c->solver_type = e == 1 ? RB_SD_SOLVER_HEUN : RB_SD_SOLVER_MIDPOINT; /* diffusers maps the UniPC names to midpoint */
    TRY(get_bool(p, "lower_order_final", &c->lower_order_final, RB_SD_CFG_LOWER_ORDER_FINAL));
    TRY(get_bool(p, "euler_at_final", &c->euler_at_final, RB_SD_CFG_EULER_AT_FINAL));
    TRY(get_int(p, "original_inference_steps", 1, 100000, &c->original_inference_steps, RB_SD_CFG_ORIGINAL_STEPS));
    TRY(get_num(p, "timestep_scaling", &c->timestep_scaling, RB_SD_CFG_TIMESTEP_SCALING));
    TRY(get_num(p, "shift", &c->shift, RB_SD_CFG_SHIFT));
    /* FlowMatchEulerDiscreteScheduler options beyond the plain shifted schedule */
    TRY(reject_true(p, "invert_sigmas", "inverted flow sigmas"));
    TRY(reject_true(p, "stochastic_sampling", "stochastic flow sampling"));
    if (given(p, "shift_terminal"))
        return rb_error_set(p->err, RB_E_UNSUPPORTED, "scheduler config: shift_terminal is not supported");
    static const char *const ts_ok[] = {"exponential", "linear"}; /* read only with dynamic shifting */
    TRY(check_string(p, "time_shift_type", ts_ok, 2, NULL, 0));

    /* options of the diffusers classes that this engine does not implement */
    TRY(reject_true(p, "thresholding", "dynamic thresholding"));
    TRY(reject_true(p, "use_beta_sigmas", "beta-distribution sigmas"));
    TRY(reject_true(p, "use_lu_lambdas", "uniform log-SNR steps"));
    TRY(reject_true(p, "use_flow_sigmas", "flow-matching sigmas"));
    TRY(reject_true(p, "use_dynamic_shifting", "resolution-dependent shift"));
    static const char *const interp_ok[] = {"linear"}, *const interp_no[] = {"log_linear"};
    TRY(check_string(p, "interpolation_type", interp_ok, 1, interp_no, 1));
    static const char *const tt_ok[] = {"discrete"}, *const tt_no[] = {"continuous"};
    TRY(check_string(p, "timestep_type", tt_ok, 1, tt_no, 1));
    static const char *const var_ok[] = {"fixed_small", "fixed_small_log", "fixed_large", "fixed_large_log"};
    static const char *const var_no[] = {"learned", "learned_range"};
    TRY(check_string(p, "variance_type", var_ok, 4, var_no, 2));
    static const char *const algo_ok[] = {"dpmsolver++", "sde-dpmsolver++", "dpmsolver", "sde-dpmsolver", "deis"};
    TRY(check_string(p, "algorithm_type", algo_ok, 5, NULL, 0));
    int order = 0;
    TRY(get_int(p, "solver_order", 1, 3, &order, 0));
    return RB_OK;
}

/* Ranges and contradictions among the fields whose bits are in s. */
static rb_status check_fields(const rb_sd_sched_config *c, uint32_t s, rb_error *err) {
    int T = c->num_train_timesteps;
    if ((s & RB_SD_CFG_BETA_START) && !(c->beta_start > 0 && c->beta_start < 1))
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: beta_start %g is outside (0, 1)", c->beta_start);
    if ((s & RB_SD_CFG_BETA_END) && !(c->beta_end > 0 && c->beta_end < 1))
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: beta_end %g is outside (0, 1)", c->beta_end);
    if ((s & RB_SD_CFG_BETA_START) && (s & RB_SD_CFG_BETA_END) && c->beta_end < c->beta_start)
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: beta_end %g is below beta_start %g", c->beta_end,
                            c->beta_start);
    if ((s & RB_SD_CFG_STEPS_OFFSET) && c->steps_offset >= T)
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: steps_offset %d is not below num_train_timesteps %d",
                            c->steps_offset, T);
    if ((s & RB_SD_CFG_CLIP_SAMPLE_RANGE) && !(c->clip_sample_range > 0 && isfinite(c->clip_sample_range)))
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: clip_sample_range must be positive");
    if ((s & RB_SD_CFG_USE_KARRAS) && (s & RB_SD_CFG_USE_EXPONENTIAL) && c->use_karras_sigmas &&
        c->use_exponential_sigmas)
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: use_karras_sigmas and use_exponential_sigmas are both on");
    if ((s & RB_SD_CFG_SIGMA_MIN) && !(c->sigma_min > 0 && isfinite(c->sigma_min)))
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: sigma_min must be positive");
    if ((s & RB_SD_CFG_SIGMA_MAX) && !(c->sigma_max > 0 && isfinite(c->sigma_max)))
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: sigma_max must be positive");
    if ((s & RB_SD_CFG_SIGMA_MIN) && (s & RB_SD_CFG_SIGMA_MAX) && !(c->sigma_min < c->sigma_max))
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: sigma_min %g is not below sigma_max %g", c->sigma_min,
                            c->sigma_max);
    if ((s & RB_SD_CFG_ORIGINAL_STEPS) && c->original_inference_steps > T)
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: original_inference_steps %d is above num_train_timesteps %d",
                            c->original_inference_steps, T);
    if ((s & RB_SD_CFG_TIMESTEP_SCALING) && !(c->timestep_scaling > 0 && isfinite(c->timestep_scaling)))
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: timestep_scaling must be positive");
    if ((s & RB_SD_CFG_SHIFT) && !(c->shift > 0 && isfinite(c->shift)))
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: shift must be positive");
    return RB_OK;
}

static rb_status parse_root(rb_sd_sched_config *c, json_t *root, rb_error *err) {
    rb_sd_sched_config tmp;
    rb_sd_sched_config_init(&tmp);
    if (!json_is_object(root)) return rb_error_set(err, RB_E_FORMAT, "scheduler config: not a JSON object");
    parse_ctx p = {&tmp, root, json_object_get(root, "_use_default_values"), err};
    if (p.defaults && !json_is_array(p.defaults))
        return rb_error_set(err, RB_E_FORMAT, "scheduler config: _use_default_values must be a list");
    rb_status st = parse_keys(&p);
    if (st == RB_OK) st = check_fields(&tmp, tmp.set, err);
    if (st == RB_OK) *c = tmp;
    return st;
}

rb_status rb_sd_sched_config_parse(rb_sd_sched_config *c, const char *json, size_t len, rb_error *err) {
    if (!c || !json) return rb_error_set(err, RB_E_INVALID, "scheduler config: NULL argument");
    json_t *root = rb_sched_json_parse(json, len, err);
    if (!root) return err ? err->code : RB_E_FORMAT;
    rb_status st = parse_root(c, root, err);
    json_decref(root);
    return st;
}

rb_status rb_sd_sched_config_load(rb_sd_sched_config *c, const char *path, rb_error *err) {
    if (!c || !path) return rb_error_set(err, RB_E_INVALID, "scheduler config: NULL argument");
    json_t *root = rb_sched_json_load(path, err);
    if (!root) return err ? err->code : RB_E_IO;
    rb_status st = parse_root(c, root, err);
    json_decref(root);
    if (st != RB_OK) rb_error_prefix(err, "%s: ", path);
    return st;
}

rb_status rb_sd_config_check(const rb_sd_sched_config *c, rb_error *err) {
    const uint32_t range = RB_SD_CFG_SIGMA_MIN | RB_SD_CFG_SIGMA_MAX; /* optional overrides: only when given */
    return check_fields(c, (0xffffffffu & ~range) | (c->set & range), err);
}

/* ---------------------------------------------------------------- model families */
static const char *const FAMILY_NAMES[RB_SD_FAMILY_COUNT_] = {"sd1", "sd2", "sd2-v", "sdxl", "sdxl-turbo"};

rb_status rb_sd_family_parse(const char *name, rb_sd_family *out, rb_error *err) {
    if (!name || !out) return rb_error_set(err, RB_E_INVALID, "model family: NULL argument");
    for (int i = 0; i < RB_SD_FAMILY_COUNT_; i++) {
        if (strcmp(name, FAMILY_NAMES[i]) == 0) {
            *out = (rb_sd_family)i;
            return RB_OK;
        }
    }
    return rb_error_set(err, RB_E_INVALID, "unknown model family '%s' (valid: sd1, sd2, sd2-v, sdxl, sdxl-turbo)", name);
}

rb_status rb_sd_sched_config_family(rb_sd_sched_config *c, rb_sd_family family, rb_error *err) {
    if (!c) return rb_error_set(err, RB_E_INVALID, "model family: NULL config");
    if ((int)family < 0 || family >= RB_SD_FAMILY_COUNT_)
        return rb_error_set(err, RB_E_INVALID, "model family: unknown value %d", (int)family);
    rb_sd_sched_config_init(c);
    c->num_train_timesteps = 1000;
    c->beta_start = 0.00085;
    c->beta_end = 0.012;
    c->beta_schedule = RB_SD_BETAS_SCALED_LINEAR;
    c->steps_offset = 1;
    c->set_alpha_to_one = false;
    c->clip_sample = false;
    c->set = RB_SD_CFG_NUM_TRAIN_TIMESTEPS | RB_SD_CFG_BETA_START | RB_SD_CFG_BETA_END | RB_SD_CFG_BETA_SCHEDULE |
             RB_SD_CFG_STEPS_OFFSET | RB_SD_CFG_SET_ALPHA_TO_ONE | RB_SD_CFG_CLIP_SAMPLE;
    const char *cls = "PNDMScheduler";
    switch (family) {
    case RB_SD_FAMILY_SD1: break;
    case RB_SD_FAMILY_SD2:
        c->prediction_type = RB_SD_PRED_EPSILON;
        c->set |= RB_SD_CFG_PREDICTION_TYPE;
        break;
    case RB_SD_FAMILY_SD2_V:
        cls = "DDIMScheduler";
        c->prediction_type = RB_SD_PRED_V;
        c->set |= RB_SD_CFG_PREDICTION_TYPE;
        break;
    case RB_SD_FAMILY_SDXL:
    case RB_SD_FAMILY_SDXL_TURBO:
        cls = family == RB_SD_FAMILY_SDXL ? "EulerDiscreteScheduler" : "EulerAncestralDiscreteScheduler";
        c->prediction_type = RB_SD_PRED_EPSILON;
        c->timestep_spacing = family == RB_SD_FAMILY_SDXL ? RB_SD_SPACING_LEADING : RB_SD_SPACING_TRAILING;
        c->use_karras_sigmas = false;
        c->set |= RB_SD_CFG_PREDICTION_TYPE | RB_SD_CFG_TIMESTEP_SPACING | RB_SD_CFG_USE_KARRAS;
        break;
    default: break;
    }
    snprintf(c->class_name, sizeof c->class_name, "%s", cls);
    return RB_OK;
}

/* ---------------------------------------------------------------- class defaults */
void rb_sd_config_resolve(const rb_sd_sched_config *in, rb_sd_sampler_kind kind, rb_sd_sched_config *out) {
    *out = *in;
    uint32_t s = in->set;
    /* diffusers class defaults (the __init__ signatures) */
    int sd_betas = kind == RB_SD_SAMPLER_HEUN || kind == RB_SD_SAMPLER_DPMPP_SDE || kind == RB_SD_SAMPLER_LCM;
    if (!(s & RB_SD_CFG_NUM_TRAIN_TIMESTEPS)) out->num_train_timesteps = 1000;
    if (!(s & RB_SD_CFG_BETA_START)) out->beta_start = sd_betas ? 0.00085 : 0.0001;
    if (!(s & RB_SD_CFG_BETA_END)) out->beta_end = sd_betas ? 0.012 : 0.02;
    if (!(s & RB_SD_CFG_BETA_SCHEDULE))
        out->beta_schedule = kind == RB_SD_SAMPLER_LCM ? RB_SD_BETAS_SCALED_LINEAR : RB_SD_BETAS_LINEAR;
    if (!(s & RB_SD_CFG_PREDICTION_TYPE)) out->prediction_type = RB_SD_PRED_EPSILON;
    if (!(s & RB_SD_CFG_TIMESTEP_SPACING))
        out->timestep_spacing =
            (kind == RB_SD_SAMPLER_DDIM || kind == RB_SD_SAMPLER_LCM) ? RB_SD_SPACING_LEADING : RB_SD_SPACING_LINSPACE;
    if (!(s & RB_SD_CFG_STEPS_OFFSET)) out->steps_offset = 0;
    if (!(s & RB_SD_CFG_SET_ALPHA_TO_ONE)) out->set_alpha_to_one = true;
    if (!(s & RB_SD_CFG_RESCALE_ZERO_SNR)) out->rescale_betas_zero_snr = false;
    if (!(s & RB_SD_CFG_CLIP_SAMPLE)) out->clip_sample = kind == RB_SD_SAMPLER_DDIM;
    if (!(s & RB_SD_CFG_CLIP_SAMPLE_RANGE)) out->clip_sample_range = 1.0;
    if (!(s & RB_SD_CFG_USE_KARRAS)) out->use_karras_sigmas = false;
    if (!(s & RB_SD_CFG_USE_EXPONENTIAL)) out->use_exponential_sigmas = false;
    if (!(s & RB_SD_CFG_FINAL_SIGMAS_TYPE)) out->final_sigmas_type = RB_SD_FINAL_SIGMA_ZERO;
    if (!(s & RB_SD_CFG_LAMBDA_MIN_CLIPPED)) out->lambda_min_clipped = -INFINITY;
    if (!(s & RB_SD_CFG_SOLVER_TYPE)) out->solver_type = RB_SD_SOLVER_MIDPOINT;
    if (!(s & RB_SD_CFG_LOWER_ORDER_FINAL)) out->lower_order_final = true;
    if (!(s & RB_SD_CFG_EULER_AT_FINAL)) out->euler_at_final = false;
    if (!(s & RB_SD_CFG_ORIGINAL_STEPS)) out->original_inference_steps = 50;
    if (!(s & RB_SD_CFG_TIMESTEP_SCALING)) out->timestep_scaling = 10.0;
    if (!(s & RB_SD_CFG_SHIFT) || kind != RB_SD_SAMPLER_FLOW_EULER) out->shift = 1.0;
    /* options a class does not have are not read by it */
    int has_zero_snr = kind == RB_SD_SAMPLER_EULER || kind == RB_SD_SAMPLER_EULER_A || kind == RB_SD_SAMPLER_DPMPP_2M ||
                       kind == RB_SD_SAMPLER_DDIM || kind == RB_SD_SAMPLER_LCM;
    if (!has_zero_snr) out->rescale_betas_zero_snr = false;
    if (kind != RB_SD_SAMPLER_DDIM && kind != RB_SD_SAMPLER_LCM && kind != RB_SD_SAMPLER_HEUN) out->clip_sample = false;
    if (kind != RB_SD_SAMPLER_DDIM && kind != RB_SD_SAMPLER_LCM) out->set_alpha_to_one = false;
    if (kind == RB_SD_SAMPLER_EULER_A || kind == RB_SD_SAMPLER_DDIM || kind == RB_SD_SAMPLER_LCM)
        out->use_karras_sigmas = out->use_exponential_sigmas = false;
    if (kind != RB_SD_SAMPLER_EULER) out->set &= ~(uint32_t)(RB_SD_CFG_SIGMA_MIN | RB_SD_CFG_SIGMA_MAX);
    if (kind != RB_SD_SAMPLER_EULER && kind != RB_SD_SAMPLER_DPMPP_2M) out->final_sigmas_type = RB_SD_FINAL_SIGMA_ZERO;
}

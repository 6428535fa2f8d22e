/* Noise schedules and samplers of the Stable Diffusion engine, on host float
 * arrays: the scheduler configuration of a model (diffusers'
 * scheduler_config.json or a model family's defaults), the timesteps and
 * sigmas of a run, and a sampler state machine the pipeline drives, one
 * model evaluation at a time. Every sampler reproduces a diffusers scheduler
 * class (diffusers 0.40) as its pipelines use it, operation for operation in
 * float32 where diffusers computes in float32 torch, so a run fed the same
 * model outputs and noise gives diffusers' latents to float rounding.
 *
 * Samplers (name: diffusers class = AUTOMATIC1111 name = ComfyUI name):
 *   euler      EulerDiscreteScheduler = "Euler" = euler. Euler step of the
 *              probability-flow ODE in sigma space: d = (x - x0)/sigma,
 *              x += d * (sigma_next - sigma).
 *   euler_a    EulerAncestralDiscreteScheduler = "Euler a" =
 *              euler_ancestral: Euler to sigma_down, then noise * sigma_up,
 *              sigma_up = min(sigma_next, eta * sqrt(sigma_next^2 (sigma^2 -
 *              sigma_next^2) / sigma^2)), sigma_down = sqrt(sigma_next^2 -
 *              sigma_up^2); eta (k-diffusion's, default 1 = diffusers) scales
 *              the noise. One noise draw per step. diffusers' class has no
 *              karras / exponential option: with those schedules this is
 *              A1111's "Euler a Karras", the ancestral step on the sigmas and
 *              timesteps that EulerDiscreteScheduler would use.
 *   heun       HeunDiscreteScheduler = "Heun" = heun: Heun's second-order
 *              method (Karras et al. 2022, alg. 1 without churn): two model
 *              evaluations per step, an Euler step on the last one.
 *   dpmpp_2m   DPMSolverMultistepScheduler(algorithm_type="dpmsolver++",
 *              solver_order=2) = "DPM++ 2M" = dpmpp_2m; with the karras
 *              schedule "DPM++ 2M Karras". DPM-Solver++(2M) (Lu et al. 2022)
 *              on data predictions in the VP parametrisation; first-order on
 *              the first step and on the last (final sigma 0). Reads
 *              solver_type, lower_order_final, euler_at_final,
 *              final_sigmas_type and lambda_min_clipped from the config;
 *              solver_order and algorithm_type are this sampler's (2,
 *              dpmsolver++) whatever the config says.
 *   dpmpp_sde  DPMSolverSDEScheduler = "DPM++ SDE" = dpmpp_sde: DPM-Solver++
 *              (stochastic, midpoint r = 1/2, eta default 1; Lu et al. 2022,
 *              k-diffusion's sample_dpmpp_sde): per step a model evaluation
 *              at sigma, an ancestral step to the midpoint
 *              sqrt(sigma * sigma_next), an evaluation there, the ancestral
 *              step to sigma_next; the last step (to 0) is one Euler step.
 *              Noise: one draw for each of the two ancestral steps.
 *              diffusers, A1111 and ComfyUI draw it from a torchsde Brownian
 *              tree seeded separately; here it comes from the noise callback
 *              like every other draw, so a given seed does not reproduce
 *              their pictures (the sampler itself is the same: fed their
 *              noise it gives their latents).
 *   ddim       DDIMScheduler = "DDIM" = ddim (Song et al. 2021): eta (default
 *              0) scales the per-step noise, one draw per step when eta > 0.
 *              clip_sample, set_alpha_to_one honoured.
 *   lcm        LCMScheduler = "LCM" = lcm (Luo et al. 2023): consistency
 *              boundary scalings c_skip, c_out with timestep_scaling, a noise
 *              draw after every step but the last. Meant for LCM models
 *              (guidance 1, no negative batch).
 *   flow_euler FlowMatchEulerDiscreteScheduler (Stable Diffusion 3): the
 *              model predicts the velocity v of the flow x_sigma =
 *              (1 - sigma) x0 + sigma noise; x += (sigma_next - sigma) v.
 *              Sigmas: the training sigmas i/T shifted by the config's shift
 *              s (sigma' = s sigma / (1 + (s - 1) sigma)), n steps spaced
 *              linearly from the largest to the smallest, shifted once more,
 *              then 0; timesteps = sigma x T. The model input is the latents
 *              unscaled, the starting latents the noise itself (img2img: sigma
 *              noise + (1 - sigma) image, and the run starts at step
 *              int(n - min(n strength, n)), StableDiffusion3Img2ImgPipeline's
 *              rule). Only the default schedule; no noise during the run.
 *
 * Sigma schedules (for the sigma-space samplers euler, euler_a, heun,
 * dpmpp_2m, dpmpp_sde; ddim and lcm take only "default"):
 *   default    (aliases normal, discrete) what the sampler's diffusers class
 *              does with this config: timesteps by timestep_spacing
 *              (leading: t_i = (n-1-i)*floor(T/n) + steps_offset; trailing:
 *              round(T - i*T/n) - 1; linspace: linspace(0, T-1, n) reversed;
 *              dpmpp_2m spaces n+1 points and drops the last), sigma(t) by
 *              linear interpolation of the training sigmas
 *              sqrt((1 - alphabar_t) / alphabar_t); becomes karras or
 *              exponential when the config sets use_karras_sigmas /
 *              use_exponential_sigmas (except for euler_a, whose diffusers
 *              class has neither).
 *   karras     Karras et al. 2022 eq. 5, rho = 7: sigma_i = (smax^(1/rho) +
 *              i/(n-1) (smin^(1/rho) - smax^(1/rho)))^rho. Range as the
 *              diffusers class takes it: dpmpp_2m the full training range;
 *              euler, euler_a, heun, dpmpp_sde the default schedule's first
 *              and last sigma (EulerDiscrete's config sigma_min / sigma_max
 *              override both). Timesteps t(sigma) by log-sigma interpolation
 *              of the training table; dpmpp_2m rounds them to integers.
 *   exponential  sigma_i = exp(linspace(log smax, log smin, n)), same range
 *              rules, t(sigma) likewise (dpmpp_2m truncates to integers, as
 *              diffusers' int64 timesteps do).
 *   sgm_uniform  ComfyUI's sgm_uniform: t_i = (T-1)(1 - i/n), i < n, sigma_i =
 *              exp of the training log-sigmas interpolated linearly at t_i;
 *              the model gets t_i (ComfyUI rounds it to the nearest training
 *              step).
 *   simple     ComfyUI's simple: t_i = T-1 - floor(i T / n), sigma_i = the
 *              training sigma of t_i.
 * All sigma schedules end with sigma 0 (or the smallest training sigma with
 * final_sigmas_type "sigma_min" for euler and dpmpp_2m). The first latents of
 * a txt2img run are noise * init_noise_sigma, which is sigma_max for
 * trailing / linspace spacing and sqrt(sigma_max^2 + 1) for leading (diffusers'
 * rule, whatever the schedule); 1 for dpmpp_2m, ddim and lcm, whose latents
 * live in the variance-preserving space.
 *
 * img2img follows StableDiffusionImg2ImgPipeline (also for lcm: the run
 * starts part-way into the full schedule, not LCM's own strength-scaled
 * schedule). The inpainting blend (rb_sd_sampler_set_inpaint) follows
 * StableDiffusionInpaintPipeline, which blends after every model evaluation,
 * including the first evaluation of a heun / dpmpp_sde step (for dpmpp_sde
 * with the next table sigma, not the midpoint, as diffusers does).
 *
 * Noise: the callback is asked for all n values of a draw at once (the whole
 * batch), in the order diffusers draws them from one generator: the starting
 * noise (unless given), then the sampler's per-step draws listed above.
 *
 * prediction_type "sample" also works with euler_a and dpmpp_sde (diffusers'
 * classes refuse it; x0 is then the model output as for the others).
 *
 * A run: rb_sd_sampler_begin(); then while rb_sd_sampler_next() gives a model
 * input and a timestep, evaluate the denoiser there, apply classifier-free
 * guidance (rb_sd_cfg_guidance) and hand the guided output to
 * rb_sd_sampler_feed(); the latents are then rb_sd_sampler_latents(). Heun
 * and DPM++ SDE ask for two evaluations per step. Latents are n floats (the
 * whole batch, any layout: the samplers are elementwise). */
#ifndef RBEE_SD_SAMPLER_H
#define RBEE_SD_SAMPLER_H

#include "rbee/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- scheduler configuration */
typedef enum rb_sd_beta_schedule {
    RB_SD_BETAS_LINEAR = 0,         /* linspace(beta_start, beta_end, T) in float32 */
    RB_SD_BETAS_SCALED_LINEAR,      /* linspace(sqrt(beta_start), sqrt(beta_end), T)^2 (SD 1/2/XL) */
    RB_SD_BETAS_SQUAREDCOS_CAP_V2,  /* Nichol & Dhariwal 2021 cosine, betas capped at 0.999 */
} rb_sd_beta_schedule;

typedef enum rb_sd_prediction {
    RB_SD_PRED_EPSILON = 0, /* the model predicts the noise */
    RB_SD_PRED_V,           /* v_prediction (SD 2.x 768-v): v = alpha eps - sigma x0 */
    RB_SD_PRED_SAMPLE,      /* the model predicts x0 */
} rb_sd_prediction;

typedef enum rb_sd_spacing {
    RB_SD_SPACING_LEADING = 0,
    RB_SD_SPACING_TRAILING,
    RB_SD_SPACING_LINSPACE,
} rb_sd_spacing;

typedef enum rb_sd_final_sigma { RB_SD_FINAL_SIGMA_ZERO = 0, RB_SD_FINAL_SIGMA_MIN } rb_sd_final_sigma;
typedef enum rb_sd_solver_type { RB_SD_SOLVER_MIDPOINT = 0, RB_SD_SOLVER_HEUN } rb_sd_solver_type;

/* Bits of rb_sd_sched_config.set: which fields the source gave. A field not
 * given takes the default of the diffusers class behind the chosen sampler
 * (as XScheduler.from_config does), e.g. timestep_spacing is "linspace" for
 * euler but "leading" for ddim when a config (SD 1.5's) does not say. */
enum {
    RB_SD_CFG_NUM_TRAIN_TIMESTEPS = 1u << 0,
    RB_SD_CFG_BETA_START = 1u << 1,
    RB_SD_CFG_BETA_END = 1u << 2,
    RB_SD_CFG_BETA_SCHEDULE = 1u << 3,
    RB_SD_CFG_PREDICTION_TYPE = 1u << 4,
    RB_SD_CFG_TIMESTEP_SPACING = 1u << 5,
    RB_SD_CFG_STEPS_OFFSET = 1u << 6,
    RB_SD_CFG_SET_ALPHA_TO_ONE = 1u << 7,
    RB_SD_CFG_RESCALE_ZERO_SNR = 1u << 8,
    RB_SD_CFG_CLIP_SAMPLE = 1u << 9,
    RB_SD_CFG_CLIP_SAMPLE_RANGE = 1u << 10,
    RB_SD_CFG_USE_KARRAS = 1u << 11,
    RB_SD_CFG_USE_EXPONENTIAL = 1u << 12,
    RB_SD_CFG_SIGMA_MIN = 1u << 13,
    RB_SD_CFG_SIGMA_MAX = 1u << 14,
    RB_SD_CFG_FINAL_SIGMAS_TYPE = 1u << 15,
    RB_SD_CFG_LAMBDA_MIN_CLIPPED = 1u << 16,
    RB_SD_CFG_SOLVER_TYPE = 1u << 17,
    RB_SD_CFG_LOWER_ORDER_FINAL = 1u << 18,
    RB_SD_CFG_EULER_AT_FINAL = 1u << 19,
    RB_SD_CFG_ORIGINAL_STEPS = 1u << 20,
    RB_SD_CFG_TIMESTEP_SCALING = 1u << 21,
    RB_SD_CFG_SHIFT = 1u << 22,
};

#define RB_SD_CLASS_NAME_MAX 64

typedef struct rb_sd_sched_config {
    uint32_t set; /* RB_SD_CFG_* */
    char class_name[RB_SD_CLASS_NAME_MAX]; /* "_class_name" of the file, "" if none */
    int num_train_timesteps;               /* T, 2..100000 */
    double beta_start, beta_end;
    rb_sd_beta_schedule beta_schedule;
    rb_sd_prediction prediction_type;
    rb_sd_spacing timestep_spacing;
    int steps_offset;            /* leading spacing: added to every timestep */
    bool set_alpha_to_one;       /* ddim, lcm: alphabar before t = 0 is 1 (else alphabar_0) */
    bool rescale_betas_zero_snr; /* Lin et al. 2023 (euler, euler_a, dpmpp_2m, ddim, lcm) */
    bool clip_sample;            /* ddim, lcm, heun: clamp x0 to +-clip_sample_range */
    double clip_sample_range;
    bool use_karras_sigmas, use_exponential_sigmas;
    double sigma_min, sigma_max; /* euler: karras/exponential range overrides */
    rb_sd_final_sigma final_sigmas_type; /* euler, dpmpp_2m */
    double lambda_min_clipped;           /* dpmpp_2m; -inf = no clipping */
    rb_sd_solver_type solver_type;       /* dpmpp_2m */
    bool lower_order_final, euler_at_final;
    int original_inference_steps; /* lcm */
    double timestep_scaling;      /* lcm */
    double shift;                 /* flow_euler: the sigma shift (SD3: 3.0) */
} rb_sd_sched_config;

/* An empty configuration: nothing set, every field the sampler class's default. */
void rb_sd_sched_config_init(rb_sd_sched_config *c);

/* Parses a diffusers scheduler_config.json (text of len bytes; NaN /
 * Infinity tokens as Python writes them are accepted). Keys listed in
 * "_use_default_values" count as not given, as in diffusers; keys of other
 * scheduler classes (skip_prk_steps, ...) are ignored; null means not given.
 * A known key with a value of the wrong type or an unknown value is
 * RB_E_FORMAT (the message lists the valid values); features this engine
 * does not implement (trained_betas, thresholding, use_beta_sigmas,
 * use_lu_lambdas, use_flow_sigmas, dynamic shifting, timestep_type
 * "continuous", interpolation_type "log_linear", learned variance) are
 * RB_E_UNSUPPORTED; contradictions (karras and exponential both on,
 * beta_end < beta_start, sigma_min >= sigma_max, steps_offset >= T...) are
 * RB_E_FORMAT. */
rb_status rb_sd_sched_config_parse(rb_sd_sched_config *c, const char *json, size_t len, rb_error *err);
rb_status rb_sd_sched_config_load(rb_sd_sched_config *c, const char *path, rb_error *err);

/* Model families whose published scheduler_config.json is used when a
 * single-file checkpoint has none (all: T = 1000, scaled_linear betas
 * 0.00085..0.012, steps_offset 1, set_alpha_to_one false, clip_sample false):
 *   sd1         SD 1.x (PNDMScheduler config; no timestep_spacing given)
 *   sd2         SD 2.x 512 base (epsilon; no timestep_spacing given)
 *   sd2-v       SD 2.x 768-v (v_prediction; no timestep_spacing given)
 *   sdxl        SDXL base / refiner (EulerDiscreteScheduler, leading)
 *   sdxl-turbo  SDXL-Turbo (EulerAncestralDiscreteScheduler, trailing) */
typedef enum rb_sd_family {
    RB_SD_FAMILY_SD1 = 0,
    RB_SD_FAMILY_SD2,
    RB_SD_FAMILY_SD2_V,
    RB_SD_FAMILY_SDXL,
    RB_SD_FAMILY_SDXL_TURBO,
    RB_SD_FAMILY_COUNT_
} rb_sd_family;

rb_status rb_sd_family_parse(const char *name, rb_sd_family *out, rb_error *err);
rb_status rb_sd_sched_config_family(rb_sd_sched_config *c, rb_sd_family family, rb_error *err);

/* ---------------------------------------------------------------- samplers and schedules */
typedef enum rb_sd_sampler_kind {
    RB_SD_SAMPLER_EULER = 0,
    RB_SD_SAMPLER_EULER_A,
    RB_SD_SAMPLER_HEUN,
    RB_SD_SAMPLER_DPMPP_2M,
    RB_SD_SAMPLER_DPMPP_SDE,
    RB_SD_SAMPLER_DDIM,
    RB_SD_SAMPLER_LCM,
    RB_SD_SAMPLER_FLOW_EULER,
    RB_SD_SAMPLER_COUNT_
} rb_sd_sampler_kind;

typedef enum rb_sd_schedule {
    RB_SD_SCHEDULE_DEFAULT = 0,
    RB_SD_SCHEDULE_KARRAS,
    RB_SD_SCHEDULE_EXPONENTIAL,
    RB_SD_SCHEDULE_SGM_UNIFORM,
    RB_SD_SCHEDULE_SIMPLE,
    RB_SD_SCHEDULE_COUNT_
} rb_sd_schedule;

/* Names as listed above; sampler aliases: euler_ancestral, k_euler_a,
 * k_euler, k_heun, dpm++_2m, dpmpp2m, dpm++_sde; schedule aliases: normal,
 * discrete. RB_E_INVALID with the valid names otherwise. */
rb_status rb_sd_sampler_kind_parse(const char *name, rb_sd_sampler_kind *out, rb_error *err);
rb_status rb_sd_schedule_parse(const char *name, rb_sd_schedule *out, rb_error *err);
/* "<sampler>" or "<sampler>_<schedule>" ("dpmpp_2m_karras", "euler_a_sgm_uniform"). */
rb_status rb_sd_sampler_spec_parse(const char *name, rb_sd_sampler_kind *kind, rb_sd_schedule *schedule,
                                   rb_error *err);
const char *rb_sd_sampler_kind_name(rb_sd_sampler_kind kind);
const char *rb_sd_schedule_name(rb_sd_schedule schedule);
/* The sampler a config's diffusers class stands for (EulerDiscreteScheduler
 * -> euler, ...), with the default schedule (which follows the config's
 * use_karras_sigmas / use_exponential_sigmas).
 * RB_E_UNSUPPORTED for classes without a sampler here (PNDMScheduler, the SD
 * 1.x default, LMS, UniPC...) or no class name: the caller picks one. */
rb_status rb_sd_sampler_for_config(const rb_sd_sched_config *c, rb_sd_sampler_kind *kind, rb_sd_schedule *schedule,
                                   rb_error *err);

/* Fills out[0..n) with standard normal noise; returns RB_OK or an error the
 * sampler passes on. rb_torch_rng_noise (rbee/sd_rng.h) has this shape. */
typedef rb_status (*rb_sd_noise_fn)(void *user, float *out, size_t n);

typedef struct rb_sd_sampler_opts {
    rb_sd_sampler_kind kind;
    rb_sd_schedule schedule;
    int steps;       /* num_inference_steps, 1..T (lcm: <= original_inference_steps) */
    double strength; /* (0, 1]: img2img / inpaint strength, diffusers' rule: the run
                        starts at step n - min(floor(n*strength), n); 1 = all steps */
    double eta;      /* < 0: the sampler's default (ddim 0; euler_a and dpmpp_sde 1,
                        their ancestral noise scale); other samplers ignore it */
    rb_sd_noise_fn noise;
    void *noise_user;
    size_t n;        /* floats in the latents (whole batch) */
    /* StableDiffusion3Pipeline's use of any scheduler: the model input is
     * the latents unscaled (no scale_model_input) and txt2img starts from
     * the noise itself (no init_noise_sigma). flow_euler does both anyway. */
    bool raw_model_input;
} rb_sd_sampler_opts;

/* euler, default schedule, 20 steps, strength 1, eta default, no noise callback, n 0. */
void rb_sd_sampler_opts_init(rb_sd_sampler_opts *o);

typedef struct rb_sd_sampler rb_sd_sampler;

/* Builds the schedule for the config and options. RB_E_INVALID for bad
 * options (n 0, steps out of range, strength outside (0, 1], a sampler that
 * draws noise without a callback), RB_E_UNSUPPORTED for a schedule the
 * sampler does not take, RB_E_RANGE when strength leaves no step. */
rb_status rb_sd_sampler_create(const rb_sd_sched_config *cfg, const rb_sd_sampler_opts *opts, rb_sd_sampler **out,
                               rb_error *err);
void rb_sd_sampler_free(rb_sd_sampler *s);

/* Starts (or restarts) a run. image_latents NULL: txt2img, latents =
 * noise * init_noise_sigma (needs strength 1; diffusers' inpaint pipeline at
 * strength 1 also starts this way). image_latents given: img2img, latents =
 * the image noised to the run's first timestep, as diffusers' img2img
 * pipeline does at any strength. noise: the n starting noise values, or NULL
 * to draw them from the callback (one draw of n). The noise is kept for the
 * inpainting blend. */
rb_status rb_sd_sampler_begin(rb_sd_sampler *s, const float *image_latents, const float *noise, rb_error *err);

/* Inpainting with an ordinary 4-channel denoiser (diffusers'
 * StableDiffusionInpaintPipeline): after every model evaluation's update,
 * latents = (1 - mask) * image_noised + mask * latents, where image_noised =
 * the image latents noised with the run's starting noise to the level of the
 * next evaluation (for the last one the clean image latents). mask: 1 =
 * repaint, batch x 1 x h x w floats broadcast over the channels (latents are
 * batch x channels x h x w). Call before the first rb_sd_sampler_feed. Not
 * for 9-channel inpainting models, whose input carries the mask instead. */
rb_status rb_sd_sampler_set_inpaint(rb_sd_sampler *s, const float *image_latents, const float *mask, size_t batch,
                                    size_t channels, rb_error *err);

/* true: evaluate the denoiser on model_in (n floats written, the latents
 * scaled as diffusers' scale_model_input does) at *timestep (the value
 * diffusers passes to the UNet, as float32), then call rb_sd_sampler_feed.
 * false: the run is finished (or not begun, or waiting for a feed). */
bool rb_sd_sampler_next(rb_sd_sampler *s, float *model_in, float *timestep);

/* The guided model output for the evaluation rb_sd_sampler_next asked for
 * (n floats). Errors: RB_E_INVALID when no evaluation is pending, the noise
 * callback's status, RB_E_RANGE on a non-finite result. */
rb_status rb_sd_sampler_feed(rb_sd_sampler *s, const float *model_out, rb_error *err);

/* The denoised estimate x0 (n floats) that the guided model output of the
 * pending evaluation implies, before rb_sd_sampler_feed takes it: with x_t
 * the evaluation's input in the variance-preserving form (what
 * rb_sd_sampler_next wrote) and alphabar its noise level (1 / (sigma^2 + 1),
 * or the schedule's alphabar for ddim and lcm), x0 = (x_t - sqrt(1 -
 * alphabar) eps) / sqrt(alphabar) for epsilon prediction, sqrt(alphabar) x_t
 * - sqrt(1 - alphabar) v for v-prediction, the output itself for "sample".
 * What previews show (the latents themselves are still noisy); for euler
 * at the last evaluation it is the result. RB_E_INVALID when no evaluation
 * is pending. */
rb_status rb_sd_sampler_x0(const rb_sd_sampler *s, const float *model_out, float *x0, rb_error *err);

/* The current latents (n floats; the result once finished). */
const float *rb_sd_sampler_latents(const rb_sd_sampler *s);
bool rb_sd_sampler_finished(const rb_sd_sampler *s);

/* Progress: model evaluations of this run and how many are done; denoising
 * steps of this run (after strength) and how many are complete. */
int rb_sd_sampler_n_evals(const rb_sd_sampler *s);
int rb_sd_sampler_evals_done(const rb_sd_sampler *s);
int rb_sd_sampler_n_steps(const rb_sd_sampler *s);
int rb_sd_sampler_steps_done(const rb_sd_sampler *s);

/* The schedule as diffusers' scheduler holds it after set_timesteps(steps):
 * timesteps of every model evaluation of the full schedule (heun and
 * dpmpp_sde list two per step but the last), sigmas (one more entry;
 * doubled likewise; NULL for ddim and lcm), the index of the run's first
 * evaluation (> 0 when strength < 1), and init_noise_sigma. */
const float *rb_sd_sampler_timesteps(const rb_sd_sampler *s, int *count);
const float *rb_sd_sampler_sigmas(const rb_sd_sampler *s, int *count);
int rb_sd_sampler_first_eval(const rb_sd_sampler *s);
float rb_sd_sampler_init_noise_sigma(const rb_sd_sampler *s);

/* Classifier-free guidance as diffusers computes it in float32:
 * out = uncond + scale * (cond - uncond). out may alias either input. */
void rb_sd_cfg_guidance(float *out, const float *uncond, const float *cond, size_t n, float scale);

#ifdef __cplusplus
}
#endif
#endif

/* The Stable Diffusion engine as one object and one call: a model (SD 1.x,
 * SD 2.x, SDXL, SDXL refiner; their 9-channel inpainting variants) loaded
 * from a path, and rb_sd_generate(), which runs what diffusers'
 * StableDiffusion(XL)Pipeline, its Img2Img and Inpaint pipelines do, step
 * for step (same prompt encoding, guidance batch, noise draws in the same
 * order from a torch-compatible generator, same scheduler arithmetic), so a
 * seed gives diffusers' picture to float32 rounding.
 *
 * Loading (rb_sd_model_load), by what the path is:
 *   a folder     a diffusers pipeline: model_index.json names the components
 *                (unet, vae, text_encoder, text_encoder_2, tokenizer,
 *                tokenizer_2, scheduler); weights *.safetensors or their fp16
 *                variant; SDXL refiner folders have only the second encoder.
 *   *.safetensors  an original LDM / SGM single-file checkpoint (A1111 /
 *                ComfyUI layout). The family and the structure are read from
 *                the tensors; what the tensors cannot show comes from the
 *                family's published configs:
 *                  sd1   CLIP ViT-L/14 (quick_gelu, 12 heads), UNet 8 heads
 *                        per level, GroupNorm 32, VAE scaling 0.18215,
 *                        epsilon, 512x512
 *                  sd2   OpenCLIP ViT-H/14 (gelu, 16 heads, penultimate layer:
 *                        23 of 24 layers), UNet head size 64, linear
 *                        projections, VAE scaling 0.18215; prediction: see
 *                        below
 *                  sdxl  CLIP ViT-L (penultimate layer) + OpenCLIP bigG/14
 *                        (gelu, 20 heads, projection), UNet head size 64,
 *                        addition_time_embed_dim = (label_emb input width -
 *                        bigG projection width) / 6, VAE scaling 0.13025,
 *                        epsilon, 1024x1024
 *                  sdxl-refiner  bigG only, 5 time ids (sizes, crop,
 *                        aesthetic score), otherwise as sdxl
 *                Tokenizers are the shipped OpenAI vocabulary with the
 *                family's pad token ("<|endoftext|>" for CLIP ViT-L, "!" for
 *                the OpenCLIP encoders, as the published tokenizer configs).
 *                The scheduler config is the family's (rb_sd_sched_config_family).
 *                SD 2.x prediction type cannot be read from the weights (the
 *                512 "base" and the 768 "v" checkpoints have the same tensors):
 *                RB_SD_PREDICT_AUTO takes v_prediction at 768x768, what
 *                diffusers' from_single_file does for SD 2.x (its default
 *                config is stabilityai/stable-diffusion-2-1); pass
 *                RB_SD_PREDICT_EPSILON for 512 base models. A checkpoint
 *                holding a "v_pred" tensor (the marker ComfyUI reads) is
 *                v_prediction whatever its family.
 *                opts.config_dir takes every config (and the tokenizers and
 *                the scheduler) from a diffusers folder instead, for
 *                checkpoints whose widths or group counts no rule can infer.
 *   *.gguf       a GGUF file holding the whole pipeline: `rbee convert`'s
 *                (configs, scheduler config, pad tokens and default size in
 *                rbee.sd.* keys: the folder's model exactly) or
 *                stable-diffusion.cpp's (no metadata: configs as for single
 *                files above); quantized linear weights stay quantized.
 *                opts.config_dir takes the configs from a diffusers folder.
 *                Files without text encoders (ComfyUI-GGUF's UNet-only
 *                files) are RB_E_UNSUPPORTED: rbee does not combine
 *                components from several sources.
 *
 * Generation (rb_sd_generate): txt2img without an init image; img2img with
 * one; inpainting with an init image and a mask (white = repaint): with a
 * 9-channel UNet the model input carries the mask and the masked image's
 * latents, with an ordinary UNet the latents are blended with the noised
 * image latents after every evaluation (diffusers' StableDiffusionInpaint
 * Pipeline does both). Prompts: see rb_sd_params. Classifier-free guidance
 * runs both halves in one UNet batch [uncond x batch, cond x batch]; no
 * guidance at guidance_scale <= 1 (diffusers' rule). Noise: one generator
 * (rb_torch_rng, CPU = diffusers / ComfyUI, CUDA = A1111 "GPU" seeds)
 * seeded with params.seed gives, in diffusers' order, the VAE posterior
 * samples of the init image (4-channel inpaint and img2img) and then the
 * starting noise for the whole batch (one draw), the masked image's
 * posterior sample (inpaint), then the sampler's own draws; a batch of N
 * is one N-image draw, as diffusers' num_images_per_prompt (A1111 instead
 * seeds image i with seed + i).
 *
 * Decoding: latents / scaling_factor (+ shift_factor) through the VAE, one
 * image at a time; large images are decoded in overlapping tiles
 * (rb_sd_vae_decode_tiled). Output pixels in [0, 1] = clamp(x / 2 + 0.5)
 * (diffusers' output_type "np") and 8-bit RGB = round-half-even(255 x)
 * (diffusers' numpy_to_pil).
 *
 * A model runs one generation at a time (its networks keep activation
 * buffers); several models may run on different threads. */
#ifndef RBEE_SD_PIPELINE_H
#define RBEE_SD_PIPELINE_H

#include "rbee/backend.h"
#include "rbee/image.h"
#include "rbee/sd_mmdit.h"
#include "rbee/sd_model.h"
#include "rbee/sd_rng.h"
#include "rbee/sd_sampler.h"
#include "rbee/sd_t5.h"
#include "rbee/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- models */

typedef enum rb_sd_arch {
    RB_SD_ARCH_SD1 = 0,     /* CLIP ViT-L, last hidden state */
    RB_SD_ARCH_SD2,         /* OpenCLIP ViT-H, last hidden state (of 23 layers) */
    RB_SD_ARCH_SDXL,        /* CLIP ViT-L + OpenCLIP bigG penultimate layers, pooled bigG, 6 time ids */
    RB_SD_ARCH_SDXL_REFINER, /* OpenCLIP bigG only, 5 time ids (with the aesthetic score) */
    RB_SD_ARCH_SD3,          /* Stable Diffusion 3 / 3.5: CLIP-L + CLIP-G (+ T5), MMDiT, 16-channel VAE */
    RB_SD_ARCH_COUNT_
} rb_sd_arch;

/* "sd1", "sd2", "sdxl", "sdxl-refiner", "sd3". */
const char *rb_sd_arch_name(rb_sd_arch a);

/* Components to load (rb_sd_model_opts.components). A generation needs the
 * text encoders and the UNet; the VAE decoder to produce pixels; the VAE
 * encoder for img2img / inpainting. */
enum {
    RB_SD_LOAD_TEXT = 1u << 0,
    RB_SD_LOAD_UNET = 1u << 1,
    RB_SD_LOAD_VAE_DECODER = 1u << 2,
    RB_SD_LOAD_VAE_ENCODER = 1u << 3,
    RB_SD_LOAD_ALL = 0xFu
};

typedef enum rb_sd_predict_opt {
    RB_SD_PREDICT_AUTO = 0, /* the folder's scheduler config; single files: see the top of this file */
    RB_SD_PREDICT_EPSILON,
    RB_SD_PREDICT_V,
    RB_SD_PREDICT_SAMPLE,
} rb_sd_predict_opt;

/* "auto", "epsilon" (alias eps), "v" (alias v_prediction), "sample". */
rb_status rb_sd_predict_parse(const char *name, rb_sd_predict_opt *out, rb_error *err);

typedef struct rb_sd_model_opts {
    rb_dtype weight_dtype;  /* RB_F32 (0), RB_F16 or RB_BF16 for matrices (see rb_sd_load_opts) */
    const char *variant;    /* folders: NULL / "" = "<name>.safetensors" first, "fp16" = the fp16 file first */
    unsigned components;    /* RB_SD_LOAD_* bits; 0 = RB_SD_LOAD_ALL */
    const char *config_dir; /* single files: configs, tokenizers and scheduler from this diffusers folder */
    rb_sd_predict_opt prediction;
    const char *vocab_path; /* single files without config_dir: OpenAI's bpe_simple_vocab_16e6.txt.gz;
                               NULL = the copy shipped in models/clip (rbee/data_path.h) */
    rb_dtype act_dtype;     /* activations between ops: RB_F32 (0), RB_F16 or RB_BF16 (rb_unet_set_act_dtype) */
    bool no_t5;             /* SD3: leave the T5 text encoder out; its part of the context is zeros, as
                               diffusers' text_encoder_3=None gives (less memory, weaker prompt following) */
} rb_sd_model_opts;

/* Zeroes o: f32, every component, automatic prediction. */
void rb_sd_model_opts_init(rb_sd_model_opts *o);

typedef struct rb_sd_model rb_sd_model;

/* Loads a model from path (folder, .safetensors, .gguf) onto be (which must
 * outlive the model). opts may be NULL. Errors name the file and what is
 * wrong: RB_E_NOT_FOUND (no such path or component), RB_E_FORMAT (a
 * malformed or inconsistent component, e.g. a UNet whose cross-attention
 * width differs from the text encoders'), RB_E_UNSUPPORTED. */
rb_status rb_sd_model_load(const char *path, rb_backend *be, const rb_sd_model_opts *opts, rb_sd_model **out,
                           rb_error *err);

/* The bundled default model, what the SD worker and `rbee txt2img` load
 * without a model argument: $RBEE_DEFAULT_SD_MODEL when set (an error if it
 * does not exist), else models/default-sd under the data folder
 * (rb_data_path: the installed share/rbee of this executable's prefix, or
 * the source tree) when it holds a diffusers pipeline (model_index.json),
 * else the first .gguf file in it. Writes the path to buf; RB_E_NOT_FOUND
 * with a message saying where it looked when there is none. */
rb_status rb_sd_default_model(char *buf, size_t len, rb_error *err);

/* Random weights (deterministic in seed, scaled so activations stay finite)
 * at the published shapes of "sd15" (SD 1.5), "sd21" (SD 2.1 768-v), "sdxl"
 * (SDXL base 1.0), "sd3m" (SD3-medium: MMDiT, CLIP-L/G, T5-XXL, 16-channel
 * VAE, FlowMatchEuler shift 3) or "sd35m" (SD3.5-medium), for benchmarks
 * without a download; the SD3 models' T5 has no tokenizer and encodes every
 * prompt as the empty prompt (opts->no_t5 leaves it out). opts as for
 * rb_sd_model_load (config_dir, variant, prediction and vocab_path: the
 * shipped vocabulary is used when vocab_path is NULL and it exists, else
 * the model has no tokenizer and rb_sd_generate refuses prompts). */
rb_status rb_sd_model_create_random(const char *preset, rb_backend *be, const rb_sd_model_opts *opts, uint64_t seed,
                                    rb_sd_model **out, rb_error *err);
/* Random weights (as above) at the configs of a diffusers SD3 pipeline
 * folder (model_index.json with the transformer, vae, text_encoder,
 * text_encoder_2 and text_encoder_3 config.json files and the three
 * tokenizers; no weights are read): benchmarks of other SD3 shapes, and the
 * random-model path at a tiny size. Other pipelines: RB_E_UNSUPPORTED. */
rb_status rb_sd_model_create_random_dir(const char *dir, rb_backend *be, const rb_sd_model_opts *opts, uint64_t seed,
                                        rb_sd_model **out, rb_error *err);

void rb_sd_model_free(rb_sd_model *m);

typedef struct rb_sd_model_info {
    rb_sd_arch arch;
    const char *source;       /* "diffusers", "single-file" or "random" */
    const char *name;         /* file name without extension, or the folder's name (A1111's "Model:") */
    rb_sd_prediction prediction;
    int default_width, default_height; /* diffusers: unet sample_size x 8 */
    int64_t unet_in_channels;          /* 9: an inpainting UNet */
    int64_t cross_attention_dim;
    int n_text_encoders;
    int latent_channels, vae_scale;    /* 4, 8 */
    float vae_scaling_factor, vae_shift_factor;
    bool force_zeros_for_empty_prompt; /* SDXL: a NULL negative prompt gives zero embeddings */
    unsigned components;               /* RB_SD_LOAD_* loaded */
    rb_sd_sampler_kind default_sampler; /* the scheduler class's sampler, else euler */
    rb_sd_schedule default_schedule;
    size_t weight_bytes;
} rb_sd_model_info;

void rb_sd_model_get_info(const rb_sd_model *m, rb_sd_model_info *info);
const rb_sd_sched_config *rb_sd_model_sched_config(const rb_sd_model *m);
/* The networks, for benchmarks and tests (NULL when not loaded). Text
 * encoder i in concatenation order: SD 1.x / 2.x / refiner have one, SDXL
 * two (CLIP ViT-L, then bigG). */
rb_unet *rb_sd_model_unet(rb_sd_model *m);
/* SD3's denoiser (NULL for the UNet families). */
rb_mmdit *rb_sd_model_mmdit(rb_sd_model *m);
/* SD3's T5 encoder (NULL when left out or for the UNet families). */
rb_t5 *rb_sd_model_t5(rb_sd_model *m);
rb_vae *rb_sd_model_vae(rb_sd_model *m);
rb_clip_text *rb_sd_model_text_encoder(rb_sd_model *m, int i);
rb_backend *rb_sd_model_backend(rb_sd_model *m);
/* Replaces the model's scheduler configuration (e.g. a family's published
 * one, rb_sd_sched_config_family, for a single-file SDXL-Turbo checkpoint,
 * whose tensors look like SDXL's); the default sampler follows it. */
rb_status rb_sd_model_set_sched_config(rb_sd_model *m, const rb_sd_sched_config *c, rb_error *err);
/* Replaces the model's VAE with the one in a diffusers vae/ folder
 * (config.json + diffusion_pytorch_model[.fp16].safetensors), loaded with
 * opts' dtypes (opts may be NULL); its own scaling factor is used, as a
 * diffusers pipeline given vae= does. RB_E_FORMAT when its latent channels
 * or scale differ from the model's. */
rb_status rb_sd_model_set_vae(rb_sd_model *m, const char *dir, const rb_sd_model_opts *opts, rb_error *err);

/* ---------------------------------------------------------------- parameters */

typedef enum rb_sd_prompt_mode {
    /* diffusers: BOS + the first 75 tokens + EOS, padded; the rest is cut. */
    RB_SD_PROMPT_TRUNCATE = 0,
    /* AUTOMATIC1111: the prompt is split in 75-token chunks
     * (rb_clip_chunk_prompt: comma backtracking 20, BREAK), each chunk
     * encoded as its own 77-token row, the rows' embeddings concatenated on
     * the token axis (77 x chunks tokens of context). The negative and the
     * positive prompt are padded to the same number of chunks with chunks
     * of the empty prompt (A1111's "pad prompt/negative prompt to be same
     * length"). The tokenizer of an OpenCLIP encoder treats "!" as text
     * there (open_clip's tokenizer, which A1111 uses). With emphasis on,
     * "(word:1.2)", "(word)" x1.1, "[word]" / 1.1 weight their tokens and,
     * per chunk, as A1111's "Original" emphasis: z = the chunk's embedding
     * (77 x dim); m = mean(z); z = z x weight[token]; z = z x (m / mean(z))
     * (means over all 77 x dim values, in double here). SDXL's pooled
     * embedding is the first chunk's, unweighted. SD3 models truncate in
     * this mode too (no chunks, no emphasis). */
    RB_SD_PROMPT_A1111,
} rb_sd_prompt_mode;

typedef enum rb_sd_tiling {
    /* tiles when the image has more than 4x the model's default pixel count */
    RB_SD_TILING_AUTO = 0,
    RB_SD_TILING_ON,  /* tiles whenever the latents exceed one tile */
    RB_SD_TILING_OFF,
} rb_sd_tiling;

#define RB_SD_MAX_SIDE 4096     /* width and height limit (pixels) */
#define RB_SD_MAX_PIXELS (4096 * 4096)
#define RB_SD_MAX_BATCH 64
#define RB_SD_MAX_STEPS 1000
#define RB_SD_MAX_GUIDANCE 100.0f

typedef struct rb_sd_params {
    const char *prompt;          /* UTF-8, required ("" is a valid prompt) */
    /* NULL = diffusers' negative_prompt=None: zero embeddings where the model
     * says force_zeros_for_empty_prompt (SDXL), else the empty prompt's.
     * "" is encoded as the empty prompt (diffusers: only None zeroes). */
    const char *negative_prompt;
    const char *prompt_2, *negative_prompt_2; /* SDXL's second encoder; NULL = prompt / negative_prompt */
    int width, height;           /* 0: the init image's size, else the model's default; multiples of 8 */
    int steps;                   /* num_inference_steps, 1..RB_SD_MAX_STEPS (before strength) */
    float guidance_scale;        /* 0..RB_SD_MAX_GUIDANCE; <= 1: no classifier-free guidance */
    const char *sampler;         /* "euler", "euler_a", "dpmpp_2m_karras", ... (rb_sd_sampler_spec_parse);
                                    NULL: the model's default */
    const char *schedule;        /* NULL: the one in sampler (or default); else overrides it */
    double eta;                  /* < 0: the sampler's default */
    uint64_t seed;
    rb_torch_rng_kind rng;       /* RB_TORCH_RNG_CPU (0), RB_TORCH_RNG_CPU_LIBM, RB_TORCH_RNG_CUDA */
    const float *latents;        /* NULL, or batch x latent_channels x h x w starting noise used instead of the
                                    generator's draw (diffusers' latents= argument); with an init image below
                                    strength 1 it is the noise added to the image latents (diffusers' inpaint
                                    pipeline would start from it alone there) */
    int clip_skip;               /* diffusers' clip_skip: 0 = none; k: SD 1.x/2.x final_layer_norm(hidden
                                    state -(k+1)), SDXL hidden state -(k+2). A1111's "Clip skip" is k + 1 */
    rb_sd_prompt_mode prompt_mode;
    bool emphasis;               /* RB_SD_PROMPT_A1111 only */
    int batch;                   /* images, 1..RB_SD_MAX_BATCH */
    double strength;             /* img2img / inpaint, (0, 1]; 0 = default: 0.8 img2img, 1.0 inpaint */
    const rb_image *init_image;  /* img2img / inpaint (8-bit, 1, 3 or 4 channels; alpha ignored), at the
                                    output size: not resized (see the CLI for the rule) */
    const rb_image *mask;        /* inpaint: white (>= 128 after conversion to gray) = repaint, same size */
    /* SDXL micro-conditioning; 0 = diffusers' defaults (original and target
     * size = the output size, crop 0) */
    int original_width, original_height, target_width, target_height, crop_left, crop_top;
    float aesthetic_score, negative_aesthetic_score; /* refiner; 0 = 6.0 and 2.5 */
    rb_sd_tiling vae_tiling;
    int vae_tile;                /* tile side in latent pixels, >= 8; 0 = the model's default size / 8 */
    bool skip_decode;            /* latents only (rb_sd_output.latents), no VAE decode */
    int max_sequence_length;     /* SD3: tokens of the T5 part of the context (diffusers' max_sequence_length;
                                    zeros without T5); 0 = 256 */
    /* NULL, or conditioning computed beforehand (diffusers' prompt_embeds= and
     * pooled_prompt_embeds= with their negative_ forms): used instead of
     * encoding the prompts. Its rows are [uncond, cond] with guidance,
     * [cond] without; dim and pooled_dim must be what the denoiser takes
     * (rb_sd_encode_prompt gives such a cond); time ids come from the
     * parameters. */
    const struct rb_sd_cond *cond;
} rb_sd_params;

/* Defaults: prompt "", negative NULL, size 0, 20 steps, guidance 7.5,
 * model sampler, eta default, seed 0, CPU generator, batch 1. */
void rb_sd_params_init(rb_sd_params *p);

/* ---------------------------------------------------------------- callbacks and output */

typedef struct rb_sd_step_info {
    int eval, n_evals;        /* model evaluations done (1-based) and in the run */
    int step, n_steps;        /* denoising steps complete and in the run (after strength) */
    float timestep;           /* the timestep given to the UNet at this evaluation */
    const float *latents;     /* batch x channels x h x w, after this evaluation's update (and blend) */
    const float *denoised;    /* the same shape: the clean latents this evaluation predicts
                               * (rb_sd_sampler_x0), what a preview shows */
    const float *model_in;    /* model_rows x model_channels x h x w: this evaluation's UNet input */
    int batch, channels, latent_h, latent_w;
    int model_rows, model_channels;
} rb_sd_step_info;

typedef struct rb_sd_callbacks {
    void (*progress)(void *user, int done, int total); /* after each model evaluation */
    /* after each model evaluation (previews, tests); a status other than
     * RB_OK stops the run with that status */
    rb_status (*on_step)(void *user, const rb_sd_step_info *info);
    /* checked before each model evaluation and before decoding: nonzero
     * stops the run with RB_E_CANCELLED (set it from another thread or a
     * signal handler) */
    const volatile int *cancel;
    void *user;
} rb_sd_callbacks;

typedef struct rb_sd_output {
    int count, width, height;      /* images and their size */
    float *pixels;                 /* count x height x width x 3 in [0, 1]; NULL with skip_decode */
    rb_image *images;              /* count 8-bit RGB images; NULL with skip_decode */
    float *latents;                /* count x latent_channels x h x w (the final latents, before the VAE) */
    int latent_channels, latent_h, latent_w;
    /* what ran, for the infotext */
    uint64_t seed;
    rb_sd_sampler_kind sampler;
    rb_sd_schedule schedule;
    int steps;
    float guidance_scale;
    double strength;               /* 0 for txt2img */
    bool img2img, inpaint;
    int clip_skip;
    rb_torch_rng_kind rng;
    double text_ms, denoise_ms, decode_ms; /* wall time of each stage */
    int n_evals;
} rb_sd_output;

/* Runs one generation. out is zeroed first and filled on success (free
 * with rb_sd_output_free; on failure nothing needs freeing). cb may be
 * NULL. Parameter errors are RB_E_INVALID (RB_E_RANGE for a size or count
 * over a limit) naming the parameter; an unknown sampler lists the valid
 * names. */
rb_status rb_sd_generate(rb_sd_model *m, const rb_sd_params *p, const rb_sd_callbacks *cb, rb_sd_output *out,
                         rb_error *err);
void rb_sd_output_free(rb_sd_output *o);
/* The checks rb_sd_generate makes before it starts (every parameter
 * against the model and its limits, the sampler's schedule for these
 * steps and strength), without running anything: RB_OK when a generation
 * with p would start. Errors as rb_sd_generate's. Lets a server refuse a
 * request before queueing it. */
rb_status rb_sd_check_params(const rb_sd_model *m, const rb_sd_params *p, rb_error *err);
/* Decodes the latents of a run made with p->skip_decode (out as
 * rb_sd_generate filled it) into out->pixels and out->images, exactly as
 * rb_sd_generate would have, with p->vae_tiling and p->vae_tile; sets
 * out->decode_ms. On failure the images are left unset and the latents
 * kept, so a caller whose decode ran out of device memory
 * (RB_E_NOMEM) can decode again tiled (RB_SD_TILING_ON, a smaller
 * vae_tile). RB_E_INVALID when out holds no undecoded latents,
 * RB_E_UNSUPPORTED without a VAE decoder. */
rb_status rb_sd_decode(rb_sd_model *m, const rb_sd_params *p, rb_sd_output *out, rb_error *err);

/* The conditioning rb_sd_generate feeds the UNet for these parameters
 * (batch 1): context rows x tokens x dim ([uncond, cond] with guidance,
 * [cond] without), SDXL's pooled text embeddings rows x pooled_dim and its
 * time ids rows x n_time_ids (0 otherwise). */
typedef struct rb_sd_cond {
    int rows;
    int64_t tokens, dim;
    float *context;
    int64_t pooled_dim;
    float *pooled;
    int n_time_ids;
    float time_ids[2][8];
} rb_sd_cond;
rb_status rb_sd_encode_prompt(rb_sd_model *m, const rb_sd_params *p, rb_sd_cond *out, rb_error *err);
void rb_sd_cond_free(rb_sd_cond *c);

/* Tiled VAE decode, as diffusers' AutoencoderKL.tiled_decode: latents
 * (latent_channels x h x w, host, already / scaling_factor) are cut into
 * tiles of tile x tile latent pixels (smaller at the right and bottom
 * edges) starting every step = tile - floor(tile x overlap) pixels
 * (overlap in [0, 0.5]; diffusers: tile 64 = sample_size / 8, overlap
 * 0.25, step 48); each tile is decoded alone (8x larger); in row order,
 * each tile's first e = 8 x floor(tile x overlap) pixel rows are blended
 * with the last e rows of the (already blended) tile above, then its first
 * e columns with the last e columns of the tile to its left: new = old_above
 * x (1 - y/e) + new x y/e; each tile then contributes its first 8 x step
 * rows and columns; latents within one tile are decoded whole, as
 * diffusers does. out: out_channels x H x W raw decoder output (about
 * [-1, 1]). GroupNorm statistics are per tile, so the result approximates
 * the full decode (tests/sd/test_sd_pipeline_tiled.c measures how closely). */
rb_status rb_sd_vae_decode_tiled(rb_backend *be, rb_vae *v, const float *latents, int64_t h, int64_t w, int tile,
                                 float overlap, float *out, rb_error *err);

/* AUTOMATIC1111's "parameters" text of image index of a run:
 *   <prompt>
 *   Negative prompt: <negative>            (line absent without one)
 *   Steps: 20, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7.5, Seed: 1, Size: 512x512,
 *   Model: <name>, Denoising strength: 0.6, Clip skip: 2, RNG: CPU, Batch size: 2, Batch pos: 0
 * in A1111's key order (1.9 and later): Denoising strength for img2img and
 * inpainting, Clip skip when clip_skip > 0 (A1111 counts one more), RNG for
 * the CPU generators (A1111's default is the GPU one), batch keys for
 * batches (all images share one seed here). Values holding ',' ':' or a
 * newline are JSON-quoted, as A1111 does. Sampler names: Euler, Euler a,
 * Heun, DPM++ 2M, DPM++ SDE, DDIM, LCM; schedule types: Automatic (the
 * default schedule), Karras, Exponential, SGM Uniform, Simple. *text is
 * malloc'ed. */
rb_status rb_sd_infotext(const rb_sd_model *m, const rb_sd_params *p, const rb_sd_output *o, int index, char **text,
                         rb_error *err);
/* A1111's display name of a sampler / schedule ("DPM++ 2M", "Karras"). */
const char *rb_sd_sampler_a1111_name(rb_sd_sampler_kind k);
const char *rb_sd_schedule_a1111_name(rb_sd_schedule s);

#ifdef __cplusplus
}
#endif
#endif

/* The Stable Diffusion networks (SD 1.x, SD 2.x, SDXL, 9-channel inpainting):
 * CLIP text encoders, the UNet2DConditionModel denoiser and the AutoencoderKL
 * VAE, written once against the ops of ops.h (so they run on any backend),
 * loaded from the component folders of a diffusers pipeline (config.json +
 * safetensors in f32, f16 or bf16) and matched to diffusers' float32 results.
 *
 * Tensors use ggml order (ne[0] innermost): an NCHW image batch is
 * [W, H, C, N]; a batch of token sequences is [D, T, N]. Inputs and outputs
 * are f32 tensors on the network's backend, any strides for outputs (a
 * text encoder may write straight into a channel slice of a concatenated
 * prompt embedding). Activations live in one buffer per network, sized by a
 * measuring pass and kept between calls of the same or smaller size; so a
 * network runs one call at a time (like a backend, it is not re-entrant). */
#ifndef RBEE_SD_MODEL_H
#define RBEE_SD_MODEL_H

#include "rbee/backend.h"
#include "rbee/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RB_SD_MAX_LEVELS 8

typedef struct rb_sd_load_opts {
    /* dtype of linear weights and embedding tables on the backend: RB_F32
     * (the default, 0) converts everything to f32; RB_F16 or RB_BF16 keeps
     * them half-size (converted if stored otherwise). Convolution kernels
     * follow it when it is f16 or bf16 and are f32 otherwise; biases and norm
     * weights are always f32. */
    rb_dtype weight_dtype;
    /* NULL or "": "<name>.safetensors" if present, else "<name>.fp16.safetensors";
     * "fp16": the reverse order. */
    const char *variant;
    /* dtype of the activations between ops (rb_*_set_act_dtype): RB_F32 (the
     * default, 0), RB_F16 or RB_BF16. Half precision halves the activation
     * memory and lets a GPU use its tensor cores; products still accumulate
     * in f32 and norms and softmax keep f32 statistics. Inputs and outputs
     * stay f32 tensors. */
    rb_dtype act_dtype;
} rb_sd_load_opts;

/* ---- CLIP text encoder (CLIPTextModel, CLIPTextModelWithProjection) ---- */

typedef enum rb_clip_act {
    RB_CLIP_ACT_QUICK_GELU, /* x * sigmoid(1.702 x) */
    RB_CLIP_ACT_GELU,       /* exact (erf) */
    RB_CLIP_ACT_GELU_TANH,  /* gelu_new / gelu_pytorch_tanh */
} rb_clip_act;

typedef struct rb_clip_text_config {
    int64_t vocab_size, hidden_size, intermediate_size, n_layers, n_heads, max_positions;
    int64_t projection_dim; /* width of text_embeds (with_projection) */
    bool with_projection;   /* CLIPTextModelWithProjection: text_projection, no bias */
    rb_clip_act act;
    float eps;
    /* The pooled output is taken at the first eos_id token; configs with the
     * legacy eos_token_id 2 take the position of the largest id (argmax). */
    int32_t bos_id, eos_id;
} rb_clip_text_config;

typedef struct rb_clip_text rb_clip_text;

/* Parses a CLIPTextModel(WithProjection) config.json; unsupported values
 * give RB_E_UNSUPPORTED naming the field. */
rb_status rb_clip_text_config_load(const char *path, rb_clip_text_config *cfg, rb_error *err);
/* dir: a text_encoder/ or text_encoder_2/ folder (config.json + model.safetensors).
 * Weight names with or without the "text_model." prefix are accepted. */
rb_status rb_clip_text_load(const char *dir, rb_backend *be, const rb_sd_load_opts *opts, rb_clip_text **out,
                            rb_error *err);
void rb_clip_text_free(rb_clip_text *m);
const rb_clip_text_config *rb_clip_text_get_config(const rb_clip_text *m);
size_t rb_clip_text_weight_bytes(const rb_clip_text *m);

typedef struct rb_clip_text_outputs {
    /* hidden_states[hidden_index] [hidden_size, T, B]: 0 = the embeddings,
     * i = after layer i, n_layers = the last layer (before the final
     * LayerNorm); negative counts from the end (-1 = n_layers, -2 = the
     * penultimate layer: SDXL; clip skip k: -(k + 1) in SD1.x, -(k + 2) in SDXL). */
    rb_tensor *hidden;
    int hidden_index;
    rb_tensor *last_hidden; /* [hidden_size, T, B]: final_layer_norm(hidden_states[n_layers]) */
    rb_tensor *pooled;      /* [hidden_size, B]: last_hidden at each sequence's EOS */
    rb_tensor *text_embeds; /* [projection_dim, B]: text_projection(pooled); with_projection only */
    /* true: hidden receives final_layer_norm(hidden_states[hidden_index])
     * instead (SD 1.x clip skip, as diffusers and AUTOMATIC1111 apply it). */
    bool hidden_final_norm;
} rb_clip_text_outputs;

/* ids: host memory, B sequences of T token ids (T <= max_positions; 77 in
 * the SD pipelines), already padded. Every non-NULL output is written; only
 * the layers the outputs need are run. */
rb_status rb_clip_text_encode(rb_clip_text *m, const int32_t *ids, int64_t T, int64_t B,
                              const rb_clip_text_outputs *out, rb_error *err);

/* Sets the dtype of a network's activations (see rb_sd_load_opts.act_dtype;
 * the folder loaders apply the option with these). RB_E_UNSUPPORTED for
 * other dtypes. The networks run what they are asked for; the SDXL
 * pipelines' f32 upcast of a force_upcast VAE is the pipeline's
 * (rb_sd_model_load), as in diffusers. */
rb_status rb_clip_text_set_act_dtype(rb_clip_text *m, rb_dtype dt, rb_error *err);
rb_dtype rb_clip_text_act_dtype(const rb_clip_text *m);

/* ---- UNet2DConditionModel ---- */

typedef struct rb_unet_config {
    int64_t in_channels, out_channels;
    int n_levels; /* len(block_out_channels) */
    int64_t block_out_channels[RB_SD_MAX_LEVELS];
    /* Per level (0 = full resolution). up_block_types is listed deepest
     * first in config.json; here up_cross_attn[l] is the up block of level l. */
    bool down_cross_attn[RB_SD_MAX_LEVELS], up_cross_attn[RB_SD_MAX_LEVELS];
    int n_heads[RB_SD_MAX_LEVELS];            /* num_attention_heads, else attention_head_dim (diffusers' naming) */
    int transformer_layers[RB_SD_MAX_LEVELS]; /* transformer_layers_per_block (up blocks use the same per level) */
    int layers_per_block[RB_SD_MAX_LEVELS]; /* resnets per down block (the up block of the level has one more) */
    bool mid_block; /* UNetMidBlock2DCrossAttn; false: mid_block_type null */
    int64_t cross_attention_dim;
    bool use_linear_projection; /* proj_in/out linear (SD2, SDXL) or 1x1 conv (SD1) */
    bool upcast_attention;      /* no effect in f32 */
    int norm_num_groups;
    float norm_eps;
    bool flip_sin_to_cos;
    float freq_shift;
    bool center_input_sample;
    int64_t time_embed_dim; /* time_embedding_dim, default 4 * block_out_channels[0] */
    bool time_embedding_act; /* time_embedding_act_fn "silu" (else none) */
    bool timestep_post_act;  /* timestep_post_act "silu" (else none) */
    int conv_in_kernel, conv_out_kernel;
    int downsample_padding;  /* 1: conv padding 1; 0: zero pad right/bottom by 1, conv padding 0 */
    float mid_block_scale_factor, resnet_out_scale_factor;
    /* addition_embed_type "text_time" (SDXL): time_ids through a sinusoidal
     * embedding of addition_time_embed_dim each, concatenated with the text
     * embeddings into add_embedding */
    bool add_text_time;
    int64_t addition_time_embed_dim, projection_class_embeddings_input_dim;
} rb_unet_config;

typedef struct rb_unet rb_unet;

rb_status rb_unet_config_load(const char *path, rb_unet_config *cfg, rb_error *err);
/* dir: a unet/ folder (config.json + diffusion_pytorch_model[.fp16].safetensors). */
rb_status rb_unet_load(const char *dir, rb_backend *be, const rb_sd_load_opts *opts, rb_unet **out, rb_error *err);
void rb_unet_free(rb_unet *u);
rb_status rb_unet_set_act_dtype(rb_unet *u, rb_dtype dt, rb_error *err); /* as rb_clip_text_set_act_dtype */
rb_dtype rb_unet_act_dtype(const rb_unet *u);
const rb_unet_config *rb_unet_get_config(const rb_unet *u);
size_t rb_unet_weight_bytes(const rb_unet *u);

typedef struct rb_unet_inputs {
    const rb_tensor *sample;      /* f32 [W, H, in_channels, B] */
    const float *timesteps;       /* host: B timesteps (diffusers passes them as float) */
    const rb_tensor *context;     /* f32 [cross_attention_dim, Tctx, B]: encoder_hidden_states */
    const rb_tensor *text_embeds; /* text_time: f32 [D, B] pooled text embeddings */
    const float *time_ids;        /* text_time: host, B rows of n_time_ids (SDXL: H, W, top, left, H, W) */
    int n_time_ids;
} rb_unet_inputs;

/* out: f32 [W, H, out_channels, B]. W and H need not be multiples of
 * 2^(n_levels-1): the up path resizes to each skip's size as diffusers does. */
rb_status rb_unet_forward(rb_unet *u, const rb_unet_inputs *in, rb_tensor *out, rb_error *err);
/* Activation bytes rb_unet_forward needs for these input shapes. */
rb_status rb_unet_scratch_bytes(rb_unet *u, const rb_unet_inputs *in, size_t *bytes, rb_error *err);

/* ---- AutoencoderKL ---- */

typedef struct rb_vae_config {
    int64_t in_channels, out_channels, latent_channels;
    int n_levels;
    int64_t block_out_channels[RB_SD_MAX_LEVELS];
    int layers_per_block, norm_num_groups;
    /* The pipeline's business, exposed: latents = (mean - shift) * scaling
     * when encoding, decoded from latents / scaling + shift. */
    float scaling_factor, shift_factor;
    bool has_shift_factor; /* false: shift_factor null (0) */
    bool force_upcast;     /* SDXL pipelines run it in f32 instead of f16 (the published SDXL VAE overflows f16) */
    bool mid_block_attention, use_quant_conv, use_post_quant_conv;
    /* Not from config.json: a loader's choice. true binds only the decoder
     * (and post_quant_conv); rb_vae_encode then fails with RB_E_UNSUPPORTED. */
    bool decoder_only;
} rb_vae_config;

typedef struct rb_vae rb_vae;

rb_status rb_vae_config_load(const char *path, rb_vae_config *cfg, rb_error *err);
/* dir: a vae/ folder (config.json + diffusion_pytorch_model[.fp16].safetensors). */
rb_status rb_vae_load(const char *dir, rb_backend *be, const rb_sd_load_opts *opts, rb_vae **out, rb_error *err);
void rb_vae_free(rb_vae *v);
/* as rb_clip_text_set_act_dtype */
rb_status rb_vae_set_act_dtype(rb_vae *v, rb_dtype dt, rb_error *err);
rb_dtype rb_vae_act_dtype(const rb_vae *v);
const rb_vae_config *rb_vae_get_config(const rb_vae *v);
size_t rb_vae_weight_bytes(const rb_vae *v);
/* Image pixels per latent pixel: 2^(n_levels-1) (8). */
int rb_vae_scale(const rb_vae *v);

/* latents f32 [w, h, latent_channels, B] (already / scaling_factor + shift)
 * -> image f32 [w*s, h*s, out_channels, B], raw (about [-1, 1], not clamped).
 * latents may be any strided view, e.g. one tile of a larger latent: a tiled
 * decode runs this per overlapping tile and blends the overlaps. Memory:
 * the activations of the full-resolution up block dominate (about
 * 4 x 2 x block_out_channels[0] x image pixels x 4 bytes); the mid-block
 * attention is one head over w*h tokens through rb_attention, linear in
 * the token count (a [w*h, w*h] matrix would be 1 GiB at 128x128 latents). */
rb_status rb_vae_decode(rb_vae *v, const rb_tensor *latents, rb_tensor *image, rb_error *err);
rb_status rb_vae_decode_scratch_bytes(rb_vae *v, int64_t w, int64_t h, int64_t B, size_t *bytes, rb_error *err);
/* image f32 [W, H, in_channels, B] in [-1, 1] -> mean and logvar (clamped
 * to [-30, 20]) f32 [w, h, latent_channels, B], either may be NULL; w = W/s
 * for multiples of the scale s (each downsample maps n to (n - 2) / 2 + 1, as
 * diffusers' right/bottom padding does). std = exp(logvar / 2); a posterior
 * sample is mean + std * noise. */
rb_status rb_vae_encode(rb_vae *v, const rb_tensor *image, rb_tensor *mean, rb_tensor *logvar, rb_error *err);

/* ---- TAESD: the tiny autoencoder's decoder, for fast previews ---- */

typedef struct rb_taesd rb_taesd;

/* path: an original TAESD decoder file (taesd_decoder.safetensors,
 * taesdxl_decoder.safetensors, ...), a diffusers AutoencoderTiny folder or
 * its diffusion_pytorch_model.safetensors; the layout (channels, stages) is
 * read from the tensors. opts may be NULL (f32 weights and activations). */
rb_status rb_taesd_load(const char *path, rb_backend *be, const rb_sd_load_opts *opts, rb_taesd **out,
                        rb_error *err);
void rb_taesd_free(rb_taesd *t);
int rb_taesd_latent_channels(const rb_taesd *t);
/* Image pixels per latent pixel (8 for the published decoders). */
int rb_taesd_scale(const rb_taesd *t);
/* latents f32 [w, h, latent_channels, B] as the sampler holds them (not
 * divided by the VAE's scaling factor) -> image f32 [w*s, h*s, 3, B] in
 * about [0, 1], not clamped (diffusers' AutoencoderTiny.decode returns
 * 2 x this - 1). */
rb_status rb_taesd_decode(rb_taesd *t, const rb_tensor *latents, rb_tensor *image, rb_error *err);
/* The same from and to host memory: latents batch x latent_channels x h x w,
 * image batch x 3 x (h*s) x (w*s) floats (the caller's). */
rb_status rb_taesd_decode_host(rb_taesd *t, const float *latents, int batch, int h, int w, float *image,
                               rb_error *err);

#ifdef __cplusplus
}
#endif
#endif

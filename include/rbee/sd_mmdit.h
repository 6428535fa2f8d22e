/* The MMDiT denoiser of Stable Diffusion 3 / 3.5 (diffusers'
 * SD3Transformer2DModel): patchified latents plus a cropped 2-D sin-cos
 * position table, a timestep + pooled-text embedding, joint attention blocks
 * over [image tokens, text tokens] with adaLN-Zero modulation (SD3.5's
 * optional RMS qk-norm and second, image-only attention), a final adaptive
 * norm, projection and unpatchify. It predicts the flow-matching velocity.
 *
 * Layouts (ggml order, ne[0] innermost): latents [W, H, C, B]; text tokens
 * [joint_attention_dim, T, B]; pooled text [pooled_projection_dim, B]. */
#ifndef RBEE_SD_MMDIT_H
#define RBEE_SD_MMDIT_H

#include "rbee/backend.h"
#include "rbee/sd_model.h"
#include "rbee/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RB_MMDIT_MAX_LAYERS 128

typedef struct rb_mmdit_config {
    int64_t in_channels, out_channels;
    int64_t patch_size;         /* P: a P x P stride-P patch embedding */
    int64_t sample_size;        /* the training latent size (informative) */
    int64_t pos_embed_max_size; /* M: the stored position table covers an M x M patch grid */
    int num_layers, heads;
    int64_t head_dim;           /* heads x head_dim = the model width D */
    int64_t joint_attention_dim;   /* text token width (4096 with T5) */
    int64_t caption_projection_dim; /* context_embedder's output: must equal D */
    int64_t pooled_projection_dim;  /* pooled text width (2048) */
    bool qk_norm;                   /* qk_norm "rms_norm" (eps 1e-6), else none */
    bool dual_attention[RB_MMDIT_MAX_LAYERS]; /* dual_attention_layers: attn2 in these blocks */
} rb_mmdit_config;

typedef struct rb_mmdit rb_mmdit;

/* config.json of an SD3Transformer2DModel; unsupported options are
 * RB_E_UNSUPPORTED naming the field. */
rb_status rb_mmdit_config_load(const char *path, rb_mmdit_config *cfg, rb_error *err);
/* dir: a transformer/ folder (config.json + diffusion_pytorch_model[.fp16].safetensors). */
rb_status rb_mmdit_load(const char *dir, rb_backend *be, const rb_sd_load_opts *opts, rb_mmdit **out, rb_error *err);
void rb_mmdit_free(rb_mmdit *m);
const rb_mmdit_config *rb_mmdit_get_config(const rb_mmdit *m);
size_t rb_mmdit_weight_bytes(const rb_mmdit *m);
/* Activation dtype (f32, f16 or bf16). */
rb_status rb_mmdit_set_act_dtype(rb_mmdit *m, rb_dtype dt, rb_error *err);

typedef struct rb_mmdit_inputs {
    const rb_tensor *sample;  /* f32 [W, H, in_channels, B]; W, H multiples of P, W/P and H/P <= M */
    const rb_tensor *context; /* f32 [joint_attention_dim, T, B] */
    const rb_tensor *pooled;  /* f32 [pooled_projection_dim, B] */
    const float *timesteps;   /* host [B]: the scheduler's timesteps (sigma x 1000) */
} rb_mmdit_inputs;

/* out f32 [W, H, out_channels, B]: the model's prediction. */
rb_status rb_mmdit_forward(rb_mmdit *m, const rb_mmdit_inputs *in, rb_tensor *out, rb_error *err);

#ifdef __cplusplus
}
#endif
#endif

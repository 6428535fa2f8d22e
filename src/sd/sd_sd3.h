/* Stable Diffusion 3 / 3.5 single-file checkpoints (the layout ComfyUI and
 * AUTOMATIC1111 users download: sd3_medium*.safetensors, sd3.5_*.safetensors)
 * seen through diffusers' names, as sd_ldm.h does for SD 1.x / SDXL:
 *   model.diffusion_model.*            the MMDiT (SD3Transformer2DModel names)
 *   first_stage_model.*                the 16-channel VAE (sd_ldm_map_vae)
 *   text_encoders.clip_l.transformer.* CLIPTextModelWithProjection (text_encoder)
 *   text_encoders.clip_g.transformer.* CLIPTextModelWithProjection (text_encoder_2)
 *   text_encoders.t5xxl.transformer.*  T5EncoderModel (text_encoder_3)
 * The MMDiT's fused q/k/v projections become three row views, and the two
 * modulations the original splits as (shift, scale) but diffusers as (scale,
 * shift) (the last block's context adaLN, the final layer's) become copies
 * with their halves swapped. The configs diffusers would use are derived
 * from the tensors (sd_sd3_mmdit_shape, sd_t5_shape). Text encoders a file
 * lacks (sd3_medium.safetensors has none) can be added from separate files
 * (sd_sd3_add_text); sd_sd3_require names what is still missing. */
#ifndef RBEE_SD_SD3_H
#define RBEE_SD_SD3_H

#include "sd/sd_ldm.h"

#define SD_SD3_MAX_LAYERS 64

/* SD3Transformer2DModel's config as the tensors show it. */
typedef struct sd_sd3_mmdit_shape {
    int num_layers;
    int64_t width;                  /* num_attention_heads * attention_head_dim */
    int num_attention_heads;        /* 0: not derivable (no qk-norm and a width that is no multiple of 64) */
    int64_t attention_head_dim;     /* 0 likewise */
    int64_t caption_projection_dim; /* context_embedder's output */
    int64_t joint_attention_dim;    /* context_embedder's input (the T5 / CLIP context width) */
    int64_t pooled_projection_dim;  /* y_embedder's input (CLIP-L + CLIP-G pooled widths) */
    int64_t pos_embed_max_size;     /* sqrt of pos_embed's positions */
    int patch_size;
    int64_t in_channels, out_channels;
    int64_t time_proj_dim;          /* t_embedder's input (256) */
    int64_t ff_inner;               /* mlp hidden width (4 * width in the published models) */
    bool qk_norm;                   /* "rms_norm": ln_q / ln_k weights (SD3.5) */
    int n_dual;                     /* dual_attention_layers (SD3.5 medium: attn2 in x_block) */
    int dual_attention_layers[SD_SD3_MAX_LAYERS];
} sd_sd3_mmdit_shape;

/* T5EncoderModel's config as the tensors show it (the values the tensors
 * cannot show, relative_attention_max_distance and the epsilon, are the
 * published T5 v1.1's: 128 and 1e-6). */
typedef struct sd_t5_shape {
    bool present;
    int n_layers;
    int64_t d_model, d_ff, d_kv, vocab;
    int n_heads, n_buckets;
    bool gated;            /* wi_0 / wi_1 (gated-gelu, T5 v1.1), else wi (relu) */
    int64_t max_distance;  /* 128 */
} sd_t5_shape;

typedef enum sd_sd3_part {
    SD_SD3_MMDIT = 1u << 0,
    SD_SD3_VAE = 1u << 1,
    SD_SD3_CLIP_L = 1u << 2,
    SD_SD3_CLIP_G = 1u << 3,
    SD_SD3_T5 = 1u << 4,
} sd_sd3_part;

typedef struct sd_sd3 {
    unsigned present;        /* SD_SD3_* mapped */
    sd_name_map mmdit, t5;
    sd_ldm ldm;              /* vae, text1 = CLIP-L, text2 = CLIP-G (and their shapes) */
    sd_sd3_mmdit_shape mmdit_shape;
    sd_t5_shape t5_shape;
} sd_sd3;

/* Whether the tensors are an SD3 checkpoint: an MMDiT's joint_blocks under
 * "model.diffusion_model." or without a prefix. */
bool sd_sd3_detect(const sd_tensor_list *ckpt);
/* Builds the tables of the components the file has (the data must outlive
 * s). RB_E_FORMAT naming the problem when the names are not SD3 or a
 * component is inconsistent (missing or misshapen tensors). */
rb_status sd_sd3_build(const sd_tensor_list *ckpt, sd_sd3 *s, rb_error *err);
void sd_sd3_free(sd_sd3 *s);
/* Adds one text encoder from a separate file (ComfyUI's clip_l.safetensors,
 * clip_g.safetensors, t5xxl_fp16.safetensors: transformers' names with or
 * without the single file's prefix). part: SD_SD3_CLIP_L, _CLIP_G or _T5;
 * RB_E_INVALID if s has that encoder already. */
rb_status sd_sd3_add_text(sd_sd3 *s, sd_sd3_part part, const sd_tensor_list *file, const char *label, rb_error *err);
/* RB_E_NOT_FOUND naming each of the parts in `need` that s lacks and the
 * tensor prefix it looked for; label names the file. */
rb_status sd_sd3_require(const sd_sd3 *s, unsigned need, const char *label, rb_error *err);

/* Internal to sd_sd3*.c. */
rb_status sd_sd3_map_mmdit(const sd_tensor_list *ckpt, const char *prefix, sd_name_map *m, sd_sd3_mmdit_shape *sh,
                           rb_error *err);
/* name must be in m with the ggml-order shape ne0..ne{nd-1} (nd <= 3);
 * RB_E_FORMAT "<what>: <name> is missing / has shape [..], expected [..]". */
rb_status sd_sd3_need(const sd_name_map *m, const char *what, const char *name, int nd, int64_t ne0, int64_t ne1,
                      int64_t ne2, rb_error *err);
rb_status sd_sd3_map_t5(const sd_tensor_list *ckpt, const char *prefix, sd_name_map *m, sd_t5_shape *sh, rb_error *err);

#endif

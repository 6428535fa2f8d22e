/* Single-file Stable Diffusion checkpoints as AUTOMATIC1111 and ComfyUI
 * users have them (the original LDM / SGM tensor names, one file for the
 * UNet, the VAE and the text encoders) seen through diffusers' names: for
 * each component a table from the diffusers name of a tensor to the stored
 * tensor, or to a derived one where the layouts differ (OpenCLIP's fused
 * q/k/v projection split into rows, its text projection transposed). The
 * family (SD 1.x, SD 2.x, SDXL, SDXL refiner) and the structure the names
 * reveal (levels, resnets per level, attention levels, transformer depths,
 * channels, inpainting inputs) are detected from the tensors. */
#ifndef RBEE_SD_LDM_H
#define RBEE_SD_LDM_H

#include "formats/name_index.h"
#include "rbee/safetensors.h"
#include "rbee/sd_model.h"

typedef enum sd_family {
    SD_FAMILY_SD1 = 1,   /* CLIP ViT-L text encoder, conv projections */
    SD_FAMILY_SD2,       /* OpenCLIP ViT-H (penultimate layer), linear projections */
    SD_FAMILY_SDXL,      /* CLIP ViT-L + OpenCLIP bigG, text_time conditioning */
    SD_FAMILY_SDXL_REFINER, /* OpenCLIP bigG only */
} sd_family;

const char *sd_family_name(sd_family f); /* "sd1", "sd2", "sdxl", "sdxl-refiner" */

/* The stored tensors of a checkpoint: a safetensors file's (sd_tensor_list_st)
 * or a GGUF file's, as name, dtype, ggml-order shape and data. */
typedef struct sd_tensor_list {
    const rb_st_tensor *t;
    int64_t n;
    rb_st_tensor *owned; /* freed by sd_tensor_list_free when the list made a copy */
} sd_tensor_list;

/* The tensors of an open safetensors set (s must outlive the list). */
rb_status sd_tensor_list_st(const rb_st_set *s, sd_tensor_list *out, rb_error *err);
void sd_tensor_list_free(sd_tensor_list *l);

/* Diffusers name -> tensor, for one component. */
typedef struct sd_name_map {
    char **names;           /* owned */
    rb_st_tensor *tensors;  /* stored tensors, or derived ones (name = the diffusers name) */
    size_t n, cap;
    rb_name_index index;
    void **owned;           /* data of derived tensors that are copies */
    size_t n_owned, cap_owned;
} sd_name_map;

const rb_st_tensor *sd_name_map_find(const sd_name_map *m, const char *name);
/* Frees the names, derived copies and index (m is zeroed). */
void sd_name_map_free(sd_name_map *m);

typedef struct sd_ldm_unet_shape {
    int n_levels;
    int layers_per_block;
    int64_t channels[RB_SD_MAX_LEVELS];
    bool attention[RB_SD_MAX_LEVELS];   /* levels with transformer blocks */
    int depth[RB_SD_MAX_LEVELS];        /* transformer blocks per attention */
    int mid_depth;
    bool linear_projection;
    int64_t in_channels, out_channels, context_dim, adm_in_channels; /* adm: 0 without label_emb */
} sd_ldm_unet_shape;

typedef struct sd_ldm_vae_shape {
    int n_levels, layers_per_block;
    int64_t channels[RB_SD_MAX_LEVELS];
    int64_t latent_channels;
    bool has_encoder;
} sd_ldm_vae_shape;

typedef struct sd_ldm_text_shape {
    bool present;
    bool open_clip;            /* stored in OpenCLIP's layout */
    int n_layers;              /* layers in the diffusers model (SD 2.x drops OpenCLIP's last one) */
    int64_t hidden, intermediate, vocab, positions, projection; /* projection 0: none */
} sd_ldm_text_shape;

typedef struct sd_ldm {
    sd_family family;
    sd_name_map unet, vae, text1, text2; /* text1: CLIP-L (SD1, SDXL); text2: OpenCLIP (SD2, SDXL, refiner) */
    sd_name_map t5;                      /* random SD3 models only (their MMDiT is in unet) */
    sd_ldm_unet_shape unet_shape;
    sd_ldm_vae_shape vae_shape;
    sd_ldm_text_shape text1_shape, text2_shape;
} sd_ldm;

/* Builds the tables from a checkpoint's tensors (whose data must outlive l).
 * RB_E_FORMAT when the names are not a Stable Diffusion checkpoint or a
 * component is inconsistent (missing blocks, odd shapes), naming what. */
rb_status sd_ldm_build(const sd_tensor_list *ckpt, sd_ldm *l, rb_error *err);
void sd_ldm_free(sd_ldm *l);

/* Internal to sd_ldm*.c: adds name -> tensor (the tensor is copied; its
 * name is replaced by the diffusers one). RB_E_FORMAT on a duplicate. */
rb_status sd_name_map_add(sd_name_map *m, const char *name, const rb_st_tensor *t, rb_error *err);
/* Adds a tensor whose data m now owns (a transposed copy). */
rb_status sd_name_map_add_owned(sd_name_map *m, const char *name, const rb_st_tensor *t, void *data, rb_error *err);
rb_status sd_ldm_map_unet(const sd_tensor_list *ckpt, const char *prefix, sd_ldm *l, rb_error *err);
rb_status sd_ldm_map_vae(const sd_tensor_list *ckpt, const char *prefix, sd_ldm *l, rb_error *err);
/* HF layout (text_model.*) under prefix. */
rb_status sd_ldm_map_clip_hf(const sd_tensor_list *ckpt, const char *prefix, sd_name_map *m, sd_ldm_text_shape *s,
                             rb_error *err);
/* OpenCLIP layout under prefix; drop_last: SD 2.x keeps all but the last layer. */
rb_status sd_ldm_map_open_clip(const sd_tensor_list *ckpt, const char *prefix, bool drop_last, sd_name_map *m,
                               sd_ldm_text_shape *s, rb_error *err);

#endif

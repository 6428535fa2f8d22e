/* `rbee convert` and `rbee quantize` for Stable Diffusion: a diffusers
 * pipeline folder (unet/, vae/, text_encoder[_2]/, scheduler/, tokenizer[_2]/)
 * or a single-file LDM / SGM checkpoint (.safetensors) to one GGUF file in
 * the original LDM names (model.diffusion_model.*, first_stage_model.*,
 * cond_stage_model.* for SD 1.x / 2.x, conditioner.embedders.* for SDXL),
 * the layout stable-diffusion.cpp reads and ComfyUI-GGUF takes the UNet of,
 * with general.architecture "sd1" / "sdxl" and rbee.sd.* keys holding every
 * config value the loader needs to rebuild the networks exactly
 * (sd_gguf_meta.c). Tensors stream one at a time (memory ~ one tensor).
 * An SD3 / SD3.5 single file goes to the SD3 converter (sd_sd3_gguf.h),
 * which keeps its original names; config_dir is then an SD3 folder.
 *
 * dtypes, for a target type T:
 *   linear weights (2-D: attention q/k/v/out, feed-forward, projections,
 *     time and label embeddings, OpenCLIP's fused in_proj and text_projection)
 *                         T, or f16 where rows are not whole T blocks
 *   convolution kernels (4-D, the 1x1 ones too: LDM stores SD 1.x's
 *     proj_in/out and the VAE attention that way, rows of one element)
 *                         f32 or bf16 for T = f32 or bf16, else f16
 *   token embedding tables  T when T is a float type, else f16
 *   norms, biases, position embeddings (what the loader keeps in f32)  f32
 * so a T = f16 file loads (with f16 weights) into exactly the tensors the
 * folder gives when loaded with f16 weights.
 *
 * Two layout choices a diffusers folder needs: OpenCLIP encoders (SD 2.x's
 * text_encoder, SDXL's text_encoder_2) are written in OpenCLIP's names with
 * q/k/v fused into in_proj and text_projection transposed (x @ P), as the
 * published checkpoints store them; and since SD 2.x checkpoints carry
 * OpenCLIP's last layer, which diffusers drops (SD 2.x conditions on the
 * penultimate layer), a placeholder last layer of zeros is appended: all
 * zero weights and biases make a pre-norm residual layer the identity, so a
 * reader that runs it (or skips it, as ours and stable-diffusion.cpp do)
 * gets the same result. */
#ifndef RBEE_SD_CONVERT_H
#define RBEE_SD_CONVERT_H

#include "convert/convert.h"
#include "rbee/safetensors.h"
#include "sd/sd_gguf.h"

/* A diffusers pipeline folder: <path>/unet/config.json exists. */
bool sd_convert_is_pipeline(const char *path);
/* A GGUF file holding a Stable Diffusion model (general.architecture sd1 /
 * sdxl, rbee.sd.family, or no architecture and SD tensor names). */
bool sd_convert_is_sd_gguf(const char *path);

/* input: a pipeline folder or a single-file checkpoint. config_dir (single
 * files only, may be NULL): a pipeline folder whose component configs,
 * scheduler config and tokenizer pad tokens describe the checkpoint (as
 * diffusers' from_single_file(config=...)); without it the configs are the
 * family's published ones with the sizes read from the tensors. Unknown
 * tensors of a folder are RB_E_FORMAT naming them; the output appears
 * atomically (written to OUT.part, renamed). */
rb_status sd_convert_to_gguf(const char *input, const char *out_path, const rb_convert_opts *opts,
                             const char *config_dir, rb_convert_stats *stats, rb_error *err);

/* The configs of a pipeline folder's components (unet required; vae,
 * text_encoder, text_encoder_2 when present), its family (from the UNet:
 * text_time = SDXL, or the refiner without text_encoder; linear projections
 * = SD 2.x; else SD 1.x), scheduler config and tokenizer pad tokens. c is
 * zeroed first; free it with sd_gguf_configs_free also on failure. */
rb_status sd_convert_folder_configs(const char *dir, sd_gguf_configs *c, rb_error *err);

/* Requantizes an SD GGUF file to opts->type with the dtype rules above (by
 * each tensor's name and logical shape; ComfyUI-GGUF's flattened tensors
 * are written in their original shape, which their comfy.gguf.orig_shape.*
 * keys, kept like every key but general.file_type, still describe). */
rb_status sd_requantize_gguf(const char *in_path, const char *out_path, const rb_convert_opts *opts,
                             rb_convert_stats *stats, rb_error *err);

/* ---- internal to sd_convert*.c ---- */

/* What a stored tensor is, for its dtype (see above). */
typedef enum sdc_class { SDC_F32, SDC_MAT, SDC_EMB, SDC_CONV } sdc_class;
sdc_class sdc_class_of(const char *ldm_name, int n_dims);
/* The dtype of a tensor of class c with rows of ne0 elements for target t;
 * *fallback tells a linear weight that could not take t. */
rb_dtype sdc_dtype(sdc_class c, rb_dtype t, int64_t ne0, bool *fallback);

/* LDM names of diffusers names (false: not a name of that component). */
bool sdc_unet_name(const rb_unet_config *c, const char *name, char *out, size_t cap);
/* *to_conv: a 2-D attention weight LDM stores as a 1x1 convolution. */
bool sdc_vae_name(const rb_vae_config *c, const char *name, char *out, size_t cap, bool *to_conv);

/* One output tensor: its LDM name, shape, and how its values are made. */
typedef enum sdc_op {
    SDC_COPY,      /* src[0] */
    SDC_CAT3,      /* src[0..2] stacked along the outer dimension (OpenCLIP in_proj) */
    SDC_TRANSPOSE, /* src[0] [D, P] (ggml) -> [P, D]: a linear weight as OpenCLIP's x @ P */
    SDC_ZERO,      /* zeros (the placeholder last OpenCLIP layer of SD 2.x) */
} sdc_op;

typedef struct sdc_entry {
    char *name;
    sdc_op op;
    const rb_st_tensor *src[3];
    int n_dims;
    int64_t ne[RB_MAX_DIMS];
} sdc_entry;

typedef struct sdc_plan {
    sdc_entry *e;
    size_t n, cap;
} sdc_plan;

/* src: 3 tensors for SDC_CAT3, 1 for SDC_COPY and SDC_TRANSPOSE, none (NULL) for SDC_ZERO. */
rb_status sdc_plan_add(sdc_plan *p, const char *name, sdc_op op, const rb_st_tensor *const *src, int n_dims,
                       const int64_t *ne, rb_error *err);
void sdc_plan_free(sdc_plan *p);
/* Writes the plan with cfg's metadata to out_path. */
rb_status sdc_write(const sdc_plan *p, const sd_gguf_configs *cfg, const char *out_path, const char *name,
                    const rb_convert_opts *opts, rb_convert_stats *stats, rb_error *err);

#endif

/* Internal to the model loaders (sd_load*.c) and the pipeline
 * (sd_pipeline*.c): the rb_sd_model object, the loader sources, the
 * published configurations of the model families, the enumeration of a
 * network's diffusers tensors (for random weights), and the pipeline's
 * stages. */
#ifndef RBEE_SD_PIPELINE_INTERNAL_H
#define RBEE_SD_PIPELINE_INTERNAL_H

#include "rbee/clip_tokenizer.h"
#include "rbee/safetensors.h"
#include "rbee/sd_mmdit.h"
#include "rbee/sd_pipeline.h"
#include "rbee/sd_t5.h"
#include "sd/sd_ldm.h"

#define SD_MAX_ENC 2

#define SDP_TRY(expr)                                                                                          \
    do {                                                                                                       \
        rb_status sdp_s_ = (expr);                                                                             \
        if (sdp_s_ != RB_OK) return sdp_s_;                                                                    \
    } while (0)

/* One text encoder with its tokenizer, in concatenation order. */
typedef struct sd_text_slot {
    rb_clip_tokenizer *tok;
    rb_clip_text *enc;             /* NULL when the text encoders were not loaded */
    rb_clip_text_config cfg;
    bool open_clip;                /* OpenCLIP family (pad "!"): "!" is text in A1111 chunking */
    char comp[16];                 /* diffusers component folder: text_encoder or text_encoder_2 */
} sd_text_slot;

struct rb_sd_model {
    rb_sd_arch arch;
    rb_backend *be;
    const char *source;            /* "diffusers", "single-file", "random" */
    char name[256];
    int n_enc;
    sd_text_slot enc[SD_MAX_ENC];
    bool has_unet_cfg, has_vae_cfg;
    rb_unet_config unet_cfg;
    rb_vae_config vae_cfg;
    rb_unet *unet;
    rb_vae *vae;
    bool has_mmdit_cfg;            /* SD3: the MMDiT instead of the UNet */
    rb_mmdit_config mmdit_cfg;
    rb_mmdit *mmdit;
    bool sd3_has_t5;               /* the folder has text_encoder_3 */
    rb_t5_text t5;                 /* SD3's T5 encoder and tokenizer (enc NULL: not loaded, zeros instead) */
    rb_sd_sched_config sched;
    rb_sd_sampler_kind default_sampler;
    rb_sd_schedule default_schedule;
    int default_w, default_h;
    bool force_zeros;              /* force_zeros_for_empty_prompt */
    unsigned components;           /* RB_SD_LOAD_* loaded */
    /* memory the networks may point into: a single file's tensors and the
     * derived tensors of its name tables; random weights */
    rb_st_set *ckpt;
    sd_ldm *ldm;
    struct sd_sd3 *sd3;            /* an SD3 single file's name tables (sd_sd3.h) */
    void **blobs;
    size_t n_blobs;
};

/* ---- sd_load.c: the model object and the checks shared by every source ---- */

rb_status sd_model_new(rb_backend *be, const char *source, const char *path, rb_sd_model **out, rb_error *err);
/* Keeps p (malloc'ed) until the model is freed; frees it on failure. */
rb_status sd_model_keep(rb_sd_model *m, void *p, rb_error *err);
/* After a source filled the configs and networks: the consistency checks
 * between components (widths, channels, time ids), the default sampler
 * and the prediction override. */
rb_status sd_model_finish(rb_sd_model *m, const rb_sd_model_opts *o, rb_error *err);
/* The effective components bitmask of opts. */
unsigned sd_opts_components(const rb_sd_model_opts *o);
/* rb_sd_load_opts of the model options. */
void sd_net_opts(const rb_sd_model_opts *o, rb_sd_load_opts *lo);
/* The arch's tokenizer(s) from the OpenAI vocabulary (vocab_path or the
 * shipped one); pads (may be NULL, or hold NULLs): each slot's pad token,
 * else "!" for OpenCLIP slots and the vocabulary's default otherwise. */
rb_status sd_model_default_tokenizers(rb_sd_model *m, const char *vocab_path, const char *const *pads, bool required,
                                      rb_error *err);
/* SD 1.x or 2.x from the first encoder's activation (OpenCLIP: gelu). */
rb_sd_arch sd_arch_of_encoder(const rb_clip_text_config *c);
/* Number of SDXL time ids of a text_time UNet (5 or 6), or 0. */
int sd_unet_time_ids(const rb_unet_config *u, int64_t pooled_dim);

/* ---- loader sources (sd_load.c holds the table) ---- */

rb_status sd_load_diffusers(const char *dir, rb_backend *be, const rb_sd_model_opts *o, rb_sd_model **out,
                            rb_error *err);
rb_status sd_load_single_file(const char *path, rb_backend *be, const rb_sd_model_opts *o, rb_sd_model **out,
                              rb_error *err);
/* GGUF files (sd_load_gguf.c; the layouts sd_gguf.h reads). */
rb_status sd_load_gguf(const char *path, rb_backend *be, const rb_sd_model_opts *o, rb_sd_model **out,
                       rb_error *err);
/* A checkpoint's tensors in the original LDM / SGM names, from any
 * container (a safetensors file above): detects the family and
 * the structure, fills the configs (from o->config_dir or the family's
 * defaults and the shapes) and builds the networks over the name tables.
 * m->ldm takes the tables; the tensors' data must outlive m (keep the
 * container in m). label names the file in messages. */
rb_status sd_load_ldm_tensors(rb_sd_model *m, const sd_tensor_list *tl, const char *label, bool has_v_pred,
                              const rb_sd_model_opts *o, rb_error *err);
/* The UNet config of a single file: the arch's published config with the
 * structure read from the tensors; SDXL's addition_time_embed_dim from
 * the label_emb input width less the pooled width, over the time ids. */
rb_status sd_unet_config_from_ldm(rb_sd_arch arch, const sd_ldm_unet_shape *sh, int64_t pooled_dim, rb_unet_config *u,
                                  rb_error *err);
/* A single file's prediction type: the option, else v for SD 2.x or a
 * v_pred marker, else the family's scheduler default. */
rb_sd_prediction sd_single_prediction(rb_sd_arch arch, bool has_v_pred, rb_sd_predict_opt opt,
                                     rb_sd_prediction family_default);
/* Everything a diffusers folder says but the weights: model_index.json
 * (pipeline class, components, force_zeros_for_empty_prompt), the configs
 * of the text encoders, UNet and VAE, the tokenizers, the scheduler config,
 * the default size (UNet sample_size x VAE scale) and the arch. Used by
 * folders and by single files with config_dir. */
rb_status sd_read_folder(rb_sd_model *m, const char *dir, rb_error *err);

/* ---- sd_load_defaults.c: the published configurations ---- */

void sd_default_clip_l(rb_clip_text_config *c);   /* CLIP ViT-L/14 text (SD 1.x, SDXL's first) */
void sd_default_clip_h(rb_clip_text_config *c);   /* OpenCLIP ViT-H/14 text, 23 layers (SD 2.x) */
void sd_default_clip_g(rb_clip_text_config *c);   /* OpenCLIP bigG/14 text with projection (SDXL) */
void sd_default_unet(rb_sd_arch a, rb_unet_config *c);
void sd_default_vae(rb_sd_arch a, rb_vae_config *c);
/* Heads of a level for a family: SD 1.x 8, else channels / 64. */
int sd_default_heads(rb_sd_arch a, int64_t channels);
int sd_default_size(rb_sd_arch a, rb_sd_prediction p);
/* sd_load_defaults_sd3.c: SD3-medium (sd35 false) or SD3.5-medium (true)
 * MMDiT; T5-XXL v1.1 encoder; SD3's 16-channel VAE; CLIP-L / bigG with
 * projections; the FlowMatchEuler scheduler (shift 3). */
void sd_default_mmdit(bool sd35, rb_mmdit_config *c);
void sd_default_t5_xxl(rb_t5_config *c);
void sd_default_vae_sd3(rb_vae_config *c);
void sd_default_clip_sd3(rb_clip_text_config *l, rb_clip_text_config *g);
rb_status sd_default_sched_sd3(rb_sd_sched_config *c, rb_error *err);

/* ---- sd_load_random.c: every diffusers tensor of a network ---- */

/* Called once per tensor: diffusers name and torch-order shape. */
typedef rb_status (*sd_tensor_fn)(void *ctx, const char *name, int nd, const int64_t *shape, rb_error *err);
rb_status sd_enum_unet(const rb_unet_config *c, sd_tensor_fn fn, void *ctx, rb_error *err);
rb_status sd_enum_vae(const rb_vae_config *c, sd_tensor_fn fn, void *ctx, rb_error *err);
rb_status sd_enum_clip(const rb_clip_text_config *c, sd_tensor_fn fn, void *ctx, rb_error *err);
rb_status sd_enum_mmdit(const rb_mmdit_config *c, sd_tensor_fn fn, void *ctx, rb_error *err);
rb_status sd_enum_t5(const rb_t5_config *c, sd_tensor_fn fn, void *ctx, rb_error *err);

/* An SD3 model with random weights (sd_load_random.c) at these configs
 * (clip: CLIP-L, CLIP-G, both with projections), named label. tok_dir: a
 * pipeline folder whose tokenizer, tokenizer_2 and tokenizer_3 are used;
 * NULL: the shipped CLIP vocabulary (opts->vocab_path) and no T5
 * tokenizer (prompts encode as the empty prompt). */
typedef struct sd3_random_cfg {
    rb_mmdit_config mmdit;
    rb_t5_config t5;
    rb_vae_config vae;
    rb_clip_text_config clip[2];
} sd3_random_cfg;
rb_status sd_random_sd3(const sd3_random_cfg *c, const char *label, rb_backend *be, const rb_sd_model_opts *opts,
                        const char *tok_dir, uint64_t seed, rb_sd_model **out, rb_error *err);

/* ---- the pipeline's stages ---- */

/* Parameters resolved against the model (sd_pipeline_params.c). */
typedef struct sd_run_plan {
    int width, height, lw, lh, batch;
    int latent_ch, unet_in;
    bool cfg, img2img, inpaint, nine_channel;
    double strength;
    rb_sd_sampler_kind kind;
    rb_sd_schedule schedule;
    int n_time_ids;
    float time_ids[2][8]; /* [uncond, cond] */
} sd_run_plan;

rb_status sd_plan(const rb_sd_model *m, const rb_sd_params *p, bool for_generation, sd_run_plan *plan, rb_error *err);

/* ---- SD3 (sd_load_sd3.c, sd_load_sd3_single.c, sd_pipeline_sd3.c) ---- */

/* An SD3 / SD3.5 single file's networks (its tensors in tl, kept in
 * m->ckpt) with o->config_dir's configs, tokenizers and scheduler; the
 * components the file lacks (text encoders, VAE) come from that folder. */
rb_status sd_load_sd3_single(rb_sd_model *m, const sd_tensor_list *tl, const char *path, const rb_sd_model_opts *o,
                             rb_error *err);
/* The same for an SD3 GGUF file (general.architecture "sd3"). */
rb_status sd_load_sd3_gguf(rb_sd_model *m, const char *path, const rb_sd_model_opts *o, rb_error *err);

/* model_index.json of a StableDiffusion3Pipeline (j) in dir: the CLIP
 * encoders and tokenizers, the transformer, VAE and scheduler configs. */
struct sd_cfg;
rb_status sd_read_sd3_folder(rb_sd_model *m, const struct sd_cfg *j, const char *dir, rb_error *err);
/* true when model_index.json at path names a StableDiffusion3 pipeline. */
bool sd_folder_is_sd3(const char *index_path);
/* The transformer of an SD3 folder. */
rb_status sd_load_sd3_transformer(rb_sd_model *m, const char *dir, const rb_sd_load_opts *lo, rb_error *err);
/* Its T5 encoder and tokenizer (text_encoder_3, tokenizer_3). */
rb_status sd_load_sd3_t5(rb_sd_model *m, const char *dir, const rb_sd_load_opts *lo, rb_error *err);
/* SD3's consistency checks (sd_model_finish). */
rb_status sd_sd3_finish(rb_sd_model *m, rb_error *err);
/* SD3's prompt conditioning: [CLIP-L | CLIP-G] penultimate states zero-padded
 * to the joint width, then the T5 part (zeros without T5) on the token
 * axis; pooled = [CLIP-L | CLIP-G] text embeddings. */
rb_status sd_encode_cond_sd3(rb_sd_model *m, const rb_sd_params *p, const sd_run_plan *plan, rb_sd_cond *out,
                             rb_error *err);
/* Encodes B rows of 77 ids with text encoder slot (sd_pipeline_text.c):
 * hidden (B x 77 x D) and, when pooled is non-NULL, the text embeds (B x P). */
rb_status sd_run_text_encoder(rb_sd_model *m, int slot, const int32_t *ids, int64_t B, int clip_skip, float *hidden,
                              float *pooled, rb_error *err);

/* Prompt conditioning (sd_pipeline_text.c): host arrays as in rb_sd_cond. */
rb_status sd_encode_cond(rb_sd_model *m, const rb_sd_params *p, const sd_run_plan *plan, rb_sd_cond *out,
                         rb_error *err);

/* Images (sd_pipeline_image.c). */
/* 8-bit image (1, 3 or 4 channels) -> 3 x H x W floats in [-1, 1] (RGB, alpha dropped). */
rb_status sd_image_to_tensor(const rb_image *img, float *out, rb_error *err);
/* Mask image -> H x W floats in {0, 1}: gray >= 0.5 (of 255) is 1. */
rb_status sd_mask_to_tensor(const rb_image *img, float *out, rb_error *err);
/* VAE encode of one 3 x H x W image; *mean and *logvar malloc'ed C x h x w. */
rb_status sd_vae_encode_host(rb_backend *be, rb_vae *v, const float *image, int H, int W, float **mean,
                             float **logvar, rb_error *err);
/* Raw decode 3 x H x W -> pixels H x W x 3 in [0, 1] and 8-bit RGB. */
void sd_postprocess(const float *raw, int H, int W, float *pixels, uint8_t *rgb);

/* Full (untiled) decode of one image: latents C x h x w, already scaled. */
rb_status sd_vae_decode_host(rb_backend *be, rb_vae *v, const float *latents, int64_t h, int64_t w, float *out,
                             rb_error *err);

#endif

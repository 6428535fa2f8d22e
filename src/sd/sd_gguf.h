/* Stable Diffusion models in GGUF files: the layouts users have, seen
 * through diffusers' names (sd_ldm.h) with the configs that rebuild the
 * networks, and the loader of the networks from such a file.
 *
 * Layouts read (see sd_gguf.c for how each is recognised):
 *   - full checkpoints with the original LDM / SGM names, as
 *     stable-diffusion.cpp's `sd convert` writes them (no metadata at all;
 *     model.diffusion_model.*, first_stage_model.*, cond_stage_model.* or
 *     conditioner.embedders.*; with --convert-name the OpenCLIP encoders in
 *     its internal text_model.* names with a fused in_proj are accepted too);
 *     a file holding only some of the components (a diffusion model alone);
 *   - UNet-only files as ComfyUI-GGUF (city96) publishes them: the UNet's LDM
 *     names without "model.diffusion_model.", general.architecture "sd1"
 *     (SD 1.x and 2.x) or "sdxl" (SDXL and the refiner), tensors whose last
 *     dimension is not a multiple of 256 stored flattened to rows of 256
 *     with their torch shape in comfy.gguf.orig_shape.<name> (an int array;
 *     quantized by the patched llama-quantize over that flat run, which
 *     stays usable as rows where the original rows are whole blocks, and is
 *     dequantized at load otherwise); UNets in diffusers' names as well;
 *   - the files `rbee convert` writes (sd_convert.h): the LDM layout plus
 *     general.architecture "sd1" / "sdxl" and rbee.sd.* keys holding every
 *     config value of the networks (sd_gguf_meta.c), the scheduler config and
 *     the tokenizers' pad tokens.
 * Tensors keep their stored dtype (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,
 * q5_1, q2_K..q6_K); an OpenCLIP text_projection stored quantized is
 * dequantized here (the LDM mapping transposes it). Files without rbee.sd.*
 * keys get the configs of their family's published models, with every
 * width, depth and channel count read from the tensors (sd_gguf_derive.c);
 * a model those do not fit needs its configs given (a diffusers folder's:
 * sd_gguf_load's config_dir, sd_gguf_use_configs).
 * A malformed or mismatched file is an RB_E_FORMAT / RB_E_UNSUPPORTED error
 * naming the problem, never a crash. */
#ifndef RBEE_SD_GGUF_H
#define RBEE_SD_GGUF_H

#include "rbee/gguf.h"
#include "rbee/sd_model.h"
#include "sd/sd_ldm.h"
#include "sd/sd_weights.h"

/* The networks' configs of one file and what else a pipeline needs. */
typedef struct sd_gguf_configs {
    sd_family family;
    bool has_unet, has_vae, has_text, has_text_2;
    /* text: the pipeline's text_encoder (CLIP ViT-L in SD 1.x / SDXL, OpenCLIP
     * ViT-H in SD 2.x); text_2: SDXL's OpenCLIP bigG (text_encoder_2, also
     * the refiner's only encoder) */
    rb_unet_config unet;
    rb_vae_config vae;
    rb_clip_text_config text, text_2;
    bool exact;           /* from rbee.sd.* keys (else the family's defaults with the tensors' sizes) */
    int sample_size[2];   /* unet/config.json sample_size (latent height, width; the default image size / 8), 0: unknown */
    char *scheduler_json; /* scheduler_config.json text, or NULL */
    char *pad_token[2];   /* pad token text of tokenizer / tokenizer_2, or NULL */
} sd_gguf_configs;

void sd_gguf_configs_free(sd_gguf_configs *c);
/* A deep copy (the strings duplicated). */
rb_status sd_gguf_configs_copy(const sd_gguf_configs *from, sd_gguf_configs *to, rb_error *err);

/* An open SD GGUF file (a shared sd_tensor_owner: networks loaded from it hold
 * references while their weights point into the mapping). */
typedef struct sd_gguf {
    sd_tensor_owner src; /* first member */
    rb_gguf *g;
    char label[256];     /* the path, for messages */
    char arch[32];       /* general.architecture, "" when absent */
    bool unet_only;      /* the UNet's names without a prefix (ComfyUI-GGUF) */
    sd_tensor_list list; /* every tensor, NUL-terminated names (renamed where needed), logical shapes */
    sd_ldm ldm;          /* diffusers name -> tensor per component (text1 = CLIP-L, text2 = OpenCLIP) */
    sd_gguf_configs cfg;
    /* RB_E_UNSUPPORTED when the file has no configs and the family's do not
     * fit its tensors (cfg_msg says why): loading fails until
     * sd_gguf_use_configs gives the right ones */
    rb_status cfg_status;
    char cfg_msg[RB_ERROR_MSG_MAX];
    char **names;        /* owned names of list */
    void **owned;        /* owned tensor data (dequantized copies) */
    size_t n_owned, cap_owned;
} sd_gguf;

/* Opens and maps path (or an in-memory image that must outlive the result:
 * the fuzz target's entry). The result holds one reference; release it with
 * sd_gguf_unref. */
rb_status sd_gguf_open(const char *path, sd_gguf **out, rb_error *err);
rb_status sd_gguf_open_memory(const void *data, size_t size, sd_gguf **out, rb_error *err);
void sd_gguf_unref(sd_gguf *f);
/* Replaces the file's configs by c's (e.g. a diffusers folder's, as
 * sd_convert_folder_configs reads them) for the components the file holds,
 * which c must all describe; the family must be the one the text encoders
 * show (a file without text encoders takes c's). The scheduler config and
 * pad tokens are taken when c has them. */
rb_status sd_gguf_use_configs(sd_gguf *f, const sd_gguf_configs *c, rb_error *err);

/* Components, as a pipeline names them. */
enum {
    SD_GGUF_TEXT = 1u << 0,        /* text_encoder */
    SD_GGUF_TEXT_2 = 1u << 1,      /* text_encoder_2 */
    SD_GGUF_UNET = 1u << 2,
    SD_GGUF_VAE = 1u << 3,         /* the VAE, encoder and decoder */
    SD_GGUF_VAE_DECODER = 1u << 4, /* (to sd_gguf_load, without SD_GGUF_VAE) the VAE's decoder only */
    SD_GGUF_IF_PRESENT = 1u << 5,  /* (to sd_gguf_load) skip the asked-for components the file lacks */
};
/* The name map of one component of l for family f (text_encoder is l->text1
 * but in SD 2.x, where it is the OpenCLIP l->text2); NULL when empty. */
const sd_name_map *sd_gguf_component_map(const sd_ldm *l, sd_family f, unsigned component);

/* ComfyUI-GGUF's comfy.gguf.orig_shape.<name> (the torch shape of a tensor
 * stored flattened) applied to t, the file's entry for name; nothing when
 * the key is absent; RB_E_FORMAT when it is malformed or its element count
 * differs. */
rb_status sd_gguf_orig_shape(const rb_gguf *g, const char *name, rb_st_tensor *t, rb_error *err);

/* Tensor i of g as a safetensors-style entry t (its data in place in the
 * file, ComfyUI-GGUF's orig_shape applied); *name is a new copy of its name
 * (the caller frees it; t->name points to it). RB_E_FORMAT for a name that
 * holds a NUL byte. */
rb_status sd_gguf_tensor_entry(const rb_gguf *g, int64_t i, char **name, rb_st_tensor *t, rb_error *err);

/* ---- metadata (sd_gguf_meta.c) ---- */

/* general.architecture for a family: "sd1" (SD 1.x and 2.x, as ComfyUI-GGUF
 * names both) or "sdxl". */
const char *sd_gguf_arch_name(sd_family f);
/* Writes rbee.sd.family and the configs present in c (rbee.sd.unet.*,
 * rbee.sd.vae.*, rbee.sd.text_encoder[_2].*, rbee.sd.scheduler.config,
 * rbee.sd.tokenizer[_2].pad_token, rbee.sd.unet.sample_size [h, w]). */
rb_status sd_gguf_write_configs(rb_gguf_writer *w, const sd_gguf_configs *c, rb_error *err);
/* Reads them back (has_* from which keys are present); every value is range
 * checked as the config.json parsers check it. RB_E_NOT_FOUND when the file
 * has no rbee.sd.family. */
rb_status sd_gguf_read_configs(const rb_gguf *g, sd_gguf_configs *c, rb_error *err);

/* ---- configs of files without metadata (sd_gguf_derive.c) ---- */

/* The configs of the components l maps, for family f: the published models'
 * values (heads, norm groups, activations, scaling factors, ...) with the
 * sizes the tensors show (channels, levels, resnets per level, attention
 * levels and depths, context and embedding widths, layers). */
rb_status sd_gguf_derive_configs(const sd_ldm *l, sd_family f, sd_gguf_configs *c, rb_error *err);
/* The family a UNet's tensors show when no text encoder tells it: SDXL
 * (add_embedding; the refiner when its context is 1280 wide) or SD 1.x / 2.x
 * (linear projections or a 1024-wide context: SD 2.x). */
sd_family sd_gguf_unet_family(const sd_name_map *unet);

/* ---- loading the networks (sd_gguf_load.c) ---- */

typedef struct sd_gguf_model {
    /* family, exact (the file carried rbee.sd.* configs), the configs of
     * the loaded networks (has_* set for those), the scheduler config text
     * and the pad tokens (NULL: the file has none; use the family's) */
    sd_gguf_configs cfg;
    rb_clip_text *text, *text_2; /* text_encoder, text_encoder_2 */
    rb_unet *unet;
    rb_vae *vae;
} sd_gguf_model;

/* Loads the networks of a GGUF file onto be. config_dir (may be NULL): a
 * diffusers pipeline folder whose configs (and scheduler config and pad
 * tokens) replace the file's, as sd_gguf_use_configs does; needed for files
 * without rbee.sd.* keys whose widths the family's published configs do not
 * fit. components: SD_GGUF_* bits that must be present (RB_E_NOT_FOUND
 * naming the one missing; with SD_GGUF_IF_PRESENT those the file has), or 0
 * for every component the file has. opts as
 * for the folder loaders (weight_dtype f32 / f16 / bf16 for what is not kept
 * quantized, act_dtype applied to every network; variant unused); NULL for
 * the defaults. On failure out is zeroed and nothing stays loaded. */
rb_status sd_gguf_load(const char *path, const char *config_dir, rb_backend *be, const rb_sd_load_opts *opts,
                       unsigned components, sd_gguf_model *out, rb_error *err);
/* The same from an open file (takes its own references). */
rb_status sd_gguf_load_from(sd_gguf *f, rb_backend *be, const rb_sd_load_opts *opts, unsigned components,
                            sd_gguf_model *out, rb_error *err);
void sd_gguf_model_free(sd_gguf_model *m);

#endif

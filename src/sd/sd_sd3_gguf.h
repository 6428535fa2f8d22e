/* SD3 / SD3.5 in rbee's SD GGUF files. `rbee convert` writes an SD3 single
 * file (sd_sd3.h) to GGUF keeping its original names (model.diffusion_model.*
 * with fused q/k/v, first_stage_model.*, text_encoders.{clip_l,clip_g,
 * t5xxl}.transformer.*), the layout stable-diffusion.cpp and ComfyUI-GGUF
 * use for SD3, with general.architecture "sd3" and rbee.sd3.* keys holding
 * the MMDiT's and the T5 encoder's configs, including what the tensors
 * cannot show (heads where no qk-norm gives the head size, sample_size,
 * T5's relative_attention_max_distance, the CLIP encoders' heads). Reading
 * maps the file's tensors with the single-file tables (sd_sd3_build), so the
 * networks see diffusers' names; every config key must agree with the
 * tensors. Files without the keys (ComfyUI-GGUF's SD3 / SD3.5 files:
 * original names without "model.diffusion_model.", tensors flattened with
 * comfy.gguf.orig_shape.*) are read with the configs the tensors show and
 * the published models' values (sd_sd3_meta_make without a folder).
 *
 * dtypes for a target type T (as the SD converter's rules, sd_convert.h):
 * 2-D linear weights (the MMDiT's q/k/v, projections, MLPs, modulations and
 * embedders; the encoders' attention and feed-forward matrices) T, or f16
 * where rows are not whole T blocks; convolution kernels (the patch
 * embedding, the VAE) f32 / bf16 for T = f32 / bf16, else f16; embedding
 * tables (CLIP token embeddings, T5's shared) T when T is a float type, else
 * f16; norms, biases, pos_embed, the CLIP position tables and T5's
 * relative_attention_bias f32. Quantized rows stay whole through the
 * mapping: q/k/v are row ranges of the fused matrix and the swapped
 * modulation halves whole rows. */
#ifndef RBEE_SD_SD3_GGUF_H
#define RBEE_SD_SD3_GGUF_H

#include "convert/convert.h"
#include "rbee/gguf.h"
#include "sd/sd_sd3.h"
#include "sd/sd_weights.h"

/* Config values the tensors do not show. */
typedef struct sd_sd3_meta {
    int mmdit_heads;            /* num_attention_heads */
    int64_t mmdit_head_dim;     /* attention_head_dim */
    int64_t sample_size;        /* transformer/config.json sample_size (the default latent side) */
    int64_t t5_max_distance;    /* relative_attention_max_distance */
    int clip_heads[2];          /* CLIP-L, CLIP-G num_attention_heads (0: no such encoder) */
} sd_sd3_meta;

/* The values of m: from the tensors (heads from qk-norm or the published head
 * size 64; sample_size 128, max distance 128 as the published SD3 models),
 * replaced by config_dir's (a diffusers SD3 folder: transformer/,
 * text_encoder[_2,_3]/config.json) where given. RB_E_UNSUPPORTED when a
 * value is neither derivable nor given. */
rb_status sd_sd3_meta_make(const sd_sd3 *s, const char *config_dir, sd_sd3_meta *m, rb_error *err);

/* Converts an SD3 single file or an SD3 diffusers folder (input) to a GGUF
 * file (written atomically: OUT.part, renamed); config_dir (single files
 * only, may be NULL) as for sd_sd3_meta_make. A single file's tensors
 * outside the known prefixes are skipped (a warning on opts->log); a
 * folder's unknown tensors are RB_E_FORMAT naming them. */
rb_status sd_sd3_convert_to_gguf(const char *input, const char *out_path, const rb_convert_opts *opts,
                                 const char *config_dir, rb_convert_stats *stats, rb_error *err);

/* A diffusers SD3 folder: transformer/config.json and no unet/. */
bool sd_sd3_is_folder(const char *dir);

/* An open SD3 GGUF file: a shared tensor owner (networks' weights hold
 * references), the tables and the configs. */
typedef struct sd_sd3_gguf {
    sd_tensor_owner src; /* first member */
    rb_gguf *g;
    char label[256];
    sd_tensor_list list;
    char **names;
    void **owned; /* f32 copies of flattened quantized tensors */
    size_t n_owned, cap_owned;
    sd_sd3 sd3;
    sd_sd3_meta meta;
} sd_sd3_gguf;

/* Whether g is an SD3 file: general.architecture "sd3". */
bool sd_sd3_gguf_is(const rb_gguf *g);
rb_status sd_sd3_gguf_open(const char *path, sd_sd3_gguf **out, rb_error *err);
rb_status sd_sd3_gguf_open_memory(const void *data, size_t size, sd_sd3_gguf **out, rb_error *err);
void sd_sd3_gguf_unref(sd_sd3_gguf *f);
/* Weights of one part (SD_SD3_MMDIT, _VAE, _CLIP_L, _CLIP_G, _T5) of the file
 * in diffusers' names, holding a reference on f; RB_E_NOT_FOUND when the
 * file lacks the part. Close them with sd_weights_close (the network
 * constructors take them over). */
rb_status sd_sd3_gguf_weights(sd_sd3_gguf *f, sd_sd3_part part, rb_backend *be, const rb_sd_load_opts *opts,
                              sd_weights *ws, rb_error *err);
/* The name map of one part of s (NULL when absent): the lookup context
 * for sd_weights_init / _init_source with sd_sd3_lookup. */
const sd_name_map *sd_sd3_part_map(const sd_sd3 *s, sd_sd3_part part);
const rb_st_tensor *sd_sd3_lookup(const sd_weights *w, const char *name);

/* ---- internal to sd_sd3_*.c ---- */
/* rbee.sd3.* keys: every config value of the parts s holds. */
rb_status sd_sd3_meta_write(rb_gguf_writer *w, const sd_sd3 *s, const sd_sd3_meta *m, rb_error *err);
/* Reads them back into m, checking each against the tensors' values in s;
 * RB_E_FORMAT naming a key that is missing, mistyped or disagrees. */
rb_status sd_sd3_meta_read(const rb_gguf *g, const sd_sd3 *s, sd_sd3_meta *m, rb_error *err);
/* The dtype of a stored SD3 tensor for target t (is_mat: a linear weight;
 * fallback: one that could not take t) */
rb_dtype sd_sd3_gguf_dtype(const char *name, int n_dims, int64_t ne0, rb_dtype t, bool *is_mat, bool *fallback);

#endif

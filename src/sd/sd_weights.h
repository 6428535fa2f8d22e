/* Weights of one diffusers component (unet/, vae/, text_encoder/...): the
 * safetensors file(s) of the folder, the lookup of a tensor by its diffusers
 * name, and binding: shape check, dtype conversion and placement on the
 * backend. Every name goes through sd_weights_find, the one function a
 * name-mapping layer (single-file LDM checkpoints, GGUF) replaces. */
#ifndef RBEE_SD_WEIGHTS_H
#define RBEE_SD_WEIGHTS_H

#include "rbee/backend.h"
#include "rbee/safetensors.h"
#include "rbee/sd_model.h"

/* What a tensor is, which decides its dtype on the backend. */
typedef enum sd_wkind {
    SD_W_F32,  /* always f32: biases, norm weights, position embeddings */
    SD_W_MAT,  /* linear weights and embedding tables: the load dtype; a stored
                * [out, in, 1, 1] 1x1-convolution kernel is accepted for [out, in] */
    SD_W_CONV, /* convolution kernels: the load dtype if f16, else f32 (rb_conv2d's kernels) */
} sd_wkind;

typedef struct sd_weights sd_weights;
/* Maps a diffusers tensor name to a stored tensor (NULL: absent). A layer
 * for other layouts (an LDM single file: "model.diffusion_model.input_blocks
 * ..." for "down_blocks..."; GGUF) sets its own, with lookup_ctx for its
 * tables; the stored tensor must then have the diffusers shape. */
typedef const rb_st_tensor *(*sd_lookup_fn)(const sd_weights *w, const char *name);

struct sd_weights {
    rb_backend *be;
    rb_st_set *st;
    bool owns_st; /* closed with the weights */
    rb_dtype mat_dtype;
    sd_lookup_fn lookup;
    void *lookup_ctx;
    char file[512]; /* for messages */
    rb_buffer **bufs;
    size_t n_bufs, cap_bufs;
    size_t bytes;
    bool wrapped; /* some placed tensor points into the mapped files */
};

/* Opens <dir>/<base>.safetensors, <base>.fp16.safetensors or their sharded
 * .safetensors.index[.fp16].json (order by opts->variant); RB_E_NOT_FOUND
 * names the files looked for. */
rb_status sd_weights_open(sd_weights *w, const char *dir, const char *base, rb_backend *be,
                          const rb_sd_load_opts *opts, rb_error *err);
/* Uses an open set (e.g. one single-file checkpoint shared by the three
 * networks, not owned) through lookup (NULL: sd_weights_find); label names
 * it in messages. */
rb_status sd_weights_init(sd_weights *w, rb_st_set *st, bool owns_st, sd_lookup_fn lookup, void *lookup_ctx,
                          const char *label, rb_backend *be, const rb_sd_load_opts *opts, rb_error *err);
/* Frees every placed buffer and closes the files (when owned). */
void sd_weights_close(sd_weights *w);
/* Closes the files where no placed tensor points into them (weights were
 * copied: not the CPU with matching dtypes). */
void sd_weights_release_files(sd_weights *w);

/* The stored tensor of a diffusers name: exact, else the known spellings of
 * the same tensor (with or without "text_model.", VAE attention
 * query/key/value/proj_attn for to_q/to_k/to_v/to_out.0). */
const rb_st_tensor *sd_weights_find(const sd_weights *w, const char *name);

/* Binds `name`, whose ggml-order shape must be ne[0..nd) (the safetensors
 * shape reversed). Missing: RB_E_FORMAT naming the tensor and the expected
 * shape, unless !required (then *present = false, out untouched). */
rb_status sd_weights_get(sd_weights *w, const char *name, sd_wkind kind, int nd, const int64_t *ne, bool required,
                         rb_tensor *out, bool *present, rb_error *err);

#endif

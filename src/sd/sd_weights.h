/* Weights of one network component (unet/, vae/, text_encoder/...): where
 * the stored tensors come from (the safetensors file(s) of a diffusers
 * folder, or a shared source such as a GGUF file or a single-file
 * checkpoint), the lookup of a tensor by its diffusers name, and binding:
 * shape and size checks, dtype conversion and placement on the backend.
 * Every name goes through one lookup function, which a name-mapping layer
 * (single-file LDM checkpoints, GGUF) replaces.
 *
 * Block-quantized stored tensors (GGUF q8_0, q4_0, q4_K, ...): a linear
 * weight whose rows are whole blocks stays quantized on the backend, since
 * rb_matmul takes quantized weights (it quantizes the activations to q8_0 /
 * q8_1 / q8_K blocks as ggml does) and the weight is the large operand.
 * Everything else is dequantized once at load: convolution kernels
 * (rb_conv2d takes f32 / f16 / bf16 kernels, and their k*k*cin rows are rarely
 * whole blocks), norms, biases and position embeddings (tiny, read by
 * elementwise ops in f32) and embedding tables (rb_get_rows reads a handful
 * of rows per prompt, so quantized storage buys no speed; dequantized they
 * take no activation-quantization error and need no quantized gather on the
 * GPU backends). */
#ifndef RBEE_SD_WEIGHTS_H
#define RBEE_SD_WEIGHTS_H

#include "rbee/backend.h"
#include "rbee/safetensors.h"
#include "rbee/sd_model.h"

/* What a tensor is, which decides its dtype on the backend. */
typedef enum sd_wkind {
    SD_W_F32,  /* always f32: biases, norm weights, position embeddings */
    SD_W_MAT,  /* linear weights: the load dtype, or their block-quantized dtype when stored quantized with rows of
                * whole blocks; a stored [out, in, 1, 1] 1x1-convolution kernel is accepted for [out, in] */
    SD_W_CONV, /* convolution kernels: the load dtype if f16 or bf16, else f32 (rb_conv2d's kernels) */
    SD_W_EMB,  /* embedding tables (rb_get_rows): the load dtype; quantized ones are dequantized */
} sd_wkind;

/* A reference-counted owner of stored tensor data that several networks'
 * weights point into (a GGUF file with its name tables): each sd_weights
 * using it holds one reference, dropped when its weights are closed or no
 * longer point into the data (sd_weights_release_files). Not thread-safe:
 * networks sharing a source are created and freed on one thread. */
typedef struct sd_tensor_owner sd_tensor_owner;
struct sd_tensor_owner {
    int refs;
    void (*destroy)(sd_tensor_owner *s); /* called when the last reference goes */
};
static inline void sd_owner_ref(sd_tensor_owner *s) {
    if (s) s->refs++;
}
static inline void sd_owner_unref(sd_tensor_owner *s) { /* NULL is fine */
    if (s && --s->refs == 0 && s->destroy) s->destroy(s);
}

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
    sd_tensor_owner *src; /* a reference held on a shared source, or NULL */
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
/* Uses the tensors of a shared source through lookup (required), taking a
 * reference on src (also on failure nothing is left to close but w). */
rb_status sd_weights_init_source(sd_weights *w, sd_tensor_owner *src, sd_lookup_fn lookup, void *lookup_ctx,
                                 const char *label, rb_backend *be, const rb_sd_load_opts *opts, rb_error *err);
/* Frees every placed buffer, closes the files (when owned) and drops the
 * source reference. */
void sd_weights_close(sd_weights *w);
/* Closes the files and drops the source reference where no placed tensor
 * points into them (weights were copied: not the CPU with matching dtypes). */
void sd_weights_release_files(sd_weights *w);

/* The stored tensor of a diffusers name: exact, else the known spellings of
 * the same tensor (with or without "text_model.", VAE attention
 * query/key/value/proj_attn for to_q/to_k/to_v/to_out.0). */
const rb_st_tensor *sd_weights_find(const sd_weights *w, const char *name);

/* Binds `name`, whose ggml-order shape must be ne[0..nd) (the safetensors
 * shape reversed). The stored bytes must match the stored shape and dtype
 * (a quantized tensor may also hold its elements as one run of whole
 * blocks, as ComfyUI-GGUF's reshaped tensors do). Missing: RB_E_FORMAT naming
 * the tensor and the expected shape, unless !required (then *present =
 * false, out untouched). */
rb_status sd_weights_get(sd_weights *w, const char *name, sd_wkind kind, int nd, const int64_t *ne, bool required,
                         rb_tensor *out, bool *present, rb_error *err);

#endif

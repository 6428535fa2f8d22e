/* The converters behind `rbee convert` and `rbee quantize`: a Hugging Face
 * folder (config.json + safetensors [+ tokenizer files]) to a GGUF file laid
 * out the way llama.cpp's convert script lays it out, and GGUF -> GGUF
 * requantization. Both stream: tensors are read, transformed, encoded and
 * written one at a time, so memory stays around one tensor. */
#ifndef RBEE_CONVERT_H
#define RBEE_CONVERT_H

#include "rbee/dtype.h"
#include "rbee/status.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Called after each tensor is written (done of total), e.g. for a progress bar. */
typedef void (*rb_convert_progress_fn)(void *ud, int64_t done, int64_t total, const char *tensor_name);

typedef struct rb_convert_opts {
    rb_dtype type;                   /* target of weight matrices (see rb_convert_type_ok) */
    const char *name;                /* general.name; NULL = folder / input name */
    FILE *log;                       /* warnings (fallbacks, skipped tensors); NULL = silent */
    rb_convert_progress_fn progress; /* may be NULL */
    void *progress_ud;
} rb_convert_opts;

typedef struct rb_convert_stats {
    int64_t n_tensors;     /* tensors written */
    int64_t n_quantized;   /* 2-D weights written in the requested type */
    int64_t n_fallback;    /* 2-D weights written as f16 because rows are not whole blocks */
    uint64_t bytes_out;    /* size of the written file */
} rb_convert_stats;

/* An rb_convert_progress_fn drawing a one-line bar on ud (a FILE *; NULL =
 * stderr); meant for terminals. */
void rb_convert_progress_bar(void *ud, int64_t done, int64_t total, const char *tensor_name);

/* Types a weight can be converted to: f32, f16, bf16, the block formats
 * q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K, and mxfp4 (llama.cpp's
 * MXFP4_MOE: the experts' stacked matrices in mxfp4, every other matrix in
 * q8_0). Expert routers (ffn_gate_inp) and vectors stay f32 whatever the type. */
bool rb_convert_type_ok(rb_dtype t);
/* Comma-separated list of those names, for messages. */
const char *rb_convert_type_list(void);
/* llama.cpp's general.file_type (enum llama_ftype) for a target type. */
uint32_t rb_convert_file_type(rb_dtype t);
/* The dtype a weight matrix (expert: a 3-D expert stack) gets for target t
 * before the fallback: t itself, except mxfp4's q8_0 for non-expert matrices. */
rb_dtype rb_convert_intended_dtype(rb_dtype t, bool expert);
/* ... and with rows of ne0 elements: that type, or f16 when ne0 is not a
 * multiple of its block size (as llama.cpp does). */
rb_dtype rb_convert_weight_dtype(rb_dtype t, int64_t ne0, bool expert);

/* hf_dir -> out_path. Unknown model_type: RB_E_UNSUPPORTED listing the
 * supported architectures; a missing or mis-shaped tensor: RB_E_FORMAT naming
 * it. The output appears atomically (written to a temporary name, renamed). */
rb_status rb_convert_hf_to_gguf(const char *hf_dir, const char *out_path, const rb_convert_opts *opts,
                                rb_convert_stats *stats, rb_error *err);

/* Requantizes every 2-D float/quantized weight of in_path (dequantize ->
 * quantize), keeps 1-D tensors as f32, copies every metadata key and updates
 * general.file_type. Warns on opts->log when a weight was already in a lossy
 * format. */
rb_status rb_quantize_gguf(const char *in_path, const char *out_path, const rb_convert_opts *opts,
                           rb_convert_stats *stats, rb_error *err);

#ifdef __cplusplus
}
#endif
#endif

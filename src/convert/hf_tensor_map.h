/* Which tensors a GGUF converted from a Hugging Face folder holds: llama.cpp
 * names, the HF tensor each one comes from, its expected shape and the
 * transform it needs, derived from the model config alone. */
#ifndef RBEE_CONVERT_HF_TENSOR_MAP_H
#define RBEE_CONVERT_HF_TENSOR_MAP_H

#include "rbee/model.h"

typedef enum cv_xform {
    CV_XF_NONE = 0,
    CV_XF_PERMUTE_Q, /* adjacent-pair rope layout, n_head heads */
    CV_XF_PERMUTE_K, /* same with n_head_kv heads */
    CV_XF_PLUS_ONE,  /* gemma norms: 1 + w */
} cv_xform;

typedef struct cv_hf_tensor {
    char gguf_name[64];
    char hf_name[128];   /* "" for generated tensors */
    const float *gen;    /* generated data (rope factors); not owned */
    int n_dims;          /* 1 or 2 */
    int64_t ne[2];       /* ggml order: ne[0] = row length */
    bool required;       /* optional ones are skipped when absent */
    cv_xform xf;
} cv_hf_tensor;

typedef struct cv_hf_map {
    cv_hf_tensor *t;
    size_t n, cap;
} cv_hf_map;

/* Fills map for cfg. rope_factors / rope_factors_long (n_rot/2 floats, may be
 * NULL) become rope_freqs.weight (llama3) or rope_factors_short/long.weight
 * (longrope). */
rb_status cv_hf_map_build(const rb_model_config *cfg, const float *rope_factors, const float *rope_factors_long,
                          cv_hf_map *map, rb_error *err);
void cv_hf_map_free(cv_hf_map *map);

#endif

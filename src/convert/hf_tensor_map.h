/* Which tensors a GGUF converted from a Hugging Face folder holds: llama.cpp
 * names, where each one's values come from in the HF files (one tensor, one
 * tensor per expert stacked into a 3-D tensor, or a strided selection of one
 * tensor), its expected shape and the transform it needs, derived from the
 * model config and, where a model may be laid out more than one way (dense
 * or expert layers, per-expert or stacked experts), from which HF tensors
 * exist. */
#ifndef RBEE_CONVERT_HF_TENSOR_MAP_H
#define RBEE_CONVERT_HF_TENSOR_MAP_H

#include "rbee/model.h"

typedef enum cv_xform {
    CV_XF_NONE = 0,
    CV_XF_PERMUTE_Q, /* adjacent-pair rope layout, n_head heads */
    CV_XF_PERMUTE_K, /* same with n_head_kv heads */
    CV_XF_PLUS_ONE,  /* gemma norms: 1 + w */
} cv_xform;

/* How an entry's values are read from its HF source(s). */
typedef enum cv_src_kind {
    CV_SRC_ONE = 0,  /* one HF tensor of exactly the entry's shape */
    CV_SRC_EXPERTS,  /* n_expert HF matrices hf_name<e>hf_suffix of [ne0, ne1], stacked along ne[2] */
    CV_SRC_GATHER,   /* out[i2][i1][i0] = src[off + i2*s[2] + i1*s[1] + i0*s[0]] (flat element index of the
                      * one HF tensor, of shape src_ne): de-interleaving and transposing stacked experts */
    CV_SRC_GENERATED /* gen (rope factors) */
} cv_src_kind;

typedef struct cv_hf_tensor {
    char gguf_name[64];
    char hf_name[128];   /* the HF tensor; CV_SRC_EXPERTS: the name up to the expert index */
    char hf_suffix[64];  /* CV_SRC_EXPERTS: the name after the expert index */
    cv_src_kind kind;
    const float *gen;    /* CV_SRC_GENERATED data; not owned */
    int n_dims;          /* 1..3 */
    int64_t ne[3];       /* ggml order: ne[0] = row length */
    bool required;       /* optional ones are skipped when absent */
    bool keep_f32;       /* a matrix written as f32 whatever the target (expert routers, as llama.cpp does) */
    cv_xform xf;
    int64_t n_expert;    /* CV_SRC_EXPERTS */
    int src_dims;        /* CV_SRC_GATHER: the source's rank and shape (ggml order) */
    int64_t src_ne[3];
    int64_t off, s[3];   /* CV_SRC_GATHER: element offset and strides */
} cv_hf_tensor;

typedef struct cv_hf_map {
    cv_hf_tensor *t;
    size_t n, cap;
} cv_hf_map;

/* Whether the HF folder holds a tensor of that name (layout probes). */
typedef bool (*cv_has_tensor_fn)(void *ud, const char *hf_name);

/* Fills map for cfg. rope_factors / rope_factors_long (n_rot/2 floats, may be
 * NULL) become rope_freqs.weight (llama3) or rope_factors_short/long.weight
 * (longrope); yarn's factors are not stored (GGUF metadata describes them).
 * has/ud answer the layout probes. */
rb_status cv_hf_map_build(const rb_model_config *cfg, const float *rope_factors, const float *rope_factors_long,
                          cv_has_tensor_fn has, void *ud, cv_hf_map *map, rb_error *err);
void cv_hf_map_free(cv_hf_map *map);

/* ---- for the map builders (hf_tensor_map.c, hf_expert_map.c) ---- */
/* Appends a CV_SRC_ONE entry of n_dims dims [ne0, ne1, ne2]. */
rb_status cv_hf_map_add(cv_hf_map *m, const char *gguf, const char *hf, int n_dims, int64_t ne0, int64_t ne1,
                        int64_t ne2, bool required, cv_xform xf, rb_error *err);
/* Layer il's router and expert stacks when the model has experts and the
 * layer is a mixture-of-experts one (*is_moe; else nothing is added). */
rb_status cv_hf_map_experts(cv_hf_map *m, const rb_model_config *cfg, int64_t il, cv_has_tensor_fn has, void *ud,
                            bool *is_moe, rb_error *err);

#endif

/* Internal to the models layer: the loaded model (config + weight tensors on
 * a backend), the weight-name tables, and helpers shared by the loaders and
 * the forward pass. */
#ifndef RBEE_MODEL_INTERNAL_H
#define RBEE_MODEL_INTERNAL_H

#include "rbee/gguf.h"
#include "rbee/json_config.h"
#include "rbee/model.h"
#include "rbee/safetensors.h"

typedef struct rb_layer_weights {
    rb_tensor attn_norm, post_attn_norm, ffn_norm, post_ffn_norm;
    rb_tensor wq, wk, wv, wqkv, wo;
    rb_tensor bq, bk, bv, bqkv, bo;
    bool has_bq, has_bk, has_bv, has_bqkv, has_bo;
    rb_tensor w_gate, w_up, w_gate_up, w_down;
} rb_layer_weights;

struct rb_model {
    rb_model_config cfg;
    rb_backend *be;
    rb_gguf *gguf;      /* when loaded from GGUF */
    rb_st_set *st;      /* when loaded from safetensors */
    char *hf_dir;       /* HF folder path */
    rb_tensor tok_embd, out_norm, output;
    rb_tensor rope_factors;      /* f32 [n_rot/2] when cfg.has_rope_factors */
    rb_tensor rope_factors_long; /* f32 [n_rot/2] when cfg.has_rope_long */
    rb_layer_weights *layers;
    /* every backend buffer the model owns (weights wrapped or uploaded, and
     * derived tensors such as gemma's (1 + w) norms) */
    rb_buffer **bufs;
    size_t n_bufs, cap_bufs;
    size_t weight_bytes;
    rb_dtype main_dtype;
};

/* Fills cfg from GGUF metadata (arch-prefixed llama.cpp keys). */
rb_status rb_model_config_from_gguf(const rb_gguf *g, rb_model_config *cfg, rb_error *err);
/* Fills cfg from a parsed HF config.json (and generation_config.json if given). */
rb_status rb_model_config_from_hf(const rb_json_config *c, const rb_json_config *gen, rb_model_config *cfg,
                                  float **rope_factors, float **rope_factors_long, rb_error *err);

/* llama3-style per-dimension rope factors (theta_i is divided by factor_i). */
void rb_rope_llama3_factors(float theta, int n_rot, float factor, float low_freq_factor, float high_freq_factor,
                            int64_t orig_ctx, float *out);

/* Tracks a buffer for freeing with the model. */
rb_status rb_model_own_buffer(rb_model *m, rb_buffer *buf);

rb_status rb_model_bind_gguf(rb_model *m, rb_error *err);
rb_status rb_model_bind_hf(rb_model *m, rb_error *err);

#endif

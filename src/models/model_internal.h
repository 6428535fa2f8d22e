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
    bool qkv_one; /* q, k and v are one matrix wqkv in this layer (the file's, or joined at load where the
                   * three share a type: a k-quant mix joins the layers whose attn_v is not promoted) */
    rb_tensor bq, bk, bv, bqkv, bo;
    bool has_bq, has_bk, has_bv, has_bqkv, has_bo;
    rb_tensor w_gate, w_up, w_gate_up, w_down;
    /* q/k norms ([head_dim] per head, or the whole projection), attention sinks [n_head] */
    rb_tensor q_norm, k_norm, sinks;
    bool has_qk_norm, has_sinks;
    /* mixture of experts (moe true): router [E rows of n_embd] (+ bias [E]), the
     * experts stacked [n_embd, n_ff_exp, E] (gate, up) and [n_ff_exp, n_embd, E]
     * (down), with optional per-expert biases [n, E] */
    bool moe, has_exp_bias;
    rb_tensor router, router_b, gate_exps, up_exps, down_exps, gate_exps_b, up_exps_b, down_exps_b;
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
    rb_fuse_proj fuse_proj; /* rb_model_load_opts */
    bool eager_decode;      /* caches created now decode eagerly (rb_model_set_eager_decode) */
};

/* Fills cfg from GGUF metadata (arch-prefixed llama.cpp keys). */
rb_status rb_model_config_from_gguf(const rb_gguf *g, rb_model_config *cfg, rb_error *err);
/* Fills cfg from a parsed HF config.json (and generation_config.json if given). */
rb_status rb_model_config_from_hf(const rb_json_config *c, const rb_json_config *gen, rb_model_config *cfg,
                                  float **rope_factors, float **rope_factors_long, rb_error *err);

/* llama3-style per-dimension rope factors (theta_i is divided by factor_i). */
void rb_rope_llama3_factors(float theta, int n_rot, float factor, float low_freq_factor, float high_freq_factor,
                            int64_t orig_ctx, float *out);

/* transformers' yarn inverse frequencies as divisors of theta_i (n_rot/2
 * values) and its attention factor (cfg: rope_theta, n_rot, rope_yarn_*, rope_orig_ctx). */
void rb_rope_yarn_factors(const rb_model_config *cfg, float *out, float *attn_factor);
/* Whether layer il attends through the sliding window (swa_pattern's rule). */
bool rb_layer_uses_window(const rb_model_config *cfg, int64_t il);

/* Tracks a buffer for freeing with the model. */
rb_status rb_model_own_buffer(rb_model *m, rb_buffer *buf);

/* Binds layer il's router and experts when the model has experts and the
 * layer is a mixture-of-experts one (*is_moe; model_experts.c). */
rb_status rb_model_bind_experts(rb_model *m, bool hf, int il, rb_layer_weights *L, bool *is_moe, rb_error *err);

rb_status rb_model_bind_gguf(rb_model *m, rb_error *err);
rb_status rb_model_bind_hf(rb_model *m, rb_error *err);

#endif

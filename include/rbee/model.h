/* Decoder-only transformer models (Llama 2/3, TinyLlama, Mistral, Qwen2,
 * Gemma, Gemma 2, Phi-3, Qwen3, Qwen3-MoE, Gemma 3, OLMo 2, gpt-oss, Mixtral), written once against the ops of ops.h and loaded
 * from a GGUF file (llama.cpp's names and metadata) or a Hugging Face folder
 * (config.json + safetensors). The model holds weights on one backend; a
 * KV cache holds one sequence's keys and values; rb_model_forward runs a
 * batch of consecutive tokens of that sequence. */
#ifndef RBEE_MODEL_H
#define RBEE_MODEL_H

#include "rbee/backend.h"
#include "rbee/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rb_arch {
    RB_ARCH_LLAMA = 0, /* Llama 2/3/3.1/3.2, TinyLlama */
    RB_ARCH_MISTRAL,
    RB_ARCH_QWEN2,
    RB_ARCH_GEMMA,
    RB_ARCH_GEMMA2,
    RB_ARCH_PHI3,
    RB_ARCH_QWEN3,    /* per-head q/k norms */
    RB_ARCH_QWEN3MOE, /* qwen3 with mixture-of-experts feed-forwards */
    RB_ARCH_GEMMA3,   /* gemma3 text: local/global layers with their own rope bases, q/k norms */
    RB_ARCH_OLMO2,    /* norms after each sublayer, q/k norms over the whole projection */
    RB_ARCH_GPTOSS,   /* attention sinks, alternating windows, yarn, clamped-SwiGLU experts */
    RB_ARCH_MIXTRAL,  /* llama with mixture-of-experts feed-forwards (GGUF: "llama" with experts) */
    RB_ARCH_COUNT_
} rb_arch;

const char *rb_arch_name(rb_arch a); /* GGUF general.architecture value */
/* Comma-separated list of supported architectures, for error messages. */
const char *rb_arch_supported_list(void);

typedef struct rb_model_config {
    rb_arch arch;
    int64_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    float norm_eps;
    /* rotary embedding */
    rb_rope_mode rope_mode; /* NORMAL for GGUF llama/mistral (permuted q/k), NEOX otherwise */
    int n_rot;
    float rope_theta;
    float rope_freq_scale; /* linear scaling: 1 / factor */
    float rope_attn_factor;
    bool has_rope_factors; /* per-dimension factors (llama3 / longrope short) */
    bool has_rope_long;    /* longrope: long factors used once positions reach rope_orig_ctx */
    int64_t rope_orig_ctx; /* longrope, yarn: original context length */
    float rope_yarn_factor;                    /* > 0: yarn scaling (transformers' formula), factors computed */
    float rope_yarn_beta_fast, rope_yarn_beta_slow;
    bool rope_yarn_truncate;                   /* round the ramp's ends (transformers' default; gpt-oss: false) */
    /* variants */
    bool tied_embeddings;
    bool qkv_bias;         /* qwen2 */
    bool gelu_act;         /* gelu-tanh MLP (gemma) instead of silu */
    bool embd_scale;       /* multiply embeddings by sqrt(n_embd) (gemma) */
    bool post_norms;       /* gemma2: post-attention and post-ffn norms */
    bool fused_qkv;        /* phi3: one qkv projection (in every layer) */
    int n_layer_qkv_one;   /* layers whose q, k and v run as one matrix (all of them when fused_qkv; a fused
                            * load of a k-quant mix joins only the layers where the three share a type) */
    bool fused_gate_up;    /* phi3: one gate_up projection */
    int sliding_window;    /* 0 = none */
    int swa_pattern;       /* 0: all layers use the window; n: layer il does iff il % n < n - 1 (llama.cpp's
                            * rule: 2 = even layers, gemma2 and gpt-oss; 6 = five local then one global, gemma3) */
    float attn_softcap;    /* 0 = none */
    float final_softcap;   /* 0 = none */
    float attn_scale;      /* 1/sqrt(head_dim) or query_pre_attn_scalar^-1/2 */
    /* newer architectures */
    int qk_norm;           /* RMSNorm on q and k before the rope: 0 none, 1 per head (qwen3, gemma3),
                            * 2 over the whole projection (olmo2) */
    bool pre_norms;        /* norms before attention and the MLP (all but olmo2) */
    float rope_theta_swa;  /* > 0: rope base of the sliding-window layers (gemma3's rope_local_base_freq),
                            * which also ignore rope scaling */
    bool attn_sinks;       /* per-head sink logits in the attention softmax (gpt-oss) */
    int64_t n_expert, n_expert_used, n_ff_exp; /* mixture of experts (0: dense MLP everywhere) */
    bool moe_norm_topk;    /* renormalize the top-k routing weights to sum 1 */
    bool moe_topk_softmax; /* softmax over the top-k router logits (gpt-oss); else softmax, then top-k */
    bool moe_bias;         /* router and expert biases (gpt-oss) */
    float swiglu_alpha, swiglu_limit; /* limit > 0: clamped SwiGLU (gpt-oss: 1.702, 7) */
    /* special tokens known from the model files (-1 if unknown) */
    int32_t bos_id;
    int32_t eos_ids[4];
    int n_eos;
} rb_model_config;

typedef struct rb_model rb_model;

/* Whether separate q/k/v and gate/up projections are concatenated at load
 * into one matrix each (one product instead of three / two). */
typedef enum rb_fuse_proj {
    RB_FUSE_PROJ_AUTO = 0, /* where the backend copies the weights anyway (GPUs); the CPU keeps them mapped */
    RB_FUSE_PROJ_ON,       /* always (on the CPU too: tests compare both forms) */
    RB_FUSE_PROJ_OFF,      /* never */
} rb_fuse_proj;

typedef struct rb_model_load_opts {
    rb_fuse_proj fuse_proj;
} rb_model_load_opts;

/* path: a .gguf file or a folder with config.json + safetensors; opts may be
 * NULL (defaults). Unknown architectures fail with RB_E_UNSUPPORTED listing
 * the supported ones; missing or mis-shaped tensors with RB_E_FORMAT naming
 * the tensor. The environment variable RBEE_NO_GRAPH=1 (docs/ENVIRONMENT.md)
 * is read here: as rb_model_set_eager_decode(m, true). */
rb_status rb_model_load(const char *path, rb_backend *be, const rb_model_load_opts *opts, rb_model **out,
                        rb_error *err);
/* KV caches created after this call run single-token decode steps eagerly
 * with per-step shapes instead of capturing them into graphs (for
 * comparisons: rbee bench --compare-eager); false restores the default. */
void rb_model_set_eager_decode(rb_model *m, bool eager);
void rb_model_free(rb_model *m);
const rb_model_config *rb_model_get_config(const rb_model *m);
rb_backend *rb_model_backend(const rb_model *m);
/* Bytes of weights held by the model (mapped or device-resident). */
size_t rb_model_weight_bytes(const rb_model *m);
/* The most common weight dtype (e.g. q8_0) for reports. */
rb_dtype rb_model_weight_dtype(const rb_model *m);
/* The GGUF file the model was loaded from, or NULL (HF folder). Owned by the model. */
const struct rb_gguf *rb_model_gguf(const rb_model *m);
/* The folder the model was loaded from (HF), or NULL. */
const char *rb_model_hf_dir(const rb_model *m);

/* ---- KV cache: one sequence's keys/values for every layer ---- */
typedef struct rb_kv_cache rb_kv_cache;
/* dtype RB_F16 (default) or RB_F32; n_ctx slots. */
rb_status rb_kv_cache_create(rb_model *m, int64_t n_ctx, rb_dtype dtype, rb_kv_cache **out, rb_error *err);
/* n caches of n_ctx positions each in one allocation (all or none: out[0..n)
 * set, or none on error). A batched step over caches made together
 * (rb_model_forward_batch) writes their keys and values and attends to them
 * with one op per layer for the whole batch, instead of one per sequence.
 * Each is used and freed like rb_kv_cache_create's; the memory goes with the
 * last of them. */
rb_status rb_kv_cache_create_many(rb_model *m, int64_t n, int64_t n_ctx, rb_dtype dtype, rb_kv_cache **out,
                                  rb_error *err);
void rb_kv_cache_free(rb_kv_cache *kv);
int64_t rb_kv_cache_size(const rb_kv_cache *kv); /* n_ctx */
int64_t rb_kv_cache_used(const rb_kv_cache *kv); /* positions filled */
/* Forgets positions >= n (n <= used). */
void rb_kv_cache_truncate(rb_kv_cache *kv, int64_t n);
size_t rb_kv_cache_bytes(const rb_kv_cache *kv);
/* Makes dst hold the same positions as src (keys and values of src's used
 * positions, copied on the device; dst's later positions are forgotten):
 * several continuations of one prompt share its prefill. Both caches must
 * belong to the same model and have the same size and dtype (RB_E_INVALID). */
rb_status rb_kv_cache_copy(rb_kv_cache *dst, const rb_kv_cache *src, rb_error *err);
/* Makes dst hold src's first n positions (n <= rb_kv_cache_used(src)),
 * copied on the device; dst's used count becomes n, its later positions are
 * forgotten. A new prompt that starts with tokens another sequence's cache
 * already holds takes them from there instead of recomputing them. dst ==
 * src truncates. RB_E_INVALID: caches of different models, sizes or dtypes,
 * or n out of 0..used. A failed device copy leaves dst empty. */
rb_status rb_kv_cache_copy_prefix(rb_kv_cache *dst, const rb_kv_cache *src, int64_t n, rb_error *err);

/* Runs tokens[0..n) at positions used..used+n of kv and appends them to it.
 * Writes logits (f32, host memory) for the last token only (all_logits false:
 * logits has n_vocab floats) or for every token (n * n_vocab floats).
 * RB_E_RANGE if the cache is too small. Processes at most max_batch tokens
 * per pass internally (prefill in chunks). */
rb_status rb_model_forward(rb_model *m, rb_kv_cache *kv, const int32_t *tokens, int64_t n, bool all_logits,
                           float *logits, rb_error *err);

/* Runs tokens[0..n) like rb_model_forward, but writes instead of logits the
 * final hidden state of every token after the output norm (what the output
 * head multiplies): n rows of n_embd floats in host memory. For embeddings. */
rb_status rb_model_forward_hidden(rb_model *m, rb_kv_cache *kv, const int32_t *tokens, int64_t n, float *hidden,
                                  rb_error *err);

/* One decode step for n sequences at once (continuous batching): tokens[i] is
 * appended to kvs[i] at that cache's own next position. The matrix products
 * run as one batch of n rows; attention runs per sequence, or in one op for
 * the batch where the caches were made together (rb_kv_cache_create_many).
 * Writes n rows of n_vocab logits. Each KV cache may appear once; all belong
 * to m. */
rb_status rb_model_forward_batch(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, int64_t n,
                                 float *logits, rb_error *err);

/* One pass over n sequences that each bring counts[i] >= 1 new tokens
 * (tokens holds them one sequence after another, sum of counts at most
 * RB_MODEL_MAX_STEP_TOKENS): sequence i's tokens are appended to kvs[i] at its
 * own next positions, and row i of logits (n rows of n_vocab) gets the
 * logits of its last token. A mix of decode steps and prompt chunks in one
 * batch, so a serving engine can prefill a prompt piece by piece beside the
 * running streams. The products run over all the tokens at once; attention
 * runs per sequence. Each KV cache may appear once; all belong to m. */
#define RB_MODEL_MAX_STEP_TOKENS 512
rb_status rb_model_forward_seqs(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, const int64_t *counts,
                                int64_t n, float *logits, rb_error *err);

#ifdef __cplusplus
}
#endif
#endif

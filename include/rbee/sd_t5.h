/* The T5 text encoder of Stable Diffusion 3 (transformers' T5EncoderModel,
 * v1.1 "gated-gelu" and v1.0 "relu" forms) written against the core ops, so
 * it runs on any backend, and its tokenizer: the pipeline's text_encoder_3 +
 * tokenizer_3 as one object that turns a prompt into [d_model, max_len]
 * hidden states.
 *
 * Per layer: RMSNorm (no mean, no bias) -> self-attention without the
 * 1/sqrt(d) scaling plus a learned bidirectional relative position bias (the
 * table only in layer 0, shared by every layer) -> residual; RMSNorm ->
 * feed-forward (wo(gelu_tanh(wi_0 x) * wi_1 x), or wo(relu(wi x))) ->
 * residual; then the final RMSNorm. Padding tokens are attended (the SD3
 * pipeline passes no attention mask). Tensors use ggml order: a batch of
 * sequences is [d_model, T, B]. Activations may be f32 or bf16
 * (rb_sd_load_opts.act_dtype); T5 v1.1's activations are known to exceed
 * the f16 range in its larger sizes (XXL), so f16 activations are allowed
 * but not advised there. */
#ifndef RBEE_SD_T5_H
#define RBEE_SD_T5_H

#include "rbee/sd_model.h"
#include "rbee/unigram_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rb_t5_config {
    int64_t vocab_size, d_model, d_kv, d_ff, n_layers, n_heads;
    int64_t rel_buckets, rel_max_distance; /* relative_attention_num_buckets / _max_distance */
    bool gated;                            /* feed_forward_proj "gated-gelu" (true) or "relu" */
    float eps;                             /* layer_norm_epsilon */
} rb_t5_config;

typedef struct rb_t5 rb_t5;

/* Parses a T5EncoderModel / T5 config.json; unsupported values give
 * RB_E_UNSUPPORTED naming the field. */
rb_status rb_t5_config_load(const char *path, rb_t5_config *cfg, rb_error *err);
/* dir: a text_encoder_3/ folder (config.json + model.safetensors, f16/f32/bf16). */
rb_status rb_t5_load(const char *dir, rb_backend *be, const rb_sd_load_opts *opts, rb_t5 **out, rb_error *err);
/* A GGUF file in llama.cpp's T5 layout (token_embd.weight, enc.blk.N.attn_{q,k,v,o}.weight,
 * enc.blk.N.attn_rel_b.weight, enc.blk.N.{attn,ffn}_norm.weight, enc.blk.N.ffn_{gate,up,down}.weight,
 * enc.output_norm.weight; general.architecture "t5" or "t5encoder" with its <arch>.* hyperparameters);
 * weights f32/f16/bf16 or ggml-quantized (q8_0 ...). The metadata has no relative_attention_max_distance
 * (llama.cpp assumes T5's 128): config_json (nullable), a transformers config.json, overrides it all. */
rb_status rb_t5_load_gguf(const char *path, const char *config_json, rb_backend *be, const rb_sd_load_opts *opts,
                          rb_t5 **out, rb_error *err);
void rb_t5_free(rb_t5 *m);
const rb_t5_config *rb_t5_get_config(const rb_t5 *m);
size_t rb_t5_weight_bytes(const rb_t5 *m);
rb_status rb_t5_set_act_dtype(rb_t5 *m, rb_dtype dt, rb_error *err);

/* ids: host memory, B sequences of T ids (already padded); last_hidden: f32
 * [d_model, T, B] on the model's backend, any strides. */
rb_status rb_t5_encode(rb_t5 *m, const int32_t *ids, int64_t T, int64_t B, rb_tensor *last_hidden, rb_error *err);

/* ---- tokenizer + encoder: what the SD3 pipeline calls ---- */

typedef struct rb_t5_text {
    rb_t5 *enc;
    rb_unigram *tok;
} rb_t5_text;

/* enc_dir: text_encoder_3/, tok_dir: tokenizer_3/ (tokenizer.json or
 * spiece.model). On failure *out is zeroed. */
rb_status rb_t5_text_load(const char *enc_dir, const char *tok_dir, rb_backend *be, const rb_sd_load_opts *opts,
                          rb_t5_text *out, rb_error *err);
void rb_t5_text_free(rb_t5_text *t);
/* B prompts -> out f32 [d_model, max_len, B] (diffusers' _get_t5_prompt_embeds
 * with max_sequence_length max_len: ids padded/truncated, then the encoder).
 * With tok NULL (random-weight models) every prompt is the empty prompt.
 * ids_out (nullable, host, max_len * B) receives the ids. */
rb_status rb_t5_text_encode(rb_t5_text *t, const char *const *prompts, int64_t B, int64_t max_len, rb_tensor *out,
                            int32_t *ids_out, rb_error *err);

#ifdef __cplusplus
}
#endif
#endif

/* Implementation of llm_step.h. */
#include "worker_llm/llm_step.h"

rb_status llm_step_sequential(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, int n, float *logits,
                              rb_error *err) {
    const int64_t V = rb_model_get_config(m)->n_vocab;
    for (int i = 0; i < n; i++) {
        rb_status s = rb_model_forward(m, kvs[i], &tokens[i], 1, false, logits + (size_t)i * (size_t)V, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

rb_status llm_step_batched(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, int n, float *logits,
                           rb_error *err) {
    return rb_model_forward_batch(m, kvs, tokens, n, logits, err);
}

llm_step_fn llm_step_default(void) { return llm_step_batched; }

rb_status llm_seqs_forward(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, const int64_t *counts, int n,
                           float *logits, rb_error *err) {
    return rb_model_forward_seqs(m, kvs, tokens, counts, n, logits, err);
}

/* The one call the scheduler makes per decode step: "advance these n
 * sequences by one token each and give me their logits". Kept behind a
 * function pointer so the batched forward pass (rb_model_forward_batch) can
 * be swapped for the one-sequence-at-a-time fallback (kept for tests that
 * check both give the same tokens). A step that also runs pieces of
 * prompts (chunked prefill) goes through an llm_seqs_fn, the same way. */
#ifndef RBEE_LLM_STEP_H
#define RBEE_LLM_STEP_H

#include "rbee/model.h"

/* kvs[i] receives tokens[i] at its next position; logits gets n rows of
 * n_vocab floats, row i for sequence i. */
typedef rb_status (*llm_step_fn)(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, int n, float *logits,
                                 rb_error *err);

/* Runs the sequences one after another through rb_model_forward. */
rb_status llm_step_sequential(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, int n, float *logits,
                              rb_error *err);

/* One batched forward pass (rb_model_forward_batch). */
rb_status llm_step_batched(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, int n, float *logits,
                           rb_error *err);

/* The step the worker uses (batched). */
llm_step_fn llm_step_default(void);

/* A step that mixes decode tokens and prompt pieces: sequence i brings
 * counts[i] >= 1 tokens (tokens holds them one sequence after another) and
 * row i of logits gets the logits of its last one. */
typedef rb_status (*llm_seqs_fn)(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, const int64_t *counts,
                                 int n, float *logits, rb_error *err);

/* One pass (rb_model_forward_seqs). */
rb_status llm_seqs_forward(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, const int64_t *counts, int n,
                           float *logits, rb_error *err);

#endif

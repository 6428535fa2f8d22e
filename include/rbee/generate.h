/* Text generation for one sequence: prefill the prompt in batches, then
 * decode one token at a time with a sampler, streaming complete UTF-8 text
 * pieces to a callback, until an end-of-sequence token, a stop string
 * (matched on text; a partial stop string is never emitted), max_tokens, a
 * full context, or cancellation by the callback. */
#ifndef RBEE_GENERATE_H
#define RBEE_GENERATE_H

#include "rbee/grammar.h"
#include "rbee/model.h"
#include "rbee/sampler.h"
#include "rbee/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rb_stop_reason {
    RB_STOP_NONE = 0,
    RB_STOP_MAX_TOKENS, /* max_tokens generated, or the context is full */
    RB_STOP_EOS,        /* the model produced an end-of-sequence token */
    RB_STOP_STRING,     /* a stop string appeared in the text */
    RB_STOP_CANCELLED,  /* the callback asked to stop */
} rb_stop_reason;

/* "MAX_TOKENS", "EOS", "STOP_SEQUENCE", "CANCELLED", "NONE" */
const char *rb_stop_reason_name(rb_stop_reason r);

#define RB_GEN_MAX_STOP 8

typedef struct rb_gen_params {
    rb_sampler_params sampling;
    int64_t max_tokens;                /* >= 1 */
    const char *stop[RB_GEN_MAX_STOP]; /* NUL-terminated, non-empty */
    int n_stop;
    bool ignore_eos;
    /* Structured output (NULL: free text): tokens the grammar cannot take
     * next are masked before sampling, end of sequence only where it is
     * complete; generation stops (RB_STOP_EOS) once nothing more fits. Needs
     * a tokenizer. */
    const rb_grammar *grammar;
} rb_gen_params;

rb_gen_params rb_gen_default_params(void);

/* Receives each piece of generated text (complete UTF-8, possibly empty when
 * text is held back) and the token that produced it (-1 for the final flush).
 * Return false to cancel. */
typedef bool (*rb_gen_text_cb)(void *user, const char *text, size_t len, int32_t token);

typedef struct rb_gen_result {
    rb_stop_reason stop_reason;
    int64_t n_prompt;
    int64_t n_generated; /* tokens sampled (an EOS token counts) */
    double prefill_ms, decode_ms;
} rb_gen_result;

/* Runs prompt (already tokenized, BOS included if wanted) through the model
 * starting at kv's current position, then generates. The prompt must leave
 * room for at least one generated token in kv, else RB_E_RANGE (never
 * truncated). */
rb_status rb_generate(rb_model *m, const rb_tokenizer *tok, rb_kv_cache *kv, const int32_t *prompt,
                      size_t n_prompt, const rb_gen_params *gp, rb_gen_text_cb cb, void *user, rb_gen_result *res,
                      rb_error *err);

#ifdef __cplusplus
}
#endif
#endif

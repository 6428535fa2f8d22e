/* Token sampling from logits: greedy, temperature, top-k, top-p, min-p,
 * repetition / frequency / presence penalties over a window of recent tokens
 * and per-token logit biases, with a seeded generator held in the sampler
 * (same seed and inputs give the same tokens). Order of application: the
 * logit biases (added first, as OpenAI and llama.cpp do), then as Hugging
 * Face transformers: penalties, temperature, top-k, top-p, min-p, a draw. */
#ifndef RBEE_SAMPLER_H
#define RBEE_SAMPLER_H

#include "rbee/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A bias added to one token's logit before sampling (OpenAI's logit_bias:
 * -100 all but bans the token, +100 all but forces it). */
typedef struct rb_logit_bias {
    int32_t token;
    float bias;
} rb_logit_bias;

typedef struct rb_sampler_params {
    float temperature;        /* <= 0: greedy (argmax after penalties) */
    int top_k;                /* <= 0: off */
    float top_p;              /* >= 1: off */
    float min_p;              /* <= 0: off */
    float repetition_penalty; /* 1: off; > 1 discourages tokens in the window (CTRL / HF rule) */
    float frequency_penalty;  /* 0: off; subtracts count * value (OpenAI rule) */
    float presence_penalty;   /* 0: off; subtracts value once per present token */
    int penalty_last_n;       /* window of recent tokens the penalties look at; < 0: all */
    uint64_t seed;
    const rb_logit_bias *logit_bias; /* n_logit_bias entries (copied by rb_sampler_create); a token may repeat
                                      * (the biases add up) */
    size_t n_logit_bias;
} rb_sampler_params;

/* Defaults: greedy, no filters, no penalties, window 64, seed 0. */
rb_sampler_params rb_sampler_default_params(void);
/* Checks ranges (temperature 0..100, top_p 0..1, min_p 0..1, penalties finite,
 * repetition_penalty > 0, logit biases finite with non-negative tokens). */
rb_status rb_sampler_params_check(const rb_sampler_params *p, rb_error *err);

typedef struct rb_sampler rb_sampler;

/* RB_E_RANGE also for a logit bias on a token >= n_vocab. */
rb_status rb_sampler_create(const rb_sampler_params *p, int64_t n_vocab, rb_sampler **out, rb_error *err);
void rb_sampler_free(rb_sampler *s);
/* Re-seeds the generator (e.g. for a new request). */
void rb_sampler_reseed(rb_sampler *s, uint64_t seed);

/* Picks the next token. logits (n_vocab floats) are modified in place (the
 * biases and penalties are applied to them).
 * history holds the previous tokens of the sequence (prompt and generated),
 * oldest first; the penalties use its last penalty_last_n entries. */
int32_t rb_sampler_sample(rb_sampler *s, float *logits, const int32_t *history, size_t n_history);

#ifdef __cplusplus
}
#endif
#endif

/* Log probabilities of generated tokens, as OpenAI reports them: the
 * log-softmax of the model's raw logits at that position (before any
 * sampling transform: temperature, penalties, top-k/p, logit_bias), for the
 * chosen token and the k most likely ones. Computed on the host row the
 * engine samples from, and only for requests that ask. */
#ifndef RBEE_LLM_LOGPROBS_H
#define RBEE_LLM_LOGPROBS_H

#include "rbee/tokenizer.h"

#include <jansson.h>
#include <stdint.h>

/* What a logprob that is not a finite number is reported as (a token whose
 * logit is -inf or NaN): OpenAI's floor. */
#define LLM_LOGPROB_FLOOR -9999.0

typedef struct llm_top_logprob {
    int32_t id;
    double logprob;
} llm_top_logprob;

/* log(sum(exp(row))), computed stably in double; NaN entries count as -inf;
 * -inf when every entry is. */
double llm_logsumexp(const float *row, int64_t n);

/* The k largest entries of row (k <= n), largest first, ties by lower id,
 * NaN entries never; their log probabilities given lse. Returns how many
 * were written (fewer than k only when the row has fewer non-NaN entries). */
int llm_top_logprobs(const float *row, int64_t n, double lse, int k, llm_top_logprob *out);

/* One generated token in OpenAI's chat shape, with the token id added (as
 * llama-server does): {"id", "token", "logprob", "bytes", "top_logprobs":
 * [{"id", "token", "logprob", "bytes"}, ...k]}. token is the token's piece
 * (rb_tokenizer_token_piece) as text, with U+FFFD for bytes that are not
 * complete UTF-8; bytes are the piece's bytes (an id the tokenizer does
 * not know, past its vocabulary, has ""). NULL when out of memory or for
 * chosen outside the row. */
json_t *llm_logprob_entry(const rb_tokenizer *tok, const float *row, int64_t n, int32_t chosen, int k);

#endif

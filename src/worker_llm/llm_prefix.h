/* Prompt-prefix reuse across requests (--cache-prompt): which tokens each
 * sequence slot's KV cache holds, and the choice of a slot for a new prompt.
 * A new request whose prompt starts with tokens some slot's cache already
 * holds (a system prompt; the earlier turns of a chat, which clients resend
 * every turn) keeps or copies those positions and prefills only the rest.
 * Plain bookkeeping over token arrays, with no model: the engine owns the
 * caches and tells this module what they hold. */
#ifndef RBEE_LLM_PREFIX_H
#define RBEE_LLM_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a slot's cache holds: tok[0 .. n) at positions 0 .. n, and when the
 * slot was last released (a counter: smaller is older). */
typedef struct llm_prefix_view {
    const int32_t *tok;
    size_t n;
    uint64_t last_used;
    bool free; /* the slot may be taken by a new job */
} llm_prefix_view;

/* Length of the longest common prefix of a[0 .. na) and b[0 .. nb). */
size_t llm_prefix_lcp(const int32_t *a, size_t na, const int32_t *b, size_t nb);

/* Positions of a slot holding tok[0 .. n) that a prompt of n_prompt tokens
 * can keep: their common prefix, but at least min_run (>= 1) prompt tokens
 * run (one for the logits of the first generated token; more where the
 * last rows must come from a product of as many rows as a cold prefill's),
 * and none when the prompt has fewer than min_run. */
size_t llm_prefix_keep(const int32_t *tok, size_t n, const int32_t *prompt, size_t n_prompt, size_t min_run);

/* The free slot for a prompt: the one whose cache keeps the most of it
 * (llm_prefix_keep), ties to the least recently used; with prompt NULL
 * (or nothing kept anywhere) the least recently used free slot. *keep (may
 * be NULL) gets the positions it keeps. -1: no slot is free. */
int llm_prefix_pick(const llm_prefix_view *v, int n_slots, const int32_t *prompt, size_t n_prompt, size_t min_run,
                    size_t *keep);

/* A slot other than `self` (free or busy) whose cache keeps more of the
 * prompt than `than` positions, the most of them (ties to the lowest slot);
 * -1 if none. *keep gets its positions. */
int llm_prefix_donor(const llm_prefix_view *v, int n_slots, int self, const int32_t *prompt, size_t n_prompt,
                     size_t min_run, size_t than, size_t *keep);

#endif

/* `rbee bench --grammar FILE | --json-schema FILE`: decode with sampling,
 * with and without the grammar's token mask, interleaved rep by rep, so the
 * cost of constrained decoding shows as a ratio of two medians measured
 * under the same load. */
#ifndef RBEE_APP_BENCH_GRAMMAR_H
#define RBEE_APP_BENCH_GRAMMAR_H

#include "rbee/grammar.h"
#include "rbee/model.h"

#include <stdbool.h>
#include <stdint.h>

/* Runs n_gen sampled decode steps (temperature 1) from kv's first depth
 * tokens (start: the first token fed), one warm-up then reps timed passes
 * each way, and prints the two medians, their ratio and the mean time the
 * mask took per step. Prints errors to stderr. */
bool rb_bench_grammar_decode(rb_model *m, rb_kv_cache *kv, const rb_tokenizer *tok, const rb_grammar *g,
                             int64_t depth, int32_t start, int64_t n_gen, int reps, uint64_t seed, float *logits);

#endif

/* Random-weight llama models of named shapes for `rbee bench --random`:
 * written to a temporary GGUF with rb_gguf_writer and the quantizers of
 * quant.h, so throughput can be measured without downloading a model. */
#ifndef RBEE_APP_BENCH_MODEL_H
#define RBEE_APP_BENCH_MODEL_H

#include "rbee/model.h"
#include "rbee/status.h"

#include <stddef.h>
#include <stdint.h>

/* "tiny, tinyllama-1.1b, ..." and "f32, f16, ..." for usage messages. */
const char *rb_bench_shape_names(void);
const char *rb_bench_type_names(void);

/* Writes a random model of shape (a name from rb_bench_shape_names) with
 * every matrix in weight type type_name, or in the k-quant mix it names
 * (q4_k_m, q5_k_m: llama-quantize's default mixes), norms f32, to a new
 * file in $TMPDIR (or /tmp) and returns its path in path_out; the caller
 * deletes it.
 * *n_params receives the parameter count. RB_E_INVALID names the accepted
 * values for an unknown shape or type. */
rb_status rb_bench_write_random_model(const char *shape, const char *type_name, uint64_t seed, char *path_out,
                                      size_t path_cap, int64_t *n_params, rb_error *err);

/* Parameter count of a llama-style model of this configuration. */
int64_t rb_bench_count_params(const rb_model_config *c);

#endif

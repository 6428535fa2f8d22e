/* Tensor parallelism over several devices (Megatron style): which part of
 * each weight a rank holds, and cutting those parts out of a file's tensor.
 *
 * Attention heads are split by rank: q, k and v are column-parallel (each
 * rank computes its heads' rows), the output projection row-parallel (each
 * rank multiplies its heads' columns, then one all-reduce sums the ranks).
 * When there are fewer kv heads than ranks, each kv head is replicated on the
 * ranks whose q heads use it (grouped-query models). The feed-forward's gate
 * and up are column-parallel and down row-parallel (one all-reduce); its
 * width is split in whole blocks of 256 so that quantized down matrices
 * (whose rows are cut along the block axis) split between blocks. The token
 * embedding and output head are split by vocabulary rows. Splits that do not
 * divide evenly give the first ranks one more unit. */
#ifndef RBEE_TP_H
#define RBEE_TP_H

#include "rbee/dtype.h"
#include "rbee/model.h"
#include "rbee/status.h"

#include <stddef.h>
#include <stdint.h>

#define RB_TP_MAX_RANKS 16
#define RB_TP_FF_UNIT 256 /* feed-forward split granularity (the k-quant block) */

typedef struct rb_tp_range {
    int64_t first, count; /* [first, first + count) of the full dimension */
} rb_tp_range;

typedef struct rb_tp_rank {
    rb_tp_range q_heads;  /* this rank's query heads */
    rb_tp_range kv_heads; /* the kv heads it holds (one replicated head when kv heads < ranks) */
    rb_tp_range ff;       /* its columns of the feed-forward width (n_ff) */
    rb_tp_range vocab;    /* its rows of the token embedding and output head */
} rb_tp_rank;

typedef struct rb_tp_plan {
    int n_rank;
    bool kv_replicated; /* fewer kv heads than ranks: each rank holds one, shared by several ranks */
    rb_tp_rank rank[RB_TP_MAX_RANKS];
} rb_tp_plan;

/* The plan for model config c over n_rank devices. Errors (RB_E_UNSUPPORTED
 * with the reason) when the heads cannot be split: n_head not a multiple of
 * n_rank, kv heads neither a multiple nor a divisor of n_rank, n_ff not a
 * multiple of RB_TP_FF_UNIT with more than one rank, or an architecture the
 * split does not cover (experts). n_rank 1 is the whole model on one rank. */
rb_status rb_tp_plan_make(const rb_model_config *c, int n_rank, rb_tp_plan *plan, rb_error *err);

/* Rows [r0, r0 + nr) of a matrix of ne1 rows of ne0 elements (ggml layout:
 * one row = one output) of dtype t, from src into dst (packed). Column-
 * parallel weights and vocabulary shards. */
rb_status rb_tp_slice_rows(rb_dtype t, int64_t ne0, int64_t ne1, const void *src, size_t src_bytes, int64_t r0,
                           int64_t nr, void *dst, size_t dst_cap, rb_error *err);

/* Columns [c0, c0 + nc) of every row (row-parallel weights: each rank's part
 * of the input dimension), into dst packed as ne1 rows of nc elements. c0 and
 * nc must be whole blocks of the dtype. */
rb_status rb_tp_slice_cols(rb_dtype t, int64_t ne0, int64_t ne1, const void *src, size_t src_bytes, int64_t c0,
                           int64_t nc, void *dst, size_t dst_cap, rb_error *err);

#endif

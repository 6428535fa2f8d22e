/* Internal to the CPU backend's non-matmul ops: their vtable entry points,
 * and the helpers they share (element/row conversion between f32 and the
 * stored dtype for any stride, splitting rows across the thread pool,
 * per-thread scratch). The front-ends in src/core/ops.c have validated every
 * argument before these run. */
#ifndef RBEE_CPU_OPS_COMMON_H
#define RBEE_CPU_OPS_COMMON_H

#include "backends/cpu/cpu_internal.h"

#include <string.h>

/* ---- entry points (one family per ops_*.c file) ---- */
rb_status rb_cpu_fill(rb_backend *be, rb_tensor *dst, float value);
rb_status rb_cpu_affine(rb_backend *be, rb_tensor *dst, const rb_tensor *src, float scale, float bias);
rb_status rb_cpu_unary(rb_backend *be, rb_unary_op op, rb_tensor *dst, const rb_tensor *src);
rb_status rb_cpu_binary(rb_backend *be, rb_binary_op op, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b);
rb_status rb_cpu_where(rb_backend *be, rb_tensor *dst, const rb_tensor *cond, const rb_tensor *a, const rb_tensor *b);
rb_status rb_cpu_glu(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, rb_unary_op act);
/* mixture-of-experts ops (ops_moe.c) */
rb_status rb_cpu_matmul_id(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                           const rb_tensor *ids);
rb_status rb_cpu_swiglu_clamp(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, float alpha,
                              float limit);
rb_status rb_cpu_cast(rb_backend *be, rb_tensor *dst, const rb_tensor *src);
rb_status rb_cpu_reduce(rb_backend *be, rb_reduce_op op, rb_tensor *dst, const rb_tensor *src);
rb_status rb_cpu_softmax(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *mask, float scale);
rb_status rb_cpu_rms_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w, float eps);
rb_status rb_cpu_add_rms_norm(rb_backend *be, rb_tensor *x, const rb_tensor *delta, const rb_tensor *w, float eps,
                              rb_tensor *h);
rb_status rb_cpu_layer_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w,
                            const rb_tensor *b, float eps);
/* layer norm (no affine) * (1 + scale) + shift (ops_reduce.c) */
rb_status rb_cpu_layer_norm_mod(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *shift,
                                const rb_tensor *scale, float eps);
rb_status rb_cpu_group_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups, const rb_tensor *w,
                            const rb_tensor *b, float eps);
/* group norm then act (silu, gelu, gelu_tanh, relu), each value rounded
 * through dst's dtype before the activation: bit-identical to the two ops */
rb_status rb_cpu_group_norm_act(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups,
                                const rb_tensor *w, const rb_tensor *b, float eps, rb_unary_op act);
/* y = op(x) over n floats, as rb_unary computes it (ops_elementwise.c) */
void rb_cpu_unary_row(rb_unary_op op, const float *x, float *y, int64_t n);
rb_status rb_cpu_get_rows(rb_backend *be, rb_tensor *dst, const rb_tensor *table, const rb_tensor *ids);
rb_status rb_cpu_index_select(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids, int dim);
rb_status rb_cpu_set_rows(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids);
rb_status rb_cpu_argsort(rb_backend *be, rb_tensor *dst, const rb_tensor *src, bool descending);
rb_status rb_cpu_topk(rb_backend *be, rb_tensor *values, rb_tensor *indices, const rb_tensor *src, int k);
rb_status rb_cpu_rope(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *pos,
                      const rb_rope_params *p);
rb_status rb_cpu_attention(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k, const rb_tensor *v,
                           const rb_attn_params *p);
rb_status rb_cpu_conv1d(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w, const rb_tensor *bias,
                        int stride, int pad, int dilation, int groups);
rb_status rb_cpu_conv2d(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w, const rb_tensor *bias,
                        const int stride[2], const int pad[2], const int dilation[2], int groups);
rb_status rb_cpu_upsample(rb_backend *be, rb_tensor *dst, const rb_tensor *src, rb_upsample_mode mode);
/* conv2d as an implicit GEMM (ops_conv_gemm.c), for the cases _ok accepts
 * (no groups, f32/f16/bf16 kernels with contiguous rows); rb_cpu_conv2d routes them. */
bool rb_cpu_conv2d_gemm_ok(const rb_cpu_backend *cb, const rb_tensor *w, int groups);
rb_status rb_cpu_conv2d_gemm(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w,
                             const rb_tensor *bias, const int stride[2], const int pad[2], const int dilation[2]);
/* attention as two tiled products (ops_attention_gemm.c), for the cases _ok
 * accepts (f32, contiguous rows, no mask / causal / window / soft-cap /
 * q_pos); rb_cpu_attention routes them. */
bool rb_cpu_attention_gemm_ok(const rb_cpu_backend *cb, const rb_tensor *q, const rb_tensor *k, const rb_tensor *v,
                              const rb_attn_params *p);
rb_status rb_cpu_attention_gemm(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k,
                                const rb_tensor *v, const rb_attn_params *p);

/* ---- element access for f32 / f16 / bf16 (and i32 where noted) ---- */
static inline float rb_cpu_load_f(rb_dtype t, const char *p) {
    switch (t) {
    case RB_F16: {
        rb_f16 h;
        memcpy(&h, p, 2);
        return rb_f16_to_f32(h);
    }
    case RB_BF16: {
        rb_bf16 h;
        memcpy(&h, p, 2);
        return rb_bf16_to_f32(h);
    }
    case RB_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        return (float)v;
    }
    default: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    }
}

static inline void rb_cpu_store_f(rb_dtype t, char *p, float v) {
    switch (t) {
    case RB_F16: {
        rb_f16 h = rb_f32_to_f16(v);
        memcpy(p, &h, 2);
        break;
    }
    case RB_BF16: {
        rb_bf16 h = rb_f32_to_bf16(v);
        memcpy(p, &h, 2);
        break;
    }
    default:
        memcpy(p, &v, 4);
        break;
    }
}

/* Reads n elements (stride bytes apart) of a float dtype into f32. */
void rb_cpu_row_to_f32(const rb_cpu_backend *cb, rb_dtype t, const char *src, size_t stride, float *dst, int64_t n);
/* Writes n f32 values to elements of a float dtype stride bytes apart. */
void rb_cpu_row_from_f32(const rb_cpu_backend *cb, rb_dtype t, const float *src, char *dst, size_t stride, int64_t n);
/* Row i1,i2,i3 of t. */
static inline char *rb_cpu_row(const rb_tensor *t, int64_t i1, int64_t i2, int64_t i3) {
    return rb_cpu_data(t) + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}
/* Row of an operand that broadcasts to dst's row (i1,i2,i3). */
static inline const char *rb_cpu_brow(const rb_tensor *t, int64_t i1, int64_t i2, int64_t i3) {
    return rb_cpu_data(t) + (t->ne[1] == 1 ? 0 : i1) * t->nb[1] + (t->ne[2] == 1 ? 0 : i2) * t->nb[2] +
           (t->ne[3] == 1 ? 0 : i3) * t->nb[3];
}

/* rb_attention's position of query i of batch item b: q_pos0 + i, or the
 * q_pos entry ([Tq] shared by the batch, or [Tq, B]). */
static inline int64_t rb_cpu_att_pos(const rb_attn_params *p, int64_t i, int64_t b) {
    if (!p->q_pos) return p->q_pos0 + i;
    int32_t v;
    memcpy(&v, rb_cpu_data(p->q_pos) + i * (int64_t)p->q_pos->nb[0] + (p->q_pos->ne[1] > 1 ? b * (int64_t)p->q_pos->nb[1] : 0),
           sizeof v);
    return v;
}
/* The slice of k and v along dim 3 that batch item b reads (kv_index[b], or
 * b), -1 where the index names none (the item sees no keys). */
static inline int64_t rb_cpu_att_kv_slice(const rb_attn_params *p, const rb_tensor *k, int64_t b) {
    if (!p->kv_index) return b;
    int32_t v;
    memcpy(&v, rb_cpu_data(p->kv_index) + b * (int64_t)p->kv_index->nb[0], sizeof v);
    return v >= 0 && v < k->ne[3] ? v : -1;
}

/* ---- parallel loops ---- */
/* [lo, hi) of n items for thread ith of nth. */
static inline void rb_cpu_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    *lo = n * ith / nth;
    *hi = n * (ith + 1) / nth;
}
/* Runs fn on the pool when work (about the number of scalar operations) is
 * large enough to pay for waking it, otherwise inline as (0, 1). Returns the
 * number of threads fn will see. */
int rb_cpu_threads_for(const rb_cpu_backend *cb, int64_t work);
void rb_cpu_parallel(rb_cpu_backend *cb, int nth, rb_task_fn fn, void *ctx);

/* Per-thread scratch: nth slices of per_thread bytes (64-byte aligned each),
 * or NULL (after recording RB_E_NOMEM in the backend) on allocation failure. */
void *rb_cpu_scratch_threads(rb_cpu_backend *cb, int nth, size_t per_thread, size_t *stride);

#endif

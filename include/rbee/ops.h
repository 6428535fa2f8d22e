/* Tensor operations of the model runtime. Each call validates shapes, dtypes
 * and buffers (all tensors must live on `be`), then runs the op on that
 * backend; on failure it returns a status and rb_backend_last_error(be) says
 * why. Ops are eager: they are queued on the backend in call order and may
 * complete asynchronously (rb_backend_sync waits).
 *
 * Conventions (ggml order, ne[0] innermost):
 *  - "row" = the ne[0] elements of one (i1,i2,i3).
 *  - Elementwise ops accept f32, f16 and bf16 (computed in f32) and any
 *    strides; dst may alias a source only if it has the identical view.
 *  - Broadcasting: an input dim of extent 1 is repeated to dst's extent.
 *  - i32 is the index dtype (token ids, positions, slots, argsort output). */
#ifndef RBEE_OPS_H
#define RBEE_OPS_H

#include "rbee/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rb_unary_op {
    RB_UNARY_NEG, RB_UNARY_ABS, RB_UNARY_SQR, RB_UNARY_SQRT, RB_UNARY_RSQRT, RB_UNARY_EXP, RB_UNARY_LOG,
    RB_UNARY_SIN, RB_UNARY_COS, RB_UNARY_TANH, RB_UNARY_SIGMOID, RB_UNARY_RELU,
    RB_UNARY_SILU,      /* x * sigmoid(x) */
    RB_UNARY_GELU,      /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
    RB_UNARY_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    RB_UNARY_RECIP,
    RB_UNARY_COUNT_
} rb_unary_op;

typedef enum rb_binary_op {
    RB_BINARY_ADD, RB_BINARY_SUB, RB_BINARY_MUL, RB_BINARY_DIV, RB_BINARY_MAX, RB_BINARY_MIN,
    RB_BINARY_COUNT_
} rb_binary_op;

typedef enum rb_reduce_op {
    RB_REDUCE_SUM, RB_REDUCE_MEAN, RB_REDUCE_MAX, RB_REDUCE_MIN,
    RB_REDUCE_ARGMAX, /* dst i32; first index of the maximum */
    RB_REDUCE_COUNT_
} rb_reduce_op;

/* dst[...] = value. */
rb_status rb_fill(rb_backend *be, rb_tensor *dst, float value);
/* dst = src * scale + bias (same shape). */
rb_status rb_affine(rb_backend *be, rb_tensor *dst, const rb_tensor *src, float scale, float bias);
rb_status rb_unary(rb_backend *be, rb_unary_op op, rb_tensor *dst, const rb_tensor *src);
/* dst = a op b, a and b broadcast to dst's shape. */
rb_status rb_binary(rb_backend *be, rb_binary_op op, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b);
/* Gated linear unit (one pass instead of rb_unary(act) then rb_binary(MUL)):
 * dst = act(gate) * up elementwise. dst, gate and up are f32, f16 or bf16
 * (computed in f32) of one shape (no
 * broadcasting) with any strides: gate and up are typically the two halves of
 * a fused [2F, T] projection, i.e. strided views into one tensor. act is
 * RB_UNARY_SILU (SwiGLU), RB_UNARY_GELU_TANH or RB_UNARY_GELU (GeGLU) or
 * RB_UNARY_RELU (ReGLU); other ops fail with RB_E_INVALID. dst may be the
 * same view as gate or up. On the CPU the results are bit-identical to the
 * unfused two calls. */
rb_status rb_glu(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, rb_unary_op act);
/* gpt-oss's clamped SwiGLU, elementwise over f32 tensors of one shape (any
 * strides; dst may be the same view as gate or up):
 *   g = min(gate, limit), u = clamp(up, -limit, limit)
 *   dst = (u + 1) * g * sigmoid(alpha * g)
 * (transformers' GptOssExperts: alpha 1.702, limit 7). limit > 0, alpha finite. */
rb_status rb_swiglu_clamp(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, float alpha,
                          float limit);
/* dst = cond != 0 ? a : b; cond is i32 or float, all three broadcast to dst. */
rb_status rb_where(rb_backend *be, rb_tensor *dst, const rb_tensor *cond, const rb_tensor *a, const rb_tensor *b);
/* Copies src into dst converting dtype (same element count per dim): any
 * plain dtype to any plain dtype, quantized -> float (dequantize), float ->
 * quantized (reference quantizer; dst rows contiguous). Also the way to make a
 * strided view contiguous. */
rb_status rb_cast(rb_backend *be, rb_tensor *dst, const rb_tensor *src);

/* Reduces each row: dst has ne[0] == 1 and src's other dims. Reduce another
 * dimension by passing a permuted view. */
rb_status rb_reduce(rb_backend *be, rb_reduce_op op, rb_tensor *dst, const rb_tensor *src);
/* dst = softmax(src * scale + mask) over each row. mask (nullable; f32 or f16)
 * has ne[0] == src->ne[0] and broadcasts over the other dims; -INFINITY
 * entries mask out; a fully masked row yields zeros. */
rb_status rb_softmax(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *mask, float scale);
/* dst = src / sqrt(mean(src^2) + eps) * w over each row; w (nullable) has ne[0] elements. */
rb_status rb_rms_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w, float eps);
/* Fused residual add + rms_norm (one pass instead of rb_binary(ADD) then
 * rb_rms_norm): x += delta in place, then h = x / sqrt(mean(x^2) + eps) * w
 * over each row. x, delta and h are f32 of one shape (no broadcasting), any
 * strides; w (nullable) f32/f16/bf16 [ne0]. delta may be the same view as h
 * (every element is read before it is written); h must not overlap x.
 * On the CPU the results are bit-identical to the unfused two calls. */
rb_status rb_add_rms_norm(rb_backend *be, rb_tensor *x, const rb_tensor *delta, const rb_tensor *w, float eps,
                          rb_tensor *h);
/* dst = (src - mean) / sqrt(var + eps) * w + b over each row; w, b nullable. */
rb_status rb_layer_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w,
                        const rb_tensor *b, float eps);
/* Layer norm without affine, then adaLN modulation, in one pass (the
 * DiT / MMDiT blocks' norm(x) * (1 + scale) + shift): over each row,
 *   dst = (src - mean) / sqrt(var + eps) * (1 + scale) + shift
 * src and dst f32, f16 or bf16 of one shape, any strides (dst may be src's
 * view); shift and scale (each nullable: 0) f32/f16/bf16 with ne[0] equal
 * to the row length, broadcast over dst's other dims (typically [D, 1, B]:
 * one modulation per batch item, every token). Statistics and the
 * modulation in f32, the result rounded once into dst. On the CPU with an
 * f32 dst the results are bit-identical to rb_layer_norm, rb_affine(scale,
 * 1, 1), rb_binary(MUL) and rb_binary(ADD). */
rb_status rb_layer_norm_mod(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *shift,
                            const rb_tensor *scale, float eps);
/* Group norm over src [W, H, C, N]: channels (dim 2) split into n_groups
 * groups; each (group, n) normalised over W*H*(C/n_groups) values; then
 * per-channel w and b (each [C], nullable). */
rb_status rb_group_norm(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups, const rb_tensor *w,
                        const rb_tensor *b, float eps);
/* rb_group_norm followed by an activation in one pass (the GroupNorm + SiLU
 * of every ResnetBlock2D): dst = act(group_norm(src)). act is RB_UNARY_SILU,
 * RB_UNARY_GELU, RB_UNARY_GELU_TANH or RB_UNARY_RELU; other ops fail with
 * RB_E_INVALID. The statistics are f32 or better for any src dtype. On the
 * CPU the results are bit-identical to rb_group_norm then rb_unary on dst. */
rb_status rb_group_norm_act(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups, const rb_tensor *w,
                            const rb_tensor *b, float eps, rb_unary_op act);

/* Embedding gather: dst row i = table row ids[i]. table [D, V] in any dtype
 * (quantized too); ids i32 [T] (or [T, B] with dst [D, T, B]); dst f32/f16.
 * Out-of-range ids fail with RB_E_RANGE before anything is written. */
rb_status rb_get_rows(rb_backend *be, rb_tensor *dst, const rb_tensor *table, const rb_tensor *ids);
/* dst = src with dimension dim indexed by ids (i32 [n]): dst->ne[dim] == n. */
rb_status rb_index_select(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids, int dim);
/* Scatter rows (KV-cache write): dst[:, ids[i], ...] = src[:, i, ...] along dim 1.
 * src [D, n, A, B], dst [D, S, A, B], ids i32 [n] (slot numbers < S); dst may
 * be f32/f16/bf16 (converted). */
rb_status rb_set_rows(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids);

/* Indices (i32) that sort each row; stable. */
rb_status rb_argsort(rb_backend *be, rb_tensor *dst, const rb_tensor *src, bool descending);
/* The k largest of each row, in descending order: values (src dtype or f32)
 * and i32 indices, both with ne[0] == k. Ties keep the lower index first. */
rb_status rb_topk(rb_backend *be, rb_tensor *values, rb_tensor *indices, const rb_tensor *src, int k);

/* Matrix product with ggml semantics: both operands hold rows of length K.
 *   a: [K, N, A2, A3]  weights; f32, f16, bf16 or any quantized dtype
 *   b: [K, M, B2, B3]  activations; f32, f16 or bf16, any strides
 *   dst: [N, M, B2, B3] f32 (or f16, bf16): dst[m][n] = sum_k a[n][k] * b[m][k]
 * a's dims 2 and 3 broadcast over b's (B2 % A2 == 0, B3 % A3 == 0: grouped-
 * query attention style). Quantized a may quantize b internally (to q8_0 /
 * q8_1 / q8_K blocks) as ggml does. */
rb_status rb_matmul(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b);

/* The epilogue of rb_linear: what happens to each product value
 * p[n, m, i2, i3] before it is stored, in f32:
 *   y = p + bias[n]                  (bias: [N])
 *   y = act(y)                       (has_act; any rb_unary_op)
 *   y = y * gate[n, m, i2, i3]       (gate: ne[0] == N, broadcast to dst in
 *                                     dims 1..3, e.g. adaLN-Zero's [N, 1, B])
 *   dst = res[n, m, i2, i3] + y      (res: dst's shape; the residual)
 * then rounded once into dst. Every tensor is nullable (that step skipped);
 * all are f32, f16 or bf16 with any strides. */
typedef struct rb_linear_epilogue {
    const rb_tensor *bias;
    bool has_act;
    rb_unary_op act;
    const rb_tensor *gate;
    const rb_tensor *res;
} rb_linear_epilogue;
/* A linear layer in one call: rb_matmul (a and b as there; dst f32, f16 or
 * bf16 with any strides: e.g. a slice of a larger buffer, written in place
 * of a temporary and a copy) with its epilogue (ep nullable: none). res
 * may be dst's own view (x += gate * (W a + b), in place); otherwise no
 * operand may overlap dst. On the CPU with an f32 dst the results are
 * bit-identical to rb_matmul followed by the separate rb_binary / rb_unary
 * calls (a 16-bit dst is rounded once instead of after each). A GPU
 * backend may round a 16-bit product into dst before the epilogue where
 * res is not dst's view (as the separate calls do). */
rb_status rb_linear(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                    const rb_linear_epilogue *ep);

/* Expert-indexed matrix product (mixture-of-experts layers):
 *   a   [K, N, E]  the E experts' weights, one [K, N] matrix each (any weight
 *                  dtype, as rb_matmul's a; rows contiguous, nb[2] any)
 *   b   [K, S, T]  activations of T tokens: S == 1, one row per token used by
 *                  all its experts; or S == k, one row per (slot, token)
 *   ids i32 [k, T] the experts of each token, in slot order (each in 0..E-1)
 *   dst [N, k, T]  f32: dst[:, j, t] = a[:, :, ids[j, t]] * b[:, S == 1 ? 0 : j, t]
 * The rows of b are grouped by expert, so each expert's weights are read
 * once per call, and experts no token selected are not read at all (a
 * decode step reads only the k selected experts). Ids outside 0..E-1 fail
 * with RB_E_RANGE before anything is written. */
rb_status rb_matmul_id(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b, const rb_tensor *ids);

/* rb_matmul with the passes around it fused in. In decode every op over one
 * row is a kernel launch on a GPU, so the norm before a projection, the gate
 * before the down projection and the residual add after it are folded into
 * the product where the backend can:
 *   in  = b                                   (neither norm nor glu)
 *   in  = b / sqrt(mean(b^2) + eps) * norm_w  (norm: rb_rms_norm over rows)
 *   in  = act(b) * up                         (glu: rb_glu, b is the gate)
 *   dst = matmul(a, in), or dst += matmul(a, in) (accumulate)
 *   dst = act(p[0, N/2)) * p[N/2, N)          (glu_out, p = matmul(a, in):
 *         a holds N = 2 dst->ne[0] rows, the gate's then the up projection's)
 *   then rb_rope over dst's first rope_heads heads, in place   (rope)
 *   then rb_set_rows of dst's rows from store_row0 on into store_dst (store)
 * b (and up, norm_w) are f32 here; dst is f32 when accumulating and must not
 * overlap b or up; glu_out excludes glu and accumulate, rope and store exclude both. A backend without a
 * fused kernel for the case runs the separate ops: `in` into tmp_in (b's
 * shape, f32; needed with norm or glu), the product into tmp_out (f32, dst's
 * shape, or [N, M, ...] with glu_out; needed with accumulate or glu_out),
 * then adds it to dst (rb_binary) or gates it into dst (rb_glu); the results
 * then equal those of the separate calls. A fused kernel computes the same
 * in f32 with other rounding (the norm's sum of squares in another order). */
typedef struct rb_matmul_fusion {
    bool norm;                /* rms_norm over each row of b first */
    const rb_tensor *norm_w;  /* its weight [K] (nullable) */
    float eps;
    bool glu;                 /* act(b) * up first */
    const rb_tensor *up;      /* b's shape */
    rb_unary_op act;          /* silu, gelu_tanh, gelu or relu */
    bool accumulate;          /* add the product to dst */
    bool glu_out;             /* dst = act(first half of the product's rows) * second half */
    /* rope after the product (not with accumulate or glu_out): dst's first
     * rope_heads x rope_head_dim rows, seen as [rope_head_dim, rope_heads, M]
     * (row m at position rope_pos[m], i32 [M]), rotated as rb_rope does, in
     * place: the q and k heads at the start of a fused qkv projection */
    const struct rb_rope_params *rope;
    const rb_tensor *rope_pos;
    int64_t rope_head_dim, rope_heads;
    /* store after the rope (not with accumulate or glu_out): rb_set_rows of
     * dst's rows [store_row0, N) of each row m into row store_ids[m] of
     * store_dst [N - store_row0, S]: the k and v rows of a fused qkv
     * projection written into the KV cache */
    rb_tensor *store_dst;
    const rb_tensor *store_ids;
    int64_t store_row0;
    rb_tensor *tmp_in;        /* scratch of the unfused path (see above) */
    rb_tensor *tmp_out;
} rb_matmul_fusion;
rb_status rb_matmul_fused(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                          const rb_matmul_fusion *f);

typedef enum rb_rope_mode {
    RB_ROPE_NORMAL = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): GGUF llama layout */
    RB_ROPE_NEOX = 2,   /* rotate halves (x[i], x[i + n_rot/2]): HF layout, qwen2, gemma, phi3 */
} rb_rope_mode;

typedef struct rb_rope_params {
    int n_rot;                     /* rotated dims (<= head dim, even); the rest pass through */
    rb_rope_mode mode;
    float freq_base;               /* theta, e.g. 10000 */
    float freq_scale;              /* linear position scaling (1 = none) */
    float attn_factor;             /* multiplies cos/sin (1 = none) */
    const rb_tensor *freq_factors; /* nullable f32 [n_rot/2]: theta_i /= factors[i] (llama3, longrope) */
} rb_rope_params;

/* Rotary embedding. src/dst [head_dim, n_heads, T, B]; pos i32 [T] absolute
 * positions. Angle for pair i: pos * freq_scale * base^(-2i/n_rot) / factor_i. */
rb_status rb_rope(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *pos,
                  const rb_rope_params *p);

typedef struct rb_attn_params {
    float scale;           /* usually 1/sqrt(head_dim) */
    float softcap;         /* > 0: scores = softcap * tanh(scores / softcap) (gemma2) */
    bool causal;           /* key j visible to query i iff j <= pos(i) */
    int window;            /* > 0: also require pos(i) - j < window (sliding window) */
    int64_t q_pos0;        /* absolute position of query 0; query i is at q_pos0 + i */
    const rb_tensor *mask; /* nullable additive mask f32/f16 [Tk, Tq] (broadcast over heads) */
    /* nullable i32 [Tq] or [Tq, B] on the backend: absolute position of each
     * query (of each batch item with [Tq, B]), read on the device (replaces
     * q_pos0; needs causal). k/v may then span a whole cache: keys past a
     * query's position are invisible to it, so one launch with fixed shapes
     * serves every decode step (graph replay). Positions must lie in [0, Tk). */
    const rb_tensor *q_pos;
    /* nullable i32 [B] on the backend: batch item b attends to k's and v's
     * slice kv_index[b] along dim 3 (their dim 3 may then differ from B: the
     * caches of many sequences, of which a batch uses some, in any order). An
     * index outside [0, k->ne[3]) gives that item no keys. Read on the device,
     * like q_pos: one launch serves every batch of those caches. */
    const rb_tensor *kv_index;
    /* With q_pos: no op queued ahead of this one writes k/v rows below the
     * lowest query position, nor q_pos or kv_index themselves (a KV cache a decode step
     * appends to). A backend may then read those rows before the ops ahead
     * have finished. */
    bool keys_settled;
    /* nullable f32 [Hq] on the backend: attention sinks (gpt-oss), a learned
     * logit per query head that joins every softmax denominator without a
     * value: out = sum_j exp(s_j) v_j / (exp(sink_h) + sum_j exp(s_j)) */
    const rb_tensor *sinks;
} rb_attn_params;

/* Scaled dot-product attention with grouped-query heads:
 *   q [D, Tq, Hq, B], k [D, Tk, Hkv, B], v [Dv, Tk, Hkv, B] (Hq % Hkv == 0;
 *   with kv_index, k and v [.., .., Hkv, any] and batch item b reads slice kv_index[b];
 *   query head h uses kv head h / (Hq/Hkv)); f32/f16/bf16, any strides.
 *   dst [Dv, Hq, Tq, B] f32 (or f16, bf16: the f32 result rounded once):
 *   ready to reshape to [Dv*Hq, Tq, B].
 * Keys are at positions 0..Tk-1. Memory stays linear in Tk (no [Tq, Tk]
 * matrix is required). A query with no visible key gets zeros. */
rb_status rb_attention(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k, const rb_tensor *v,
                       const rb_attn_params *p);

/* 1-D convolution (cross-correlation): x [L, Cin, N], w [K, Cin/groups, Cout],
 * bias nullable [Cout]; dst [Lout, Cout, N] with
 * Lout = (L + 2 pad - dilation (K - 1) - 1) / stride + 1. f32 (w may be f16). */
rb_status rb_conv1d(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w, const rb_tensor *bias,
                    int stride, int pad, int dilation, int groups);
/* 2-D convolution: x [W, H, Cin, N], w [KW, KH, Cin/groups, Cout], bias
 * nullable [Cout]; dst [Wout, Hout, Cout, N]; stride/pad/dilation are {x, y}.
 * x and dst f32, f16 or bf16 (any strides), w f32, f16 or bf16, bias f32;
 * products summed in f32 (no TF32), the result rounded once into dst. */
rb_status rb_conv2d(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w, const rb_tensor *bias,
                    const int stride[2], const int pad[2], const int dilation[2], int groups);

typedef enum rb_upsample_mode {
    RB_UPSAMPLE_NEAREST,
    RB_UPSAMPLE_BILINEAR, /* align_corners = false, like torch */
} rb_upsample_mode;

/* Resizes dims 0 and 1 of src [W, H, C, N] to dst [W', H', C, N]. */
rb_status rb_upsample(rb_backend *be, rb_tensor *dst, const rb_tensor *src, rb_upsample_mode mode);

#ifdef __cplusplus
}
#endif
#endif

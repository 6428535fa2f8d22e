/* The CPU backend's llama.cpp numerics mode (rb_backend_config.
 * llamacpp_numerics): the few places where llama.cpp's CPU arithmetic (ggml,
 * x86 build) rounds differently from ours, reproduced so that llama.cpp's
 * logits can be matched to f32 rounding. Used by ops_attention.c,
 * ops_rope.c and ops_reduce.c only when the mode is on; the default paths
 * are the more accurate ones. docs/LLAMACPP_NUMERICS.md has the details. */
#ifndef RBEE_CPU_LLAMACPP_NUMERICS_H
#define RBEE_CPU_LLAMACPP_NUMERICS_H

#include "backends/cpu/ops_common.h"

#include <math.h>

/* Attention with f16 k and v as ggml's CPU flash attention computes it:
 * f16 query, f16 dot products, f16 value accumulator. Same contract as
 * rb_cpu_attention. */
rb_status rb_cpu_attention_llamacpp(rb_cpu_backend *cb, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k,
                                    const rb_tensor *v, const rb_attn_params *p);

/* f32 x f32 -> f32 matrix product (rb_matmul's contract; rows of a and b
 * contiguous) summed in llama.cpp's order: llamafile's tinyBLAS kernel for
 * batches of two or more rows when K % 16 == 0 and N % 4 == 0, ggml's
 * vec_dot_f32 otherwise. */
rb_status rb_cpu_matmul_f32_llamacpp(rb_cpu_backend *cb, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b);

/* Rotary cos/sin of pairs 0..half-1 at position pos as ggml computes them:
 * the angle is iterated in float (theta *= base^(-2/n_rot) per pair), then
 * divided by the pair's frequency factor, scaled by freq_scale, and passed
 * to cosf/sinf; both are multiplied by attn_factor. */
void rb_cpu_rope_angles_llamacpp(const rb_rope_params *p, int32_t pos, float *cs, float *sn, int half);

/* Rotation of one pair as ggml's compiled kernel does it (fused multiply-adds). */
static inline void rb_cpu_rope_rotate_llamacpp(float *x0, float *x1, float c, float s) {
    const float a = *x0, b = *x1;
    *x0 = fmaf(a, c, -(b * s));
    *x1 = fmaf(a, s, b * c);
}

/* rms_norm's row scale as ggml computes it: float squares summed in double,
 * the mean rounded to float, 1 / sqrtf(mean + eps) in float. */
float rb_cpu_rms_scale_llamacpp(const float *x, int64_t n, float eps);

#endif

/* AVX-512 VNNI dot product of MXFP4 weights against q8_0 activations, two
 * consecutive blocks a step (rb_lut16_dot2_avx512). The int32 lanes of each
 * block are scaled by that block's 2^(e - 128) * d_y ([block0 x8 | block1
 * x8]) and accumulated in f32; an odd last block goes through the AVX2
 * kernel's step. Compiled with -mavx512f
 * -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c. */
#include "backends/cpu/kernels_avx512.h"
#include "backends/cpu/kernels_avx2.h"
#include "backends/cpu/simd_avx512_lut.h"
#include "rbee/quant.h"

void rb_vd_mxfp4_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_mxfp4 *x = vx;
    const rb_block_q8_0 *y = vy;
    const int64_t nb = n / RB_QK_MXFP4;
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)rb_mxfp4_values));
    __m512 acc = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        const __m512i dot = rb_lut16_dot2_avx512(table, x[b].qs, x[b + 1].qs, y[b].qs, y[b + 1].qs);
        const __m512 d = _mm512_mask_blend_ps((__mmask16)0xFF00,
                                              _mm512_set1_ps(rb_e8m0_half_to_f32(x[b].e) * _cvtsh_ss(y[b].d)),
                                              _mm512_set1_ps(rb_e8m0_half_to_f32(x[b + 1].e) * _cvtsh_ss(y[b + 1].d)));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot), acc);
    }
    float tail = 0.0f;
    if (b < nb) rb_vd_mxfp4_avx2(RB_QK_MXFP4, &tail, x + b, y + b);
    *s = _mm512_reduce_add_ps(acc) + tail;
}

/* AVX-512 VNNI dot products of iq4_nl (against q8_0) and iq4_xs (against
 * q8_K) weights, two 32-value groups a step (rb_lut16_dot2_avx512). iq4_nl
 * scales the two blocks' int32 lanes by their d_x * d_y in f32 (an odd last
 * block goes through the AVX2 kernel); iq4_xs multiplies each group's lanes by its scale minus 32 in
 * int32 and converts once per 256 values. Compiled with -mavx512f
 * -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c. */
#include "backends/cpu/kernels_avx2.h"
#include "backends/cpu/kernels_avx512.h"
#include "backends/cpu/simd_avx512_lut.h"
#include "rbee/quant.h"

void rb_vd_iq4_nl_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq4_nl *x = vx;
    const rb_block_q8_0 *y = vy;
    const int64_t nb = n / RB_QK4_NL;
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)rb_iq4nl_values));
    __m512 acc = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        const __m512i dot = rb_lut16_dot2_avx512(table, x[b].qs, x[b + 1].qs, y[b].qs, y[b + 1].qs);
        const __m512 d = _mm512_mask_blend_ps((__mmask16)0xFF00, _mm512_set1_ps(_cvtsh_ss(x[b].d) * _cvtsh_ss(y[b].d)),
                                              _mm512_set1_ps(_cvtsh_ss(x[b + 1].d) * _cvtsh_ss(y[b + 1].d)));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot), acc);
    }
    float tail = 0.0f;
    if (b < nb) rb_vd_iq4_nl_avx2(RB_QK4_NL, &tail, x + b, y + b);
    *s = _mm512_reduce_add_ps(acc) + tail;
}

void rb_vd_iq4_xs_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq4_xs *x = vx;
    const rb_block_q8_K *y = vy;
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)rb_iq4nl_values));
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        __m512i isum = _mm512_setzero_si512();
        for (int i = 0; i < RB_QK_K / 32; i += 2) {
            const __m512i dot = rb_lut16_dot2_avx512(table, x[b].qs + 16 * i, x[b].qs + 16 * (i + 1), y[b].qs + 32 * i,
                                     y[b].qs + 32 * (i + 1));
            const __m512i sc = _mm512_mask_blend_epi32((__mmask16)0xFF00, _mm512_set1_epi32(rb_iq4_xs_scale(&x[b], i) - 32),
                                                       _mm512_set1_epi32(rb_iq4_xs_scale(&x[b], i + 1) - 32));
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(dot, sc));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(x[b].d) * y[b].d), _mm512_cvtepi32_ps(isum), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

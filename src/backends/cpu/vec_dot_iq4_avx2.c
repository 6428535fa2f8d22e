/* AVX2 dot products of iq4_nl (against q8_0) and iq4_xs (against q8_K)
 * weights (compiled with -mavx2 -mfma -mf16c). The 16 table levels fit one
 * 128-bit lane, so a 32-value group's nibbles become signed levels with one
 * byte shuffle; the int8 dot with the activations is summed in int32
 * lanes. iq4_nl scales each block's lanes by d_x * d_y in f32; iq4_xs
 * multiplies each group's lanes by its scale minus 32 in int32 (exact) and
 * converts once per 256 values, as the scalar kernels do. */
#include "backends/cpu/kernels_avx2.h"
#include "backends/cpu/simd_avx2_util.h"
#include "rbee/quant.h"

static inline __m256i levels(__m256i table, const uint8_t *qs) { return _mm256_shuffle_epi8(table, rb_nibbles32(qs)); }

void rb_vd_iq4_nl_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq4_nl *x = vx;
    const rb_block_q8_0 *y = vy;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rb_iq4nl_values));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / RB_QK4_NL; b++) {
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(x[b].d) * _cvtsh_ss(y[b].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rb_dot_i8_i32(levels(table, x[b].qs), qy)), acc);
    }
    *s = rb_hsum_ps256(acc);
}

void rb_vd_iq4_xs_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_iq4_xs *x = vx;
    const rb_block_q8_K *y = vy;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rb_iq4nl_values));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / RB_QK_K; b++) {
        __m256i isum = _mm256_setzero_si256();
        for (int i = 0; i < RB_QK_K / 32; i++) {
            const __m256i qy = _mm256_loadu_si256((const __m256i *)(y[b].qs + 32 * i));
            const __m256i dot = rb_dot_i8_i32(levels(table, x[b].qs + 16 * i), qy);
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(dot, _mm256_set1_epi32(rb_iq4_xs_scale(&x[b], i) - 32)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[b].d) * y[b].d), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = rb_hsum_ps256(acc);
}

/* AVX2 dot product of MXFP4 weights against q8_0 activations (compiled with
 * -mavx2 -mfma -mf16c). A block's 32 nibbles become the table's signed
 * values with one byte shuffle (the 16-entry table fits a lane), the int8
 * dot with the activations' quants is summed in int32 lanes, and the lanes
 * are scaled by 2^(e - 128) * d_y and accumulated in f32, as the scalar
 * kernel does per block (only the order of the f32 additions differs). */
#include "backends/cpu/kernels_avx2.h"
#include "backends/cpu/simd_avx2_util.h"
#include "rbee/quant.h"

void rb_vd_mxfp4_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const rb_block_mxfp4 *x = vx;
    const rb_block_q8_0 *y = vy;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rb_mxfp4_values));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / RB_QK_MXFP4; b++) {
        const __m256i qx = _mm256_shuffle_epi8(table, rb_nibbles32(x[b].qs));
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256 d = _mm256_set1_ps(rb_e8m0_half_to_f32(x[b].e) * _cvtsh_ss(y[b].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rb_dot_i8_i32(qx, qy)), acc);
    }
    *s = rb_hsum_ps256(acc);
}

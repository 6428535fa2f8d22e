/* The AVX-512 VNNI step that formats with a 16-entry table of signed int8
 * levels share (mxfp4, iq4_nl, iq4_xs): two 32-value groups of nibbles in
 * one zmm become their levels with one byte shuffle per 128-bit lane, and
 * vpdpbusd (unsigned x signed bytes) takes |level| and the activations with
 * the level's sign. Include only from sources compiled with -mavx512bw
 * -mavx512vnni -mavx2. */
#ifndef RBEE_CPU_SIMD_AVX512_LUT_H
#define RBEE_CPU_SIMD_AVX512_LUT_H

#include "backends/cpu/simd_avx2_util.h"

#include <immintrin.h>

/* table: the 16 levels in every 128-bit lane. Returns int32 lanes
 * [group a x8 | group b x8] of dot(levels(qa|qb), ya|yb), 32 nibbles and 32
 * activations a group. */
static inline __m512i rb_lut16_dot2_avx512(__m512i table, const uint8_t *qa, const uint8_t *qb, const int8_t *ya,
                                           const int8_t *yb) {
    const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(rb_nibbles32(qa)), rb_nibbles32(qb), 1);
    const __m512i qx = _mm512_shuffle_epi8(table, idx);
    const __m512i qy = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)ya)),
                                          _mm256_loadu_si256((const __m256i *)yb), 1);
    const __m512i sy = _mm512_mask_sub_epi8(qy, _mm512_movepi8_mask(qx), _mm512_setzero_si512(), qy);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(qx), sy);
}

#endif

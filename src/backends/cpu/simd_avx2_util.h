/* Internal: small AVX2 helpers shared by the files compiled with -mavx2
 * (nibble/bit unpacking, signed int8 dot, horizontal sums). Include only from
 * those files. */
#ifndef RBEE_CPU_SIMD_AVX2_UTIL_H
#define RBEE_CPU_SIMD_AVX2_UTIL_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

static inline float rb_hsum_ps256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int rb_hsum_epi32_256(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* 16 bytes of packed nibbles -> 32 bytes: low nibbles first, then high nibbles */
static inline __m256i rb_nibbles32(const uint8_t *p) {
    __m128i t = _mm_loadu_si128((const __m128i *)p);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* 32 bits -> 32 bytes, 0xFF where bit i is set */
static inline __m256i rb_bits32(const uint8_t *p) {
    uint32_t x;
    memcpy(&x, p, 4);
    __m256i v = _mm256_set1_epi32((int)x);
    const __m256i sel = _mm256_setr_epi64x(0x0000000000000000LL, 0x0101010101010101LL, 0x0202020202020202LL,
                                           0x0303030303030303LL);
    v = _mm256_shuffle_epi8(v, sel);
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL));
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

/* sum of 4 adjacent products of signed bytes, as 8 int32 lanes */
static inline __m256i rb_dot_i8_i32(__m256i x, __m256i y) {
    __m256i ax = _mm256_sign_epi8(x, x);
    __m256i sy = _mm256_sign_epi8(y, x);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

/* unsigned x bytes times signed y bytes, as 8 int32 lanes */
static inline __m256i rb_dot_u8_i32(__m256i x, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

#endif

/* AVX2 activation quantizers (f32 -> q8_0 / q8_1 / q8_K), byte-identical to
 * the scalar ones: the same float scale and multiply per element and the
 * default nearest-even conversion (for q8_0/q8_1 this is ggml's x86 rule,
 * see quantize_act_scalar.c). Compiled with -mavx2 -mfma. */
#include "backends/cpu/kernels_avx2.h"
#include "backends/cpu/simd_avx2_util.h"

#include <math.h>

static inline float hmax256(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* 4 x 8 int32 (already in int8 range) -> 32 int8 in order */
static inline __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline void q8_block(const float *x, int8_t *qs, float *d_out, int *sum_out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    const float m = hmax256(amax), d = m / 127.0f;
    const __m256 id = _mm256_set1_ps(m != 0.0f ? 127.0f / m : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; i++)
        q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i p = pack32(q[0], q[1], q[2], q[3]);
    _mm256_storeu_si256((__m256i *)qs, p);
    if (sum_out) {
        __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        *sum_out = rb_hsum_epi32_256(s);
    }
    *d_out = d;
}

void rb_q8_0_from_f32_avx2(const float *x, void *vy, int64_t n) {
    rb_block_q8_0 *y = vy;
    for (int64_t b = 0; b < n / 32; b++) {
        float d;
        q8_block(x + b * 32, y[b].qs, &d, NULL);
        y[b].d = (rb_f16)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    }
}

void rb_q8_1_from_f32_avx2(const float *x, void *vy, int64_t n) {
    rb_block_q8_1 *y = vy;
    for (int64_t b = 0; b < n / 32; b++) {
        float d;
        int sum;
        q8_block(x + b * 32, y[b].qs, &d, &sum);
        y[b].d = (rb_f16)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        y[b].s = (rb_f16)_cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

void rb_q8_K_from_f32_avx2(const float *x, void *vy, int64_t n) {
    rb_block_q8_K *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / RB_QK_K; b++, x += RB_QK_K) {
        __m256 amaxv = _mm256_setzero_ps();
        for (int i = 0; i < RB_QK_K; i += 8) amaxv = _mm256_max_ps(amaxv, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
        const float amax = hmax256(amaxv);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        /* the first element of largest magnitude gives the sign, as in the reference */
        float max = 0.0f;
        const __m256 av = _mm256_set1_ps(amax);
        for (int i = 0; i < RB_QK_K; i += 8) {
            __m256 xi = _mm256_loadu_ps(x + i);
            int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, xi), av, _CMP_EQ_OQ));
            if (mask) {
                max = x[i + __builtin_ctz((unsigned)mask)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int i = 0; i < RB_QK_K; i += 32) {
            __m256i q[4];
            for (int j = 0; j < 4; j++)
                q[j] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + i + 8 * j))), lim);
            __m256i p = pack32(q[0], q[1], q[2], q[3]);
            _mm256_storeu_si256((__m256i *)(y[b].qs + i), p);
            /* group sums of 16: lanes of q[0],q[1] and q[2],q[3] */
            y[b].bsums[i / 16] = (int16_t)rb_hsum_epi32_256(_mm256_add_epi32(q[0], q[1]));
            y[b].bsums[i / 16 + 1] = (int16_t)rb_hsum_epi32_256(_mm256_add_epi32(q[2], q[3]));
        }
        y[b].d = 1.0f / iscale;
    }
}

/* Implementation of mm_testlib.h. */
#include "mm_testlib.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

const rb_dtype mm_weight_dtypes[] = {RB_F32,  RB_F16,  RB_BF16, RB_Q4_0, RB_Q4_1, RB_Q5_0, RB_Q5_1,
                                     RB_Q8_0, RB_Q2_K, RB_Q3_K, RB_Q4_K, RB_Q5_K, RB_Q6_K, RB_MXFP4,
                                     RB_IQ4_NL, RB_IQ4_XS, RB_IQ3_XXS, RB_IQ3_S, RB_IQ2_XXS, RB_IQ2_XS,
                                     RB_IQ2_S, RB_IQ1_S, RB_IQ1_M};
const int mm_n_weight_dtypes = (int)(sizeof mm_weight_dtypes / sizeof mm_weight_dtypes[0]);

void mm_fill(tu_rng *r, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) {
        float v = tu_rng_normal(r) * scale;
        if (tu_rng_u64(r) % 61 == 0) v *= 4.0f;
        x[i] = v;
    }
}

/* The nearest of the 16 iq4 levels to v / d (the decoder is what the
 * tests check; any valid block serves as a weight). */
static uint8_t iq4_index(float v, float d) {
    static const int lv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    int best = 0;
    for (int i = 1; i < 16; i++)
        if (fabsf((float)lv[i] * d - v) < fabsf((float)lv[best] * d - v)) best = i;
    return (uint8_t)best;
}

static float amax32(const float *v) {
    float a = 0.0f;
    for (int j = 0; j < 32; j++) a = fmaxf(a, fabsf(v[j]));
    return a;
}

static void iq4_pack(const float *v, float d, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(iq4_index(v[j], d) | iq4_index(v[j + 16], d) << 4);
}

/* The iq formats have no encoder in rbee (they are read only): a simple
 * test encoder, scale amax / 127 per 32 (iq4_xs: a 6-bit multiple of the
 * block's amax / (127 * 31)). */
static void encode_iq4(rb_dtype t, const float *x, void *q, int64_t n) {
    if (t == RB_IQ4_NL) {
        rb_block_iq4_nl *b = q;
        for (int64_t i = 0; i < n / 32; i++) {
            b[i].d = rb_f32_to_f16(amax32(x + 32 * i) / 127.0f);
            iq4_pack(x + 32 * i, rb_f16_to_f32(b[i].d), b[i].qs);
        }
        return;
    }
    rb_block_iq4_xs *b = q;
    for (int64_t i = 0; i < n / RB_QK_K; i++) {
        const float *v = x + RB_QK_K * i;
        float amax = 0.0f;
        for (int g = 0; g < 8; g++) amax = fmaxf(amax, amax32(v + 32 * g));
        b[i].d = rb_f32_to_f16(amax / (127.0f * 31.0f));
        const float d = rb_f16_to_f32(b[i].d);
        memset(b[i].scales_l, 0, sizeof b[i].scales_l);
        b[i].scales_h = 0;
        for (int g = 0; g < 8; g++) {
            int ls = d > 0.0f ? (int)lrintf(amax32(v + 32 * g) / (127.0f * d)) + 32 : 32;
            if (g == 3) ls = 32 - (ls - 32); /* a negative scale too */
            ls = ls < 0 ? 0 : ls > 63 ? 63 : ls;
            b[i].scales_l[g / 2] |= (uint8_t)((ls & 15) << (4 * (g % 2)));
            b[i].scales_h |= (uint16_t)((ls >> 4) << (2 * g));
            iq4_pack(v + 32 * g, d * (float)(ls - 32), b[i].qs + 16 * g);
        }
    }
}

/* iq3 / iq2 / iq1 blocks: bytes from a generator seeded by x (grid indices,
 * signs, shifts and scales all random), d = 1/256: values up to about 2 in
 * magnitude. iq1_m keeps d in the top nibbles of its 4 scale words. */
static void encode_lattice(rb_dtype t, const float *x, void *q, int64_t n) {
    uint32_t st;
    memcpy(&st, x, sizeof st);
    st |= 1u;
    const size_t bs = rb_dtype_info((int)t)->type_size;
    unsigned char *p = q;
    for (int64_t b = 0; b < n / RB_QK_K; b++, p += bs) {
        for (size_t k = 0; k < bs; k++) {
            st ^= st << 13;
            st ^= st >> 17;
            st ^= st << 5;
            p[k] = (unsigned char)(st >> 8);
        }
        const rb_f16 d = rb_f32_to_f16(1.0f / 256.0f);
        if (t == RB_IQ1_M) {
            unsigned char *sc = p + offsetof(rb_block_iq1_m, scales);
            for (int k = 0; k < 4; k++)
                sc[2 * k + 1] = (unsigned char)((sc[2 * k + 1] & 15u) | ((d >> (4 * k)) & 15u) << 4);
        } else {
            memcpy(p, &d, sizeof d);
        }
    }
}

void *mm_encode(rb_dtype t, const float *x, int64_t rows, int64_t n) {
    size_t rs = rb_dtype_row_size(t, n);
    assert_true(rs > 0);
    void *q = malloc(rs * (size_t)rows);
    assert_non_null(q);
    if (t == RB_IQ4_NL || t == RB_IQ4_XS) {
        for (int64_t r = 0; r < rows; r++) encode_iq4(t, x + r * n, (char *)q + (size_t)r * rs, n);
        return q;
    }
    if (t == RB_IQ3_XXS || t == RB_IQ3_S || t == RB_IQ2_XXS || t == RB_IQ2_XS || t == RB_IQ2_S || t == RB_IQ1_S ||
        t == RB_IQ1_M) {
        for (int64_t r = 0; r < rows; r++) encode_lattice(t, x + r * n, (char *)q + (size_t)r * rs, n);
        return q;
    }
    TU_OK(rb_quantize_rows(t, x, q, rows, n));
    return q;
}

float *mm_decode(rb_dtype t, const void *q, int64_t rows, int64_t n) {
    size_t rs = rb_dtype_row_size(t, n);
    float *x = malloc(sizeof(float) * (size_t)(rows * n));
    assert_non_null(x);
    for (int64_t r = 0; r < rows; r++) TU_OK(rb_dequantize_row(t, (const char *)q + (size_t)r * rs, x + r * n, n));
    return x;
}

double mm_dot_ref(const float *x, const float *y, int64_t n, double *abs_sum) {
    double s = 0, a = 0;
    for (int64_t i = 0; i < n; i++) {
        double p = (double)x[i] * (double)y[i];
        s += p;
        a += fabs(p);
    }
    if (abs_sum) *abs_sum = a;
    return s;
}

bool mm_small_block(rb_dtype t) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t);
    return tr && tr->block_size <= 32;
}

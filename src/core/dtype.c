/* Dtype traits table and half-precision conversions (see include/rbee/dtype.h).
 * Block sizes and byte sizes are those of ggml's block structs in quant.h. */
#include "rbee/dtype.h"
#include "rbee/quant.h"

#include <string.h>
#include <strings.h>

static const rb_dtype_traits k_traits[RB_DTYPE_END_] = {
    [RB_F32] = {"f32", 1, 4, false, true},
    [RB_F16] = {"f16", 1, 2, false, true},
    [RB_Q4_0] = {"q4_0", RB_QK4_0, sizeof(rb_block_q4_0), true, false},
    [RB_Q4_1] = {"q4_1", RB_QK4_1, sizeof(rb_block_q4_1), true, false},
    [RB_Q5_0] = {"q5_0", RB_QK5_0, sizeof(rb_block_q5_0), true, false},
    [RB_Q5_1] = {"q5_1", RB_QK5_1, sizeof(rb_block_q5_1), true, false},
    [RB_Q8_0] = {"q8_0", RB_QK8_0, sizeof(rb_block_q8_0), true, false},
    [RB_Q8_1] = {"q8_1", RB_QK8_1, sizeof(rb_block_q8_1), true, false},
    [RB_Q2_K] = {"q2_K", RB_QK_K, sizeof(rb_block_q2_K), true, false},
    [RB_Q3_K] = {"q3_K", RB_QK_K, sizeof(rb_block_q3_K), true, false},
    [RB_Q4_K] = {"q4_K", RB_QK_K, sizeof(rb_block_q4_K), true, false},
    [RB_Q5_K] = {"q5_K", RB_QK_K, sizeof(rb_block_q5_K), true, false},
    [RB_Q6_K] = {"q6_K", RB_QK_K, sizeof(rb_block_q6_K), true, false},
    [RB_Q8_K] = {"q8_K", RB_QK_K, sizeof(rb_block_q8_K), true, false},
    [RB_IQ2_XXS] = {"iq2_xxs", RB_QK_K, sizeof(rb_block_iq2_xxs), true, false},
    [RB_IQ2_XS] = {"iq2_xs", RB_QK_K, sizeof(rb_block_iq2_xs), true, false},
    [RB_IQ2_S] = {"iq2_s", RB_QK_K, sizeof(rb_block_iq2_s), true, false},
    [RB_IQ1_S] = {"iq1_s", RB_QK_K, sizeof(rb_block_iq1_s), true, false},
    [RB_IQ1_M] = {"iq1_m", RB_QK_K, sizeof(rb_block_iq1_m), true, false},
    [RB_IQ3_XXS] = {"iq3_xxs", RB_QK_K, sizeof(rb_block_iq3_xxs), true, false},
    [RB_IQ3_S] = {"iq3_s", RB_QK_K, sizeof(rb_block_iq3_s), true, false},
    [RB_IQ4_NL] = {"iq4_nl", RB_QK4_NL, sizeof(rb_block_iq4_nl), true, false},
    [RB_IQ4_XS] = {"iq4_xs", RB_QK_K, sizeof(rb_block_iq4_xs), true, false},
    [RB_I8] = {"i8", 1, 1, false, false},
    [RB_I16] = {"i16", 1, 2, false, false},
    [RB_I32] = {"i32", 1, 4, false, false},
    [RB_I64] = {"i64", 1, 8, false, false},
    [RB_F64] = {"f64", 1, 8, false, true},
    [RB_BF16] = {"bf16", 1, 2, false, true},
    [RB_MXFP4] = {"mxfp4", RB_QK_MXFP4, sizeof(rb_block_mxfp4), true, false},
};

const rb_dtype_traits *rb_dtype_info(int id) {
    if (id < 0 || id >= RB_DTYPE_END_ || k_traits[id].name == NULL) return NULL;
    return &k_traits[id];
}

const char *rb_dtype_name(rb_dtype t) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t);
    return tr ? tr->name : "?";
}

bool rb_dtype_from_name(const char *name, rb_dtype *out) {
    if (!name) return false;
    for (int i = 0; i < RB_DTYPE_END_; i++) {
        if (k_traits[i].name && strcasecmp(k_traits[i].name, name) == 0) {
            *out = (rb_dtype)i;
            return true;
        }
    }
    return false;
}

size_t rb_dtype_row_size(rb_dtype t, int64_t n) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t);
    if (!tr || n < 0 || n % tr->block_size != 0) return 0;
    uint64_t blocks = (uint64_t)(n / tr->block_size);
    if (blocks != 0 && (uint64_t)tr->type_size > SIZE_MAX / blocks) return 0;
    return (size_t)(blocks * tr->type_size);
}

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float rb_f16_to_f32(rb_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        /* subnormal: value = mant * 2^-24 */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    /* inf, or NaN returned quiet (payload kept), as the F16C instruction does */
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u));
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

rb_f16 rb_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (rb_f16)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* NaN */
    if (ax >= 0x477ff000u) return (rb_f16)(sign | 0x7c00u); /* rounds to >= 65520 -> inf */
    if (ax < 0x38800000u) {
        /* result is subnormal or zero: round ax * 2^24 to nearest even */
        float v = bits_f32(ax) * 16777216.0f; /* exact scaling, v < 1024 */
        uint32_t i = (uint32_t)v;
        float rem = v - (float)i;
        if (rem > 0.5f || (rem == 0.5f && (i & 1u))) i++;
        return (rb_f16)(sign | i);
    }
    /* normal: rebias exponent, round mantissa to 10 bits (nearest even) */
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
    return (rb_f16)(sign | ((r - 0x38000000u) >> 13));
}

float rb_bf16_to_f32(rb_bf16 h) { return bits_f32((uint32_t)h << 16); }

rb_bf16 rb_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (rb_bf16)((x >> 16) | 64u); /* quiet NaN */
    return (rb_bf16)((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

void rb_f16_to_f32_row(const rb_f16 *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = rb_f16_to_f32(src[i]);
}
void rb_f32_to_f16_row(const float *src, rb_f16 *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = rb_f32_to_f16(src[i]);
}
void rb_bf16_to_f32_row(const rb_bf16 *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = rb_bf16_to_f32(src[i]);
}
void rb_f32_to_bf16_row(const float *src, rb_bf16 *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = rb_f32_to_bf16(src[i]);
}

/* Public entry points of the quant module (include/rbee/quant.h): validate
 * the dtype and element count, then dispatch to the per-format block encoders
 * and decoders (quant_legacy.c, quant_kquant_*.c, quant_mxfp4.c, quant_iq4.c,
 * quant_iq3.c, quant_iq2.c, quant_iq1.c; the iq formats are decoded only: rb_quant_can_quantize says
 * no). Plain float and integer types are converted element by element here. */
#include "quant_internal.h"

#include "rbee/dtype.h"

#include <string.h>

/* Checks dtype validity and that n is a non-negative multiple of its block
 * size; on success stores the number of blocks (elements for plain types). */
static rb_status check_shape(rb_dtype t, int64_t n, int64_t *nb) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t);
    if (!tr || n < 0 || n % tr->block_size != 0) return RB_E_INVALID;
    *nb = n / tr->block_size;
    return RB_OK;
}

/* Plain types are read with memcpy so unaligned sources are fine. */
#define RB_CONVERT_LOOP(CTYPE)                                                                       \
    do {                                                                                             \
        const unsigned char *p_ = src;                                                               \
        for (int64_t i_ = 0; i_ < n; i_++) {                                                         \
            CTYPE v_;                                                                                \
            memcpy(&v_, p_ + (size_t)i_ * sizeof(CTYPE), sizeof(CTYPE));                            \
            dst[i_] = (float)v_;                                                                     \
        }                                                                                            \
    } while (0)

static rb_status dequantize_plain(rb_dtype t, const void *src, float *dst, int64_t n) {
    switch (t) {
    case RB_F32: memmove(dst, src, (size_t)n * sizeof(float)); return RB_OK;
    case RB_F64: RB_CONVERT_LOOP(double); return RB_OK;
    case RB_I8: RB_CONVERT_LOOP(int8_t); return RB_OK;
    case RB_I16: RB_CONVERT_LOOP(int16_t); return RB_OK;
    case RB_I32: RB_CONVERT_LOOP(int32_t); return RB_OK;
    case RB_I64: RB_CONVERT_LOOP(int64_t); return RB_OK;
    case RB_F16:
    case RB_BF16: {
        const unsigned char *p = src;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = t == RB_F16 ? rb_f16_to_f32(h) : rb_bf16_to_f32(h);
        }
        return RB_OK;
    }
    default: return RB_E_INVALID;
    }
}

rb_status rb_dequantize_row(rb_dtype t, const void *src, float *dst, int64_t n) {
    int64_t nb;
    if (check_shape(t, n, &nb) != RB_OK) return RB_E_INVALID;
    if (n == 0) return RB_OK;
    if (!src || !dst) return RB_E_INVALID;
    switch (t) {
    case RB_Q4_0: rb_q4_0_decode(src, dst, nb); return RB_OK;
    case RB_Q4_1: rb_q4_1_decode(src, dst, nb); return RB_OK;
    case RB_Q5_0: rb_q5_0_decode(src, dst, nb); return RB_OK;
    case RB_Q5_1: rb_q5_1_decode(src, dst, nb); return RB_OK;
    case RB_Q8_0: rb_q8_0_decode(src, dst, nb); return RB_OK;
    case RB_Q8_1: rb_q8_1_decode(src, dst, nb); return RB_OK;
    case RB_Q2_K: rb_q2_K_decode(src, dst, nb); return RB_OK;
    case RB_Q3_K: rb_q3_K_decode(src, dst, nb); return RB_OK;
    case RB_Q4_K: rb_q4_K_decode(src, dst, nb); return RB_OK;
    case RB_Q5_K: rb_q5_K_decode(src, dst, nb); return RB_OK;
    case RB_Q6_K: rb_q6_K_decode(src, dst, nb); return RB_OK;
    case RB_Q8_K: rb_q8_K_decode(src, dst, nb); return RB_OK;
    case RB_MXFP4: rb_mxfp4_decode(src, dst, nb); return RB_OK;
    case RB_IQ2_XXS: rb_iq2_xxs_decode(src, dst, nb); return RB_OK;
    case RB_IQ2_XS: rb_iq2_xs_decode(src, dst, nb); return RB_OK;
    case RB_IQ2_S: rb_iq2_s_decode(src, dst, nb); return RB_OK;
    case RB_IQ1_S: rb_iq1_s_decode(src, dst, nb); return RB_OK;
    case RB_IQ1_M: rb_iq1_m_decode(src, dst, nb); return RB_OK;
    case RB_IQ3_XXS: rb_iq3_xxs_decode(src, dst, nb); return RB_OK;
    case RB_IQ3_S: rb_iq3_s_decode(src, dst, nb); return RB_OK;
    case RB_IQ4_NL: rb_iq4_nl_decode(src, dst, nb); return RB_OK;
    case RB_IQ4_XS: rb_iq4_xs_decode(src, dst, nb); return RB_OK;
    default: return dequantize_plain(t, src, dst, n);
    }
}

bool rb_quant_can_quantize(rb_dtype t) {
    switch (t) {
    case RB_F32: case RB_F16: case RB_BF16: case RB_F64:
    case RB_Q4_0: case RB_Q4_1: case RB_Q5_0: case RB_Q5_1: case RB_Q8_0: case RB_Q8_1:
    case RB_Q2_K: case RB_Q3_K: case RB_Q4_K: case RB_Q5_K: case RB_Q6_K: case RB_Q8_K: case RB_MXFP4:
        return true;
    default: return false; /* integer targets would need a rounding policy; none is defined */
    }
}

static void quantize_plain(rb_dtype t, const float *src, void *dst, int64_t n) {
    unsigned char *p = dst;
    for (int64_t i = 0; i < n; i++) {
        switch (t) {
        case RB_F32: memcpy(p + 4 * i, &src[i], 4); break;
        case RB_F64: {
            const double v = (double)src[i];
            memcpy(p + 8 * i, &v, 8);
            break;
        }
        case RB_F16: {
            const rb_f16 h = rb_f32_to_f16(src[i]);
            memcpy(p + 2 * i, &h, 2);
            break;
        }
        default: { /* RB_BF16, the only other float target */
            const rb_bf16 h = rb_f32_to_bf16(src[i]);
            memcpy(p + 2 * i, &h, 2);
            break;
        }
        }
    }
}

rb_status rb_quantize_row(rb_dtype t, const float *src, void *dst, int64_t n) {
    int64_t nb;
    if (check_shape(t, n, &nb) != RB_OK) return RB_E_INVALID;
    if (!rb_quant_can_quantize(t)) return RB_E_UNSUPPORTED;
    if (n == 0) return RB_OK;
    if (!src || !dst) return RB_E_INVALID;
    switch (t) {
    case RB_Q4_0: rb_q4_0_encode(src, dst, nb); return RB_OK;
    case RB_Q4_1: rb_q4_1_encode(src, dst, nb); return RB_OK;
    case RB_Q5_0: rb_q5_0_encode(src, dst, nb); return RB_OK;
    case RB_Q5_1: rb_q5_1_encode(src, dst, nb); return RB_OK;
    case RB_Q8_0: rb_q8_0_encode(src, dst, nb); return RB_OK;
    case RB_Q8_1: rb_q8_1_encode(src, dst, nb); return RB_OK;
    case RB_Q2_K: rb_q2_K_encode(src, dst, nb); return RB_OK;
    case RB_Q3_K: rb_q3_K_encode(src, dst, nb); return RB_OK;
    case RB_Q4_K: rb_q4_K_encode(src, dst, nb); return RB_OK;
    case RB_Q5_K: rb_q5_K_encode(src, dst, nb); return RB_OK;
    case RB_Q6_K: rb_q6_K_encode(src, dst, nb); return RB_OK;
    case RB_Q8_K: rb_q8_K_encode(src, dst, nb); return RB_OK;
    case RB_MXFP4: rb_mxfp4_encode(src, dst, nb); return RB_OK;
    default: quantize_plain(t, src, dst, n); return RB_OK;
    }
}

rb_status rb_quantize_rows(rb_dtype t, const float *src, void *dst, int64_t nrows, int64_t n_per_row) {
    int64_t nb;
    if (nrows < 0 || check_shape(t, n_per_row, &nb) != RB_OK) return RB_E_INVALID;
    if (!rb_quant_can_quantize(t)) return RB_E_UNSUPPORTED;
    if (nrows == 0 || n_per_row == 0) return RB_OK;
    if (!src || !dst) return RB_E_INVALID;
    const size_t row_bytes = rb_dtype_row_size(t, n_per_row);
    if (row_bytes == 0 || (uint64_t)nrows > SIZE_MAX / row_bytes || nrows > INT64_MAX / n_per_row)
        return RB_E_INVALID;
    unsigned char *out = dst;
    for (int64_t r = 0; r < nrows; r++) {
        const rb_status s = rb_quantize_row(t, src + r * n_per_row, out + (size_t)r * row_bytes, n_per_row);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

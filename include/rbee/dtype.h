/* Element types: plain floats/ints and the ggml block-quantized formats.
 * The enum values equal ggml's type ids (ggml.h `enum ggml_type`), so GGUF
 * tensor-info type fields map to rb_dtype without a table. Half-precision
 * conversions (f16, bf16) use round-to-nearest-even, bit-identical to ggml. */
#ifndef RBEE_DTYPE_H
#define RBEE_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rb_dtype {
    RB_F32 = 0,
    RB_F16 = 1,
    RB_Q4_0 = 2,
    RB_Q4_1 = 3,
    RB_Q5_0 = 6,
    RB_Q5_1 = 7,
    RB_Q8_0 = 8,
    RB_Q8_1 = 9,
    RB_Q2_K = 10,
    RB_Q3_K = 11,
    RB_Q4_K = 12,
    RB_Q5_K = 13,
    RB_Q6_K = 14,
    RB_Q8_K = 15,
    RB_IQ2_XXS = 16, /* 2-bit lattice: 8-value grid points of 256, signs, 4-bit scale per 32 (ggml's block_iq2_xxs) */
    RB_IQ2_XS = 17,  /* 2-bit lattice: 512 grid points, signs, 4-bit scale per 16 (ggml's block_iq2_xs) */
    RB_IQ3_XXS = 18, /* 3-bit lattice: 4-value grid points of 256, signs, 4-bit scale per 32 (ggml's block_iq3_xxs) */
    RB_IQ1_S = 19,   /* 1.56-bit: runs of 8 from a 2048-point {-1,0,1} grid, +-1/8 shift, 3-bit scale per 32
                        (ggml's block_iq1_s) */
    RB_IQ4_NL = 20, /* non-linear 4-bit: 16-entry value table, f16 scale per 32 (ggml's block_iq4_nl) */
    RB_IQ3_S = 21,   /* 3-bit lattice: 512 grid points, sign bits, 4-bit scale per 32 (ggml's block_iq3_s) */
    RB_IQ2_S = 22,   /* 2-bit lattice: 1024 grid points, sign bytes, 4-bit scale per 16 (ggml's block_iq2_s) */
    RB_IQ4_XS = 23, /* iq4_nl's table in 256-blocks with 6-bit scales per 32 (ggml's block_iq4_xs) */
    RB_I8 = 24,
    RB_I16 = 25,
    RB_I32 = 26,
    RB_I64 = 27,
    RB_F64 = 28,
    RB_IQ1_M = 29,   /* 1.75-bit: iq1_s's grid, a shift per 8, 3-bit scales per 16, no d field (ggml's block_iq1_m) */
    RB_BF16 = 30,
    RB_MXFP4 = 39, /* OCP microscaling FP4 (E2M1 values, E8M0 scale per 32), ggml's block_mxfp4 */
    RB_DTYPE_END_ = 40 /* one past the largest id; not a type */
} rb_dtype;

typedef struct rb_dtype_traits {
    const char *name;    /* lower-case ggml name: "f32", "q4_0", "q4_K", ... */
    int64_t block_size;  /* elements per block (1 for plain types) */
    size_t type_size;    /* bytes per block */
    bool is_quant;       /* block-quantized format */
    bool is_float;       /* f32/f16/bf16/f64 */
} rb_dtype_traits;

/* Traits of a known dtype, or NULL for an id that is not a type (use this to
 * validate ids read from files). */
const rb_dtype_traits *rb_dtype_info(int id);
static inline bool rb_dtype_valid(int id) { return rb_dtype_info(id) != NULL; }
const char *rb_dtype_name(rb_dtype t); /* "?" for invalid */
/* Parses a name (case-insensitive; "q4_k" == "q4_K"); returns false if unknown. */
bool rb_dtype_from_name(const char *name, rb_dtype *out);

/* Bytes needed for n elements of t, or 0 if n is not a multiple of the block
 * size (or on overflow). */
size_t rb_dtype_row_size(rb_dtype t, int64_t n);

/* Storage of half-precision values. */
typedef uint16_t rb_f16;
typedef uint16_t rb_bf16;

float rb_f16_to_f32(rb_f16 h);
rb_f16 rb_f32_to_f16(float f);   /* round to nearest even, NaN stays NaN, overflow -> inf */
float rb_bf16_to_f32(rb_bf16 h);
rb_bf16 rb_f32_to_bf16(float f); /* round to nearest even, NaN stays quiet NaN */

void rb_f16_to_f32_row(const rb_f16 *src, float *dst, int64_t n);
void rb_f32_to_f16_row(const float *src, rb_f16 *dst, int64_t n);
void rb_bf16_to_f32_row(const rb_bf16 *src, float *dst, int64_t n);
void rb_f32_to_bf16_row(const float *src, rb_bf16 *dst, int64_t n);

#ifdef __cplusplus
}
#endif
#endif

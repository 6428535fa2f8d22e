/* ggml-compatible block-quantized formats: block structs with byte layouts
 * identical to ggml's (so GGUF tensors are used in place), and the reference
 * quantize / dequantize routines. Half-precision fields are stored as raw
 * IEEE binary16 bits (rb_f16). The SIMD dot products that consume these
 * blocks live in the CPU backend; these routines are the portable reference. */
#ifndef RBEE_QUANT_H
#define RBEE_QUANT_H

#include "rbee/dtype.h"
#include "rbee/status.h"

#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RB_QK4_0 32
#define RB_QK4_1 32
#define RB_QK5_0 32
#define RB_QK5_1 32
#define RB_QK8_0 32
#define RB_QK8_1 32
#define RB_QK_K 256
#define RB_QK_MXFP4 32
#define RB_QK4_NL 32
#define RB_K_SCALE_SIZE 12

typedef struct { rb_f16 d; uint8_t qs[RB_QK4_0 / 2]; } rb_block_q4_0;
typedef struct { rb_f16 d; rb_f16 m; uint8_t qs[RB_QK4_1 / 2]; } rb_block_q4_1;
typedef struct { rb_f16 d; uint8_t qh[4]; uint8_t qs[RB_QK5_0 / 2]; } rb_block_q5_0;
typedef struct { rb_f16 d; rb_f16 m; uint8_t qh[4]; uint8_t qs[RB_QK5_1 / 2]; } rb_block_q5_1;
typedef struct { rb_f16 d; int8_t qs[RB_QK8_0]; } rb_block_q8_0;
/* q8_1: d = scale, s = d * sum(qs) (used for activations against q4_1/q5_1) */
typedef struct { rb_f16 d; rb_f16 s; int8_t qs[RB_QK8_1]; } rb_block_q8_1;

typedef struct {
    uint8_t scales[RB_QK_K / 16]; /* 4-bit scales (low) and mins (high) */
    uint8_t qs[RB_QK_K / 4];      /* 2-bit quants */
    rb_f16 d;                     /* super-block scale for scales */
    rb_f16 dmin;                  /* super-block scale for mins */
} rb_block_q2_K;

typedef struct {
    uint8_t hmask[RB_QK_K / 8]; /* high bit of the quants */
    uint8_t qs[RB_QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];         /* 6-bit scales, packed */
    rb_f16 d;
} rb_block_q3_K;

typedef struct {
    rb_f16 d;
    rb_f16 dmin;
    uint8_t scales[RB_K_SCALE_SIZE]; /* 6-bit scales and mins, packed */
    uint8_t qs[RB_QK_K / 2];
} rb_block_q4_K;

typedef struct {
    rb_f16 d;
    rb_f16 dmin;
    uint8_t scales[RB_K_SCALE_SIZE];
    uint8_t qh[RB_QK_K / 8];
    uint8_t qs[RB_QK_K / 2];
} rb_block_q5_K;

typedef struct {
    uint8_t ql[RB_QK_K / 2];     /* low 4 bits */
    uint8_t qh[RB_QK_K / 4];     /* high 2 bits */
    int8_t scales[RB_QK_K / 16]; /* 8-bit scales */
    rb_f16 d;
} rb_block_q6_K;

/* q8_K: activations for k-quant dot products; bsums = sums of groups of 16 */
typedef struct {
    float d;
    int8_t qs[RB_QK_K];
    int16_t bsums[RB_QK_K / 16];
} rb_block_q8_K;

/* mxfp4: e is an E8M0 exponent, the block's scale is 2^(e - 128) (ggml's
 * "half" scale: the value table rb_mxfp4_values holds the E2M1 values
 * doubled); value j < 16 is the low nibble of qs[j], value j + 16 the high
 * one, each an index into the table (bit 3 the sign). */
typedef struct { uint8_t e; uint8_t qs[RB_QK_MXFP4 / 2]; } rb_block_mxfp4;

/* iq4_nl: value j < 16 is the low nibble of qs[j], value j + 16 the high
 * one, each an index into rb_iq4nl_values, times d. */
typedef struct { rb_f16 d; uint8_t qs[RB_QK4_NL / 2]; } rb_block_iq4_nl;
/* iq4_xs: eight sub-blocks of 32 laid out as iq4_nl's qs; sub-block i has
 * the 6-bit scale ls = (scales_l[i / 2] >> 4 * (i % 2)) & 15 | ((scales_h >>
 * 2 * i) & 3) << 4 and its values are d * (ls - 32) * table[nibble]. */
typedef struct {
    rb_f16 d;
    uint16_t scales_h;
    uint8_t scales_l[RB_QK_K / 64];
    uint8_t qs[RB_QK_K / 2];
} rb_block_iq4_xs;

/* iq3_xxs / iq3_s: see src/core/quant_iq3.c for the layouts. */
typedef struct { rb_f16 d; uint8_t qs[3 * RB_QK_K / 8]; } rb_block_iq3_xxs;
typedef struct {
    rb_f16 d;
    uint8_t qs[RB_QK_K / 4];
    uint8_t qh[RB_QK_K / 32];
    uint8_t signs[RB_QK_K / 8];
    uint8_t scales[RB_QK_K / 64];
} rb_block_iq3_s;

/* iq2_xxs / iq2_xs: see src/core/quant_iq2.c for the layouts. iq2_xs's qs
 * are little-endian 16-bit words (a 9-bit grid index, a 7-bit sign field). */
typedef struct { rb_f16 d; uint8_t qs[RB_QK_K / 4]; } rb_block_iq2_xxs;
typedef struct {
    rb_f16 d;
    uint16_t qs[RB_QK_K / 8];
    uint8_t scales[RB_QK_K / 32];
} rb_block_iq2_xs;

/* iq2_s: qs holds 32 grid-index low bytes (one per run of 8), then 32 sign
 * bytes; qh 2 high index bits per run; scales two 4-bit scales per 32 values
 * (src/core/quant_iq2.c). */
typedef struct {
    rb_f16 d;
    uint8_t qs[RB_QK_K / 4];
    uint8_t qh[RB_QK_K / 32];
    uint8_t scales[RB_QK_K / 32];
} rb_block_iq2_s;
/* iq1_s / iq1_m: see src/core/quant_iq1.c. iq1_s's qh are little-endian
 * 16-bit words (one per 32 values); iq1_m has no d field: its f16 scale is
 * spread over the top nibbles of its four little-endian scale words. */
typedef struct {
    rb_f16 d;
    uint8_t qs[RB_QK_K / 8];
    uint16_t qh[RB_QK_K / 32];
} rb_block_iq1_s;
typedef struct {
    uint8_t qs[RB_QK_K / 8];
    uint8_t qh[RB_QK_K / 16];
    uint8_t scales[RB_QK_K / 32];
} rb_block_iq1_m;

_Static_assert(sizeof(rb_block_iq2_s) == 82, "iq2_s layout");
_Static_assert(sizeof(rb_block_iq1_s) == 50, "iq1_s layout");
_Static_assert(sizeof(rb_block_iq1_m) == 56, "iq1_m layout");
_Static_assert(sizeof(rb_block_iq2_xxs) == 66, "iq2_xxs layout");
_Static_assert(sizeof(rb_block_iq2_xs) == 74, "iq2_xs layout");
_Static_assert(sizeof(rb_block_iq3_xxs) == 98, "iq3_xxs layout");
_Static_assert(sizeof(rb_block_iq3_s) == 110, "iq3_s layout");
_Static_assert(sizeof(rb_block_iq4_nl) == 18, "iq4_nl layout");
_Static_assert(sizeof(rb_block_iq4_xs) == 136, "iq4_xs layout");
_Static_assert(sizeof(rb_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(rb_block_mxfp4) == 17, "mxfp4 layout");
_Static_assert(sizeof(rb_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(rb_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(rb_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(rb_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(rb_block_q8_1) == 36, "q8_1 layout");
_Static_assert(sizeof(rb_block_q2_K) == 84, "q2_K layout");
_Static_assert(sizeof(rb_block_q3_K) == 110, "q3_K layout");
_Static_assert(sizeof(rb_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(rb_block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(rb_block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(rb_block_q8_K) == 292, "q8_K layout");

/* The 16 values an mxfp4 nibble stands for (E2M1 doubled: 0, 1, 2, 3, 4, 6, 8, 12 and their negatives). */
extern const int8_t rb_mxfp4_values[16];
/* The 16 values an iq4_nl / iq4_xs nibble stands for (a fixed non-uniform grid, part of the format). */
extern const int8_t rb_iq4nl_values[16];
/* The iq3 grids (quant_iq_tables.c): each point's four 3-bit level indices, and the 8 levels. */
extern const uint16_t rb_iq3xxs_grid[256], rb_iq3s_grid[512];
extern const uint8_t rb_iq3xxs_levels[8], rb_iq3s_levels[8];
/* The iq2 grids: each point's eight 2-bit level indices into rb_iq2_levels (8, 25, 43). */
extern const uint16_t rb_iq2xxs_grid[256], rb_iq2xs_grid[512];
extern const uint8_t rb_iq2_levels[3];
/* The iq2_s grid (1024 points, as the other iq2 grids) and the iq1_s / iq1_m
 * grid (2048 points, each eight 2-bit indices k of the values k - 1). */
extern const uint16_t rb_iq2s_grid[1024], rb_iq1s_grid[2048];
/* An iq2 / iq3_xxs 7-bit sign field as 8 sign bits: bit 7 is set when the
 * field has an odd number of ones (each run of 8 has an even count of minus signs). */
static inline unsigned rb_iq_signs8(unsigned s7) {
    unsigned p = s7 ^ (s7 >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return s7 | ((p & 1u) << 7);
}
/* The 6-bit scale of sub-block i (0..7) of an iq4_xs block, before the -32 offset. */
static inline int rb_iq4_xs_scale(const rb_block_iq4_xs *b, int i) {
    return ((b->scales_l[i / 2] >> (4 * (i % 2))) & 15) | (((b->scales_h >> (2 * i)) & 3) << 4);
}
/* 2^(e - 128) as f32 (subnormal for e < 2): an mxfp4 block's scale. Inline:
 * the SIMD dot products call it per block. */
static inline float rb_e8m0_half_to_f32(uint8_t e) {
    /* a subnormal bit pattern for e < 2, else a biased exponent of e - 1 */
    const uint32_t bits = e < 2 ? (uint32_t)0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Decodes n elements (a multiple of the block size) of type t into f32.
 * Works for every dtype (plain types are converted). RB_E_INVALID if n is not
 * a multiple of the block size or t is unknown. */
rb_status rb_dequantize_row(rb_dtype t, const void *src, float *dst, int64_t n);

/* Reference quantizer: encodes n f32 values into type t, producing exactly the
 * bytes ggml's quantize_row_<t>_ref produces (byte-identical for the legacy
 * formats q4_0, q4_1, q5_0, q5_1, q8_0, q8_1; the k-quants follow ggml's
 * reference algorithm without importance matrix). Plain types are converted. */
rb_status rb_quantize_row(rb_dtype t, const float *src, void *dst, int64_t n);

/* Quantizes nrows rows of n_per_row values each (row-major, contiguous);
 * returns RB_OK and writes rows * rb_dtype_row_size(t, n_per_row) bytes. */
rb_status rb_quantize_rows(rb_dtype t, const float *src, void *dst, int64_t nrows, int64_t n_per_row);

/* Whether rb_quantize_row supports t as a target (all weight formats plus the
 * activation formats q8_1 and q8_K). */
bool rb_quant_can_quantize(rb_dtype t);

#ifdef __cplusplus
}
#endif
#endif

/* The ggml block formats the GPU backend reads directly - q4_0, q8_0, q4_K,
 * q5_K, q6_K, mxfp4, iq4_nl, iq4_xs, iq3_xxs, iq3_s, iq2_xxs, iq2_xs, iq2_s,
 * iq1_s and iq1_m - described once here (fmt_*: byte layout, sizes and offsets;
 * include/rbee/quant.h has the C structs and the CPU's codecs), and their
 * device decoding at two granularities: one element (get_rows, cast) and a
 * "unit" of 32 consecutive elements of a row decoded into registers. The
 * matrix-vector kernels (matmul/matvec_fmt.cuh, matmul/matvec_direct.cuh)
 * read the same blocks with their own arithmetic, taking every size and
 * offset from the fmt_* structs. Every format here has rows made of whole
 * 32-element units. */
#ifndef RBEE_GPU_QUANT_CUH
#define RBEE_GPU_QUANT_CUH

#include "backends/gpu/gpu_common.cuh"
#include "backends/gpu/gpu_iq_tables.cuh"

namespace RB_GPU_NS {

/* q4_0: 32 elements in 18 bytes: f16 scale d (bytes 0-1), then qs[16]
 * (2-17) of two 4-bit values each - element i < 16 is the low nibble of
 * qs[i], element i + 16 its high nibble; value = d (nibble - 8). */
struct fmt_q4_0 {
    static constexpr int EL = 32, BYTES = 18, D = 0, QS = 2;
};

/* q8_0: 32 elements in 34 bytes: f16 scale d (0-1), then int8 qs[32]
 * (2-33); value = d qs[i]. */
struct fmt_q8_0 {
    static constexpr int EL = 32, BYTES = 34, D = 0, QS = 2;
};

/* q4_K: 256 elements in 144 bytes, 8 sub-blocks of 32: f16 d (0-1) and
 * dmin (2-3), 12 bytes of packed 6-bit scale sc and min m per sub-block
 * (4-15, q4k_scale_min), then qs[128] (16-143), where sub-blocks 2p and
 * 2p + 1 are the low and high nibbles of bytes 32p..32p+31; value =
 * d sc nibble - dmin m. */
struct fmt_q4_K {
    static constexpr int EL = 256, BYTES = 144, D = 0, DMIN = 2, SCALES = 4, QS = 16;
};

/* q5_K: 256 elements in 176 bytes, q4_K with a fifth bit: f16 d (0-1) and
 * dmin (2-3), the 12 scale bytes of q4_K (4-15), qh[32] (16-47), then
 * qs[128] (48-175) as q4_K's; element l of sub-block j (l < 32) adds bit j
 * of qh[l] as 16 to its nibble; value = d sc q - dmin m. */
struct fmt_q5_K {
    static constexpr int EL = 256, BYTES = 176, D = 0, DMIN = 2, SCALES = 4, QH = 16, QS = 48;
};

/* q6_K: 256 elements in 210 bytes: ql[128] (0-127, the low 4 bits), qh[64]
 * (128-191, the high 2 bits), int8 scales[16] (192-207, one per 16
 * elements), f16 d (208-209). Element 128n + 32g + l (half n, group g < 4,
 * l < 32): the low nibble of ql[64n + 32(g & 1) + l] for g < 2, its high
 * nibble for g >= 2, with bits 2g, 2g + 1 of qh[32n + l] above them;
 * value = d scales[8n + 2g + l / 16] (q - 32). */
struct fmt_q6_K {
    static constexpr int EL = 256, BYTES = 210, QL = 0, QH = 128, SC = 192, D = 208;
};

/* mxfp4 (gpt-oss experts): 32 elements in 17 bytes: a shared exponent e
 * (byte 0), then qs[16] (1-16) of two 4-bit E2M1 codes each - element
 * i < 16 is the low nibble of qs[i], element i + 16 its high nibble; value =
 * mxfp4_value(code) 2^(e - 128) (mxfp4_value is the doubled E2M1 value). */
struct fmt_mxfp4 {
    static constexpr int EL = 32, BYTES = 17, E = 0, QS = 1;
};

/* iq4_nl: 32 elements in 18 bytes: f16 scale d (0-1), then qs[16] (2-17)
 * of two 4-bit indices each, laid out as q4_0's; value = d iq4_level(index). */
struct fmt_iq4_nl {
    static constexpr int EL = 32, BYTES = 18, D = 0, QS = 2;
};

/* iq4_xs: 256 elements in 136 bytes, 8 sub-blocks of 32: f16 d (0-1), a
 * 16-bit word of the scales' high bits (2-3, bits 2j..2j+1 for sub-block
 * j), the scales' low 4 bits (4-7, nibble j % 2 of byte j / 2), then qs[128]
 * (8-135), sub-block j's 16 bytes laid out as iq4_nl's; value =
 * d (scale - 32) iq4_level(index). */
struct fmt_iq4_xs {
    static constexpr int EL = 256, BYTES = 136, D = 0, SH = 2, SL = 4, QS = 8;
};

/* The 16 levels of iq4_nl / iq4_xs (rb_iq4nl_values), four per word. */
__device__ __forceinline__ int iq4_level(int q) {
    const uint32_t w = q < 8 ? (q < 4 ? 0xBFAD9881u : 0xF6EADDCFu) : (q < 12 ? 0x26190D01u : 0x71594535u);
    return (int)(int8_t)(uint8_t)(w >> (8 * (q & 3)));
}

/* iq4_xs: sub-block j's scale minus 32. */
__device__ __forceinline__ int iq4xs_scale(const uint8_t *b, int j) {
    const int lo = (b[fmt_iq4_xs::SL + j / 2] >> (4 * (j & 1))) & 0xF;
    const int hi = ((b[fmt_iq4_xs::SH] | (b[fmt_iq4_xs::SH + 1] << 8)) >> (2 * j)) & 3;
    return (lo | (hi << 4)) - 32;
}

/* iq3_xxs (98 bytes) and iq3_s (110 bytes): 256 elements, 8 groups of 32
 * (layouts in src/core/quant_iq3.c). iq3_xxs: f16 d (0-1), 64 grid indices
 * (2-65, 8 per group), a 32-bit word per group (66-97: four 7-bit sign
 * fields, the eighth sign of each 8 by parity, scale s in bits 28-31; group
 * scale d (s + 1/2) / 2). iq3_s: f16 d (0-1), 64 low index bytes (2-65),
 * ninth index bits (66-73, byte g for group g), sign bytes (74-105, 4 per
 * group), 4-bit scales (106-109; group scale d (1 + 2 s)). Grid points
 * from gpu_iq_tables.cuh, levels 4 + 8 i (62 for i = 7) and 2 i + 1. */
struct fmt_iq3_xxs {
    static constexpr int EL = 256, BYTES = 98, D = 0, QS = 2, SS = 66;
};
struct fmt_iq3_s {
    static constexpr int EL = 256, BYTES = 110, D = 0, QS = 2, QH = 66, SIGNS = 74, SC = 106;
};
__device__ __forceinline__ int iq3xxs_level(int i) { return i == 7 ? 62 : 4 + 8 * i; }

/* Element i (0..31) of group g of an iq3 block at b, in f32 as the CPU's decoder. */
__device__ __forceinline__ float iq3_elem(int dt, const uint8_t *b, int g, int i) {
    const float d = f16_bits_to_f32((uint16_t)(b[0] | (b[1] << 8)));
    const int run = i >> 2, j = i & 3; /* 4-value grid point run of the group, element in it */
    if (dt == RB_IQ3_XXS) {
        const uint32_t w = (uint32_t)b[fmt_iq3_xxs::SS + 4 * g] | ((uint32_t)b[fmt_iq3_xxs::SS + 4 * g + 1] << 8) |
                           ((uint32_t)b[fmt_iq3_xxs::SS + 4 * g + 2] << 16) |
                           ((uint32_t)b[fmt_iq3_xxs::SS + 4 * g + 3] << 24);
        const float scale = d * (0.5f + (float)(w >> 28)) * 0.5f;
        const uint32_t s7 = (w >> (7 * (run >> 1))) & 127;
        const uint32_t signs = s7 | ((uint32_t)(__popc(s7) & 1) << 7);
        const int code = g_iq3xxs_grid[b[fmt_iq3_xxs::QS + 8 * g + run]];
        const float v = scale * (float)iq3xxs_level((code >> (3 * j)) & 7);
        return (signs >> (4 * (run & 1) + j)) & 1 ? -v : v;
    }
    const float scale = d * (float)(1 + 2 * ((b[fmt_iq3_s::SC + g / 2] >> (4 * (g & 1))) & 15));
    const int idx = b[fmt_iq3_s::QS + 8 * g + run] | (((b[fmt_iq3_s::QH + g] >> run) & 1) << 8);
    const int code = g_iq3s_grid[idx];
    const float v = scale * (float)(2 * ((code >> (3 * j)) & 7) + 1);
    return (b[fmt_iq3_s::SIGNS + 4 * g + (run >> 1)] >> (4 * (run & 1) + j)) & 1 ? -v : v;
}

/* iq2_xxs (66 bytes) and iq2_xs (74 bytes): 256 elements, 8 groups of 32,
 * each 4 runs of 8 (layouts in src/core/quant_iq2.c). iq2_xxs: f16 d (0-1),
 * then 8 bytes per group (2-65): 4 grid indices and a 32-bit word of four
 * 7-bit sign fields (the eighth sign of each run by parity) and the scale s
 * in bits 28-31. iq2_xs: f16 d (0-1), a 16-bit word per run (2-65: grid
 * index in bits 0-8, sign field in bits 9-15), a scale byte per group
 * (66-73: low nibble for runs 0-1, high nibble for runs 2-3). Group scale
 * d (s + 1/2) / 4; grid points from gpu_iq_tables.cuh, levels 8, 25, 43. */
struct fmt_iq2_xxs {
    static constexpr int EL = 256, BYTES = 66, D = 0, QS = 2;
};
struct fmt_iq2_xs {
    static constexpr int EL = 256, BYTES = 74, D = 0, QS = 2, SC = 66;
};
__device__ __forceinline__ int iq2_level(int i) { return i == 0 ? 8 : i == 1 ? 25 : 43; }

/* Element i (0..31) of group g of an iq2 block at b, in f32 as the CPU's decoder. */
__device__ __forceinline__ float iq2_elem(int dt, const uint8_t *b, int g, int i) {
    const float d = f16_bits_to_f32((uint16_t)(b[0] | (b[1] << 8)));
    const int run = i >> 3, j = i & 7; /* 8-value grid point run of the group, element in it */
    int code;
    uint32_t s7, s;
    if (dt == RB_IQ2_XXS) {
        const uint8_t *q = b + fmt_iq2_xxs::QS + 8 * g;
        const uint32_t w = (uint32_t)q[4] | ((uint32_t)q[5] << 8) | ((uint32_t)q[6] << 16) | ((uint32_t)q[7] << 24);
        s = w >> 28;
        s7 = (w >> (7 * run)) & 127;
        code = g_iq2xxs_grid[q[run]];
    } else {
        const uint32_t w = (uint32_t)b[fmt_iq2_xs::QS + 2 * (4 * g + run)] |
                           ((uint32_t)b[fmt_iq2_xs::QS + 2 * (4 * g + run) + 1] << 8);
        s = ((uint32_t)b[fmt_iq2_xs::SC + g] >> (4 * (run >> 1))) & 15;
        s7 = w >> 9;
        code = g_iq2xs_grid[w & 511];
    }
    const float scale = d * (0.5f + (float)s) * 0.25f;
    const uint32_t signs = s7 | ((uint32_t)(__popc(s7) & 1) << 7);
    const float v = scale * (float)iq2_level((code >> (2 * j)) & 3);
    return (signs >> j) & 1 ? -v : v;
}

/* iq2_s (82 bytes): 256 elements, 8 groups of 4 runs of 8 (layout in
 * src/core/quant_iq2.c): f16 d (0-1), the low 8 grid index bits per run
 * (2-33, byte 4g + run), a sign byte per run (34-65, same order; bit j
 * negates element j), the high 2 index bits of run r of group g at bits
 * 2r..2r+1 of byte 66 + g, scale bytes as iq2_xs's (74-81). 1024 grid
 * points, levels 8, 25, 43; group scale d (s + 1/2) / 4. */
struct fmt_iq2_s {
    static constexpr int EL = 256, BYTES = 82, D = 0, QS = 2, SIGNS = 34, QH = 66, SC = 74;
};

/* Element i (0..31) of group g of an iq2_s block at b, in f32 as the CPU's decoder. */
__device__ __forceinline__ float iq2s_elem(const uint8_t *b, int g, int i) {
    const float d = f16_bits_to_f32((uint16_t)(b[0] | (b[1] << 8)));
    const int run = i >> 3, j = i & 7;
    const int idx = b[fmt_iq2_s::QS + 4 * g + run] | (((b[fmt_iq2_s::QH + g] >> (2 * run)) & 3) << 8);
    const uint32_t s = ((uint32_t)b[fmt_iq2_s::SC + g] >> (4 * (run >> 1))) & 15;
    const float scale = d * (0.5f + (float)s) * 0.25f;
    const float v = scale * (float)iq2_level((g_iq2s_grid[idx] >> (2 * j)) & 3);
    return (b[fmt_iq2_s::SIGNS + 4 * g + run] >> j) & 1 ? -v : v;
}

/* iq1_s (50 bytes) and iq1_m (56 bytes): 256 elements, 8 groups of 4 runs
 * of 8 (layouts in src/core/quant_iq1.c), each run a point of the 2048-point
 * grid of values -1, 0, +1 (gpu_iq_tables.cuh) shifted by +-1/8; value =
 * scale (v + shift). iq1_s: f16 d (0-1), low index bytes (2-33, byte 4g +
 * run), a 16-bit word per group (34-49: high index bits 3r..3r+2, scale s at
 * 12-14 for d (2s + 1), shift sign at bit 15). iq1_m: low index bytes
 * (0-31), a byte per two runs (32-47: byte 2g + run / 2, the high index bits
 * of the even run at bits 0-2 and its shift sign at bit 3, the odd run's at
 * 4-6 and 7), four 16-bit scale words (48-55: word k holds groups 2k and
 * 2k + 1, 3 bits each for runs 0-1 and runs 2-3, scale d (2s + 1); their
 * top nibbles, least significant first, are the f16 d). */
struct fmt_iq1_s {
    static constexpr int EL = 256, BYTES = 50, D = 0, QS = 2, QH = 34;
};
struct fmt_iq1_m {
    static constexpr int EL = 256, BYTES = 56, QS = 0, QH = 32, SC = 48;
};

/* Element i (0..31) of group g of an iq1 block at b, in f32 as the CPU's decoder. */
__device__ __forceinline__ float iq1_elem(int dt, const uint8_t *b, int g, int i) {
    const int run = i >> 3, j = i & 7;
    float scale;
    int idx;
    bool neg;
    if (dt == RB_IQ1_S) {
        const uint32_t h = (uint32_t)b[fmt_iq1_s::QH + 2 * g] | ((uint32_t)b[fmt_iq1_s::QH + 2 * g + 1] << 8);
        scale = f16_bits_to_f32((uint16_t)(b[0] | (b[1] << 8))) * (float)(2 * ((h >> 12) & 7) + 1);
        idx = b[fmt_iq1_s::QS + 4 * g + run] | (int)(((h >> (3 * run)) & 7) << 8);
        neg = (h >> 15) & 1;
    } else {
        uint32_t w[4], dbits = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            w[k] = (uint32_t)b[fmt_iq1_m::SC + 2 * k] | ((uint32_t)b[fmt_iq1_m::SC + 2 * k + 1] << 8);
            dbits |= (w[k] >> 12) << (4 * k);
        }
        const uint32_t s = (w[g >> 1] >> (6 * (g & 1) + 3 * (run >> 1))) & 7;
        scale = f16_bits_to_f32((uint16_t)dbits) * (float)(2 * s + 1);
        const uint32_t h = (uint32_t)b[fmt_iq1_m::QH + 2 * g + (run >> 1)] >> (4 * (run & 1));
        idx = b[fmt_iq1_m::QS + 4 * g + run] | (int)((h & 7) << 8);
        neg = (h >> 3) & 1;
    }
    const float v = (float)((int)((g_iq1s_grid[idx] >> (2 * j)) & 3) - 1);
    return scale * (v + (neg ? -0.125f : 0.125f));
}

__device__ __forceinline__ float ld_h(const char *p) { return f16_bits_to_f32(*(const uint16_t *)p); }

/* q4_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes
 * (fmt_q4_K::SCALES). */
__device__ __forceinline__ void q4k_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* mxfp4: the doubled E2M1 value of a nibble (table 0 1 2 3 4 6 8 12, bit 3
 * the sign, as rb_mxfp4_values) and a block's scale 2^(e - 128) with the
 * bit pattern of rb_e8m0_half_to_f32 (a subnormal for e < 2): their product
 * is exact, so the decoding equals the CPU's bit for bit. */
__device__ __forceinline__ float mxfp4_scale(uint8_t e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}
__device__ __forceinline__ int mxfp4_value(int q) {
    const int v = (int)((0xC8643210u >> (4 * (q & 7))) & 0xFu);
    return (q & 8) ? -v : v;
}

/* Bytes per 32-element unit's block and units per block. */
__device__ __forceinline__ int qblock_bytes(int dt) {
    switch (dt) {
    case RB_Q4_0: return fmt_q4_0::BYTES;
    case RB_Q8_0: return fmt_q8_0::BYTES;
    case RB_Q4_K: return fmt_q4_K::BYTES;
    case RB_Q5_K: return fmt_q5_K::BYTES;
    case RB_Q6_K: return fmt_q6_K::BYTES;
    case RB_MXFP4: return fmt_mxfp4::BYTES;
    case RB_IQ4_NL: return fmt_iq4_nl::BYTES;
    case RB_IQ4_XS: return fmt_iq4_xs::BYTES;
    case RB_IQ3_XXS: return fmt_iq3_xxs::BYTES;
    case RB_IQ3_S: return fmt_iq3_s::BYTES;
    case RB_IQ2_XXS: return fmt_iq2_xxs::BYTES;
    case RB_IQ2_XS: return fmt_iq2_xs::BYTES;
    case RB_IQ2_S: return fmt_iq2_s::BYTES;
    case RB_IQ1_S: return fmt_iq1_s::BYTES;
    case RB_IQ1_M: return fmt_iq1_m::BYTES;
    default: return 0;
    }
}
__device__ __forceinline__ int qblock_units(int dt) {
    return (dt == RB_Q4_K || dt == RB_Q5_K || dt == RB_Q6_K || dt == RB_IQ4_XS || dt == RB_IQ3_XXS || dt == RB_IQ3_S ||
            dt == RB_IQ2_XXS || dt == RB_IQ2_XS || dt == RB_IQ2_S || dt == RB_IQ1_S || dt == RB_IQ1_M)
               ? 8
               : 1;
}

/* n 16-bit words from a 2-byte aligned address (fewer load instructions
 * than bytes; blocks of q8_0, q4_0 and q6_K are only 2-byte aligned). */
template <int n> __device__ __forceinline__ void ld_u16(const char *p, uint16_t *w) {
#pragma unroll
    for (int i = 0; i < n; i++) w[i] = ((const uint16_t *)p)[i];
}

/* Decodes unit u (elements 32u..32u+31) of a quantized row into w. */
__device__ __forceinline__ void dq_unit(int dt, const char *row, int64_t u, float w[32]) {
    if (dt == RB_Q8_0) {
        const char *b = row + u * fmt_q8_0::BYTES;
        const float d = ld_h(b + fmt_q8_0::D);
        uint16_t q[16];
        ld_u16<16>(b + fmt_q8_0::QS, q);
#pragma unroll
        for (int i = 0; i < 16; i++) {
            w[2 * i] = d * (float)(int8_t)(q[i] & 0xff);
            w[2 * i + 1] = d * (float)(int8_t)(q[i] >> 8);
        }
    } else if (dt == RB_Q4_0) {
        const char *b = row + u * fmt_q4_0::BYTES;
        const float d = ld_h(b + fmt_q4_0::D);
        uint16_t q[8];
        ld_u16<8>(b + fmt_q4_0::QS, q);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int v0 = q[i] & 0xff, v1 = q[i] >> 8;
            w[2 * i] = d * (float)((v0 & 0xF) - 8);
            w[2 * i + 1] = d * (float)((v1 & 0xF) - 8);
            w[2 * i + 16] = d * (float)((v0 >> 4) - 8);
            w[2 * i + 17] = d * (float)((v1 >> 4) - 8);
        }
    } else if (dt == RB_Q4_K) {
        const char *b = row + (u >> 3) * fmt_q4_K::BYTES;
        const int j = (int)(u & 7);
        const float d = ld_h(b + fmt_q4_K::D), dmin = ld_h(b + fmt_q4_K::DMIN);
        int sc, m;
        q4k_scale_min((const uint8_t *)(b + fmt_q4_K::SCALES), j, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        const uint32_t *q = (const uint32_t *)(b + fmt_q4_K::QS + 32 * (j >> 1)); /* 4-byte aligned */
        const int sh = (j & 1) * 4;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t v = q[i] >> sh;
#pragma unroll
            for (int k = 0; k < 4; k++) w[4 * i + k] = dl * (float)((v >> (8 * k)) & 0xF) - ml;
        }
    } else if (dt == RB_Q5_K) {
        const char *b = row + (u >> 3) * fmt_q5_K::BYTES;
        const int j = (int)(u & 7);
        const float d = ld_h(b + fmt_q5_K::D), dmin = ld_h(b + fmt_q5_K::DMIN);
        int sc, m;
        q4k_scale_min((const uint8_t *)(b + fmt_q5_K::SCALES), j, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        const uint32_t *q = (const uint32_t *)(b + fmt_q5_K::QS + 32 * (j >> 1)); /* 4-byte aligned */
        const uint32_t *h = (const uint32_t *)(b + fmt_q5_K::QH);
        const int sh = (j & 1) * 4;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t v = q[i] >> sh, hb = h[i] >> j;
#pragma unroll
            for (int k = 0; k < 4; k++)
                w[4 * i + k] = dl * (float)(((v >> (8 * k)) & 0xF) | (((hb >> (8 * k)) & 1) << 4)) - ml;
        }
    } else if (dt == RB_Q6_K) {
        const char *b = row + (u >> 3) * fmt_q6_K::BYTES;
        const int j = (int)(u & 7), n = j >> 2, qq = j & 3;
        uint16_t ql[16], qh[16];
        ld_u16<16>(b + fmt_q6_K::QL + 64 * n + ((qq & 1) ? 32 : 0), ql);
        ld_u16<16>(b + fmt_q6_K::QH + 32 * n, qh);
        const int8_t *sc = (const int8_t *)(b + fmt_q6_K::SC) + 8 * n + 2 * qq;
        const float d = ld_h(b + fmt_q6_K::D);
        const int lsh = (qq >> 1) * 4, hsh = 2 * qq;
        const float d0 = d * (float)sc[0], d1 = d * (float)sc[1];
#pragma unroll
        for (int i = 0; i < 32; i++) {
            const int l = (ql[i >> 1] >> (8 * (i & 1))) & 0xff, h = (qh[i >> 1] >> (8 * (i & 1))) & 0xff;
            const int q = ((l >> lsh) & 0xF) | (((h >> hsh) & 3) << 4);
            w[i] = (i < 16 ? d0 : d1) * (float)(q - 32);
        }
    } else if (dt == RB_MXFP4) { /* 17-byte blocks: byte loads (rows are only byte aligned) */
        const uint8_t *b = (const uint8_t *)row + u * fmt_mxfp4::BYTES;
        const float d = mxfp4_scale(b[fmt_mxfp4::E]);
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const int q = b[fmt_mxfp4::QS + i];
            w[i] = (float)mxfp4_value(q & 0xF) * d;
            w[i + 16] = (float)mxfp4_value(q >> 4) * d;
        }
    } else if (dt == RB_IQ4_NL || dt == RB_IQ4_XS) { /* byte loads; d formed first, as the CPU's decoder */
        const bool xs = dt == RB_IQ4_XS;
        const uint8_t *b = (const uint8_t *)row + (xs ? (u >> 3) * fmt_iq4_xs::BYTES : u * fmt_iq4_nl::BYTES);
        float d = ld_h((const char *)b);
        if (xs) d *= (float)iq4xs_scale(b, (int)(u & 7));
        const uint8_t *q = b + (xs ? fmt_iq4_xs::QS + 16 * (int)(u & 7) : fmt_iq4_nl::QS);
#pragma unroll
        for (int i = 0; i < 16; i++) {
            w[i] = d * (float)iq4_level(q[i] & 0xF);
            w[i + 16] = d * (float)iq4_level(q[i] >> 4);
        }
    } else if (dt == RB_IQ3_XXS || dt == RB_IQ3_S) { /* byte loads */
        const uint8_t *b = (const uint8_t *)row + (u >> 3) * (dt == RB_IQ3_XXS ? fmt_iq3_xxs::BYTES : fmt_iq3_s::BYTES);
        for (int i = 0; i < 32; i++) w[i] = iq3_elem(dt, b, (int)(u & 7), i);
    } else if (dt == RB_IQ2_XXS || dt == RB_IQ2_XS) { /* byte loads */
        const uint8_t *b = (const uint8_t *)row + (u >> 3) * (dt == RB_IQ2_XXS ? fmt_iq2_xxs::BYTES : fmt_iq2_xs::BYTES);
        for (int i = 0; i < 32; i++) w[i] = iq2_elem(dt, b, (int)(u & 7), i);
    } else if (dt == RB_IQ2_S) { /* byte loads */
        const uint8_t *b = (const uint8_t *)row + (u >> 3) * fmt_iq2_s::BYTES;
        for (int i = 0; i < 32; i++) w[i] = iq2s_elem(b, (int)(u & 7), i);
    } else if (dt == RB_IQ1_S || dt == RB_IQ1_M) { /* byte loads */
        const uint8_t *b = (const uint8_t *)row + (u >> 3) * (dt == RB_IQ1_S ? fmt_iq1_s::BYTES : fmt_iq1_m::BYTES);
        for (int i = 0; i < 32; i++) w[i] = iq1_elem(dt, b, (int)(u & 7), i);
    } else {
#pragma unroll
        for (int i = 0; i < 32; i++) w[i] = 0.0f;
    }
}

/* Element j of a quantized row. */
__device__ __forceinline__ float dq_elem(int dt, const char *row, int64_t j) {
    const int64_t u = j >> 5;
    const int i = (int)(j & 31);
    if (dt == RB_Q8_0) {
        const char *b = row + u * fmt_q8_0::BYTES;
        return ld_h(b + fmt_q8_0::D) * (float)((const int8_t *)(b + fmt_q8_0::QS))[i];
    } else if (dt == RB_Q4_0) {
        const char *b = row + u * fmt_q4_0::BYTES;
        const int v = ((const uint8_t *)(b + fmt_q4_0::QS))[i & 15];
        return ld_h(b + fmt_q4_0::D) * (float)((i < 16 ? (v & 0xF) : (v >> 4)) - 8);
    } else if (dt == RB_Q4_K) {
        const char *b = row + (u >> 3) * fmt_q4_K::BYTES;
        const int jj = (int)(u & 7);
        int sc, m;
        q4k_scale_min((const uint8_t *)(b + fmt_q4_K::SCALES), jj, &sc, &m);
        const int q = (((const uint8_t *)(b + fmt_q4_K::QS))[32 * (jj >> 1) + i] >> ((jj & 1) * 4)) & 0xF;
        return ld_h(b + fmt_q4_K::D) * (float)sc * (float)q - ld_h(b + fmt_q4_K::DMIN) * (float)m;
    } else if (dt == RB_Q5_K) {
        const char *b = row + (u >> 3) * fmt_q5_K::BYTES;
        const int jj = (int)(u & 7);
        int sc, m;
        q4k_scale_min((const uint8_t *)(b + fmt_q5_K::SCALES), jj, &sc, &m);
        const int q = ((((const uint8_t *)(b + fmt_q5_K::QS))[32 * (jj >> 1) + i] >> ((jj & 1) * 4)) & 0xF) |
                      (((((const uint8_t *)(b + fmt_q5_K::QH))[i] >> jj) & 1) << 4);
        return ld_h(b + fmt_q5_K::D) * (float)sc * (float)q - ld_h(b + fmt_q5_K::DMIN) * (float)m;
    } else if (dt == RB_Q6_K) {
        const char *b = row + (u >> 3) * fmt_q6_K::BYTES;
        const int jj = (int)(u & 7), n = jj >> 2, qq = jj & 3;
        const int l = ((const uint8_t *)b)[fmt_q6_K::QL + 64 * n + ((qq & 1) ? 32 : 0) + i];
        const int h = ((const uint8_t *)b)[fmt_q6_K::QH + 32 * n + i];
        const int sc = ((const int8_t *)(b + fmt_q6_K::SC))[8 * n + 2 * qq + (i >> 4)];
        const int q = ((l >> ((qq >> 1) * 4)) & 0xF) | (((h >> (2 * qq)) & 3) << 4);
        return ld_h(b + fmt_q6_K::D) * (float)sc * (float)(q - 32);
    } else if (dt == RB_MXFP4) {
        const uint8_t *b = (const uint8_t *)row + u * fmt_mxfp4::BYTES;
        const int q = b[fmt_mxfp4::QS + (i & 15)];
        return (float)mxfp4_value(i < 16 ? (q & 0xF) : (q >> 4)) * mxfp4_scale(b[fmt_mxfp4::E]);
    } else if (dt == RB_IQ4_NL || dt == RB_IQ4_XS) {
        const bool xs = dt == RB_IQ4_XS;
        const uint8_t *b = (const uint8_t *)row + (xs ? (u >> 3) * fmt_iq4_xs::BYTES : u * fmt_iq4_nl::BYTES);
        float d = ld_h((const char *)b);
        if (xs) d *= (float)iq4xs_scale(b, (int)(u & 7));
        const int q = b[(xs ? fmt_iq4_xs::QS + 16 * (int)(u & 7) : fmt_iq4_nl::QS) + (i & 15)];
        return d * (float)iq4_level(i < 16 ? (q & 0xF) : (q >> 4));
    } else if (dt == RB_IQ3_XXS || dt == RB_IQ3_S) {
        const uint8_t *b = (const uint8_t *)row + (u >> 3) * (dt == RB_IQ3_XXS ? fmt_iq3_xxs::BYTES : fmt_iq3_s::BYTES);
        return iq3_elem(dt, b, (int)(u & 7), i);
    } else if (dt == RB_IQ2_XXS || dt == RB_IQ2_XS) {
        const uint8_t *b = (const uint8_t *)row + (u >> 3) * (dt == RB_IQ2_XXS ? fmt_iq2_xxs::BYTES : fmt_iq2_xs::BYTES);
        return iq2_elem(dt, b, (int)(u & 7), i);
    } else if (dt == RB_IQ2_S) {
        return iq2s_elem((const uint8_t *)row + (u >> 3) * fmt_iq2_s::BYTES, (int)(u & 7), i);
    } else if (dt == RB_IQ1_S || dt == RB_IQ1_M) {
        const uint8_t *b = (const uint8_t *)row + (u >> 3) * (dt == RB_IQ1_S ? fmt_iq1_s::BYTES : fmt_iq1_m::BYTES);
        return iq1_elem(dt, b, (int)(u & 7), i);
    }
    return 0.0f;
}

} // namespace RB_GPU_NS

#endif

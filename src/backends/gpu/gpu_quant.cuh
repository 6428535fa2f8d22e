/* Device decoding of the ggml block formats the GPU backend reads directly:
 * q4_0, q8_0, q4_K, q6_K and mxfp4 (byte layouts as in include/rbee/quant.h). Two
 * granularities: one element (get_rows, cast) and a "unit" of 32 consecutive
 * elements of a row decoded into registers (the matrix kernels). Every format
 * handled here has rows made of whole 32-element units. */
#ifndef RBEE_GPU_QUANT_CUH
#define RBEE_GPU_QUANT_CUH

#include "backends/gpu/gpu_common.cuh"

namespace RB_GPU_NS {

__device__ __forceinline__ float ld_h(const char *p) { return f16_bits_to_f32(*(const uint16_t *)p); }

/* q4_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. */
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
    case RB_Q4_0: return 18;
    case RB_Q8_0: return 34;
    case RB_Q4_K: return 144;
    case RB_Q6_K: return 210;
    case RB_MXFP4: return 17;
    default: return 0;
    }
}
__device__ __forceinline__ int qblock_units(int dt) { return (dt == RB_Q4_K || dt == RB_Q6_K) ? 8 : 1; }

/* n 16-bit words from a 2-byte aligned address (fewer load instructions
 * than bytes; blocks of q8_0, q4_0 and q6_K are only 2-byte aligned). */
template <int n> __device__ __forceinline__ void ld_u16(const char *p, uint16_t *w) {
#pragma unroll
    for (int i = 0; i < n; i++) w[i] = ((const uint16_t *)p)[i];
}

/* Decodes unit u (elements 32u..32u+31) of a quantized row into w. */
__device__ __forceinline__ void dq_unit(int dt, const char *row, int64_t u, float w[32]) {
    if (dt == RB_Q8_0) {
        const char *b = row + u * 34;
        const float d = ld_h(b);
        uint16_t q[16];
        ld_u16<16>(b + 2, q);
#pragma unroll
        for (int i = 0; i < 16; i++) {
            w[2 * i] = d * (float)(int8_t)(q[i] & 0xff);
            w[2 * i + 1] = d * (float)(int8_t)(q[i] >> 8);
        }
    } else if (dt == RB_Q4_0) {
        const char *b = row + u * 18;
        const float d = ld_h(b);
        uint16_t q[8];
        ld_u16<8>(b + 2, q);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int v0 = q[i] & 0xff, v1 = q[i] >> 8;
            w[2 * i] = d * (float)((v0 & 0xF) - 8);
            w[2 * i + 1] = d * (float)((v1 & 0xF) - 8);
            w[2 * i + 16] = d * (float)((v0 >> 4) - 8);
            w[2 * i + 17] = d * (float)((v1 >> 4) - 8);
        }
    } else if (dt == RB_Q4_K) {
        const char *b = row + (u >> 3) * 144;
        const int j = (int)(u & 7);
        const float d = ld_h(b), dmin = ld_h(b + 2);
        int sc, m;
        q4k_scale_min((const uint8_t *)(b + 4), j, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        const uint32_t *q = (const uint32_t *)(b + 16 + 32 * (j >> 1)); /* 4-byte aligned */
        const int sh = (j & 1) * 4;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t v = q[i] >> sh;
#pragma unroll
            for (int k = 0; k < 4; k++) w[4 * i + k] = dl * (float)((v >> (8 * k)) & 0xF) - ml;
        }
    } else if (dt == RB_Q6_K) {
        const char *b = row + (u >> 3) * 210;
        const int j = (int)(u & 7), n = j >> 2, qq = j & 3;
        uint16_t ql[16], qh[16];
        ld_u16<16>(b + 64 * n + ((qq & 1) ? 32 : 0), ql);
        ld_u16<16>(b + 128 + 32 * n, qh);
        const int8_t *sc = (const int8_t *)(b + 192) + 8 * n + 2 * qq;
        const float d = ld_h(b + 208);
        const int lsh = (qq >> 1) * 4, hsh = 2 * qq;
        const float d0 = d * (float)sc[0], d1 = d * (float)sc[1];
#pragma unroll
        for (int i = 0; i < 32; i++) {
            const int l = (ql[i >> 1] >> (8 * (i & 1))) & 0xff, h = (qh[i >> 1] >> (8 * (i & 1))) & 0xff;
            const int q = ((l >> lsh) & 0xF) | (((h >> hsh) & 3) << 4);
            w[i] = (i < 16 ? d0 : d1) * (float)(q - 32);
        }
    } else if (dt == RB_MXFP4) { /* 17-byte blocks: byte loads (rows are only byte aligned) */
        const uint8_t *b = (const uint8_t *)row + u * 17;
        const float d = mxfp4_scale(b[0]);
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const int q = b[1 + i];
            w[i] = (float)mxfp4_value(q & 0xF) * d;
            w[i + 16] = (float)mxfp4_value(q >> 4) * d;
        }
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
        const char *b = row + u * 34;
        return ld_h(b) * (float)((const int8_t *)(b + 2))[i];
    } else if (dt == RB_Q4_0) {
        const char *b = row + u * 18;
        const int v = ((const uint8_t *)(b + 2))[i & 15];
        return ld_h(b) * (float)((i < 16 ? (v & 0xF) : (v >> 4)) - 8);
    } else if (dt == RB_Q4_K) {
        const char *b = row + (u >> 3) * 144;
        const int jj = (int)(u & 7);
        int sc, m;
        q4k_scale_min((const uint8_t *)(b + 4), jj, &sc, &m);
        const int q = (((const uint8_t *)(b + 16))[32 * (jj >> 1) + i] >> ((jj & 1) * 4)) & 0xF;
        return ld_h(b) * (float)sc * (float)q - ld_h(b + 2) * (float)m;
    } else if (dt == RB_Q6_K) {
        const char *b = row + (u >> 3) * 210;
        const int jj = (int)(u & 7), n = jj >> 2, qq = jj & 3;
        const int l = ((const uint8_t *)b)[64 * n + ((qq & 1) ? 32 : 0) + i];
        const int h = ((const uint8_t *)b)[128 + 32 * n + i];
        const int sc = ((const int8_t *)(b + 192))[8 * n + 2 * qq + (i >> 4)];
        const int q = ((l >> ((qq >> 1) * 4)) & 0xF) | (((h >> (2 * qq)) & 3) << 4);
        return ld_h(b + 208) * (float)sc * (float)(q - 32);
    } else if (dt == RB_MXFP4) {
        const uint8_t *b = (const uint8_t *)row + u * 17;
        const int q = b[1 + (i & 15)];
        return (float)mxfp4_value(i < 16 ? (q & 0xF) : (q >> 4)) * mxfp4_scale(b[0]);
    }
    return 0.0f;
}

} // namespace RB_GPU_NS

#endif

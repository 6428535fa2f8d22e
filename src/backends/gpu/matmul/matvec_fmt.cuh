/* Weight formats of the staged matrix-vector kernel (matvec.cuh): for each
 * weight dtype, how a "work unit" (WU) of one row, already copied into shared
 * memory, is multiplied with MT activation rows for R weight rows at once.
 * Split out of matvec.cuh so the per-format arithmetic can be read on its
 * own; the block layouts are gpu_quant.cuh's fmt_* (one description each).
 *
 * Quantized weights (q4_0, q8_0, q4_K, q5_K, q6_K) meet int8 activations with the
 * integer dot product (dp4a; AMD sdot4 / sudot4; a plain fallback), exactly as
 * the CPU backend does: activations are quantized per call to the CPU's
 * formats, so the integer sums equal the CPU's and only the f32 combination
 * order differs:
 *   - q8_0 mode (q4_0, q8_0 weights): blocks of 32, d = amax / 127 rounded
 *     to f16, q = nearest-even(x * (127 / amax)) (the CPU backend's AVX2
 *     quantizer; its scalar one rounds x / d half away from zero, which can
 *     differ by one step on a few elements);
 *   - q8_K mode (q4_K, q5_K, q6_K weights): blocks of 256, f32 d = max / -127 of the
 *     first element of largest magnitude, q = nearest-even, clamped to 127
 *     (CPU q8_K).
 * Both are stored as int8 rows [M][K] plus one 8-byte record per 32
 * elements: {f32 d, int16 sum of elements 0..15 | int16 sum of 16..31 << 16}.
 * Float weights (f32, f16, bf16) meet the f32 activations directly.
 *
 * Every format: WU_EL elements per WU, CHUNK_EL elements of a row per
 * pipeline stage (32 * WPL WUs: lane l of a 32-lane group takes WUs l,
 * l + 32, ...), BLK_EL / BLK_BYTES its ggml block, STAGES the pipeline depth
 * (chosen so two blocks fit per multiprocessor on sm_90), and
 *   dot<R, MT>(rp, w, e0, X, acc): rp[j] = the stage's copy of row j's chunk
 *   (first byte of the chunk), w = WU index in the chunk, e0 = element index
 *   (in the row) where the chunk starts, X = the activations, acc[j][m] +=
 *   row j . activation row m over the WU's elements. */
#ifndef RBEE_GPU_MATVEC_FMT_CUH
#define RBEE_GPU_MATVEC_FMT_CUH

#include "backends/gpu/gpu_quant.cuh"

namespace RB_GPU_NS {

/* pipeline depth (stages of shared memory) per format: CUDA value, or 2 on
 * HIP, whose copies are synchronous (and shared memory per block <= 48 KB) */
#if defined(RBEE_GPU_HIP)
#define MV_ST(n) 2
#else
#define MV_ST(n) (n)
#endif

/* 32-lane logical groups (half a wavefront on wave64): shuffles stay inside */
#if defined(RBEE_GPU_HIP)
#define MV_XOR32(v, m) __shfl_xor((v), (m), 32)
#else
#define MV_XOR32(v, m) __shfl_xor_sync(0xffffffffu, (v), (m), 32)
#endif

/* c + sum of the four signed byte products of a and b */
__device__ __forceinline__ int mv_dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#elif defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) ||              \
    defined(__gfx941__) || defined(__gfx942__) || defined(__gfx1030__) || defined(__gfx1031__) ||             \
    defined(__gfx1032__) || defined(__gfx1034__) || defined(__gfx1035__) || defined(__gfx1036__)
    return __builtin_amdgcn_sdot4(a, b, c, false);
#elif defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__)
    return __builtin_amdgcn_sudot4(true, a, true, b, c, false);
#else
    return c + (int)(int8_t)a * (int)(int8_t)b + (int)(int8_t)(a >> 8) * (int)(int8_t)(b >> 8) +
           (int)(int8_t)(a >> 16) * (int)(int8_t)(b >> 16) + (a >> 24) * (b >> 24);
#endif
}

/* 32-bit word from a 2-byte aligned shared-memory address */
__device__ __forceinline__ uint32_t mv_u32(const char *p) {
    const uint16_t *q = (const uint16_t *)p;
    return (uint32_t)q[0] | ((uint32_t)q[1] << 16);
}

/* activations as the kernels see them: quantized (xq/xs) or f32 (xf), row m
 * at offset xo[m] (bytes of xq = elements; xs row = xo[m] / 32; floats of xf) */
struct mv_x {
    const int8_t *xq;
    const int2 *xs;
    const float *xf;
};

/* The largest of v over a 32-lane group (every lane gets it): one
 * instruction on sm_80+ (CUDA), five shuffles elsewhere. */
__device__ __forceinline__ uint32_t mv_max32u(uint32_t v) {
#if !defined(RBEE_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __reduce_max_sync(0xffffffffu, v);
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, (uint32_t)MV_XOR32(v, o));
    return v;
#endif
}

__device__ __forceinline__ float mv_xd(int2 r) { return __int_as_float(r.x); }
__device__ __forceinline__ int mv_xs_lo(int2 r) { return (int)(int16_t)(r.y & 0xffff); }
__device__ __forceinline__ int mv_xs_hi(int2 r) { return r.y >> 16; }

/* Quantizes 8 consecutive activations per lane of a 32-lane group (256
 * elements; in q8_0 mode each 4 lanes are one block). Every lane of the group
 * must call. Returns the 8 int8 values packed and, meaningful on lanes with
 * lane % 4 == 0, the record of its 32-element unit. q8_0 mode with f16d
 * false leaves the scale in f32 (k_mvd's fused norm, whose row sums take the
 * 1/rms instead of the scales). */
template <bool KQ>
__device__ __forceinline__ void mv_quant8(const float (&v)[8], int lane, int2 *qv, int2 *rec, bool f16d = true) {
    int q[8];
    float d;
    if (!KQ) {
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(v[i]));
        amax = fmaxf(amax, MV_XOR32(amax, 1));
        amax = fmaxf(amax, MV_XOR32(amax, 2));
        /* as the CPU backend's SIMD quantizer: x * (127 / amax), nearest-even.
         * The rounding adds 1.5 x 2^23 (the sum's unit is 1, so the float add
         * rounds x to the nearest integer, ties to even, as rintf; |x| <= 127)
         * and takes the integer from the low bits: two full-rate operations
         * for a conversion that runs at a quarter of the rate, where all of
         * a decode block's threads quantize at once before its product can
         * start (k_mvd; with the norm's sums in float, the 7B q4_0 trace's
         * quantization 1.96 -> 1.67 us, tg128 +0.5%). */
        d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = __float_as_int(__fadd_rn(__fmul_rn(v[i], id), 12582912.0f)) - 0x4B400000;
        if (f16d) d = f16_bits_to_f32(f32_to_f16_bits(d)); /* else kept in f32 (fused norm) */
    } else {
        /* CPU q8_K: the first element of largest magnitude sets the scale.
         * The largest magnitude over the group (as unsigned bits: the same
         * order for non-negative floats; fmaxf passes NaNs over as the CPU's
         * comparison does), then the first element of that magnitude as the
         * largest key (255 - index) << 1 | its sign */
        float am = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) am = fmaxf(am, fabsf(v[i]));
        am = __uint_as_float(mv_max32u(__float_as_uint(am)));
        uint32_t kl = 0;
#pragma unroll
        for (int i = 7; i >= 0; i--)
            if (fabsf(v[i]) == am) kl = ((uint32_t)(255 - (lane * 8 + i)) << 1) | (v[i] < 0.0f ? 1u : 0u);
        kl = mv_max32u(kl);
        /* an all-zero block: scale 0, values 0 */
        const float is = am != 0.0f ? -127.0f / ((kl & 1u) ? -am : am) : 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) { /* nearest-even as rintf (|is v| <= 127), as the q8_0 mode rounds */
            const int t = __float_as_int(__fadd_rn(__fmul_rn(is, v[i]), 12582912.0f)) - 0x4B400000;
            q[i] = t < 127 ? t : 127;
        }
        d = am != 0.0f ? 1.0f / is : 0.0f;
    }
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) s += q[i];
    s += MV_XOR32(s, 1);          /* 16 elements: this lane pair */
    const int s2 = MV_XOR32(s, 2); /* the other pair of the block */
    qv->x = (q[0] & 0xff) | ((q[1] & 0xff) << 8) | ((q[2] & 0xff) << 16) | (q[3] << 24);
    qv->y = (q[4] & 0xff) | ((q[5] & 0xff) << 8) | ((q[6] & 0xff) << 16) | (q[7] << 24);
    rec->x = __float_as_int(d);
    rec->y = (s & 0xffff) | (s2 << 16);
}

/* ---- q4_0: WU = one block (32 elements) ---- */
struct mvf_q4_0 {
    typedef fmt_q4_0 B;
    static constexpr int WU_EL = 32, CHUNK_EL = 1024, BLK_EL = B::EL, BLK_BYTES = B::BYTES, STAGES = MV_ST(4);
    static constexpr bool QUANT = true, KQ = false;
    template <int R, int MT>
    __device__ static __forceinline__ void dot(const char *const *rp, int w, int64_t e0, const mv_x &X,
                                               const int (&xo)[MT], float (&acc)[R][MT]) {
        uint32_t lo[R][4], hi[R][4];
        float dw[R];
#pragma unroll
        for (int j = 0; j < R; j++) {
            const char *b = rp[j] + w * B::BYTES;
            dw[j] = ld_h(b + B::D);
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const uint32_t q = mv_u32(b + B::QS + 4 * t);
                lo[j][t] = q & 0x0F0F0F0Fu;
                hi[j][t] = (q >> 4) & 0x0F0F0F0Fu;
            }
        }
        const int64_t e = e0 + (int64_t)w * 32;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int8_t *xr = X.xq + xo[m] + e;
            const int4 a = *(const int4 *)xr, b = *(const int4 *)(xr + 16);
            const int2 r = X.xs[(xo[m] + e) >> 5];
            const float dx = mv_xd(r);
            const int sx = mv_xs_lo(r) + mv_xs_hi(r);
#pragma unroll
            for (int j = 0; j < R; j++) {
                int s = mv_dp4a((int)lo[j][0], a.x, -8 * sx);
                s = mv_dp4a((int)lo[j][1], a.y, s);
                s = mv_dp4a((int)lo[j][2], a.z, s);
                s = mv_dp4a((int)lo[j][3], a.w, s);
                s = mv_dp4a((int)hi[j][0], b.x, s);
                s = mv_dp4a((int)hi[j][1], b.y, s);
                s = mv_dp4a((int)hi[j][2], b.z, s);
                s = mv_dp4a((int)hi[j][3], b.w, s);
                acc[j][m] += dw[j] * dx * (float)s;
            }
        }
    }
};

/* ---- q8_0: WU = half a block (16 elements) ---- */
struct mvf_q8_0 {
    typedef fmt_q8_0 B;
    static constexpr int WU_EL = 16, CHUNK_EL = 512, BLK_EL = B::EL, BLK_BYTES = B::BYTES, STAGES = MV_ST(4);
    static constexpr bool QUANT = true, KQ = false;
    template <int R, int MT>
    __device__ static __forceinline__ void dot(const char *const *rp, int w, int64_t e0, const mv_x &X,
                                               const int (&xo)[MT], float (&acc)[R][MT]) {
        uint32_t q[R][4];
        float dw[R];
        const int h = w & 1;
#pragma unroll
        for (int j = 0; j < R; j++) {
            const char *b = rp[j] + (w >> 1) * B::BYTES;
            dw[j] = ld_h(b + B::D);
#pragma unroll
            for (int t = 0; t < 4; t++) q[j][t] = mv_u32(b + B::QS + 16 * h + 4 * t);
        }
        const int64_t e = e0 + (int64_t)w * 16;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int4 a = *(const int4 *)(X.xq + xo[m] + e);
            const float dx = mv_xd(X.xs[(xo[m] + e) >> 5]);
#pragma unroll
            for (int j = 0; j < R; j++) {
                int s = mv_dp4a((int)q[j][0], a.x, 0);
                s = mv_dp4a((int)q[j][1], a.y, s);
                s = mv_dp4a((int)q[j][2], a.z, s);
                s = mv_dp4a((int)q[j][3], a.w, s);
                acc[j][m] += dw[j] * dx * (float)s;
            }
        }
    }
};

/* ---- q4_K: super-blocks of 256; WU w = 16 bytes of quants, i.e.
 * elements 16h..16h+15 of sub-blocks 2p (low nibbles) and 2p + 1 (high),
 * p = (w >> 1) & 3, h = w & 1. Rows are 4-byte aligned (gpu_units_aligned). */
struct mvf_q4_K {
    typedef fmt_q4_K B;
    static constexpr int WU_EL = 32, CHUNK_EL = 1024, BLK_EL = B::EL, BLK_BYTES = B::BYTES, STAGES = MV_ST(4);
    static constexpr bool QUANT = true, KQ = true;
    template <int R, int MT>
    __device__ static __forceinline__ void dot(const char *const *rp, int w, int64_t e0, const mv_x &X,
                                               const int (&xo)[MT], float (&acc)[R][MT]) {
        const int sb = w >> 3, p = (w >> 1) & 3, h = w & 1;
        uint32_t lo[R][4], hi[R][4];
        int sca[R], scb[R], mna[R], mnb[R];
        float d[R], dmin[R];
#pragma unroll
        for (int j = 0; j < R; j++) {
            const char *b = rp[j] + sb * B::BYTES;
            static_assert(B::DMIN == B::D + 2, "q4_K: d and dmin in one word");
            const uint32_t dd = *(const uint32_t *)(b + B::D);
            d[j] = f16_bits_to_f32((uint16_t)(dd & 0xffffu));
            dmin[j] = f16_bits_to_f32((uint16_t)(dd >> 16));
            q4k_scale_min((const uint8_t *)(b + B::SCALES), 2 * p, &sca[j], &mna[j]);
            q4k_scale_min((const uint8_t *)(b + B::SCALES), 2 * p + 1, &scb[j], &mnb[j]);
            const uint32_t *qs = (const uint32_t *)(b + B::QS + 32 * p + 16 * h); /* 4-byte aligned */
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const uint32_t qv = qs[t];
                lo[j][t] = qv & 0x0F0F0F0Fu;
                hi[j][t] = (qv >> 4) & 0x0F0F0F0Fu;
            }
        }
        const int64_t ua = ((e0 + (int64_t)sb * 256) >> 5) + 2 * p; /* 32-unit of sub-block 2p */
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int8_t *xr = X.xq + xo[m] + ua * 32 + 16 * h;
            const int4 a = *(const int4 *)xr, b = *(const int4 *)(xr + 32);
            const int2 ra = X.xs[(xo[m] >> 5) + ua], rb = X.xs[(xo[m] >> 5) + ua + 1];
            const float dx = mv_xd(ra); /* one scale per 256 (q8_K) */
            const int sa = h ? mv_xs_hi(ra) : mv_xs_lo(ra), sbm = h ? mv_xs_hi(rb) : mv_xs_lo(rb);
#pragma unroll
            for (int j = 0; j < R; j++) {
                int s1 = mv_dp4a((int)lo[j][0], a.x, 0);
                s1 = mv_dp4a((int)lo[j][1], a.y, s1);
                s1 = mv_dp4a((int)lo[j][2], a.z, s1);
                s1 = mv_dp4a((int)lo[j][3], a.w, s1);
                int s2 = mv_dp4a((int)hi[j][0], b.x, 0);
                s2 = mv_dp4a((int)hi[j][1], b.y, s2);
                s2 = mv_dp4a((int)hi[j][2], b.z, s2);
                s2 = mv_dp4a((int)hi[j][3], b.w, s2);
                const int is = sca[j] * s1 + scb[j] * s2, im = mna[j] * sa + mnb[j] * sbm;
                acc[j][m] += dx * (d[j] * (float)is - dmin[j] * (float)im);
            }
        }
    }
};

/* ---- q5_K: as q4_K, each value's fifth bit from qh (bit 2p of qh byte l
 * for sub-block 2p, bit 2p + 1 for 2p + 1; WU w reads qh bytes 16h..16h+15).
 * Rows are 4-byte aligned (gpu_units_aligned). */
struct mvf_q5_K {
    typedef fmt_q5_K B;
    static constexpr int WU_EL = 32, CHUNK_EL = 1024, BLK_EL = B::EL, BLK_BYTES = B::BYTES, STAGES = MV_ST(4);
    static constexpr bool QUANT = true, KQ = true;
    template <int R, int MT>
    __device__ static __forceinline__ void dot(const char *const *rp, int w, int64_t e0, const mv_x &X,
                                               const int (&xo)[MT], float (&acc)[R][MT]) {
        const int sb = w >> 3, p = (w >> 1) & 3, h = w & 1;
        uint32_t lo[R][4], hi[R][4];
        int sca[R], scb[R], mna[R], mnb[R];
        float d[R], dmin[R];
#pragma unroll
        for (int j = 0; j < R; j++) {
            const char *b = rp[j] + sb * B::BYTES;
            static_assert(B::DMIN == B::D + 2, "q5_K: d and dmin in one word");
            const uint32_t dd = *(const uint32_t *)(b + B::D);
            d[j] = f16_bits_to_f32((uint16_t)(dd & 0xffffu));
            dmin[j] = f16_bits_to_f32((uint16_t)(dd >> 16));
            q4k_scale_min((const uint8_t *)(b + B::SCALES), 2 * p, &sca[j], &mna[j]);
            q4k_scale_min((const uint8_t *)(b + B::SCALES), 2 * p + 1, &scb[j], &mnb[j]);
            const uint32_t *qs = (const uint32_t *)(b + B::QS + 32 * p + 16 * h); /* 4-byte aligned */
            const uint32_t *qh = (const uint32_t *)(b + B::QH + 16 * h);
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const uint32_t qv = qs[t], hv = qh[t] >> (2 * p);
                lo[j][t] = (qv & 0x0F0F0F0Fu) | ((hv << 4) & 0x10101010u);
                hi[j][t] = ((qv >> 4) & 0x0F0F0F0Fu) | ((hv << 3) & 0x10101010u);
            }
        }
        const int64_t ua = ((e0 + (int64_t)sb * 256) >> 5) + 2 * p; /* 32-unit of sub-block 2p */
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int8_t *xr = X.xq + xo[m] + ua * 32 + 16 * h;
            const int4 a = *(const int4 *)xr, b = *(const int4 *)(xr + 32);
            const int2 ra = X.xs[(xo[m] >> 5) + ua], rb = X.xs[(xo[m] >> 5) + ua + 1];
            const float dx = mv_xd(ra); /* one scale per 256 (q8_K) */
            const int sa = h ? mv_xs_hi(ra) : mv_xs_lo(ra), sbm = h ? mv_xs_hi(rb) : mv_xs_lo(rb);
#pragma unroll
            for (int j = 0; j < R; j++) {
                int s1 = mv_dp4a((int)lo[j][0], a.x, 0);
                s1 = mv_dp4a((int)lo[j][1], a.y, s1);
                s1 = mv_dp4a((int)lo[j][2], a.z, s1);
                s1 = mv_dp4a((int)lo[j][3], a.w, s1);
                int s2 = mv_dp4a((int)hi[j][0], b.x, 0);
                s2 = mv_dp4a((int)hi[j][1], b.y, s2);
                s2 = mv_dp4a((int)hi[j][2], b.z, s2);
                s2 = mv_dp4a((int)hi[j][3], b.w, s2);
                const int is = sca[j] * s1 + scb[j] * s2, im = mna[j] * sa + mnb[j] * sbm;
                acc[j][m] += dx * (d[j] * (float)is - dmin[j] * (float)im);
            }
        }
    }
};

/* six-bit values (low nibble | high bits << 4, bytes 0..63) minus 32, per byte */
__device__ __forceinline__ int q6_sub32(uint32_t v) { return (int)(((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u); }

/* ---- q6_K: super-blocks of 256; WU w: half n = (w >> 2) & 1, l in
 * [l0, l0 + 8) with l0 = 8 (w & 3), the four groups g (elements 128n + 32g + l)
 * each with scale sc[8n + l0/16 + 2g]. */
struct mvf_q6_K {
    typedef fmt_q6_K B;
    static constexpr int WU_EL = 32, CHUNK_EL = 1024, BLK_EL = B::EL, BLK_BYTES = B::BYTES, STAGES = MV_ST(3);
    static constexpr bool QUANT = true, KQ = true;
    template <int R, int MT>
    __device__ static __forceinline__ void dot(const char *const *rp, int w, int64_t e0, const mv_x &X,
                                               const int (&xo)[MT], float (&acc)[R][MT]) {
        const int sb = w >> 3, n = (w >> 2) & 1, l0 = 8 * (w & 3);
        int v[R][4][2], sc[R][4];
        float d[R];
#pragma unroll
        for (int j = 0; j < R; j++) {
            const char *b = rp[j] + sb * B::BYTES;
#pragma unroll
            for (int t = 0; t < 2; t++) {
                const uint32_t A = mv_u32(b + B::QL + 64 * n + l0 + 4 * t);
                const uint32_t Bq = mv_u32(b + B::QL + 64 * n + 32 + l0 + 4 * t);
                const uint32_t H = mv_u32(b + B::QH + 32 * n + l0 + 4 * t);
                v[j][0][t] = q6_sub32((A & 0x0F0F0F0Fu) | ((H << 4) & 0x30303030u));
                v[j][1][t] = q6_sub32((Bq & 0x0F0F0F0Fu) | ((H << 2) & 0x30303030u));
                v[j][2][t] = q6_sub32(((A >> 4) & 0x0F0F0F0Fu) | (H & 0x30303030u));
                v[j][3][t] = q6_sub32(((Bq >> 4) & 0x0F0F0F0Fu) | ((H >> 2) & 0x30303030u));
            }
            const int8_t *s = (const int8_t *)(b + B::SC + 8 * n + (l0 >> 4));
#pragma unroll
            for (int g = 0; g < 4; g++) sc[j][g] = s[2 * g];
            d[j] = ld_h(b + B::D);
        }
        const int64_t u0 = ((e0 + (int64_t)sb * 256) >> 5) + 4 * n; /* 32-unit of group 0 */
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int8_t *xr = X.xq + xo[m] + u0 * 32 + l0;
            int2 a[4];
#pragma unroll
            for (int g = 0; g < 4; g++) a[g] = *(const int2 *)(xr + 32 * g);
            const float dx = mv_xd(X.xs[(xo[m] >> 5) + u0]);
#pragma unroll
            for (int j = 0; j < R; j++) {
                int is = 0;
#pragma unroll
                for (int g = 0; g < 4; g++) is += sc[j][g] * mv_dp4a(v[j][g][1], a[g].y, mv_dp4a(v[j][g][0], a[g].x, 0));
                acc[j][m] += d[j] * dx * (float)is;
            }
        }
    }
};

/* ---- float weights: WU = 16 bytes (8 f16/bf16 or 4 f32), 16-byte aligned
 * rows; activations f32 from global memory (L1), xo in floats ---- */
template <int DT> struct mvf_float {
    static constexpr int WU_EL = DT == RB_F32 ? 4 : 8, CHUNK_EL = 64 * WU_EL, BLK_EL = 1,
                         BLK_BYTES = DT == RB_F32 ? 4 : 2, STAGES = MV_ST(3);
    static constexpr bool QUANT = false, KQ = false;
    template <int R, int MT>
    __device__ static __forceinline__ void dot(const char *const *rp, int w, int64_t e0, const mv_x &X,
                                               const int (&xo)[MT], float (&acc)[R][MT]) {
        float wv[R][WU_EL];
#pragma unroll
        for (int j = 0; j < R; j++) {
            const uint4 u = *(const uint4 *)(rp[j] + w * 16);
            const uint32_t q[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int t = 0; t < 4; t++) {
                if (DT == RB_F32) {
                    wv[j][t] = __uint_as_float(q[t]);
                } else if (DT == RB_BF16) {
                    wv[j][2 * t] = __uint_as_float(q[t] << 16);
                    wv[j][2 * t + 1] = __uint_as_float(q[t] & 0xffff0000u);
                } else {
                    wv[j][2 * t] = f16_bits_to_f32((uint16_t)(q[t] & 0xffffu));
                    wv[j][2 * t + 1] = f16_bits_to_f32((uint16_t)(q[t] >> 16));
                }
            }
        }
        const int64_t e = e0 + (int64_t)w * WU_EL;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const float4 *xr = (const float4 *)(X.xf + xo[m] + e);
            float xv[WU_EL];
#pragma unroll
            for (int t = 0; t < WU_EL / 4; t++) {
                const float4 f = xr[t];
                xv[4 * t] = f.x;
                xv[4 * t + 1] = f.y;
                xv[4 * t + 2] = f.z;
                xv[4 * t + 3] = f.w;
            }
#pragma unroll
            for (int j = 0; j < R; j++) {
                float s = acc[j][m];
#pragma unroll
                for (int t = 0; t < WU_EL; t++) s = fmaf(wv[j][t], xv[t], s);
                acc[j][m] = s;
            }
        }
    }
};

} // namespace RB_GPU_NS

#endif

/* Weight formats of the int8 tensor-core GEMM (gemm_q8.cuh): for q4_0,
 * q8_0, q4_K, q5_K and q6_K, how one step of K (GQ_KS = 256 elements: eight
 * q4_0 / q8_0 blocks or one super-block) of a warp's 16 weight rows, as
 * copied raw into shared memory, meets the block's activation rows.
 *
 * Operands of mma.m16n8k32 / m16n8k16 s8 (mma_tile.cuh): A = the 16 weight
 * rows, decoded straight from their bytes into the A fragment's registers
 * (lane 4g + t holds rows g and g + 8 at elements 4t..4t+3 and 16+4t..
 * 16+4t+3 of each 32; in every format here each is one 32-bit word of
 * packed quants, turned into four int8 values by per-byte nibble, high-bit
 * and offset arithmetic); B = 8 activation rows (int8, ldmatrix from the
 * shared tile, GQ_LDA bytes a row). C (rows g, g + 8: weight rows; columns
 * 2t, 2t + 1: activation rows) is scaled the way the CPU backend scales its
 * integer sums (matvec_fmt.cuh says which activation format goes with which
 * weights):
 *   - q4_0, q8_0 (activations in q8_0 blocks, an f32 scale per 32): per
 *     block acc += sum * (activation scale * weight scale), the first
 *     kernel's arithmetic in its order (gemm_q8_plain.cuh);
 *   - q4_K, q5_K (activations in q8_K super-blocks: one f32 scale per 256,
 *     and each 32's element sum for the mins): per super-block the integer
 *     sums is = sum over the 8 sub-blocks of scale x sum and im = sum of
 *     min x activation sum (dp2a: packed int16 activation sums by packed
 *     6-bit mins), then acc += dx (d is - dmin im), as matvec_fmt.cuh;
 *   - q6_K: each 32 is two sub-blocks of 16 with their own int8 scales, so
 *     two m16n8k16 products per 32 (a[0..1] with b0, a[2..3] with b1); per
 *     super-block acc += d dx is.
 * A row's bytes start at its phase (address & 15) inside the first 16-byte
 * piece of its stage row. q4_K / q5_K rows are 4-byte aligned
 * (gpu_units_aligned) and their super-blocks 16-byte multiples, so their
 * words load whole; the others' load as two 16-bit halves (mv_u32).
 * The activation step record (GQ_REC bytes a row and step, written by
 * gemm_q8.cuh's quantizer): q8_0 mode the 8 blocks' f32 scales; q8_K mode
 * the f32 scale at byte 0 and the 8 sub-block sums as int16 pairs at bytes
 * 16..31. CUDA sm_80+ only (RB_TILE_MMA). */
#ifndef RBEE_GPU_GEMM_Q8_FMT_CUH
#define RBEE_GPU_GEMM_Q8_FMT_CUH

#include "backends/gpu/matmul/matvec_fmt.cuh"
#include "backends/gpu/mma_tile.cuh"

namespace RB_GPU_NS {

#define GQ_KS 256           /* elements of K a step */
#define GQ_LDA (GQ_KS + 16) /* activation row stride in shared memory: ldmatrix rows 4 banks apart */
#define GQ_REC 32           /* bytes of an activation row's step record */

#if defined(RB_TILE_MMA)

/* B fragments of the activations' 32-element block j of the step, for the
 * NA8 tiles of 8 rows: tile 2np in b[np][0..1], tile 2np + 1 in b[np][2..3]
 * (ldmatrix x4 over 16 rows; the tile past an odd NA8 reads zeroed rows) */
template <int NA8>
__device__ __forceinline__ void gq_act_frags(uint32_t (&b)[(NA8 + 1) / 2][4], const char *aq, int j, int lane) {
    const uint16_t *a16 = (const uint16_t *)aq;
    const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
    for (int np = 0; np < (NA8 + 1) / 2; np++)
        ldsm_x4(b[np], a16 + (np * 16 + (mi >> 1) * 8 + r8) * (GQ_LDA / 2) + (mi & 1) * 8 + j * 16);
}

/* four nibbles (one a byte, 0..15) minus 8 as int8 bytes: x ^ 8 is x - 8
 * for x >= 8 and x + 8 below, where 0xf0 completes it */
__device__ __forceinline__ uint32_t gq_q4_s8(uint32_t x) { return (x ^ 0x08080808u) | ((~x & 0x08080808u) * 0x1eu); }

/* ---- q4_0 / q8_0: eight blocks a step, the first jn inside K ---- */
template <bool Q4, int NA8>
__device__ __forceinline__ void gq_step_q80(float (&acc)[NA8][4], const char *rA, const char *rB, const char *aq,
                                            const char *ar, int lane, int jn) {
    constexpr int BY = Q4 ? fmt_q4_0::BYTES : fmt_q8_0::BYTES, QS = Q4 ? fmt_q4_0::QS : fmt_q8_0::QS;
    constexpr int D = Q4 ? fmt_q4_0::D : fmt_q8_0::D;
    const int t = lane & 3;
#pragma unroll
    for (int j = 0; j < GQ_KS / 32; j++) {
        if (j >= jn) break; /* uniform over the block */
        const char *bA = rA + j * BY, *bB = rB + j * BY;
        uint32_t a[4];
        if (Q4) { /* byte i: element i (low nibble) and i + 16 (high) */
            const uint32_t vA = mv_u32(bA + QS + 4 * t), vB = mv_u32(bB + QS + 4 * t);
            a[0] = gq_q4_s8(vA & 0x0F0F0F0Fu);
            a[1] = gq_q4_s8(vB & 0x0F0F0F0Fu);
            a[2] = gq_q4_s8((vA >> 4) & 0x0F0F0F0Fu);
            a[3] = gq_q4_s8((vB >> 4) & 0x0F0F0F0Fu);
        } else {
            a[0] = mv_u32(bA + QS + 4 * t);
            a[1] = mv_u32(bB + QS + 4 * t);
            a[2] = mv_u32(bA + QS + 16 + 4 * t);
            a[3] = mv_u32(bB + QS + 16 + 4 * t);
        }
        const float dA = ld_h(bA + D), dB = ld_h(bB + D);
        uint32_t b[(NA8 + 1) / 2][4];
        gq_act_frags<NA8>(b, aq, j, lane);
#pragma unroll
        for (int nt = 0; nt < NA8; nt++) {
            int c[4];
            mma_s8_k32(c, a, b[nt >> 1][2 * (nt & 1)], b[nt >> 1][2 * (nt & 1) + 1]);
            const float x0 = *(const float *)(ar + (nt * 8 + 2 * t) * GQ_REC + 4 * j);
            const float x1 = *(const float *)(ar + (nt * 8 + 2 * t + 1) * GQ_REC + 4 * j);
            acc[nt][0] += (float)c[0] * (x0 * dA);
            acc[nt][1] += (float)c[1] * (x1 * dA);
            acc[nt][2] += (float)c[2] * (x0 * dB);
            acc[nt][3] += (float)c[3] * (x1 * dB);
        }
    }
}

/* q4_K / q5_K super-block header at b (4-byte aligned): d, dmin and the
 * eight 6-bit scales and mins as packed bytes (sc[0] = sub-blocks 0..3,
 * sc[1] = 4..7; the same for mn), q4k_scale_min's unpacking a word at a time */
__device__ __forceinline__ void gq_k4_head(const char *b, float *d, float *dmin, uint32_t (&sc)[2], uint32_t (&mn)[2]) {
    static_assert(fmt_q4_K::DMIN == fmt_q4_K::D + 2 && fmt_q5_K::D == fmt_q4_K::D && fmt_q5_K::SCALES == fmt_q4_K::SCALES,
                  "q4_K / q5_K headers");
    const uint32_t dd = *(const uint32_t *)(b + fmt_q4_K::D);
    *d = f16_bits_to_f32((uint16_t)(dd & 0xffffu));
    *dmin = f16_bits_to_f32((uint16_t)(dd >> 16));
    const uint32_t *s = (const uint32_t *)(b + fmt_q4_K::SCALES);
    const uint32_t w0 = s[0], w1 = s[1], w2 = s[2];
    sc[0] = w0 & 0x3f3f3f3fu;                                      /* j < 4: s[j] & 63 */
    mn[0] = w1 & 0x3f3f3f3fu;                                      /* s[j + 4] & 63 */
    sc[1] = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);        /* j >= 4: s[j + 4] & 15 | s[j - 4] >> 6 << 4 */
    mn[1] = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u); /* s[j + 4] >> 4 | s[j] >> 6 << 4 */
}

/* ---- q4_K / q5_K: one super-block a step ---- */
template <bool Q5, int NA8>
__device__ __forceinline__ void gq_step_q4k(float (&acc)[NA8][4], const char *rA, const char *rB, const char *aq,
                                            const char *ar, int lane) {
    constexpr int QS = Q5 ? fmt_q5_K::QS : fmt_q4_K::QS;
    const int t = lane & 3;
    float dA, mA, dB, mB;
    uint32_t scA[2], mnA[2], scB[2], mnB[2];
    gq_k4_head(rA, &dA, &mA, scA, mnA);
    gq_k4_head(rB, &dB, &mB, scB, mnB);
    uint32_t hA0 = 0, hA1 = 0, hB0 = 0, hB1 = 0; /* q5_K: qh bytes 4t.. and 16+4t.. (element l's bit j: sub-block j) */
    if (Q5) {
        hA0 = *(const uint32_t *)(rA + fmt_q5_K::QH + 4 * t);
        hA1 = *(const uint32_t *)(rA + fmt_q5_K::QH + 16 + 4 * t);
        hB0 = *(const uint32_t *)(rB + fmt_q5_K::QH + 4 * t);
        hB1 = *(const uint32_t *)(rB + fmt_q5_K::QH + 16 + 4 * t);
    }
    int is[NA8][4];
#pragma unroll
    for (int nt = 0; nt < NA8; nt++) is[nt][0] = is[nt][1] = is[nt][2] = is[nt][3] = 0;
#pragma unroll
    for (int p = 0; p < 4; p++) { /* sub-blocks 2p (low nibbles of bytes 32p..) and 2p + 1 (high) */
        const uint32_t v0A = *(const uint32_t *)(rA + QS + 32 * p + 4 * t);
        const uint32_t v1A = *(const uint32_t *)(rA + QS + 32 * p + 16 + 4 * t);
        const uint32_t v0B = *(const uint32_t *)(rB + QS + 32 * p + 4 * t);
        const uint32_t v1B = *(const uint32_t *)(rB + QS + 32 * p + 16 + 4 * t);
        uint32_t lo[4] = {v0A & 0x0F0F0F0Fu, v0B & 0x0F0F0F0Fu, v1A & 0x0F0F0F0Fu, v1B & 0x0F0F0F0Fu};
        uint32_t hi[4] = {(v0A >> 4) & 0x0F0F0F0Fu, (v0B >> 4) & 0x0F0F0F0Fu, (v1A >> 4) & 0x0F0F0F0Fu,
                          (v1B >> 4) & 0x0F0F0F0Fu};
        if (Q5) {
            lo[0] |= ((hA0 >> (2 * p)) & 0x01010101u) << 4;
            lo[1] |= ((hB0 >> (2 * p)) & 0x01010101u) << 4;
            lo[2] |= ((hA1 >> (2 * p)) & 0x01010101u) << 4;
            lo[3] |= ((hB1 >> (2 * p)) & 0x01010101u) << 4;
            hi[0] |= ((hA0 >> (2 * p + 1)) & 0x01010101u) << 4;
            hi[1] |= ((hB0 >> (2 * p + 1)) & 0x01010101u) << 4;
            hi[2] |= ((hA1 >> (2 * p + 1)) & 0x01010101u) << 4;
            hi[3] |= ((hB1 >> (2 * p + 1)) & 0x01010101u) << 4;
        }
        /* scales of sub-blocks 2p, 2p + 1: bytes 2 (p & 1), 2 (p & 1) + 1 of word p >> 1 */
        const int sh = 16 * (p & 1);
        const int sA0 = (int)((scA[p >> 1] >> sh) & 0xffu), sA1 = (int)((scA[p >> 1] >> (sh + 8)) & 0xffu);
        const int sB0 = (int)((scB[p >> 1] >> sh) & 0xffu), sB1 = (int)((scB[p >> 1] >> (sh + 8)) & 0xffu);
        uint32_t b0[(NA8 + 1) / 2][4], b1[(NA8 + 1) / 2][4];
        gq_act_frags<NA8>(b0, aq, 2 * p, lane);
        gq_act_frags<NA8>(b1, aq, 2 * p + 1, lane);
#pragma unroll
        for (int nt = 0; nt < NA8; nt++) {
            int c[4];
            mma_s8_k32(c, lo, b0[nt >> 1][2 * (nt & 1)], b0[nt >> 1][2 * (nt & 1) + 1]);
            is[nt][0] += sA0 * c[0];
            is[nt][1] += sA0 * c[1];
            is[nt][2] += sB0 * c[2];
            is[nt][3] += sB0 * c[3];
            mma_s8_k32(c, hi, b1[nt >> 1][2 * (nt & 1)], b1[nt >> 1][2 * (nt & 1) + 1]);
            is[nt][0] += sA1 * c[0];
            is[nt][1] += sA1 * c[1];
            is[nt][2] += sB1 * c[2];
            is[nt][3] += sB1 * c[3];
        }
    }
#pragma unroll
    for (int nt = 0; nt < NA8; nt++)
#pragma unroll
        for (int cc = 0; cc < 2; cc++) {
            const char *rec = ar + (nt * 8 + 2 * t + cc) * GQ_REC;
            const float dx = *(const float *)rec;
            const int4 xs = *(const int4 *)(rec + 16); /* sums of sub-blocks (0,1) (2,3) (4,5) (6,7) */
            const int imA =
                __dp2a_hi(xs.w, (int)mnA[1], __dp2a_lo(xs.z, (int)mnA[1], __dp2a_hi(xs.y, (int)mnA[0], __dp2a_lo(xs.x, (int)mnA[0], 0))));
            const int imB =
                __dp2a_hi(xs.w, (int)mnB[1], __dp2a_lo(xs.z, (int)mnB[1], __dp2a_hi(xs.y, (int)mnB[0], __dp2a_lo(xs.x, (int)mnB[0], 0))));
            acc[nt][cc] += dx * (dA * (float)is[nt][cc] - mA * (float)imA);
            acc[nt][2 + cc] += dx * (dB * (float)is[nt][2 + cc] - mB * (float)imB);
        }
}

/* ---- q6_K: one super-block a step: group g4 of half n is the 32 elements
 * 128n + 32g4 + l (activation block 4n + g4), sub-blocks l < 16 and l >= 16 ---- */
template <int NA8>
__device__ __forceinline__ void gq_step_q6k(float (&acc)[NA8][4], const char *rA, const char *rB, const char *aq,
                                            const char *ar, int lane) {
    typedef fmt_q6_K B;
    const int t = lane & 3;
    int is[NA8][4];
#pragma unroll
    for (int nt = 0; nt < NA8; nt++) is[nt][0] = is[nt][1] = is[nt][2] = is[nt][3] = 0;
#pragma unroll
    for (int n = 0; n < 2; n++) {
        const uint32_t hA0 = mv_u32(rA + B::QH + 32 * n + 4 * t), hA1 = mv_u32(rA + B::QH + 32 * n + 16 + 4 * t);
        const uint32_t hB0 = mv_u32(rB + B::QH + 32 * n + 4 * t), hB1 = mv_u32(rB + B::QH + 32 * n + 16 + 4 * t);
#pragma unroll
        for (int hl = 0; hl < 2; hl++) { /* g4 & 1: which 32 bytes of ql */
            const uint32_t lA0 = mv_u32(rA + B::QL + 64 * n + 32 * hl + 4 * t);
            const uint32_t lA1 = mv_u32(rA + B::QL + 64 * n + 32 * hl + 16 + 4 * t);
            const uint32_t lB0 = mv_u32(rB + B::QL + 64 * n + 32 * hl + 4 * t);
            const uint32_t lB1 = mv_u32(rB + B::QL + 64 * n + 32 * hl + 16 + 4 * t);
#pragma unroll
            for (int hn = 0; hn < 2; hn++) { /* g4 >> 1: low or high nibbles */
                const int g4 = 2 * hn + hl;
                auto val = [&](uint32_t l, uint32_t h) {
                    const uint32_t nib = hn ? (l >> 4) & 0x0F0F0F0Fu : l & 0x0F0F0F0Fu;
                    return (uint32_t)q6_sub32(nib | (((h >> (2 * g4)) & 0x03030303u) << 4));
                };
                const uint32_t a0 = val(lA0, hA0), a1 = val(lB0, hB0), a2 = val(lA1, hA1), a3 = val(lB1, hB1);
                const int sAl = (int)(int8_t)rA[B::SC + 8 * n + 2 * g4], sAh = (int)(int8_t)rA[B::SC + 8 * n + 2 * g4 + 1];
                const int sBl = (int)(int8_t)rB[B::SC + 8 * n + 2 * g4], sBh = (int)(int8_t)rB[B::SC + 8 * n + 2 * g4 + 1];
                uint32_t b[(NA8 + 1) / 2][4];
                gq_act_frags<NA8>(b, aq, 4 * n + g4, lane);
#pragma unroll
                for (int nt = 0; nt < NA8; nt++) {
                    int cl[4], ch[4];
                    mma_s8_k16(cl, a0, a1, b[nt >> 1][2 * (nt & 1)]);
                    mma_s8_k16(ch, a2, a3, b[nt >> 1][2 * (nt & 1) + 1]);
                    is[nt][0] += sAl * cl[0] + sAh * ch[0];
                    is[nt][1] += sAl * cl[1] + sAh * ch[1];
                    is[nt][2] += sBl * cl[2] + sBh * ch[2];
                    is[nt][3] += sBl * cl[3] + sBh * ch[3];
                }
            }
        }
    }
    const float dA = ld_h(rA + B::D), dB = ld_h(rB + B::D);
#pragma unroll
    for (int nt = 0; nt < NA8; nt++)
#pragma unroll
        for (int cc = 0; cc < 2; cc++) {
            const float dx = *(const float *)(ar + (nt * 8 + 2 * t + cc) * GQ_REC);
            acc[nt][cc] += dA * dx * (float)is[nt][cc];
            acc[nt][2 + cc] += dB * dx * (float)is[nt][2 + cc];
        }
}

#endif /* RB_TILE_MMA */

} // namespace RB_GPU_NS

#endif

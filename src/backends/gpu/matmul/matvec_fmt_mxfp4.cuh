/* The mxfp4 weight format in the form of matvec_fmt.cuh's formats (a work
 * unit's dot product with MT int8 activation rows for R weight rows), for
 * the expert products of ops_matmul_id.cu. As the CPU backend (and ggml):
 * activations in q8_0 mode (blocks of 32, f16 scale), a block's 32 nibbles
 * turned into the table's signed values (-12..12, fit in int8) and dotted
 * with the activations' int8 values in int32, the sum scaled by the block's
 * 2^(e - 128) times the activations' scale. Blocks are 17 bytes, so rows
 * are only byte aligned: the weights are read a byte at a time. */
#ifndef RBEE_GPU_MATVEC_FMT_MXFP4_CUH
#define RBEE_GPU_MATVEC_FMT_MXFP4_CUH

#include "backends/gpu/matmul/matvec_fmt.cuh"

namespace RB_GPU_NS {

/* four nibbles' table values as packed int8 */
__device__ __forceinline__ int mxfp4_pack4(int q0, int q1, int q2, int q3) {
    return (mxfp4_value(q0) & 0xff) | ((mxfp4_value(q1) & 0xff) << 8) | ((mxfp4_value(q2) & 0xff) << 16) |
           (int)((unsigned)mxfp4_value(q3) << 24);
}

/* ---- mxfp4: WU = one 17-byte block (32 elements) ---- */
struct mvf_mxfp4 {
    static constexpr int WU_EL = fmt_mxfp4::EL, BLK_EL = fmt_mxfp4::EL, BLK_BYTES = fmt_mxfp4::BYTES;
    static constexpr bool QUANT = true, KQ = false;
    template <int R, int MT>
    __device__ static __forceinline__ void dot(const char *const *rp, int w, int64_t e0, const mv_x &X,
                                               const int (&xo)[MT], float (&acc)[R][MT]) {
        int lo[R][4], hi[R][4];
        float dw[R];
#pragma unroll
        for (int j = 0; j < R; j++) {
            const uint8_t *b = (const uint8_t *)rp[j] + w * fmt_mxfp4::BYTES;
            dw[j] = mxfp4_scale(b[fmt_mxfp4::E]);
#pragma unroll
            for (int t = 0; t < 4; t++) { /* elements 4t..4t+3 (low nibbles) and 16+4t.. (high) */
                const uint8_t *qs = b + fmt_mxfp4::QS + 4 * t;
                const int q0 = qs[0], q1 = qs[1], q2 = qs[2], q3 = qs[3];
                lo[j][t] = mxfp4_pack4(q0 & 15, q1 & 15, q2 & 15, q3 & 15);
                hi[j][t] = mxfp4_pack4(q0 >> 4, q1 >> 4, q2 >> 4, q3 >> 4);
            }
        }
        const int64_t e = e0 + (int64_t)w * 32;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int8_t *xr = X.xq + xo[m] + e;
            const int4 a = *(const int4 *)xr, c = *(const int4 *)(xr + 16);
            const float dx = mv_xd(X.xs[(xo[m] + e) >> 5]);
#pragma unroll
            for (int j = 0; j < R; j++) {
                int s = mv_dp4a(lo[j][0], a.x, 0);
                s = mv_dp4a(lo[j][1], a.y, s);
                s = mv_dp4a(lo[j][2], a.z, s);
                s = mv_dp4a(lo[j][3], a.w, s);
                s = mv_dp4a(hi[j][0], c.x, s);
                s = mv_dp4a(hi[j][1], c.y, s);
                s = mv_dp4a(hi[j][2], c.z, s);
                s = mv_dp4a(hi[j][3], c.w, s);
                acc[j][m] += dw[j] * dx * (float)s;
            }
        }
    }
};

} // namespace RB_GPU_NS

#endif

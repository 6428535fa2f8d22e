/* Direct matrix-vector kernels for decode (k_mvd: 1-4 activation rows),
 * included by matvec.cuh. Decode is bound by how fast weights stream, so each
 * 32-lane group owns a balanced range of rows and walks them in spans (2 KiB
 * float, 32 block pairs q4_0/q8_0, 8 super-blocks q4_K/q5_K, 16 q6_K) with
 * coalesced 16-byte loads, the next span always in flight; the first span
 * (quantized: and an L2 prefetch of the next) goes out before the dependency
 * wait (programmatic dependent launch, gpu_pdl.h). Float spans are used from
 * registers; quantized spans go through the group's shared-memory slot and
 * meet, with dp4a, int8 activations that each block quantizes itself exactly
 * as the CPU backend does (q8_0 blocks for q4_0/q8_0, q8_K for the
 * k-quants). rb_matmul_fused runs here: the rms_norm folded into that
 * quantization, and the residual add, glu_out, rope and the KV-cache store
 * in the epilogue. Needs 16-byte aligned rows (q6_K: 2-byte, with the 16-byte
 * pieces around them inside the buffer), K a multiple of 256 (quantized) or
 * 16 bytes (float) and contiguous f32 activations; matvec.cuh falls back to
 * the staged kernel otherwise. Design, and every experiment tried and
 * dropped: docs/design/gpu-decode.md. */
#ifndef RBEE_GPU_MATVEC_DIRECT_CUH
#define RBEE_GPU_MATVEC_DIRECT_CUH

#include "backends/gpu/gpu_pdl.h"
#include "backends/gpu/gpu_trace.h"
#include "backends/gpu/matmul/matvec_fmt.cuh"
#include "backends/gpu/rope_math.cuh"

namespace RB_GPU_NS {

#define MVD_THREADS 256   /* float weights */
#define MVD_Q_THREADS 512 /* quantized weights: fewer blocks read and quantize the activations */
#define MVD_MAX_M 4
#define MVD_HOST_ROWS 4096 /* row results (x M) a block stages for a destination in host memory (gt.host) */
#define MVD_NW_REGS 2 /* float4 of a staged norm weight a thread requests before the first span (K <= 8 NT) */
#define MVD_ROPE_FREQS 64 /* rope frequencies passed with the launch (head dims up to 128) */
#define MVD_L2PRE_KB 5120 /* quantized: KB of weights a launch requests into L2 before its dependency wait */
#define MVD_HOST_CHUNK 8  /* d.host: a group writes its staged row results every 8 rows */

/* What the product reads instead of the plain activations (rb_matmul_fused,
 * quantized weights with in-block quantization only). */
#define MVD_PRE_NONE 0
#define MVD_PRE_NORM 1 /* rms_norm over each row, times nw (NULL: 1) */

struct mvd_args {
    gt d, a;                  /* destination [N, M, B2, B3], weights [K, N, ...] */
    int64_t r2, r3;           /* broadcast of a's dims 2/3 over the activations' */
    const char *bp;           /* f32 activations (float weights) */
    int64_t bnb1, bnb2, bnb3; /* their byte strides */
    int M;
    int pre;                  /* MVD_PRE_* (one slice) */
    int acc;                  /* dst (f32) += product */
    int gluo;                 /* dst row r = act(row r) * row r + N/2 of the product (rb_matmul_fused glu_out) */
    int act;                  /* its gate activation (rb_unary_op) */
    int rope;                 /* rotate adjacent row pairs below rrows (rb_matmul_fused rope, normal mode) */
    int rrows, rhd, rnrot;    /* rows rotated (heads x head dim), head dim, rotated dims of a head */
    int rsplit;               /* rows >= rrows one at a time, not in pairs (off: rb_gpu_tuning.rope_pairs_only) */
    double rbase, rfscale, rattn;
    const char *rpos;         /* i32 position of activation row m at rpos + m rpos_nb */
    int64_t rpos_nb;
    const char *rff;          /* f32 frequency factors (rff_nb apart) or NULL */
    int64_t rff_nb;
    char *sp;                 /* store: rows >= srow0 of activation row m also go to sp + (row - srow0) snb0 */
    int sdt;                  /* + slot snb1 (dtype sdt), slot = the i32 at sids + m sids_nb, < sslots */
    int64_t srow0, snb0, snb1, sslots, sids_nb;
    const char *sids;
    int *sguard;              /* graph capture: first bad slot reported here (ids checked on the host otherwise) */
    const float *nw;          /* rms_norm weight [K] or NULL; eps */
    float eps;
    int nwc;                  /* quantized: nw is constant, and staged in shared memory before the dependency wait */
    int l2pre;                /* quantized: spans past the first requested into L2 before the wait (MVD_L2PRE_KB) */
    unsigned long long *trace; /* RBEE_GPU_TRACE slot (gpu_trace.h) or NULL */
    int hoff;                 /* d.host: byte offset of the block's staged row results in shared memory */
    /* last: read only by rope's epilogue, so the fields read before the
     * dependency wait share fewer constant-cache lines */
    double rfreq[MVD_ROPE_FREQS]; /* freq_scale base^(-2i / n_rot) from the host, as ops_rope.cu has them */
};

/* The activations of the MT rows of one slice, as the formats read them. */
template <int MT> struct mvd_x {
    const float *f[MT]; /* float weights: f32 rows */
    const int4 *q[MT];  /* quantized: int8 rows in shared memory, pair-major (mvd_quant_x) */
    const int4 *r[MT];  /* and the records of each pair's two blocks */
};

/* ---- float weights: span = 2 KiB = 128 pieces of 16 bytes ---- */
template <int DT> struct mvd_float {
    static constexpr int EPU = DT == RB_F32 ? 4 : 8; /* elements per 16 bytes */
    static constexpr int SPAN_BYTES = 2048, SPAN_EL = SPAN_BYTES / 16 * EPU, SLOT_BYTES = SPAN_BYTES;
    static constexpr int MINB1 = 1; /* three blocks (<= 80 registers) decoded slower */
    static constexpr bool QUANT = false, PHASED = false;
    typedef mvd_float M34; /* the format at M = 3-4 (mvd_q6_K: narrower spans) */
    __device__ static __forceinline__ int64_t row_bytes(int64_t K) { return K * (16 / EPU); }
    __device__ static __forceinline__ int64_t span_bytes(int64_t K, int64_t span) {
        const int64_t rest = row_bytes(K) - span * SPAN_BYTES;
        return rest < SPAN_BYTES ? rest : SPAN_BYTES;
    }
    template <int MT>
    __device__ static __forceinline__ void consume_regs(const uint4 (&v)[(SPAN_BYTES + 511) / 512], int nbytes, int64_t span,
                                                        int lane, const mvd_x<MT> &X, float (&acc)[MT]) {
        const int nu = nbytes >> 4;
        const int64_t e0 = span * SPAN_EL;
#pragma unroll
        for (int j = 0; j < (SPAN_BYTES + 511) / 512; j++) {
            const int u = lane + 32 * j;
            if (u < nu) {
                const uint32_t q[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
                float wv[EPU];
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    if (DT == RB_F32) {
                        wv[t] = __uint_as_float(q[t]);
                    } else if (DT == RB_BF16) {
                        wv[2 * t] = __uint_as_float(q[t] << 16);
                        wv[2 * t + 1] = __uint_as_float(q[t] & 0xffff0000u);
                    } else {
                        wv[2 * t] = f16_bits_to_f32((uint16_t)(q[t] & 0xffffu));
                        wv[2 * t + 1] = f16_bits_to_f32((uint16_t)(q[t] >> 16));
                    }
                }
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const float4 *x = (const float4 *)(X.f[m] + e0 + (int64_t)u * EPU);
                    float s = acc[m];
#pragma unroll
                    for (int t = 0; t < EPU / 4; t++) {
                        const float4 f = x[t];
                        s = fmaf(wv[4 * t], f.x, s);
                        s = fmaf(wv[4 * t + 1], f.y, s);
                        s = fmaf(wv[4 * t + 2], f.z, s);
                        s = fmaf(wv[4 * t + 3], f.w, s);
                    }
                    acc[m] = s;
                }
            }
        }
    }
};

/* ---- q4_0 / q8_0: span = 32 pairs of blocks ---- */

/* A pair of adjacent blocks (gpu_quant.cuh's fmt_q4_0 / fmt_q8_0) as
 * PAIR_WORDS 4-byte words: QW quant words a block, block 1's scale the high
 * half of word SOFF. */
template <class B> struct mvd_pair {
    static constexpr int PAIR_WORDS = 2 * B::BYTES / 4, QW = (B::BYTES - B::QS) / 4, SOFF = B::BYTES / 4;
    static_assert(B::D == 0 && B::QS == 2 && B::BYTES % 4 == 2, "a pair of blocks 2 bytes off word alignment");
};

struct mvd_q4_0_fmt : mvd_pair<fmt_q4_0> { /* 9 words, 4 quant words a block */
    static constexpr int MINB1 = 2; /* blocks a multiprocessor at M = 1 (<= 64 registers) */
    static constexpr bool OFFSET8 = true; /* value = nibble - 8 */
};

struct mvd_q8_0_fmt : mvd_pair<fmt_q8_0> { /* 17 words, 8 quant words a block */
    static constexpr int MINB1 = 1; /* 64 registers would spill */
    static constexpr bool OFFSET8 = false;
};

/* Every quantized format of k_mvd (mvd_quant here; mvd_q4_K, mvd_q5_K,
 * mvd_q6_K below) walks a row in spans of SPAN_PAIRS "pairs" of 64 elements
 * (32: lane l of the group takes pair l of the span; q6_K's 64: pairs l and
 * 32 + l) and gives the kernel: SPAN_BYTES, row_bytes / span_bytes, MINB1
 * (blocks a multiprocessor at M = 1), M34 (the format k_mvd takes at
 * M = 3-4), PHASED (rows need only be 2-byte aligned: the kernel loads the
 * 16-byte pieces around a span and consume reads it ph bytes into the
 * slot) with SLOT_BYTES (a group's slot), KQ (activations quantized to q8_K,
 * one scale per 256, as the CPU's k-quant dot products take them; else
 * q8_0), rec_y (what an activation record's second word holds: the
 * format's use of the 32 elements' sums), lane_words (where lane l's data
 * starts in the slot, in 4-byte words) and consume (lane l's pairs times
 * the activations, into acc, where the span's rest bytes of the row reach
 * them). */
template <class Q> struct mvd_quant {
    static constexpr int SPAN_PAIRS = 32, PW = Q::PAIR_WORDS, SPAN_BYTES = SPAN_PAIRS * PW * 4, MINB1 = Q::MINB1;
    static constexpr int SLOT_BYTES = SPAN_BYTES;
    static constexpr bool QUANT = true, KQ = false, PHASED = false;
    typedef mvd_quant M34;
    __device__ static __forceinline__ int64_t row_bytes(int64_t K) { return K / 64 * (PW * 4); }
    __device__ static __forceinline__ int64_t span_bytes(int64_t K, int64_t span) {
        const int64_t rest = row_bytes(K) - span * SPAN_BYTES;
        return rest < SPAN_BYTES ? rest : SPAN_BYTES;
    }
    /* {d, -8 x the block's sum (q4_0: the offset's term, dp4a's start) or 0} */
    __device__ static __forceinline__ int rec_y(int2 r) {
        return Q::OFFSET8 ? -8 * (mv_xs_lo(r) + mv_xs_hi(r)) : 0;
    }
    __device__ static __forceinline__ int lane_words(int lane) { return lane * PW; }
    /* A lane per pair: lane l decodes both blocks of pair l of the span from
     * its PW words in the slot W (an odd word stride between lanes, so no
     * bank conflicts): block 0's scale is the low half of word 0 and its
     * quants start 2 bytes in (funnel shifts), block 1's scale is the high
     * half of word SOFF and its QW quant words follow, aligned. Activations:
     * chunk c (16 bytes) of pair P at q[(P / 32 * 4 + c) * 32 + P % 32], so a
     * group's loads are 512 contiguous bytes, and both blocks' records
     * {d, -8 x sum (q4_0) or 0} in one int4 at r[P]. pair0: the span's first
     * pair in the row (a multiple of 32). */
    /* s + one block's integer dot product: its quant words q with the int8
     * activations a0 (elements 0-15) and a1 (16-31); q4_0: low nibbles are
     * elements 0-15, high nibbles 16-31 (the - 8 is in s) */
    __device__ static __forceinline__ int dot(const int (&q)[Q::QW], int4 a0, int4 a1, int s) {
        if constexpr (Q::OFFSET8) {
            s = mv_dp4a(q[0] & 0x0F0F0F0F, a0.x, s);
            s = mv_dp4a(q[1] & 0x0F0F0F0F, a0.y, s);
            s = mv_dp4a(q[2] & 0x0F0F0F0F, a0.z, s);
            s = mv_dp4a(q[3] & 0x0F0F0F0F, a0.w, s);
            s = mv_dp4a((q[0] >> 4) & 0x0F0F0F0F, a1.x, s);
            s = mv_dp4a((q[1] >> 4) & 0x0F0F0F0F, a1.y, s);
            s = mv_dp4a((q[2] >> 4) & 0x0F0F0F0F, a1.z, s);
            s = mv_dp4a((q[3] >> 4) & 0x0F0F0F0F, a1.w, s);
        } else {
            s = mv_dp4a(q[0], a0.x, s);
            s = mv_dp4a(q[1], a0.y, s);
            s = mv_dp4a(q[2], a0.z, s);
            s = mv_dp4a(q[3], a0.w, s);
            s = mv_dp4a(q[Q::QW > 4 ? 4 : 0], a1.x, s);
            s = mv_dp4a(q[Q::QW > 5 ? 5 : 0], a1.y, s);
            s = mv_dp4a(q[Q::QW > 6 ? 6 : 0], a1.z, s);
            s = mv_dp4a(q[Q::QW > 7 ? 7 : 0], a1.w, s);
        }
        return s;
    }
    template <int MT>
    __device__ static __forceinline__ void consume(const uint32_t *W, int pair0, int lane, int ph, int rest,
                                                   const mvd_x<MT> &X, float (&acc)[MT]) {
        if (lane * (PW * 4) >= rest) return; /* past the row's end */
        uint32_t w[PW];
#pragma unroll
        for (int t = 0; t < PW; t++) w[t] = W[t];
        int q0[Q::QW], q1[Q::QW];
#pragma unroll
        for (int t = 0; t < Q::QW; t++) {
            q0[t] = (int)(uint32_t)((((uint64_t)w[t + 1] << 32) | w[t]) >> 16);
            q1[t] = (int)w[Q::SOFF + 1 + t];
        }
        const float d0 = f16_bits_to_f32((uint16_t)(w[0] & 0xffffu)), d1 = f16_bits_to_f32((uint16_t)(w[Q::SOFF] >> 16));
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int4 *xp = X.q[m] + pair0 * 4 + lane;
            const int4 r = X.r[m][pair0 + lane];
            const int4 a0 = xp[0], a1 = xp[32], b0 = xp[64], b1 = xp[96];
            const int s0 = dot(q0, a0, a1, r.y), s1 = dot(q1, b0, b1, r.w);
            acc[m] = fmaf(d0 * __int_as_float(r.x), (float)s0, acc[m]);
            acc[m] = fmaf(d1 * __int_as_float(r.z), (float)s1, acc[m]);
        }
    }
};

/* ---- k-quants (q4_K, q5_K, q6_K): spans of 8 or 16 super-blocks of 256 ----
 * Lane l takes elements 64 p .. 64 p + 63 (p = l % 4) of super-block l / 4
 * of the span, i.e. pair l of the span in the activations' pair-major order
 * (mvd_quant_x), which are quantized to q8_K: each 256 has one f32 scale,
 * the records keep the 16-element sums (mv_quant8), and the integer sums are
 * the CPU's (sub-block scale x dot product, the q4_K / q5_K min x the q8_K
 * block sums, q6_K's - 32 as - 32 x those sums). */

/* q4_K: 144-byte super-blocks, nine 16-byte pieces, so a lane reads its
 * block's header (d, dmin and the 12 bytes of scales) and its 32 bytes of
 * quants as three 16-byte shared-memory loads (conflict-free: in each
 * quarter warp the 8 lanes' pieces fall on distinct banks). */
struct mvd_q4_K {
    typedef fmt_q4_K B;
    static_assert(B::BYTES == 144 && B::D == 0 && B::DMIN == 2 && B::SCALES == 4 && B::QS == 16,
                  "q4_K: header in the first 16 bytes, quants in 16-byte pieces");
    static constexpr int SPAN_PAIRS = 32, SPAN_BYTES = 8 * B::BYTES, SLOT_BYTES = SPAN_BYTES, MINB1 = 2;
    static constexpr bool QUANT = true, KQ = true, PHASED = false;
    typedef mvd_q4_K M34;
    __device__ static __forceinline__ int64_t row_bytes(int64_t K) { return K / B::EL * B::BYTES; }
    __device__ static __forceinline__ int64_t span_bytes(int64_t K, int64_t span) {
        const int64_t rest = row_bytes(K) - span * SPAN_BYTES;
        return rest < SPAN_BYTES ? rest : SPAN_BYTES;
    }
    /* the sub-block's sum (for its min) */
    __device__ static __forceinline__ int rec_y(int2 r) { return mv_xs_lo(r) + mv_xs_hi(r); }
    __device__ static __forceinline__ int lane_words(int lane) { return (lane >> 2) * (B::BYTES / 4); }
    /* W: the lane's super-block in the slot. Sub-blocks 2p and 2p + 1 are
     * the low and high nibbles of quant bytes 32p .. 32p + 31; their 6-bit
     * scales and mins (q4k_scale_min) come four at a time from the packed
     * words: sub-blocks 0-3 the low 6 bits of scale bytes 0-3 (scales) and
     * 4-7 (mins), sub-blocks 4-7 the nibbles of bytes 8-11 with the top two
     * bits of bytes 0-3 / 4-7 above them. */
    template <int MT>
    __device__ static __forceinline__ void consume(const uint32_t *W, int pair0, int lane, int ph, int rest,
                                                   const mvd_x<MT> &X, float (&acc)[MT]) {
        if ((lane >> 2) * B::BYTES >= rest) return; /* past the row's end */
        const int p = lane & 3;
        const uint4 h = ((const uint4 *)W)[0], u0 = ((const uint4 *)W)[1 + 2 * p], u1 = ((const uint4 *)W)[2 + 2 * p];
        const int q[8] = {(int)u0.x, (int)u0.y, (int)u0.z, (int)u0.w, (int)u1.x, (int)u1.y, (int)u1.z, (int)u1.w};
        const float d = f16_bits_to_f32((uint16_t)(h.x & 0xffffu)), dmin = f16_bits_to_f32((uint16_t)(h.x >> 16));
        const uint32_t sc = p < 2 ? h.y & 0x3f3f3f3fu : (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
        const uint32_t mn = p < 2 ? h.z & 0x3f3f3f3fu : ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
        const int sh = (p & 1) * 16;
        const int sca = (int)((sc >> sh) & 0xffu), scb = (int)((sc >> (sh + 8)) & 0xffu);
        const int mna = (int)((mn >> sh) & 0xffu), mnb = (int)((mn >> (sh + 8)) & 0xffu);
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int4 *xp = X.q[m] + pair0 * 4 + lane;
            const int4 r = X.r[m][pair0 + lane];
            const int4 a0 = xp[0], a1 = xp[32], b0 = xp[64], b1 = xp[96];
            int s0 = mv_dp4a(q[0] & 0x0F0F0F0F, a0.x, 0);
            s0 = mv_dp4a(q[1] & 0x0F0F0F0F, a0.y, s0);
            s0 = mv_dp4a(q[2] & 0x0F0F0F0F, a0.z, s0);
            s0 = mv_dp4a(q[3] & 0x0F0F0F0F, a0.w, s0);
            s0 = mv_dp4a(q[4] & 0x0F0F0F0F, a1.x, s0);
            s0 = mv_dp4a(q[5] & 0x0F0F0F0F, a1.y, s0);
            s0 = mv_dp4a(q[6] & 0x0F0F0F0F, a1.z, s0);
            s0 = mv_dp4a(q[7] & 0x0F0F0F0F, a1.w, s0);
            int s1 = mv_dp4a((q[0] >> 4) & 0x0F0F0F0F, b0.x, 0);
            s1 = mv_dp4a((q[1] >> 4) & 0x0F0F0F0F, b0.y, s1);
            s1 = mv_dp4a((q[2] >> 4) & 0x0F0F0F0F, b0.z, s1);
            s1 = mv_dp4a((q[3] >> 4) & 0x0F0F0F0F, b0.w, s1);
            s1 = mv_dp4a((q[4] >> 4) & 0x0F0F0F0F, b1.x, s1);
            s1 = mv_dp4a((q[5] >> 4) & 0x0F0F0F0F, b1.y, s1);
            s1 = mv_dp4a((q[6] >> 4) & 0x0F0F0F0F, b1.z, s1);
            s1 = mv_dp4a((q[7] >> 4) & 0x0F0F0F0F, b1.w, s1);
            const int is = sca * s0 + scb * s1, im = mna * r.y + mnb * r.w; /* r.y, r.w: the sub-blocks' sums */
            acc[m] = fmaf(__int_as_float(r.x), d * (float)is - dmin * (float)im, acc[m]);
        }
    }
};

/* q5_K: 176-byte super-blocks, eleven 16-byte pieces: q4_K's header and
 * quants (at 48) with qh's 32 bytes between them, every lane of a block
 * reading them (its fifth bits: bit 2p of qh byte l for sub-block 2p, 2p + 1
 * for 2p + 1). The quants' pieces of a quarter warp fall on distinct banks
 * as q4_K's do. */
struct mvd_q5_K {
    typedef fmt_q5_K B;
    static_assert(B::BYTES == 176 && B::D == 0 && B::DMIN == 2 && B::SCALES == 4 && B::QH == 16 && B::QS == 48,
                  "q5_K: header in the first 16 bytes, qh and quants in 16-byte pieces");
    static constexpr int SPAN_PAIRS = 32, SPAN_BYTES = 8 * B::BYTES, SLOT_BYTES = SPAN_BYTES, MINB1 = 2;
    static constexpr bool QUANT = true, KQ = true, PHASED = false;
    typedef mvd_q5_K M34;
    __device__ static __forceinline__ int64_t row_bytes(int64_t K) { return K / B::EL * B::BYTES; }
    __device__ static __forceinline__ int64_t span_bytes(int64_t K, int64_t span) {
        const int64_t rest = row_bytes(K) - span * SPAN_BYTES;
        return rest < SPAN_BYTES ? rest : SPAN_BYTES;
    }
    __device__ static __forceinline__ int rec_y(int2 r) { return mv_xs_lo(r) + mv_xs_hi(r); }
    __device__ static __forceinline__ int lane_words(int lane) { return (lane >> 2) * (B::BYTES / 4); }
    template <int MT>
    __device__ static __forceinline__ void consume(const uint32_t *W, int pair0, int lane, int ph, int rest,
                                                   const mvd_x<MT> &X, float (&acc)[MT]) {
        if ((lane >> 2) * B::BYTES >= rest) return; /* past the row's end */
        const int p = lane & 3;
        const uint4 h = ((const uint4 *)W)[0];
        const float d = f16_bits_to_f32((uint16_t)(h.x & 0xffffu)), dmin = f16_bits_to_f32((uint16_t)(h.x >> 16));
        const uint32_t sc = p < 2 ? h.y & 0x3f3f3f3fu : (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
        const uint32_t mn = p < 2 ? h.z & 0x3f3f3f3fu : ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
        const int sh = (p & 1) * 16;
        const int sca = (int)((sc >> sh) & 0xffu), scb = (int)((sc >> (sh + 8)) & 0xffu);
        const int mna = (int)((mn >> sh) & 0xffu), mnb = (int)((mn >> (sh + 8)) & 0xffu);
        const uint4 *qp = (const uint4 *)W + 3 + 2 * p, *hp = (const uint4 *)W + 1;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int4 *xp = X.q[m] + pair0 * 4 + lane;
            const int4 r = X.r[m][pair0 + lane];
            int s0 = 0, s1 = 0;
#pragma unroll
            for (int k = 0; k < 2; k++) { /* elements 16k .. 16k + 15 of both sub-blocks */
                const uint4 u = qp[k], hv = hp[k];
                const int4 a = xp[32 * k], b = xp[64 + 32 * k];
                const uint32_t q[4] = {u.x, u.y, u.z, u.w}, hb[4] = {hv.x >> (2 * p), hv.y >> (2 * p),
                                                                     hv.z >> (2 * p), hv.w >> (2 * p)};
                const int ax[4] = {a.x, a.y, a.z, a.w}, bx[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    s0 = mv_dp4a((int)((q[t] & 0x0F0F0F0Fu) | ((hb[t] << 4) & 0x10101010u)), ax[t], s0);
                    s1 = mv_dp4a((int)(((q[t] >> 4) & 0x0F0F0F0Fu) | ((hb[t] << 3) & 0x10101010u)), bx[t], s1);
                }
            }
            const int is = sca * s0 + scb * s1, im = mna * r.y + mnb * r.w; /* r.y, r.w: the sub-blocks' sums */
            acc[m] = fmaf(__int_as_float(r.x), d * (float)is - dmin * (float)im, acc[m]);
        }
    }
};

/* q6_K: 210-byte super-blocks. A span is SB of them (SB x 210 bytes, a
 * multiple of 16), lane l taking pair l of each 8 blocks of it, at one
 * 512-thread block a multiprocessor: at two (64 registers) its quantization
 * and epilogues spilled 60-130 bytes. SB = 16 for M <= 2 (with 8 one block
 * would keep only 27 KB a multiprocessor in flight; q4_0: 2 x 18 KB), 8 for
 * M = 3-4 (16 spilled 404 bytes at 128 registers there) and on HIP. Rows need
 * only be 2-byte aligned (PHASED; K = 11008 rows are 9030 bytes). A span's
 * odd blocks start 2 bytes off word alignment: a lane reads the words
 * around its bytes and shifts them by 16 bits where its block is odd (the
 * same instructions on every lane). Its 64 elements are groups g = 2h,
 * 2h + 1 (h = p % 2) of half n = p / 2: the h nibbles of ql bytes
 * 64n .. 64n + 63 (g 2h: the first 32, 2h + 1: the next), bits 4h .. 4h + 3
 * of qh bytes 32n .. 32n + 31 above them, scale bytes 8n + 4h .. 8n + 4h + 3
 * (one per 16 elements). Word reads of different lanes fall on distinct
 * banks or the same address. */
template <int SB> struct mvd_q6_K_span {
    typedef fmt_q6_K B;
    static_assert(B::BYTES == 210 && B::QL == 0 && B::QH == 128 && B::SC == 192 && B::D == 208, "q6_K layout");
    static_assert(SB % 8 == 0, "whole groups of 8 blocks (16-byte pieces)");
    static constexpr int SPAN_PAIRS = 4 * SB, SPAN_BYTES = SB * B::BYTES, SLOT_BYTES = SPAN_BYTES + 16, MINB1 = 1;
    static constexpr bool QUANT = true, KQ = true, PHASED = true;
    typedef mvd_q6_K_span<8> M34;
    __device__ static __forceinline__ int64_t row_bytes(int64_t K) { return K / B::EL * B::BYTES; }
    __device__ static __forceinline__ int64_t span_bytes(int64_t K, int64_t span) {
        const int64_t rest = row_bytes(K) - span * SPAN_BYTES;
        return rest < SPAN_BYTES ? rest : SPAN_BYTES;
    }
    /* the 16-element sums as they are (the - 32 x sum of each scale's 16) */
    __device__ static __forceinline__ int rec_y(int2 r) { return r.y; }
    __device__ static __forceinline__ int lane_words(int lane) { return 0; } /* consume finds the blocks */
    /* the 4 bytes sh / 8 bytes into the word pair lo, hi (sh: 0 or 16) */
    __device__ static __forceinline__ uint32_t w16(uint32_t lo, uint32_t hi, int sh) {
        return (uint32_t)((((uint64_t)hi << 32) | lo) >> sh);
    }
    /* Word t of the lane's ql bytes (groups 2h: t < 8, 2h + 1: t + 8) and
     * of its qh bytes give four 6-bit values 0..63 of each group (the - 32
     * is in the sums' start), multiplied with the activations as they are
     * formed: no array of decoded values (which had spilled at M = 4). */
    template <int MT>
    __device__ static __forceinline__ void consume(const uint32_t *W, int pair0, int lane, int ph, int rest,
                                                   const mvd_x<MT> &X, float (&acc)[MT]) {
        const int p = lane & 3, n = p >> 1, hs = (p & 1) * 4;
        for (int k = 0; k < SB / 8; k++) { /* blocks 8k + l / 4, pairs 32k + l */
            const int blk = 8 * k + (lane >> 2);
            if (blk * B::BYTES >= rest) break;
            const int off = ph + blk * B::BYTES, sh = (off & 2) * 8;
            const uint32_t *ql = W + ((off + B::QL + 64 * n) >> 2), *qh = W + ((off + B::QH + 32 * n) >> 2);
            const uint32_t *sw = W + ((off + B::SC + 8 * n + hs) >> 2);
            const uint32_t s4 = w16(sw[0], sw[1], sh); /* the int8 scales of elements 0-15, 16-31, 32-47, 48-63 */
            const float d = f16_bits_to_f32((uint16_t)((W[(off + B::D) >> 2] >> sh) & 0xffffu));
            const int pk = pair0 + 32 * k;
#pragma unroll
            for (int m = 0; m < MT; m++) {
                const int4 *xp = X.q[m] + pk * 4 + lane;
                const int4 r = X.r[m][pk + lane];
                const int4 a0 = xp[0], a1 = xp[32], b0 = xp[64], b1 = xp[96];
                const int xa[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
                const int xb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
                int sm[4] = {-32 * (int)(int16_t)(r.y & 0xffff), -32 * (r.y >> 16), -32 * (int)(int16_t)(r.w & 0xffff),
                             -32 * (r.w >> 16)};
#pragma unroll
                for (int t = 0; t < 8; t++) {
                    const uint32_t h = w16(qh[t], qh[t + 1], sh) >> hs;
                    const int v0 = (int)(((w16(ql[t], ql[t + 1], sh) >> hs) & 0x0F0F0F0Fu) | ((h << 4) & 0x30303030u));
                    const int v1 =
                        (int)(((w16(ql[t + 8], ql[t + 9], sh) >> hs) & 0x0F0F0F0Fu) | ((h << 2) & 0x30303030u));
                    sm[t >> 2] = mv_dp4a(v0, xa[t], sm[t >> 2]);
                    sm[2 + (t >> 2)] = mv_dp4a(v1, xb[t], sm[2 + (t >> 2)]);
                }
                const int is = ((int)(s4 << 24) >> 24) * sm[0] + ((int)(s4 << 16) >> 24) * sm[1] +
                               ((int)(s4 << 8) >> 24) * sm[2] + ((int)s4 >> 24) * sm[3];
                acc[m] = fmaf(d * __int_as_float(r.x), (float)is, acc[m]);
            }
        }
    }
};

#if defined(RBEE_GPU_HIP)
typedef mvd_q6_K_span<8> mvd_q6_K; /* 16 x 3376 bytes of slots exceed HIP's 48 KiB a block */
#else
typedef mvd_q6_K_span<16> mvd_q6_K;
#endif

/* cos and sin (times attn_factor) of position pos at frequency i, as the
 * rope kernel computes them (rope_math.cuh) */
__device__ __forceinline__ float2 mvd_rope_cs(const mvd_args &p, int32_t pos, int i) {
    return rope_cs_of(pos, i < MVD_ROPE_FREQS ? p.rfreq[i] : rope_freq(p.rbase, p.rfscale, p.rnrot, i),
                      p.rff ? p.rff + i * p.rff_nb : NULL, p.rattn);
}

/* Bytes of one quantized activation row in shared memory: the pair-major
 * order fills whole groups of 32 pairs (2048 elements). */
__host__ __device__ __forceinline__ int64_t mvd_xrow(int64_t K) { return (K + 2047) & ~(int64_t)2047; }

/* rows [lo, hi) of group g of G (balanced) */
__device__ __forceinline__ void mvd_rows(int64_t N, int64_t g, int64_t G, int64_t *lo, int64_t *hi) {
    *lo = N * g / G;
    *hi = N * (g + 1) / G;
}

/* Copies the norm weight (K f32, 16-byte aligned) into the block's shared
 * memory xw, where mvd_quant_x reads it; k_mvd does it before its
 * dependency wait when the weight is constant (p.nwc: the host sets it only
 * for a fused norm with a weight that fits), so its load is not in the
 * activations' round trip (the trace: the fused norm had made the
 * quantization 1.75 us longer than without it). Every thread of the block
 * calls. */
template <int NT> __device__ __forceinline__ void mvd_stage_nw(const mvd_args &p, int64_t K, float *xw) {
    for (int i = threadIdx.x; i < (int)(K / 4); i += NT) ((float4 *)xw)[i] = ((const float4 *)p.nw)[i];
    __syncthreads();
}

/* Quantizes the M activation rows of slice (i2, i3) into the block's shared
 * memory (xq: M x K int8 in the pair-major order the formats' consume
 * reads, xr: M x K / 32 records {d, F::rec_y}), with the values and scales
 * k_mv_xquant computes (F::KQ: q8_K, else q8_0); every thread of the block
 * must call. K % 256 == 0 (a chunk is one q8_K block). A group takes two 256-element chunks at a time and
 * issues both chunks' loads before it uses either (a K = 11008 row is two
 * round trips a group, not three).
 * With the fused norm (p.pre == MVD_PRE_NORM, one slice) the block quantizes
 * x * w (w: nw, staged in shared memory or read from global memory) in the
 * same pass that sums x^2 (in float per lane and group, in double over the
 * groups: a conversion to double a value had run at a quarter of the rate)
 * and leaves the row's 1/rms k to the product: q8_0 and q8_K
 * quantization are scale-invariant, so the int8 values are those of
 * quantizing the normed row (x k) w, up to float rounding of the product,
 * and the row sums are multiplied by k (mvd_rms_k) instead of every block
 * scale. The scales stay f32 (the CPU's quantizer of the normed row rounds
 * them to f16: ~2^-12 relative a block). That takes the chain the scales
 * had waited on (a barrier, the groups' sums added by one group, a barrier,
 * the rescale of every scale, a barrier) off the path to the first
 * product: one barrier, as without the norm. No second pass over x. */
#define MVD_XQ_DEPTH 2 /* chunks a group loads before it quantizes them */
template <int NT, class F, int MT>
__device__ __forceinline__ void mvd_quant_x(const mvd_args &p, int64_t K, int64_t i2, int64_t i3, int8_t *xq,
                                            int2 *xr, const float *nw, double (&part)[NT / 32][MT]) {
    constexpr int NG = NT / 32;
    const bool norm = p.pre == MVD_PRE_NORM;
    const int lane = threadIdx.x & 31, gi = threadIdx.x >> 5;
    const int KB = (int)(K / 256), NC = p.M * KB; /* 256-element chunks (int: M K < 2^28) */
    const char *x0 = p.bp + i2 * p.bnb2 + i3 * p.bnb3;
    float ss[MT]; /* this lane's sums of squares (a few chunks: float holds them to ~1e-7) */
#pragma unroll
    for (int m = 0; m < MT; m++) ss[m] = 0.0f;
    auto chunk_of = [&](int c, int *m, int *e) {
        *m = MT == 1 ? 0 : c / KB;
        *e = (c - *m * KB) * 256 + lane * 8;
    };
    for (int c = gi; c < NC; c += MVD_XQ_DEPTH * NG) {
        float4 f[MVD_XQ_DEPTH][2];
#pragma unroll
        for (int h = 0; h < MVD_XQ_DEPTH; h++) { /* both chunks' loads in flight */
            int m, e;
            chunk_of(c + h * NG, &m, &e);
            if (c + h * NG < NC) {
                const float4 *row = (const float4 *)(x0 + m * p.bnb1) + e / 4;
                f[h][0] = row[0];
                f[h][1] = row[1];
            }
        }
#pragma unroll
        for (int h = 0; h < MVD_XQ_DEPTH; h++) {
            if (c + h * NG >= NC) break;
            int m, e;
            chunk_of(c + h * NG, &m, &e);
            float v[8] = {f[h][0].x, f[h][0].y, f[h][0].z, f[h][0].w, f[h][1].x, f[h][1].y, f[h][1].z, f[h][1].w};
            if (norm) {
                /* in float (a conversion to double, 8 a chunk, had run at a
                 * quarter of the rate) */
                float t = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++) t = fmaf(v[i], v[i], t);
#pragma unroll
                for (int mm = 0; mm < MT; mm++) /* constant indices: ss stays in registers */
                    if (mm == m) ss[mm] += t;
                if (nw) {
                    const float4 w0 = ((const float4 *)(nw + e))[0], w1 = ((const float4 *)(nw + e))[1];
                    v[0] *= w0.x, v[1] *= w0.y, v[2] *= w0.z, v[3] *= w0.w;
                    v[4] *= w1.x, v[5] *= w1.y, v[6] *= w1.z, v[7] *= w1.w;
                }
            }
            int2 qv, rec;
            mv_quant8<F::KQ>(v, lane, &qv, &rec, !norm);
            rec.y = F::rec_y(rec);
            const int P = e >> 6, o = e & 63; /* pair-major: chunk o / 16 of pair P (mvd_quant::consume) */
            *(int2 *)(xq + m * mvd_xrow(K) + ((P >> 5) * 4 + (o >> 4)) * 512 + (P & 31) * 16 + (o & 15)) = qv;
            if ((lane & 3) == 0) xr[(m * K + e) >> 5] = rec;
        }
    }
    if (norm) /* each group's sum, added over the groups by mvd_rms_k after the barrier */
#pragma unroll
        for (int m = 0; m < MT; m++) {
            float t = ss[m];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) t += MV_XOR32(t, o);
            if (lane == 0) part[gi][m] = (double)t;
        }
    __syncthreads();
}

/* The fused norm's 1/rms of activation row m (< MT), from the groups' sums
 * mvd_quant_x left in part: every group adds them itself, in the same tree
 * (so all get the same value) after the barrier that ends the
 * quantization, where one group adding them had cost two more barriers. */
template <int NG, int MT>
__device__ __forceinline__ float mvd_rms_k(const double (&part)[NG][MT], int m, int64_t K, float eps) {
    const int lane = threadIdx.x & 31;
    double t = lane < NG ? part[lane][m] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += MV_XOR32(t, o);
    /* in float: 1/rms to ~2 ulp, where double's square root and division
     * had been some 40 dependent instructions on every thread */
    return rsqrtf((float)t / (float)K + eps);
}

/* A group's staged row results [r0, r0 + n) (n <= 32) of a destination in
 * host memory (d, activation rows nb1 apart), from held (the block's rows
 * from b0 on, MVD_HOST_ROWS / MT an activation row), in one coalesced store
 * per activation row. Not inlined: it runs every few rows, and inlined into
 * k_mvd's span loop it made the q4_0 kernel spill 120 bytes. */
template <int MT>
__device__ __noinline__ void mvd_host_flush(char *d, int64_t nb1, int M, const float *held, int r0, int n, int b0) {
    const int lane = threadIdx.x & 31;
    RB_GROUP_SYNC(); /* lane 0's writes of held */
    if (lane < n)
        for (int m = 0; m < M; m++)
            *(float *)(d + m * nb1 + (int64_t)(r0 + lane) * 4) = held[m * (MVD_HOST_ROWS / MT) + r0 + lane - b0];
}

/* One kernel for every format: a group's work is its rows, each walked in
 * spans of F::SPAN_BYTES; a lane holds UL = SPAN_BYTES / 512 pieces of a span
 * in registers (loaded before any is used). Quantized spans go through the
 * group's shared-memory slot (pairs are not 16-byte aligned per lane), and
 * the next span's loads are issued as soon as this one is in the slot, so
 * they are in flight while it is consumed; the block quantizes the
 * activations itself into shared memory after its slots (no separate
 * k_mv_xquant launch). Float spans are used from registers. NT threads. */
template <class F, int MT, int NT, int MINB = 1>
__global__ void __launch_bounds__(NT, MINB) k_mvd(const mvd_args p) {
    rb_grid_dep_trigger();
    gpu_trace_start(p.trace);
    extern __shared__ int4 mvd_slot_mem[];
    constexpr int NG = NT / 32; /* 32-lane groups per block */
    constexpr int UL = (F::SLOT_BYTES + 511) / 512; /* uint4 per lane per full span */
    constexpr int SLOT_U = F::SLOT_BYTES / 16;
    const int lane = threadIdx.x & 31, gi = threadIdx.x >> 5;
    uint4 *slot = (uint4 *)mvd_slot_mem + gi * SLOT_U; /* shared memory: [slots, NG] [activations] */
    const int64_t G = (int64_t)gridDim.x * NG;
    const int64_t N = p.a.ne[1], K = p.a.ne[0], NH = N / 2;
    const int64_t nsp = (F::row_bytes(K) + F::SPAN_BYTES - 1) / F::SPAN_BYTES; /* spans per row */
    int64_t i2 = 0, i3 = 0; /* the slice (one in decode: no divisions) */
    const char *ab = p.a.p;
    if (gridDim.y > 1) {
        const int64_t sl = blockIdx.y;
        i2 = sl % p.d.ne[2];
        i3 = sl / p.d.ne[2];
        ab += (i2 / p.r2) * p.a.nb[2] + (i3 / p.r3) * p.a.nb[3];
    }
    /* The groups' output rows, computed once a block by its first NG lanes
     * (a lane a group) and shared: every warp computing its own range (64-bit
     * divisions) had made the blocks' start, before the dependency wait, ~2
     * us of issue across the multiprocessor's 32 warps (the trace, 7B q4_0).
     * With gluo each is a pair of weight rows, the gate's r then the up
     * projection's r + N/2 ("steps" 2 r and 2 r + 1). */
    __shared__ int4 mvd_rng[NG];
    const bool pairs = p.gluo || p.rope; /* rope: rows 2 i and 2 i + 1 rotate together */
    if (threadIdx.x < NG) {
        const int64_t gq = (int64_t)blockIdx.x * NG + threadIdx.x;
        int64_t lo, hi, hv, s0 = 0; /* 64-bit to compute; the walk below is in 32-bit steps (rows < 2^31) */
        if (p.rope && p.rsplit && p.rrows < N && NH > G) {
            /* more pairs than groups: the rows past the rotated ones (the values
             * of a qkv product) one at a time, and a share of each kind a group
             * (7B qkv, 4096 pairs and 4096 rows for 4224 groups: at most a pair
             * and a row, 6 spans, where 6144 pairs gave half the groups two, 8
             * spans; 7B q4_0 tg128 +1%) */
            const int64_t np = p.rrows / 2, nr = N - p.rrows;
            int64_t a, b;
            mvd_rows(np, gq, G, &lo, &hi);
            lo *= 2;
            hi *= 2;
            mvd_rows(nr, gq, G, &a, &b);
            s0 = p.rrows + a - hi; /* step st >= hi is row st + s0 */
            hv = hi + (b - a);
        } else {
            mvd_rows(pairs ? NH : N, gq, G, &lo, &hi);
            if (pairs) {
                lo *= 2;
                hi *= 2;
            }
            hv = hi;
        }
        mvd_rng[threadIdx.x] = make_int4((int)lo, (int)hi, (int)hv, (int)s0);
    }
    __syncthreads();
    /* steps [lo, hv): paired below hi (gluo: gate r then up r + N/2) */
    const int4 rg = mvd_rng[gi];
    const int slo = rg.x, shi = rg.y, shv = rg.z, ss0 = rg.w, snh = (int)NH;
    auto wrow = [&](int st) { return p.gluo ? (st >> 1) + (st & 1) * snh : st < shi ? st : st + ss0; };

    uint4 v[UL], w[UL];
    /* F::PHASED: row r starts ph = its address % 16 bytes into its first
     * piece (the same in every span); the pieces around a span are loaded */
    auto phase = [&](int64_t r) { return F::PHASED ? (int)((uintptr_t)(ab + r * p.a.nb[1]) & 15) : 0; };
    auto load_to = [&](uint4(&t)[UL], int64_t r, int64_t span) {
        const int ph = phase(r);
        const int nu = (int)(F::PHASED ? (ph + F::span_bytes(K, span) + 15) >> 4 : F::span_bytes(K, span) >> 4);
        const uint4 *src = (const uint4 *)(ab + r * p.a.nb[1] - ph + span * F::SPAN_BYTES);
#pragma unroll
        for (int j = 0; j < UL; j++) {
            const int u = lane + 32 * j;
            t[j] = u < nu ? RB_LD_STREAM(src + u) : make_uint4(0u, 0u, 0u, 0u);
        }
    };
    const int rowb = (int)F::row_bytes(K), ns = (int)nsp;
    int8_t *xqs = (int8_t *)(slot + (NG - gi) * SLOT_U);
    int2 *xrs = (int2 *)(xqs + p.M * mvd_xrow(K));
    float *xws = (float *)(xrs + p.M * (K / 32)); /* the norm weight, when staged */
    /* a staged norm weight of up to MVD_NW_REGS float4 a thread is requested
     * ahead of the first span, so its loads do not queue behind the span's
     * (the trace: the norm-fused products' blocks had passed their wait ~1.4
     * us after the release, waiting for the norm weight) */
    float4 nwr[MVD_NW_REGS];
    const bool nwpre = F::QUANT && p.nwc && K / 4 <= MVD_NW_REGS * NT;
    if (nwpre)
#pragma unroll
        for (int j = 0; j < MVD_NW_REGS; j++) {
            const int i = (int)threadIdx.x + j * NT;
            if (i < (int)(K / 4)) nwr[j] = ((const float4 *)p.nw)[i];
        }
    if (slo < shv) load_to(v, wrow(slo), 0);
    if constexpr (F::QUANT) {
        if (nwpre) {
#pragma unroll
            for (int j = 0; j < MVD_NW_REGS; j++) {
                const int i = (int)threadIdx.x + j * NT;
                if (i < (int)(K / 4)) ((float4 *)xws)[i] = nwr[j];
            }
            __syncthreads();
        } else if (p.nwc) {
            mvd_stage_nw<NT>(p, K, xws);
        }
        if (p.nwc) gpu_trace_mark(p.trace, 4); /* the norm weight staged */
    }
    /* p.l2pre: the next spans of the group's walk (the rest of its first
     * row, then the start of the second) are requested into L2 with one bulk
     * prefetch, which brings no data back to the multiprocessor: the memory
     * streams them while the block waits and quantizes its activations, and
     * the activations' loads do not queue behind them (loads into shared
     * memory or registers there had lengthened the quantization by their
     * transfer time, runs 16 and 21). sm_90 only. */
    if (p.l2pre && lane == 0 && slo < shv) {
#if !defined(RBEE_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        /* the rest of the first row, then the start of the next one */
        int left = p.l2pre;
        for (int r = 0; r < 2 && left > 0 && slo + r < shv; r++) {
            const int s0 = r == 0 ? 1 : 0, n = ns - s0 < left ? ns - s0 : left;
            if (n <= 0) continue;
            const int ph = phase(wrow(slo + r)); /* whole 16-byte pieces */
            const int b = (int)((ph + F::span_bytes(K, s0 + n - 1) + (int64_t)(n - 1) * F::SPAN_BYTES + 15) & ~15LL);
            const char *a0 = ab + (int64_t)wrow(slo + r) * p.a.nb[1] - ph + (int64_t)s0 * F::SPAN_BYTES;
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(a0), "r"(b) : "memory");
            left -= n;
        }
#endif
    }
    gpu_trace_mark(p.trace, 5); /* at the dependency wait */
    rb_grid_dep_wait(); /* activations come from the kernel before */
    gpu_trace_mark(p.trace, 1);

    mvd_x<MT> X;
    float rk[MT]; /* the fused norm's 1/rms of each row, applied to the row sums */
#pragma unroll
    for (int m = 0; m < MT; m++) rk[m] = 1.0f;
    if constexpr (F::QUANT) {
        __shared__ double part[NG][MT];
        mvd_quant_x<NT, F, MT>(p, K, i2, i3, xqs, xrs, p.nwc ? xws : p.nw, part);
        if (p.pre == MVD_PRE_NORM)
#pragma unroll
            for (int m = 0; m < MT; m++) rk[m] = mvd_rms_k<NG, MT>(part, m, K, p.eps);
    }
    gpu_trace_mark(p.trace, 2);
#pragma unroll
    for (int m = 0; m < MT; m++) {
        const int mm = m < p.M ? m : p.M - 1;
        if constexpr (F::QUANT) {
            X.q[m] = (const int4 *)(xqs + mm * mvd_xrow(K));
            X.r[m] = (const int4 *)(xrs + ((mm * K) >> 5));
            X.f[m] = NULL;
        } else {
            X.f[m] = (const float *)(p.bp + i2 * p.bnb2 + i3 * p.bnb3 + mm * p.bnb1);
            X.q[m] = NULL;
            X.r[m] = NULL;
        }
    }
    float acc[MT], gate[MT];
    /* host memory (a decode step's logits written in place, gt.host): the
     * block's row results are kept in shared memory and written in whole
     * stores, since a 4-byte write a row across the bus made 1B q4_0 decode
     * 16% slower (tg128 1880 -> 1575): each group's every MVD_HOST_CHUNK
     * rows as it goes (mvd_host_flush), so the bus carries them while the
     * product runs - written all at the blocks' ends, 1B's 513 KB of logits
     * had left the output head a tail of 6.7 us, 2.6 with chunks of 8; the
     * host side keeps host only where a block's rows fit
     * (mvd_host_rows), at p.hoff */
    float *held = (float *)((char *)mvd_slot_mem + p.hoff);
    auto put = [&](char *o, int64_t row, int m, float v) { /* dst, and the store (rb_matmul_fused store) */
        stf(p.d.dt, o, v);
        if (p.sp && row >= p.srow0) {
            const int32_t slot = *(const int32_t *)(p.sids + m * p.sids_nb);
            if (slot < 0 || slot >= p.sslots) ids_flag(p.sguard, 1, slot, p.sslots);
            else stf(p.sdt, p.sp + (row - p.srow0) * p.snb0 + (int64_t)slot * p.snb1, v);
        }
    };
    auto finish = [&](int st) {
#pragma unroll
        for (int m = 0; m < MT; m++) {
            float t = acc[m];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) t += MV_XOR32(t, o);
            t *= rk[m];
            if (p.d.host) {
                if (lane == 0 && m < p.M) held[m * (MVD_HOST_ROWS / MT) + st - mvd_rng[0].x] = t;
                continue;
            }
            const bool paired = pairs && st < shi;
            if (paired && !(st & 1)) { /* the gate, or a pair's first row: kept for the row that follows */
                gate[m] = t;
                continue;
            }
            if (lane == 0 && m < p.M) {
                const int64_t row = p.gluo ? st >> 1 : wrow(st);
                char *o = p.d.p + row * p.d.nb[0] + m * p.d.nb[1] + i2 * p.d.nb[2] + i3 * p.d.nb[3];
                if (p.rope && paired) { /* rows st - 1, st: x0 cos - x1 sin, x0 sin + x1 cos */
                    float y0 = gate[m];
                    const int64_t d0 = (st - 1) % p.rhd;
                    if (st - 1 < p.rrows && d0 < p.rnrot) {
                        const float2 cs = mvd_rope_cs(p, *(const int32_t *)(p.rpos + m * p.rpos_nb), (int)(d0 / 2));
                        const float x0 = gate[m], x1 = t;
                        y0 = x0 * cs.x - x1 * cs.y;
                        t = x0 * cs.y + x1 * cs.x;
                    }
                    put(o - p.d.nb[0], row - 1, m, y0);
                }
                if (p.gluo) t = apply_unary(p.act, gate[m]) * t;
                if (p.acc) t += *(const float *)o; /* the residual add of rb_matmul_fused */
                put(o, row, m, t);
            }
        }
        if (p.d.host) { /* every MVD_HOST_CHUNK rows of the group: its staged results in one coalesced store */
            const int k = st - slo, mk = MVD_HOST_CHUNK - 1;
            if ((k & mk) == mk || st + 1 == shv)
                mvd_host_flush<MT>(p.d.p, p.d.nb[1], p.M, held, st - (k & mk), (k & mk) + 1, mvd_rng[0].x);
        }
    };
    if constexpr (F::QUANT) {
        const uint32_t *W = (const uint32_t *)slot + F::lane_words(lane); /* this lane's pair in the slot */
        for (int st = slo; st < shv; st++) {
            const int64_t row = wrow(st);
            const int ph = phase(row);
#pragma unroll
            for (int m = 0; m < MT; m++) acc[m] = 0.0f;
            for (int span = 0; span < ns; span++) {
                const int rest = rowb - span * F::SPAN_BYTES;
                const int nu = F::PHASED ? (ph + (rest < F::SPAN_BYTES ? rest : F::SPAN_BYTES) + 15) >> 4
                                         : (rest < F::SPAN_BYTES ? rest : F::SPAN_BYTES) >> 4;
                RB_GROUP_SYNC(); /* the previous span's reads of the slot are done */
#pragma unroll
                for (int j = 0; j < UL; j++) {
                    const int u = lane + 32 * j;
                    if (u < nu) slot[u] = v[j];
                }
                RB_GROUP_SYNC();
                /* the next span's loads fly while this one is consumed (two
                 * in flight, in v and w alternately, measured slower) */
                if (span + 1 < ns) load_to(v, row, span + 1);
                else if (st + 1 < shv) load_to(v, wrow(st + 1), 0);
                F::template consume<MT>(W, span * F::SPAN_PAIRS, lane, ph, rest, X, acc);
            }
            finish(st);
        }
    } else {
        for (int st = slo; st < shv; st++) {
            const int64_t row = wrow(st);
#pragma unroll
            for (int m = 0; m < MT; m++) acc[m] = 0.0f;
            for (int64_t span = 0; span < nsp; span++) { /* the next span into w while v is used */
                if (span + 1 < nsp) load_to(w, row, span + 1);
                else if (st + 1 < shv) load_to(w, wrow(st + 1), 0);
                F::template consume_regs<MT>(v, (int)F::span_bytes(K, span), span, lane, X, acc);
#pragma unroll
                for (int j = 0; j < UL; j++) v[j] = w[j];
            }
            finish(st);
        }
    }
    if (p.trace) { /* the block's last group is done */
        __syncthreads();
        gpu_trace_mark(p.trace, 3);
    }
}

/* Whether k_mvd can write dst in host memory (gt.host) through its staging
 * of a block's rows: contiguous f32 rows of results, no epilogue, at most
 * MVD_HOST_ROWS / MT rows a block. */
template <int MT> static inline bool mvd_host_rows(const mvd_args &p, int64_t blocks, int ng) {
    const int64_t N = p.a.ne[1];
    return !p.acc && !p.gluo && !p.rope && !p.sp && p.d.dt == RB_F32 && p.d.nb[0] == 4 &&
           (N + blocks * ng - 1) / (blocks * ng) * ng <= MVD_HOST_ROWS / MT;
}

/* Shared memory of k_mvd: the groups' slots, the quantized activations and
 * (nw) the staged norm weight. */
template <class F, int NT> static size_t mvd_smem(int64_t M, int64_t K, bool nw = false) {
    if (!F::QUANT) return 0;
    return (size_t)(NT / 32) * F::SLOT_BYTES + (size_t)(M * mvd_xrow(K) + M * K / 32 * 8) + (nw ? (size_t)K * 4 : 0);
}

} // namespace RB_GPU_NS

#endif

/* Direct matrix-vector kernels for decode (M = 1..4 activation rows),
 * included by matvec.cuh. Every 32-lane group (a warp; half or all of an AMD
 * wavefront) works alone on a balanced range of weight rows, walked in spans
 * of 2 KiB (float) or 32 block pairs (quantized), and loads weights with
 * plain coalesced 16-byte loads; the next span's loads are issued before the
 * current span is used, so every group keeps a span in flight. The first
 * loads are issued before waiting on the kernel ahead (programmatic
 * dependent launch, gpu_pdl.h), so weights stream while the activations are
 * being produced.
 *
 * Formats (F::consume_regs computes a float span from registers, F::consume a
 * quantized one from shared memory):
 *  - f32/f16/bf16: a lane holds 4 pieces of 16 bytes of the span (and 4 of
 *    the next) and multiplies them with the f32 activations (read through L1,
 *    where all groups of a multiprocessor find them).
 *  - q4_0, q8_0: ggml blocks (18 and 34 bytes) do not fall on 16-byte
 *    boundaries, but a pair of blocks does on 4 bytes (36 = 9 words, 68 =
 *    17) and four pairs on 16 bytes; a span is loaded into registers with
 *    coalesced uint4 loads and stored into the group's shared-memory slot,
 *    then lane l decodes pair l, both blocks. Activations are int8 blocks
 *    with an f32 scale, quantized exactly as the CPU backend does
 *    (mv_quant8, matvec_fmt.cuh), so the integer dot products equal the
 *    CPU's, by each block of 512 threads into its shared memory (one launch,
 *    no scratch), in an order that makes each lane's reads of them part of
 *    512 contiguous bytes.
 * Needs 16-byte aligned rows, K a multiple of 256 (quantized) or of 16 bytes
 * (float) and contiguous f32 activations (quantized: that fit the block's
 * shared memory); matvec.cuh falls back to the staged kernel otherwise.
 * For rb_matmul_fused a block adds its product to the destination (the
 * residual add) and, with q4_0/q8_0 weights, applies an rms_norm as it
 * quantizes the activations (mvd_quant_x): one kernel instead of the norm's
 * and the add's (7B decode q4_0 401.6 -> 418.1, q8_0 275.2 -> 288.2 tok/s).
 * With glu_out a group takes pairs of rows (gate r, up r + N/2) and writes
 * act(gate) * up: the gated MLP's product without the glu kernel. With rope
 * (normal mode) it takes rows 2 i, 2 i + 1 together and rotates them, and
 * with a store it also writes the rows past the q heads to the KV cache
 * slot read on the device: the qkv projection without the rope and
 * set_rows kernels. Where the pairs outnumber the groups, the rows past the
 * rotated ones go one at a time and each group takes a share of both kinds
 * (7B: at most a pair and a row, not two pairs; run 17).
 *
 * Measured on an H100 (bench_gpu ops, 4096 x 11008, M = 1, graph replay,
 * fraction of the copy bandwidth; docs/PERFORMANCE.md): the staged kernel of
 * matvec.cuh bf16 0.74, q8_0 0.66, q4_0 0.51; these kernels before span
 * prefetch, in-block activation quantization and whole-block lanes bf16
 * 0.80-0.83, q8_0 0.66, q4_0 0.46-0.48; with them bf16 0.86-0.87, q8_0 0.77,
 * q4_0 0.69. A lane per pair (run 14; it had been a lane per block, five
 * unaligned words and funnel shifts each, two-way bank conflicts on the
 * activations, about 220 instructions a group a span): 7B q4_0 decode
 * 462.5 -> 485.5 tok/s (two calls; bench_gpu ops q8_0, unchanged, as the
 * control), q4_0 4096 x 11008 0.62 -> 0.68. Tried and dropped in run 14: spans of 64 q4_0 pairs
 * (spilling at two blocks a multiprocessor 442-450, one block 483 against
 * 484), a ring of slots a group filled by bulk copies with barriers (sm_90
 * cp.async.bulk: 464.6 with 4 slots, 469.4 with 2, 417.4 with 8, against
 * 485.5 in the same call), L2 bulk prefetches a few rows ahead (bench_gpu ops
 * q4_0 4096 x 11008 0.62 -> 0.50), two spans in flight a group (244 bytes
 * of spills at 64 registers even with this consume; not run), q8_0 at two blocks a multiprocessor
 * (104 bytes of spills), and rows cut between groups at span granularity
 * so no group has a pair more than another, the last group of a cut row
 * summing the parts through device counters (7B q4_0 432.9 against 460.2
 * with whole rows in the same build, q8_0 286.2 against 310.8, bf16 178.1
 * against 188.2: the extra state spilled and the fences cost more than the
 * balance gained). Tried and dropped before: a per-warp
 * cp.async ring of three shared-memory slots for every format (bf16 0.73,
 * q4_0 0.48, model decode 2-5% slower), a lane per block pair reading the
 * activations from global memory at a 64-byte stride (L1-bound: q4_0 0.48),
 * three blocks a multiprocessor for the float kernel (<= 80 registers: 7B
 * bf16 decode 172 against 176 tok/s), two quantized spans in flight per
 * group (7B q4_0 338-365 against 380), 256-thread blocks for the quantized
 * kernel (383 against 405).
 * Run 15 (RBEE_GPU_TRACE, gpu_trace.h: per-block timestamps of a decode
 * step): a block spent 1.1-3.1 us between its dependency wait and the end
 * of its activation quantization (7B q4_0: o 1.25, down 2.83, the norm-fused
 * qkv and gate_up 2.9-3.1 us). The norm weight is now copied into shared
 * memory before the wait (constant), two chunks' loads are in flight a
 * group, the norm's group sums are added as a tree: 1.1 / 2.7 / 2.2 us, but
 * the token only 1-3% faster (the first span's loads keep the memory busy
 * through most of it). Tried and dropped in run 15: staging whole
 * activation rows in shared memory first (with cp.async: 3.2-6.6 us, slower
 * than loads into registers; with loads: no better, and spills), and
 * blocks that split their rows x spans evenly among their groups with the
 * row sums added after a barrier (qkv 1 us faster, the others slower: the
 * epilogues, residual reads and rope's sincos all wait at the block's end;
 * 7B q4_0 426.9 against 483). Tried and dropped in run 16: 1-3 spans a
 * group copied ahead into shared memory with cp.async (after the wait,
 * before it, or behind the first activation loads), the norm weight staged
 * with asynchronous copies, the first span loaded after the activations,
 * three activation chunks a group at K = 11008 (spills), and rows shared by
 * 2-4 groups when a product has fewer rows than the device has groups: none
 * shortened the step (the quantization grew by about the added loads'
 * transfer time; 7B q4_0 432.6-486.0 against 479.6-488.9). Tried and
 * dropped in run 17: the product after decode attention copying its
 * groups' remaining spans ahead before its wait, while attention leaves the
 * memory idle (477.4-477.9 against 485.5-487.2: the copies delay
 * attention's own loads), and the qkv product's groups prefetching the
 * cache rows attention reads next into L2 as they end (474 against 477).
 * Run 18: the phases before and after the dependency wait are issue-bound
 * (32 warps a multiprocessor, each running the same scalar code), so a
 * block's row ranges are computed once, by its first NG lanes (7B q4_0
 * tg128 +3.0%, 1B +3.7%). Dropped in run 18: the norm weight with an L2
 * evict_last hint (no change), in registers instead of staged (spills at
 * 64 registers: 508-514 against 518-522), not staged at all (no change),
 * and 1024-thread q4_0 blocks (quantization 0.4-1 us shorter, but a block
 * starts only once both blocks ahead on its multiprocessor have ended: 515
 * against 522). Run 19: the fused norm's 1/rms scales the row sums, not
 * the block scales (7B q4_0 +1%, 1B +2.6%). Dropped in run 19: rope's
 * positions and the store's slots staged in shared memory and the residual
 * add as a global red.add (no dependent load in the epilogues: no change);
 * upper bounds: rope's sincos in float changes nothing, skipping the
 * activations' loads gains 7B nothing and 1B 4-5%. Dropped in run 20: the
 * products between two attentions chained in one persistent launch with a
 * grid barrier between them, each block issuing the next product's first
 * span before it waits (7B q4_0 419.8 against 525.3, 1B 1371 against 1807:
 * the barrier releases 1.3-1.7 us after the last block, programmatic
 * dependent launch 0.5 us, and the loop over run-time indexed products
 * spilled 146-170 bytes at 64 registers). Run 21: the quantized products
 * request their next spans into L2 before the dependency wait (p.l2pre,
 * ~5 MB a launch over its busy groups: 7B q4_0 tg128 535.3 -> 547.4, 1B
 * 1832.7 -> 1875-1892, 7B q8_0 331.1 -> 337.4; float weights measured
 * 195.5 -> 194.8 and stay without). Dropped in run 21: a ring of 2-4
 * shared-memory slots a group filled by cp.async instead of registers (7B
 * q4_0 511-514 against 529-530: more bytes in flight did not stream
 * faster), half of a block's groups quantizing while the other half
 * requested their second span into registers and shared memory before the
 * wait (the quantization grew 1.67 -> 2.11 us; 524 against 525.5), a
 * one-block kernel for the decode step's 68-byte upload of ids and
 * positions instead of a copy, and the ids check's flag written by the
 * kernels into mapped host memory instead of copied back each step (both
 * within the spread), and the activation chunks of the quantization's
 * second round (K = 11008) prefetched into L1 with its first (spilled 36
 * bytes; 7B q4_0 540.9 against 545.5 / 546.0, the down product's
 * quantization 2.47 -> 2.69 us). Upper bound: products that skip the quantization
 * (no activation loads, no arithmetic; wrong results) 7B 575.8, 1B 2046.8
 * against 533.3, 1823.9. Run 22 (the trace's multiprocessor ids): on each
 * multiprocessor the block that started second ends 1.1-2.5 us after the
 * first (it starts only when a block ahead of it there ends, then runs its
 * prologue against a busy memory), and the products end with those blocks.
 * Dropped in run 22: one block a multiprocessor, so the next launch's block
 * is resident early (16 warps stream slower: 7B q4_0 401 against 545),
 * prefetch.global.L2 of the span 1-4 ahead of the one loaded (517-531
 * against 540-542), fewer rows for the blocks past the first wave (a whole
 * row more for some groups, and the block index does not tell which block
 * is late: 463-489 against 538), 32-bit row-range arithmetic (no change),
 * q8_0 at two blocks a multiprocessor (7B +3.7%, 1B -2%), four 256-thread
 * q4_0 blocks a multiprocessor (454 against 545), and the norm weight read
 * with the activations or staged by cp.async behind them (no gain).
 * Dropped in run 23: 4 q4_0 (2 q8_0) spans in flight a group at 128
 * registers, at one 512-thread or two 256-thread blocks a multiprocessor
 * (1B down 8.04 -> 6.2-7.0 us, but the launches after it start only when it
 * ends: 1B q4_0 1620-1727 against 1870-1880), and L2 prefetch hints for the
 * next op's weights from decode attention or the output head (attention
 * 3.8 -> 6.2 us: its loads queue behind the prefetch). Dropped in run 25: a
 * tensor-core q4_0 product at M = 1 (blocks of 16-row tiles x 256-element K
 * slices split over their warps, each warp converting only its slices'
 * activations to f16 - no block barrier - and summing q4_0 blocks with
 * mma.m16n8k16): the prologue ~2 us a 7B layer shorter, but ~300
 * instructions a lane per 2304 bytes and every epilogue after the block's
 * barrier made the streaming slower (7B q4_0 472 against 544, 1B 1494
 * against 1868 tok/s). Dropped in run 27: thread block clusters (sm_90) of
 * 2 / 4 blocks that each quantize a share of the activations and copy the
 * rest from the others' shared memory (DSMEM, a cluster barrier; right
 * results), for K >= 8192 (7B 538.7 / 512.9, 1B 1832 / 1818 against 544.0
 * and 1907-1932 in the same call) or every product (449 / 1330): a cluster
 * starts only where all its blocks find room at once; and a group's whole
 * walk (1B down: a row of 4 spans) copied into shared memory with cp.async
 * before the wait (1B 1784 against 1873-1901 at 3 spans: the copies
 * congest the memory as the product ahead ends, and the release of the
 * dependency wait came 1.9 us after it instead of 0.6); and the down
 * product polling gate_up's output (sentinels written before gate_up's
 * trigger, no dependency wait: 7B 536.3-537.2 against 542.4, 1B 1848-1853
 * against 1900-1915; its blocks are resident only as gate_up's leave, and
 * the sentinels' fence delayed gate_up by ~1 us); and gate_up and down in
 * one launch on resident blocks, down polling (7B 530-533 against 544-548,
 * 1B 1738-1800 against 1971-1987; two copies of this code spill 100-332
 * bytes at 64 registers, and down's early loads lengthened gate_up's tail
 * by what they saved; the q8_0 pair, without spills, came out even).
 * Dropped in run 28: q4_0 rows repacked span by span (even blocks' quants,
 * odd blocks' quants, scales) in a copy of each constant matrix, so a lane
 * loads its pair straight into registers and a group keeps 2-4 spans in
 * flight with no slot (row totals in shared memory, the epilogues a lane a
 * row after the walk, the first span by cp.async before the wait: no
 * spills at 64 registers for 2-3 spans): 7B 553.4 against 548.1-550.3, 1B
 * 1951-1970 against 1967 (gate_up 0.4-1.5 us faster, the launches after it
 * slower by about as much; the deferred epilogues lengthened the qkv and
 * output-head tails). */
#ifndef RBEE_GPU_MATVEC_DIRECT_CUH
#define RBEE_GPU_MATVEC_DIRECT_CUH

#include "backends/gpu/gpu_pdl.h"
#include "backends/gpu/gpu_trace.h"
#include "backends/gpu/matvec_fmt.cuh"
#include "backends/gpu/rope_math.cuh"

namespace RB_GPU_NS {

#define MVD_THREADS 256   /* float weights */
#define MVD_Q_THREADS 512 /* quantized weights: fewer blocks read and quantize the activations */
#define MVD_MAX_M 4
#define MVD_HOST_ROWS 4096 /* row results (x M) a block stages for a destination in host memory (gt.host) */
#define MVD_NW_REGS 2 /* float4 of a staged norm weight a thread requests before the first span (K <= 8 NT) */
#define MVD_ROPE_FREQS 64 /* rope frequencies passed with the launch (head dims up to 128) */

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
    int rsplit;               /* rows >= rrows one at a time, not in pairs (RBEE_GPU_MV_RSPLIT=0: off) */
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
    int nwpre;                /* and requested ahead of the first span where it fits (RBEE_GPU_MV_NWPRE=0: after) */
    int l2pre;                /* quantized: spans past the first requested into L2 before the wait (RBEE_GPU_MV_L2PRE_KB) */
    unsigned long long *trace; /* RBEE_GPU_TRACE slot (gpu_trace.h) or NULL */
    int hoff;                 /* d.host: byte offset of the block's staged row results in shared memory */
    int hchunk;               /* d.host: a group writes its rows every hchunk (power of 2 <= 32; 0: the block at its end) */
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
    static constexpr int SPAN_BYTES = 2048, SPAN_EL = SPAN_BYTES / 16 * EPU;
    static constexpr int MINB1 = 1; /* three blocks (<= 80 registers) decoded slower */
    static constexpr bool QUANT = false, OFF8 = false;
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

/* q4_0 pair (9 words): block 0 = {d: bytes 0-1, qs: 2-17}, block 1 = {d:
 * 18-19, qs: 20-35}; element e: low nibble of qs[e] (e < 16), high nibble of
 * qs[e - 16]. QW quant words a block; block 1's scale in word SOFF. */
struct mvd_q4_0_fmt {
    static constexpr int PAIR_WORDS = 9, QW = 4, SOFF = 4;
    static constexpr int MINB1 = 2; /* blocks a multiprocessor at M = 1 (<= 64 registers) */
    static constexpr bool OFFSET8 = true; /* value = nibble - 8 */
};

/* q8_0 pair (17 words): block 0 = {d: bytes 0-1, qs: 2-33}, block 1 = {d:
 * 34-35, qs: 36-67}. */
struct mvd_q8_0_fmt {
    static constexpr int PAIR_WORDS = 17, QW = 8, SOFF = 8;
    static constexpr int MINB1 = 1; /* 64 registers would spill */
    static constexpr bool OFFSET8 = false;
};

template <class Q> struct mvd_quant {
    static constexpr int SPAN_PAIRS = 32, PW = Q::PAIR_WORDS, SPAN_BYTES = SPAN_PAIRS * PW * 4, MINB1 = Q::MINB1;
    static constexpr bool QUANT = true, OFF8 = Q::OFFSET8;
    __device__ static __forceinline__ int64_t row_bytes(int64_t K) { return K / 64 * (PW * 4); }
    __device__ static __forceinline__ int64_t span_bytes(int64_t K, int64_t span) {
        const int64_t rest = row_bytes(K) - span * SPAN_BYTES;
        return rest < SPAN_BYTES ? rest : SPAN_BYTES;
    }
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
    __device__ static __forceinline__ void consume(const uint32_t *W, int pair0, int lane, const mvd_x<MT> &X,
                                                   float (&acc)[MT]) {
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
 * memory (xq: M x K int8 in the pair-major order mvd_quant::consume reads,
 * xr: M x K / 32 records {d, -8 x the block's sum (OFF8: q4_0) or 0}), with
 * the values and scales k_mv_xquant computes; every thread of the block must
 * call. K % 256 == 0. A group takes two 256-element chunks at a time and
 * issues both chunks' loads before it uses either (a K = 11008 row is two
 * round trips a group, not three).
 * With the fused norm (p.pre == MVD_PRE_NORM, one slice) the block quantizes
 * x * w (w: nw, staged in shared memory or read from global memory) in the
 * same pass that sums x^2 (in float per lane and group, in double over the
 * groups: a conversion to double a value had run at a quarter of the rate)
 * and leaves the row's 1/rms k to the product: q8_0
 * quantization is scale-invariant, so the int8 values are those of
 * quantizing the normed row (x k) w, up to float rounding of the product,
 * and the row sums are multiplied by k (mvd_rms_k) instead of every block
 * scale. The scales stay f32 (the CPU's quantizer of the normed row rounds
 * them to f16: ~2^-12 relative a block). That takes the chain the scales
 * had waited on (a barrier, the groups' sums added by one group, a barrier,
 * the rescale of every scale, a barrier) off the path to the first
 * product: one barrier, as without the norm. No second pass over x. */
#define MVD_XQ_DEPTH 2 /* chunks a group loads before it quantizes them */
template <int NT, bool OFF8, int MT>
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
            mv_quant8<false>(v, lane, &qv, &rec, !norm);
            rec.y = OFF8 ? -8 * (mv_xs_lo(rec) + mv_xs_hi(rec)) : 0; /* the q4_0 offset's term, as dp4a's start */
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
    constexpr int UL = (F::SPAN_BYTES + 511) / 512; /* uint4 per lane per full span */
    constexpr int SLOT_U = F::SPAN_BYTES / 16;
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
    auto load_to = [&](uint4(&t)[UL], int64_t r, int64_t span) {
        const int nu = (int)(F::span_bytes(K, span) >> 4);
        const uint4 *src = (const uint4 *)(ab + r * p.a.nb[1] + span * F::SPAN_BYTES);
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
    const bool nwpre = F::QUANT && p.nwc && p.nwpre && K / 4 <= MVD_NW_REGS * NT;
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
            const int b = (int)(F::span_bytes(K, s0 + n - 1) + (int64_t)(n - 1) * F::SPAN_BYTES);
            const char *a0 = ab + (int64_t)wrow(slo + r) * p.a.nb[1] + (int64_t)s0 * F::SPAN_BYTES;
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
        mvd_quant_x<NT, F::OFF8, MT>(p, K, i2, i3, xqs, xrs, p.nwc ? xws : p.nw, part);
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
     * 16% slower (tg128 1880 -> 1575): each group's every p.hchunk rows as
     * it goes (mvd_host_flush), so the bus carries them while the product
     * runs - written all at the blocks' ends (p.hchunk 0), 1B's 513 KB of
     * logits had left the output head a tail of 6.7 us, 2.6 with chunks of
     * 8; the host side keeps host only where a block's rows fit
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
        if (p.d.host && p.hchunk) { /* every hchunk rows of the group: its staged results in one coalesced store */
            const int k = st - slo, mk = p.hchunk - 1;
            if ((k & mk) == mk || st + 1 == shv)
                mvd_host_flush<MT>(p.d.p, p.d.nb[1], p.M, held, st - (k & mk), (k & mk) + 1, mvd_rng[0].x);
        }
    };
    if constexpr (F::QUANT) {
        const uint32_t *W = (const uint32_t *)slot + lane * F::PW; /* this lane's pair in the slot */
        for (int st = slo; st < shv; st++) {
            const int64_t row = wrow(st);
#pragma unroll
            for (int m = 0; m < MT; m++) acc[m] = 0.0f;
            for (int span = 0; span < ns; span++) {
                const int rest = rowb - span * F::SPAN_BYTES, nu = (rest < F::SPAN_BYTES ? rest : F::SPAN_BYTES) >> 4;
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
                if (lane * (F::PW * 4) < rest) F::template consume<MT>(W, span * F::SPAN_PAIRS, lane, X, acc);
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
    if (p.d.host && !p.hchunk) { /* the block's rows, contiguous: whole stores across the bus */
        __syncthreads();
        const int r0 = mvd_rng[0].x, nr = mvd_rng[NG - 1].z - r0;
        for (int m = 0; m < p.M; m++)
            for (int i = threadIdx.x; i < nr; i += NT)
                *(float *)(p.d.p + m * p.d.nb[1] + (int64_t)(r0 + i) * 4) = held[m * (MVD_HOST_ROWS / MT) + i];
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
    return (size_t)(NT / 32) * F::SPAN_BYTES + (size_t)(M * mvd_xrow(K) + M * K / 32 * 8) + (nw ? (size_t)K * 4 : 0);
}

} // namespace RB_GPU_NS

#endif

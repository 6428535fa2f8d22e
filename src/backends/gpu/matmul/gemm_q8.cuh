/* Products of quantized weights (q4_0, q8_0, q4_K, q5_K, q6_K) with
 * Q8_MIN_M..Q8_MAX_M activation rows (many streams' decode, short prompts)
 * on int8 tensor cores, included by ops_matmul.cu (CUDA only; HIP keeps the
 * matrix-vector kernels and the GEMM path).
 *  - The activations are quantized first (k_gq_xquant) as the matrix-vector
 *    kernels and the CPU backend quantize them for the weight format (q8_0
 *    blocks for q4_0 / q8_0, q8_K super-blocks for the K-quants: mv_quant8),
 *    into int8 rows padded to a multiple of GQ_KS and one GQ_REC-byte record
 *    per row and step (gemm_q8_fmt.cuh), so the integer sums are the CPU's.
 *  - k_gq: a block takes BN = 16 x warps weight rows and up to GQ_TILE_M
 *    activation rows (NA8 tiles of 8; more rows: more blocks, which read the
 *    same weights from L2) and walks its share of K in steps of GQ_KS
 *    elements through a STAGES-deep cp.async pipeline: the raw weight bytes
 *    of a step (any 2-byte phase, 16-byte pieces as matvec.cuh copies them)
 *    and its activation rows and records, so the loads of the next steps are
 *    in flight while a step's tensor-core work runs (STAGES deep where the
 *    device's shared memory holds it, else fewer, else the GEMM path). Each warp decodes its
 *    16 weight rows from shared memory straight into mma A fragments and
 *    multiplies them with every activation tile (gemm_q8_fmt.cuh).
 *  - Split K: where the (weight tiles x activation tiles x slices) blocks
 *    would not fill the device, each takes 1/nsplit of the steps and writes
 *    f32 partial sums; k_gq_reduce adds them in split order (deterministic)
 *    into the destination. Otherwise blocks store directly, and q4_0 / q8_0
 *    results are bit-identical to the first kernel's (gemm_q8_plain.cuh).
 *  - Constant weights (model weights): the kernel is launched with
 *    programmatic dependent launch and copies its first steps' weights
 *    while the quantizer runs.
 * Widths (BN 64 up to 16 activation rows, else 128), stages and the split
 * rule are first choices to be measured (bench_gpu q8). */
#ifndef RBEE_GPU_GEMM_Q8_CUH
#define RBEE_GPU_GEMM_Q8_CUH

#if !defined(RBEE_GPU_HIP)

#include "backends/gpu/matmul/gemm_q8_fmt.cuh"
#include "backends/gpu/matmul/matvec.cuh"

namespace RB_GPU_NS {

#define Q8_MIN_M 9    /* fewer rows: the matrix-vector kernels */
#define Q8_MAX_M 64   /* more: the GEMM path (dequantized weights); measured for q4_0 with the first kernel */
#define GQ_MAX_M 256  /* the most rows a test or benchmark may send here (rb_gpu_tuning.gemm_q8_max_m) */
#define GQ_TILE_M 64  /* activation rows a block at most */
#define GQ_XQ_THREADS 256

static inline size_t gq_up256(size_t n) { return (n + 255) & ~(size_t)255; }

/* weight formats: their block and whether activations are q8_K (else q8_0) */
template <int DT> struct gq_fmt;
template <> struct gq_fmt<RB_Q4_0> {
    typedef fmt_q4_0 B;
    static constexpr bool KQ = false;
};
template <> struct gq_fmt<RB_Q8_0> {
    typedef fmt_q8_0 B;
    static constexpr bool KQ = false;
};
template <> struct gq_fmt<RB_Q4_K> {
    typedef fmt_q4_K B;
    static constexpr bool KQ = true;
};
template <> struct gq_fmt<RB_Q5_K> {
    typedef fmt_q5_K B;
    static constexpr bool KQ = true;
};
template <> struct gq_fmt<RB_Q6_K> {
    typedef fmt_q6_K B;
    static constexpr bool KQ = true;
};

/* block shape and shared memory of format DT with NA8 activation tiles */
template <int DT, int NA8> struct gq_cfg {
    typedef typename gq_fmt<DT>::B B;
    static constexpr int NWARP = NA8 <= 2 ? 4 : 8, THREADS = 32 * NWARP, BN = 16 * NWARP;
    static constexpr int BM16 = (8 * NA8 + 15) / 16 * 16; /* activation rows held (ldmatrix reads 16) */
    static constexpr int CB = GQ_KS / B::EL * B::BYTES;   /* bytes of a weight row a step */
    static constexpr int PPR = (CB + 30) / 16;            /* 16-byte pieces covering them at any 2-byte phase */
    static constexpr int SBR = (PPR | 1) * 16;            /* stage row stride: an odd number of pieces (banks) */
    static constexpr int W = BN * SBR, AQ = BM16 * GQ_LDA, AR = BM16 * GQ_REC, STAGE = W + AQ + AR;
    static constexpr int STAGES = 4 * STAGE <= 100 * 1024 ? 4 : 3; /* the depth wanted; fewer where it does not fit */
    static constexpr int MINB = NA8 <= 4 ? 2 : 1;
    static constexpr int APR = GQ_KS / 16 + GQ_REC / 16; /* 16-byte pieces of an activation row a step */
};

struct gq_args {
    gt a, d;          /* weights [K, N, ...], destination [N, M, ...] */
    const int8_t *xq; /* activations [slice][M][nk GQ_KS] int8 */
    const char *xr;   /* their records [slice][M][nk][GQ_REC] */
    float *part;      /* nsplit > 1: partial sums [split][slice][M][N] */
    int64_t M, r2, r3;
    int nk;     /* steps of K: ceil(K / GQ_KS) */
    int mt, bm; /* activation tiles and rows a tile (the last may hold fewer) */
    int nsplit;
    int stages; /* pipeline depth, 2..4 */
};

/* waits until at most n (0..2) committed copy groups are in flight */
__device__ __forceinline__ void gq_wait(int n) {
    if (n >= 2) tile_cp_wait<2>();
    else if (n == 1) tile_cp_wait<1>();
    else tile_cp_wait<0>();
}

/* One 16-byte piece of a weight row from global g into shared s: the whole
 * piece where it ends inside the row (row end re), else its part inside
 * with 2-byte loads (a 16-byte copy would read past the row, maybe past the
 * weights' allocation). */
__device__ __forceinline__ void gq_cp_piece(char *s, const char *g, const char *re) {
    if (g + 16 <= re) {
        tile_cp16(s, g);
    } else {
        for (int i = 0; g + i < re; i += 2) *(uint16_t *)(s + i) = *(const uint16_t *)(g + i);
    }
}

/* grid (weight tiles x activation tiles, splits, slices) */
template <int DT, int NA8>
__global__ void __launch_bounds__(gq_cfg<DT, NA8>::THREADS, gq_cfg<DT, NA8>::MINB) k_gq(const gq_args p) {
#if defined(RB_TILE_MMA)
    typedef gq_cfg<DT, NA8> C;
    const int S = p.stages;
    extern __shared__ int4 gq_dsmem[];
    char *sm = (char *)gq_dsmem;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int64_t K = p.a.ne[0], N = p.a.ne[1], M = p.M, anb1 = p.a.nb[1];
    const int mtile = (int)(blockIdx.x % (unsigned)p.mt);
    const int64_t n0 = (int64_t)(blockIdx.x / (unsigned)p.mt) * C::BN, m0 = (int64_t)mtile * p.bm;
    const int mr = (int)(M - m0 < p.bm ? M - m0 : p.bm); /* activation rows of this block (>= 1, <= 8 NA8) */
    const int64_t z = blockIdx.z, i2 = z % p.d.ne[2], i3 = z / p.d.ne[2];
    const char *ab = p.a.p + (i2 / p.r2) * p.a.nb[2] + (i3 / p.r3) * p.a.nb[3];
    const int64_t rowbytes = K / C::B::EL * C::B::BYTES, Kp = (int64_t)p.nk * GQ_KS;
    const int s0 = (int)((int64_t)blockIdx.y * p.nk / p.nsplit), ns = (int)((int64_t)(blockIdx.y + 1) * p.nk / p.nsplit) - s0;
    const int8_t *xq = p.xq + (z * M + m0) * Kp;
    const char *xr = p.xr + (z * M + m0) * p.nk * GQ_REC;

    /* activation rows past this block's: zero in every stage (never copied) */
    for (int e = tid; e < S * C::BM16 * C::APR; e += C::THREADS) {
        const int st = e / (C::BM16 * C::APR), q = e - st * (C::BM16 * C::APR), r = q / C::APR, k = q - r * C::APR;
        if (r < mr) continue;
        char *base = sm + st * C::STAGE + C::W;
        *(int4 *)(k < GQ_KS / 16 ? base + r * GQ_LDA + 16 * k : base + C::AQ + r * GQ_REC + 16 * (k - GQ_KS / 16)) =
            make_int4(0, 0, 0, 0);
    }
    /* step s's weight bytes into stage st: rows past N repeat row N - 1 */
    auto issue_w = [&](int s, int st) {
        char *ws = sm + st * C::STAGE;
        const int64_t cb0 = (int64_t)s * C::CB;
        const int L = (int)(rowbytes - cb0 < C::CB ? rowbytes - cb0 : C::CB);
        for (int q = tid; q < C::BN * C::PPR; q += C::THREADS) {
            const int r = q / C::PPR, k = q - r * C::PPR;
            const char *rp = ab + (n0 + r < N ? n0 + r : N - 1) * anb1, *src = rp + cb0;
            const char *g = (const char *)((uintptr_t)src & ~(uintptr_t)15) + 16 * k;
            if (g < src + L) gq_cp_piece(ws + r * C::SBR + 16 * k, g, rp + rowbytes);
        }
    };
    /* step s's activation rows and records into stage st */
    auto issue_a = [&](int s, int st) {
        char *as = sm + st * C::STAGE + C::W;
        for (int q = tid; q < mr * C::APR; q += C::THREADS) {
            const int r = q / C::APR, k = q - r * C::APR;
            if (k < GQ_KS / 16)
                tile_cp16(as + r * GQ_LDA + 16 * k, xq + r * Kp + (int64_t)s * GQ_KS + 16 * k);
            else
                tile_cp16(as + C::AQ + r * GQ_REC + 16 * (k - GQ_KS / 16),
                          xr + ((int64_t)r * p.nk + s) * GQ_REC + 16 * (k - GQ_KS / 16));
        }
    };
    /* the first steps' weights ahead of the dependency wait (launched with
     * programmatic dependent launch only for constant weights); the first
     * commit group holds them all */
    for (int i = 0; i < S - 1; i++)
        if (i < ns) issue_w(s0 + i, i);
    rb_grid_dep_wait();
    for (int i = 0; i < S - 1; i++) {
        if (i < ns) issue_a(s0 + i, i);
        tile_cp_commit();
    }

    /* this lane's weight rows g and g + 8 of the warp's 16 (clamped as copied) */
    const int g = lane >> 2, t = lane & 3, rla = w * 16 + g, rlb = rla + 8;
    const int phA = (int)((uintptr_t)(ab + (n0 + rla < N ? n0 + rla : N - 1) * anb1) & 15);
    const int phB = (int)((uintptr_t)(ab + (n0 + rlb < N ? n0 + rlb : N - 1) * anb1) & 15);
    float acc[NA8][4];
#pragma unroll
    for (int nt = 0; nt < NA8; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;

    for (int i = 0; i < ns; i++) {
        gq_wait(S - 2);
        __syncthreads(); /* step i landed for all; everyone is done with step i - 1's stage */
        const int in = i + S - 1;
        if (in < ns) {
            issue_w(s0 + in, in % S);
            issue_a(s0 + in, in % S);
        }
        tile_cp_commit(); /* one group a step, empty or not */
        const int s = s0 + i;
        const char *ws = sm + (i % S) * C::STAGE, *aq = ws + C::W, *ar = aq + C::AQ;
        const int cph = (int)(((int64_t)s * C::CB) & 15);
        const char *rA = ws + rla * C::SBR + ((phA + cph) & 15), *rB = ws + rlb * C::SBR + ((phB + cph) & 15);
        if constexpr (DT == RB_Q4_0 || DT == RB_Q8_0) {
            const int64_t left = (K - (int64_t)s * GQ_KS) / 32; /* blocks of this step inside K */
            gq_step_q80<DT == RB_Q4_0, NA8>(acc, rA, rB, aq, ar, lane, left < GQ_KS / 32 ? (int)left : GQ_KS / 32);
        } else if constexpr (DT == RB_Q6_K) {
            gq_step_q6k<NA8>(acc, rA, rB, aq, ar, lane);
        } else {
            gq_step_q4k<DT == RB_Q5_K, NA8>(acc, rA, rB, aq, ar, lane);
        }
    }

    /* acc[nt][0..1]: weight row n0 + rla, activation rows m0 + 8 nt + 2t + {0, 1}; [2..3]: row n0 + rlb */
    const int64_t na = n0 + rla, nb = n0 + rlb;
#pragma unroll
    for (int nt = 0; nt < NA8; nt++)
#pragma unroll
        for (int cc = 0; cc < 2; cc++) {
            const int mm = nt * 8 + 2 * t + cc;
            if (mm >= mr) continue;
            const int64_t m = m0 + mm;
            if (p.nsplit > 1) {
                float *pp = p.part + ((int64_t)blockIdx.y * (gridDim.z) + z) * M * N + m * N;
                if (na < N) pp[na] = acc[nt][cc];
                if (nb < N) pp[nb] = acc[nt][2 + cc];
            } else {
                char *db = p.d.p + i2 * p.d.nb[2] + i3 * p.d.nb[3] + m * p.d.nb[1];
                if (na < N) stf(p.d.dt, db + na * p.d.nb[0], acc[nt][cc]);
                if (nb < N) stf(p.d.dt, db + nb * p.d.nb[0], acc[nt][2 + cc]);
            }
        }
#endif
}

/* d = the sum of the nsplit partials, in split order */
__global__ void __launch_bounds__(256) k_gq_reduce(gt d, const float *part, int64_t M, int nsplit, int64_t slices) {
    const int64_t N = d.ne[0], MN = M * N, total = MN * slices;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t z = e / MN, r = e - z * MN, m = r / N, n = r - m * N;
        float s = 0.0f;
        for (int k = 0; k < nsplit; k++) s += part[((int64_t)k * slices + z) * MN + r];
        stf(d.dt, d.p + (z % d.ne[2]) * d.nb[2] + (z / d.ne[2]) * d.nb[3] + m * d.nb[1] + n * d.nb[0], s);
    }
}

/* The activations b [K, M, slices] (any f32/f16/bf16 view; VEC: contiguous
 * 16-byte aligned f32 rows) quantized as mv_quant8 does (KQ: q8_K, else
 * q8_0) into xq [slice][M][nk GQ_KS] (zeros past K) and the step records
 * xr (gemm_q8_fmt.cuh). A 32-lane group a 256-element step of a row. */
template <bool KQ, bool VEC>
__global__ void __launch_bounds__(GQ_XQ_THREADS) k_gq_xquant(gt b, int8_t *xq, char *xr, int nk) {
    rb_grid_dep_trigger(); /* the product after this may start copying constant weights */
    rb_grid_dep_wait();    /* launched with gpu_launch_pdl: the activations come from the kernel before */
    const int lane = threadIdx.x & 31;
    const int64_t K = b.ne[0], M = b.ne[1], Kp = (int64_t)nk * GQ_KS, total = (int64_t)nk * M * b.ne[2] * b.ne[3];
    for (int64_t gi = (int64_t)blockIdx.x * (GQ_XQ_THREADS / 32) + (threadIdx.x >> 5); gi < total;
         gi += (int64_t)gridDim.x * (GQ_XQ_THREADS / 32)) {
        const int64_t kb = gi % nk, row = gi / nk, m = row % M, sl = row / M;
        const int64_t i2 = sl % b.ne[2], i3 = sl / b.ne[2];
        const int64_t e = kb * GQ_KS + lane * 8;
        const bool valid = e < K; /* K % 32 == 0: whole 8-element pieces */
        const char *rp = b.p + m * b.nb[1] + i2 * b.nb[2] + i3 * b.nb[3];
        float v[8];
        if (VEC && valid) {
            const float4 f0 = *(const float4 *)(rp + e * 4), f1 = *(const float4 *)(rp + e * 4 + 16);
            v[0] = f0.x, v[1] = f0.y, v[2] = f0.z, v[3] = f0.w, v[4] = f1.x, v[5] = f1.y, v[6] = f1.z, v[7] = f1.w;
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = valid ? ldf(b.dt, rp + (e + i) * b.nb[0]) : 0.0f;
        }
        int2 qv, rec;
        mv_quant8<KQ>(v, lane, &qv, &rec);
        *(int2 *)(xq + row * Kp + e) = valid ? qv : make_int2(0, 0);
        int *r32 = (int *)(xr + (row * nk + kb) * GQ_REC);
        if (!KQ) {
            if ((lane & 3) == 0) r32[lane >> 2] = valid ? rec.x : 0; /* f32 scale of block lane / 4 */
        } else {
            /* on lanes 4j: block j's sum; lanes 8i write the pair of sub-blocks 2i, 2i + 1 */
            const int xs = (int)(int16_t)(rec.y & 0xffff) + (rec.y >> 16);
            const int nx = __shfl_down_sync(0xffffffffu, xs, 4);
            if ((lane & 7) == 0) r32[4 + (lane >> 3)] = (xs & 0xffff) | (nx << 16);
            if (lane == 0) {
                r32[0] = rec.x; /* the super-block's f32 scale */
                r32[1] = r32[2] = r32[3] = 0;
            }
        }
    }
}

/* Whether this build's GEMM kernels use the tensor cores on the device (a
 * build for architectures before sm_80 only compiles them empty; the
 * dispatch then keeps the other paths). Cached per device. */
static bool gq_usable(rb_backend *be) {
    const int dev = gb(be)->device;
    const void *fn = (const void *)k_gq_reduce; /* compiled for the same architectures as k_gq */
    int v = 0;
    if (mv_cache_get(dev, fn, 2, &v)) return v != 0;
    cudaFuncAttributes fa;
    v = cudaFuncGetAttributes(&fa, fn) == cudaSuccess && fa.ptxVersion >= 80 ? 1 : 0;
    (void)cudaGetLastError();
    mv_cache_put(dev, fn, 2, v);
    return v != 0;
}

/* K-splits for base blocks of occ per multiprocessor: 1 where they fill
 * three quarters of the device, else enough for one full wave, each split
 * at least 2 steps, at most 16 */
static int gq_splits(const gpu_backend *g, int64_t base, int occ, int nk) {
    int ns = 1;
    if (g->tune.gemm_q8_split > 0) {
        ns = g->tune.gemm_q8_split;
    } else {
        const int64_t target = (int64_t)g->n_sm * occ;
        if (base * 4 < target * 3) {
            int64_t want = (target + base - 1) / base;
            if (want > nk / 2) want = nk / 2;
            if (want > 16) want = 16;
            ns = (int)want;
        }
    }
    return ns < 1 ? 1 : ns > nk ? nk : ns;
}

template <int DT, int NA8>
static rb_status gq_run(rb_backend *be, const gt &dv, const gt &av, const gt &bv, const gt *bf, int64_t r2, int64_t r3,
                        bool a_const, int mt, int bm, bool *done) {
    typedef gq_cfg<DT, NA8> C;
    gpu_backend *g = gb(be);
    const int64_t K = av.ne[0], N = av.ne[1], M = bv.ne[1], slices = dv.ne[2] * dv.ne[3];
    const int nk = (int)((K + GQ_KS - 1) / GQ_KS);
    const int64_t nt = (N + C::BN - 1) / C::BN;
    if (nt * mt > 0x7fffffffLL) return RB_OK; /* not done: the GEMM path */
    /* the pipeline depth: C::STAGES where the device's shared memory a block
     * holds it (sm_90: always), else fewer, down to 2 (double buffering);
     * where not even that fits (sm_86 / sm_89 at the widest tiles) the
     * product takes the GEMM path */
    size_t lim = 0;
    rb_status s = mv_smem_limit(be, &lim);
    if (s != RB_OK) return s;
    int stages = C::STAGES;
    while (stages > 2 && (size_t)stages * C::STAGE + 1024 > lim) stages--;
    if ((size_t)stages * C::STAGE + 1024 > lim) return RB_OK;
    const size_t smem = (size_t)stages * C::STAGE;
    int occ = 1;
    s = mv_occupancy(be, (const void *)k_gq<DT, NA8>, C::THREADS, smem, &occ);
    if (s != RB_OK) return s;
    *done = true;
    const int nsplit = gq_splits(g, nt * mt * slices, occ, nk);
    /* scratch: quantized activations, their records, partial sums */
    const size_t qb = gq_up256((size_t)(slices * M) * (size_t)nk * GQ_KS), rb = gq_up256((size_t)(slices * M) * (size_t)nk * GQ_REC);
    const size_t pb = nsplit > 1 ? (size_t)nsplit * (size_t)(slices * M * N) * 4 : 0;
    void *sp = NULL;
    s = gpu_scratch(be, qb + rb + pb, &sp);
    if (s != RB_OK) return s;
    gq_args p;
    p.a = av;
    p.d = dv;
    p.xq = (const int8_t *)sp;
    p.xr = (const char *)sp + qb;
    p.part = nsplit > 1 ? (float *)((char *)sp + qb + rb) : NULL;
    p.M = M;
    p.r2 = r2;
    p.r3 = r3;
    p.nk = nk;
    p.mt = mt;
    p.bm = bm;
    p.nsplit = nsplit;
    p.stages = stages;
    /* the quantizer, then the product (programmatic dependent launch: it
     * copies constant weights while the quantizer runs) */
    const int64_t groups = slices * M * nk;
    int64_t blocks = (groups + GQ_XQ_THREADS / 32 - 1) / (GQ_XQ_THREADS / 32);
    if (blocks > 65535LL * 32) blocks = 65535LL * 32;
    constexpr bool KQ = gq_fmt<DT>::KQ;
    if (bf)
        (void)gpu_launch_pdl(g, true, k_gq_xquant<KQ, true>, dim3((unsigned)blocks), dim3(GQ_XQ_THREADS), 0, *bf,
                             (int8_t *)sp, (char *)sp + qb, nk);
    else
        (void)gpu_launch_pdl(g, true, k_gq_xquant<KQ, false>, dim3((unsigned)blocks), dim3(GQ_XQ_THREADS), 0, bv,
                             (int8_t *)sp, (char *)sp + qb, nk);
    s = gpu_check_launch(be, "matmul (activation quantization)");
    if (s != RB_OK) return s;
    (void)gpu_launch_pdl(g, a_const, k_gq<DT, NA8>, dim3((unsigned)(nt * mt), (unsigned)nsplit, (unsigned)slices),
                         dim3(C::THREADS), smem, p);
    s = gpu_check_launch(be, "matmul (quantized weights, int8 tensor-core tiles)");
    if (s != RB_OK || nsplit == 1) return s;
    const int64_t total = slices * M * N;
    k_gq_reduce<<<gpu_blocks(total, 256), 256, 0, g->stream>>>(dv, p.part, M, nsplit, slices);
    return gpu_check_launch(be, "matmul (split sums)");
}

template <int DT>
static rb_status gq_run_m(rb_backend *be, const gt &dv, const gt &av, const gt &bv, const gt *bf, int64_t r2,
                          int64_t r3, bool a_const, bool *done) {
    const int64_t M = bv.ne[1];
    const int mt = (int)((M + GQ_TILE_M - 1) / GQ_TILE_M), bm = (int)((M + mt - 1) / mt);
    if (bm <= 8) return gq_run<DT, 1>(be, dv, av, bv, bf, r2, r3, a_const, mt, bm, done);
    if (bm <= 16) return gq_run<DT, 2>(be, dv, av, bv, bf, r2, r3, a_const, mt, bm, done);
    if (bm <= 32) return gq_run<DT, 4>(be, dv, av, bv, bf, r2, r3, a_const, mt, bm, done);
    if (bm <= 48) return gq_run<DT, 6>(be, dv, av, bv, bf, r2, r3, a_const, mt, bm, done);
    return gq_run<DT, 8>(be, dv, av, bv, bf, r2, r3, a_const, mt, bm, done);
}

/* Whether gpu_gemm_q8 takes weights of dtype dt with rows of K elements. */
static bool gq_takes(rb_dtype dt, int64_t K) {
    if (dt == RB_Q4_0 || dt == RB_Q8_0) return K % 32 == 0;
    if (dt == RB_Q4_K || dt == RB_Q5_K || dt == RB_Q6_K) return K % 256 == 0;
    return false;
}

/* The product d = a b through the kernels above: a's dtype as gq_takes
 * says, rows as gpu_units_aligned says, M <= GQ_MAX_M activation rows of
 * any f32/f16/bf16 view bv (bf: the same as contiguous 16-byte aligned f32
 * rows, or NULL), any destination view; a_const: constant weights. *done =
 * false (nothing queued) where the tiles do not fit the device's shared
 * memory or the grid: the caller takes another path. */
static rb_status gpu_gemm_q8(rb_backend *be, const gt &dv, const gt &av, const gt &bv, const gt *bf, int64_t r2,
                             int64_t r3, bool a_const, bool *done) {
    *done = false;
    switch (av.dt) {
    case RB_Q4_0: return gq_run_m<RB_Q4_0>(be, dv, av, bv, bf, r2, r3, a_const, done);
    case RB_Q8_0: return gq_run_m<RB_Q8_0>(be, dv, av, bv, bf, r2, r3, a_const, done);
    case RB_Q4_K: return gq_run_m<RB_Q4_K>(be, dv, av, bv, bf, r2, r3, a_const, done);
    case RB_Q5_K: return gq_run_m<RB_Q5_K>(be, dv, av, bv, bf, r2, r3, a_const, done);
    case RB_Q6_K: return gq_run_m<RB_Q6_K>(be, dv, av, bv, bf, r2, r3, a_const, done);
    default: return RB_OK;
    }
}

} // namespace RB_GPU_NS

#endif /* !RBEE_GPU_HIP */

#endif

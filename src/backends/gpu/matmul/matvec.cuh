/* Matrix-vector products for decode and small batches (M = 1..32 activation
 * rows), included by ops_matmul.cu only. Decode is bound by how fast the
 * weights stream from memory, so every weight byte is read once for all M
 * rows and the kernels keep many bytes in flight:
 *   - a persistent grid (as many blocks as fit on the device, per batch
 *     slice); block b owns rows [N b / G, N (b + 1) / G), so all blocks stream
 *     the same number of bytes and finish together;
 *   - a block walks its rows in tiles of RT = R x (8 / mg) rows (balanced
 *     too) and each tile's rows in chunks of CHUNK_EL elements; chunk copies
 *     of a tile's rows (contiguous byte ranges, any 2-byte alignment) go into
 *     shared memory with 16-byte cp.async copies, STAGES deep (per format),
 *     so a block has STAGES - 1 chunks in flight while it computes one; all
 *     per-chunk bookkeeping is incremental 32-bit arithmetic (a first version
 *     with 64-bit divisions per chunk was bound by instruction issue);
 *   - 256 threads = 8 groups of 32 lanes (on wave64, half a wavefront each);
 *     mg groups of activation rows (M <= 8: 1, <= 16: 2, <= 32: 4) times
 *     8 / mg groups of R weight rows; a lane computes MT activation rows x R
 *     weight rows, so each activation load serves R rows and each decoded
 *     weight MT activation rows; lane sums meet in 32-lane shuffles.
 * Quantized weights use int8 activations (matvec_fmt.cuh says which and why):
 * a block quantizes all M rows itself into shared memory (while its first
 * chunks load) when they fit (1.25 M K bytes <= the fused budget), else a
 * small kernel quantizes them into device scratch first. Float weights take
 * the f32 activations as they are (16-byte aligned rows required; other
 * layouts use ops_matmul.cu's plain kernel).
 * No host synchronization and no allocation once scratch is large enough
 * (the occupancy per kernel is computed once and cached).
 * Weight rows per lane: 2 for M <= 8, 4 above (CUDA; HIP always 2). The
 * in-kernel activation quantization takes at most MV_FUSED_MAX bytes (an
 * H200 had the separate kernel ahead from M = 8 at K = 4096).
 * Decode itself (M <= 4, 16-byte aligned rows or q6_K's 2-byte aligned ones,
 * q4_0/q8_0/q4_K/q5_K/q6_K/f32/f16/bf16) takes the direct kernels of
 * matvec_direct.cuh first (quantized weights: where the activations are
 * contiguous f32 rows that fit a block's shared memory). */
#ifndef RBEE_GPU_MATVEC_CUH
#define RBEE_GPU_MATVEC_CUH

#include "backends/gpu/matmul/matvec_direct.cuh"
#include "backends/gpu/matmul/matvec_fmt.cuh"

#include <mutex>

namespace RB_GPU_NS {

#define MV_THREADS 256
#define MV_MAX_M 32
#define MV_FUSED_MAX 16384 /* bytes of in-kernel quantized activations (1.25 M K) */
#if !defined(RBEE_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define MV_ASYNC 1
#endif

/* n (2..16, even) bytes from a 16-byte aligned global address into shared
 * memory (16-byte aligned); bytes n..15 of the destination are undefined.
 * A partial piece (the end of a row) is copied with 2-byte loads, never as a
 * 16-byte cp.async with a smaller source size: compute-sanitizer counts that
 * as a 16-byte read past the end of the weights' allocation. */
__device__ __forceinline__ void mv_cp16(char *sdst, const char *gsrc, int n) {
#if defined(MV_ASYNC)
    if (n == 16) {
        const unsigned s = (unsigned)__cvta_generic_to_shared(sdst);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gsrc));
    } else {
        for (int i = 0; i < n; i += 2) *(uint16_t *)(sdst + i) = *(const uint16_t *)(gsrc + i);
    }
#else
    if (n == 16) {
        *(uint4 *)sdst = *(const uint4 *)gsrc;
    } else {
        for (int i = 0; i < n; i += 2) *(uint16_t *)(sdst + i) = *(const uint16_t *)(gsrc + i);
    }
#endif
}
__device__ __forceinline__ void mv_commit() {
#if defined(MV_ASYNC)
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> __device__ __forceinline__ void mv_wait() {
#if defined(MV_ASYNC)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* Separate activation quantization into device scratch: xq [slice][M][K],
 * xs [slice][M][K / 32]; b is any f32/f16/bf16 view (VEC: contiguous f32
 * rows, 16-byte aligned). */
template <bool KQ, bool VEC> __global__ void __launch_bounds__(MV_THREADS) k_mv_xquant(gt b, int8_t *xq, int2 *xs) {
    rb_grid_dep_trigger(); /* the matrix-vector kernel after this one may start loading weights */
    rb_grid_dep_wait();    /* launched with gpu_launch_pdl: the activations come from the kernel before */
    const int lane = threadIdx.x & 31;
    const int64_t K = b.ne[0], M = b.ne[1], KB = (K + 255) / 256, total = KB * M * b.ne[2] * b.ne[3];
    for (int64_t gi = (int64_t)blockIdx.x * (MV_THREADS / 32) + (threadIdx.x >> 5); gi < total;
         gi += (int64_t)gridDim.x * (MV_THREADS / 32)) {
        const int64_t kb = gi % KB, rest = gi / KB, m = rest % M, sl = rest / M;
        const int64_t i2 = sl % b.ne[2], i3 = sl / b.ne[2];
        const int64_t e = kb * 256 + lane * 8;
        const bool valid = e < K;
        const char *row = b.p + m * b.nb[1] + i2 * b.nb[2] + i3 * b.nb[3];
        float v[8];
        if (VEC && valid) {
            const float4 f0 = *(const float4 *)(row + e * 4), f1 = *(const float4 *)(row + e * 4 + 16);
            v[0] = f0.x, v[1] = f0.y, v[2] = f0.z, v[3] = f0.w, v[4] = f1.x, v[5] = f1.y, v[6] = f1.z, v[7] = f1.w;
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = valid ? ldf(b.dt, row + (e + i) * b.nb[0]) : 0.0f;
        }
        int2 qv, rec;
        mv_quant8<KQ>(v, lane, &qv, &rec);
        const int64_t o = (sl * M + m) * K + e;
        if (valid) {
            *(int2 *)(xq + o) = qv;
            if ((lane & 3) == 0) xs[o >> 5] = rec;
        }
    }
}

struct mv_args {
    gt d, a;                /* destination [N, M, B2, B3] and weights [K, N, ...] views */
    int64_t r2, r3;         /* broadcast of a's dims 2/3 over the activations' */
    const char *bp;         /* f32 activations (fused quantization, float weights) */
    int64_t bnb1, bnb2, bnb3; /* their byte strides */
    const int8_t *xq;       /* prequantized activations (separate kernel) */
    const int2 *xs;
    int M, nrg, G;          /* activation rows, weight-row groups per block, blocks per slice */
    int pdl;                /* host: constant weights, launched with programmatic dependent launch */
};

template <class F> struct mv_geom {
    static constexpr int CB = F::CHUNK_EL / F::BLK_EL * F::BLK_BYTES; /* chunk bytes of one row */
    static constexpr int PPR = (CB + 30) / 16;                         /* 16-byte pieces, any 2-byte phase */
    static constexpr int SBR = PPR * 16;                               /* stage bytes per row */
    static constexpr int WPL = F::CHUNK_EL / F::WU_EL / 32;            /* WUs per lane per chunk */
};

template <class F, int R, int MT, bool FUSED>
__global__ void __launch_bounds__(MV_THREADS, 2) k_mv(const mv_args p) {
    extern __shared__ int4 mv_dsmem[];
    char *sm = (char *)mv_dsmem;
    typedef mv_geom<F> Geo;
    constexpr int S = F::STAGES;
    const int tid = threadIdx.x, lane = tid & 31, grp = tid >> 5;
    const int nrg = p.nrg, rg = grp % nrg, mgi = grp / nrg, RT = nrg * R, M = p.M;
    const int K = (int)p.a.ne[0]; /* < 2^26 (host) */
    const int64_t N = p.a.ne[1];
    const int64_t sl = blockIdx.y, i2 = sl % p.d.ne[2], i3 = sl / p.d.ne[2];
    const int64_t anb1 = p.a.nb[1];
    const int64_t r0 = N * blockIdx.x / p.G;
    const int nb = (int)(N * (blockIdx.x + 1) / p.G - r0); /* <= 65535 (host) */
    if (nb <= 0) return;                                   /* whole block */
    const char *ab = p.a.p + (i2 / p.r2) * p.a.nb[2] + (i3 / p.r3) * p.a.nb[3] + r0 * anb1; /* first row */
    const int nt = (nb + RT - 1) / RT, NC = (K + F::CHUNK_EL - 1) / F::CHUNK_EL, nitems = nt * NC;
    const int stage_bytes = RT * Geo::SBR, rowbytes = K / F::BLK_EL * F::BLK_BYTES;
    const int last_len = rowbytes - (NC - 1) * Geo::CB; /* bytes of the last chunk */
    const int last_nwu = (K - (NC - 1) * F::CHUNK_EL) / F::WU_EL;
    /* tiles: rows [lo(t), lo(t + 1)) of the block's nb, balanced */
    auto tile_lo = [&](int t) { return (int)((unsigned)nb * (unsigned)t / (unsigned)nt); };

    /* issue cursor: next item to copy (tile it, chunk ic) into stage is */
    int it = 0, ic = 0, is = 0, ilo = 0, ihi = tile_lo(1);
    auto issue_next = [&]() {
        if (it < nt) {
            const int cb0 = ic * Geo::CB, L = ic == NC - 1 ? last_len : Geo::CB, tn = ihi - ilo;
            char *st = sm + is * stage_bytes;
            for (int q = tid; q < tn * Geo::PPR; q += MV_THREADS) {
                const int r = q / Geo::PPR, k = q - r * Geo::PPR;
                const char *src = ab + (int64_t)(ilo + r) * anb1 + cb0;
                const char *g = (const char *)((uintptr_t)src & ~(uintptr_t)15) + 16 * k;
                const int n = (int)(src + L - g);
                if (n > 0) mv_cp16(st + r * Geo::SBR + 16 * k, g, n < 16 ? n : 16);
            }
            if (++ic == NC) {
                ic = 0;
                it++;
                ilo = ihi;
                ihi = tile_lo(it + 1);
            }
        }
        mv_commit(); /* one group per call, empty or not */
        is = is == S - 1 ? 0 : is + 1;
    };
#pragma unroll
    for (int s = 0; s < S - 1; s++) issue_next();
    /* launched with programmatic dependent launch where the weights are
     * constant (p.pdl): the first stages' copies above are in flight while
     * the kernel ahead ends; activations and scratch only after this */
    rb_grid_dep_wait();

    mv_x X;
    X.xq = NULL;
    X.xs = NULL;
    X.xf = NULL;
    int xo[MT];
#pragma unroll
    for (int m = 0; m < MT; m++) {
        const int row = mgi * MT + m < M ? mgi * MT + m : M - 1;
        xo[m] = F::QUANT ? row * K : row * (int)(p.bnb1 / 4);
    }
    const char *bs = p.bp + i2 * p.bnb2 + i3 * p.bnb3;
    if constexpr (FUSED) {
        /* quantize all M rows into shared memory behind the stages, two
         * 256-element groups per warp at a time (loads first) */
        int8_t *xq = (int8_t *)(sm + S * stage_bytes);
        int2 *xs = (int2 *)(xq + M * K);
        const int KB = (K + 255) / 256, nq = M * KB;
        for (int q0 = grp; q0 < nq; q0 += 2 * (MV_THREADS / 32)) {
            float v[2][8];
            int off[2];
            bool valid[2];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int q = q0 + u * (MV_THREADS / 32), m = q / KB, e = (q - m * KB) * 256 + lane * 8;
                off[u] = m * K + e;
                valid[u] = q < nq && e < K;
                if (valid[u]) {
                    const float4 *x = (const float4 *)(bs + m * p.bnb1 + (int64_t)e * 4);
                    const float4 f0 = x[0], f1 = x[1];
                    v[u][0] = f0.x, v[u][1] = f0.y, v[u][2] = f0.z, v[u][3] = f0.w;
                    v[u][4] = f1.x, v[u][5] = f1.y, v[u][6] = f1.z, v[u][7] = f1.w;
                } else {
#pragma unroll
                    for (int i = 0; i < 8; i++) v[u][i] = 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < 2; u++) {
                if (q0 + u * (MV_THREADS / 32) >= nq) break; /* uniform in the group */
                int2 qv, rec;
                mv_quant8<F::KQ>(v[u], lane, &qv, &rec);
                if (valid[u]) {
                    *(int2 *)(xq + off[u]) = qv;
                    if ((lane & 3) == 0) xs[off[u] >> 5] = rec;
                }
            }
        }
        X.xq = xq;
        X.xs = xs;
    } else if constexpr (F::QUANT) {
        X.xq = p.xq + sl * M * K;
        X.xs = p.xs + ((sl * M * K) >> 5);
    } else {
        X.xf = (const float *)bs;
    }

    float acc[R][MT];
#pragma unroll
    for (int j = 0; j < R; j++)
#pragma unroll
        for (int m = 0; m < MT; m++) acc[j][m] = 0.0f;

    /* compute cursor: tile ct (rows [clo, chi)), chunk cc, stage cs; this
     * thread's rows rg * R + j (clamped into the tile) and their phases */
    int ct = 0, cc = 0, cs = 0, clo = 0, chi = tile_lo(1);
    int roff[R], rph[R];
    auto tile_rows = [&]() {
#pragma unroll
        for (int j = 0; j < R; j++) {
            const int rr = rg * R + j < chi - clo ? rg * R + j : chi - clo - 1; /* past the tile: computed, not stored */
            roff[j] = rr * Geo::SBR;
            rph[j] = (int)((uintptr_t)(ab + (int64_t)(clo + rr) * anb1) & 15);
        }
    };
    tile_rows();
    for (int i = 0; i < nitems; i++) {
        mv_wait<S - 2>();
        __syncthreads(); /* item i landed for all; everyone is done with item i - 1's stage */
        issue_next();
        const char *st = sm + cs * stage_bytes;
        const char *rp[R];
#pragma unroll
        for (int j = 0; j < R; j++) rp[j] = st + roff[j] + ((rph[j] + cc * Geo::CB) & 15);
        const int e0 = cc * F::CHUNK_EL, nwu = cc == NC - 1 ? last_nwu : F::CHUNK_EL / F::WU_EL;
#pragma unroll
        for (int u = 0; u < Geo::WPL; u++) {
            const int w = lane + 32 * u;
            if (w < nwu) F::template dot<R, MT>(rp, w, e0, X, xo, acc);
        }
        cs = cs == S - 1 ? 0 : cs + 1;
        if (++cc == NC) { /* tile done: sum over the 32 lanes, store, next tile */
#pragma unroll
            for (int j = 0; j < R; j++)
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    float v = acc[j][m];
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1) v += MV_XOR32(v, o);
                    acc[j][m] = 0.0f;
                    const int mm = mgi * MT + m, row = clo + rg * R + j;
                    if (lane == ((j * MT + m) & 31) && row < chi && mm < M)
                        stf(p.d.dt, p.d.p + (r0 + row) * p.d.nb[0] + mm * p.d.nb[1] + i2 * p.d.nb[2] + i3 * p.d.nb[3],
                            v);
                }
            cc = 0;
            ct++;
            clo = chi;
            chi = tile_lo(ct + 1);
            tile_rows();
        }
    }
}

/* ---------------- host side ---------------- */

/* dynamic shared memory of a launch */
template <class F> static size_t mv_smem_bytes(int RT, bool fused, int64_t M, int64_t K) {
    size_t s = (size_t)F::STAGES * (size_t)RT * (size_t)mv_geom<F>::SBR;
    if (fused) s += (size_t)(M * K) + (size_t)(M * K / 32) * 8;
    return s;
}

#if !defined(RBEE_GPU_HIP)
/* per-device and per-kernel facts, looked up once and cached */
struct mv_cache_entry {
    int dev;
    const void *fn; /* NULL: the device's shared-memory limit in occ */
    size_t smem;
    int occ;
};
static std::mutex mv_mu;
static mv_cache_entry mv_cache[512];
static int mv_n_cache = 0;

static bool mv_cache_get(int dev, const void *fn, size_t smem, int *v) {
    std::lock_guard<std::mutex> lk(mv_mu);
    for (int i = 0; i < mv_n_cache; i++)
        if (mv_cache[i].dev == dev && mv_cache[i].fn == fn && mv_cache[i].smem == smem) {
            *v = mv_cache[i].occ;
            return true;
        }
    return false;
}
static void mv_cache_put(int dev, const void *fn, size_t smem, int v) {
    std::lock_guard<std::mutex> lk(mv_mu);
    if (mv_n_cache < 512) mv_cache[mv_n_cache++] = mv_cache_entry{dev, fn, smem, v};
}
#endif

/* Largest dynamic shared memory per block the kernels may ask for. */
static rb_status mv_smem_limit(rb_backend *be, size_t *lim) {
#if defined(RBEE_GPU_HIP)
    (void)be;
    *lim = 48 * 1024;
    return RB_OK;
#else
    const int dev = gb(be)->device;
    int v = 0;
    if (!mv_cache_get(dev, NULL, 0, &v)) {
        cudaError_t e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        if (e != cudaSuccess) return gpu_fail(be, e, "matmul (matrix-vector): shared memory limit");
        mv_cache_put(dev, NULL, 0, v);
    }
    *lim = (size_t)v;
    return RB_OK;
#endif
}

/* Blocks of kernel fn per multiprocessor at smem bytes. The first use of fn
 * on a device allows it the device's whole shared memory per block (less its
 * static shared memory). */
static rb_status mv_occupancy(rb_backend *be, const void *fn, int threads, size_t smem, int *occ) {
#if defined(RBEE_GPU_HIP)
    (void)be;
    (void)fn;
    (void)threads;
    int n = smem ? (int)(65536 / smem) : 4;
    *occ = n < 1 ? 1 : n > 4 ? 4 : n;
    return RB_OK;
#else
    const int dev = gb(be)->device;
    if (mv_cache_get(dev, fn, smem, occ)) return RB_OK;
    int v = 0;
    if (!mv_cache_get(dev, fn, 1, &v)) { /* smem 1: "attribute set" marker */
        size_t lim = 0;
        rb_status s = mv_smem_limit(be, &lim);
        if (s != RB_OK) return s;
        cudaFuncAttributes fa;
        cudaError_t e = cudaFuncGetAttributes(&fa, fn);
        if (e != cudaSuccess) return gpu_fail(be, e, "matmul (matrix-vector): kernel attributes");
        /* the dynamic part: what the kernel's static shared memory leaves */
        const size_t dyn = lim > fa.sharedSizeBytes ? lim - fa.sharedSizeBytes : 0;
        e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn);
        if (e != cudaSuccess) return gpu_fail(be, e, "matmul (matrix-vector): kernel setup");
        mv_cache_put(dev, fn, 1, 1);
    }
    int n = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, threads, smem);
    if (e != cudaSuccess) return gpu_fail(be, e, "matmul (matrix-vector): occupancy");
    if (n < 1)
        return rb_backend_fail(be, RB_E_BACKEND, "matmul (matrix-vector): %zu bytes of shared memory do not fit", smem);
    mv_cache_put(dev, fn, smem, n);
    *occ = n;
    return RB_OK;
#endif
}

template <class F, int R, int MT, bool FUSED>
static rb_status mv_launch(rb_backend *be, mv_args p, int64_t slices, size_t smem) {
    gpu_backend *g = gb(be);
    const void *fn = (const void *)k_mv<F, R, MT, FUSED>;
    int occ = 1;
    rb_status s = mv_occupancy(be, fn, MV_THREADS, smem, &occ);
    if (s != RB_OK) return s;
    const int64_t N = p.a.ne[1];
    int64_t G = (int64_t)g->n_sm * occ / slices;
    if (G < (N + 65534) / 65535) G = (N + 65534) / 65535; /* <= 65535 rows a block (32-bit tile math) */
    if (G < 1) G = 1;
    if (G > N) G = N;
    if (G > 65535LL * 32)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_matmul: %lld weight rows are too many for %s", (long long)N,
                               be->name);
    p.G = (int)G;
    (void)gpu_launch_pdl(g, p.pdl != 0, k_mv<F, R, MT, FUSED>, dim3((unsigned)G, (unsigned)slices), dim3(MV_THREADS),
                         smem, p);
    return gpu_check_launch(be, "matmul (matrix-vector)");
}

template <class F, int R, bool FUSED> static rb_status mv_pick_mt(rb_backend *be, const mv_args &p, int64_t sl, size_t sm) {
    const int per = (p.M + (MV_THREADS / 32) / p.nrg - 1) / ((MV_THREADS / 32) / p.nrg); /* rows per m-group */
    if (per <= 1) return mv_launch<F, R, 1, FUSED>(be, p, sl, sm);
    if (per <= 2) return mv_launch<F, R, 2, FUSED>(be, p, sl, sm);
    if (per <= 4) return mv_launch<F, R, 4, FUSED>(be, p, sl, sm);
    return mv_launch<F, R, 8, FUSED>(be, p, sl, sm);
}

#if !defined(RBEE_GPU_HIP)
/* rows per lane (CUDA): 2 for M <= 8 and 4 above (H200, K x N = 4096 x
 * 11008: R = 2 was ahead at M = 1 and 8 for most types, R = 4 at M = 32,
 * where it reuses each activation load for more weight rows) */
static int mv_rows_per_lane(int64_t M) { return M <= 8 ? 2 : 4; }
#endif

/* R = 4 where chosen and it fits the device's shared memory (CUDA), else 2 */
template <class F, bool FUSED> static rb_status mv_pick_r(rb_backend *be, mv_args &p, int64_t sl) {
    size_t lim = 0;
    rb_status s = mv_smem_limit(be, &lim);
    if (s != RB_OK) return s;
    const int64_t M = p.M, K = p.a.ne[0];
#if !defined(RBEE_GPU_HIP)
    const size_t s4 = mv_smem_bytes<F>(p.nrg * 4, FUSED, M, K);
    if (mv_rows_per_lane(M) == 4 && s4 <= lim) return mv_pick_mt<F, 4, FUSED>(be, p, sl, s4);
#endif
    const size_t s2 = mv_smem_bytes<F>(p.nrg * 2, FUSED, M, K);
    if (s2 > lim)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_matmul (matrix-vector): %zu bytes of shared memory needed, %s has %zu",
                               s2, be->name, lim);
    return mv_pick_mt<F, 2, FUSED>(be, p, sl, s2);
}

/* Matrix product through the kernels above for M <= MV_MAX_M. Quantized
 * weights: any 2-byte aligned rows (4 for q4_K), activations any f32/f16/
 * bf16 view (bf: the same as contiguous, 16-byte aligned f32 rows, or NULL).
 * Float weights: *done = false unless rows are 16-byte aligned with K a
 * multiple of the 16-byte element count and bf is given, and for f32
 * weights with M <= 2. */
/* Quantizes the activations (bf: contiguous aligned f32 rows, else any view
 * bv) into device scratch: xq [slice][M][K] int8 and one record per 32. */
template <bool KQ>
static rb_status mv_quant_acts(rb_backend *be, const gt &bv, const gt *bf, int64_t slices, int64_t M, int64_t K,
                               const int8_t **xq_out, const int2 **xs_out) {
    const size_t qbytes = (size_t)(slices * M * K), need = ((qbytes + 255) & ~(size_t)255) + qbytes / 32 * 8;
    void *sp = NULL;
    rb_status s = gpu_scratch(be, need, &sp);
    if (s != RB_OK) return s;
    int8_t *xq = (int8_t *)sp;
    int2 *xs = (int2 *)((char *)sp + ((qbytes + 255) & ~(size_t)255));
    const int64_t groups = slices * M * ((K + 255) / 256);
    int64_t blocks = (groups + MV_THREADS / 32 - 1) / (MV_THREADS / 32);
    if (blocks > 65535LL * 32) blocks = 65535LL * 32;
    const unsigned nbk = (unsigned)blocks;
    /* with programmatic dependent launch: the product after it starts its
     * weight copies while this runs (k_mv waits for it before reading) */
    gpu_backend *g = gb(be);
    if (bf) (void)gpu_launch_pdl(g, true, k_mv_xquant<KQ, true>, dim3(nbk), dim3(MV_THREADS), 0, *bf, xq, xs);
    else (void)gpu_launch_pdl(g, true, k_mv_xquant<KQ, false>, dim3(nbk), dim3(MV_THREADS), 0, bv, xq, xs);
    *xq_out = xq;
    *xs_out = xs;
    return gpu_check_launch(be, "matmul (activation quantization)");
}

/* ---- direct kernels (matvec_direct.cuh) ---- */

/* Weight rows k_mvd's format F reads: 16-byte aligned, or for F::PHASED
 * (q6_K) 2-byte aligned with every 16-byte piece around a row inside the
 * weights' buffer (pieces: the caller's gpu_pieces_inside); fewer than 2^30
 * of them (k_mvd walks rows in 32-bit steps). */
template <class F> static bool mvd_rows_ok(const gt &av, bool pieces) {
    const int a = F::PHASED ? 2 : 16;
    if (F::PHASED && !pieces) return false;
    return ((uintptr_t)av.p % a) == 0 && av.nb[1] % a == 0 && av.nb[2] % a == 0 && av.nb[3] % a == 0 &&
           av.ne[1] < ((int64_t)1 << 30);
}

/* blocks per slice: the device's resident blocks, at most one group per row */
static rb_status mvd_grid(rb_backend *be, const void *fn, int threads, size_t smem, int64_t N, int64_t slices,
                          unsigned *G) {
    int occ = 1;
    rb_status s = mv_occupancy(be, fn, threads, smem, &occ);
    if (s != RB_OK) return s;
    int64_t g = (int64_t)gb(be)->n_sm * occ / slices;
    const int64_t gmax = (N + threads / 32 - 1) / (threads / 32);
    if (g > gmax) g = gmax;
    if (g > 0x7fffffffLL) g = 0x7fffffffLL;
    *G = (unsigned)(g < 1 ? 1 : g);
    return RB_OK;
}

/* Whether the quantized kernel's slots, the M x K activations it quantizes
 * and (nw) the staged norm weight fit a block's shared memory, with room for
 * its static part. */
template <class F, int NT>
static rb_status mvd_quant_fits(rb_backend *be, int64_t M, int64_t K, bool nw, bool *fits) {
    size_t lim = 0;
    rb_status s = mv_smem_limit(be, &lim);
    *fits = s == RB_OK && mvd_smem<F, NT>(M, K, nw) + 1024 <= lim;
    return s;
}

/* pdl: the weights are constant, so the kernel may start streaming them
 * before the kernel ahead of it has finished (gpu_pdl.h) */
template <class F, int MT, int NT, int MINB = 1>
static rb_status mvd_launch(rb_backend *be, const mvd_args &p, int64_t slices, bool pdl) {
    const void *fn = (const void *)k_mvd<F, MT, NT, MINB>;
    mvd_args q = p;
    /* a constant norm weight is staged in shared memory where it fits */
    q.nwc = F::QUANT && q.nwc && q.nw && q.pre == MVD_PRE_NORM;
    if (q.nwc) {
        bool fits = false;
        rb_status s = mvd_quant_fits<F, NT>(be, p.M, p.a.ne[0], true, &fits);
        if (s != RB_OK) return s;
        q.nwc = fits;
    }
    size_t smem = mvd_smem<F, NT>(p.M, p.a.ne[0], q.nwc);
    if (q.d.host) { /* a destination in host memory: room to stage a block's row results */
        size_t lim = 0;
        const size_t off = (smem + 15) & ~(size_t)15;
        if (slices == 1 && mv_smem_limit(be, &lim) == RB_OK && off + MVD_HOST_ROWS * 4 + 1024 <= lim) {
            q.hoff = (int)off;
            smem = off + MVD_HOST_ROWS * 4;
        } else {
            q.d.host = 0; /* a store a row: right, but slow across the bus */
        }
    }
    unsigned G = 1;
    const int64_t units = p.gluo || p.rope ? p.a.ne[1] / 2 : p.a.ne[1]; /* what one group takes at a time */
    rb_status s = mvd_grid(be, fn, NT, smem, units, slices, &G);
    if (s != RB_OK) return s;
    if (q.d.host && !mvd_host_rows<MT>(q, G, NT / 32)) q.d.host = 0;
    /* quantized weights: spans past each group's first requested into L2
     * ahead of the dependency wait, about MVD_L2PRE_KB over the launch's
     * busy groups (float weights: none, measured no gain) */
    if (F::QUANT) {
        const int64_t groups = (int64_t)G * (NT / 32), busy = units < groups ? units : groups;
        const int64_t sp = ((int64_t)MVD_L2PRE_KB * 1024 + busy * F::SPAN_BYTES / 2) / (busy * F::SPAN_BYTES);
        q.l2pre = (int)(sp > 8 ? 8 : sp);
    }
    q.trace = gpu_trace_slot(gb(be), GPU_TRACE_PRODUCT, p.a.dt,
                             (p.pre ? 1 : 0) | (p.acc ? 2 : 0) | (p.gluo ? 4 : 0) | (p.rope ? 8 : 0) | (p.sp ? 16 : 0),
                             p.a.ne[1], p.a.ne[0], G * (unsigned)slices);
    (void)gpu_launch_pdl(gb(be), pdl, k_mvd<F, MT, NT, MINB>, dim3(G, (unsigned)slices), dim3(NT), smem, q);
    return gpu_check_launch(be, "matmul (matrix-vector, direct)");
}

template <class F, int NT>
static rb_status mvd_launch_m(rb_backend *be, const mvd_args &p, int64_t slices, bool pdl) {
    if (p.M == 1) return mvd_launch<F, 1, NT, F::MINB1>(be, p, slices, pdl);
    if (p.M == 2) return mvd_launch<F, 2, NT>(be, p, slices, pdl);
    return mvd_launch<typename F::M34, 4, NT>(be, p, slices, pdl);
}

/* The arguments common to every format: destination, weights, broadcast,
 * activation rows. */
static mvd_args mvd_base(const gt &dv, const gt &av, int64_t r2, int64_t r3, int64_t M) {
    mvd_args p = {};
    p.d = dv;
    p.a = av;
    p.r2 = r2;
    p.r3 = r3;
    p.M = (int)M;
    return p;
}

/* Quantized weights (F: q4_0, q8_0, q4_K, q5_K, q6_K) through k_mvd: K % 256 ==
 * 0, rows as mvd_rows_ok says, M <= MVD_MAX_M, contiguous aligned f32
 * activations (bf) that fit beside the slots in shared memory (each block
 * quantizes them there); *done = false otherwise (the staged kernel takes
 * the product). */
template <class F>
static rb_status mvd_run_q(rb_backend *be, const gt &dv, const gt &av, const gt &bv, const gt *bf, int64_t r2,
                           int64_t r3, bool pdl, bool pieces, bool *done) {
    *done = false;
    const int64_t K = av.ne[0], M = bv.ne[1], slices = dv.ne[2] * dv.ne[3];
    if (!bf || M > MVD_MAX_M || K % 256 != 0 || K >= ((int64_t)1 << 26) || !mvd_rows_ok<F>(av, pieces))
        return RB_OK;
    bool fits = false;
    rb_status s = mvd_quant_fits<F, MVD_Q_THREADS>(be, M, K, false, &fits);
    if (s != RB_OK || !fits) return s;
    *done = true;
    mvd_args p = mvd_base(dv, av, r2, r3, M);
    p.bp = bf->p;
    p.bnb1 = bf->nb[1];
    p.bnb2 = bf->nb[2];
    p.bnb3 = bf->nb[3];
    return mvd_launch_m<F, MVD_Q_THREADS>(be, p, slices, pdl);
}

/* float weights through k_mvd: contiguous 16-byte aligned rows, K a
 * multiple of the elements per 16 bytes, contiguous aligned f32 activations
 * (bf), M <= MVD_MAX_M; *done = false otherwise. */
template <int DT>
static rb_status mvd_run_f(rb_backend *be, const gt &dv, const gt &av, const gt *bf, int64_t r2, int64_t r3,
                           bool pdl, bool *done) {
    *done = false;
    const int64_t es = DT == RB_F32 ? 4 : 2, K = av.ne[0], slices = dv.ne[2] * dv.ne[3];
    if (!bf || bf->ne[1] > MVD_MAX_M || av.nb[0] != es || K % (16 / es) != 0 ||
        !mvd_rows_ok<mvd_float<DT>>(av, false))
        return RB_OK;
    *done = true;
    mvd_args p = mvd_base(dv, av, r2, r3, bf->ne[1]);
    p.bp = bf->p;
    p.bnb1 = bf->nb[1];
    p.bnb2 = bf->nb[2];
    p.bnb3 = bf->nb[3];
    return mvd_launch_m<mvd_float<DT>, MVD_THREADS>(be, p, slices, pdl);
}

/* rb_matmul_fused through the direct kernels: one slice, M <= MVD_MAX_M,
 * contiguous 16-byte aligned f32 activations (bf), weight rows as
 * mvd_rows_ok says (pieces); quantized weights (q4_0, q8_0, q4_K, q5_K, q6_K: K % 256 == 0, the only
 * ones a fused norm, p.pre, applies to) need their activations to fit the
 * block's shared memory. p holds pre, acc,
 * gluo, act, the rope fields, nw, eps. *done = false where this does not apply (nothing was
 * queued). */
template <class F, int NT>
static rb_status mvd_run_fused(rb_backend *be, const gt &dv, const gt &av, const gt &bf, mvd_args p, bool pdl,
                               bool pieces, bool *done) {
    *done = false;
    const int64_t K = av.ne[0], M = bf.ne[1];
    if (M > MVD_MAX_M || K >= ((int64_t)1 << 26) || !mvd_rows_ok<F>(av, pieces)) return RB_OK;
    if constexpr (F::QUANT) {
        if (K % 256 != 0) return RB_OK;
        bool fits = false;
        rb_status s = mvd_quant_fits<F, NT>(be, M, K, false, &fits);
        if (s != RB_OK || !fits) return s;
    } else {
        if (p.pre != MVD_PRE_NONE || av.nb[0] != (F::EPU == 4 ? 4 : 2) || K % F::EPU != 0) return RB_OK;
    }
    *done = true;
    const mvd_args base = mvd_base(dv, av, 1, 1, M);
    p.d = base.d;
    p.a = base.a;
    p.r2 = p.r3 = 1;
    p.M = (int)M;
    p.bp = bf.p;
    p.bnb1 = bf.nb[1];
    p.bnb2 = bf.nb[2];
    p.bnb3 = bf.nb[3];
    return mvd_launch_m<F, NT>(be, p, 1, pdl);
}

/* Dispatch of mvd_run_fused on the weight dtype (pieces: as gpu_matvec). */
static rb_status gpu_matvec_fused(rb_backend *be, const gt &dv, const gt &av, const gt &bf, const mvd_args &p,
                                  bool a_const, bool pieces, bool *done) {
    *done = false;
    const bool c = a_const, q = pieces;
    switch (av.dt) {
    case RB_Q4_0: return mvd_run_fused<mvd_quant<mvd_q4_0_fmt>, MVD_Q_THREADS>(be, dv, av, bf, p, c, q, done);
    case RB_Q8_0: return mvd_run_fused<mvd_quant<mvd_q8_0_fmt>, MVD_Q_THREADS>(be, dv, av, bf, p, c, q, done);
    case RB_Q4_K: return mvd_run_fused<mvd_q4_K, MVD_Q_THREADS>(be, dv, av, bf, p, c, q, done);
    case RB_Q5_K: return mvd_run_fused<mvd_q5_K, MVD_Q_THREADS>(be, dv, av, bf, p, c, q, done);
    case RB_Q6_K: return mvd_run_fused<mvd_q6_K, MVD_Q_THREADS>(be, dv, av, bf, p, c, q, done);
    case RB_F32: return mvd_run_fused<mvd_float<RB_F32>, MVD_THREADS>(be, dv, av, bf, p, c, q, done);
    case RB_F16: return mvd_run_fused<mvd_float<RB_F16>, MVD_THREADS>(be, dv, av, bf, p, c, q, done);
    case RB_BF16: return mvd_run_fused<mvd_float<RB_BF16>, MVD_THREADS>(be, dv, av, bf, p, c, q, done);
    default: return RB_OK;
    }
}

template <class F>
static rb_status mv_run(rb_backend *be, const gt &dv, const gt &av, const gt &bv, const gt *bf, int64_t r2,
                        int64_t r3, bool a_const, bool *done) {
    *done = false;
    const int64_t K = av.ne[0], M = bv.ne[1], slices = dv.ne[2] * dv.ne[3];
    if (K >= ((int64_t)1 << 26) || M > MV_MAX_M) return RB_OK;
    mv_args p;
    p.d = dv;
    p.a = av;
    p.r2 = r2;
    p.r3 = r3;
    p.bp = bf ? bf->p : NULL;
    p.bnb1 = bf ? bf->nb[1] : 0;
    p.bnb2 = bf ? bf->nb[2] : 0;
    p.bnb3 = bf ? bf->nb[3] : 0;
    p.xq = NULL;
    p.xs = NULL;
    p.M = (int)M;
    const int mg = M <= 8 ? 1 : M <= 16 ? 2 : 4;
    p.nrg = (MV_THREADS / 32) / mg;
    p.G = 1;
    p.pdl = a_const;
    if constexpr (!F::QUANT) {
        /* f32 weights at M <= 2: the plain one-warp-per-row kernel streamed
         * faster on an H200 (0.80-0.93 of the copy bandwidth against 0.57-0.80) */
        if (F::BLK_BYTES == 4 && M <= 2) return RB_OK;
        if (!bf || K % F::WU_EL != 0 || av.nb[0] != F::BLK_BYTES || ((uintptr_t)av.p & 15) || av.nb[1] % 16 ||
            av.nb[2] % 16 || av.nb[3] % 16 || bf->nb[1] / 4 * M >= ((int64_t)1 << 31))
            return RB_OK;
        *done = true;
        return mv_pick_r<F, false>(be, p, slices);
    } else {
        *done = true;
        if (bf && mg == 1 && (M * K / 4) * 5 <= MV_FUSED_MAX)
            return mv_pick_r<F, true>(be, p, slices);
        /* separate quantization into scratch */
        rb_status s = mv_quant_acts<F::KQ>(be, bv, bf, slices, M, K, &p.xq, &p.xs);
        if (s != RB_OK) return s;
        return mv_pick_r<F, false>(be, p, slices);
    }
}

/* Dispatch on the weight dtype; *done = false where these kernels do not
 * apply. pieces: the 16-byte aligned pieces around every row of the weights
 * lie inside their buffer (k_mvd's q6_K reads rows that are only 2-byte
 * aligned that way). */
static rb_status gpu_matvec(rb_backend *be, const gt &dv, const gt &av, const gt &bv, const gt *bf, int64_t r2,
                            int64_t r3, bool a_const, bool pieces, bool *done) {
    rb_status s = RB_OK;
    const bool c = a_const, q = pieces;
    switch (av.dt) { /* the direct kernels where they apply */
    case RB_Q4_0: s = mvd_run_q<mvd_quant<mvd_q4_0_fmt>>(be, dv, av, bv, bf, r2, r3, c, q, done); break;
    case RB_Q8_0: s = mvd_run_q<mvd_quant<mvd_q8_0_fmt>>(be, dv, av, bv, bf, r2, r3, c, q, done); break;
    case RB_Q4_K: s = mvd_run_q<mvd_q4_K>(be, dv, av, bv, bf, r2, r3, c, q, done); break;
    case RB_Q5_K: s = mvd_run_q<mvd_q5_K>(be, dv, av, bv, bf, r2, r3, c, q, done); break;
    case RB_Q6_K: s = mvd_run_q<mvd_q6_K>(be, dv, av, bv, bf, r2, r3, c, q, done); break;
    case RB_F32: s = mvd_run_f<RB_F32>(be, dv, av, bf, r2, r3, a_const, done); break;
    case RB_F16: s = mvd_run_f<RB_F16>(be, dv, av, bf, r2, r3, a_const, done); break;
    case RB_BF16: s = mvd_run_f<RB_BF16>(be, dv, av, bf, r2, r3, a_const, done); break;
    default: *done = false; break;
    }
    if (s != RB_OK || *done) return s;
    switch (av.dt) {
    case RB_Q4_0: return mv_run<mvf_q4_0>(be, dv, av, bv, bf, r2, r3, a_const, done);
    case RB_Q8_0: return mv_run<mvf_q8_0>(be, dv, av, bv, bf, r2, r3, a_const, done);
    case RB_Q4_K: return mv_run<mvf_q4_K>(be, dv, av, bv, bf, r2, r3, a_const, done);
    case RB_Q5_K: return mv_run<mvf_q5_K>(be, dv, av, bv, bf, r2, r3, a_const, done);
    case RB_Q6_K: return mv_run<mvf_q6_K>(be, dv, av, bv, bf, r2, r3, a_const, done);
    case RB_F32: return mv_run<mvf_float<RB_F32>>(be, dv, av, bv, bf, r2, r3, a_const, done);
    case RB_F16: return mv_run<mvf_float<RB_F16>>(be, dv, av, bv, bf, r2, r3, a_const, done);
    case RB_BF16: return mv_run<mvf_float<RB_BF16>>(be, dv, av, bv, bf, r2, r3, a_const, done);
    default: *done = false; return RB_OK;
    }
}

} // namespace RB_GPU_NS

#endif

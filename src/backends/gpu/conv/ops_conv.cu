/* GPU 2-D convolution (rb_conv2d) as an implicit GEMM: out[co][pixel] =
 * bias[co] + sum_k w[co][k] x_patch[k][pixel] with k = (ci, ky, kx) in the
 * order of a torch weight row and the pixel running over (n, oy, ox). The
 * patch matrix is never built in memory: each block gathers its tile of it
 * from x straight into shared memory (zeros where the window leaves the
 * padded image), so memory stays that of x, w and dst. Two kernels:
 *  - k_conv_tc (CUDA sm_80+): f16 or bf16 x and w of one type, contiguous
 *    w, groups 1: 128 output channels x 128 pixels a block, 32 k a step,
 *    mma.sync m16n8k16 with f32 accumulation, the next tile loaded into
 *    registers while the tensor cores work on the current one.
 *  - k_conv_simt (everything else: f32 anywhere - exact f32 products and
 *    sums, no TF32 -, mixed dtypes, groups, strided w, and 16-bit on HIP,
 *    whose Debian 5.2 has no matrix intrinsics we can use): 64 x 64 a block,
 *    16 k a step, a thread 4 x 4 outputs with FMA.
 * When the output tiles cannot fill the GPU (the deep levels of a UNet:
 * few pixels, K up to 11520) the k range is split over blockIdx.z; the
 * splits write f32 partial sums to scratch and k_conv_reduce adds them in
 * split order (deterministic) with the bias. x and dst take any strides and
 * f32/f16/bf16; the accumulation is f32 and dst is rounded once. On CUDA
 * with cuDNN loaded at run time, the cases cuDNN takes go there instead
 * (conv_cudnn.cu; rb_gpu_tuning.own_conv keeps them here). */
#include "backends/gpu/mma_tile.cuh"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

namespace RB_GPU_NS {

#define CV_THREADS 256
#define CS_BM 64 /* simt: output channels a block */
#define CS_BN 64 /* simt: pixels a block */
#define CS_BK 16
#define CT_BM 128 /* tensor cores: output channels a block */
#define CT_BN 128 /* tensor cores: pixels a block */
#define CT_BK 32
#define CT_LDW (CT_BK + 8)  /* shared row strides in 16-bit elements (16-byte aligned rows, */
#define CT_LDX (CT_BN + 8)  /* ldmatrix without bank conflicts) */
#define CV_SPLIT_MAX 32

struct conv_args {
    int W, H, Wo, Ho, KW, KH;
    int sx, sy, px, py, dx, dy;
    int cin_g, cout_g, Cout; /* input / output channels a group, all output channels */
    int K;                   /* cin_g KH KW */
    int64_t npix;            /* N Ho Wo */
    int nkt, ktps, nsplit;   /* k tiles, k tiles a split, splits */
    int wvec;                /* tensor cores: w rows load 16 bytes at a time (K % 8 == 0, aligned) */
    float *part;             /* nsplit > 1: [split][Cout][npix] partial sums */
};

/* k = (ci, ky, kx) of a weight row; KS = 1 or 3: square kernels of that
 * size (divisions by constants), 0: any */
template <int KS>
__device__ __forceinline__ void conv_k3(const conv_args &a, int k, int &ci, int &ky, int &kx) {
    if (KS == 1) {
        ci = k;
        ky = kx = 0;
    } else if (KS == 3) {
        ci = k / 9;
        const int r = k - ci * 9;
        ky = r / 3;
        kx = r - ky * 3;
    } else {
        const int kk = a.KH * a.KW;
        ci = k / kk;
        const int r = k - ci * kk;
        ky = r / a.KW;
        kx = r - ky * a.KW;
    }
}

/* The gather of one output pixel: image base (channel 0 of its group) and
 * the window's top-left input coordinates; ok = false past the last pixel. */
struct conv_pix {
    const char *xb;
    int iy0, ix0;
    bool ok;
};

__device__ __forceinline__ conv_pix conv_pixel(const conv_args &a, const gt &x, int64_t pix, int64_t ci0) {
    conv_pix q;
    q.ok = pix < a.npix;
    const int64_t p = q.ok ? pix : 0;
    const int ox = (int)(p % a.Wo);
    const int64_t t = p / a.Wo;
    const int oy = (int)(t % a.Ho);
    const int64_t n = t / a.Ho;
    q.iy0 = oy * a.sy - a.py;
    q.ix0 = ox * a.sx - a.px;
    q.xb = x.p + n * x.nb[3] + ci0 * x.nb[2];
    return q;
}

/* byte offset of an output pixel in dst (without the channel) */
__device__ __forceinline__ int64_t conv_dst_off(const conv_args &a, const gt &d, int64_t pix) {
    const int ox = (int)(pix % a.Wo);
    const int64_t t = pix / a.Wo;
    const int oy = (int)(t % a.Ho);
    return ox * d.nb[0] + oy * d.nb[1] + (t / a.Ho) * d.nb[3];
}

/* The patch rows k, k + 2, k + 4, ... of one pixel, walked without a
 * division per row (the tensor-core kernel's gather: one division a tile):
 * next() steps k by 2, ptr() is the element or nullptr in the padding. */
template <int KS> struct conv_walk {
    int k, ci, r; /* r = ky KW + kx */
    __device__ __forceinline__ void start(const conv_args &a, int k0) {
        k = k0;
        const int kk = KS == 1 ? 1 : KS == 3 ? 9 : a.KH * a.KW;
        ci = k / kk;
        r = k - ci * kk;
    }
    __device__ __forceinline__ void next(const conv_args &a) {
        const int kk = KS == 1 ? 1 : KS == 3 ? 9 : a.KH * a.KW;
        k += 2;
        r += 2;
        while (r >= kk) { /* at most twice (kk = 1) */
            r -= kk;
            ci++;
        }
    }
    __device__ __forceinline__ const char *ptr(const conv_args &a, const gt &x, const conv_pix &q) const {
        if (!q.ok || k >= a.K) return nullptr;
        int ky, kx;
        if (KS == 1) {
            ky = kx = 0;
        } else if (KS == 3) {
            ky = r >= 6 ? 2 : r >= 3 ? 1 : 0;
            kx = r - 3 * ky;
        } else {
            ky = r / a.KW;
            kx = r - ky * a.KW;
        }
        const int iy = q.iy0 + ky * a.dy, ix = q.ix0 + kx * a.dx;
        if ((unsigned)iy >= (unsigned)a.H || (unsigned)ix >= (unsigned)a.W) return nullptr;
        return q.xb + ci * x.nb[2] + (int64_t)iy * x.nb[1] + (int64_t)ix * x.nb[0];
    }
};

/* the input element of patch row k for pixel q, or nullptr in the padding */
template <int KS>
__device__ __forceinline__ const char *conv_src(const conv_args &a, const gt &x, const conv_pix &q, int k) {
    if (!q.ok || k >= a.K) return nullptr;
    int ci, ky, kx;
    conv_k3<KS>(a, k, ci, ky, kx);
    const int iy = q.iy0 + ky * a.dy, ix = q.ix0 + kx * a.dx;
    if ((unsigned)iy >= (unsigned)a.H || (unsigned)ix >= (unsigned)a.W) return nullptr;
    return q.xb + ci * x.nb[2] + (int64_t)iy * x.nb[1] + (int64_t)ix * x.nb[0];
}

/* one result: a partial sum (split) or bias + sum rounded into dst */
__device__ __forceinline__ void conv_put(const conv_args &a, const gt &d, const gt &bias, int co, int64_t pix,
                                         int64_t doff, float v) {
    if (a.nsplit > 1) {
        a.part[((int64_t)blockIdx.z * a.Cout + co) * a.npix + pix] = v;
        return;
    }
    if (bias.p) v += ldf(bias.dt, bias.p + co * bias.nb[0]);
    stf(d.dt, d.p + doff + co * d.nb[2], v);
}

/* grid (pixel tiles, groups x channel tiles of a group, splits) */
template <int KS>
__global__ void __launch_bounds__(CV_THREADS) k_conv_simt(gt d, gt x, gt w, gt bias, conv_args a) {
    __shared__ __align__(16) float sW[CS_BK][CS_BM + 4];
    __shared__ __align__(16) float sX[CS_BK][CS_BN + 4];
    const int tid = threadIdx.x;
    const int64_t p0 = (int64_t)blockIdx.x * CS_BN;
    const int ctiles = (a.cout_g + CS_BM - 1) / CS_BM;
    const int g = blockIdx.y / ctiles;
    const int co0 = g * a.cout_g + (blockIdx.y % ctiles) * CS_BM, co_end = (g + 1) * a.cout_g;
    /* gather: this thread's pixel column and its k rows kr0 + 4 i */
    const int pc = tid % CS_BN, kr0 = tid / CS_BN;
    const conv_pix q = conv_pixel(a, x, p0 + pc, (int64_t)g * a.cin_g);
    /* weights: this thread's k column and its channel rows wr0 + 16 i */
    const int wk = tid % CS_BK, wr0 = tid / CS_BK;
    /* products: 4 channels x 4 pixels */
    const int tx = tid % 16, ty = tid / 16;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    const int kt0 = blockIdx.z * a.ktps, kt1 = min(kt0 + a.ktps, a.nkt);
    for (int kt = kt0; kt < kt1; kt++) {
        const int k0 = kt * CS_BK;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = wr0 + 16 * i, co = co0 + r, k = k0 + wk;
            float v = 0.0f;
            if (co < co_end && k < a.K) {
                int ci, ky, kx;
                conv_k3<KS>(a, k, ci, ky, kx);
                v = ldf(w.dt, w.p + kx * w.nb[0] + ky * w.nb[1] + ci * w.nb[2] + (int64_t)co * w.nb[3]);
            }
            sW[wk][r] = v;
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int kr = kr0 + 4 * i;
            const char *src = conv_src<KS>(a, x, q, k0 + kr);
            sX[kr][pc] = src ? ldf(x.dt, src) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < CS_BK; kk++) {
            const float4 av = *(const float4 *)&sW[kk][ty * 4], bv = *(const float4 *)&sX[kk][tx * 4];
            const float am[4] = {av.x, av.y, av.z, av.w}, bm[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(am[i], bm[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int64_t pix = p0 + tx * 4 + j;
        if (pix >= a.npix) continue;
        const int64_t doff = conv_dst_off(a, d, pix);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int co = co0 + ty * 4 + i;
            if (co < co_end) conv_put(a, d, bias, co, pix, doff, acc[i][j]);
        }
    }
}

/* grid (pixel tiles, channel tiles, splits); x and w 16-bit of one type (BF:
 * bf16), w contiguous [Cout][K], groups 1. Two blocks a multiprocessor cap
 * the registers at 128 (a few bytes spill); one block a multiprocessor
 * (~166 registers) measured 48.2 ms against 39.9 ms for an SD1.5 step. */
template <bool BF, int KS>
__global__ void __launch_bounds__(CV_THREADS, 2) k_conv_tc(gt d, gt x, gt w, gt bias, conv_args a) {
#if !defined(RB_TILE_MMA)
#if !defined(RBEE_GPU_HIP) && defined(__CUDA_ARCH__)
    __trap(); /* the host launches this on sm_80+ only */
#endif
#else
    __shared__ __align__(16) uint16_t sW[2][CT_BM][CT_LDW];
    __shared__ __align__(16) uint16_t sX[2][CT_BK][CT_LDX];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp & 1, wn = warp >> 1; /* the warp's 64 channels x 32 pixels */
    const int64_t p0 = (int64_t)blockIdx.x * CT_BN;
    const int co0 = blockIdx.y * CT_BM;
    /* gather: pixel column pc, k rows kr0 + 2 i */
    const int pc = tid % CT_BN, kr0 = tid / CT_BN;
    const conv_pix q = conv_pixel(a, x, p0 + pc, 0);
    uint16_t xv[CT_BK / 2];
    uint4 wv[2];          /* wvec: 16-byte pieces e = tid + 256 i: row e / 4, piece e % 4 */
    uint16_t ws[CT_BK / 2]; /* else: elements e = tid + 256 i: row e / 32, column e % 32 */
    const uint16_t *wp = (const uint16_t *)w.p;

    auto load = [&](int kt) {
        const int k0 = kt * CT_BK;
        conv_walk<KS> kw;
        kw.start(a, k0 + kr0);
#pragma unroll
        for (int i = 0; i < CT_BK / 2; i++) {
            const char *src = kw.ptr(a, x, q);
            xv[i] = src ? *(const uint16_t *)src : (uint16_t)0;
            kw.next(a);
        }
        if (a.wvec) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int e = tid + CV_THREADS * i, co = co0 + (e >> 2), k = k0 + (e & 3) * 8;
                wv[i] = co < a.Cout && k < a.K ? *(const uint4 *)(wp + (int64_t)co * a.K + k) : make_uint4(0, 0, 0, 0);
            }
        } else {
#pragma unroll
            for (int i = 0; i < CT_BK / 2; i++) {
                const int e = tid + CV_THREADS * i, co = co0 + (e >> 5), k = k0 + (e & 31);
                ws[i] = co < a.Cout && k < a.K ? wp[(int64_t)co * a.K + k] : (uint16_t)0;
            }
        }
    };
    auto store = [&](int st) {
#pragma unroll
        for (int i = 0; i < CT_BK / 2; i++) sX[st][kr0 + 2 * i][pc] = xv[i];
        if (a.wvec) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int e = tid + CV_THREADS * i;
                *(uint4 *)&sW[st][e >> 2][(e & 3) * 8] = wv[i];
            }
        } else {
#pragma unroll
            for (int i = 0; i < CT_BK / 2; i++) {
                const int e = tid + CV_THREADS * i;
                sW[st][e >> 5][e & 31] = ws[i];
            }
        }
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    const int mi = lane >> 3, r8 = lane & 7;
    const int kt0 = blockIdx.z * a.ktps, kt1 = min(kt0 + a.ktps, a.nkt);
    if (kt0 < kt1) {
        load(kt0);
        store(0);
    }
    __syncthreads();
    for (int kt = kt0; kt < kt1; kt++) {
        const int st = (kt - kt0) & 1;
        if (kt + 1 < kt1) load(kt + 1); /* in flight while the tensor cores work */
#pragma unroll
        for (int k16 = 0; k16 < CT_BK / 16; k16++) {
            uint32_t af[4][4];
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
                ldsm_x4(af[mt], &sW[st][wm * 64 + mt * 16 + (mi & 1) * 8 + r8][k16 * 16 + (mi >> 1) * 8]);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t b[4];
                ldsm_x4_t(b, &sX[st][k16 * 16 + (mi & 1) * 8 + r8][wn * 32 + np * 16 + (mi >> 1) * 8]);
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    mma16816<BF>(acc[mt][2 * np], af[mt], b[0], b[1]);
                    mma16816<BF>(acc[mt][2 * np + 1], af[mt], b[2], b[3]);
                }
            }
        }
        if (kt + 1 < kt1) store(st ^ 1); /* that stage was last read before the previous barrier */
        __syncthreads();
    }
    /* lane holds rows (channels) g, g + 8 and columns (pixels) 2 t4, 2 t4 + 1 of each 16 x 8 tile */
    const int g8 = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int64_t pix = p0 + wn * 32 + nt * 8 + 2 * t4 + e;
            if (pix >= a.npix) continue;
            const int64_t doff = conv_dst_off(a, d, pix);
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int co = co0 + wm * 64 + mt * 16 + g8 + 8 * h;
                    if (co < a.Cout) conv_put(a, d, bias, co, pix, doff, acc[mt][nt][2 * h + e]);
                }
        }
#endif
}

/* dst[co][pixel] = bias[co] + the splits' partial sums, in split order */
__global__ void k_conv_reduce(gt d, gt bias, conv_args a) {
    const int64_t n = (int64_t)a.Cout * a.npix;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int co = (int)(i / a.npix);
        const int64_t pix = i % a.npix;
        float v = 0.0f;
        for (int s = 0; s < a.nsplit; s++) v += a.part[(int64_t)s * n + i];
        if (bias.p) v += ldf(bias.dt, bias.p + co * bias.nb[0]);
        stf(d.dt, d.p + conv_dst_off(a, d, pix) + co * d.nb[2], v);
    }
}

/* the device has mma.sync (CUDA sm_80+) */
static bool conv_tc_device(gpu_backend *g) {
#if defined(RBEE_GPU_HIP)
    (void)g;
    return false;
#else
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, g->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return major >= 8;
#endif
}

/* w contiguous as [Cout][K] rows of its dtype */
static bool conv_w_rows(const rb_tensor *w) {
    const size_t es = rb_dtype_row_size(w->dtype, 1);
    return w->nb[0] == es && w->nb[1] == es * (size_t)w->ne[0] && w->nb[2] == w->nb[1] * (size_t)w->ne[1] &&
           w->nb[3] == w->nb[2] * (size_t)w->ne[2];
}

/* Splits k when the output tiles leave multiprocessors idle: about two
 * blocks a multiprocessor, at least 4 k tiles a split. */
static int conv_nsplit(int64_t blocks, int nkt, int n_sm) {
    if (blocks >= n_sm || nkt < 8) return 1;
    int64_t s = (2 * (int64_t)n_sm + blocks - 1) / blocks;
    if (s > nkt / 4) s = nkt / 4;
    if (s > CV_SPLIT_MAX) s = CV_SPLIT_MAX;
    return s < 1 ? 1 : (int)s;
}

template <int KS>
static void conv_launch(gpu_backend *g, bool tc, bool bf, dim3 grid, const gt &d, const gt &x, const gt &w,
                        const gt &b, const conv_args &a) {
    if (!tc) k_conv_simt<KS><<<grid, CV_THREADS, 0, g->stream>>>(d, x, w, b, a);
    else if (bf) k_conv_tc<true, KS><<<grid, CV_THREADS, 0, g->stream>>>(d, x, w, b, a);
    else k_conv_tc<false, KS><<<grid, CV_THREADS, 0, g->stream>>>(d, x, w, b, a);
}

rb_status gpu_conv2d(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w, const rb_tensor *bias,
                     const int stride[2], const int pad[2], const int dilation[2], int groups) {
    gpu_backend *g = gb(be);
    if (rb_tensor_nelements(dst) == 0) return RB_OK;
#if defined(RBEE_CUDNN)
    bool done = false; /* cuDNN where loaded and it takes the case (conv_cudnn.cu) */
    rb_status ds = gpu_cudnn_conv2d(be, dst, x, w, bias, stride, pad, dilation, groups, &done);
    if (ds != RB_OK || done) return ds;
#endif
    const int64_t K = w->ne[0] * w->ne[1] * w->ne[2], npix = dst->ne[0] * dst->ne[1] * dst->ne[3];
    if (K > INT_MAX / 2 || x->ne[0] > INT_MAX / 2 || x->ne[1] > INT_MAX / 2 || dst->ne[2] > INT_MAX / 2 ||
        x->ne[2] > INT_MAX / 2 || npix > ((int64_t)1 << 40))
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_conv2d: sizes beyond the GPU kernel's index range on %s",
                               be->name);
    conv_args a = {};
    a.W = (int)x->ne[0];
    a.H = (int)x->ne[1];
    a.Wo = (int)dst->ne[0];
    a.Ho = (int)dst->ne[1];
    a.KW = (int)w->ne[0];
    a.KH = (int)w->ne[1];
    a.sx = stride[0];
    a.sy = stride[1];
    a.px = pad[0];
    a.py = pad[1];
    a.dx = dilation[0];
    a.dy = dilation[1];
    a.cin_g = (int)w->ne[2];
    a.Cout = (int)dst->ne[2];
    a.cout_g = a.Cout / groups;
    a.K = (int)K;
    a.npix = npix;
    const gt dv = gview(dst), xv = gview(x), wv = gview(w);
    gt bv = {};
    if (bias) bv = gview(bias);
    const bool half = (x->dtype == RB_F16 || x->dtype == RB_BF16) && w->dtype == x->dtype;
    const bool tc = half && groups == 1 && conv_w_rows(w) && conv_tc_device(g);
    a.wvec = tc && K % 8 == 0 && ((uintptr_t)wv.p & 15) == 0;
    const int bk = tc ? CT_BK : CS_BK, bm = tc ? CT_BM : CS_BM, bn = tc ? CT_BN : CS_BN;
    const int64_t gx = (npix + bn - 1) / bn, gy = (int64_t)groups * ((a.cout_g + bm - 1) / bm);
    if (gx > 0x7fffffffLL || gy > 65535)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_conv2d: %lld pixels x %d channels exceed the GPU grid",
                               (long long)npix, a.Cout);
    a.nkt = (int)((K + bk - 1) / bk);
    a.nsplit = conv_nsplit(gx * gy, a.nkt, g->n_sm);
    a.ktps = (a.nkt + a.nsplit - 1) / a.nsplit;
    a.nsplit = (a.nkt + a.ktps - 1) / a.ktps; /* every split has k tiles */
    if (a.nsplit > 1) {
        void *sp = NULL;
        rb_status s = gpu_scratch(be, (size_t)a.nsplit * (size_t)a.Cout * (size_t)npix * sizeof(float), &sp);
        if (s != RB_OK) return s;
        a.part = (float *)sp;
    }
    const dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)a.nsplit);
    const bool bf = x->dtype == RB_BF16;
    if (a.KW == 3 && a.KH == 3) conv_launch<3>(g, tc, bf, grid, dv, xv, wv, bv, a);
    else if (a.KW == 1 && a.KH == 1) conv_launch<1>(g, tc, bf, grid, dv, xv, wv, bv, a);
    else conv_launch<0>(g, tc, bf, grid, dv, xv, wv, bv, a);
    rb_status s = gpu_check_launch(be, tc ? "conv2d (tensor cores)" : "conv2d");
    if (s == RB_OK) g->conv_own++;
    if (s != RB_OK || a.nsplit == 1) return s;
    k_conv_reduce<<<gpu_blocks((int64_t)a.Cout * npix, 256), 256, 0, g->stream>>>(dv, bv, a);
    return gpu_check_launch(be, "conv2d (split reduce)");
}

} // namespace RB_GPU_NS

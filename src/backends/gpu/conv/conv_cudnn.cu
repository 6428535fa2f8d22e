/* rb_conv2d through cuDNN on the CUDA backend (never built for HIP: Debian
 * has no MIOpen; the HIP path keeps our kernel). cuDNN is loaded at run time
 * with dlopen("libcudnn.so.9") when the backend is created and the functions
 * used here are resolved into a table of the backend's gpu_cudnn, so the
 * build has no link-time dependency: where the library is absent (or lacks
 * a symbol, or its handle cannot be created) every convolution runs our
 * kernels (ops_conv.cu) and the device info's features say "no-cudnn (why)".
 * The types and the function signatures come from the toolkit's cudnn.h
 * (CMake compiles this file only where that header exists), so a resolved
 * pointer has the type the header declares; cuDNN 9's ABI keeps them.
 *
 * What cuDNN takes here (everything else runs our kernels): x, w and dst of
 * one dtype (f16, bf16 or f32), device memory 16-byte aligned (cuDNN's
 * vector loads; its heuristics never see the pointers), x and dst in NCHW
 * order with any padding between rows / planes / images (the strides of
 * cudnnSetTensor4dDescriptorEx), w contiguous, sizes within int, and a
 * forward algorithm that is an implicit or explicit GEMM (exact products,
 * f32 sums: Winograd and FFT transforms have larger errors than our bounds),
 * deterministic, with at most DNN_WS_MAX of workspace. Accumulation is f32
 * (compute type FLOAT); 16-bit tensors may use tensor cores; f32 tensors
 * only algorithms whose math type is CUDNN_FMA_MATH (no TF32: the f32 path
 * stays exact f32, as our kernel is). The algorithm comes from cuDNN's
 * heuristics (cudnnGetConvolutionForwardAlgorithm_v7, no timing runs) once
 * per shape and is cached in the backend (DNN_CACHE shapes, the oldest
 * replaced); the workspace is the backend's scratch.
 *
 * The bias: cuDNN's own bias add (cudnnAddTensor, or the fused
 * cudnnConvolutionBiasActivationForward) takes the bias in the output's
 * dtype, while the networks keep biases in f32 beside 16-bit activations,
 * and the fused form is limited to one algorithm; so cuDNN writes the
 * convolution and k_dnn_bias adds the bias in f32 and rounds. With a 16-bit
 * dst that is a second rounding (of the sum without bias), which our own
 * kernel avoids (it adds the bias before its single rounding).
 *
 * Graphs: cuDNN's calls only queue kernels on the backend's stream (handle
 * bound to it), so they are captured; the handle, a shape's heuristics and
 * its first run (cuDNN loads its kernels then) happen eagerly only: while
 * capturing, a shape not yet run eagerly, or one whose workspace exceeds
 * the scratch, runs our kernels instead.
 *
 * Layout: the activations stay NCHW. cuDNN's tensor-core kernels prefer
 * NHWC; for NCHW it may transpose x and dst around the GEMM inside the call
 * (the workspace it asks for), about two extra passes over x and dst, which
 * bench_sd --ops shows as part of the convolutions' time. */
#include "backends/gpu/gpu_common.cuh"

#include <cudnn.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace RB_GPU_NS {

#define DNN_CACHE 128
#define DNN_WS_MAX ((size_t)256 << 20)

/* the functions resolved from libcudnn.so.9 */
#define DNN_FUNCS(X)                                                                                                 \
    X(cudnnGetVersion)                                                                                               \
    X(cudnnGetErrorString)                                                                                           \
    X(cudnnCreate)                                                                                                   \
    X(cudnnDestroy)                                                                                                  \
    X(cudnnSetStream)                                                                                                \
    X(cudnnCreateTensorDescriptor)                                                                                   \
    X(cudnnDestroyTensorDescriptor)                                                                                  \
    X(cudnnSetTensor4dDescriptorEx)                                                                                  \
    X(cudnnCreateFilterDescriptor)                                                                                   \
    X(cudnnDestroyFilterDescriptor)                                                                                  \
    X(cudnnSetFilter4dDescriptor)                                                                                    \
    X(cudnnCreateConvolutionDescriptor)                                                                              \
    X(cudnnDestroyConvolutionDescriptor)                                                                             \
    X(cudnnSetConvolution2dDescriptor)                                                                               \
    X(cudnnSetConvolutionGroupCount)                                                                                 \
    X(cudnnSetConvolutionMathType)                                                                                   \
    X(cudnnGetConvolution2dForwardOutputDim)                                                                         \
    X(cudnnGetConvolutionForwardAlgorithm_v7)                                                                        \
    X(cudnnGetConvolutionForwardWorkspaceSize)                                                                       \
    X(cudnnConvolutionForward)

struct dnn_fns {
#define DNN_MEMBER(n) decltype(&::n) n;
    DNN_FUNCS(DNN_MEMBER)
#undef DNN_MEMBER
};

/* a convolution's shape: v[0] the cuDNN dtype, 1..4 x's N C H W, 5..8 its
 * element strides, 9..12 the kernel's K, C / groups, R, S, 13..16 dst's N K
 * P Q, 17..20 its strides, 21 groups, 22..27 stride, padding and dilation
 * (y then x each) */
struct dnn_key {
    int v[28];
};

struct dnn_entry {
    dnn_key key;
    bool used, ok, ran; /* ok: cuDNN takes it; ran: it has run eagerly (capturable) */
    cudnnConvolutionFwdAlgo_t algo;
    cudnnMathType_t math;
    size_t ws;
};

struct gpu_cudnn {
    void *lib;        /* NULL: not loaded (why says so) */
    bool failed;      /* the handle could not be created (why) */
    char why[100];
    size_t version;
    dnn_fns f;
    cudnnHandle_t h;  /* created by the first convolution that needs it */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    dnn_entry cache[DNN_CACHE];
    int next; /* the entry a new shape replaces once all are used */
};

void gpu_cudnn_open(gpu_backend *g) {
    gpu_cudnn *d = (gpu_cudnn *)calloc(1, sizeof *d);
    g->dnn = d;
    if (!d) return; /* out of host memory: our kernels */
    (void)dlerror();
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(d->why, sizeof d->why, "%s", e ? e : "libcudnn.so.9 not found");
        return;
    }
#define DNN_RESOLVE(n)                                                                                               \
    {                                                                                                                \
        void *p = dlsym(lib, #n);                                                                                    \
        if (!p) {                                                                                                    \
            snprintf(d->why, sizeof d->why, "libcudnn.so.9 lacks %s", #n);                                          \
            return; /* left loaded: dlclose of cuDNN is avoided (see gpu_cudnn_close) */                              \
        }                                                                                                            \
        memcpy(&d->f.n, &p, sizeof p);                                                                               \
    }
    DNN_FUNCS(DNN_RESOLVE)
#undef DNN_RESOLVE
    d->version = d->f.cudnnGetVersion();
    if (d->version < 90000 || d->version >= 100000) {
        snprintf(d->why, sizeof d->why, "libcudnn.so.9 reports version %zu", d->version);
        return;
    }
    d->lib = lib;
}

void gpu_cudnn_close(gpu_backend *g) {
    gpu_cudnn *d = g->dnn;
    if (!d) return;
    if (d->h) {
        if (d->cd) (void)d->f.cudnnDestroyConvolutionDescriptor(d->cd);
        if (d->wd) (void)d->f.cudnnDestroyFilterDescriptor(d->wd);
        if (d->yd) (void)d->f.cudnnDestroyTensorDescriptor(d->yd);
        if (d->xd) (void)d->f.cudnnDestroyTensorDescriptor(d->xd);
        (void)d->f.cudnnDestroy(d->h);
    }
    /* the library stays loaded (dlopen counts references; frameworks never
     * unload cuDNN, whose sub-libraries it loads itself) */
    free(d);
    g->dnn = NULL;
}

bool gpu_cudnn_describe(const gpu_backend *g, char *out, size_t size) {
    const gpu_cudnn *d = g->dnn;
    const bool ok = d && d->lib && !d->failed;
    if (out && size) {
        if (ok)
            snprintf(out, size, "cudnn-%zu.%zu.%zu", d->version / 10000, d->version % 10000 / 100, d->version % 100);
        else snprintf(out, size, "no-cudnn (%s)", d ? d->why : "out of host memory");
    }
    return ok;
}

/* The handle on the backend's stream and the descriptors, once (eagerly). */
static bool dnn_ready(rb_backend *be, gpu_cudnn *d) {
    if (d->h) return true;
    if (!d->lib || d->failed || be->capturing) return false;
    gpu_backend *g = gb(be);
    const char *what = "cudnnCreate";
    cudnnStatus_t s = cudaSetDevice(g->device) == cudaSuccess ? d->f.cudnnCreate(&d->h) : CUDNN_STATUS_EXECUTION_FAILED;
    if (s == CUDNN_STATUS_SUCCESS) {
        what = "cudnnSetStream";
        s = d->f.cudnnSetStream(d->h, g->stream);
    }
    if (s == CUDNN_STATUS_SUCCESS) {
        what = "descriptors";
        s = d->f.cudnnCreateTensorDescriptor(&d->xd);
        if (s == CUDNN_STATUS_SUCCESS) s = d->f.cudnnCreateTensorDescriptor(&d->yd);
        if (s == CUDNN_STATUS_SUCCESS) s = d->f.cudnnCreateFilterDescriptor(&d->wd);
        if (s == CUDNN_STATUS_SUCCESS) s = d->f.cudnnCreateConvolutionDescriptor(&d->cd);
    }
    (void)cudaGetLastError(); /* a failure here leaves our kernels, not a sticky error */
    if (s == CUDNN_STATUS_SUCCESS) return true;
    snprintf(d->why, sizeof d->why, "%s: %s", what, d->f.cudnnGetErrorString(s));
    d->failed = true;
    if (d->h) {
        if (d->cd) (void)d->f.cudnnDestroyConvolutionDescriptor(d->cd);
        if (d->wd) (void)d->f.cudnnDestroyFilterDescriptor(d->wd);
        if (d->yd) (void)d->f.cudnnDestroyTensorDescriptor(d->yd);
        if (d->xd) (void)d->f.cudnnDestroyTensorDescriptor(d->xd);
        (void)d->f.cudnnDestroy(d->h);
    }
    d->h = NULL;
    d->xd = d->yd = NULL;
    d->wd = NULL;
    d->cd = NULL;
    return false;
}

/* The element strides of an NCHW view (x or dst) into s[4] = {n, c, h, w}:
 * unit stride along W, then rows, planes and images, each past the extent
 * of the ones before it (any padding between them, no overlap), every
 * stride a whole number of elements; a dimension of one element gets the
 * packed stride. The last element within int (cuDNN's offsets). */
static bool dnn_nchw(const rb_tensor *t, size_t es, int s[4]) {
    for (int i = 0; i < 4; i++)
        if (t->ne[i] < 1 || t->ne[i] > INT_MAX || t->nb[i] % es) return false;
    if (t->ne[0] > 1 && t->nb[0] != es) return false;
    size_t st[4], ext = (size_t)t->ne[0]; /* elements spanned by the dimensions so far */
    st[0] = 1;
    for (int i = 1; i < 4; i++) {
        st[i] = t->ne[i] > 1 ? t->nb[i] / es : ext;
        if (st[i] < ext || st[i] > (size_t)INT_MAX / 2) return false;
        ext = st[i] * (size_t)t->ne[i];
        if (ext > (size_t)INT_MAX) return false;
    }
    s[0] = (int)st[3];
    s[1] = (int)st[2];
    s[2] = (int)st[1];
    s[3] = 1;
    return true;
}

/* dst += bias per output channel, in f32, rounded once into dst's dtype */
__global__ void k_dnn_bias(gt d, gt b, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / d.ne[0];
        const int64_t x = i - t * d.ne[0];
        const int64_t y = t % d.ne[1];
        t /= d.ne[1];
        const int64_t c = t % d.ne[2], img = t / d.ne[2];
        char *p = d.p + x * d.nb[0] + y * d.nb[1] + c * d.nb[2] + img * d.nb[3];
        stf(d.dt, p, ldf(d.dt, p) + ldf(b.dt, b.p + c * b.nb[0]));
    }
}

static bool dnn_plain(rb_dtype t) { return t == RB_F32 || t == RB_F16 || t == RB_BF16; }

/* The descriptors of one convolution (x, w, dst, the convolution with the
 * math type to run). false: cuDNN refuses the shape. */
static bool dnn_describe(gpu_cudnn *d, const dnn_key &k, cudnnMathType_t math) {
    const int *v = k.v;
    const cudnnDataType_t dt = (cudnnDataType_t)v[0];
    const int sy = v[22], sx = v[23], py = v[24], px = v[25], dy = v[26], dx = v[27];
    if (d->f.cudnnSetTensor4dDescriptorEx(d->xd, dt, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]) !=
            CUDNN_STATUS_SUCCESS ||
        d->f.cudnnSetTensor4dDescriptorEx(d->yd, dt, v[13], v[14], v[15], v[16], v[17], v[18], v[19], v[20]) !=
            CUDNN_STATUS_SUCCESS ||
        d->f.cudnnSetFilter4dDescriptor(d->wd, dt, CUDNN_TENSOR_NCHW, v[9], v[10], v[11], v[12]) !=
            CUDNN_STATUS_SUCCESS ||
        d->f.cudnnSetConvolution2dDescriptor(d->cd, py, px, sy, sx, dy, dx, CUDNN_CROSS_CORRELATION,
                                             CUDNN_DATA_FLOAT) != CUDNN_STATUS_SUCCESS ||
        d->f.cudnnSetConvolutionGroupCount(d->cd, v[21]) != CUDNN_STATUS_SUCCESS ||
        d->f.cudnnSetConvolutionMathType(d->cd, math) != CUDNN_STATUS_SUCCESS)
        return false;
    return true;
}

/* Heuristics for a new shape: the first of cuDNN's ranked algorithms that
 * is a GEMM, deterministic, FMA-only for f32, within the workspace cap. */
static void dnn_pick(gpu_cudnn *d, dnn_entry *e) {
    e->ok = false;
    const bool f32 = e->key.v[0] == (int)CUDNN_DATA_FLOAT;
    const cudnnMathType_t want = f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    if (!dnn_describe(d, e->key, want)) return;
    int n[4] = {0, 0, 0, 0};
    if (d->f.cudnnGetConvolution2dForwardOutputDim(d->cd, d->xd, d->wd, &n[0], &n[1], &n[2], &n[3]) !=
            CUDNN_STATUS_SUCCESS ||
        n[0] != e->key.v[13] || n[1] != e->key.v[14] || n[2] != e->key.v[15] || n[3] != e->key.v[16])
        return;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0;
    if (d->f.cudnnGetConvolutionForwardAlgorithm_v7(d->h, d->xd, d->wd, d->cd, d->yd,
                                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf) !=
        CUDNN_STATUS_SUCCESS)
        return;
    for (int i = 0; i < got && i < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; i++) {
        const cudnnConvolutionFwdAlgoPerf_t &p = perf[i];
        if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC) continue;
        if (p.algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM &&
            p.algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM && p.algo != CUDNN_CONVOLUTION_FWD_ALGO_GEMM)
            continue;
        /* f32: run with CUDNN_FMA_MATH whatever the heuristics name (no TF32) */
        if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ||
            (f32 && p.mathType != CUDNN_FMA_MATH && p.mathType != CUDNN_DEFAULT_MATH))
            continue;
        const cudnnMathType_t math = f32 ? CUDNN_FMA_MATH : p.mathType;
        if (d->f.cudnnSetConvolutionMathType(d->cd, math) != CUDNN_STATUS_SUCCESS) continue;
        size_t ws = 0;
        if (d->f.cudnnGetConvolutionForwardWorkspaceSize(d->h, d->xd, d->wd, d->cd, d->yd, p.algo, &ws) !=
                CUDNN_STATUS_SUCCESS ||
            ws > DNN_WS_MAX)
            continue;
        e->algo = p.algo;
        e->math = math;
        e->ws = ws;
        e->ok = true;
        return;
    }
}

rb_status gpu_cudnn_conv2d(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w,
                           const rb_tensor *bias, const int stride[2], const int pad[2], const int dilation[2],
                           int groups, bool *done) {
    *done = false;
    gpu_backend *g = gb(be);
    gpu_cudnn *d = g->dnn;
    if (!d || !d->lib || d->failed || g->tune.own_conv) return RB_OK;
    /* the cases cuDNN takes */
    const rb_dtype t = x->dtype;
    if (!dnn_plain(t) || w->dtype != t || dst->dtype != t || (bias && !dnn_plain(bias->dtype))) return RB_OK;
    if (!x->buf->owned || !w->buf->owned || !dst->buf->owned || (bias && !bias->buf->owned)) return RB_OK;
    const gt xv = gview(x), wv = gview(w), dv = gview(dst);
    if (((uintptr_t)xv.p | (uintptr_t)wv.p | (uintptr_t)dv.p) & 15) return RB_OK;
    const size_t es = rb_dtype_row_size(t, 1);
    dnn_key k;
    memset(&k, 0, sizeof k);
    int xs[4], ys[4];
    if (!dnn_nchw(x, es, xs) || !dnn_nchw(dst, es, ys)) return RB_OK;
    for (int i = 0; i < 4; i++)
        if (w->ne[i] > INT_MAX || w->nb[i] != (i ? w->nb[i - 1] * (size_t)w->ne[i - 1] : es)) return RB_OK;
    for (int i = 0; i < 2; i++)
        if (stride[i] < 1 || dilation[i] < 1 || pad[i] < 0) return RB_OK;
    if (groups < 1) return RB_OK;
    const cudnnDataType_t ct = t == RB_F16 ? CUDNN_DATA_HALF : t == RB_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    int *v = k.v;
    v[0] = (int)ct;
    v[1] = (int)x->ne[3], v[2] = (int)x->ne[2], v[3] = (int)x->ne[1], v[4] = (int)x->ne[0];
    for (int i = 0; i < 4; i++) v[5 + i] = xs[i], v[17 + i] = ys[i];
    v[9] = (int)w->ne[3], v[10] = (int)w->ne[2], v[11] = (int)w->ne[1], v[12] = (int)w->ne[0];
    v[13] = (int)dst->ne[3], v[14] = (int)dst->ne[2], v[15] = (int)dst->ne[1], v[16] = (int)dst->ne[0];
    v[21] = groups;
    v[22] = stride[1], v[23] = stride[0], v[24] = pad[1], v[25] = pad[0], v[26] = dilation[1], v[27] = dilation[0];

    /* the cached shape, or its heuristics now (eagerly) */
    dnn_entry *e = NULL;
    for (int i = 0; i < DNN_CACHE && !e; i++)
        if (d->cache[i].used && !memcmp(&d->cache[i].key, &k, sizeof k)) e = &d->cache[i];
    if (!e) {
        if (be->capturing || !dnn_ready(be, d)) return RB_OK;
        e = &d->cache[d->next];
        d->next = (d->next + 1) % DNN_CACHE;
        memset(e, 0, sizeof *e);
        e->key = k;
        e->used = true;
        dnn_pick(d, e);
    }
    if (!e->ok || (be->capturing && (!e->ran || e->ws > g->scratch_cap))) return RB_OK;
    void *ws = NULL;
    if (e->ws) {
        if (gpu_scratch(be, e->ws, &ws) != RB_OK) return RB_OK; /* eager only: our kernels need no more */
    }
    if (!dnn_describe(d, k, e->math)) {
        e->ok = false;
        return RB_OK;
    }
    const float one = 1.0f, zero = 0.0f; /* compute type FLOAT: float scaling factors */
    const cudnnStatus_t s = d->f.cudnnConvolutionForward(d->h, &one, d->xd, xv.p, d->wd, wv.p, d->cd, e->algo, ws,
                                                         e->ws, &zero, d->yd, dv.p);
    if (s != CUDNN_STATUS_SUCCESS) {
        e->ok = false; /* this shape runs our kernels from now on */
        if (be->capturing) /* the capture may have recorded part of the call */
            return rb_backend_fail(be, RB_E_BACKEND, "rb_conv2d: cuDNN failed while capturing on %s: %s", be->name,
                                   d->f.cudnnGetErrorString(s));
        rb_status cs = gpu_check_launch(be, "conv2d (cuDNN)");
        return cs; /* RB_OK: nothing queued, the caller runs our kernels */
    }
    rb_status st = gpu_check_launch(be, "conv2d (cuDNN)");
    if (st != RB_OK) return st;
    if (bias) {
        const int64_t n = rb_tensor_nelements(dst);
        k_dnn_bias<<<gpu_blocks(n, 256), 256, 0, g->stream>>>(dv, gview(bias), n);
        st = gpu_check_launch(be, "conv2d (cuDNN bias)");
        if (st != RB_OK) return st;
    }
    if (!be->capturing) e->ran = true;
    g->conv_dnn++;
    *done = true;
    return RB_OK;
}

} // namespace RB_GPU_NS

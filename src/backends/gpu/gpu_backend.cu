/* The GPU backend object, shared by the CUDA and ROCm builds: device
 * enumeration (name, arch, multiprocessors, cudaMemGetInfo / hipMemGetInfo),
 * creation on one device with its own non-blocking stream (and a cuBLAS
 * handle on CUDA, and cuDNN loaded at run time where present: its version or
 * absence shows in the device info's features), device buffers (uploads
 * through two pinned staging buffers, so a large model copy overlaps memcpy
 * into pinned memory with the DMA), device scratch, error recording, the
 * vtable that wires the op launchers of ops_*.cu, and graph capture/replay
 * of the stream (CUDA/HIP graphs). Page-locked host blocks
 * (rb_backend_host_alloc) are read and written by kernels through their
 * device view where that beats the copy engine: queued uploads a graph
 * replays (a decode step's token and position) and read-backs of whole
 * 16-byte units (its logits). An out-of-memory allocation fails with
 * RB_E_NOMEM and a message naming the free memory; the backend stays usable. */
#include "backends/gpu/gpu_internal.h"
#include "backends/gpu/gpu_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(RBEE_GPU_HIP)
#define RB_GPU_CREATE rb_rocm_backend_create
#define RB_GPU_LIST rb_rocm_devices_list
#define RB_GPU_TUNE rb_rocm_backend_tune
#define RB_GPU_CONV_STATS rb_rocm_backend_conv_stats
#define RB_GPU_DEVICE_KIND RB_DEVICE_ROCM
#else
#define RB_GPU_CREATE rb_cuda_backend_create
#define RB_GPU_LIST rb_cuda_devices_list
#define RB_GPU_TUNE rb_cuda_backend_tune
#define RB_GPU_CONV_STATS rb_cuda_backend_conv_stats
#define RB_GPU_DEVICE_KIND RB_DEVICE_CUDA
#endif

#define STAGING_BYTES ((size_t)16 << 20)
#define SMALL_UPLOAD ((size_t)64 << 10)

namespace RB_GPU_NS {

rb_status gpu_fail(rb_backend *be, cudaError_t e, const char *what) {
    return rb_backend_fail(be, e == cudaErrorMemoryAllocation ? RB_E_NOMEM : RB_E_BACKEND, "%s: %s (%s)", what,
                           cudaGetErrorString(e), be->name);
}

rb_status gpu_check_launch(rb_backend *be, const char *what) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? RB_OK : gpu_fail(be, e, what);
}

/* A scratch allocation. The backend references its current one; a graph
 * captured while it was current references it too (its kernels have the
 * address baked in), so growing the scratch later never frees memory that a
 * graph still uses. */
struct gpu_scratch_blk {
    void *p;
    size_t cap;
    int refs;
};

static void scratch_unref(gpu_backend *g, gpu_scratch_blk *b) {
    if (!b || --b->refs > 0) return;
    (void)cudaStreamSynchronize(g->stream); /* queued kernels may still read it */
    (void)cudaFree(b->p);
    free(b);
}

/* One scratch region (the first, or the second one of gpu_scratch_aux):
 * its pointer, capacity and block in the backend. */
static rb_status scratch_take(rb_backend *be, void **sp, size_t *scap, gpu_scratch_blk **sblk, size_t bytes,
                              void **out) {
    gpu_backend *g = gb(be);
    if (bytes <= *scap && *sp) {
        *out = *sp;
        return RB_OK;
    }
    if (be->capturing) /* a capture cannot allocate or wait for queued work */
        return rb_backend_fail(be, RB_E_NOMEM,
                               "device scratch must grow from %zu to %zu bytes while a graph is being captured on "
                               "%s: run the same step once eagerly before capturing it",
                               *scap, bytes, be->name);
    size_t cap = *scap ? *scap : ((size_t)1 << 20);
    while (cap < bytes) {
        if (cap > SIZE_MAX / 2) return rb_backend_fail(be, RB_E_NOMEM, "scratch of %zu bytes is too large", bytes);
        cap *= 2;
    }
    gpu_scratch_blk *b = (gpu_scratch_blk *)calloc(1, sizeof *b);
    if (!b) return rb_backend_fail(be, RB_E_NOMEM, "out of host memory for a scratch descriptor");
    scratch_unref(g, *sblk); /* frees the old region unless a graph holds it */
    *sblk = NULL;
    *sp = NULL;
    *scap = 0;
    cudaError_t e = cudaMalloc(&b->p, cap);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(b);
        return rb_backend_fail(be, RB_E_NOMEM, "cannot allocate %zu bytes of device scratch on %s: %s", cap,
                               be->name, cudaGetErrorString(e));
    }
    b->cap = cap;
    b->refs = 1;
    *sblk = b;
    *sp = b->p;
    *scap = cap;
    *out = b->p;
    return RB_OK;
}

rb_status gpu_scratch(rb_backend *be, size_t bytes, void **out) {
    gpu_backend *g = gb(be);
    return scratch_take(be, &g->scratch, &g->scratch_cap, &g->scratch_blk, bytes, out);
}

rb_status gpu_scratch_aux(rb_backend *be, size_t bytes, void **out) {
    gpu_backend *g = gb(be);
    return scratch_take(be, &g->scratch2, &g->scratch2_cap, &g->scratch2_blk, bytes, out);
}

int *gpu_ids_guard(rb_backend *be) { return be->capturing ? gb(be)->ids_err : NULL; }

rb_status gpu_check_ids(rb_backend *be, const rb_tensor *ids, int64_t limit, const char *op) {
    if (be->capturing) /* callers check on the device instead (gpu_ids_guard) */
        return rb_backend_fail(be, RB_E_INVALID, "%s: ids cannot be read on the host during a graph capture", op);
    const size_t span = rb_tensor_span(ids);
    if (span == 0) return RB_OK;
    char *h = (char *)malloc(span);
    if (!h) return rb_backend_fail(be, RB_E_NOMEM, "%s: no host memory to check %zu bytes of ids", op, span);
    cudaError_t e = cudaMemcpyAsync(h, (const char *)ids->buf->impl + ids->offs, span, cudaMemcpyDeviceToHost,
                                    gb(be)->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(gb(be)->stream);
    if (e != cudaSuccess) {
        free(h);
        return gpu_fail(be, e, "reading ids");
    }
    for (int64_t i3 = 0; i3 < ids->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ids->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ids->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < ids->ne[0]; i0++) {
                    int32_t v;
                    memcpy(&v, h + i0 * ids->nb[0] + i1 * ids->nb[1] + i2 * ids->nb[2] + i3 * ids->nb[3], 4);
                    if (v < 0 || v >= limit) {
                        free(h);
                        return rb_backend_fail(be, RB_E_RANGE, "%s: ids[%lld,%lld] = %d out of range [0, %lld)", op,
                                               (long long)i0, (long long)i1, (int)v, (long long)limit);
                    }
                }
    free(h);
    return RB_OK;
}

/* ---- devices ---- */

static void fill_info(int dev, const cudaDeviceProp *prop, rb_device_info *info) {
    memset(info, 0, sizeof *info);
    info->kind = RB_GPU_DEVICE_KIND;
    info->index = dev;
    snprintf(info->name, sizeof info->name, "%.127s", prop->name);
#if defined(RBEE_GPU_HIP)
    snprintf(info->features, sizeof info->features, "%.100s wave%d", prop->gcnArchName, prop->warpSize);
#else
    snprintf(info->features, sizeof info->features, "sm_%d%d", prop->major, prop->minor);
#endif
    info->compute_units = prop->multiProcessorCount;
    info->mem_total = prop->totalGlobalMem;
    size_t fr = 0, tot = 0;
    if (cudaSetDevice(dev) == cudaSuccess && cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
        info->mem_free = fr;
        info->mem_total = tot;
    } else {
        (void)cudaGetLastError();
    }
}

static int device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: none to report */
        return 0;
    }
    return n;
}

/* ---- vtable: lifecycle ---- */

static void g_destroy(rb_backend *be) {
    gpu_backend *g = gb(be);
    (void)cudaSetDevice(g->device);
    if (g->stream) (void)cudaStreamSynchronize(g->stream);
    gpu_trace_finish(g);
#if !defined(RBEE_GPU_HIP)
    if (g->blas) cublasDestroy(g->blas);
    if (g->blas_lt) cublasLtDestroy(g->blas_lt);
#endif
#if defined(RBEE_CUDNN)
    gpu_cudnn_close(g);
#endif
    for (int i = 0; i < 2; i++) {
        if (g->staging_ev[i]) (void)cudaEventDestroy(g->staging_ev[i]);
        if (g->staging[i]) (void)cudaFreeHost(g->staging[i]);
    }
    scratch_unref(g, g->scratch_blk); /* graphs still alive keep theirs (they must be freed first) */
    scratch_unref(g, g->scratch2_blk);
    if (g->ids_err) (void)cudaFree(g->ids_err);
    if (g->ids_err_host) (void)cudaFreeHost(g->ids_err_host);
    if (g->att_cnt) (void)cudaFree(g->att_cnt);
    if (g->stream) (void)cudaStreamDestroy(g->stream);
    free(g);
}

static rb_status g_device_info(rb_backend *be, rb_device_info *info) {
    gpu_backend *g = gb(be);
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, g->device);
    if (e != cudaSuccess) return gpu_fail(be, e, "device properties");
    fill_info(g->device, &prop, info);
#if defined(RBEE_CUDNN)
    char dnn[96]; /* whether rb_conv2d can use cuDNN, said once here */
    (void)gpu_cudnn_describe(g, dnn, sizeof dnn);
    const size_t used = strlen(info->features);
    snprintf(info->features + used, sizeof info->features - used, " %s", dnn);
#endif
    return RB_OK;
}

/* Graph replays check ids on the device: queue the read-back of the flag
 * (before the caller's synchronize) ... */
static cudaError_t ids_err_fetch(gpu_backend *g) {
    if (!g->ids_err_live || g->ids_err_exported) return cudaSuccess;
    return cudaMemcpyAsync(g->ids_err_host, g->ids_err, 4 * sizeof(int), cudaMemcpyDeviceToHost, g->stream);
}

/* ... and, once synchronized, report an out-of-range id as RB_E_RANGE and
 * re-arm the flag. */
static rb_status ids_err_report(rb_backend *be) {
    gpu_backend *g = gb(be);
    if (!g->ids_err_live) return RB_OK;
    g->ids_err_live = false;
    const int *h = g->ids_err_host;
    if (!h[0]) return RB_OK;
    const int op = h[1] >= 0 && h[1] <= 2 ? h[1] : 0, id = h[2], limit = h[3];
    cudaError_t e = cudaMemsetAsync(g->ids_err, 0, 4 * sizeof(int), g->stream);
    if (e != cudaSuccess) return gpu_fail(be, e, "resetting the device ids check");
    static const char *const ops[3] = {"rb_get_rows", "rb_set_rows", "rb_matmul_id"};
    static const char *const what[3] = {"row 0 or the last row was read instead", "that row was not written",
                                        "the products of that slot were not written"};
    return rb_backend_fail(be, RB_E_RANGE,
                           "%s: id %d out of range [0, %d) in a graph replay on %s (checked on the device; %s)",
                           ops[op], id, limit, be->name, what[op]);
}

static rb_status g_sync(rb_backend *be) {
    cudaError_t e = ids_err_fetch(gb(be));
    if (e == cudaSuccess) e = cudaStreamSynchronize(gb(be)->stream);
    return e == cudaSuccess ? ids_err_report(be) : gpu_fail(be, e, "synchronize");
}

/* ---- vtable: memory ---- */

static rb_status g_buffer_alloc(rb_backend *be, rb_buffer *buf, size_t size) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, size ? size : 256);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        size_t fr = 0, tot = 0;
        (void)cudaMemGetInfo(&fr, &tot);
        (void)cudaGetLastError();
        return rb_backend_fail(be, RB_E_NOMEM,
                               "out of device memory on %s: cannot allocate %.1f MiB (%.1f MiB free of %.1f MiB): %s",
                               be->name, (double)size / 1048576.0, (double)fr / 1048576.0, (double)tot / 1048576.0,
                               cudaGetErrorString(e));
    }
    buf->impl = p;
    buf->host_ptr = NULL;
    buf->owned = true;
    return RB_OK;
}

/* Host -> device through the pinned staging buffers (two in flight). */
static rb_status upload(rb_backend *be, char *dst, const char *src, size_t n) {
    gpu_backend *g = gb(be);
    cudaError_t e;
    if (n <= SMALL_UPLOAD || !g->staging[0]) {
        e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, g->stream);
        return e == cudaSuccess ? RB_OK : gpu_fail(be, e, "upload");
    }
    int k = 0;
    for (size_t done = 0; done < n; k ^= 1) {
        const size_t c = n - done < g->staging_cap ? n - done : g->staging_cap;
        e = cudaEventSynchronize(g->staging_ev[k]); /* the DMA that last read this buffer is done */
        if (e != cudaSuccess) return gpu_fail(be, e, "upload");
        memcpy(g->staging[k], src + done, c);
        e = cudaMemcpyAsync(dst + done, g->staging[k], c, cudaMemcpyHostToDevice, g->stream);
        if (e == cudaSuccess) e = cudaEventRecord(g->staging_ev[k], g->stream);
        if (e != cudaSuccess) return gpu_fail(be, e, "upload");
        done += c;
    }
    return RB_OK;
}

static rb_status g_buffer_from_host(rb_backend *be, rb_buffer *buf, void *ptr, size_t size) {
    rb_status s = g_buffer_alloc(be, buf, size);
    if (s != RB_OK) return s;
    s = upload(be, (char *)buf->impl, (const char *)ptr, size);
    if (s == RB_OK) s = g_sync(be); /* the caller may unmap ptr once we return */
    if (s != RB_OK) {
        (void)cudaFree(buf->impl);
        buf->impl = NULL;
    }
    return s;
}

static void g_buffer_free(rb_backend *be, rb_buffer *buf) {
    if (!buf->impl) return;
    (void)cudaStreamSynchronize(gb(be)->stream); /* queued work may still use it */
    if (buf->owned) (void)cudaFree(buf->impl); /* else rb_buffer_wrap_host: the caller's memory */
    buf->impl = NULL;
}

static rb_status g_buffer_set(rb_backend *be, rb_buffer *buf, size_t offs, const void *src, size_t n) {
    rb_status s = upload(be, (char *)buf->impl + offs, (const char *)src, n);
    /* small pageable copies return once the source is consumed; large ones
     * went through staging, so src is free to change either way */
    return s;
}

/* The page-locked block of g_host_alloc holding [p, p + n), or NULL. */
static const gpu_backend::gpu_pinned *pinned_find(const gpu_backend *g, const void *p, size_t n) {
    for (int i = 0; i < g->n_pinned; i++)
        if ((const char *)p >= g->pinned[i].host && n <= g->pinned[i].size &&
            (size_t)((const char *)p - g->pinned[i].host) <= g->pinned[i].size - n)
            return &g->pinned[i];
    return NULL;
}

/* n bytes at d <- s (device addresses, either one a page-locked block's
 * device view) as the copy kernel of gpu_copy_view: 4-byte words, or float4
 * pieces where both are 16-byte aligned and n a multiple of 16 (the bytes
 * move unchanged). false: not 4-byte units (the caller uses the copy engine). */
static bool copy_kernel(rb_backend *be, char *d, const char *s, size_t n, rb_status *st) {
    if (n == 0 || n % 4 || (uintptr_t)d % 4 || (uintptr_t)s % 4) return false;
    const bool v16 = n % 16 == 0 && (uintptr_t)d % 16 == 0 && (uintptr_t)s % 16 == 0;
    const rb_dtype dt = v16 ? RB_F32 : RB_I32;
    *st = gpu_copy_view(be, gpu_contig_view(d, dt, (int64_t)(n / 4), 1, 1, 1),
                        gpu_contig_view((void *)s, dt, (int64_t)(n / 4), 1, 1, 1));
    return true;
}

/* rb_buffer_set_queued from a page-locked block: a kernel reads it through
 * its device view when it runs (in a graph: at every replay), so a decode
 * step's token id and position reach the device inside the step's graph,
 * without a copy queued before its launch. */
static rb_status g_buffer_set_queued(rb_backend *be, rb_buffer *buf, size_t offs, const void *src, size_t n) {
    gpu_backend *g = gb(be);
    char *d = (char *)buf->impl + offs;
    const gpu_backend::gpu_pinned *b = pinned_find(g, src, n);
    rb_status st = RB_OK;
    if (b && !g->tune.upload_dma && copy_kernel(be, d, b->dev + ((const char *)src - b->host), n, &st)) return st;
    if (b) { /* page-locked: the DMA reads it when it runs, and a capture records it */
        cudaError_t e = cudaMemcpyAsync(d, src, n, cudaMemcpyHostToDevice, g->stream);
        return e == cudaSuccess ? RB_OK : gpu_fail(be, e, "queued upload");
    }
    if (be->capturing)
        return rb_backend_fail(be, RB_E_UNSUPPORTED,
                               "rb_buffer_set_queued: %zu bytes at %p are not page-locked memory of this backend; a "
                               "graph cannot read them",
                               n, src);
    return upload(be, d, (const char *)src, n);
}

/* rb_buffer_wrap_host: a page-locked block of g_host_alloc, which kernels
 * address through its device view. */
static rb_status g_buffer_wrap_host(rb_backend *be, rb_buffer *buf, void *ptr, size_t size) {
    const gpu_backend::gpu_pinned *b = pinned_find(gb(be), ptr, size);
    if (!b)
        return rb_backend_fail(be, RB_E_UNSUPPORTED,
                               "rb_buffer_wrap_host: %zu bytes at %p are not page-locked memory %s can address", size,
                               ptr, be->name);
    buf->impl = b->dev + ((char *)ptr - b->host);
    buf->host_ptr = NULL; /* ops treat it as device memory: queued kernels write it */
    return RB_OK;
}

/* A read-back into a page-locked block of g_host_alloc (a decode step's
 * logits, where not written in place) in whole 16-byte units is a kernel
 * that writes the host memory through its device view: the copy engine's
 * DMA costs ~7 us a copy before its first byte on an H100, the kernel only
 * its launch, queued behind the step. */
static rb_status g_buffer_get(rb_backend *be, const rb_buffer *buf, size_t offs, void *dst, size_t n) {
    gpu_backend *g = gb(be);
    const char *src = (const char *)buf->impl + offs;
    const bool whole = n % 16 == 0 && (uintptr_t)dst % 16 == 0 && (uintptr_t)src % 16 == 0;
    const gpu_backend::gpu_pinned *b = whole ? pinned_find(g, dst, n) : NULL;
    rb_status st = RB_OK;
    cudaError_t e = cudaSuccess;
    if (b && copy_kernel(be, b->dev + ((char *)dst - b->host), src, n, &st)) {
        if (st != RB_OK) return st;
    } else {
        e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, g->stream);
    }
    if (e == cudaSuccess) e = ids_err_fetch(g);
    if (e == cudaSuccess) e = cudaStreamSynchronize(g->stream);
    return e == cudaSuccess ? ids_err_report(be) : gpu_fail(be, e, "download");
}

static rb_status g_buffer_copy(rb_backend *be, rb_buffer *dst, size_t dst_offs, const rb_buffer *src,
                               size_t src_offs, size_t n) {
    /* a wrapped host block (rb_buffer_wrap_host) on either side: the runtime
     * tells the memory kinds apart by address */
    const cudaMemcpyKind kind = dst->owned && src->owned ? cudaMemcpyDeviceToDevice : cudaMemcpyDefault;
    cudaError_t e = cudaMemcpyAsync((char *)dst->impl + dst_offs, (const char *)src->impl + src_offs, n, kind,
                                    gb(be)->stream);
    return e == cudaSuccess ? RB_OK : gpu_fail(be, e, "device copy");
}

/* ---- graphs: capture of the backend's stream, instantiate, replay ---- */

struct gpu_graph {
    cudaGraphExec_t exec;
    gpu_scratch_blk *blk, *blk2; /* the scratch regions its kernels address (referenced) */
    bool exports;         /* its last kernel writes the ids check's flag into ids_err_host */
};

static rb_status g_capture_begin(rb_backend *be) {
    gpu_backend *g = gb(be);
    cudaError_t e = cudaSuccess;
    if (!g->ids_err) { /* the device-side ids check needs its flag before capturing */
        e = cudaMalloc((void **)&g->ids_err, 4 * sizeof(int));
        if (e == cudaSuccess) e = cudaMemsetAsync(g->ids_err, 0, 4 * sizeof(int), g->stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            if (g->ids_err) (void)cudaFree(g->ids_err);
            g->ids_err = NULL;
            return gpu_fail(be, e, "graph capture: device flag for the ids check");
        }
    }
    if (!g->ids_err_host) {
        e = cudaMallocHost((void **)&g->ids_err_host, 4 * sizeof(int));
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            g->ids_err_host = NULL;
            return gpu_fail(be, e, "graph capture: pinned flag for the ids check");
        }
        memset(g->ids_err_host, 0, 4 * sizeof(int));
        void *d = NULL;
        g->ids_err_host_dev = cudaHostGetDevicePointer(&d, g->ids_err_host, 0) == cudaSuccess ? (int *)d : NULL;
        (void)cudaGetLastError();
    }
    /* thread-local: a call from this thread that cannot be captured (a
     * synchronize, an allocation) fails instead of silently running */
    e = cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gpu_fail(be, e, "begin graph capture");
    }
    return RB_OK;
}

static rb_status g_capture_end(rb_backend *be, rb_graph *out) {
    gpu_backend *g = gb(be);
    cudaGraph_t graph = NULL;
    /* the graph's last kernel copies the ids check's flag (device memory: the
     * replay's kernels set it with an atomic) into its page-locked mirror, so
     * nothing is left to copy back after a replay (a DMA: ~1.3 us queued
     * behind the step) */
    rb_status fst = RB_OK;
    const bool exports = out && g->ids_err_host_dev &&
                         copy_kernel(be, (char *)g->ids_err_host_dev, (const char *)g->ids_err, 4 * sizeof(int), &fst) &&
                         fst == RB_OK;
    cudaError_t e = cudaStreamEndCapture(g->stream, &graph);
    if (e != cudaSuccess || !out) { /* invalidated by a failed call, or discarded by the caller */
        (void)cudaGetLastError();
        if (graph) (void)cudaGraphDestroy(graph);
        return out ? gpu_fail(be, e, "graph capture") : RB_OK;
    }
    if (!graph) return rb_backend_fail(be, RB_E_BACKEND, "graph capture on %s produced no graph", be->name);
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiateWithFlags(&x, graph, 0);
    (void)cudaGraphDestroy(graph); /* the executable graph is independent of it */
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gpu_fail(be, e, "instantiate graph");
    }
    gpu_graph *gg = (gpu_graph *)calloc(1, sizeof *gg);
    if (!gg) {
        (void)cudaGraphExecDestroy(x);
        return rb_backend_fail(be, RB_E_NOMEM, "out of host memory for a graph");
    }
    gg->exec = x;
    gg->exports = exports;
    gg->blk = g->scratch_blk;
    if (gg->blk) gg->blk->refs++;
    gg->blk2 = g->scratch2_blk;
    if (gg->blk2) gg->blk2->refs++;
    out->impl = gg;
    return RB_OK;
}

static rb_status g_graph_launch(rb_backend *be, rb_graph *graph) {
    gpu_backend *g = gb(be);
    const gpu_graph *gg = (const gpu_graph *)graph->impl;
    cudaError_t e = cudaGraphLaunch(gg->exec, g->stream);
    if (e != cudaSuccess) return gpu_fail(be, e, "graph launch");
    g->ids_err_live = true; /* its kernels may have flagged an id */
    g->ids_err_exported = gg->exports; /* and the flag reaches the host with it */
    return RB_OK;
}

static void g_graph_free(rb_backend *be, rb_graph *graph) {
    gpu_backend *g = gb(be);
    gpu_graph *gg = (gpu_graph *)graph->impl;
    if (!gg) return;
    (void)cudaStreamSynchronize(g->stream); /* a replay may still be running */
    (void)cudaGraphExecDestroy(gg->exec);
    scratch_unref(g, gg->blk);
    scratch_unref(g, gg->blk2);
    free(gg);
    graph->impl = NULL;
}

static const rb_graph_vtable k_gpu_graph_vtable = {
    .capture_begin = g_capture_begin,
    .capture_end = g_capture_end,
    .launch = g_graph_launch,
    .free = g_graph_free,
};

/* ---- ops without a GPU kernel yet: refuse clearly ---- */

static rb_status unsupported(rb_backend *be, const char *op) {
    return rb_backend_fail(be, RB_E_UNSUPPORTED, "%s is not implemented on the GPU backend (%s)", op, be->name);
}
static rb_status g_index_select(rb_backend *be, rb_tensor *, const rb_tensor *, const rb_tensor *, int) {
    return unsupported(be, "rb_index_select");
}
static rb_status g_conv1d(rb_backend *be, rb_tensor *, const rb_tensor *, const rb_tensor *, const rb_tensor *, int,
                          int, int, int) {
    return unsupported(be, "rb_conv1d");
}

/* Page-locked host memory (rb_backend_host_alloc): copies into it run as
 * one DMA at the bus's rate; NULL when the driver has none to give (the
 * front-end then uses plain memory). */
static void *g_host_alloc(rb_backend *be, size_t size) {
    gpu_backend *g = gb(be);
    void *p = NULL;
    if (cudaSetDevice(g->device) != cudaSuccess || cudaMallocHost(&p, size) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it */
        return NULL;
    }
    void *d = NULL;
    if (g->n_pinned < GPU_PINNED_MAX && cudaHostGetDevicePointer(&d, p, 0) == cudaSuccess && d)
        g->pinned[g->n_pinned++] = {(char *)p, (char *)d, size};
    (void)cudaGetLastError(); /* a block without a device view is still pinned */
    return p;
}

static void g_host_free(rb_backend *be, void *p) {
    gpu_backend *g = gb(be);
    for (int i = 0; i < g->n_pinned; i++)
        if (g->pinned[i].host == (char *)p) {
            g->pinned[i] = g->pinned[--g->n_pinned];
            break;
        }
    (void)cudaFreeHost(p);
}

/* In rb_backend_vtable's order (C++ designated initializers must follow
 * it: a reordered backend_impl.h fails to compile instead of miswiring). */
static const rb_backend_vtable k_gpu_vtable = {
    .destroy = g_destroy,
    .device_info = g_device_info,
    .sync = g_sync,
    .buffer_alloc = g_buffer_alloc,
    .buffer_from_host = g_buffer_from_host,
    .buffer_free = g_buffer_free,
    .buffer_set = g_buffer_set,
    .buffer_get = g_buffer_get,
    .buffer_copy = g_buffer_copy,
    .fill = gpu_fill,
    .affine = gpu_affine,
    .unary = gpu_unary,
    .binary = gpu_binary,
    .where = gpu_where,
    .glu = gpu_glu,
    .cast = gpu_cast,
    .reduce = gpu_reduce,
    .softmax = gpu_softmax,
    .rms_norm = gpu_rms_norm,
    .add_rms_norm = gpu_add_rms_norm,
    .layer_norm = gpu_layer_norm,
    .group_norm = gpu_group_norm,
    .get_rows = gpu_get_rows,
    .index_select = g_index_select,
    .set_rows = gpu_set_rows,
    .argsort = gpu_argsort,
    .topk = gpu_topk,
    .matmul = gpu_matmul,
    .rope = gpu_rope,
    .attention = gpu_attention,
    .conv1d = g_conv1d,
    .conv2d = gpu_conv2d,
    .upsample = gpu_upsample,
    .matmul_fused = gpu_matmul_fused,
    .host_alloc = g_host_alloc,
    .host_free = g_host_free,
    .buffer_set_queued = g_buffer_set_queued,
    .buffer_wrap_host = g_buffer_wrap_host,
    .group_norm_act = gpu_group_norm_act,
    .matmul_id = gpu_matmul_id,
    .swiglu_clamp = gpu_swiglu_clamp,
    .layer_norm_mod = gpu_layer_norm_mod,
    .linear = gpu_linear,
};

static rb_status create(int index, const rb_backend_config *cfg, rb_backend **out, rb_error *err) {
    (void)cfg;
    const int n = device_count();
    if (index < 0 || index >= n)
        return rb_error_set(err, RB_E_NOT_FOUND, "no %s device %d (this machine has %d)", RB_GPU_KIND_NAME, index, n);
    cudaDeviceProp prop;
    cudaError_t e = cudaSetDevice(index);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, index);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rb_error_set(err, RB_E_BACKEND, "%s:%d: %s", RB_GPU_KIND_NAME, index, cudaGetErrorString(e));
    }
    gpu_backend *g = (gpu_backend *)calloc(1, sizeof *g);
    if (!g) return rb_error_set(err, RB_E_NOMEM, "out of host memory for a backend");
    g->base.vt = &k_gpu_vtable;
    g->base.graph_vt = &k_gpu_graph_vtable;
    g->base.kind = RB_GPU_DEVICE_KIND;
    g->base.index = index;
    snprintf(g->base.name, sizeof g->base.name, "%s:%d", RB_GPU_KIND_NAME, index);
    g->device = index;
    g->warp = prop.warpSize > 0 ? prop.warpSize : 32;
    g->n_sm = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
#if !defined(RBEE_GPU_HIP)
    g->pdl = prop.major >= 9;
#endif
    rb_status s = RB_OK;
    const char *what = "stream";
    e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    for (int i = 0; e == cudaSuccess && i < 2; i++) {
        what = "pinned staging buffer";
        e = cudaMallocHost(&g->staging[i], STAGING_BYTES);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&g->staging_ev[i], cudaEventDisableTiming);
    }
    g->staging_cap = STAGING_BYTES;
    if (e == cudaSuccess) {
        what = "decode attention counters";
        e = cudaMalloc((void **)&g->att_cnt, ATT_DEC_COUNTERS * sizeof(unsigned));
        if (e == cudaSuccess) e = cudaMemsetAsync(g->att_cnt, 0, ATT_DEC_COUNTERS * sizeof(unsigned), g->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(g->stream);
    }
    if (e != cudaSuccess) {
        s = rb_error_set(err, RB_E_BACKEND, "%s: cannot create the %s: %s", g->base.name, what, cudaGetErrorString(e));
        (void)cudaGetLastError();
    }
#if !defined(RBEE_GPU_HIP)
    if (s == RB_OK) {
        cublasStatus_t bs = cublasCreate(&g->blas);
        if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(g->blas, g->stream);
        if (bs != CUBLAS_STATUS_SUCCESS) {
            g->blas = NULL;
            s = rb_error_set(err, RB_E_BACKEND, "%s: cuBLAS initialisation failed (status %d)", g->base.name, (int)bs);
        }
        if (s == RB_OK && cublasLtCreate(&g->blas_lt) != CUBLAS_STATUS_SUCCESS) g->blas_lt = NULL; /* optional */
    }
#endif
    if (s != RB_OK) {
        g_destroy(&g->base);
        return s;
    }
    gpu_trace_init(g);
#if defined(RBEE_CUDNN)
    gpu_cudnn_open(g); /* absent or unusable: our convolution kernels */
#endif
    *out = &g->base;
    return RB_OK;
}

static rb_status list(rb_device_info *infos, int max, int *n, rb_error *err) {
    (void)err;
    const int cnt = device_count();
    for (int i = 0; i < cnt && i < max; i++) {
        cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
            (void)cudaGetLastError();
            memset(&infos[i], 0, sizeof infos[i]);
            infos[i].kind = RB_GPU_DEVICE_KIND;
            infos[i].index = i;
            snprintf(infos[i].name, sizeof infos[i].name, "(unreadable device)");
            continue;
        }
        fill_info(i, &prop, &infos[i]);
    }
    *n = cnt;
    return RB_OK;
}

} // namespace RB_GPU_NS

extern "C" rb_status RB_GPU_CREATE(int index, const rb_backend_config *cfg, rb_backend **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "out is NULL");
    *out = NULL;
    return RB_GPU_NS::create(index, cfg, out, err);
}

extern "C" rb_status RB_GPU_TUNE(rb_backend *be, const rb_gpu_tuning *t) {
    if (!be || !t || be->kind != RB_GPU_DEVICE_KIND) return RB_E_UNSUPPORTED;
    RB_GPU_NS::gb(be)->tune = *t;
    return RB_OK;
}

extern "C" rb_status RB_GPU_CONV_STATS(rb_backend *be, rb_gpu_conv_stats *out) {
    if (!be || !out || be->kind != RB_GPU_DEVICE_KIND) return RB_E_UNSUPPORTED;
    const RB_GPU_NS::gpu_backend *g = RB_GPU_NS::gb(be);
#if defined(RBEE_CUDNN)
    out->cudnn_loaded = RB_GPU_NS::gpu_cudnn_describe(g, NULL, 0);
#else
    out->cudnn_loaded = false;
#endif
    out->cudnn_convs = g->conv_dnn;
    out->own_convs = g->conv_own;
    out->moe_gemm_calls = g->moe_gemm;
    out->moe_mv_calls = g->moe_mv;
    return RB_OK;
}

extern "C" rb_status RB_GPU_LIST(rb_device_info *infos, int max, int *n, rb_error *err) {
    return RB_GPU_NS::list(infos, max, n, err);
}

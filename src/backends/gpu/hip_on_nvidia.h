/* HIP on NVIDIA without HIP's NVIDIA headers. The ROCm backend's HIP host
 * path (the rbrocm namespace, gpu_vendor.h's cuda* -> hip* names, no cuBLAS,
 * the own tiled GEMM, warp width from the device) can only be run on the lent
 * NVIDIA GPU, and Debian 12's HIP 5.2 `nvidia_detail` headers no longer
 * compile against CUDA 13 (removed texture references, cudaDeviceProp
 * fields, changed cudaMemAdvise / graph signatures). So, with
 * -DRBEE_HIP=ON -DRBEE_HIP_NVIDIA=ON, gpu_vendor.h includes this header
 * instead of <hip/hip_runtime.h>: it declares exactly the HIP names the
 * backend uses, with HIP 5.2's signatures, on top of the CUDA runtime, and
 * nvcc compiles the same .cu files with RBEE_GPU_HIP defined.
 *
 * Rules: a HIP name whose HIP signature equals CUDA's is a one-line inline
 * forwarder; where HIP differs (hipDeviceProp_t, hipHostMalloc's flags,
 * hipGraphInstantiate's error-node form) the HIP form is kept and adapted,
 * so a call that would not compile against real HIP does not compile here
 * either. Every HIP name that gpu_vendor.h maps to, or the kernels call
 * under RBEE_GPU_HIP, must be in this file; scripts/build-gpu.sh builds this
 * flavour, so a missing name fails CI. */
#ifndef RBEE_HIP_ON_NVIDIA_H
#define RBEE_HIP_ON_NVIDIA_H

#if !defined(__CUDACC__)
#error "hip_on_nvidia.h is for nvcc (RBEE_HIP_NVIDIA builds)"
#endif

#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* what HIP's own headers define on this platform */
#define __HIP_PLATFORM_NVIDIA__ 1
#if defined(__CUDA_ARCH__)
#define __HIP_DEVICE_COMPILE__ 1
#endif

/* ---- types and constants ---- */
typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
typedef cudaEvent_t hipEvent_t;
typedef cudaMemcpyKind hipMemcpyKind;
typedef cudaGraph_t hipGraph_t;
typedef cudaGraphExec_t hipGraphExec_t;
typedef cudaGraphNode_t hipGraphNode_t;
typedef cudaStreamCaptureMode hipStreamCaptureMode;
typedef cudaStreamCaptureStatus hipStreamCaptureStatus;

static constexpr hipError_t hipSuccess = cudaSuccess;
static constexpr hipError_t hipErrorOutOfMemory = cudaErrorMemoryAllocation;
static constexpr hipError_t hipErrorInvalidValue = cudaErrorInvalidValue;
static constexpr hipMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
static constexpr hipMemcpyKind hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
static constexpr hipMemcpyKind hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
static constexpr hipMemcpyKind hipMemcpyDefault = cudaMemcpyDefault;
static constexpr unsigned hipStreamNonBlocking = cudaStreamNonBlocking;
static constexpr unsigned hipEventDisableTiming = cudaEventDisableTiming;
static constexpr unsigned hipHostMallocDefault = cudaHostAllocDefault;
/* CUDA defines these two flags as macros, and gpu_vendor.h maps the CUDA
 * names to the HIP ones: with the values captured above, the CUDA macros go,
 * so that mapping does not redefine them (the cuda_runtime.h that nvcc
 * includes first is already processed). */
#undef cudaStreamNonBlocking
#undef cudaEventDisableTiming
static constexpr hipStreamCaptureMode hipStreamCaptureModeGlobal = cudaStreamCaptureModeGlobal;
static constexpr hipStreamCaptureMode hipStreamCaptureModeThreadLocal = cudaStreamCaptureModeThreadLocal;
static constexpr hipStreamCaptureMode hipStreamCaptureModeRelaxed = cudaStreamCaptureModeRelaxed;
static constexpr hipStreamCaptureStatus hipStreamCaptureStatusNone = cudaStreamCaptureStatusNone;
static constexpr hipStreamCaptureStatus hipStreamCaptureStatusActive = cudaStreamCaptureStatusActive;
static constexpr hipStreamCaptureStatus hipStreamCaptureStatusInvalidated = cudaStreamCaptureStatusInvalidated;

/* HIP's device properties are a struct of their own (gcnArchName has no CUDA
 * counterpart; CUDA 13 dropped clockRate and friends from cudaDeviceProp).
 * Only fields with a meaning on NVIDIA are kept; gcnArchName reads
 * "sm_<major><minor>". */
struct hipDeviceProp_t {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;       /* kHz */
    int memoryClockRate; /* kHz */
    int memoryBusWidth;  /* bits */
    int major;
    int minor;
    int multiProcessorCount;
    int l2CacheSize;
    int maxThreadsPerMultiProcessor;
    size_t maxSharedMemoryPerMultiProcessor;
    char gcnArchName[256];
};

/* ---- runtime API ---- */
inline const char *hipGetErrorString(hipError_t e) { return cudaGetErrorString(e); }
inline hipError_t hipGetLastError(void) { return cudaGetLastError(); }
inline hipError_t hipGetDeviceCount(int *n) { return cudaGetDeviceCount(n); }
inline hipError_t hipSetDevice(int d) { return cudaSetDevice(d); }
inline hipError_t hipGetDevice(int *d) { return cudaGetDevice(d); }
inline hipError_t hipDriverGetVersion(int *v) { return cudaDriverGetVersion(v); }
inline hipError_t hipDeviceSynchronize(void) { return cudaDeviceSynchronize(); }
inline hipError_t hipMemGetInfo(size_t *free_b, size_t *total_b) { return cudaMemGetInfo(free_b, total_b); }

inline hipError_t hipGetDeviceProperties(hipDeviceProp_t *p, int dev) {
    if (!p) return hipErrorInvalidValue;
    cudaDeviceProp c;
    cudaError_t e = cudaGetDeviceProperties(&c, dev);
    if (e != cudaSuccess) return e;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", c.name);
    p->totalGlobalMem = c.totalGlobalMem;
    p->sharedMemPerBlock = c.sharedMemPerBlock;
    p->regsPerBlock = c.regsPerBlock;
    p->warpSize = c.warpSize;
    p->maxThreadsPerBlock = c.maxThreadsPerBlock;
    for (int i = 0; i < 3; i++) {
        p->maxThreadsDim[i] = c.maxThreadsDim[i];
        p->maxGridSize[i] = c.maxGridSize[i];
    }
    /* attributes CUDA 13 no longer mirrors in the struct; 0 if unreadable */
    if (cudaDeviceGetAttribute(&p->clockRate, cudaDevAttrClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&p->memoryClockRate, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&p->memoryBusWidth, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess)
        (void)cudaGetLastError();
    p->major = c.major;
    p->minor = c.minor;
    p->multiProcessorCount = c.multiProcessorCount;
    p->l2CacheSize = c.l2CacheSize;
    p->maxThreadsPerMultiProcessor = c.maxThreadsPerMultiProcessor;
    p->maxSharedMemoryPerMultiProcessor = c.sharedMemPerMultiprocessor;
    snprintf(p->gcnArchName, sizeof p->gcnArchName, "sm_%d%d", c.major, c.minor);
    return hipSuccess;
}

/* memory: HIP 5.2 has plain void** forms plus templates for typed pointers */
inline hipError_t hipMalloc(void **p, size_t n) { return cudaMalloc(p, n); }
template <class T> inline hipError_t hipMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
inline hipError_t hipFree(void *p) { return cudaFree(p); }
inline hipError_t hipHostMalloc(void **p, size_t n, unsigned flags) { return cudaHostAlloc(p, n, flags); }
template <class T> inline hipError_t hipHostMalloc(T **p, size_t n, unsigned flags = hipHostMallocDefault) {
    return cudaHostAlloc((void **)p, n, flags);
}
inline hipError_t hipHostFree(void *p) { return cudaFreeHost(p); }
inline hipError_t hipHostGetDevicePointer(void **d, void *h, unsigned flags) {
    return cudaHostGetDevicePointer(d, h, flags);
}
inline hipError_t hipMemcpy(void *d, const void *s, size_t n, hipMemcpyKind k) { return cudaMemcpy(d, s, n, k); }
inline hipError_t hipMemcpyAsync(void *d, const void *s, size_t n, hipMemcpyKind k, hipStream_t st = 0) {
    return cudaMemcpyAsync(d, s, n, k, st);
}
inline hipError_t hipMemsetAsync(void *d, int v, size_t n, hipStream_t st = 0) { return cudaMemsetAsync(d, v, n, st); }

/* streams and events */
inline hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned flags) { return cudaStreamCreateWithFlags(s, flags); }
inline hipError_t hipStreamSynchronize(hipStream_t s) { return cudaStreamSynchronize(s); }
inline hipError_t hipStreamDestroy(hipStream_t s) { return cudaStreamDestroy(s); }
inline hipError_t hipEventCreateWithFlags(hipEvent_t *e, unsigned flags) { return cudaEventCreateWithFlags(e, flags); }
inline hipError_t hipEventRecord(hipEvent_t e, hipStream_t s = 0) { return cudaEventRecord(e, s); }
inline hipError_t hipEventSynchronize(hipEvent_t e) { return cudaEventSynchronize(e); }
inline hipError_t hipEventDestroy(hipEvent_t e) { return cudaEventDestroy(e); }

/* kernel attributes: HIP 5.2 takes the kernel as const void * (no template) */
typedef cudaFuncAttribute hipFuncAttribute;
static constexpr hipFuncAttribute hipFuncAttributeMaxDynamicSharedMemorySize =
    cudaFuncAttributeMaxDynamicSharedMemorySize;
inline hipError_t hipFuncSetAttribute(const void *fn, hipFuncAttribute attr, int value) {
    return cudaFuncSetAttribute(fn, attr, value);
}

/* stream capture and graphs (HIP 5.2 signatures) */
inline hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode m) { return cudaStreamBeginCapture(s, m); }
inline hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t *g) { return cudaStreamEndCapture(s, g); }
inline hipError_t hipStreamIsCapturing(hipStream_t s, hipStreamCaptureStatus *st) {
    return cudaStreamIsCapturing(s, st);
}
/* HIP keeps CUDA 11's error-node/log form; CUDA 12+ takes flags only */
inline hipError_t hipGraphInstantiate(hipGraphExec_t *x, hipGraph_t g, hipGraphNode_t *err_node, char *log,
                                      size_t log_size) {
    if (err_node) *err_node = NULL;
    if (log && log_size) log[0] = '\0';
    return cudaGraphInstantiate(x, g, 0);
}
inline hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t *x, hipGraph_t g, unsigned long long flags) {
    return cudaGraphInstantiateWithFlags(x, g, flags);
}
inline hipError_t hipGraphLaunch(hipGraphExec_t x, hipStream_t s) { return cudaGraphLaunch(x, s); }
inline hipError_t hipGraphExecDestroy(hipGraphExec_t x) { return cudaGraphExecDestroy(x); }
inline hipError_t hipGraphDestroy(hipGraph_t g) { return cudaGraphDestroy(g); }

/* ---- device side: HIP's mask-less shuffles over the whole warp. Defined
 * after cuda_fp16.h and cuda_runtime.h, whose deprecated non-sync shuffle
 * declarations would otherwise be rewritten by these macros. ---- */
#define __shfl_xor(v, ...) __shfl_xor_sync(0xffffffffu, (v), __VA_ARGS__)
#define __shfl(v, ...) __shfl_sync(0xffffffffu, (v), __VA_ARGS__)

#endif

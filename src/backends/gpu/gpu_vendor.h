/* One source for two vendors: the GPU backend is written in CUDA dialect, and
 * this header maps the runtime API and intrinsic names it uses onto HIP when
 * compiled by clang in HIP mode (RBEE_GPU_HIP, set by the ROCm build). It also
 * defines RB_WARP, the physical warp/wavefront width seen by device code (32
 * on NVIDIA and RDNA, 64 on CDNA), and the shuffle macros the reductions use,
 * so no kernel hard-codes 32. Host code must not use RB_WARP: one HIP binary
 * holds wave32 and wave64 code objects, so the host asks the device. */
#ifndef RBEE_GPU_VENDOR_H
#define RBEE_GPU_VENDOR_H

#if defined(RBEE_GPU_HIP)
#if defined(RBEE_HIP_NVIDIA) /* HIP flavour built by nvcc to run on NVIDIA */
#include "backends/gpu/hip_on_nvidia.h"
#else
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#endif

#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaSetDevice hipSetDevice
#define cudaDeviceProp hipDeviceProp_t
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaMemGetInfo hipMemGetInfo
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMallocHost hipHostMalloc
#define cudaFreeHost hipHostFree
#define cudaHostGetDevicePointer hipHostGetDevicePointer
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyDefault hipMemcpyDefault
#define cudaMemcpyKind hipMemcpyKind
#define cudaStream_t hipStream_t
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamDestroy hipStreamDestroy
#define cudaEvent_t hipEvent_t
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventDestroy hipEventDestroy
/* graph capture and replay (HIP 5.2 has these; beta there) */
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaGraphInstantiateWithFlags hipGraphInstantiateWithFlags
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraphExecDestroy hipGraphExecDestroy
#define cudaGraphDestroy hipGraphDestroy
#define cudaDriverGetVersion hipDriverGetVersion
/* > 48 KiB of dynamic shared memory: HIP's NVIDIA platform needs the opt-in as
 * CUDA does (HIP 5.2 takes the kernel as const void *) */
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize

/* HIP 5.2 has no *_sync shuffles; the mask is meaningless on AMD. */
#define RB_SHFL_XOR(v, m) __shfl_xor((v), (m), RB_WARP)
#define RB_SHFL(v, l) __shfl((v), (l), RB_WARP)
#if defined(RBEE_HIP_NVIDIA)
#define RB_WARP 32 /* HIP on NVIDIA: a warp is 32 lanes */
#elif defined(__HIP_DEVICE_COMPILE__) && defined(__AMDGCN_WAVEFRONT_SIZE)
#define RB_WARP __AMDGCN_WAVEFRONT_SIZE
#else
#define RB_WARP 64 /* host pass: never used by host code */
#endif
#define RB_GPU_NS rbrocm
#define RB_GPU_KIND_NAME "rocm"
/* Orders shared-memory writes and reads among the lanes of one 32-lane group
 * (a warp on NVIDIA, half or all of a wavefront on AMD, which runs in
 * lockstep: only the memory wait is needed). */
#if defined(RBEE_HIP_NVIDIA)
#define RB_GROUP_SYNC() __syncwarp()
#else
#define RB_GROUP_SYNC() __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "wavefront")
#endif
/* A load of data read once (weights streamed by the matrix-vector kernels). */
#define RB_LD_STREAM(p) (*(p))
/* A load that bypasses the (incoherent) L1: data another block of the same
 * kernel wrote and published with a fence and an atomic. */
#if defined(RBEE_HIP_NVIDIA)
#define RB_LD_L2(p) __ldcg(p)
#else
#define RB_LD_L2(p) (*(const volatile float *)(p))
#endif

#else /* NVIDIA CUDA */
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define RB_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m), RB_WARP)
#define RB_SHFL(v, l) __shfl_sync(0xffffffffu, (v), (l), RB_WARP)
#define RB_WARP 32
#define RB_GPU_NS rbcuda
#define RB_GPU_KIND_NAME "cuda"
#define RB_GROUP_SYNC() __syncwarp()
#define RB_LD_STREAM(p) __ldcs(p)
#define RB_LD_L2(p) __ldcg(p)
#endif

/* Largest warp width any target has: sizes per-warp shared arrays. */
#define RB_WARP_MAX 64

#endif

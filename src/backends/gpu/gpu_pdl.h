/* Programmatic dependent launch (CUDA, sm_90 and newer): a kernel launched
 * with gpu_launch_pdl may start while the kernel before it in the stream is
 * still running. Before its first read of anything that kernel (or any
 * earlier op) wrote, and before its first write, it calls
 * rb_grid_dep_wait(), which waits for the earlier kernels to finish and
 * their writes to be visible. What it may do before the wait is read memory
 * no queued op writes: constant buffers (rb_buffer_set_constant), i.e. model
 * weights. Kernels that usually precede such a launch call
 * rb_grid_dep_trigger() at their start so the dependent kernel's blocks are
 * scheduled as soon as resources allow. In a decode step this overlaps each
 * matrix-vector kernel's first weight loads with the small kernel before it
 * (and hides the launch gap) instead of starting cold after it.
 * The small per-layer kernels of a decode step (norms, rope, set_rows,
 * attention and its merge, glu) are launched the same way and wait first
 * thing: that hides their launch gap behind the kernel ahead.
 * On HIP, and on CUDA devices before sm_90, both device calls are no-ops and
 * gpu_launch_pdl is an ordinary launch. */
#ifndef RBEE_GPU_PDL_H
#define RBEE_GPU_PDL_H

#include "backends/gpu/gpu_internal.h"

namespace RB_GPU_NS {

__device__ __forceinline__ void rb_grid_dep_wait() {
#if !defined(RBEE_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void rb_grid_dep_trigger() {
#if !defined(RBEE_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* Launches kernel<<<grid, block, smem, stream>>>(args...) with programmatic
 * stream serialization where the device has it and pdl is true. */
template <typename... KArgs, typename... Args>
static cudaError_t gpu_launch_pdl(gpu_backend *g, bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                                  size_t smem, Args... args) {
#if !defined(RBEE_GPU_HIP)
    if (pdl && g->pdl) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.stream = g->stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        return cudaLaunchKernelEx(&cfg, kernel, args...);
    }
#else
    (void)pdl;
#endif
    kernel<<<grid, block, smem, g->stream>>>(args...);
    return cudaSuccess; /* launch errors are read by gpu_check_launch */
}

} // namespace RB_GPU_NS

#endif

/* Diagnostics: per-block timestamps of the decode kernels, to see where a
 * decode step's time goes between and inside launches (kernel boundaries,
 * dependency waits, activation quantization, tails), which Nsight Compute's
 * one-kernel-at-a-time replay cannot show. With RBEE_GPU_TRACE=FILE set when
 * the backend is created, each traced launch gets a slot of a ring in pinned
 * host memory that the kernel's blocks write directly (thread 0: up to
 * GPU_TRACE_MARKS device-clock readings each, ns on NVIDIA, wall-clock ticks
 * on AMD); the host records what the launch was. Graph replays write their
 * captured slots again, so after a run the ring holds the last replay of
 * each captured launch. The ring is written to FILE as text when the
 * backend is destroyed (one "launch" line, then a line per block; marks:
 * 0 block start, 1 past the dependency wait, 2 products: activations
 * quantized, attention: thread 0's keys and values done, 3 block end
 * (attention: thread 0's output, where the block writes it), and for
 * attention 4 query and position loaded, 5 thread 0's first keys scored,
 * for products 4 a fused norm's weight staged, 5 at the dependency wait;
 * 0 = not reached; then the block's multiprocessor + 1, 0 where unknown:
 * which blocks shared one, the second of which had started late), and
 * tools/bench/gpu_trace_summary.py summarises it. Off
 * (a NULL slot, no extra work in the kernels but a test) unless the variable
 * is set. */
#ifndef RBEE_GPU_TRACE_H
#define RBEE_GPU_TRACE_H

#include "backends/gpu/gpu_internal.h"

namespace RB_GPU_NS {

#define GPU_TRACE_LAUNCHES 2048 /* ring of launches */
#define GPU_TRACE_BLOCKS 2048   /* blocks traced per launch (more: the rest unrecorded) */
#define GPU_TRACE_MARKS 7       /* readings a block (the last: its multiprocessor + 1) */

/* what a traced launch was */
struct gpu_trace_launch {
    unsigned seq;  /* launch number since the backend was created */
    int kind;      /* GPU_TRACE_* */
    int dt;        /* weight dtype (products) */
    int flags;     /* products: 1 norm, 2 add, 4 glu_out, 8 rope, 16 store */
    int64_t n, k;  /* products: rows and K; attention: rows x heads and keys */
    unsigned blocks;
};

#define GPU_TRACE_PRODUCT 1
#define GPU_TRACE_ATTENTION 2

struct gpu_trace {
    unsigned long long *ts; /* pinned: [GPU_TRACE_LAUNCHES][GPU_TRACE_BLOCKS][GPU_TRACE_MARKS] */
    gpu_trace_launch meta[GPU_TRACE_LAUNCHES];
    unsigned next;
    char path[512];
};

/* The device clock: %globaltimer (ns) on NVIDIA; on AMD the constant-rate
 * s_memrealtime counter where the target has it (else the cycle counter,
 * whose readings on different compute units do not compare). */
__device__ __forceinline__ unsigned long long gpu_clock_now() {
#if defined(RBEE_GPU_HIP) && !defined(RBEE_HIP_NVIDIA)
#if !defined(__HIP_DEVICE_COMPILE__)
    return 0; /* host pass */
#elif __has_builtin(__builtin_amdgcn_s_memrealtime)
    return (unsigned long long)__builtin_amdgcn_s_memrealtime();
#else
    return (unsigned long long)__builtin_readcyclecounter();
#endif
#else
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#endif
}

/* The multiprocessor (AMD: compute unit) the block runs on. */
__device__ __forceinline__ unsigned gpu_sm_id() {
#if defined(RBEE_GPU_HIP) && !defined(RBEE_HIP_NVIDIA)
#if !defined(__HIP_DEVICE_COMPILE__)
    return 0; /* host pass */
#else
    return __smid();
#endif
#else
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
#endif
}

/* Reading t as `mark` of this block in a launch's slot. */
__device__ __forceinline__ void gpu_trace_put(unsigned long long *slot, int mark, unsigned long long t) {
    const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (b < GPU_TRACE_BLOCKS) slot[(size_t)b * GPU_TRACE_MARKS + mark] = t;
}
/* The clock now as `mark` of this block (thread 0; no-op for a NULL slot). */
__device__ __forceinline__ void gpu_trace_mark(unsigned long long *slot, int mark) {
    if (slot && threadIdx.x == 0) gpu_trace_put(slot, mark, gpu_clock_now());
}
/* Mark 0 (the block's start) and the block's multiprocessor + 1. */
__device__ __forceinline__ void gpu_trace_start(unsigned long long *slot) {
    if (slot && threadIdx.x == 0) {
        gpu_trace_put(slot, 0, gpu_clock_now());
        gpu_trace_put(slot, GPU_TRACE_MARKS - 1, (unsigned long long)gpu_sm_id() + 1);
    }
}
/* The same, read once `dep` has been computed (NVIDIA: the clock read takes
 * it as an operand, so the compiler cannot move it ahead of the loads that
 * feed dep). */
__device__ __forceinline__ void gpu_trace_mark_after(unsigned long long *slot, int mark, float dep) {
    if (slot && threadIdx.x == 0) {
#if defined(RBEE_GPU_HIP) && !defined(RBEE_HIP_NVIDIA)
        (void)dep;
        gpu_trace_put(slot, mark, gpu_clock_now());
#else
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "f"(dep));
        gpu_trace_put(slot, mark, t);
#endif
    }
}

/* Host: sets the trace up when RBEE_GPU_TRACE is set (g->trace stays NULL
 * otherwise, or when pinned memory is short: tracing is best effort). */
void gpu_trace_init(gpu_backend *g);
/* Host: the slot for the launch about to be queued, or NULL when not tracing. */
unsigned long long *gpu_trace_slot(gpu_backend *g, int kind, int dt, int flags, int64_t n, int64_t k,
                                   unsigned blocks);
/* Host: writes the ring to its file and frees it (stream synchronized). */
void gpu_trace_finish(gpu_backend *g);

} // namespace RB_GPU_NS

#endif

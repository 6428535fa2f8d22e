/* What the attention kernels of ops_attention.cu share: their argument
 * block (masks, positions, key splitting) and the query position lookup -
 * q_pos0 + i, or the device array q_pos read by the kernel itself, so a
 * launch does not depend on where a decode step is (graph replay). */
#ifndef RBEE_GPU_ATT_COMMON_CUH
#define RBEE_GPU_ATT_COMMON_CUH

#include "backends/gpu/gpu_common.cuh"
#include "backends/gpu/gpu_trace.h"

namespace RB_GPU_NS {

struct att_args {
    float scale, softcap;
    int causal, window;
    int64_t q_pos0;
    const char *qpos; /* nullable: i32 positions on the device; key splits are then absolute in [0, Tk) */
    int64_t qpos_nb;  /* byte stride of qpos */
    int nsplit;       /* key splits per query row */
    int64_t kchunk;   /* keys per split */
    int kvec;         /* generic kernel: k rows are contiguous f16 with D % 8 == 0, 16-byte aligned */
    float *part;      /* nsplit > 1: [row][split] of (m, l, acc[Dv]), row = (b Tq + i) Hq + h */
    /* decode kernel only (att_decode.cuh): nsplit is its most blocks per row */
    int hb, nsub;  /* query heads per block, warps per head */
    int minch;     /* fewest key chunks per warp before a row takes another block */
    unsigned *cnt; /* per row group: blocks that finished (the last resets it) */
    int early;     /* one query over settled rows (rb_attn_params.keys_settled): its position and first
                    * chunk's rows below it read before the dependency wait, 1 by every block, 2 by the
                    * first block of each row */
    unsigned long long *trace; /* decode kernel: RBEE_GPU_TRACE slot (gpu_trace.h) or NULL */
};

/* Absolute position of query i. The host keeps q_pos0 + Tq within int
 * range for the kernels that use this int form. */
__device__ __forceinline__ int att_pos(const att_args &a, int64_t i) {
    return a.qpos ? *(const int32_t *)(a.qpos + i * a.qpos_nb) : (int)(a.q_pos0 + i);
}

__device__ __forceinline__ int64_t att_pos64(const att_args &a, int64_t i) {
    return a.qpos ? (int64_t) * (const int32_t *)(a.qpos + i * a.qpos_nb) : a.q_pos0 + i;
}

/* Keys [lo, hi) that query position pos may see in split `split`; empty
 * when hi <= lo. */
__device__ __forceinline__ void att_range(const att_args &a, int64_t pos, int64_t Tk, int64_t split, int64_t *lo,
                                          int64_t *hi) {
    int64_t kb = 0, ke = Tk;
    if (a.causal && pos + 1 < ke) ke = pos + 1;
    if (a.window > 0 && pos - a.window + 1 > kb) kb = pos - a.window + 1;
    if (a.nsplit > 1) {
        const int64_t s0 = (a.qpos ? 0 : kb) + split * a.kchunk;
        if (s0 > kb) kb = s0;
        if (s0 + a.kchunk < ke) ke = s0 + a.kchunk;
    }
    *lo = kb;
    *hi = ke;
}

} // namespace RB_GPU_NS

#endif

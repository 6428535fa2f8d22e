/* What the attention kernels of ops_attention.cu share: their argument
 * block (masks, positions, key splitting, sinks), the query position lookup -
 * q_pos0 + i, or the device array q_pos read by the kernel itself, so a
 * launch does not depend on where a decode step is (graph replay) - and the
 * final normalisation of a row, where attention sinks join the softmax
 * denominator. */
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
    int64_t qpos_nb;  /* byte stride of qpos between queries */
    int64_t qpos_nbb; /* and between batch items (0: one column for the batch) */
    const char *kvidx; /* nullable: i32 k/v slice (dim 3) of each batch item (rb_attn_params.kv_index) */
    int64_t kvidx_nb;  /* its byte stride */
    int64_t kv_n;      /* k's dim 3: slices outside [0, kv_n) give the item no keys */
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
    const char *sinks; /* nullable: f32 sink logit of each query head (rb_attn_params.sinks) */
    int64_t sinks_nb;  /* its byte stride */
};

/* Absolute position of query i of batch item b. The host keeps q_pos0 + Tq
 * within int range for the kernels that use this int form. */
__device__ __forceinline__ int att_pos(const att_args &a, int64_t i, int64_t b) {
    return a.qpos ? *(const int32_t *)(a.qpos + i * a.qpos_nb + b * a.qpos_nbb) : (int)(a.q_pos0 + i);
}

__device__ __forceinline__ int64_t att_pos64(const att_args &a, int64_t i, int64_t b) {
    return a.qpos ? (int64_t) * (const int32_t *)(a.qpos + i * a.qpos_nb + b * a.qpos_nbb) : a.q_pos0 + i;
}

/* The k/v slice (dim 3) batch item b reads: kv_index[b], or b; -1 where
 * the index names none (the item then sees no keys). */
__device__ __forceinline__ int64_t att_kv_slice(const att_args &a, int64_t b) {
    if (!a.kvidx) return b;
    const int64_t s = *(const int32_t *)(a.kvidx + b * a.kvidx_nb);
    return s >= 0 && s < a.kv_n ? s : -1;
}

/* The factor that turns a row's unnormalised sum of values into its
 * output, from the row's running max m and denominator l (over its visible
 * keys): 1 / l, or where the head has a sink logit s (sinks non-NULL:
 * gpt-oss), which joins the denominator without a value,
 * exp(m - m') / (l exp(m - m') + exp(s - m')) with m' = max(m, s). 0 where
 * nothing counts (no visible key and no sink). */
__device__ __forceinline__ float att_out_scale(const char *sinks, int64_t sinks_nb, int64_t h, float m, float l) {
    if (sinks) {
        const float s = *(const float *)(sinks + h * sinks_nb);
        const float mn = s > m ? s : m;
        if (mn != -INFINITY) {
            const float c = m == -INFINITY ? 0.0f : expf(m - mn);
            l = l * c + expf(s - mn);
            return l > 0.0f ? c / l : 0.0f;
        }
    }
    return l > 0.0f ? 1.0f / l : 0.0f;
}

/* Output element of head h from its sum acc (running max m, denominator
 * l): acc / l without sinks, acc att_out_scale(...) with them. */
__device__ __forceinline__ float att_finish(const att_args &a, int64_t h, float m, float l, float acc) {
    if (!a.sinks) return l > 0.0f ? acc / l : 0.0f;
    return acc * att_out_scale(a.sinks, a.sinks_nb, h, m, l);
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

/* Routing of rb_matmul_id on the device (included by ops_matmul_id.cu): the
 * (slot, token) rows r = t k + j of ids [k, T] grouped by expert, so the
 * products read each selected expert's weights once for all its rows and
 * never read the others. One block of MR_THREADS threads, a stable counting
 * sort without atomics on the order:
 *   1. the rows are cut into nseg consecutive segments, one per 32-lane
 *      group; each group counts its segment's rows per expert in shared
 *      memory (seg[s][e]);
 *   2. an exclusive scan over the experts of their totals (and of "used")
 *      gives each expert's first row, each (segment, expert) its first
 *      place, and the list of used experts in ascending order;
 *   3. each group walks its segment in order, 32 rows at a time, a row's
 *      place being its (segment, expert) base plus the number of lower lanes
 *      with the same expert.
 * So a group's rows are in ascending r, and the result does not depend on
 * timing. Output (device scratch, ints): order[R], the rows sorted by
 * expert, and grp = {ng, ue[G], us[G], un[G]}: the ng used experts, the
 * first index of each into order and its row count (G = min(E, R) places).
 * An id outside 0..E-1 (possible only in a graph replay: eager calls check
 * them on the host first) is reported through the ids guard (op 2) and its
 * row left out. Needs nseg E <= MR_SEG_INTS. */
#ifndef RBEE_GPU_MOE_ROUTE_CUH
#define RBEE_GPU_MOE_ROUTE_CUH

#include "backends/gpu/gpu_common.cuh"

namespace RB_GPU_NS {

#define MR_THREADS 1024
#define MR_GROUPS (MR_THREADS / 32)
#define MR_SEG_INTS 8192 /* shared ints for the segment counts (32 KiB) */

/* shuffles within a 32-lane group (half a wavefront on wave64) */
#if defined(RBEE_GPU_HIP)
#define MR_SHFL32(v, l) __shfl((v), (l), 32)
#else
#define MR_SHFL32(v, l) __shfl_sync(0xffffffffu, (v), (l), 32)
#endif

/* the expert of row r = t k + j */
__device__ __forceinline__ int mr_id(const gt &ids, int k, int r) {
    return *(const int32_t *)(ids.p + (int64_t)(r % k) * ids.nb[0] + (int64_t)(r / k) * ids.nb[1]);
}

/* inclusive sum over the lanes 0..lane of a 32-lane group */
__device__ __forceinline__ int mr_scan32(int v, int lane) {
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int o = MR_SHFL32(v, lane >= d ? lane - d : lane);
        if (lane >= d) v += o;
    }
    return v;
}

/* exclusive block-wide sums of a and b (every thread of the block calls),
 * and their totals over the block */
__device__ __forceinline__ void mr_scan2(int a, int b, int *xa, int *xb, int *ta, int *tb, int (*sh)[2]) {
    const int lane = threadIdx.x & 31, g = threadIdx.x >> 5;
    const int ia = mr_scan32(a, lane), ib = mr_scan32(b, lane);
    __syncthreads(); /* sh may still be read from the previous call */
    if (lane == 31) {
        sh[g][0] = ia;
        sh[g][1] = ib;
    }
    __syncthreads();
    if (g == 0) {
        const int va = lane < MR_GROUPS ? sh[lane][0] : 0, vb = lane < MR_GROUPS ? sh[lane][1] : 0;
        const int sa = mr_scan32(va, lane), sb = mr_scan32(vb, lane);
        if (lane < MR_GROUPS) { /* each lane rewrites only the entry it read */
            sh[lane][0] = sa - va;
            sh[lane][1] = sb - vb;
        }
        if (lane == 31) {
            sh[MR_GROUPS][0] = sa;
            sh[MR_GROUPS][1] = sb;
        }
    }
    __syncthreads();
    *xa = sh[g][0] + ia - a;
    *xb = sh[g][1] + ib - b;
    *ta = sh[MR_GROUPS][0];
    *tb = sh[MR_GROUPS][1];
}

/* grid 1, block MR_THREADS; R = k T rows, nseg segments (nseg E <= MR_SEG_INTS,
 * nseg <= MR_GROUPS); G = min(E, R) */
__global__ void __launch_bounds__(MR_THREADS)
    k_moe_route(gt ids, int E, int k, int R, int nseg, int G, int *order, int *grp, int *guard) {
    __shared__ int seg[MR_SEG_INTS];
    __shared__ int scan_sh[MR_GROUPS + 1][2];
    const int tid = threadIdx.x, lane = tid & 31, sg = tid >> 5;
    for (int i = tid; i < nseg * E; i += MR_THREADS) seg[i] = 0;
    __syncthreads();
    const int L = (R + nseg - 1) / nseg, lo = sg * L, hi = lo + L < R ? lo + L : R;
    /* 1: counts per (segment, expert) */
    if (sg < nseg)
        for (int r = lo + lane; r < hi; r += 32) {
            const int e = mr_id(ids, k, r);
            if (e >= 0 && e < E) atomicAdd(&seg[sg * E + e], 1);
            else ids_flag(guard, 2, e, E);
        }
    __syncthreads();
    /* 2: each expert's first row, its segments' first places, the used list */
    int ctot = 0, cused = 0;
    for (int e0 = 0; e0 < E; e0 += MR_THREADS) {
        const int e = e0 + tid;
        int tot = 0;
        if (e < E)
            for (int s = 0; s < nseg; s++) tot += seg[s * E + e];
        int xt, xu, tt, tu;
        mr_scan2(tot, tot > 0 ? 1 : 0, &xt, &xu, &tt, &tu, scan_sh);
        if (e < E) {
            const int off = ctot + xt;
            int run = off;
            for (int s = 0; s < nseg; s++) {
                const int c = seg[s * E + e];
                seg[s * E + e] = run;
                run += c;
            }
            if (tot > 0) {
                const int g = cused + xu;
                grp[1 + g] = e;
                grp[1 + G + g] = off;
                grp[1 + 2 * G + g] = tot;
            }
        }
        ctot += tt;
        cused += tu;
    }
    if (tid == 0) grp[0] = cused;
    __syncthreads();
    /* 3: places, in order within each segment */
    if (sg < nseg)
        for (int r0 = lo; r0 < hi; r0 += 32) { /* uniform over the group */
            const int r = r0 + lane;
            int e = r < hi ? mr_id(ids, k, r) : -1;
            if (e >= E) e = -1;
            int rank = 0;
            bool last = true;
            for (int l = 0; l < 32; l++) {
                const int el = MR_SHFL32(e, l);
                if (el == e && l < lane) rank++;
                if (el == e && l > lane) last = false;
            }
            const int base = e >= 0 ? seg[sg * E + e] : 0;
            RB_GROUP_SYNC(); /* every lane has read its base before the last of each expert moves it */
            if (e >= 0) {
                order[base + rank] = r;
                if (last) seg[sg * E + e] = base + rank + 1;
            }
            RB_GROUP_SYNC();
        }
}

} // namespace RB_GPU_NS

#endif

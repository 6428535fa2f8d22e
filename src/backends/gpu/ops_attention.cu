/* GPU fused attention, flash style: one warp per (query, query head, batch,
 * key split) walks its keys RB_WARP at a time - each lane scores one key
 * against the query held in shared memory, the warp keeps a running max and
 * sum (online softmax), and the lanes accumulate the value rows split over
 * the head dimension. Memory stays linear in Tk. Grouped-query heads, causal
 * and sliding-window masks, q_pos0, an additive mask, soft-capping, f32/f16/
 * bf16 inputs with any strides. When there are few queries (decode) the keys
 * are split over several warps and a second kernel merges the partial
 * results, so a single token still fills the GPU. */
#include "backends/gpu/gpu_common.cuh"

namespace RB_GPU_NS {

#define ATT_THREADS 128
#define ATT_DV_MAX 256
#define ATT_ACC (ATT_DV_MAX / RB_WARP)

struct att_args {
    float scale, softcap;
    int causal, window;
    int64_t q_pos0;
    int nsplit;     /* key splits per query row */
    int64_t kchunk; /* keys per split */
    int kvec;       /* k rows are contiguous f16 with D % 8 == 0, 16-byte aligned */
    float *part;    /* nsplit > 1: [task][split] of (m, l, acc[Dv]) */
};

__device__ __forceinline__ float dot_q_k(const float *qs, const gt &k, const char *kr, int64_t D, int kvec) {
    float s = 0.0f;
    if (kvec) {
        for (int64_t d = 0; d < D; d += 8) {
            const uint4 u = *(const uint4 *)(kr + d * 2);
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int t = 0; t < 4; t++) {
                s += qs[d + 2 * t] * f16_bits_to_f32((uint16_t)(w[t] & 0xffffu));
                s += qs[d + 2 * t + 1] * f16_bits_to_f32((uint16_t)(w[t] >> 16));
            }
        }
    } else {
        for (int64_t d = 0; d < D; d++) s += qs[d] * ldf(k.dt, kr + d * k.nb[0]);
    }
    return s;
}

/* q [D,Tq,Hq,B], k [D,Tk,Hkv,B], v [Dv,Tk,Hkv,B], mask [Tk,Tq] or p == NULL;
 * dst [Dv,Hq,Tq,B]. Task = ((b * Tq + i) * Hq + h) * nsplit + split. */
__global__ void __launch_bounds__(ATT_THREADS) k_attention(gt dst, gt q, gt k, gt v, gt mask, att_args a) {
    extern __shared__ float att_sh[];
    const int lane = threadIdx.x % RB_WARP, wid = threadIdx.x / RB_WARP, nw = blockDim.x / RB_WARP;
    const int64_t D = q.ne[0], Tq = q.ne[1], Hq = q.ne[2], B = q.ne[3], Tk = k.ne[1], Hkv = k.ne[2], Dv = v.ne[0];
    const int64_t ntask = Tq * Hq * B * a.nsplit, task = (int64_t)blockIdx.x * nw + wid;
    const bool live = task < ntask;
    const int64_t split = task % a.nsplit, row = task / a.nsplit;
    const int64_t h = row % Hq, i = (row / Hq) % Tq, b = row / (Hq * Tq);
    const int64_t g = h / (Hq / Hkv);
    float *qs = att_sh + (int64_t)wid * D;
    if (live)
        for (int64_t d = lane; d < D; d += RB_WARP)
            qs[d] = ldf(q.dt, q.p + d * q.nb[0] + i * q.nb[1] + h * q.nb[2] + b * q.nb[3]) * a.scale;
    __syncthreads();
    if (!live) return;

    const int64_t pos = a.q_pos0 + i;
    int64_t kbeg = 0, kend = Tk;
    if (a.causal && pos + 1 < kend) kend = pos + 1;
    if (a.window > 0 && pos - a.window + 1 > kbeg) kbeg = pos - a.window + 1;
    {
        const int64_t s0 = kbeg + split * a.kchunk, s1 = s0 + a.kchunk;
        kbeg = s0;
        if (s1 < kend) kend = s1;
    }
    const char *kb = k.p + g * k.nb[2] + b * k.nb[3];
    const char *vb = v.p + g * v.nb[2] + b * v.nb[3];
    float m = -INFINITY, l = 0.0f, acc[ATT_ACC];
#pragma unroll
    for (int t = 0; t < ATT_ACC; t++) acc[t] = 0.0f;

    for (int64_t j0 = kbeg; j0 < kend; j0 += RB_WARP) {
        const int64_t j = j0 + lane;
        float s = -INFINITY;
        if (j < kend && !(a.window > 0 && pos - j >= a.window)) {
            s = dot_q_k(qs, k, kb + j * k.nb[1], D, a.kvec);
            if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
            if (mask.p) s += ldf(mask.dt, mask.p + j * mask.nb[0] + i * mask.nb[1]);
        }
        const float cmax = warp_max(s);
        if (cmax == -INFINITY) continue;
        const float mnew = fmaxf(m, cmax), corr = expf(m - mnew);
        l *= corr;
#pragma unroll
        for (int t = 0; t < ATT_ACC; t++) acc[t] *= corr;
        m = mnew;
        const float pj = s == -INFINITY ? 0.0f : expf(s - mnew);
        l += warp_sum(pj);
        const int64_t nk = kend - j0 < RB_WARP ? kend - j0 : RB_WARP;
        for (int jj = 0; jj < (int)nk; jj++) {
            const float w = RB_SHFL(pj, jj);
            if (w == 0.0f) continue; /* uniform: every lane got the same w */
            const char *vr = vb + (j0 + jj) * v.nb[1];
#pragma unroll
            for (int t = 0; t < ATT_ACC; t++) {
                const int64_t d = lane + (int64_t)t * RB_WARP;
                if (d < Dv) acc[t] += w * ldf(v.dt, vr + d * v.nb[0]);
            }
        }
    }
    if (a.nsplit > 1) {
        float *pp = a.part + task * (Dv + 2);
        if (lane == 0) {
            pp[0] = m;
            pp[1] = l;
        }
#pragma unroll
        for (int t = 0; t < ATT_ACC; t++) {
            const int64_t d = lane + (int64_t)t * RB_WARP;
            if (d < Dv) pp[2 + d] = acc[t];
        }
        return;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    char *dr = dst.p + h * dst.nb[1] + i * dst.nb[2] + b * dst.nb[3];
#pragma unroll
    for (int t = 0; t < ATT_ACC; t++) {
        const int64_t d = lane + (int64_t)t * RB_WARP;
        if (d < Dv) *(float *)(dr + d * dst.nb[0]) = acc[t] * inv;
    }
}

/* Merges the nsplit partial (m, l, acc) of each query row; one thread per
 * output element. */
__global__ void k_att_merge(gt dst, const float *part, int nsplit, int64_t nrow) {
    const int64_t Dv = dst.ne[0], Hq = dst.ne[1], Tq = dst.ne[2];
    const int64_t n = nrow * Dv;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t d = e % Dv, row = e / Dv;
        const int64_t h = row % Hq, i = (row / Hq) % Tq, b = row / (Hq * Tq);
        const float *pp = part + row * nsplit * (Dv + 2);
        float m = -INFINITY;
        for (int s = 0; s < nsplit; s++) m = fmaxf(m, pp[s * (Dv + 2)]);
        float l = 0.0f, acc = 0.0f;
        if (m != -INFINITY)
            for (int s = 0; s < nsplit; s++) {
                const float ms = pp[s * (Dv + 2)];
                if (ms == -INFINITY) continue;
                const float c = expf(ms - m);
                l += c * pp[s * (Dv + 2) + 1];
                acc += c * pp[s * (Dv + 2) + 2 + d];
            }
        *(float *)(dst.p + d * dst.nb[0] + h * dst.nb[1] + i * dst.nb[2] + b * dst.nb[3]) = l > 0.0f ? acc / l : 0.0f;
    }
}

rb_status gpu_attention(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k, const rb_tensor *v,
                        const rb_attn_params *p) {
    gpu_backend *g = gb(be);
    const int64_t D = q->ne[0], Tq = q->ne[1], Hq = q->ne[2], B = q->ne[3], Tk = k->ne[1], Dv = v->ne[0];
    if (Dv > ATT_DV_MAX || D > 512)
        return rb_backend_fail(be, RB_E_UNSUPPORTED,
                               "rb_attention: head dims D = %lld, Dv = %lld exceed the GPU kernel's limits (512, %d)",
                               (long long)D, (long long)Dv, ATT_DV_MAX);
    if (rb_tensor_nelements(dst) == 0) return RB_OK;
    att_args a = {};
    a.scale = p->scale;
    a.softcap = p->softcap;
    a.causal = p->causal ? 1 : 0;
    a.window = p->window;
    a.q_pos0 = p->q_pos0;
    const char *kp = (const char *)k->buf->impl + k->offs;
    a.kvec = k->dtype == RB_F16 && k->nb[0] == 2 && D % 8 == 0 && k->nb[1] % 16 == 0 && k->nb[2] % 16 == 0 &&
             k->nb[3] % 16 == 0 && ((uintptr_t)kp % 16) == 0;
    /* split keys when the query rows alone cannot fill the GPU */
    const int64_t rows = Tq * Hq * B;
    int64_t span = Tk;
    if (p->window > 0 && p->window < span) span = p->window;
    int nsplit = 1;
    if (rows < (int64_t)g->n_sm * 8 && span > 256) {
        int64_t want = (int64_t)g->n_sm * 8 / rows;
        int64_t maxs = (span + 127) / 128;
        nsplit = (int)(want < maxs ? want : maxs);
        if (nsplit > 64) nsplit = 64;
        if (nsplit < 1) nsplit = 1;
    }
    /* keys from kbeg to kend: at most span + Tq - 1 per row */
    const int64_t reach = span + (Tq > 1 ? Tq - 1 : 0);
    a.nsplit = nsplit;
    a.kchunk = nsplit > 1 ? (reach + nsplit - 1) / nsplit : (Tk > 0 ? Tk : 1);
    if (nsplit > 1) {
        void *sp = NULL;
        rb_status s = gpu_scratch(be, (size_t)(rows * nsplit * (Dv + 2)) * sizeof(float), &sp);
        if (s != RB_OK) return s;
        a.part = (float *)sp;
    }
    const int nw = ATT_THREADS / g->warp;
    const int64_t ntask = rows * nsplit;
    const int64_t blocks = (ntask + nw - 1) / nw;
    if (blocks > 0x7fffffffLL)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_attention: %lld query rows are too many", (long long)rows);
    gt mk = {};
    if (p->mask) mk = gview(p->mask);
    k_attention<<<(unsigned)blocks, ATT_THREADS, (size_t)nw * (size_t)D * sizeof(float), g->stream>>>(
        gview(dst), gview(q), gview(k), gview(v), mk, a);
    rb_status s = gpu_check_launch(be, "attention");
    if (s != RB_OK || nsplit == 1) return s;
    const int64_t n = rows * Dv;
    k_att_merge<<<gpu_blocks(n, 256), 256, 0, g->stream>>>(gview(dst), a.part, nsplit, rows);
    return gpu_check_launch(be, "attention merge");
}

} // namespace RB_GPU_NS

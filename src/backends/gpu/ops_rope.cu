/* GPU rotary position embedding: normal (adjacent pairs) and neox (halves)
 * layouts, partial rotation (dims past n_rot pass through), linear position
 * scaling, attn_factor and per-frequency factors. The angle is computed in
 * double like the CPU reference, so large positions keep f32 accuracy, once
 * per (position, frequency) into a cos/sin table in device scratch; then one
 * thread per rotated pair or passed-through element; dst may alias src. */
#include "backends/gpu/gpu_common.cuh"

namespace RB_GPU_NS {

struct rope_args {
    int n_rot, neox;
    double base, freq_scale, attn_factor;
};

/* cos/sin table [T][n_rot/2] (pairs of floats): the double-precision angle
 * work is done once per (position, frequency), not once per head. */
__global__ void k_rope_table(float2 *tab, gt pos, gt ff, rope_args a, int64_t T) {
    const int64_t half = a.n_rot / 2, n = T * half;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t sl = i % half, t = i / half;
        const int32_t p = *(const int32_t *)(pos.p + t * pos.nb[0]);
        double theta = (double)p * a.freq_scale * pow(a.base, -2.0 * (double)sl / (double)a.n_rot);
        if (ff.p) theta /= (double)*(const float *)(ff.p + sl * ff.nb[0]);
        double sn, cs;
        sincos(theta, &sn, &cs);
        tab[i] = make_float2((float)(cs * a.attn_factor), (float)(sn * a.attn_factor));
    }
}

/* src/dst [D, H, T, B]; tab from k_rope_table */
__global__ void k_rope(gt d, gt s, const float2 *tab, rope_args a) {
    const int64_t D = s.ne[0], half = a.n_rot / 2, slots = half + (D - a.n_rot);
    const int64_t n = slots * s.ne[1] * s.ne[2] * s.ne[3];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t sl = i % slots, r = i / slots;
        const int64_t h = r % s.ne[1], t = (r / s.ne[1]) % s.ne[2], b = r / (s.ne[1] * s.ne[2]);
        const char *sr = s.p + h * s.nb[1] + t * s.nb[2] + b * s.nb[3];
        char *dr = d.p + h * d.nb[1] + t * d.nb[2] + b * d.nb[3];
        if (sl >= half) { /* pass-through tail */
            const int64_t e = a.n_rot + (sl - half);
            stf(d.dt, dr + e * d.nb[0], ldf(s.dt, sr + e * s.nb[0]));
            continue;
        }
        const float2 cs = tab[t * half + sl];
        const int64_t e0 = a.neox ? sl : 2 * sl, e1 = a.neox ? sl + half : 2 * sl + 1;
        const float x0 = ldf(s.dt, sr + e0 * s.nb[0]), x1 = ldf(s.dt, sr + e1 * s.nb[0]);
        stf(d.dt, dr + e0 * d.nb[0], x0 * cs.x - x1 * cs.y);
        stf(d.dt, dr + e1 * d.nb[0], x0 * cs.y + x1 * cs.x);
    }
}

rb_status gpu_rope(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *pos,
                   const rb_rope_params *p) {
    const int64_t slots = p->n_rot / 2 + (src->ne[0] - p->n_rot), n = slots * src->ne[1] * src->ne[2] * src->ne[3];
    if (n == 0) return RB_OK;
    rope_args a = {p->n_rot, p->mode == RB_ROPE_NEOX ? 1 : 0, (double)p->freq_base, (double)p->freq_scale,
                   (double)p->attn_factor};
    gt ff = {};
    if (p->freq_factors) ff = gview(p->freq_factors);
    const int64_t T = src->ne[2], nt = T * (p->n_rot / 2);
    void *tab = NULL;
    rb_status s = gpu_scratch(be, (size_t)nt * sizeof(float2), &tab);
    if (s != RB_OK) return s;
    k_rope_table<<<gpu_blocks(nt, 256), 256, 0, gb(be)->stream>>>((float2 *)tab, gview(pos), ff, a, T);
    s = gpu_check_launch(be, "rope table");
    if (s != RB_OK) return s;
    k_rope<<<gpu_blocks(n, 256), 256, 0, gb(be)->stream>>>(gview(dst), gview(src), (const float2 *)tab, a);
    return gpu_check_launch(be, "rope");
}

} // namespace RB_GPU_NS

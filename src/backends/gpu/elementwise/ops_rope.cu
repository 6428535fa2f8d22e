/* GPU rotary position embedding: normal (adjacent pairs) and neox (halves)
 * layouts, partial rotation (dims past n_rot pass through), linear position
 * scaling, attn_factor and per-frequency factors. The angle is computed in
 * double like the CPU reference, so large positions keep f32 accuracy. One
 * kernel: a block takes one position (dim 2) and a group of heads, builds
 * that position's cos/sin table in shared memory (once per position when a
 * block takes all heads, as for prompts; decode splits the heads of its one
 * position over 8-head blocks, recomputing the small table in each), then
 * rotates; dst may alias src. (A separate table kernel cost a second launch
 * per layer in every decode step.) The frequencies freq_scale base^(-2i/n)
 * come from the host with the launch (n_rot <= 512), so a block's only
 * double-precision function is the sincos of its angles. */
#include "backends/gpu/gpu_common.cuh"
#include "backends/gpu/rope_math.cuh"

namespace RB_GPU_NS {

#define ROPE_THREADS 256
#define ROPE_HALF_MAX 256 /* table in shared memory up to n_rot = 512; wider: computed per pair */

struct rope_args {
    int n_rot, neox;
    double base, freq_scale, attn_factor;
    int hostf;                 /* freq holds freq_scale base^(-2 sl / n_rot) for sl < n_rot / 2 */
    double freq[ROPE_HALF_MAX];
};

/* cos and sin (times attn_factor) of position p, frequency sl */
__device__ __forceinline__ float2 rope_cs(int32_t p, int64_t sl, const rope_args &a, const gt &ff) {
    return rope_cs_of(p, a.hostf ? a.freq[sl] : rope_freq(a.base, a.freq_scale, a.n_rot, sl),
                      ff.p ? ff.p + sl * ff.nb[0] : NULL, a.attn_factor);
}

/* src/dst [D, H, T, B]; grid (T, head groups of hpb). I: the index type of
 * the per-block loop (int where it fits: 64-bit division and remainder cost
 * ~70 instructions each, most of a decode step's rope). */
template <typename I>
__global__ void __launch_bounds__(ROPE_THREADS) k_rope(gt d, gt s, gt pos, gt ff, rope_args a, int64_t hpb) {
    rb_grid_dep_trigger();
    rb_grid_dep_wait(); /* launched with gpu_launch_pdl */
    __shared__ float2 tab[ROPE_HALF_MAX];
    const int64_t t = blockIdx.x, half = a.n_rot / 2;
    const int32_t p = *(const int32_t *)(pos.p + t * pos.nb[0]);
    const bool use_tab = half <= ROPE_HALF_MAX;
    if (use_tab)
        for (int64_t sl = threadIdx.x; sl < half; sl += blockDim.x) tab[sl] = rope_cs(p, sl, a, ff);
    __syncthreads();
    const int64_t D = s.ne[0], H = s.ne[1], B = s.ne[3];
    const I slots = (I)(half + (D - a.n_rot));
    const int64_t h0 = (int64_t)blockIdx.y * hpb;
    const I nh = (I)(H - h0 < hpb ? H - h0 : hpb), n = slots * nh * (I)B, ihalf = (I)half;
    const char *sb = s.p + h0 * s.nb[1] + t * s.nb[2];
    char *db = d.p + h0 * d.nb[1] + t * d.nb[2];
    for (I i = (I)threadIdx.x; i < n; i += (I)blockDim.x) {
        const I sl = i % slots, r = i / slots, h = r % nh, b = r / nh;
        const char *sr = sb + h * s.nb[1] + b * s.nb[3];
        char *dr = db + h * d.nb[1] + b * d.nb[3];
        if (sl >= ihalf) { /* pass-through tail */
            const int64_t e = a.n_rot + (sl - ihalf);
            stf(d.dt, dr + e * d.nb[0], ldf(s.dt, sr + e * s.nb[0]));
            continue;
        }
        const float2 cs = use_tab ? tab[sl] : rope_cs(p, sl, a, ff);
        const int64_t e0 = a.neox ? sl : 2 * sl, e1 = a.neox ? sl + ihalf : 2 * sl + 1;
        const float x0 = ldf(s.dt, sr + e0 * s.nb[0]), x1 = ldf(s.dt, sr + e1 * s.nb[0]);
        stf(d.dt, dr + e0 * d.nb[0], x0 * cs.x - x1 * cs.y);
        stf(d.dt, dr + e1 * d.nb[0], x0 * cs.y + x1 * cs.x);
    }
}

rb_status gpu_rope(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *pos,
                   const rb_rope_params *p) {
    const int64_t slots = p->n_rot / 2 + (src->ne[0] - p->n_rot), n = slots * src->ne[1] * src->ne[2] * src->ne[3];
    if (n == 0) return RB_OK;
    rope_args a;
    a.n_rot = p->n_rot;
    a.neox = p->mode == RB_ROPE_NEOX ? 1 : 0;
    a.base = (double)p->freq_base;
    a.freq_scale = (double)p->freq_scale;
    a.attn_factor = (double)p->attn_factor;
    a.hostf = p->n_rot / 2 <= ROPE_HALF_MAX;
    for (int i = 0; i < ROPE_HALF_MAX; i++)
        a.freq[i] = a.hostf && i < p->n_rot / 2 ? rope_freq(a.base, a.freq_scale, a.n_rot, i) : 0.0;
    gt ff = {};
    if (p->freq_factors) ff = gview(p->freq_factors);
    const int64_t T = src->ne[2], H = src->ne[1];
    if (T > 0x7fffffffLL)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_rope: %lld positions are too many", (long long)T);
    /* few positions (decode): 8 heads a block, so the heads spread over the
     * multiprocessors; many: one block per position (one table each) */
    const int64_t hpb = T < 16 ? 8 : (H > 0 ? H : 1);
    const int64_t hg = (H + hpb - 1) / hpb;
    if (hg > 65535)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_rope: %lld heads are too many", (long long)H);
    const dim3 grid((unsigned)T, (unsigned)(hg < 1 ? 1 : hg));
    if (slots * (hpb < H ? hpb : H) * src->ne[3] < 0x7fffffffLL)
        (void)gpu_launch_pdl(gb(be), true, k_rope<int>, grid, dim3(ROPE_THREADS), 0, gview(dst),
                             gview(src), gview(pos), ff, a, hpb);
    else
        (void)gpu_launch_pdl(gb(be), true, k_rope<int64_t>, grid, dim3(ROPE_THREADS), 0, gview(dst),
                             gview(src), gview(pos), ff, a, hpb);
    return gpu_check_launch(be, "rope");
}

} // namespace RB_GPU_NS

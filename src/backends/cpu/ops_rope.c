/* CPU rotary position embedding, normal (adjacent pairs) and neox (halves)
 * layouts, partial rotation (n_rot < head_dim passes the tail through),
 * linear position scaling, attn_factor and per-frequency factors. Angles are
 * computed in double once per (thread, position) and cached, then applied
 * to every head row of that position (in the llama.cpp numerics mode as
 * ggml computes them, see llamacpp_numerics.h). */
#include "backends/cpu/ops_common.h"

#include "backends/cpu/llamacpp_numerics.h"

#include <math.h>

typedef struct rope_ctx {
    rb_cpu_backend *cb;
    rb_tensor *dst;
    const rb_tensor *src, *pos;
    const rb_rope_params *p;
    char *scratch;
    size_t stride;
} rope_ctx;

static void rope_task(void *arg, int ith, int nth) {
    rope_ctx *c = arg;
    const rb_tensor *s = c->src;
    rb_tensor *d = c->dst;
    const rb_rope_params *p = c->p;
    const int64_t D = s->ne[0], H = s->ne[1], T = s->ne[2], nr = rb_tensor_nrows(s);
    const int half = p->n_rot / 2;
    float *x = (float *)(void *)(c->scratch + (size_t)ith * c->stride);
    float *cs = x + D, *sn = cs + half;
    int64_t cached_t = -1;
    int64_t lo, hi;
    rb_cpu_split(nr, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const int64_t h = r % H, t = (r / H) % T, b = r / (H * T);
        if (t != cached_t) {
            int32_t pos;
            memcpy(&pos, rb_cpu_data(c->pos) + t * c->pos->nb[0], 4);
            if (c->cb->llamacpp_numerics) {
                rb_cpu_rope_angles_llamacpp(p, pos, cs, sn, half);
            } else {
                for (int i = 0; i < half; i++) {
                    double theta = (double)pos * p->freq_scale * pow((double)p->freq_base, -2.0 * i / p->n_rot);
                    if (p->freq_factors)
                        theta /= rb_cpu_load_f(RB_F32,
                                               rb_cpu_data(p->freq_factors) + (size_t)i * p->freq_factors->nb[0]);
                    cs[i] = (float)(cos(theta) * p->attn_factor);
                    sn[i] = (float)(sin(theta) * p->attn_factor);
                }
            }
            cached_t = t;
        }
        rb_cpu_row_to_f32(c->cb, s->dtype, rb_cpu_row(s, h, t, b), s->nb[0], x, D);
        if (c->cb->llamacpp_numerics) {
            const int64_t stride = p->mode == RB_ROPE_NEOX ? 1 : 2, off = p->mode == RB_ROPE_NEOX ? half : 1;
            for (int i = 0; i < half; i++) rb_cpu_rope_rotate_llamacpp(&x[i * stride], &x[i * stride + off], cs[i], sn[i]);
        } else if (p->mode == RB_ROPE_NEOX) {
            for (int i = 0; i < half; i++) {
                const float x0 = x[i], x1 = x[i + half];
                x[i] = x0 * cs[i] - x1 * sn[i];
                x[i + half] = x0 * sn[i] + x1 * cs[i];
            }
        } else {
            for (int i = 0; i < half; i++) {
                const float x0 = x[2 * i], x1 = x[2 * i + 1];
                x[2 * i] = x0 * cs[i] - x1 * sn[i];
                x[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
            }
        }
        rb_cpu_row_from_f32(c->cb, d->dtype, x, rb_cpu_row(d, h, t, b), d->nb[0], D);
    }
}

rb_status rb_cpu_rope(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *pos,
                      const rb_rope_params *p) {
    rb_cpu_backend *cb = rb_cpu(be);
    if (rb_tensor_nelements(src) == 0) return RB_OK;
    rope_ctx c = {.cb = cb, .dst = dst, .src = src, .pos = pos, .p = p};
    int nth = rb_cpu_threads_for(cb, rb_tensor_nelements(src) * 4);
    c.scratch = rb_cpu_scratch_threads(cb, nth, (size_t)(src->ne[0] + p->n_rot) * sizeof(float), &c.stride);
    if (!c.scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, rope_task, &c);
    return RB_OK;
}

/* CPU resize of dims 0 and 1 ([W, H, C, N] -> [W', H', C, N]): nearest
 * (source index floor(i * in / out)) and bilinear with align_corners=false
 * (torch semantics: sample at (i + 0.5) * in / out - 0.5, clamped at 0, the
 * upper neighbour clamped to the edge). Output rows are split across threads. */
#include "backends/cpu/ops_common.h"

#include <math.h>

typedef struct up_ctx {
    rb_cpu_backend *cb;
    rb_tensor *dst;
    const rb_tensor *src;
    rb_upsample_mode mode;
    char *scratch;
    size_t stride;
} up_ctx;

/* Source coordinate split into (i0, i1, frac) for output index o. */
static void bil_coord(int64_t o, int64_t in, int64_t out, int64_t *i0, int64_t *i1, float *frac) {
    double s = ((double)o + 0.5) * (double)in / (double)out - 0.5;
    if (s < 0.0) s = 0.0;
    int64_t a = (int64_t)s;
    if (a > in - 1) a = in - 1;
    *i0 = a;
    *i1 = a + 1 < in ? a + 1 : in - 1;
    *frac = (float)(s - (double)a);
}

static void up_task(void *p, int ith, int nth) {
    up_ctx *c = p;
    const rb_tensor *s = c->src;
    rb_tensor *d = c->dst;
    const int64_t W = s->ne[0], H = s->ne[1], Wo = d->ne[0], Ho = d->ne[1], nr = rb_tensor_nrows(d);
    float *r0 = (float *)(void *)(c->scratch + (size_t)ith * c->stride), *r1 = r0 + W, *out = r1 + W;
    int64_t lo, hi;
    rb_cpu_split(nr, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const int64_t y = r % Ho, ch = (r / Ho) % d->ne[2], n = r / (Ho * d->ne[2]);
        if (c->mode == RB_UPSAMPLE_NEAREST) {
            const int64_t sy = y * H / Ho;
            rb_cpu_row_to_f32(c->cb, s->dtype, rb_cpu_row(s, sy, ch, n), s->nb[0], r0, W);
            for (int64_t x = 0; x < Wo; x++) out[x] = r0[x * W / Wo];
        } else {
            int64_t y0, y1;
            float ly;
            bil_coord(y, H, Ho, &y0, &y1, &ly);
            rb_cpu_row_to_f32(c->cb, s->dtype, rb_cpu_row(s, y0, ch, n), s->nb[0], r0, W);
            rb_cpu_row_to_f32(c->cb, s->dtype, rb_cpu_row(s, y1, ch, n), s->nb[0], r1, W);
            for (int64_t x = 0; x < Wo; x++) {
                int64_t x0, x1;
                float lx;
                bil_coord(x, W, Wo, &x0, &x1, &lx);
                const float top = r0[x0] + lx * (r0[x1] - r0[x0]);
                const float bot = r1[x0] + lx * (r1[x1] - r1[x0]);
                out[x] = top + ly * (bot - top);
            }
        }
        rb_cpu_row_from_f32(c->cb, d->dtype, out, rb_cpu_row(d, y, ch, n), d->nb[0], Wo);
    }
}

rb_status rb_cpu_upsample(rb_backend *be, rb_tensor *dst, const rb_tensor *src, rb_upsample_mode mode) {
    rb_cpu_backend *cb = rb_cpu(be);
    if (rb_tensor_nelements(dst) == 0) return RB_OK;
    up_ctx c = {.cb = cb, .dst = dst, .src = src, .mode = mode};
    int nth = rb_cpu_threads_for(cb, rb_tensor_nelements(dst) * 4);
    c.scratch = rb_cpu_scratch_threads(cb, nth, (size_t)(2 * src->ne[0] + dst->ne[0]) * sizeof(float), &c.stride);
    if (!c.scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, up_task, &c);
    return RB_OK;
}

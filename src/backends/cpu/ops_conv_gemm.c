/* CPU 2-D convolution without groups as an implicit GEMM: output pixels are
 * processed in blocks of CG_PB; each block's input patches are gathered once
 * into rows of K = Cin*KH*KW floats, ordered (ci, ky, kx) like a torch weight
 * row (any float dtype of x, converted), and the ISA's tiled dot-product kernel (the one rb_matmul uses)
 * multiplies them with every group of weight rows, which are K-contiguous
 * already (f32, f16 or bf16). The SIMD lanes split each K-long sum into partial
 * sums, so this is also more accurate than a single running sum. The direct
 * loops of ops_conv.c remain for grouped convolutions and strided kernels. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/ops_common.h"

#define CG_PB 32 /* output pixels per block */
#define CG_TR 8  /* weight rows (output channels) per kernel call */
#define CG_TC 8  /* pixels per kernel call */

typedef struct cg_ctx {
    rb_cpu_backend *cb;
    rb_tensor *dst;
    const rb_tensor *x, *w, *bias;
    int s[2], p[2], d[2];
    int64_t K, Kpad, nblk;
    char *scratch;
    size_t stride;
} cg_ctx;

bool rb_cpu_conv2d_gemm_ok(const rb_cpu_backend *cb, const rb_tensor *w, int groups) {
    const size_t es = rb_dtype_row_size(w->dtype, 1);
    return groups == 1 && (w->dtype == RB_F32 || w->dtype == RB_F16 || w->dtype == RB_BF16) &&
           cb->kern->vec_dot[w->dtype] != NULL &&
           cb->kern->vec_dot_type[w->dtype] == RB_F32 && w->nb[0] == es && w->nb[1] == es * (size_t)w->ne[0] &&
           w->nb[2] == w->nb[1] * (size_t)w->ne[1];
}

/* Patch rows of pixels [p0, p0 + np) of image n into col (rows Kpad floats apart). */
static void gather(const cg_ctx *c, int64_t n, int64_t p0, int64_t np, float *col) {
    const rb_tensor *x = c->x;
    const int64_t W = x->ne[0], H = x->ne[1], Cin = x->ne[2], Wo = c->dst->ne[0];
    const int64_t KW = c->w->ne[0], KH = c->w->ne[1];
    const char *base = rb_cpu_data(x) + (size_t)n * x->nb[3];
    for (int64_t q = 0; q < np; q++) {
        const int64_t p = p0 + q, oy = p / Wo, ox = p % Wo;
        float *row = col + q * c->Kpad;
        int64_t k = 0;
        for (int64_t ci = 0; ci < Cin; ci++)
            for (int64_t ky = 0; ky < KH; ky++) {
                const int64_t iy = oy * c->s[1] - c->p[1] + ky * c->d[1];
                if (iy < 0 || iy >= H) {
                    for (int64_t kx = 0; kx < KW; kx++) row[k++] = 0.0f;
                    continue;
                }
                const char *xr = base + (size_t)ci * x->nb[2] + (size_t)iy * x->nb[1];
                for (int64_t kx = 0; kx < KW; kx++) {
                    const int64_t ix = ox * c->s[0] - c->p[0] + kx * c->d[0];
                    row[k++] = ix >= 0 && ix < W ? rb_cpu_load_f(x->dtype, xr + (size_t)ix * x->nb[0]) : 0.0f;
                }
            }
    }
}

static void cg_task(void *arg, int ith, int nth) {
    cg_ctx *c = arg;
    const rb_tensor *w = c->w, *d = c->dst;
    const struct rb_cpu_kernels *kern = c->cb->kern;
    const rb_gemm_tile_fn gemm = kern->gemm_tile[w->dtype];
    const rb_vec_dot_fn dot = kern->vec_dot[w->dtype];
    const int64_t Cout = w->ne[3], Wo = d->ne[0], npx = d->ne[0] * d->ne[1];
    float *col = (float *)(void *)(c->scratch + (size_t)ith * c->stride);
    float tile[CG_TR * CG_TC];
    const size_t ldb = (size_t)c->Kpad * sizeof(float);
    int64_t lo, hi;
    rb_cpu_split(d->ne[3] * c->nblk, ith, nth, &lo, &hi);
    for (int64_t it = lo; it < hi; it++) {
        const int64_t n = it / c->nblk, p0 = (it % c->nblk) * CG_PB, np = npx - p0 < CG_PB ? npx - p0 : CG_PB;
        gather(c, n, p0, np, col);
        char *dbase = rb_cpu_data(d) + (size_t)n * d->nb[3];
        for (int64_t co0 = 0; co0 < Cout; co0 += CG_TR) {
            const int nr = (int)(Cout - co0 < CG_TR ? Cout - co0 : CG_TR);
            const char *wrow = rb_cpu_data(w) + (size_t)co0 * w->nb[3];
            for (int64_t q0 = 0; q0 < np; q0 += CG_TC) {
                const int nc = (int)(np - q0 < CG_TC ? np - q0 : CG_TC);
                const float *y = col + q0 * c->Kpad;
                if (gemm) {
                    gemm(c->K, nr, nc, wrow, w->nb[3], y, ldb, tile, CG_TR);
                } else {
                    for (int q = 0; q < nc; q++)
                        for (int r = 0; r < nr; r++)
                            dot(c->K, &tile[q * CG_TR + r], wrow + (size_t)r * w->nb[3], y + q * c->Kpad);
                }
                for (int r = 0; r < nr; r++) {
                    const int64_t co = co0 + r;
                    const float b = c->bias ? rb_cpu_load_f(RB_F32, rb_cpu_data(c->bias) + co * c->bias->nb[0]) : 0.0f;
                    char *dch = dbase + (size_t)co * d->nb[2];
                    for (int q = 0; q < nc; q++) {
                        const int64_t p = p0 + q0 + q;
                        rb_cpu_store_f(d->dtype, dch + (size_t)(p / Wo) * d->nb[1] + (size_t)(p % Wo) * d->nb[0],
                                       tile[q * CG_TR + r] + b);
                    }
                }
            }
        }
    }
}

rb_status rb_cpu_conv2d_gemm(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w,
                             const rb_tensor *bias, const int stride[2], const int pad[2], const int dilation[2]) {
    rb_cpu_backend *cb = rb_cpu(be);
    if (rb_tensor_nelements(dst) == 0) return RB_OK;
    cg_ctx c = {.cb = cb, .dst = dst, .x = x, .w = w, .bias = bias, .s = {stride[0], stride[1]},
                .p = {pad[0], pad[1]}, .d = {dilation[0], dilation[1]}};
    c.K = w->ne[0] * w->ne[1] * w->ne[2];
    c.Kpad = (c.K + 15) & ~(int64_t)15;
    c.nblk = (dst->ne[0] * dst->ne[1] + CG_PB - 1) / CG_PB;
    const int64_t work = rb_tensor_nelements(dst) * c.K * 2;
    int nth = rb_cpu_threads_for(cb, work);
    if (dst->ne[3] * c.nblk < 2) nth = 1; /* one work item: waking the pool buys nothing */
    c.scratch = rb_cpu_scratch_threads(cb, nth, (size_t)(CG_PB * c.Kpad) * sizeof(float), &c.stride);
    if (!c.scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, cg_task, &c);
    return RB_OK;
}

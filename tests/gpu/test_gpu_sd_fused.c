/* The diffusion networks' fused ops on the GPU (skipped without one), on
 * seeded random inputs at the networks' shapes and odd ones, each result
 * against a double-precision reference of the stored inputs, the CPU
 * backend's too (so the reference is checked as well):
 *  - rb_layer_norm_mod: the MMDiT's [1536-wide rows, tokens, batch] with
 *    shift and scale as [D, 1, B] chunks of one modulation tensor, rows
 *    past the GPU's shared-memory staging (9000), permuted and sliced views,
 *    shift or scale alone, f32 / f16 / bf16, in place:
 *    |got - ref| <= 2e-6 (|xn (1 + scale)| + |shift|) + 1e-6 + r |ref| with
 *    xn the normalised value and r the half ulp of a 16-bit dst (2^-11 f16,
 *    2^-8 bf16).
 *  - rb_linear through every product path (matrix-vector at 2 and 3 rows,
 *    the hi/lo split GEMM at 20, cuBLAS or the tiled GEMM above, a bias
 *    (and ReLU) in cuBLASLt's epilogue; each case also with
 *    rb_gpu_tuning.tiled_gemm, the HIP path, and no_lt_epilogue) and every epilogue
 *    kernel (rows of 4, generic strided, the tiled transposing one for a dst
 *    seen as the tokens of an image, the residual in place through the
 *    second scratch region): bias, activation, adaLN gate [N, 1, B],
 *    residual (in place and separate), dst a slice of a joint buffer:
 *    |got - ref| <= 2e-5 S + r (1.2 |g| |P| + |ref|) + 1e-6, with S the
 *    magnitude the f32 sums carry (|bias| + sum |a b|, times 1.2 after an
 *    activation, times |gate|, plus |res|), P the product (a 16-bit dst is
 *    rounded once more where the product goes through dst first). Quantized
 *    weights (q8_0 through the GEMM, q4_0 through the int8 tiles at 20
 *    rows): the GPU against the CPU, 2e-2 S (the CPU quantizes the
 *    activations to 8 bits).
 *  - a graph captured of rb_linear with the residual in place replays the
 *    eager result exactly.
 * Every case prints its worst |diff| / bound; GPU outputs start as NaN
 * where nothing is read from them. Without a GPU the CPU side runs and the
 * tests then skip. */
#include "gpu_pair.h"

#include "backends/gpu/gpu_tuning.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct env {
    rb_backend *c, *g;
    tu_rng rng;
} env;

static int setup(void **state) {
    env *e = calloc(1, sizeof *e);
    if (!e) return -1;
    e->c = gp_cpu();
    e->g = gp_gpu();
    *state = e;
    return 0;
}

static int teardown(void **state) {
    env *e = *state;
    rb_backend_destroy(e->g);
    rb_backend_destroy(e->c);
    free(e);
    return 0;
}

static double half_ulp(rb_dtype dt) { return dt == RB_F16 ? 1.0 / 2048 : dt == RB_BF16 ? 1.0 / 256 : 0.0; }

/* The GPU side of x back to its bytes at creation; with nan, the view v of
 * it (x's own view where v is NULL) set to NaN first (so an element left
 * unwritten shows, and only there: bytes outside the view keep their values). */
static void reset_gpu(gp *x, const rb_tensor *v, bool nan) {
    unsigned char *p = malloc(x->size);
    assert_non_null(p);
    memcpy(p, x->orig, x->size);
    const rb_tensor *t = v ? v : &x->g;
    const size_t es = rb_dtype_info((int)t->dtype)->type_size;
    const unsigned char nan32[4] = {0x00, 0x00, 0xc0, 0x7f}, nan16[2] = {0x00, 0x7e}, nanb16[2] = {0xc0, 0x7f};
    const unsigned char *nb = t->dtype == RB_F32 ? nan32 : t->dtype == RB_F16 ? nan16 : nanb16;
    for (int64_t i3 = 0; nan && i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
                    memcpy(p + t->offs + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], nb, es);
    TU_OK(rb_buffer_set(x->gb, 0, p, x->size));
    free(p);
}

/* got against ref within per-element bounds; prints the worst ratio */
static void check_bounds(const char *what, const char *side, const double *got, const double *ref, const double *bound,
                         int64_t n) {
    double worst = 0.0, wd = 0.0;
    int64_t at = -1;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs(got[i] - ref[i]);
        const double r = isfinite(got[i]) ? d / bound[i] : INFINITY;
        if (!(r <= worst)) {
            worst = r;
            wd = d;
            at = i;
        }
    }
    print_message("%-58s %-3s worst |diff|/bound %.3f (|diff| %.3g at %lld)\n", what, side, worst, wd, (long long)at);
    if (!(worst <= 1.0))
        fail_msg("%s (%s): element %lld: got %.9g, ref %.9g, bound %.3g", what, side, (long long)at, got[at], ref[at],
                 bound[at]);
}

/* Chunk i of a modulation m [k D, B] as the [D, 1, B] view the MMDiT uses. */
static rb_tensor chunk(const rb_tensor *m, int i, int64_t D) {
    rb_tensor v = *m;
    v.offs += (size_t)((int64_t)i * D) * m->nb[0];
    v.ne[0] = D;
    v.ne[1] = 1;
    v.ne[2] = m->ne[1];
    v.ne[3] = 1;
    v.nb[2] = m->nb[1];
    v.nb[3] = m->nb[1] * (size_t)m->ne[1];
    return v;
}

/* A pair's values through other views of its parents. */
static double *read_as(const gp *x, const rb_tensor *vc, const rb_tensor *vg, int side) {
    gp w = *x;
    w.c = *vc;
    w.g = *vg;
    return gp_read(&w, side);
}

/* ---- rb_layer_norm_mod ---- */

static void test_layer_norm_mod(void **state) {
    env *e = *state;
    tu_rng_seed(&e->rng, 7101);
    const struct {
        int64_t ne[4];
        rb_dtype st, dt, mt;
        gp_layout sl, dl;
        int shift, scale, in_place;
    } cs[] = {
        {{1536, 300, 2, 1}, RB_F16, RB_F16, RB_F16, GP_CONTIG, GP_CONTIG, 1, 1, 0}, /* the MMDiT in half precision */
        {{1536, 77, 2, 1}, RB_BF16, RB_BF16, RB_BF16, GP_CONTIG, GP_CONTIG, 1, 1, 1},
        {{96, 7, 2, 1}, RB_F32, RB_F32, RB_F32, GP_SLICE, GP_PERM, 1, 1, 0},
        {{9000, 3, 2, 1}, RB_F32, RB_F16, RB_F32, GP_CONTIG, GP_SLICE, 1, 1, 0}, /* not staged */
        {{33, 5, 2, 1}, RB_F16, RB_F32, RB_F16, GP_PERM, GP_CONTIG, 1, 0, 0},
        {{64, 9, 2, 1}, RB_F32, RB_BF16, RB_F32, GP_CONTIG, GP_CONTIG, 0, 1, 0},
        {{1, 4, 2, 1}, RB_F32, RB_F32, RB_F32, GP_CONTIG, GP_SLICE, 1, 1, 0},
    };
    const float eps = 1e-6f;
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        const int64_t *ne = cs[k].ne, D = ne[0], B = ne[2], mne[4] = {6 * D, B, 1, 1};
        gp x = gp_make(e->c, e->g, &e->rng, cs[k].st, ne, cs[k].sl, -3, 3);
        gp d = cs[k].in_place ? x : gp_make(e->c, e->g, &e->rng, cs[k].dt, ne, cs[k].dl, -1, 1);
        gp m = gp_make(e->c, e->g, &e->rng, cs[k].mt, mne, GP_CONTIG, -1, 1);
        rb_tensor shc = chunk(&m.c, 0, D), shg = chunk(&m.g, 0, D), scc = chunk(&m.c, 1, D), scg = chunk(&m.g, 1, D);
        double *xv = gp_read(&x, 0), *shv = read_as(&m, &shc, &shg, 0), *scv = read_as(&m, &scc, &scg, 0);
        const int64_t n = D * ne[1] * B;
        double *ref = malloc(sizeof(double) * (size_t)n), *bnd = malloc(sizeof(double) * (size_t)n);
        assert_true(ref && bnd);
        for (int64_t r = 0; r < n / D; r++) {
            const double *row = xv + r * D;
            double mean = 0, var = 0;
            for (int64_t i = 0; i < D; i++) mean += row[i];
            mean /= (double)D;
            for (int64_t i = 0; i < D; i++) var += (row[i] - mean) * (row[i] - mean);
            const double inv = 1.0 / sqrt(var / (double)D + eps);
            const int64_t b = r / ne[1];
            for (int64_t i = 0; i < D; i++) {
                const double xn = (row[i] - mean) * inv, s = cs[k].scale ? scv[b * D + i] : 0.0,
                             t = cs[k].shift ? shv[b * D + i] : 0.0, y = xn * (1.0 + s) + t;
                ref[r * D + i] = y;
                bnd[r * D + i] = 2e-6 * (fabs(xn * (1.0 + s)) + fabs(t)) + 1e-6 + half_ulp(d.c.dtype) * fabs(y);
            }
        }
        char what[96];
        snprintf(what, sizeof what, "layer_norm_mod [%lld, %lld, %lld] %s->%s%s", (long long)D, (long long)ne[1],
                 (long long)B, rb_dtype_name(cs[k].st), rb_dtype_name(d.c.dtype), cs[k].in_place ? " in place" : "");
        TU_OK(rb_layer_norm_mod(e->c, &d.c, &x.c, cs[k].shift ? &shc : NULL, cs[k].scale ? &scc : NULL, eps));
        if (e->g) {
            if (!cs[k].in_place) reset_gpu(&d, NULL, true);
            TU_OK(rb_layer_norm_mod(e->g, &d.g, &x.g, cs[k].shift ? &shg : NULL, cs[k].scale ? &scg : NULL, eps));
        }
        for (int side = 0; side < (e->g ? 2 : 1); side++) {
            double *got = gp_read(&d, side);
            check_bounds(what, side ? "gpu" : "cpu", got, ref, bnd, n);
            free(got);
        }
        if (e->g) {
            gp_expect_close(&d, 1e300, 1e300, what); /* nothing written outside dst */
            assert_true(gp_gpu_unchanged(&m));
            if (!cs[k].in_place) assert_true(gp_gpu_unchanged(&x));
        }
        free(xv);
        free(shv);
        free(scv);
        free(ref);
        free(bnd);
        gp_free(&m);
        if (!cs[k].in_place) gp_free(&d);
        gp_free(&x);
    }
    GP_NEED_GPU(e->g); /* the CPU side ran; report the GPU's absence */
}

/* ---- rb_linear ---- */

enum { E_BIAS = 1, E_ACT = 2, E_GATE = 4, E_RES = 8, E_INPLACE = 16 /* res is dst's own view */ };
enum { DV_PLAIN, DV_JOINT /* rows 3 .. 3 + M of [N, M + 5, B] */, DV_TOKENS /* [N, M, B] over an image [M, N, B] */ };

typedef struct lcase {
    const char *what;
    int64_t K, N, M, B;
    rb_dtype at, bt, dt;
    int ep;
    rb_unary_op act;
    int dv;
    gp_layout bl, dl;
} lcase;

static const lcase k_cases[] = {
    {"mmdit attn out: x += gate (W o + b)", 256, 192, 300, 2, RB_F16, RB_F16, RB_F16, E_BIAS | E_GATE | E_INPLACE,
     RB_UNARY_SILU, DV_PLAIN, GP_CONTIG, GP_CONTIG},
    {"mmdit ff in: gelu_tanh(W n + b)", 192, 256, 300, 2, RB_F16, RB_F16, RB_F16, E_BIAS | E_ACT, RB_UNARY_GELU_TANH,
     DV_PLAIN, GP_CONTIG, GP_CONTIG},
    {"mmdit q into the joint buffer", 192, 192, 300, 2, RB_F16, RB_F16, RB_F16, E_BIAS, RB_UNARY_SILU, DV_JOINT,
     GP_CONTIG, GP_CONTIG},
    {"bf16: x += gate act(W a + b)", 256, 192, 300, 2, RB_BF16, RB_BF16, RB_BF16,
     E_BIAS | E_ACT | E_GATE | E_INPLACE, RB_UNARY_GELU, DV_PLAIN, GP_CONTIG, GP_SLICE},
    {"mmdit modulation, 2 rows", 192, 384, 2, 1, RB_F16, RB_F16, RB_F16, E_BIAS, RB_UNARY_SILU, DV_PLAIN, GP_CONTIG,
     GP_CONTIG},
    {"time embedding, 2 rows, silu", 256, 192, 2, 1, RB_F32, RB_F32, RB_F32, E_BIAS | E_ACT, RB_UNARY_SILU, DV_PLAIN,
     GP_CONTIG, GP_SLICE},
    {"3 rows, gated residual in place", 64, 48, 3, 2, RB_F32, RB_F32, RB_F32, E_BIAS | E_GATE | E_INPLACE,
     RB_UNARY_SILU, DV_PLAIN, GP_SLICE, GP_CONTIG},
    {"20 rows (hi/lo split), residual apart", 128, 64, 20, 1, RB_F16, RB_F16, RB_F32, E_BIAS | E_RES, RB_UNARY_SILU,
     DV_PLAIN, GP_CONTIG, GP_CONTIG},
    {"strided everything", 64, 40, 33, 2, RB_F32, RB_F32, RB_F32, E_BIAS | E_ACT | E_GATE | E_RES, RB_UNARY_TANH,
     DV_PLAIN, GP_PERM, GP_PERM},
    {"t2d proj_out into the image", 64, 64, 300, 2, RB_F16, RB_F16, RB_F16, E_BIAS | E_INPLACE, RB_UNARY_SILU,
     DV_TOKENS, GP_CONTIG, GP_CONTIG},
    {"t2d proj_out into the image, odd tiles", 48, 70, 97, 2, RB_F32, RB_F32, RB_F32, E_BIAS | E_INPLACE,
     RB_UNARY_SILU, DV_TOKENS, GP_SLICE, GP_CONTIG},
    {"unet attn out: res += W o + b", 64, 64, 300, 2, RB_F16, RB_F16, RB_F16, E_BIAS | E_INPLACE, RB_UNARY_SILU,
     DV_PLAIN, GP_CONTIG, GP_PAD},
    {"bias + relu, 16-bit (cuBLASLt epilogue)", 128, 96, 64, 2, RB_F16, RB_F16, RB_F16, E_BIAS | E_ACT, RB_UNARY_RELU,
     DV_PLAIN, GP_CONTIG, GP_CONTIG},
    {"bf16 bias (cuBLASLt epilogue)", 128, 64, 80, 2, RB_BF16, RB_BF16, RB_BF16, E_BIAS, RB_UNARY_SILU, DV_PLAIN,
     GP_CONTIG, GP_CONTIG},
    {"no epilogue", 64, 32, 40, 1, RB_F16, RB_F16, RB_F16, 0, RB_UNARY_SILU, DV_PLAIN, GP_CONTIG, GP_SLICE},
    {"q8_0 weights, residual in place", 256, 64, 300, 1, RB_Q8_0, RB_F32, RB_F32, E_BIAS | E_INPLACE, RB_UNARY_SILU,
     DV_PLAIN, GP_CONTIG, GP_CONTIG},
    {"q4_0 weights, 20 rows, relu", 256, 64, 20, 1, RB_Q4_0, RB_F32, RB_F32, E_BIAS | E_ACT, RB_UNARY_RELU, DV_PLAIN,
     GP_CONTIG, GP_CONTIG},
};

/* The operands of one case on both backends. */
typedef struct lset {
    gp a, b, bias, mod, res, d;
    rb_tensor dc, dg, gc, gg; /* dst and gate views */
    rb_linear_epilogue ec, eg;
} lset;

static void lset_make(env *e, const lcase *c, lset *s) {
    const int64_t K = c->K, N = c->N, M = c->M, B = c->B;
    const int64_t ane[4] = {K, N, 1, 1}, bne[4] = {K, M, B, 1}, dne[4] = {N, M, B, 1}, vne[4] = {N, 1, 1, 1},
                  mne[4] = {3 * N, B, 1, 1}, jne[4] = {N, M + 5, B, 1}, ine[4] = {M, N, B, 1};
    memset(s, 0, sizeof *s);
    s->a = gp_make(e->c, e->g, &e->rng, c->at, ane, GP_CONTIG, -1, 1);
    s->b = gp_make(e->c, e->g, &e->rng, c->bt, bne, c->bl, -1, 1);
    s->bias = gp_make(e->c, e->g, &e->rng, RB_F32, vne, GP_CONTIG, -0.5f, 0.5f);
    s->mod = gp_make(e->c, e->g, &e->rng, RB_F16, mne, GP_CONTIG, -1, 1);
    s->res = gp_make(e->c, e->g, &e->rng, RB_F32, dne, GP_PERM, -2, 2);
    s->d = gp_make(e->c, e->g, &e->rng, c->dt, c->dv == DV_JOINT ? jne : c->dv == DV_TOKENS ? ine : dne, c->dl, -2, 2);
    s->dc = s->d.c;
    s->dg = s->d.g;
    rb_tensor *v[2] = {&s->dc, &s->dg};
    for (int i = 0; i < 2; i++) {
        if (c->dv == DV_JOINT) {
            v[i]->ne[1] = M;
            v[i]->offs += 3 * v[i]->nb[1];
        } else if (c->dv == DV_TOKENS) { /* dims 0 and 1 swapped */
            const size_t nb0 = v[i]->nb[0];
            v[i]->ne[0] = N;
            v[i]->ne[1] = M;
            v[i]->nb[0] = v[i]->nb[1];
            v[i]->nb[1] = nb0;
        }
    }
    s->gc = chunk(&s->mod.c, 2, N);
    s->gg = chunk(&s->mod.g, 2, N);
    s->ec = (rb_linear_epilogue){.bias = c->ep & E_BIAS ? &s->bias.c : NULL, .has_act = (c->ep & E_ACT) != 0,
                                 .act = c->act, .gate = c->ep & E_GATE ? &s->gc : NULL,
                                 .res = c->ep & E_INPLACE ? &s->dc : c->ep & E_RES ? &s->res.c : NULL};
    s->eg = s->ec;
    s->eg.bias = s->ec.bias ? &s->bias.g : NULL;
    s->eg.gate = s->ec.gate ? &s->gg : NULL;
    s->eg.res = c->ep & E_INPLACE ? &s->dg : c->ep & E_RES ? &s->res.g : NULL;
}

static void lset_free(lset *s) {
    gp_free(&s->a);
    gp_free(&s->b);
    gp_free(&s->bias);
    gp_free(&s->mod);
    gp_free(&s->res);
    gp_free(&s->d);
}

/* the reference and bounds of a float-weight case; NULL bnd: quantized (S only) */
static void lin_ref(const lcase *c, lset *s, double *ref, double *bnd, double *S) {
    const int64_t K = c->K, N = c->N, M = c->M, B = c->B;
    const bool quant = rb_dtype_info((int)c->at)->is_quant;
    double *a = quant ? NULL : gp_read(&s->a, 0), *b = gp_read(&s->b, 0), *bias = gp_read(&s->bias, 0);
    double *g = read_as(&s->mod, &s->gc, &s->gg, 0), *res = gp_read(&s->res, 0);
    double *d0 = read_as(&s->d, &s->dc, &s->dg, 0);
    /* a 16-bit product goes through dst before the epilogue unless the residual is dst itself */
    const bool twice = c->dt != RB_F32 && !(c->ep & E_INPLACE);
    for (int64_t i2 = 0; i2 < B; i2++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = 0; j < N; j++) {
                double p = 0, sa = 0;
                for (int64_t q = 0; q < K && !quant; q++) {
                    const double t = a[j * K + q] * b[(i2 * M + m) * K + q];
                    p += t;
                    sa += fabs(t);
                }
                if (quant)
                    for (int64_t q = 0; q < K; q++) sa += fabs(b[(i2 * M + m) * K + q]); /* weights within 1 */
                const int64_t o = (i2 * M + m) * N + j;
                const double P = p, gj = c->ep & E_GATE ? g[i2 * N + j] : 1.0;
                double y = p, sy = sa;
                if (c->ep & E_BIAS) {
                    y += bias[j];
                    sy += fabs(bias[j]);
                }
                if (c->ep & E_ACT) {
                    y = quant ? 0 : (c->act == RB_UNARY_TANH ? tanh(y)
                                     : c->act == RB_UNARY_SILU ? y / (1 + exp(-y))
                                     : c->act == RB_UNARY_RELU ? (y > 0 ? y : 0)
                                     : c->act == RB_UNARY_GELU ? 0.5 * y * (1 + erf(y / sqrt(2.0)))
                                     : 0.5 * y * (1 + tanh(0.7978845608028654 * (y + 0.044715 * y * y * y))));
                    sy *= 1.2;
                }
                y *= gj;
                sy *= fabs(gj);
                if (c->ep & (E_RES | E_INPLACE)) {
                    const double r = c->ep & E_INPLACE ? d0[o] : res[o];
                    y += r;
                    sy += fabs(r);
                }
                S[o] = sy;
                if (!bnd) continue;
                ref[o] = y;
                bnd[o] = 2e-5 * sy + half_ulp(c->dt) * ((twice ? 1.2 * fabs(gj) * fabs(P) : 0) + fabs(y)) * 1.01 + 1e-6;
            }
    free(a);
    free(b);
    free(bias);
    free(g);
    free(res);
    free(d0);
}

static void test_linear(void **state) {
    env *e = *state;
    tu_rng_seed(&e->rng, 7102);
    for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
        const lcase *c = &k_cases[k];
        const bool quant = rb_dtype_info((int)c->at)->is_quant;
        const int64_t n = c->N * c->M * c->B;
        lset s;
        lset_make(e, c, &s);
        double *ref = malloc(sizeof(double) * (size_t)n), *bnd = malloc(sizeof(double) * (size_t)n),
               *S = malloc(sizeof(double) * (size_t)n);
        assert_true(ref && bnd && S);
        lin_ref(c, &s, ref, quant ? NULL : bnd, S);
        TU_OK(rb_linear(e->c, &s.dc, &s.a.c, &s.b.c, c->ep ? &s.ec : NULL));
        double *cpu = read_as(&s.d, &s.dc, &s.dg, 0);
        if (!quant) check_bounds(c->what, "cpu", cpu, ref, bnd, n);
        for (int tiled = 0; tiled < (e->g ? 3 : 0); tiled++) { /* default, tiled GEMM, no cuBLASLt */
            const rb_gpu_tuning tune = {.tiled_gemm = tiled == 1, .no_lt_epilogue = tiled == 2};
            TU_OK(rb_gpu_backend_tune(e->g, &tune));
            reset_gpu(&s.d, &s.dg, !(c->ep & E_INPLACE));
            TU_OK(rb_linear(e->g, &s.dg, &s.a.g, &s.b.g, c->ep ? &s.eg : NULL));
            char what[128];
            snprintf(what, sizeof what, "%s%s", c->what, tiled == 1 ? " (tiled GEMM)" : tiled == 2 ? " (no cuBLASLt)" : "");
            double *got = read_as(&s.d, &s.dc, &s.dg, 1);
            if (quant) { /* against the CPU */
                for (int64_t i = 0; i < n; i++) bnd[i] = 2e-2 * S[i] + 1e-6;
                check_bounds(what, "gpu", got, cpu, bnd, n);
            } else {
                check_bounds(what, "gpu", got, ref, bnd, n);
            }
            free(got);
            /* nothing written outside dst, no operand changed */
            gp dview = s.d;
            dview.c = s.dc;
            dview.g = s.dg;
            gp_expect_close(&dview, 1e300, 1e300, what);
            assert_true(gp_gpu_unchanged(&s.a) && gp_gpu_unchanged(&s.b) && gp_gpu_unchanged(&s.bias) &&
                        gp_gpu_unchanged(&s.mod) && gp_gpu_unchanged(&s.res));
        }
        const rb_gpu_tuning none = {0};
        if (e->g) TU_OK(rb_gpu_backend_tune(e->g, &none));
        free(cpu);
        free(ref);
        free(bnd);
        free(S);
        lset_free(&s);
    }
    GP_NEED_GPU(e->g);
}

/* A captured rb_linear with the residual in place (its product in the
 * second scratch region) replays what the eager call computed. */
static void test_linear_graph(void **state) {
    env *e = *state;
    GP_NEED_GPU(e->g);
    if (!rb_backend_graphs_supported(e->g)) skip();
    tu_rng_seed(&e->rng, 7103);
    const lcase *c = &k_cases[0];
    lset s;
    lset_make(e, c, &s);
    TU_OK(rb_linear(e->g, &s.dg, &s.a.g, &s.b.g, &s.eg)); /* eager: sizes the scratch */
    TU_OK(rb_backend_sync(e->g));
    double *eager = read_as(&s.d, &s.dc, &s.dg, 1);
    reset_gpu(&s.d, NULL, false);
    rb_graph *gr = NULL;
    TU_OK(rb_backend_capture_begin(e->g));
    const rb_status st = rb_linear(e->g, &s.dg, &s.a.g, &s.b.g, &s.eg);
    TU_OK(rb_backend_capture_end(e->g, &gr));
    TU_OK(st);
    TU_OK(rb_graph_launch(gr));
    TU_OK(rb_backend_sync(e->g));
    double *replay = read_as(&s.d, &s.dc, &s.dg, 1);
    const int64_t n = c->N * c->M * c->B;
    for (int64_t i = 0; i < n; i++)
        if (!(replay[i] == eager[i])) fail_msg("graph replay element %lld: %.9g, eager %.9g", (long long)i, replay[i], eager[i]);
    print_message("rb_linear graph replay: %lld elements as eager\n", (long long)n);
    rb_graph_free(gr);
    free(eager);
    free(replay);
    lset_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_layer_norm_mod, setup, teardown),
        cmocka_unit_test_setup_teardown(test_linear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_linear_graph, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

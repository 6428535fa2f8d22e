/* The image ops of the diffusion networks, on the CPU backend (always) and
 * on the GPU (skipped without one), on seeded random inputs of odd shapes:
 *  - rb_conv2d (3x3, 1x1, 3x1; stride 1 and 2; symmetric padding and none on
 *    a zero-padded input as the VAE's downsampler does it; dilation; groups;
 *    f32, f16 and bf16 x / w / dst, mixed; strided x and dst (also padded at
 *    aligned addresses, which cuDNN may take); tiles that
 *    cross the GPU kernels' 64 / 128 borders; few pixels with a long k that
 *    the GPU splits) against a naive double-precision convolution of the
 *    stored values: |got - ref| <= 1e-5 S + r |ref| + 1e-7 with S = |bias| +
 *    sum |x w| over the window (the f32 sums' rounding) and r the half ulp
 *    of a 16-bit dst (2^-11 f16, 2^-8 bf16). On the GPU every case runs twice:
 *    by default (through cuDNN where the CUDA backend loaded it and cuDNN
 *    takes the case) and with rb_gpu_tuning.own_conv (our kernels); the
 *    backend's counters say which path ran (exactly one). cuDNN adds the
 *    bias after rounding its sum into a 16-bit dst: its bound has half an
 *    ulp of |ref - bias| more.
 *  - the dispatch: where this process can load libcudnn.so.9, the CUDA
 *    backend must report cuDNN loaded (device info and counters), run the
 *    SD-like cases through it, and a graph captured of a cuDNN convolution
 *    must replay the eager result exactly.
 *  - rb_group_norm and rb_group_norm_act (silu, gelu, relu) against a double
 *    reference: |got - ref| <= 4e-6 (|x k| + |mean k| + |b|) + 4e-6 + r |ref|
 *    with k = w / std, including a group mean of 1000 over a spread of 1
 *    (f32 sums of squares would lose the variance) and groups the GPU splits
 *    over blocks; the CPU's fused op bit-identical to group_norm then unary.
 *  - rb_upsample nearest (exact) and bilinear (1e-6 relative and absolute) against the CPU.
 *  - rb_binary's rows kernel (operands of dst's rows or one element a row,
 *    broadcast) and rb_cast's transposing kernel (image <-> tokens) exactly.
 *  - rb_glu and rb_matmul with 16-bit dst (one rounding step) against the CPU.
 *  - rb_attention at the diffusion shapes (head dims 40, 64, 80, 160 through
 *    the tensor-core kernel, 512 (the VAE) and tiny dims 2, 4 and 8 through the generic one; self
 *    attention over up to 1000 tokens, cross attention to 77 / 154 / 231;
 *    f16 / bf16 / f32 dst) against double attention: tensor cores rel L2 <=
 *    2e-3 (f16) / 1e-2 (bf16) and max |diff| <= 2e-3 / 1e-2 (Q and P are
 *    rounded to 16 bits, outputs are averages of values in [-1, 1]); the
 *    generic kernel 2e-6 + 2e-5 |ref| + r |ref|.
 * Every case prints its worst |diff| / bound; GPU outputs start as NaN. */
#include "gpu_pair.h"

#include "backends/gpu/gpu_tuning.h"

#if defined(RBEE_TEST_CUDNN)
#include <dlfcn.h>
#endif
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

/* Sets the GPU side of a pair's view to NaN (bytes around it keep orig). */
static void poison_gpu(gp *x) {
    if (!x->gb) return;
    unsigned char *p = malloc(x->size);
    assert_non_null(p);
    memcpy(p, x->orig, x->size);
    const rb_tensor *t = &x->g;
    const size_t es = rb_dtype_info((int)t->dtype)->type_size;
    const unsigned char nan32[4] = {0x00, 0x00, 0xc0, 0x7f}, nan16[2] = {0x00, 0x7e}, nanb16[2] = {0xc0, 0x7f};
    const unsigned char *nb = t->dtype == RB_F32 ? nan32 : t->dtype == RB_F16 ? nan16 : nanb16;
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
                    memcpy(p + t->offs + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], nb, es);
    TU_OK(rb_buffer_set(x->gb, 0, p, x->size));
    free(p);
}

/* Checks got against ref with per-element bounds; prints the worst ratio and
 * fails (after printing) when it exceeds 1 or an element is not finite. */
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
    print_message("%-52s %-3s worst |diff|/bound %.3f (|diff| %.3g at %lld)\n", what, side, worst, wd, (long long)at);
    if (!(worst <= 1.0))
        fail_msg("%s (%s): element %lld: got %.9g, ref %.9g, bound %.3g", what, side, (long long)at, got[at], ref[at],
                 bound[at]);
}

/* ---- convolution ---- */

typedef struct ccase {
    int64_t W, H, Cin, N, Cout, KW, KH;
    int s[2], p[2], d[2], groups;
    rb_dtype xt, wt, dt;
    gp_layout xl, dl;
    bool bias;
    bool dnn; /* with cuDNN loaded, the default path must be cuDNN (an SD shape it takes) */
} ccase;

/* naive conv in double over the decoded views; S = |bias| + sum |x w| */
static void ref_conv(const ccase *k, const double *x, const double *w, const double *b, int64_t Wo, int64_t Ho,
                     double *out, double *mag) {
    const int64_t cin_g = k->Cin / k->groups, cout_g = k->Cout / k->groups;
    for (int64_t n = 0; n < k->N; n++)
        for (int64_t co = 0; co < k->Cout; co++)
            for (int64_t oy = 0; oy < Ho; oy++)
                for (int64_t ox = 0; ox < Wo; ox++) {
                    double s = b ? b[co] : 0.0, m = b ? fabs(b[co]) : 0.0;
                    const int64_t g = co / cout_g;
                    for (int64_t cl = 0; cl < cin_g; cl++)
                        for (int64_t ky = 0; ky < k->KH; ky++)
                            for (int64_t kx = 0; kx < k->KW; kx++) {
                                const int64_t iy = oy * k->s[1] - k->p[1] + ky * k->d[1];
                                const int64_t ix = ox * k->s[0] - k->p[0] + kx * k->d[0];
                                if (iy < 0 || iy >= k->H || ix < 0 || ix >= k->W) continue;
                                const double xv = x[ix + k->W * (iy + k->H * (g * cin_g + cl + k->Cin * n))];
                                const double wv = w[kx + k->KW * (ky + k->KH * (cl + cin_g * co))];
                                s += xv * wv;
                                m += fabs(xv * wv);
                            }
                    const int64_t o = ox + Wo * (oy + Ho * (co + k->Cout * n));
                    out[o] = s;
                    mag[o] = m;
                }
}

static void run_conv(env *e, const ccase *k) {
    char what[128];
    snprintf(what, sizeof what, "conv %lldx%lldx%lldx%lld->%lld k%lldx%lld s%d,%d p%d,%d d%d,%d g%d %s/%s->%s",
             (long long)k->W, (long long)k->H, (long long)k->Cin, (long long)k->N, (long long)k->Cout,
             (long long)k->KW, (long long)k->KH, k->s[0], k->s[1], k->p[0], k->p[1], k->d[0], k->d[1], k->groups,
             rb_dtype_name(k->xt), rb_dtype_name(k->wt), rb_dtype_name(k->dt));
    const int64_t Wo = (k->W + 2 * k->p[0] - k->d[0] * (k->KW - 1) - 1) / k->s[0] + 1;
    const int64_t Ho = (k->H + 2 * k->p[1] - k->d[1] * (k->KH - 1) - 1) / k->s[1] + 1;
    const int64_t xne[4] = {k->W, k->H, k->Cin, k->N}, wne[4] = {k->KW, k->KH, k->Cin / k->groups, k->Cout},
                  bne[4] = {k->Cout, 1, 1, 1}, dne[4] = {Wo, Ho, k->Cout, k->N};
    gp x = gp_make(e->c, e->g, &e->rng, k->xt, xne, k->xl, -1, 1);
    gp w = gp_make(e->c, e->g, &e->rng, k->wt, wne, GP_CONTIG, -1, 1);
    gp b = gp_make(e->c, e->g, &e->rng, RB_F32, bne, GP_CONTIG, -1, 1);
    gp d = gp_make(e->c, e->g, &e->rng, k->dt, dne, k->dl, -1, 1);
    const int64_t n = rb_tensor_nelements(&d.c);
    double *xd = gp_read(&x, 0), *wd = gp_read(&w, 0), *bd = gp_read(&b, 0);
    double *ref = malloc(sizeof(double) * (size_t)n), *bound = malloc(sizeof(double) * (size_t)n);
    assert_true(ref && bound);
    ref_conv(k, xd, wd, k->bias ? bd : NULL, Wo, Ho, ref, bound);
    for (int64_t i = 0; i < n; i++) bound[i] = 1e-5 * bound[i] + half_ulp(k->dt) * fabs(ref[i]) + 1e-7;
    TU_OK(rb_conv2d(e->c, &d.c, &x.c, &w.c, k->bias ? &b.c : NULL, k->s, k->p, k->d, k->groups));
    double *got = gp_read(&d, 0);
    check_bounds(what, "cpu", got, ref, bound, n);
    free(got);
    /* cuDNN writes the sum and then adds the bias in f32: with a 16-bit dst
     * the sum without bias is rounded first, half an ulp of |ref - bias| more */
    double *bound_dnn = malloc(sizeof(double) * (size_t)n);
    assert_non_null(bound_dnn);
    for (int64_t i = 0; i < n; i++) {
        const int64_t co = i / (Wo * Ho) % k->Cout;
        bound_dnn[i] = bound[i] + (k->bias ? half_ulp(k->dt) * fabs(ref[i] - bd[co]) : 0.0);
    }
    /* pass 0: the default (cuDNN where loaded and it takes the case), pass 1: our kernels */
    for (int pass = 0; e->g && pass < 2; pass++) {
        const rb_gpu_tuning tune = {.own_conv = pass == 1};
        TU_OK(rb_gpu_backend_tune(e->g, &tune));
        rb_gpu_conv_stats s0, s1;
        TU_OK(rb_gpu_backend_conv_stats(e->g, &s0));
        poison_gpu(&d);
        TU_OK(rb_conv2d(e->g, &d.g, &x.g, &w.g, k->bias ? &b.g : NULL, k->s, k->p, k->d, k->groups));
        TU_OK(rb_backend_sync(e->g));
        TU_OK(rb_gpu_backend_conv_stats(e->g, &s1));
        const bool dnn = s1.cudnn_convs == s0.cudnn_convs + 1;
        /* exactly one of the two paths ran it */
        assert_true(dnn != (s1.own_convs == s0.own_convs + 1));
        assert_true(s1.cudnn_convs + s1.own_convs == s0.cudnn_convs + s0.own_convs + 1);
        if (pass == 1 && dnn) fail_msg("%s: own_conv is set but cuDNN ran it", what);
        if (pass == 0 && k->dnn && s1.cudnn_loaded && !dnn) fail_msg("%s: cuDNN is loaded but did not run it", what);
        got = gp_read(&d, 1);
        check_bounds(what, dnn ? "dnn" : "gpu", got, ref, dnn ? bound_dnn : bound, n);
        free(got);
        gp_expect_close(&d, 1e300, 1e300, what); /* nothing written around the view */
    }
    if (e->g) {
        const rb_gpu_tuning dflt = {0};
        TU_OK(rb_gpu_backend_tune(e->g, &dflt));
    }
    free(bound_dnn);
    free(xd);
    free(wd);
    free(bd);
    free(ref);
    free(bound);
    gp_free(&x);
    gp_free(&w);
    gp_free(&b);
    gp_free(&d);
}

static void test_conv2d(void **state) {
    env *e = *state;
    tu_rng_seed(&e->rng, 6001);
    const ccase cs[] = {
        /* the SIMT kernel: f32 (strided x and dst), stride 2, the VAE downsampler's unpadded form */
        {13, 9, 7, 2, 11, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, RB_F32, RB_F32, RB_F32, GP_SLICE, GP_PERM, true, false},
        {13, 9, 7, 2, 11, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, RB_F32, RB_F32, RB_F32, GP_CONTIG, GP_SLICE, true, false},
        {12, 10, 6, 2, 8, 3, 3, {2, 2}, {0, 0}, {1, 1}, 1, RB_F32, RB_F32, RB_F32, GP_CONTIG, GP_CONTIG, true, false},
        /* groups, a 3x1 kernel with dilation and per-axis stride / padding, f16 w */
        {11, 8, 12, 2, 9, 3, 1, {1, 2}, {1, 0}, {2, 1}, 3, RB_F32, RB_F16, RB_F32, GP_SLICE, GP_CONTIG, true, false},
        /* mixed dtypes (SIMT): f32 image into f16 weights (conv_in), bf16 x with f32 w */
        {8, 8, 4, 2, 40, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, RB_F32, RB_F16, RB_F16, GP_CONTIG, GP_CONTIG, true, false},
        {10, 7, 9, 1, 13, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, RB_BF16, RB_F32, RB_F32, GP_PERM, GP_CONTIG, false, false},
        /* 16-bit x and w of one type (tensor cores on CUDA): K = 63 (unaligned weight rows), stride 2 */
        {13, 9, 7, 2, 11, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, RB_F16, RB_F16, RB_F16, GP_SLICE, GP_CONTIG, true, false},
        /* 150 channels cross the 128-channel tile, f32 dst */
        {16, 16, 32, 2, 150, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, RB_F16, RB_F16, RB_F32, GP_CONTIG, GP_SLICE, true, false},
        /* 1x1 (shortcut / proj), bf16 */
        {17, 12, 40, 1, 24, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1,
         RB_BF16, RB_BF16, RB_BF16, GP_CONTIG, GP_CONTIG, true, true},
        /* few pixels, long k: split over blocks on the GPU */
        {9, 7, 320, 2, 200, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, RB_F16, RB_F16, RB_F16, GP_CONTIG, GP_CONTIG, true, true},
        {5, 4, 256, 2, 130, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1,
         RB_BF16, RB_BF16, RB_F32, GP_SLICE, GP_CONTIG, true, false},
        /* a UNet-like level: 2048 pixels, 64 -> 96 channels */
        {32, 32, 64, 2, 96, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, RB_F16, RB_F16, RB_F16, GP_CONTIG, GP_CONTIG, true, true},
        /* the same in f32 (exact f32 products, no TF32) */
        {32, 32, 64, 2, 96, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, RB_F32, RB_F32, RB_F32, GP_CONTIG, GP_CONTIG, true, false},
        /* one dtype throughout, contiguous (what cuDNN takes): groups with dilation and per-axis stride /
         * padding, no bias with stride 2, bf16 across the 128-channel tile, f16 1x1 with an odd K */
        {11, 8, 12, 2, 9, 3, 1, {1, 2}, {1, 0}, {2, 1}, 3, RB_F16, RB_F16, RB_F16, GP_CONTIG, GP_CONTIG, true, false},
        {13, 9, 8, 2, 16, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, RB_F16, RB_F16, RB_F16, GP_CONTIG, GP_CONTIG, false, false},
        {16, 16, 32, 2, 150, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1,
         RB_BF16, RB_BF16, RB_BF16, GP_CONTIG, GP_CONTIG, true, false},
        {12, 10, 21, 2, 40, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, RB_F16, RB_F16, RB_F16, GP_CONTIG, GP_CONTIG, true, false},
        {12, 10, 6, 2, 8, 3, 3, {2, 2}, {0, 0}, {1, 1}, 1, RB_F32, RB_F32, RB_F32, GP_CONTIG, GP_CONTIG, false, false},
        /* padded rows and planes at aligned addresses (cuDNN's strided descriptors, where it takes them) */
        {20, 12, 16, 2, 24, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, RB_F16, RB_F16, RB_F16, GP_PAD, GP_PAD, true, false},
        {13, 9, 8, 2, 40, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, RB_BF16, RB_BF16, RB_BF16, GP_CONTIG, GP_PAD, true, false},
        {14, 10, 8, 2, 12, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, RB_F32, RB_F32, RB_F32, GP_PAD, GP_CONTIG, true, false},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_conv(e, &cs[i]);
}

/* cuDNN is used where it can be: the process loads libcudnn.so.9, so the
 * CUDA backend must have loaded it (and say so in its device info), run an
 * SD-like convolution through it, and capture that call into a graph whose
 * replay equals the eager result bit for bit (same algorithm, deterministic). */
static void test_conv_cudnn(void **state) {
    env *e = *state;
    GP_NEED_GPU(e->g);
    rb_gpu_conv_stats st;
    TU_OK(rb_gpu_backend_conv_stats(e->g, &st));
    rb_device_info info;
    TU_OK(rb_backend_device_info(e->g, &info));
    print_message("%s features: %s\n", rb_backend_name(e->g), info.features);
    bool expect = false;
#if defined(RBEE_TEST_CUDNN)
    if (rb_backend_kind(e->g) == RB_DEVICE_CUDA) {
        void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            expect = true;
            dlclose(lib);
        } else {
            const char *why = dlerror();
            print_message("libcudnn.so.9 cannot be loaded here (%s): the CUDA backend runs its own kernels\n",
                          why ? why : "?");
        }
    }
#endif
    if (expect && !st.cudnn_loaded) fail_msg("libcudnn.so.9 loads in this process but the backend does not use it");
    if (rb_backend_kind(e->g) != RB_DEVICE_CUDA) assert_false(st.cudnn_loaded); /* HIP never loads it */
    assert_true((strstr(info.features, " cudnn-") != NULL) == st.cudnn_loaded);
    if (!st.cudnn_loaded) {
        print_message("cuDNN not in use on %s: nothing more to check\n", rb_backend_name(e->g));
        return;
    }
    tu_rng_seed(&e->rng, 6005);
    const int64_t xne[4] = {24, 20, 64, 2}, wne[4] = {3, 3, 64, 96}, bne[4] = {96, 1, 1, 1}, dne[4] = {24, 20, 96, 2};
    const int one[2] = {1, 1};
    gp x = gp_make(e->c, e->g, &e->rng, RB_F16, xne, GP_CONTIG, -1, 1);
    gp w = gp_make(e->c, e->g, &e->rng, RB_F16, wne, GP_CONTIG, -1, 1);
    gp b = gp_make(e->c, e->g, &e->rng, RB_F32, bne, GP_CONTIG, -1, 1);
    gp d = gp_make(e->c, e->g, &e->rng, RB_F16, dne, GP_CONTIG, -1, 1);
    rb_gpu_conv_stats s0, s1;
    TU_OK(rb_gpu_backend_conv_stats(e->g, &s0));
    TU_OK(rb_conv2d(e->g, &d.g, &x.g, &w.g, &b.g, one, one, one, 1));
    TU_OK(rb_backend_sync(e->g));
    TU_OK(rb_gpu_backend_conv_stats(e->g, &s1));
    assert_int_equal(s1.cudnn_convs, s0.cudnn_convs + 1);
    assert_int_equal(s1.own_convs, s0.own_convs);
    double *eager = gp_read(&d, 1);
    poison_gpu(&d);
    TU_OK(rb_backend_capture_begin(e->g));
    const rb_status cs = rb_conv2d(e->g, &d.g, &x.g, &w.g, &b.g, one, one, one, 1);
    rb_graph *gr = NULL;
    const rb_status ce = rb_backend_capture_end(e->g, &gr);
    TU_OK(cs);
    TU_OK(ce);
    TU_OK(rb_gpu_backend_conv_stats(e->g, &s0));
    assert_int_equal(s0.cudnn_convs, s1.cudnn_convs + 1); /* captured through cuDNN */
    TU_OK(rb_graph_launch(gr));
    TU_OK(rb_backend_sync(e->g));
    double *replay = gp_read(&d, 1);
    const int64_t n = rb_tensor_nelements(&d.c);
    for (int64_t i = 0; i < n; i++)
        if (!(replay[i] == eager[i]))
            fail_msg("graph replay element %lld: %.9g, eager %.9g", (long long)i, replay[i], eager[i]);
    print_message("cuDNN convolution captured and replayed: %lld elements equal to the eager run\n", (long long)n);
    rb_graph_free(gr);
    free(eager);
    free(replay);
    gp_free(&x);
    gp_free(&w);
    gp_free(&b);
    gp_free(&d);
}

/* ---- group norm ---- */

static double act_d(rb_unary_op act, double y) {
    switch (act) {
    case RB_UNARY_SILU: return y / (1.0 + exp(-y));
    case RB_UNARY_GELU: return 0.5 * y * (1.0 + erf(y / sqrt(2.0)));
    case RB_UNARY_RELU: return y > 0 ? y : 0;
    default: return y;
    }
}

typedef struct gcase {
    int64_t W, H, C, N;
    int G;
    rb_dtype st, dt;
    gp_layout sl, dl;
    float lo, hi;
    rb_unary_op act; /* RB_UNARY_COUNT_: plain group norm */
} gcase;

static void run_gn(env *e, const gcase *k) {
    char what[128];
    snprintf(what, sizeof what, "group_norm %lldx%lldx%lldx%lld G%d %s->%s [%g,%g) %s", (long long)k->W,
             (long long)k->H, (long long)k->C, (long long)k->N, k->G, rb_dtype_name(k->st), rb_dtype_name(k->dt),
             (double)k->lo, (double)k->hi, k->act == RB_UNARY_COUNT_ ? "" : "act");
    const int64_t ne[4] = {k->W, k->H, k->C, k->N}, pne[4] = {k->C, 1, 1, 1};
    const float eps = 1e-5f;
    gp s = gp_make(e->c, e->g, &e->rng, k->st, ne, k->sl, k->lo, k->hi);
    gp d = gp_make(e->c, e->g, &e->rng, k->dt, ne, k->dl, -1, 1);
    gp w = gp_make(e->c, e->g, &e->rng, RB_F32, pne, GP_CONTIG, 0.5f, 1.5f);
    gp b = gp_make(e->c, e->g, &e->rng, RB_F32, pne, GP_CONTIG, -1, 1);
    const int64_t n = rb_tensor_nelements(&s.c), plane = k->W * k->H, cg = k->C / k->G;
    double *x = gp_read(&s, 0), *wd = gp_read(&w, 0), *bd = gp_read(&b, 0);
    double *ref = malloc(sizeof(double) * (size_t)n), *bound = malloc(sizeof(double) * (size_t)n);
    assert_true(ref && bound);
    for (int64_t in = 0; in < k->N; in++)
        for (int g = 0; g < k->G; g++) {
            const double *gx = x + (in * k->C + g * cg) * plane;
            const int64_t m = cg * plane;
            double mean = 0, var = 0;
            for (int64_t i = 0; i < m; i++) mean += gx[i];
            mean /= (double)m;
            for (int64_t i = 0; i < m; i++) var += (gx[i] - mean) * (gx[i] - mean);
            var /= (double)m;
            const double rs = 1.0 / sqrt(var + (double)eps);
            for (int64_t i = 0; i < m; i++) {
                const int64_t c = g * cg + i / plane, o = (in * k->C + g * cg) * plane + i;
                const double kk = rs * wd[c], y = (gx[i] - mean) * kk + bd[c];
                ref[o] = act_d(k->act, y);
                /* the activations used here have slopes within [-0.2, 1.2] */
                bound[o] = 1.2 * (4e-6 * (fabs(gx[i] * kk) + fabs(mean * kk) + fabs(bd[c])) + 4e-6) +
                           half_ulp(k->dt) * fabs(ref[o]) * 1.1 + 1e-7;
                if (k->act != RB_UNARY_COUNT_ && k->dt != RB_F32) /* the unfused pair rounds y first */
                    bound[o] += 1.2 * half_ulp(k->dt) * fabs(y);
            }
        }
    rb_backend *bes[2] = {e->c, e->g};
    for (int side = 0; side < 2; side++) {
        if (!bes[side]) continue;
        rb_tensor *dv = side ? &d.g : &d.c;
        const rb_tensor *sv = side ? &s.g : &s.c, *wv = side ? &w.g : &w.c, *bv = side ? &b.g : &b.c;
        if (side) poison_gpu(&d);
        if (k->act == RB_UNARY_COUNT_) TU_OK(rb_group_norm(bes[side], dv, sv, k->G, wv, bv, eps));
        else TU_OK(rb_group_norm_act(bes[side], dv, sv, k->G, wv, bv, eps, k->act));
        TU_OK(rb_backend_sync(bes[side]));
        double *got = gp_read(&d, side);
        check_bounds(what, side ? "gpu" : "cpu", got, ref, bound, n);
        free(got);
    }
    if (e->g) gp_expect_close(&d, 1e300, 1e300, what);
    if (k->act != RB_UNARY_COUNT_) {
        /* the CPU's fused op equals group_norm then the activation on dst, bit for bit */
        double *fused = gp_read(&d, 0);
        TU_OK(rb_group_norm(e->c, &d.c, &s.c, k->G, &w.c, &b.c, eps));
        TU_OK(rb_unary(e->c, k->act, &d.c, &d.c));
        double *pair = gp_read(&d, 0);
        for (int64_t i = 0; i < n; i++)
            if (memcmp(&fused[i], &pair[i], sizeof(double)) != 0)
                fail_msg("%s: cpu fused %.9g differs from the unfused pair %.9g at %lld", what, fused[i], pair[i],
                         (long long)i);
        free(fused);
        free(pair);
    }
    free(x);
    free(wd);
    free(bd);
    free(ref);
    free(bound);
    gp_free(&s);
    gp_free(&d);
    gp_free(&w);
    gp_free(&b);
}

static void test_group_norm(void **state) {
    env *e = *state;
    tu_rng_seed(&e->rng, 6002);
    const gcase cs[] = {
        {13, 9, 32, 2, 8, RB_F32, RB_F32, GP_SLICE, GP_PERM, -2, 3, RB_UNARY_COUNT_},
        {13, 9, 32, 2, 8, RB_F32, RB_F32, GP_CONTIG, GP_CONTIG, -2, 3, RB_UNARY_SILU},
        {16, 16, 64, 2, 32, RB_F16, RB_F16, GP_CONTIG, GP_CONTIG, -3, 3, RB_UNARY_SILU},
        {20, 6, 40, 1, 4, RB_BF16, RB_BF16, GP_CONTIG, GP_SLICE, -1, 2, RB_UNARY_GELU},
        {7, 5, 12, 3, 3, RB_F16, RB_F32, GP_PERM, GP_CONTIG, -1, 1, RB_UNARY_RELU},
        /* mean 1000, spread 1: f32 sums of squares would cancel */
        {32, 32, 64, 2, 32, RB_F32, RB_F32, GP_CONTIG, GP_CONTIG, 999, 1001, RB_UNARY_COUNT_},
        /* groups of 8192 values that the GPU splits over blocks, f16 in, f32 out */
        {64, 64, 64, 2, 32, RB_F16, RB_F32, GP_CONTIG, GP_CONTIG, -4, 4, RB_UNARY_SILU},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_gn(e, &cs[i]);
    /* activations other than silu, gelu, gelu_tanh, relu are refused */
    const int64_t ne[4] = {4, 4, 8, 1};
    gp s = gp_make(e->c, NULL, &e->rng, RB_F32, ne, GP_CONTIG, -1, 1);
    gp d = gp_make(e->c, NULL, &e->rng, RB_F32, ne, GP_CONTIG, -1, 1);
    assert_int_equal(rb_group_norm_act(e->c, &d.c, &s.c, 4, NULL, NULL, 1e-5f, RB_UNARY_EXP), RB_E_INVALID);
    assert_non_null(strstr(rb_backend_last_error(e->c), "rb_group_norm_act"));
    assert_int_equal(rb_group_norm_act(e->c, &d.c, &s.c, 3, NULL, NULL, 1e-5f, RB_UNARY_SILU), RB_E_INVALID);
    TU_OK(rb_group_norm_act(e->c, &d.c, &s.c, 4, NULL, NULL, 1e-5f, RB_UNARY_SILU));
    gp_free(&s);
    gp_free(&d);
}

/* ---- upsample, glu, matmul with 16-bit results ---- */

static void test_upsample_glu_matmul(void **state) {
    env *e = *state;
    GP_NEED_GPU(e->g);
    tu_rng_seed(&e->rng, 6003);
    const struct {
        int64_t W, H, Wo, Ho, C, N;
        rb_dtype st, dt;
        gp_layout sl, dl;
    } us[] = {
        {7, 5, 14, 10, 6, 2, RB_F32, RB_F32, GP_SLICE, GP_CONTIG}, /* nearest 2x */
        {8, 8, 16, 16, 33, 2, RB_F16, RB_F16, GP_CONTIG, GP_CONTIG},
        {9, 6, 17, 13, 5, 1, RB_BF16, RB_F32, GP_PERM, GP_SLICE}, /* to a skip's odd size */
        {12, 10, 5, 4, 3, 2, RB_F32, RB_F16, GP_CONTIG, GP_PERM}, /* down */
    };
    for (size_t i = 0; i < sizeof us / sizeof us[0]; i++)
        for (int mode = 0; mode < 2; mode++) {
            const int64_t sne[4] = {us[i].W, us[i].H, us[i].C, us[i].N},
                          dne[4] = {us[i].Wo, us[i].Ho, us[i].C, us[i].N};
            gp s = gp_make(e->c, e->g, &e->rng, us[i].st, sne, us[i].sl, -3, 3);
            gp d = gp_make(e->c, e->g, &e->rng, us[i].dt, dne, us[i].dl, -1, 1);
            poison_gpu(&d);
            TU_OK(rb_upsample(e->c, &d.c, &s.c, (rb_upsample_mode)mode));
            TU_OK(rb_upsample(e->g, &d.g, &s.g, (rb_upsample_mode)mode));
            char what[96];
            snprintf(what, sizeof what, "upsample %s %lldx%lld->%lldx%lld %s->%s", mode ? "bilinear" : "nearest",
                     (long long)us[i].W, (long long)us[i].H, (long long)us[i].Wo, (long long)us[i].Ho,
                     rb_dtype_name(us[i].st), rb_dtype_name(us[i].dt));
            /* bilinear: three lerps of values up to 3 in f32, each within an ulp of 3
             * whichever way it rounds (contractions differ): 1e-6 absolute */
            if (mode == 0) gp_expect_close(&d, 0, 0, what);
            else gp_expect_close(&d, gp_tol(us[i].dt, 1e-6), 1e-6, what);
            gp_free(&s);
            gp_free(&d);
        }
    /* binary ops over rows of 4-element multiples: residual adds, bias rows,
     * one time-embedding value per image row; exact (one f32 op, one rounding) */
    const rb_dtype bd[3] = {RB_F32, RB_F16, RB_BF16};
    for (int t = 0; t < 3; t++) {
        const int64_t dne[4] = {40, 7, 3, 2}, rne[4] = {40, 1, 1, 1}, sne[4] = {1, 1, 3, 2}, cne[4] = {1, 7, 3, 1};
        gp d = gp_make(e->c, e->g, &e->rng, bd[t], dne, t == 1 ? GP_SLICE : GP_CONTIG, -1, 1);
        gp a = gp_make(e->c, e->g, &e->rng, bd[(t + 1) % 3], dne, t == 2 ? GP_SLICE : GP_CONTIG, -3, 3);
        gp rv = gp_make(e->c, e->g, &e->rng, RB_F32, rne, GP_CONTIG, -1, 1);
        gp sv = gp_make(e->c, e->g, &e->rng, bd[t], sne, GP_CONTIG, -1, 1);
        gp cv = gp_make(e->c, e->g, &e->rng, RB_F16, cne, GP_CONTIG, 0.5f, 2);
        const struct { rb_binary_op op; const gp *x, *y; } bs[] = {
            {RB_BINARY_ADD, &a, &rv}, {RB_BINARY_MUL, &sv, &a}, {RB_BINARY_SUB, &a, &cv}, {RB_BINARY_ADD, &d, &a}};
        for (size_t k = 0; k < sizeof bs / sizeof bs[0]; k++) {
            TU_OK(rb_binary(e->c, bs[k].op, &d.c, &bs[k].x->c, &bs[k].y->c));
            TU_OK(rb_binary(e->g, bs[k].op, &d.g, &bs[k].x->g, &bs[k].y->g));
            char what[64];
            snprintf(what, sizeof what, "binary rows %s case %zu", rb_dtype_name(bd[t]), k);
            gp_expect_close(&d, 0, 0, what);
        }
        gp_free(&d);
        gp_free(&a);
        gp_free(&rv);
        gp_free(&sv);
        gp_free(&cv);
    }
    /* image <-> tokens: a [C, T, B] view of a [T, C, B] tensor cast to contiguous tokens, and back */
    for (int t = 0; t < 3; t++) {
        const int64_t tne[4] = {40, 300, 2, 1}, ine[4] = {300, 40, 2, 1};
        gp img = gp_make(e->c, e->g, &e->rng, bd[t], tne, GP_PERM, -2, 2);
        gp tok = gp_make(e->c, e->g, &e->rng, bd[(t + 1) % 3], tne, GP_CONTIG, -1, 1);
        poison_gpu(&tok);
        TU_OK(rb_cast(e->c, &tok.c, &img.c));
        TU_OK(rb_cast(e->g, &tok.g, &img.g));
        gp_expect_close(&tok, 0, 0, "cast image -> tokens (transposing)");
        gp back = gp_make(e->c, e->g, &e->rng, bd[t], ine, GP_CONTIG, -1, 1);
        rb_tensor bc = back.c, bg = back.g; /* its [C, T, B] view */
        bc.ne[0] = bg.ne[0] = 40;
        bc.ne[1] = bg.ne[1] = 300;
        bc.nb[0] = bg.nb[0] = back.c.nb[1];
        bc.nb[1] = bg.nb[1] = back.c.nb[0];
        TU_OK(rb_cast(e->c, &bc, &tok.c));
        TU_OK(rb_cast(e->g, &bg, &tok.g));
        gp_expect_close(&back, 0, 0, "cast tokens -> image (strided dst)");
        gp_free(&img);
        gp_free(&tok);
        gp_free(&back);
    }
    /* GEGLU in half precision: gate and value halves of one projection */
    const rb_dtype hd[2] = {RB_F16, RB_BF16};
    for (int t = 0; t < 2; t++) {
        const int64_t pne[4] = {2 * 52, 37, 2, 1}, dne[4] = {52, 37, 2, 1};
        gp p = gp_make(e->c, e->g, &e->rng, hd[t], pne, GP_CONTIG, -4, 4);
        gp d = gp_make(e->c, e->g, &e->rng, hd[t], dne, t ? GP_SLICE : GP_CONTIG, -1, 1);
        rb_tensor vc = p.c, gc = p.c, vg = p.g, gg = p.g;
        vc.ne[0] = gc.ne[0] = vg.ne[0] = gg.ne[0] = 52;
        gc.offs += 52 * p.c.nb[0];
        gg.offs += 52 * p.g.nb[0];
        TU_OK(rb_glu(e->c, &d.c, &gc, &vc, RB_UNARY_GELU));
        TU_OK(rb_glu(e->g, &d.g, &gg, &vg, RB_UNARY_GELU));
        gp_expect_close(&d, gp_tol(hd[t], 1e-5), 1e-6, t ? "glu gelu bf16" : "glu gelu f16");
        /* the generic kernel: a permuted dst */
        gp d2 = gp_make(e->c, e->g, &e->rng, hd[t], dne, GP_PERM, -1, 1);
        TU_OK(rb_glu(e->c, &d2.c, &gc, &vc, RB_UNARY_SILU));
        TU_OK(rb_glu(e->g, &d2.g, &gg, &vg, RB_UNARY_SILU));
        gp_expect_close(&d2, gp_tol(hd[t], 1e-5), 1e-6, "glu silu strided");
        gp_free(&p);
        gp_free(&d);
        gp_free(&d2);
    }
    /* linear layers of a half-precision network: 16-bit weights, activations and results */
    for (int t = 0; t < 2; t++)
        for (int m = 0; m < 2; m++) {
            const int64_t M = m ? 300 : 2, wne[4] = {320, 200, 1, 1}, bne[4] = {320, M, 1, 1}, dne[4] = {200, M, 1, 1};
            gp a = gp_make(e->c, e->g, &e->rng, hd[t], wne, GP_CONTIG, -1, 1);
            gp b = gp_make(e->c, e->g, &e->rng, hd[t], bne, GP_CONTIG, -1, 1);
            gp d = gp_make(e->c, e->g, &e->rng, hd[t], dne, m ? GP_CONTIG : GP_SLICE, -1, 1);
            poison_gpu(&d);
            TU_OK(rb_matmul(e->c, &d.c, &a.c, &b.c));
            TU_OK(rb_matmul(e->g, &d.g, &a.g, &b.g));
            char what[64];
            snprintf(what, sizeof what, "matmul %s -> %s, M = %lld", rb_dtype_name(hd[t]), rb_dtype_name(hd[t]),
                     (long long)M);
            /* f32 sums of 320 products in two orders, then one rounding each */
            gp_expect_close(&d, 2 * half_ulp(hd[t]) + 1e-5, 1e-3, what);
            gp_free(&a);
            gp_free(&b);
            gp_free(&d);
        }
}

/* ---- attention at the diffusion shapes ---- */

/* Swaps dims 1 and 2 of both views: a contiguous [D, H, T, B] parent seen as
 * [D, T, H, B], the heads of a [H D, T, B] projection. */
static void swap12(gp *x) {
    rb_tensor *ts[2] = {&x->c, &x->g};
    for (int i = 0; i < 2; i++) {
        const int64_t ne = ts[i]->ne[1];
        const size_t nb = ts[i]->nb[1];
        ts[i]->ne[1] = ts[i]->ne[2];
        ts[i]->nb[1] = ts[i]->nb[2];
        ts[i]->ne[2] = ne;
        ts[i]->nb[2] = nb;
    }
}

typedef struct acase {
    int64_t D, Tq, Tk, H, B;
    rb_dtype qt, kvt, dt;
} acase;

static void run_attn(env *e, const acase *k) {
    char what[128];
    snprintf(what, sizeof what, "attention D%lld Tq%lld Tk%lld H%lld B%lld %s/%s->%s", (long long)k->D,
             (long long)k->Tq, (long long)k->Tk, (long long)k->H, (long long)k->B, rb_dtype_name(k->qt),
             rb_dtype_name(k->kvt), rb_dtype_name(k->dt));
    const int64_t qne[4] = {k->D, k->H, k->Tq, k->B}, kne[4] = {k->D, k->H, k->Tk, k->B},
                  dne[4] = {k->D, k->H, k->Tq, k->B};
    gp q = gp_make(e->c, e->g, &e->rng, k->qt, qne, GP_CONTIG, -2, 2);
    gp kk = gp_make(e->c, e->g, &e->rng, k->kvt, kne, GP_CONTIG, -1, 1);
    gp v = gp_make(e->c, e->g, &e->rng, k->kvt, kne, GP_CONTIG, -1, 1);
    gp d = gp_make(e->c, e->g, &e->rng, k->dt, dne, GP_CONTIG, -1, 1);
    swap12(&q);
    swap12(&kk);
    swap12(&v);
    double *qd = gp_read(&q, 0), *kd = gp_read(&kk, 0), *vd = gp_read(&v, 0);
    const int64_t n = rb_tensor_nelements(&d.c), D = k->D;
    double *ref = malloc(sizeof(double) * (size_t)n), *s = malloc(sizeof(double) * (size_t)k->Tk);
    assert_true(ref && s);
    const float scale = 1.0f / sqrtf((float)D);
    for (int64_t b = 0; b < k->B; b++)
        for (int64_t h = 0; h < k->H; h++)
            for (int64_t i = 0; i < k->Tq; i++) {
                const double *qr = qd + D * (i + k->Tq * (h + k->H * b));
                double mx = -INFINITY, l = 0;
                for (int64_t j = 0; j < k->Tk; j++) {
                    const double *kr = kd + D * (j + k->Tk * (h + k->H * b));
                    double x = 0;
                    for (int64_t t = 0; t < D; t++) x += qr[t] * (double)scale * kr[t];
                    s[j] = x;
                    mx = x > mx ? x : mx;
                }
                double *o = ref + D * (h + k->H * (i + k->Tq * b));
                for (int64_t t = 0; t < D; t++) o[t] = 0;
                for (int64_t j = 0; j < k->Tk; j++) {
                    const double p = exp(s[j] - mx);
                    l += p;
                    const double *vr = vd + D * (j + k->Tk * (h + k->H * b));
                    for (int64_t t = 0; t < D; t++) o[t] += p * vr[t];
                }
                for (int64_t t = 0; t < D; t++) o[t] /= l;
            }
    const rb_attn_params p = {.scale = scale};
    /* the tensor-core kernel takes 16-bit K/V with head dims it has tiles for, 16 queries or more */
    const bool tc = (k->kvt == RB_F16 || k->kvt == RB_BF16) && D % 8 == 0 && k->Tq >= 16 &&
                    (D == 40 || D == 64 || D == 80 || D == 96 || D == 128 || D == 160 || D == 256);
    rb_backend *bes[2] = {e->c, e->g};
    for (int side = 0; side < 2; side++) {
        if (!bes[side]) continue;
        if (side) poison_gpu(&d);
        TU_OK(rb_attention(bes[side], side ? &d.g : &d.c, side ? &q.g : &q.c, side ? &kk.g : &kk.c,
                           side ? &v.g : &v.c, &p));
        TU_OK(rb_backend_sync(bes[side]));
        double *got = gp_read(&d, side);
        if (side && tc) {
            double num = 0, den = 0, maxd = 0;
            for (int64_t i = 0; i < n; i++) {
                const double df = isfinite(got[i]) ? fabs(got[i] - ref[i]) : INFINITY;
                num += df * df;
                den += ref[i] * ref[i];
                maxd = df > maxd ? df : maxd;
            }
            const double rel = sqrt(num / den), bnd = k->kvt == RB_BF16 ? 1e-2 : 2e-3;
            print_message("%-52s gpu tensor cores: rel L2 %.2e, max |diff| %.2e (bounds %.0e)\n", what, rel, maxd, bnd);
            if (!(rel <= bnd) || !(maxd <= bnd)) fail_msg("%s: tensor-core result out of bounds", what);
        } else {
            double *bound = malloc(sizeof(double) * (size_t)n);
            assert_non_null(bound);
            /* 16-bit q/k/v on the CPU (and the generic kernel) are widened exactly, then f32 math */
            for (int64_t i = 0; i < n; i++) bound[i] = 2e-6 + 2e-5 * fabs(ref[i]) + 1.1 * half_ulp(k->dt) * fabs(ref[i]);
            check_bounds(what, side ? "gpu" : "cpu", got, ref, bound, n);
            free(bound);
        }
        free(got);
    }
    if (e->g) gp_expect_close(&d, 1e300, 1e300, what);
    free(qd);
    free(kd);
    free(vd);
    free(ref);
    free(s);
    gp_free(&q);
    gp_free(&kk);
    gp_free(&v);
    gp_free(&d);
}

static void test_attention_sd(void **state) {
    env *e = *state;
    tu_rng_seed(&e->rng, 6004);
    const acase cs[] = {
        /* SD1.5 heads of 40 (8 x 40 = 320): self and cross attention */
        {40, 300, 300, 5, 2, RB_F16, RB_F16, RB_F16},
        {40, 300, 77, 5, 2, RB_F16, RB_F16, RB_F16},
        {40, 130, 77, 3, 1, RB_BF16, RB_BF16, RB_F32},
        /* SD2 / SDXL heads of 64, prompts of 154 and 231 tokens */
        {64, 96, 154, 4, 2, RB_F16, RB_F16, RB_F16},
        {64, 1000, 1000, 2, 1, RB_F16, RB_F16, RB_F32},
        {80, 128, 231, 3, 2, RB_F16, RB_F16, RB_F32},
        /* SD1.5's deepest level: 8 heads of 160 */
        {160, 200, 77, 2, 2, RB_BF16, RB_BF16, RB_BF16},
        {160, 64, 64, 3, 1, RB_F16, RB_F16, RB_F16},
        /* the VAE's mid-block attention: one head of 512 (generic kernel) */
        {512, 100, 100, 1, 2, RB_F16, RB_F16, RB_F16},
        /* the fixtures' tiny heads (generic kernel), f32 and 16-bit */
        {8, 64, 77, 2, 2, RB_F32, RB_F32, RB_F32},
        {4, 64, 64, 8, 2, RB_F16, RB_F16, RB_F16},
        {2, 20, 77, 8, 2, RB_F32, RB_F32, RB_F16},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_attn(e, &cs[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_conv2d, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conv_cudnn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_norm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upsample_glu_matmul, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attention_sd, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

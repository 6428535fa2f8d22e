/* The fused ops rb_glu, rb_add_rms_norm and rb_matmul_fused (with glu_out
 * and rope too) exist so the model can drop a pass and a launch per call; they must
 * not change the CPU's numbers (rb_matmul_fused runs the separate ops there). Each
 * is checked against a naive double reference and, bit for bit, against the
 * unfused pair it replaces (rb_unary + rb_binary(MUL), rb_binary(ADD) +
 * rb_rms_norm), on the model's layouts (gate/up as strided halves of one
 * [2F, T] projection, in place) and odd ones (permuted, sliced, rows of 1 and
 * 4097), under the scalar ISA and auto with 1 and 3 threads (the larger
 * shapes take the thread pool). */
#include "ref_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const rb_unary_op ACTS[4] = {RB_UNARY_SILU, RB_UNARY_GELU_TANH, RB_UNARY_GELU, RB_UNARY_RELU};

/* The half of a [2F, ...] tensor starting at element `first` of each row. */
static rb_tensor half_view(const tt *p, int64_t first) {
    rb_tensor v = p->t;
    v.ne[0] = p->t.ne[0] / 2;
    v.offs += (size_t)first * p->t.nb[0];
    return v;
}

/* Values of the half view, ggml order. */
static double *half_vals(const tt *p, int64_t first) {
    const int64_t *ne = p->t.ne, F = ne[0] / 2;
    double *v = malloc((size_t)(p->n / 2) * sizeof(double));
    assert_non_null(v);
    int64_t k = 0;
    for (int64_t i3 = 0; i3 < ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++)
                for (int64_t i0 = 0; i0 < F; i0++) v[k++] = p->v[tf_idx(ne, first + i0, i1, i2, i3)];
    return v;
}

/* Reads a view of a tt's parent through a temporary tt sharing its buffer. */
static double *read_view(const tt *p, const rb_tensor *view) {
    tt w = *p;
    w.t = *view;
    w.n = view->ne[0] * view->ne[1] * view->ne[2] * view->ne[3];
    return tf_read(&w);
}

static void test_glu(void **state) {
    (void)state;
    /* parent [2F, T, A, B] and its layout; the first is the model's decode/prefill shape */
    const struct { int64_t ne[4]; tf_layout lay; } cases[] = {
        {{2 * 1000, 7, 1, 1}, TF_CONTIG}, {{2 * 9, 13, 3, 2}, TF_PERM}, {{2 * 1, 5, 1, 1}, TF_SLICE},
        {{2 * 4097, 2, 1, 1}, TF_SLICE}};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 31000 + (uint64_t)ci);
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
            for (int a = 0; a < 4; a++) {
                const rb_unary_op act = ACTS[a];
                const int64_t *pne = cases[k].ne, F = pne[0] / 2;
                const int64_t dne[4] = {F, pne[1], pne[2], pne[3]};
                tt p = tf_make(be, &rng, RB_F32, pne, cases[k].lay, -5, 5);
                rb_tensor gate = half_view(&p, 0), up = half_view(&p, F);
                double *gv = half_vals(&p, 0), *uv = half_vals(&p, F);
                tt d = tf_make(be, &rng, RB_F32, dne, k == 1 ? TF_SLICE : TF_CONTIG, -1, 1);
                tt u = tf_make(be, &rng, RB_F32, dne, k == 1 ? TF_PERM : TF_CONTIG, -1, 1);
                TU_OK(rb_glu(be, &d.t, &gate, &up, act));
                char what[96];
                snprintf(what, sizeof what, "glu act %d case %zu cfg %d", (int)act, k, ci);
                /* double reference */
                double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
                for (int64_t i = 0; i < d.n; i++) ref[i] = ref_unary(act, gv[i]) * uv[i];
                tf_expect_close(got, ref, d.n, 1e-5, 1e-6, what);
                assert_true(tf_pad_intact(&d));
                assert_true(tf_unchanged(&p));
                /* the unfused pair, as the model calls it: identical bits */
                TU_OK(rb_unary(be, act, &u.t, &gate));
                TU_OK(rb_binary(be, RB_BINARY_MUL, &u.t, &u.t, &up));
                double *un = tf_read(&u);
                tf_expect_close(got, un, d.n, 0, 0, what);
                /* in place over gate, then over up (the parent is rewritten) */
                for (int side = 0; side < 2; side++) {
                    tt q = tf_from(be, RB_F32, pne, cases[k].lay, p.v);
                    rb_tensor qg = half_view(&q, 0), qu = half_view(&q, F);
                    rb_tensor *dst = side ? &qu : &qg;
                    TU_OK(rb_glu(be, dst, &qg, &qu, act));
                    double *ip = read_view(&q, dst);
                    tf_expect_close(ip, un, d.n, 0, 0, side ? "glu in place over up" : "glu in place over gate");
                    free(ip);
                    tf_free(&q);
                }
                free(un);
                free(got);
                free(ref);
                free(gv);
                free(uv);
                tf_free(&p);
                tf_free(&d);
                tf_free(&u);
            }
        rb_backend_destroy(be);
    }
}

static void test_add_rms_norm(void **state) {
    (void)state;
    const struct { int64_t ne[4]; tf_layout lx, ld, lh; int w; } cases[] = {
        /* w: 0 none, 1 f32, 2 bf16, 3 f16 */
        {{2048, 7, 1, 1}, TF_CONTIG, TF_CONTIG, TF_CONTIG, 1}, {{7, 13, 3, 2}, TF_PERM, TF_SLICE, TF_PERM, 2},
        {{1, 3, 1, 1}, TF_SLICE, TF_PERM, TF_SLICE, 0}, {{4097, 11, 1, 1}, TF_SLICE, TF_CONTIG, TF_SLICE, 3},
        {{64, 5, 2, 1}, TF_CONTIG, TF_SLICE, TF_CONTIG, 0}};
    const rb_dtype wdt[4] = {RB_F32, RB_F32, RB_BF16, RB_F16};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 32000 + (uint64_t)ci);
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
            for (int alias = 0; alias < 2; alias++) { /* 1: delta is h's view */
                const int64_t *ne = cases[k].ne, wne[4] = {ne[0], 1, 1, 1};
                const float eps = k == 2 ? 0.0f : 1e-6f;
                tt x = tf_make(be, &rng, RB_F32, ne, cases[k].lx, -3, 3);
                tt dl = tf_make(be, &rng, RB_F32, ne, cases[k].ld, -2, 2);
                tt h = alias ? tf_from(be, RB_F32, ne, cases[k].lh, dl.v) : tf_make(be, &rng, RB_F32, ne, cases[k].lh, -1, 1);
                tt w = tf_make(be, &rng, wdt[cases[k].w], wne, TF_SLICE, 0.5f, 1.5f);
                const rb_tensor *wp = cases[k].w ? &w.t : NULL;
                /* the unfused pair on copies, before the fused call changes x */
                tt x2 = tf_from(be, RB_F32, ne, cases[k].lx, x.v);
                tt h2 = tf_from(be, RB_F32, ne, cases[k].lh, h.v);
                tt d2 = tf_from(be, RB_F32, ne, cases[k].ld, dl.v);
                TU_OK(rb_binary(be, RB_BINARY_ADD, &x2.t, &x2.t, alias ? &h2.t : &d2.t));
                TU_OK(rb_rms_norm(be, &h2.t, &x2.t, wp, eps));

                TU_OK(rb_add_rms_norm(be, &x.t, alias ? &h.t : &dl.t, wp, eps, &h.t));
                char what[96];
                snprintf(what, sizeof what, "add_rms_norm case %zu alias %d cfg %d", k, alias, ci);
                double *gx = tf_read(&x), *gh = tf_read(&h), *rx = malloc((size_t)x.n * sizeof(double)),
                       *rh = malloc((size_t)x.n * sizeof(double));
                for (int64_t i = 0; i < x.n; i++) rx[i] = (float)(x.v[i] + dl.v[i]); /* one f32 rounding */
                for (int64_t r = 0; r < x.n / ne[0]; r++)
                    ref_rms_norm_row(rx + r * ne[0], wp ? w.v : NULL, eps, ne[0], rh + r * ne[0]);
                tf_expect_close(gx, rx, x.n, 0, 0, what);      /* the sum is exact f32 addition */
                tf_expect_close(gh, rh, x.n, 1e-6, 1e-12, what); /* three roundings: ~2e-7 */
                assert_true(tf_pad_intact(&x));
                assert_true(tf_pad_intact(&h));
                if (!alias) assert_true(tf_unchanged(&dl));
                assert_true(tf_unchanged(&w));
                double *ux = tf_read(&x2), *uh = tf_read(&h2);
                tf_expect_close(gx, ux, x.n, 0, 0, "add_rms_norm x vs unfused");
                tf_expect_close(gh, uh, x.n, 0, 0, "add_rms_norm h vs unfused");
                free(gx);
                free(gh);
                free(rx);
                free(rh);
                free(ux);
                free(uh);
                tf_free(&x);
                tf_free(&dl);
                tf_free(&h);
                tf_free(&w);
                tf_free(&x2);
                tf_free(&h2);
                tf_free(&d2);
            }
        rb_backend_destroy(be);
    }
}

/* rb_matmul_fused: norm (with and without weight), glu (each activation)
 * and accumulate, against a double reference and, bit for bit, against the
 * separate ops it stands for; the scratch holds what the separate ops wrote. */
static void test_matmul_fused(void **state) {
    (void)state;
    const int64_t K = 96, N = 7, M = 3;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 33000 + (uint64_t)ci);
        const int64_t ane[4] = {K, N, 1, 1}, bne[4] = {K, M, 1, 1}, pne[4] = {2 * K, M, 1, 1}, dne[4] = {N, M, 1, 1},
                      wne[4] = {K, 1, 1, 1};
        for (int mode = 0; mode < 7; mode++) {
            /* 0 norm+w, 1 norm no w, 2 norm+w+acc, 3-6 glu+acc for each activation */
            const bool norm = mode <= 2, glu = mode >= 3, acc = mode >= 2;
            const rb_unary_op act = glu ? ACTS[mode - 3] : RB_UNARY_SILU;
            tt a = tf_make(be, &rng, RB_F32, ane, TF_CONTIG, -1, 1);
            tt p = tf_make(be, &rng, RB_F32, glu ? pne : bne, TF_CONTIG, -3, 3); /* b, or gate | up */
            tt w = tf_make(be, &rng, RB_F32, wne, TF_SLICE, 0.5f, 1.5f);
            tt d = tf_make(be, &rng, RB_F32, dne, TF_SLICE, -2, 2), d2 = tf_from(be, RB_F32, dne, TF_SLICE, d.v);
            tt ti = tf_make(be, &rng, RB_F32, bne, TF_CONTIG, 0, 1), to = tf_make(be, &rng, RB_F32, dne, TF_CONTIG, 0, 1);
            tt ti2 = tf_from(be, RB_F32, bne, TF_CONTIG, ti.v), to2 = tf_from(be, RB_F32, dne, TF_CONTIG, to.v);
            rb_tensor b = glu ? half_view(&p, 0) : p.t, up = glu ? half_view(&p, K) : p.t;
            double *bv = glu ? half_vals(&p, 0) : tf_read(&p), *uv = glu ? half_vals(&p, K) : NULL;
            const rb_matmul_fusion f = {.norm = norm, .norm_w = mode == 1 ? NULL : &w.t, .eps = 1e-5f, .glu = glu,
                                        .up = &up, .act = act, .accumulate = acc, .tmp_in = &ti.t, .tmp_out = &to.t};
            TU_OK(rb_matmul_fused(be, &d.t, &a.t, &b, &f));
            /* the separate ops */
            if (norm) TU_OK(rb_rms_norm(be, &ti2.t, &b, f.norm_w, f.eps));
            if (glu) TU_OK(rb_glu(be, &ti2.t, &b, &up, act));
            TU_OK(rb_matmul(be, acc ? &to2.t : &d2.t, &a.t, &ti2.t));
            if (acc) TU_OK(rb_binary(be, RB_BINARY_ADD, &d2.t, &d2.t, &to2.t));
            char what[64];
            snprintf(what, sizeof what, "matmul_fused mode %d cfg %d", mode, ci);
            double *got = tf_read(&d), *sep = tf_read(&d2), *in = malloc(sizeof(double) * (size_t)(K * M)),
                   *ref = malloc(sizeof(double) * (size_t)(N * M));
            assert_non_null(in);
            assert_non_null(ref);
            tf_expect_close(got, sep, d.n, 0, 0, what);
            for (int64_t m = 0; m < M; m++) {
                if (norm) ref_rms_norm_row(bv + m * K, mode == 1 ? NULL : w.v, f.eps, K, in + m * K);
                else
                    for (int64_t k = 0; k < K; k++) in[m * K + k] = ref_unary(act, bv[m * K + k]) * uv[m * K + k];
                for (int64_t n = 0; n < N; n++) {
                    double s = acc ? d.v[m * N + n] : 0.0;
                    for (int64_t k = 0; k < K; k++) s += a.v[n * K + k] * in[m * K + k];
                    ref[m * N + n] = s;
                }
            }
            tf_expect_close(got, ref, d.n, 1e-4, 1e-4, what);
            assert_true(tf_pad_intact(&d));
            assert_true(tf_unchanged(&a));
            assert_true(tf_unchanged(&p));
            free(got);
            free(sep);
            free(in);
            free(ref);
            free(bv);
            free(uv);
            tf_free(&a);
            tf_free(&p);
            tf_free(&w);
            tf_free(&d);
            tf_free(&d2);
            tf_free(&ti);
            tf_free(&to);
            tf_free(&ti2);
            tf_free(&to2);
        }
        rb_backend_destroy(be);
    }
}

/* rb_matmul_fused with glu_out (the gated MLP's gate_up product writing
 * act(gate) * up), alone for each activation and after a norm: against a
 * double reference and, bit for bit, against rb_matmul into the whole
 * product and rb_glu over its halves. */
static void test_matmul_fused_glu_out(void **state) {
    (void)state;
    const int64_t K = 64, F = 5, M = 3;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 35000 + (uint64_t)ci);
        const int64_t ane[4] = {K, 2 * F, 1, 1}, bne[4] = {K, M, 1, 1}, pne[4] = {2 * F, M, 1, 1},
                      dne[4] = {F, M, 1, 1}, wne[4] = {K, 1, 1, 1};
        for (int mode = 0; mode < 5; mode++) { /* 0-3 each activation, 4 norm + silu */
            const bool norm = mode == 4;
            const rb_unary_op act = ACTS[mode % 4];
            tt a = tf_make(be, &rng, RB_F32, ane, TF_CONTIG, -1, 1), b = tf_make(be, &rng, RB_F32, bne, TF_SLICE, -2, 2);
            tt w = tf_make(be, &rng, RB_F32, wne, TF_CONTIG, 0.5f, 1.5f);
            tt d = tf_make(be, &rng, RB_F32, dne, TF_SLICE, -2, 2), d2 = tf_from(be, RB_F32, dne, TF_SLICE, d.v);
            tt ti = tf_make(be, &rng, RB_F32, bne, TF_CONTIG, 0, 1), to = tf_make(be, &rng, RB_F32, pne, TF_CONTIG, 0, 1);
            tt ti2 = tf_from(be, RB_F32, bne, TF_CONTIG, ti.v), to2 = tf_from(be, RB_F32, pne, TF_CONTIG, to.v);
            const rb_matmul_fusion f = {.norm = norm, .norm_w = &w.t, .eps = 1e-5f, .glu_out = true, .act = act,
                                        .tmp_in = &ti.t, .tmp_out = &to.t};
            TU_OK(rb_matmul_fused(be, &d.t, &a.t, &b.t, &f));
            /* the separate ops */
            if (norm) TU_OK(rb_rms_norm(be, &ti2.t, &b.t, &w.t, f.eps));
            TU_OK(rb_matmul(be, &to2.t, &a.t, norm ? &ti2.t : &b.t));
            rb_tensor gate = half_view(&to2, 0), up = half_view(&to2, F);
            TU_OK(rb_glu(be, &d2.t, &gate, &up, act));
            char what[64];
            snprintf(what, sizeof what, "matmul_fused glu_out mode %d cfg %d", mode, ci);
            double *got = tf_read(&d), *sep = tf_read(&d2), *bv = tf_read(&b);
            double *ref = malloc(sizeof(double) * (size_t)(F * M)), *in = malloc(sizeof(double) * (size_t)K);
            assert_non_null(ref);
            assert_non_null(in);
            tf_expect_close(got, sep, d.n, 0, 0, what);
            for (int64_t m = 0; m < M; m++) {
                if (norm) ref_rms_norm_row(bv + m * K, w.v, f.eps, K, in);
                else memcpy(in, bv + m * K, sizeof(double) * (size_t)K);
                for (int64_t n = 0; n < F; n++) {
                    double g = 0.0, u = 0.0;
                    for (int64_t k = 0; k < K; k++) {
                        g += a.v[n * K + k] * in[k];
                        u += a.v[(F + n) * K + k] * in[k];
                    }
                    ref[m * F + n] = ref_unary(act, g) * u;
                }
            }
            tf_expect_close(got, ref, d.n, 1e-4, 1e-4, what);
            assert_true(tf_pad_intact(&d));
            assert_true(tf_unchanged(&a));
            assert_true(tf_unchanged(&b));
            free(got);
            free(sep);
            free(bv);
            free(ref);
            free(in);
            tf_free(&a);
            tf_free(&b);
            tf_free(&w);
            tf_free(&d);
            tf_free(&d2);
            tf_free(&ti);
            tf_free(&to);
            tf_free(&ti2);
            tf_free(&to2);
        }
        rb_backend_destroy(be);
    }
}

/* rb_matmul_fused with rope: a qkv-shaped product (3 q heads, 1 k head, 1
 * v head of 8) whose first 4 heads are rotated in place, in normal and neox
 * mode, partial rotation, frequency factors, after a norm: bit for bit
 * against rb_matmul then rb_rope on the same view, and against the double
 * product rotated by the double reference (v rows untouched); with store,
 * its k and v rows also land in the f16 cache slots named, bit for bit as
 * rb_set_rows puts them. */
static void test_matmul_fused_rope(void **state) {
    (void)state;
    const int64_t K = 64, HD = 8, HR = 4, N = (HR + 1) * HD, M = 3;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng rng;
        tu_rng_seed(&rng, 36000 + (uint64_t)ci);
        const int64_t ane[4] = {K, N, 1, 1}, bne[4] = {K, M, 1, 1}, dne[4] = {N, M, 1, 1}, wne[4] = {K, 1, 1, 1},
                      pne[4] = {M, 1, 1, 1}, fne[4] = {HD / 2, 1, 1, 1};
        for (int mode = 0; mode < 4; mode++) { /* 0 normal, 1 neox, 2 normal n_rot 6 + factors, 3 normal + norm */
            tt a = tf_make(be, &rng, RB_F32, ane, TF_CONTIG, -1, 1), b = tf_make(be, &rng, RB_F32, bne, TF_SLICE, -2, 2);
            tt w = tf_make(be, &rng, RB_F32, wne, TF_CONTIG, 0.5f, 1.5f);
            tt pos = tf_make(be, &rng, RB_I32, pne, TF_CONTIG, 0, 3000);
            tt ff = tf_make(be, &rng, RB_F32, fne, TF_CONTIG, 1, 4);
            tt d = tf_make(be, &rng, RB_F32, dne, TF_SLICE, -2, 2), d2 = tf_from(be, RB_F32, dne, TF_SLICE, d.v);
            tt ti = tf_make(be, &rng, RB_F32, bne, TF_CONTIG, 0, 1), ti2 = tf_from(be, RB_F32, bne, TF_CONTIG, ti.v);
            rb_tensor ffv = ff.t;
            ffv.ne[0] = 3; /* n_rot 6: three factors */
            const rb_rope_params rp = {.n_rot = mode == 2 ? 6 : (int)HD, .mode = mode == 1 ? RB_ROPE_NEOX : RB_ROPE_NORMAL,
                                       .freq_base = 10000.0f, .freq_scale = mode == 2 ? 0.5f : 1.0f,
                                       .attn_factor = mode == 2 ? 0.9f : 1.0f, .freq_factors = mode == 2 ? &ffv : NULL};
            const bool norm = mode == 3;
            /* store: the k and v heads (rows 3 HD..) into slots of a f16 cache [2 HD, 8] */
            const int64_t cne[4] = {2 * HD, 8, 1, 1}, sne[4] = {M, 1, 1, 1};
            tt cache = tf_make(be, &rng, RB_F16, cne, TF_SLICE, -1, 1), cache2 = tf_from(be, RB_F16, cne, TF_SLICE, cache.v);
            const double slotv[3] = {6, 1, 3};
            tt slots = tf_from(be, RB_I32, sne, TF_CONTIG, slotv);
            const rb_matmul_fusion f = {.norm = norm, .norm_w = &w.t, .eps = 1e-5f, .rope = &rp, .rope_pos = &pos.t,
                                        .rope_head_dim = HD, .rope_heads = HR, .store_dst = mode != 1 ? &cache.t : NULL,
                                        .store_ids = &slots.t, .store_row0 = 3 * HD, .tmp_in = &ti.t};
            TU_OK(rb_matmul_fused(be, &d.t, &a.t, &b.t, &f));
            /* the separate ops */
            if (norm) TU_OK(rb_rms_norm(be, &ti2.t, &b.t, &w.t, f.eps));
            TU_OK(rb_matmul(be, &d2.t, &a.t, norm ? &ti2.t : &b.t));
            rb_tensor rv = d2.t;
            rv.ne[0] = HD;
            rv.ne[1] = HR;
            rv.ne[2] = M;
            rv.nb[1] = (size_t)HD * d2.t.nb[0];
            rv.nb[2] = d2.t.nb[1];
            rv.nb[3] = d2.t.nb[1] * (size_t)M;
            TU_OK(rb_rope(be, &rv, &rv, &pos.t, &rp));
            rb_tensor sv = d2.t;
            sv.ne[0] = N - 3 * HD;
            sv.offs += (size_t)(3 * HD) * d2.t.nb[0];
            if (mode != 1) TU_OK(rb_set_rows(be, &cache2.t, &sv, &slots.t));
            char what[64];
            snprintf(what, sizeof what, "matmul_fused rope mode %d cfg %d", mode, ci);
            double *got = tf_read(&d), *sep = tf_read(&d2), *bv = tf_read(&b);
            tf_expect_close(got, sep, d.n, 0, 0, what);
            double *cg = tf_read(&cache), *cs = tf_read(&cache2);
            tf_expect_close(cg, cs, cache.n, 0, 0, what); /* the store, bit for bit (and the other slots kept) */
            for (int64_t m = 0; m < M && mode != 1; m++) /* slot slotv[m] holds row m's k and v rows in f16 */
                for (int64_t e = 0; e < 2 * HD; e++)
                    if (fabs(cg[(int64_t)slotv[m] * 2 * HD + e] - got[m * N + 3 * HD + e]) >
                        1e-3 * fabs(got[m * N + 3 * HD + e]) + 1e-6)
                        fail_msg("%s: cache slot %d element %lld", what, (int)slotv[m], (long long)e);
            free(cg);
            free(cs);
            tf_free(&cache);
            tf_free(&cache2);
            tf_free(&slots);
            /* double product, then the reference rope over its first HR heads */
            double *prod = malloc(sizeof(double) * (size_t)(N * M)), *in = malloc(sizeof(double) * (size_t)K),
                   *qk = malloc(sizeof(double) * (size_t)(HR * HD * M)), *rot = malloc(sizeof(double) * (size_t)(HR * HD * M));
            assert_non_null(prod);
            assert_non_null(in);
            assert_non_null(qk);
            assert_non_null(rot);
            for (int64_t m = 0; m < M; m++) {
                if (norm) ref_rms_norm_row(bv + m * K, w.v, f.eps, K, in);
                else memcpy(in, bv + m * K, sizeof(double) * (size_t)K);
                for (int64_t n = 0; n < N; n++) {
                    double t = 0.0;
                    for (int64_t k = 0; k < K; k++) t += a.v[n * K + k] * in[k];
                    prod[m * N + n] = t;
                }
                memcpy(qk + m * HR * HD, prod + m * N, sizeof(double) * (size_t)(HR * HD));
            }
            int32_t posi[3];
            for (int64_t m = 0; m < M; m++) posi[m] = (int32_t)pos.v[m];
            const int64_t rne[4] = {HD, HR, M, 1};
            ref_rope(qk, rne, posi, rp.n_rot, rp.mode, rp.freq_base, rp.freq_scale, rp.attn_factor,
                     mode == 2 ? ff.v : NULL, rot);
            for (int64_t m = 0; m < M; m++) memcpy(prod + m * N, rot + m * HR * HD, sizeof(double) * (size_t)(HR * HD));
            tf_expect_close(got, prod, d.n, 1e-4, 1e-4, what);
            assert_true(tf_pad_intact(&d));
            assert_true(tf_unchanged(&a));
            assert_true(tf_unchanged(&b));
            free(got);
            free(sep);
            free(bv);
            free(prod);
            free(in);
            free(qk);
            free(rot);
            tf_free(&a);
            tf_free(&b);
            tf_free(&w);
            tf_free(&pos);
            tf_free(&ff);
            tf_free(&d);
            tf_free(&d2);
            tf_free(&ti);
            tf_free(&ti2);
        }
        rb_backend_destroy(be);
    }
}

/* Bad input is refused with a message before anything is written. */
static void test_matmul_fused_bad(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[0]);
    tu_rng rng;
    tu_rng_seed(&rng, 34000);
    const int64_t K = 32, N = 4, M = 2;
    const int64_t ane[4] = {K, N, 1, 1}, bne[4] = {K, M, 1, 1}, dne[4] = {N, M, 1, 1}, wne[4] = {K, 1, 1, 1},
                  big[4] = {K + N, M, 1, 1};
    tt a = tf_make(be, &rng, RB_F32, ane, TF_CONTIG, -1, 1), b = tf_make(be, &rng, RB_F32, bne, TF_CONTIG, -1, 1);
    tt u = tf_make(be, &rng, RB_F32, bne, TF_CONTIG, -1, 1), w = tf_make(be, &rng, RB_F32, wne, TF_CONTIG, 1, 2);
    tt d = tf_make(be, &rng, RB_F32, dne, TF_CONTIG, -1, 1), dh = tf_make(be, &rng, RB_F16, dne, TF_CONTIG, -1, 1);
    tt ti = tf_make(be, &rng, RB_F32, bne, TF_CONTIG, 0, 1), to = tf_make(be, &rng, RB_F32, dne, TF_CONTIG, 0, 1);
    tt bg = tf_make(be, &rng, RB_F32, big, TF_CONTIG, 0, 1);
    rb_tensor bd = bg.t, bb = bg.t; /* dst and b overlapping in one buffer */
    bd.ne[0] = N;
    bb.ne[0] = K;
    bb.offs += (size_t)(N - 1) * 4;
    rb_tensor wbad = w.t;
    wbad.ne[0] = K - 1;
    /* rope: dst [N = 4, M = 2] as two heads of 2, positions [M] */
    const int64_t rpne[4] = {M, 1, 1, 1};
    tt rpos = tf_make(be, &rng, RB_I32, rpne, TF_CONTIG, 0, 9);
    rb_tensor rpos1 = rpos.t;
    rpos1.ne[0] = 1;
    const rb_rope_params rp = {.n_rot = 2, .mode = RB_ROPE_NORMAL, .freq_base = 10000.0f, .freq_scale = 1.0f,
                               .attn_factor = 1.0f};
    rb_rope_params rp_wide = rp;
    rp_wide.n_rot = 4;
    /* store: a cache of rows 2..3 of dst ([2, 10 slots]); slots 0..9, one past */
    const int64_t scne[4] = {2, 10, 1, 1};
    const double bigslot[2] = {3, 10};
    tt sc = tf_make(be, &rng, RB_F32, scne, TF_CONTIG, -1, 1), rbig = tf_from(be, RB_I32, rpne, TF_CONTIG, bigslot);
    /* glu_out: dst of N / 2 rows, the whole product in tmp_out */
    const int64_t hne[4] = {N / 2, M, 1, 1}, a3ne[4] = {K, 3, 1, 1};
    tt dg = tf_make(be, &rng, RB_F32, hne, TF_CONTIG, -1, 1), a3 = tf_make(be, &rng, RB_F32, a3ne, TF_CONTIG, -1, 1);
    const rb_matmul_fusion ok = {.norm = true, .norm_w = &w.t, .eps = 1e-5f, .tmp_in = &ti.t, .tmp_out = &to.t};
    struct {
        const char *what;
        rb_matmul_fusion f;
        rb_tensor *dst;
        const rb_tensor *b;
    } cases[] = {
        {"norm and glu", {.norm = true, .glu = true, .up = &u.t, .tmp_in = &ti.t}, &d.t, &b.t},
        {"norm without tmp_in", {.norm = true, .eps = 1e-5f}, &d.t, &b.t},
        {"norm weight of K-1", {.norm = true, .norm_w = &wbad, .eps = 1e-5f, .tmp_in = &ti.t}, &d.t, &b.t},
        {"negative eps", {.norm = true, .eps = -1.0f, .tmp_in = &ti.t}, &d.t, &b.t},
        {"glu without up", {.glu = true, .act = RB_UNARY_SILU, .tmp_in = &ti.t}, &d.t, &b.t},
        {"glu with exp", {.glu = true, .up = &u.t, .act = RB_UNARY_EXP, .tmp_in = &ti.t}, &d.t, &b.t},
        {"accumulate without tmp_out", {.accumulate = true}, &d.t, &b.t},
        {"accumulate into f16", {.accumulate = true, .tmp_out = &to.t}, &dh.t, &b.t},
        {"tmp_in is b", {.norm = true, .eps = 1e-5f, .tmp_in = &b.t}, &d.t, &b.t},
        {"tmp_out is dst", {.accumulate = true, .tmp_out = &d.t}, &d.t, &b.t},
        {"dst overlaps b", {.tmp_in = &ti.t}, &bd, &bb},
        {"b of the wrong length", ok, &d.t, &u.t},
        {"glu_out with accumulate", {.glu_out = true, .act = RB_UNARY_SILU, .accumulate = true, .tmp_out = &to.t},
         &dg.t, &b.t},
        {"glu_out with glu", {.glu_out = true, .glu = true, .up = &u.t, .act = RB_UNARY_SILU, .tmp_in = &ti.t,
                              .tmp_out = &to.t}, &dg.t, &b.t},
        {"glu_out with exp", {.glu_out = true, .act = RB_UNARY_EXP, .tmp_out = &to.t}, &dg.t, &b.t},
        {"glu_out without tmp_out", {.glu_out = true, .act = RB_UNARY_SILU}, &dg.t, &b.t},
        {"glu_out into N rows", {.glu_out = true, .act = RB_UNARY_SILU, .tmp_out = &to.t}, &d.t, &b.t},
        {"glu_out tmp_out of dst's shape", {.glu_out = true, .act = RB_UNARY_SILU, .tmp_out = &dg.t}, &dg.t, &b.t},
        {"rope with accumulate", {.rope = &rp, .rope_pos = &rpos.t, .rope_head_dim = 2, .rope_heads = 2,
                                  .accumulate = true, .tmp_out = &to.t}, &d.t, &b.t},
        {"rope over more heads than dst has", {.rope = &rp, .rope_pos = &rpos.t, .rope_head_dim = 2, .rope_heads = 3},
         &d.t, &b.t},
        {"rope without positions", {.rope = &rp, .rope_head_dim = 2, .rope_heads = 2}, &d.t, &b.t},
        {"rope with n_rot past the head", {.rope = &rp_wide, .rope_pos = &rpos.t, .rope_head_dim = 2, .rope_heads = 2},
         &d.t, &b.t},
        {"rope with positions for 1 row", {.rope = &rp, .rope_pos = &rpos1, .rope_head_dim = 2, .rope_heads = 2},
         &d.t, &b.t},
        {"store with accumulate", {.store_dst = &sc.t, .store_ids = &rpos.t, .store_row0 = 2, .accumulate = true,
                                   .tmp_out = &to.t}, &d.t, &b.t},
        {"store from row N", {.store_dst = &sc.t, .store_ids = &rpos.t, .store_row0 = N}, &d.t, &b.t},
        {"store of the wrong width", {.store_dst = &sc.t, .store_ids = &rpos.t, .store_row0 = 1}, &d.t, &b.t},
        {"store without ids", {.store_dst = &sc.t, .store_row0 = 2}, &d.t, &b.t},
        {"store past the slots", {.store_dst = &sc.t, .store_ids = &rbig.t, .store_row0 = 2}, &d.t, &b.t},
    };
    rb_tensor ushort = u.t;
    ushort.ne[0] = K - 2;
    cases[11].b = &ushort;
    for (size_t i = 0; i <= sizeof cases / sizeof cases[0]; i++) {
        /* the last case: glu_out over a with an odd number of rows */
        const bool odd = i == sizeof cases / sizeof cases[0];
        const rb_matmul_fusion fodd = {.glu_out = true, .act = RB_UNARY_SILU, .tmp_out = &to.t};
        const rb_status s = odd ? rb_matmul_fused(be, &dg.t, &a3.t, &b.t, &fodd)
                                : rb_matmul_fused(be, cases[i].dst, &a.t, cases[i].b, &cases[i].f);
        const rb_status want = !odd && strstr(cases[i].what, "past the slots") ? RB_E_RANGE : RB_E_INVALID;
        if (s != want)
            fail_msg("%s: status %d, expected %d", odd ? "glu_out over 3 rows" : cases[i].what, (int)s, (int)want);
        assert_true(strlen(rb_backend_last_error(be)) > 0);
        assert_true(tf_unchanged(&d));
        assert_true(tf_unchanged(&dh));
        assert_true(tf_unchanged(&ti));
        assert_true(tf_unchanged(&to));
        assert_true(tf_unchanged(&bg));
        assert_true(tf_unchanged(&dg));
        assert_true(tf_unchanged(&sc));
    }
    assert_int_equal(rb_matmul_fused(be, &d.t, &a.t, &b.t, NULL), RB_E_INVALID);
    TU_OK(rb_matmul_fused(be, &d.t, &a.t, &b.t, &ok)); /* and the valid calls go through */
    const rb_matmul_fusion ok_glu = {.glu_out = true, .act = RB_UNARY_SILU, .tmp_out = &to.t};
    TU_OK(rb_matmul_fused(be, &dg.t, &a.t, &b.t, &ok_glu));
    const rb_matmul_fusion ok_rope = {.rope = &rp, .rope_pos = &rpos.t, .rope_head_dim = 2, .rope_heads = 2};
    TU_OK(rb_matmul_fused(be, &d.t, &a.t, &b.t, &ok_rope));
    const rb_matmul_fusion ok_store = {.store_dst = &sc.t, .store_ids = &rpos.t, .store_row0 = 2};
    TU_OK(rb_matmul_fused(be, &d.t, &a.t, &b.t, &ok_store));
    tf_free(&a);
    tf_free(&b);
    tf_free(&u);
    tf_free(&w);
    tf_free(&d);
    tf_free(&dh);
    tf_free(&ti);
    tf_free(&to);
    tf_free(&bg);
    tf_free(&dg);
    tf_free(&a3);
    tf_free(&rpos);
    tf_free(&sc);
    tf_free(&rbig);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glu),
        cmocka_unit_test(test_add_rms_norm),
        cmocka_unit_test(test_matmul_fused),
        cmocka_unit_test(test_matmul_fused_glu_out),
        cmocka_unit_test(test_matmul_fused_rope),
        cmocka_unit_test(test_matmul_fused_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

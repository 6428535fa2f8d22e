/* rb_attention against the naive softmax(scale * QK^T + mask) V in double:
 * grouped-query heads, causal with q_pos0 > 0, sliding window (with and
 * without causal), soft-capping, f32/f16 additive masks with fully masked
 * rows, Tk spanning several key blocks, decode (Tq = 1), f16/bf16 inputs in
 * contiguous-row and strided views, 1 vs 3 threads. Per-query positions
 * (q_pos): bit-identical to the q_pos0 form; k/v spanning a larger cache
 * whose tail and unreached rows hold huge finite values, unsorted positions
 * within one query tile, against a per-query reference, and the same bits
 * whatever the invisible rows hold; bad q_pos rejected. Per-item cache
 * slices (kv_index) with per-item positions against the reference on the
 * named slice; an index out of range gives zeros; bad kv_index rejected.
 * Bound: 1e-5 relative + 2e-5 absolute (outputs are O(1) averages of v). */
#include "ref_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct att_case {
    int64_t D, Dv, Tq, Tk, Hq, Hkv, B;
    bool causal;
    int window;
    int64_t q_pos0;
    float softcap;
    int mask; /* 0 none, 1 f32, 2 f16 (with a fully masked query row) */
    rb_dtype qdt, kvdt;
    tf_layout klay;
} att_case;

static const att_case CASES[] = {
    {16, 12, 5, 7, 2, 2, 2, false, 0, 0, 0, 0, RB_F32, RB_F32, TF_PERM},
    {16, 16, 4, 7, 6, 2, 1, true, 0, 3, 0, 0, RB_F32, RB_F32, TF_SLICE},
    {8, 8, 9, 9, 4, 1, 1, true, 3, 0, 0, 0, RB_F32, RB_F16, TF_SLICE},
    {32, 24, 3, 11, 4, 2, 2, false, 0, 0, 5.0f, 1, RB_BF16, RB_F32, TF_CONTIG},
    {16, 16, 6, 10, 2, 2, 1, true, 0, 4, 0, 2, RB_F32, RB_F16, TF_PERM},
    {64, 64, 1, 150, 8, 2, 1, true, 0, 149, 0, 0, RB_F32, RB_F16, TF_SLICE},
    {20, 20, 7, 150, 3, 3, 1, true, 70, 60, 0, 0, RB_F16, RB_BF16, TF_PERM},
    {12, 12, 5, 40, 2, 1, 2, false, 10, 20, 2.0f, 1, RB_F32, RB_F32, TF_SLICE},
    {16, 16, 3, 5, 2, 2, 1, false, 0, 0, 0, 0, RB_F32, RB_F32, TF_CONTIG},
};

/* use_qpos: the same inputs, with positions given as an i32 tensor
 * (q_pos0 + i) and q_pos0 set to 0 (it must be ignored). */
static void run_case_q(rb_backend *be, tu_rng *rng, const att_case *c, const char *what, bool use_qpos,
                       double **out) {
    const int64_t qne[4] = {c->D, c->Tq, c->Hq, c->B}, kne[4] = {c->D, c->Tk, c->Hkv, c->B};
    const int64_t vne[4] = {c->Dv, c->Tk, c->Hkv, c->B}, dne[4] = {c->Dv, c->Hq, c->Tq, c->B};
    const int64_t mne[4] = {c->Tk, c->Tq, 1, 1};
    tt q = tf_make(be, rng, c->qdt, qne, c->klay == TF_PERM ? TF_SLICE : TF_PERM, -1, 1);
    tt k = tf_make(be, rng, c->kvdt, kne, c->klay, -1, 1);
    tt v = tf_make(be, rng, c->kvdt, vne, c->klay, -1, 1);
    double *mv = malloc((size_t)(c->Tk * c->Tq) * sizeof(double));
    for (int64_t i = 0; i < c->Tk * c->Tq; i++) {
        double u = tu_rng_uniform(rng);
        mv[i] = u < 0.2 ? -INFINITY : (u - 0.5) * 3;
    }
    if (c->mask == 2)
        for (int64_t j = 0; j < c->Tk; j++) mv[1 * c->Tk + j] = -INFINITY; /* query 1 sees nothing */
    tt m = tf_from(be, c->mask == 2 ? RB_F16 : RB_F32, mne, TF_SLICE, mv);
    tt d = tf_make(be, rng, RB_F32, dne, TF_SLICE, 5, 6);
    rb_attn_params p = {.scale = 1.0f / sqrtf((float)c->D), .softcap = c->softcap, .causal = c->causal,
                        .window = c->window, .q_pos0 = c->q_pos0, .mask = c->mask ? &m.t : NULL};
    const int64_t pne[4] = {c->Tq, 1, 1, 1};
    double *pv = malloc((size_t)c->Tq * sizeof(double));
    assert_non_null(pv);
    for (int64_t i = 0; i < c->Tq; i++) pv[i] = (double)(c->q_pos0 + i);
    tt qp = tf_from(be, RB_I32, pne, TF_SLICE, pv);
    free(pv);
    if (use_qpos) {
        p.q_pos = &qp.t;
        p.q_pos0 = 0;
    }
    TU_OK(rb_attention(be, &d.t, &q.t, &k.t, &v.t, &p));
    tf_free(&qp);
    double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
    ref_attention(q.v, k.v, v.v, qne, kne, c->Dv, c->mask ? m.v : NULL, p.scale, c->softcap, c->causal, c->window,
                  c->q_pos0, ref);
    tf_expect_close(got, ref, d.n, 1e-5, 2e-5, what);
    assert_true(tf_pad_intact(&d));
    if (c->mask == 2) /* the fully masked query row is exactly zero */
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t e = 0; e < c->Dv; e++) assert_true(got[tf_idx(dne, e, h, 1, 0)] == 0.0);
    *out = got;
    free(ref);
    free(mv);
    tf_free(&q);
    tf_free(&k);
    tf_free(&v);
    tf_free(&m);
    tf_free(&d);
}

static void run_case(rb_backend *be, tu_rng *rng, const att_case *c, const char *what, double **out) {
    run_case_q(be, rng, c, what, false, out);
}

static void test_attention_cases(void **state) {
    (void)state;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
            tu_rng rng;
            tu_rng_seed(&rng, 16000 + k);
            char what[48];
            snprintf(what, sizeof what, "attention case %zu cfg %d", k, ci);
            double *got;
            run_case(be, &rng, &CASES[k], what, &got);
            free(got);
        }
        rb_backend_destroy(be);
    }
}

/* Large enough to use the pool: identical results with 1 and 3 threads. */
static void test_attention_threads(void **state) {
    (void)state;
    const att_case c = {64, 64, 33, 257, 8, 2, 1, true, 0, 224, 0, 1, RB_F32, RB_F16, TF_SLICE};
    rb_backend *b1 = tf_backend(&tf_cfgs[1]), *b3 = tf_backend(&tf_cfgs[2]);
    tu_rng r1, r3;
    tu_rng_seed(&r1, 17000);
    tu_rng_seed(&r3, 17000);
    double *g1, *g3;
    run_case(b1, &r1, &c, "attention 1 thread", &g1);
    run_case(b3, &r3, &c, "attention 3 threads", &g3);
    tf_expect_close(g3, g1, c.Dv * c.Hq * c.Tq, 0, 0, "attention 3 vs 1 threads");
    free(g1);
    free(g3);
    rb_backend_destroy(b1);
    rb_backend_destroy(b3);
}

/* Long unmasked, non-causal f32 attention with contiguous rows (image
 * tokens, cross-attention): the two-GEMM path (ops_attention_gemm.c) with
 * grouped heads, head sizes below, at and above 16, partial query blocks,
 * Dv != D, large scores (q in [-30, 30]), the same bits on 1 and 3
 * threads, and a NaN query. */
static void test_attention_long(void **state) {
    (void)state;
    static const struct { int64_t D, Dv, Tq, Tk, Hq, Hkv, B; float qmax; tf_layout klay; } cs[] = {
        {40, 40, 37, 300, 4, 2, 2, 1.0f, TF_SLICE},
        {64, 48, 70, 77, 2, 2, 1, 1.0f, TF_CONTIG},
        {8, 8, 8, 32, 1, 1, 1, 30.0f, TF_SLICE},
        {16, 16, 100, 64, 2, 1, 1, 30.0f, TF_CONTIG},
    };
    double *first = NULL;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
            tu_rng rng;
            tu_rng_seed(&rng, 18500 + k);
            const int64_t qne[4] = {cs[k].D, cs[k].Tq, cs[k].Hq, cs[k].B}, kne[4] = {cs[k].D, cs[k].Tk, cs[k].Hkv, cs[k].B};
            const int64_t vne[4] = {cs[k].Dv, cs[k].Tk, cs[k].Hkv, cs[k].B}, dne[4] = {cs[k].Dv, cs[k].Hq, cs[k].Tq, cs[k].B};
            tt q = tf_make(be, &rng, RB_F32, qne, TF_SLICE, -cs[k].qmax, cs[k].qmax);
            tt kk = tf_make(be, &rng, RB_F32, kne, cs[k].klay, -1, 1);
            tt v = tf_make(be, &rng, RB_F32, vne, cs[k].klay, -1, 1);
            tt d = tf_make(be, &rng, RB_F32, dne, TF_SLICE, 5, 6);
            const rb_attn_params p = {.scale = 1.0f / sqrtf((float)cs[k].D)};
            TU_OK(rb_attention(be, &d.t, &q.t, &kk.t, &v.t, &p));
            double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
            ref_attention(q.v, kk.v, v.v, qne, kne, cs[k].Dv, NULL, p.scale, 0, false, 0, 0, ref);
            char what[48];
            snprintf(what, sizeof what, "long attention case %zu cfg %d", k, ci);
            tf_expect_close(got, ref, d.n, 1e-5, 2e-5, what);
            assert_true(tf_pad_intact(&d));
            if (k == 0 && ci == 1) first = got; /* 1 thread */
            else if (k == 0 && ci == 2 && first) { /* 3 threads: the same bits */
                tf_expect_close(got, first, d.n, 0, 0, "long attention 3 vs 1 threads");
                free(got);
            } else {
                free(got);
            }
            free(ref);
            tf_free(&q);
            tf_free(&kk);
            tf_free(&v);
            tf_free(&d);
        }
        rb_backend_destroy(be);
    }
    free(first);
    /* a NaN in one query gives NaN for that query only (no undefined conversions) */
    rb_backend *be = tf_backend(&tf_cfgs[2]);
    tu_rng rng;
    tu_rng_seed(&rng, 18600);
    const int64_t qne[4] = {16, 8, 1, 1}, kne[4] = {16, 32, 1, 1}, dne[4] = {16, 1, 8, 1};
    double qv[16 * 8];
    for (int i = 0; i < 16 * 8; i++) qv[i] = tu_rng_range(&rng, -1, 1);
    qv[3 * 16 + 5] = NAN;
    tt q = tf_from(be, RB_F32, qne, TF_SLICE, qv);
    tt kk = tf_make(be, &rng, RB_F32, kne, TF_CONTIG, -1, 1), v = tf_make(be, &rng, RB_F32, kne, TF_CONTIG, -1, 1);
    tt d = tf_make(be, &rng, RB_F32, dne, TF_CONTIG, 5, 6);
    const rb_attn_params p = {.scale = 0.25f};
    TU_OK(rb_attention(be, &d.t, &q.t, &kk.t, &v.t, &p));
    double *got = tf_read(&d);
    for (int i = 0; i < 8; i++)
        for (int e = 0; e < 16; e++) assert_true(i == 3 ? isnan(got[i * 16 + e]) : isfinite(got[i * 16 + e]));
    free(got);
    tf_free(&q);
    tf_free(&kk);
    tf_free(&v);
    tf_free(&d);
    rb_backend_destroy(be);
}

static void test_attention_bad(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[1]);
    tu_rng rng;
    tu_rng_seed(&rng, 17500);
    const int64_t qne[4] = {8, 3, 6, 1}, kne[4] = {8, 5, 4, 1}, k2ne[4] = {8, 5, 2, 1}, dne[4] = {8, 6, 3, 1};
    const int64_t kbad[4] = {7, 5, 2, 1}, dbad[4] = {8, 3, 6, 1}, mbad[4] = {4, 3, 1, 1};
    tt q = tf_make(be, &rng, RB_F32, qne, TF_CONTIG, -1, 1);
    tt k4 = tf_make(be, &rng, RB_F32, kne, TF_CONTIG, -1, 1);
    tt k = tf_make(be, &rng, RB_F32, k2ne, TF_CONTIG, -1, 1);
    tt kd = tf_make(be, &rng, RB_F32, kbad, TF_CONTIG, -1, 1);
    tt ki = tf_make(be, &rng, RB_I32, k2ne, TF_CONTIG, -1, 1);
    tt d = tf_make(be, &rng, RB_F32, dne, TF_CONTIG, -1, 1);
    tt db = tf_make(be, &rng, RB_F32, dbad, TF_CONTIG, -1, 1);
    tt dh = tf_make(be, &rng, RB_I32, dne, TF_CONTIG, -1, 1);
    tt m = tf_make(be, &rng, RB_F32, mbad, TF_CONTIG, -1, 1);
    rb_attn_params p = {.scale = 0.3f};
    assert_int_equal(rb_attention(be, &d.t, &q.t, &k4.t, &k4.t, &p), RB_E_INVALID); /* 6 % 4 heads */
    assert_non_null(strstr(rb_backend_last_error(be), "rb_attention"));
    assert_int_equal(rb_attention(be, &d.t, &q.t, &kd.t, &k.t, &p), RB_E_INVALID);  /* head dim */
    assert_int_equal(rb_attention(be, &d.t, &q.t, &ki.t, &k.t, &p), RB_E_INVALID);  /* i32 k */
    assert_int_equal(rb_attention(be, &db.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);  /* dst layout */
    assert_int_equal(rb_attention(be, &dh.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);  /* dst i32 */
    p.mask = &m.t;
    assert_int_equal(rb_attention(be, &d.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);  /* mask shape */
    p.mask = NULL;
    p.window = -1;
    assert_int_equal(rb_attention(be, &d.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);
    p.window = 0;
    p.softcap = -1;
    assert_int_equal(rb_attention(be, &d.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);
    assert_true(tf_unchanged(&d));
    p.softcap = 0;
    TU_OK(rb_attention(be, &d.t, &q.t, &k.t, &k.t, &p));
    tf_free(&q);
    tf_free(&k4);
    tf_free(&k);
    tf_free(&kd);
    tf_free(&ki);
    tf_free(&d);
    tf_free(&db);
    tf_free(&dh);
    tf_free(&m);
    rb_backend_destroy(be);
}

/* q_pos holding q_pos0 + i gives the same bits as the q_pos0 form (every
 * causal case, every configuration). */
static void test_attention_qpos_same(void **state) {
    (void)state;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        int n = 0;
        for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
            if (!CASES[k].causal) continue;
            tu_rng r1, r2;
            tu_rng_seed(&r1, 16500 + k);
            tu_rng_seed(&r2, 16500 + k);
            char what[64];
            snprintf(what, sizeof what, "attention q_pos case %zu cfg %d", k, ci);
            double *a, *b;
            run_case_q(be, &r1, &CASES[k], what, false, &a);
            run_case_q(be, &r2, &CASES[k], what, true, &b);
            const att_case *c = &CASES[k];
            tf_expect_close(b, a, c->Dv * c->Hq * c->Tq * c->B, 0, 0, what);
            free(a);
            free(b);
            n++;
        }
        assert_true(n >= 4);
        rb_backend_destroy(be);
    }
}

/* Reference for per-query positions: query i alone at position pos[i]. */
static void ref_attention_qpos(const double *q, const double *k, const double *v, const int64_t qne[4],
                               const int64_t kne[4], int64_t Dv, double scale, double softcap, int window,
                               const int32_t *pos, double *y) {
    const int64_t D = qne[0], Tq = qne[1], Hq = qne[2], B = qne[3];
    const int64_t q1ne[4] = {D, 1, Hq, B}, y1ne[4] = {Dv, Hq, 1, B}, yne[4] = {Dv, Hq, Tq, B};
    double *q1 = malloc((size_t)(D * Hq * B) * sizeof(double)), *y1 = malloc((size_t)(Dv * Hq * B) * sizeof(double));
    assert_non_null(q1);
    assert_non_null(y1);
    for (int64_t i = 0; i < Tq; i++) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t e = 0; e < D; e++) q1[tf_idx(q1ne, e, 0, h, b)] = q[tf_idx(qne, e, i, h, b)];
        ref_attention(q1, k, v, q1ne, kne, Dv, NULL, scale, softcap, true, window, pos[i], y1);
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t e = 0; e < Dv; e++) y[tf_idx(yne, e, h, i, b)] = y1[tf_idx(y1ne, e, h, 0, b)];
    }
    free(q1);
    free(y1);
}

/* k/v views over a whole "cache" of Tk rows: rows past each query's
 * position (including the never-written tail) must have no effect. Rows past
 * the largest position hold huge finite values; then they are replaced by
 * other huge values and the output must keep every bit. */
static void test_attention_qpos_cache(void **state) {
    (void)state;
    enum { NQ = 6 };
    const int32_t pos[NQ] = {37, 3, 120, 64, 0, 71}; /* unsorted; tiles of 4 queries mix them */
    const int32_t maxpos = 120;
    const struct {
        int window;
        float softcap;
        rb_dtype kvdt;
    } V[] = {{0, 0, RB_F32}, {0, 0, RB_F16}, {25, 3.0f, RB_F16}, {7, 0, RB_BF16}};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        for (size_t vi = 0; vi < sizeof V / sizeof V[0]; vi++) {
            tu_rng rng;
            const int64_t D = 16, Dv = 12, Tk = 150, Hq = 4, Hkv = 2, B = 1;
            const int64_t qne[4] = {D, NQ, Hq, B}, kne[4] = {D, Tk, Hkv, B}, vne[4] = {Dv, Tk, Hkv, B};
            const int64_t dne[4] = {Dv, Hq, NQ, B}, pne[4] = {NQ, 1, 1, 1};
            double *kv = malloc((size_t)(D * Tk * Hkv) * sizeof(double));
            double *vv = malloc((size_t)(Dv * Tk * Hkv) * sizeof(double));
            assert_non_null(kv);
            assert_non_null(vv);
            double *first = NULL; /* pass 0's output: pass 1 must match it bit for bit */
            for (int pass = 0; pass < 2; pass++) {
                /* same valid rows in both passes (reseeded), different garbage */
                tu_rng vr;
                tu_rng_seed(&vr, 18100 + vi);
                for (int64_t g = 0; g < Hkv; g++)
                    for (int64_t j = 0; j < Tk; j++) {
                        const bool junk = j > maxpos;
                        for (int64_t e = 0; e < D; e++) {
                            const double r = tu_rng_uniform(&vr) * 2 - 1;
                            kv[tf_idx(kne, e, j, g, 0)] = junk ? (pass ? -3e4 : 2e4) * (e % 2 ? 1 : -1) : r;
                        }
                        for (int64_t e = 0; e < Dv; e++) {
                            const double r = tu_rng_uniform(&vr) * 2 - 1;
                            vv[tf_idx(vne, e, j, g, 0)] = junk ? (pass ? 3e4 : -1e4) : r;
                        }
                    }
                tu_rng_seed(&rng, 18000 + vi); /* the same queries in both passes */
                tt q = tf_make(be, &rng, RB_F32, qne, TF_PERM, -1, 1);
                tt k = tf_from(be, V[vi].kvdt, kne, TF_SLICE, kv);
                tt v = tf_from(be, V[vi].kvdt, vne, TF_PERM, vv);
                double pd[NQ];
                for (int i = 0; i < NQ; i++) pd[i] = pos[i];
                tt qp = tf_from(be, RB_I32, pne, TF_SLICE, pd);
                tt d = tf_make(be, &rng, RB_F32, dne, TF_SLICE, 5, 6);
                rb_attn_params p = {.scale = 0.25f, .softcap = V[vi].softcap, .causal = true,
                                    .window = V[vi].window, .q_pos0 = 99, .q_pos = &qp.t};
                TU_OK(rb_attention(be, &d.t, &q.t, &k.t, &v.t, &p));
                double *got = tf_read(&d), *ref = malloc((size_t)d.n * sizeof(double));
                assert_non_null(ref);
                ref_attention_qpos(q.v, k.v, v.v, qne, kne, Dv, p.scale, p.softcap, p.window, pos, ref);
                char what[64];
                snprintf(what, sizeof what, "attention q_pos cache variant %zu pass %d cfg %d", vi, pass, ci);
                tf_expect_close(got, ref, d.n, 1e-5, 2e-5, what);
                assert_true(tf_pad_intact(&d));
                if (pass == 0) {
                    first = got;
                } else {
                    tf_expect_close(got, first, d.n, 0, 0, what);
                    free(first);
                    free(got);
                    first = NULL;
                }
                free(ref);
                tf_free(&q);
                tf_free(&k);
                tf_free(&v);
                tf_free(&qp);
                tf_free(&d);
            }
            free(kv);
            free(vv);
        }
        rb_backend_destroy(be);
    }
}

/* kv_index: batch item b attends to slice kv_index[b] of a pool of caches
 * (k/v dim 3 = 5 slices, a batch of 4 naming slices 3, 0, 3 and 9 - out of
 * range: no keys, zeros) with its own positions (q_pos [Tq, B]), against
 * the per-query reference on the named slice. */
static void test_attention_kv_index(void **state) {
    (void)state;
    enum { D = 16, Dv = 16, Tq = 2, Tk = 40, Hq = 4, Hkv = 2, S = 5, B = 4 };
    const int32_t idx[B] = {3, 0, 3, 9};
    const int32_t pos[B][Tq] = {{17, 5}, {39, 38}, {0, 30}, {4, 4}};
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        for (int w = 0; w < 2; w++) {
            tu_rng rng;
            tu_rng_seed(&rng, 18300 + (uint64_t)w);
            const int64_t qne[4] = {D, Tq, Hq, B}, kne[4] = {D, Tk, Hkv, S}, vne[4] = {Dv, Tk, Hkv, S};
            const int64_t dne[4] = {Dv, Hq, Tq, B}, pne[4] = {Tq, B, 1, 1}, ine[4] = {B, 1, 1, 1};
            tt q = tf_make(be, &rng, RB_F32, qne, TF_PERM, -1, 1);
            tt k = tf_make(be, &rng, RB_F16, kne, TF_SLICE, -1, 1);
            tt v = tf_make(be, &rng, RB_F16, vne, TF_PERM, -1, 1);
            double pd[Tq * B], id[B];
            for (int64_t b = 0; b < B; b++) {
                id[b] = idx[b];
                for (int64_t i = 0; i < Tq; i++) pd[b * Tq + i] = pos[b][i];
            }
            tt qp = tf_from(be, RB_I32, pne, TF_SLICE, pd);
            tt ki = tf_from(be, RB_I32, ine, TF_CONTIG, id);
            tt d = tf_make(be, &rng, RB_F32, dne, TF_SLICE, 5, 6);
            rb_attn_params p = {.scale = 0.25f, .causal = true, .window = w ? 9 : 0, .q_pos = &qp.t,
                                .kv_index = &ki.t};
            TU_OK(rb_attention(be, &d.t, &q.t, &k.t, &v.t, &p));
            double *got = tf_read(&d), *ref = calloc((size_t)d.n, sizeof(double));
            const int64_t q1ne[4] = {D, Tq, Hq, 1}, k1ne[4] = {D, Tk, Hkv, 1}, y1ne[4] = {Dv, Hq, Tq, 1};
            double *q1 = malloc(sizeof(double) * (size_t)(D * Tq * Hq)), *y1 = malloc(sizeof(double) * (size_t)(Dv * Hq * Tq));
            assert_non_null(ref);
            assert_non_null(q1);
            assert_non_null(y1);
            for (int64_t b = 0; b < B; b++) {
                if (idx[b] < 0 || idx[b] >= S) continue; /* no keys: zeros */
                for (int64_t i = 0; i < Tq; i++)
                    for (int64_t h = 0; h < Hq; h++)
                        for (int64_t e = 0; e < D; e++) q1[tf_idx(q1ne, e, i, h, 0)] = q.v[tf_idx(qne, e, i, h, b)];
                const double *ks = k.v + tf_idx(kne, 0, 0, 0, idx[b]), *vs = v.v + tf_idx(vne, 0, 0, 0, idx[b]);
                ref_attention_qpos(q1, ks, vs, q1ne, k1ne, Dv, p.scale, 0, p.window, pos[b], y1);
                for (int64_t i = 0; i < Tq; i++)
                    for (int64_t h = 0; h < Hq; h++)
                        for (int64_t e = 0; e < Dv; e++) ref[tf_idx(dne, e, h, i, b)] = y1[tf_idx(y1ne, e, h, i, 0)];
            }
            char what[64];
            snprintf(what, sizeof what, "attention kv_index window %d cfg %d", (int)p.window, ci);
            tf_expect_close(got, ref, d.n, 1e-5, 2e-5, what);
            assert_true(tf_pad_intact(&d));
            free(got);
            free(ref);
            free(q1);
            free(y1);
            tf_free(&q);
            tf_free(&k);
            tf_free(&v);
            tf_free(&qp);
            tf_free(&ki);
            tf_free(&d);
        }
        rb_backend_destroy(be);
    }
}

static void test_attention_qpos_bad(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[1]);
    tu_rng rng;
    tu_rng_seed(&rng, 18500);
    const int64_t qne[4] = {8, 3, 4, 1}, kne[4] = {8, 9, 2, 1}, dne[4] = {8, 4, 3, 1};
    const int64_t p3[4] = {3, 1, 1, 1}, p4[4] = {4, 1, 1, 1}, p32[4] = {3, 2, 1, 1};
    tt q = tf_make(be, &rng, RB_F32, qne, TF_CONTIG, -1, 1);
    tt k = tf_make(be, &rng, RB_F32, kne, TF_CONTIG, -1, 1);
    tt d = tf_make(be, &rng, RB_F32, dne, TF_CONTIG, -1, 1);
    tt pf = tf_make(be, &rng, RB_F32, p3, TF_CONTIG, 0, 3);   /* wrong dtype */
    tt pl = tf_make(be, &rng, RB_I32, p4, TF_CONTIG, 0, 3);   /* Tq + 1 entries */
    tt p2 = tf_make(be, &rng, RB_I32, p32, TF_CONTIG, 0, 3);  /* 2-D */
    tt ok = tf_make(be, &rng, RB_I32, p3, TF_CONTIG, 0, 9);
    rb_attn_params p = {.scale = 0.3f, .causal = true};
    p.q_pos = &pf.t;
    assert_int_equal(rb_attention(be, &d.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);
    assert_non_null(strstr(rb_backend_last_error(be), "q_pos"));
    p.q_pos = &pl.t;
    assert_int_equal(rb_attention(be, &d.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);
    p.q_pos = &p2.t;
    assert_int_equal(rb_attention(be, &d.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);
    p.q_pos = &ok.t;
    p.causal = false; /* positions only mean something with the causal rule */
    assert_int_equal(rb_attention(be, &d.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);
    assert_non_null(strstr(rb_backend_last_error(be), "causal"));
    assert_true(tf_unchanged(&d));
    p.causal = true;
    TU_OK(rb_attention(be, &d.t, &q.t, &k.t, &k.t, &p));
    p.kv_index = &pl.t; /* B + 3 entries */
    assert_int_equal(rb_attention(be, &d.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);
    assert_non_null(strstr(rb_backend_last_error(be), "kv_index"));
    p.kv_index = &pf.t; /* f32 */
    assert_int_equal(rb_attention(be, &d.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);
    p.kv_index = NULL;
    tf_free(&q);
    tf_free(&k);
    tf_free(&d);
    tf_free(&pf);
    tf_free(&pl);
    tf_free(&p2);
    tf_free(&ok);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_cases),
        cmocka_unit_test(test_attention_threads),
        cmocka_unit_test(test_attention_long),
        cmocka_unit_test(test_attention_bad),
        cmocka_unit_test(test_attention_qpos_same),
        cmocka_unit_test(test_attention_qpos_cache),
        cmocka_unit_test(test_attention_kv_index),
        cmocka_unit_test(test_attention_qpos_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

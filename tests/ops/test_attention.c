/* rb_attention against the naive softmax(scale * QK^T + mask) V in double:
 * grouped-query heads, causal with q_pos0 > 0, sliding window (with and
 * without causal), soft-capping, f32/f16 additive masks with fully masked
 * rows, Tk spanning several key blocks, decode (Tq = 1), f16/bf16 inputs in
 * contiguous-row and strided views, 1 vs 3 threads.
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

static void run_case(rb_backend *be, tu_rng *rng, const att_case *c, const char *what, double **out) {
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
    TU_OK(rb_attention(be, &d.t, &q.t, &k.t, &v.t, &p));
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
    tt dh = tf_make(be, &rng, RB_F16, dne, TF_CONTIG, -1, 1);
    tt m = tf_make(be, &rng, RB_F32, mbad, TF_CONTIG, -1, 1);
    rb_attn_params p = {.scale = 0.3f};
    assert_int_equal(rb_attention(be, &d.t, &q.t, &k4.t, &k4.t, &p), RB_E_INVALID); /* 6 % 4 heads */
    assert_non_null(strstr(rb_backend_last_error(be), "rb_attention"));
    assert_int_equal(rb_attention(be, &d.t, &q.t, &kd.t, &k.t, &p), RB_E_INVALID);  /* head dim */
    assert_int_equal(rb_attention(be, &d.t, &q.t, &ki.t, &k.t, &p), RB_E_INVALID);  /* i32 k */
    assert_int_equal(rb_attention(be, &db.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);  /* dst layout */
    assert_int_equal(rb_attention(be, &dh.t, &q.t, &k.t, &k.t, &p), RB_E_INVALID);  /* dst f16 */
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_cases),
        cmocka_unit_test(test_attention_threads),
        cmocka_unit_test(test_attention_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

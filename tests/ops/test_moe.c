/* Mixture-of-experts ops against naive double-precision references:
 * rb_matmul_id (f32, f16, q8_0, q4_K and mxfp4 experts; one shared row per
 * token or one row per slot; a decode step whose unselected experts are
 * poisoned with NaN and must not be read; bad ids and shapes refused),
 * rb_swiglu_clamp (values on both sides of the limit, strided views) and
 * rb_attention's sinks (with causal masking, a sliding window, grouped
 * heads, a query that sees nothing but its sink). Quantized experts are
 * compared with their own dequantized weights; the bound covers the
 * activations' quantization (q8_0 / q8_K) the products use. */
#include "ref_ops.h"

#include "rbee/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Experts [K, N, E] of dtype dt from uniform values; *deq gets the dequantized values (what the product uses). */
static rb_tensor make_experts(rb_backend *be, tu_rng *r, rb_dtype dt, int64_t K, int64_t N, int64_t E, double **deq) {
    const int64_t rows = N * E;
    float *x = malloc(sizeof(float) * (size_t)(K * rows)), *back = malloc(sizeof(float) * (size_t)(K * rows));
    assert_non_null(x);
    assert_non_null(back);
    tu_fill_uniform(r, x, (size_t)(K * rows), -1.0f, 1.0f);
    const size_t row = rb_dtype_row_size(dt, K);
    void *q = malloc(row * (size_t)rows);
    assert_non_null(q);
    TU_OK(rb_quantize_rows(dt, x, q, rows, K));
    for (int64_t i = 0; i < rows; i++) TU_OK(rb_dequantize_row(dt, (char *)q + (size_t)i * row, back + i * K, K));
    const int64_t ne[3] = {K, N, E};
    rb_tensor t;
    TU_OK(rb_tensor_alloc(be, dt, 3, ne, &t));
    TU_OK(rb_tensor_set(&t, q, row * (size_t)rows));
    *deq = malloc(sizeof(double) * (size_t)(K * rows));
    assert_non_null(*deq);
    for (int64_t i = 0; i < K * rows; i++) (*deq)[i] = back[i];
    free(x);
    free(back);
    free(q);
    return t;
}

static rb_tensor ids_tensor(rb_backend *be, const int32_t *ids, int64_t k, int64_t T) {
    const int64_t ne[2] = {k, T};
    rb_tensor t;
    TU_OK(rb_tensor_alloc(be, RB_I32, 2, ne, &t));
    TU_OK(rb_tensor_set(&t, ids, sizeof(int32_t) * (size_t)(k * T)));
    return t;
}

static double rel_l2(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static void matmul_id_case(rb_backend *be, tu_rng *r, rb_dtype dt, int64_t K, int64_t N, int64_t E, int64_t k,
                           int64_t T, bool shared, double bound) {
    double *w = NULL;
    rb_tensor a = make_experts(be, r, dt, K, N, E, &w);
    const int64_t S = shared ? 1 : k;
    const int64_t bne[4] = {K, S, T, 1}, dne[4] = {N, k, T, 1};
    tt b = tf_make(be, r, RB_F32, bne, TF_SLICE, -1, 1);
    tt d = tf_make(be, r, RB_F32, dne, TF_SLICE, 7, 8);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(k * T));
    assert_non_null(ids);
    for (int64_t t = 0; t < T; t++) /* k distinct experts per token, as top-k gives */
        for (int64_t j = 0; j < k; j++) {
            int32_t e;
            bool dup;
            do {
                e = (int32_t)(tu_rng_u64(r) % (uint64_t)E);
                dup = false;
                for (int64_t i = 0; i < j; i++) dup |= ids[t * k + i] == e;
            } while (dup);
            ids[t * k + j] = e;
        }
    rb_tensor it = ids_tensor(be, ids, k, T);
    TU_OK(rb_matmul_id(be, &d.t, &a, &b.t, &it));
    double *got = tf_read(&d), *ref = calloc((size_t)(N * k * T), sizeof(double));
    assert_non_null(ref);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++)
            for (int64_t n = 0; n < N; n++) {
                double acc = 0;
                const double *wr = w + ((int64_t)ids[t * k + j] * N + n) * K;
                for (int64_t i = 0; i < K; i++) acc += wr[i] * b.v[tf_idx(bne, i, shared ? 0 : j, t, 0)];
                ref[tf_idx(dne, n, j, t, 0)] = acc;
            }
    const double e = rel_l2(got, ref, N * k * T);
    char what[96];
    snprintf(what, sizeof what, "matmul_id %s K%lld N%lld E%lld k%lld T%lld %s", rb_dtype_name(dt), (long long)K,
             (long long)N, (long long)E, (long long)k, (long long)T, shared ? "shared" : "per-slot");
    print_message("%s: rel L2 %.2g (bound %.2g)\n", what, e, bound);
    if (!(e <= bound)) fail_msg("%s: rel L2 %g above %g", what, e, bound);
    assert_true(tf_pad_intact(&d));
    free(got);
    free(ref);
    free(ids);
    free(w);
    tf_free(&b);
    tf_free(&d);
    rb_tensor_free(&a);
    rb_tensor_free(&it);
}

static void test_matmul_id(void **state) {
    (void)state;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng r;
        tu_rng_seed(&r, 4242 + (uint64_t)ci);
        matmul_id_case(be, &r, RB_F32, 48, 40, 6, 2, 9, true, 1e-6);
        matmul_id_case(be, &r, RB_F32, 33, 17, 4, 3, 5, false, 1e-6);
        matmul_id_case(be, &r, RB_F16, 64, 24, 5, 2, 7, false, 1e-6);
        matmul_id_case(be, &r, RB_Q8_0, 64, 32, 8, 2, 11, true, 1e-2);
        matmul_id_case(be, &r, RB_Q8_0, 96, 16, 3, 3, 1, false, 1e-2);
        matmul_id_case(be, &r, RB_Q4_K, 256, 20, 4, 2, 6, true, 1e-2);
        matmul_id_case(be, &r, RB_MXFP4, 64, 24, 4, 2, 8, false, 1e-2);
        matmul_id_case(be, &r, RB_MXFP4, 128, 8, 16, 4, 3, true, 1e-2);
        rb_backend_destroy(be);
    }
}

/* A decode step (T = 1): experts nobody selected hold NaN and must not be read. */
static void test_matmul_id_reads_selected_only(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[0]);
    tu_rng r;
    tu_rng_seed(&r, 99);
    const int64_t K = 64, N = 32, E = 8;
    const rb_dtype dts[3] = {RB_F32, RB_Q8_0, RB_MXFP4};
    for (int di = 0; di < 3; di++) {
        double *w = NULL;
        rb_tensor a = make_experts(be, &r, dts[di], K, N, E, &w);
        const size_t ebytes = rb_dtype_row_size(dts[di], K) * (size_t)N;
        unsigned char *poison = malloc(ebytes);
        assert_non_null(poison);
        if (dts[di] == RB_F32) {
            const float nan = NAN;
            for (size_t i = 0; i < ebytes / 4; i++) memcpy(poison + 4 * i, &nan, 4);
        } else if (dts[di] == RB_Q8_0) {
            for (size_t i = 0; i < ebytes; i += sizeof(rb_block_q8_0)) { /* scale f16 NaN */
                const rb_f16 h = 0x7e00;
                memcpy(poison + i, &h, 2);
                memset(poison + i + 2, 1, sizeof(rb_block_q8_0) - 2);
            }
        } else {
            memset(poison, 0xff, ebytes); /* scale 2^127 times -12: overflows to -inf */
        }
        const int32_t sel[2] = {5, 2};
        for (int64_t e = 0; e < E; e++)
            if (e != 5 && e != 2) TU_OK(rb_buffer_set(a.buf, a.offs + (size_t)e * a.nb[2], poison, ebytes));
        const int64_t bne[4] = {K, 1, 1, 1}, dne[4] = {N, 2, 1, 1};
        tt b = tf_make(be, &r, RB_F32, bne, TF_CONTIG, -1, 1);
        tt d = tf_make(be, &r, RB_F32, dne, TF_CONTIG, 0, 1);
        rb_tensor it = ids_tensor(be, sel, 2, 1);
        TU_OK(rb_matmul_id(be, &d.t, &a, &b.t, &it));
        double *got = tf_read(&d);
        for (int64_t i = 0; i < N * 2; i++)
            if (!isfinite(got[i])) fail_msg("%s: an unselected expert was read", rb_dtype_name(dts[di]));
        free(got);
        free(poison);
        free(w);
        tf_free(&b);
        tf_free(&d);
        rb_tensor_free(&a);
        rb_tensor_free(&it);
    }
    rb_backend_destroy(be);
}

static void test_matmul_id_bad(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[0]);
    tu_rng r;
    tu_rng_seed(&r, 7);
    double *w = NULL;
    rb_tensor a = make_experts(be, &r, RB_F32, 16, 8, 3, &w);
    const int64_t bne[4] = {16, 1, 2, 1}, dne[4] = {8, 2, 2, 1};
    tt b = tf_make(be, &r, RB_F32, bne, TF_CONTIG, -1, 1);
    tt d = tf_make(be, &r, RB_F32, dne, TF_CONTIG, 3, 4);
    const int32_t bad[4] = {0, 1, 3, 0}, neg[4] = {0, -1, 1, 2};
    rb_tensor it = ids_tensor(be, bad, 2, 2), in = ids_tensor(be, neg, 2, 2);
    assert_int_equal(rb_matmul_id(be, &d.t, &a, &b.t, &it), RB_E_RANGE);
    assert_int_equal(rb_matmul_id(be, &d.t, &a, &b.t, &in), RB_E_RANGE);
    assert_true(tf_unchanged(&d));
    assert_non_null(strstr(rb_backend_last_error(be), "expert id"));
    const int32_t ok[4] = {0, 1, 2, 0};
    rb_tensor io = ids_tensor(be, ok, 2, 2);
    /* shape errors: dst slots, b rows that are neither 1 nor k, K mismatch, f32 ids */
    const int64_t dbad[4] = {8, 3, 2, 1}, b3[4] = {16, 3, 2, 1}, bk[4] = {15, 1, 2, 1};
    tt d2 = tf_make(be, &r, RB_F32, dbad, TF_CONTIG, 0, 1), bb = tf_make(be, &r, RB_F32, b3, TF_CONTIG, 0, 1);
    tt bK = tf_make(be, &r, RB_F32, bk, TF_CONTIG, 0, 1);
    assert_int_equal(rb_matmul_id(be, &d2.t, &a, &b.t, &io), RB_E_INVALID);
    assert_int_equal(rb_matmul_id(be, &d.t, &a, &bb.t, &io), RB_E_INVALID);
    assert_int_equal(rb_matmul_id(be, &d.t, &a, &bK.t, &io), RB_E_INVALID);
    assert_int_equal(rb_matmul_id(be, &d.t, &a, &b.t, &b.t), RB_E_INVALID);
    TU_OK(rb_matmul_id(be, &d.t, &a, &b.t, &io));
    free(w);
    tf_free(&b);
    tf_free(&d);
    tf_free(&d2);
    tf_free(&bb);
    tf_free(&bK);
    rb_tensor_free(&a);
    rb_tensor_free(&it);
    rb_tensor_free(&in);
    rb_tensor_free(&io);
    rb_backend_destroy(be);
}

static void test_swiglu_clamp(void **state) {
    (void)state;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng r;
        tu_rng_seed(&r, 11 + (uint64_t)ci);
        const int64_t ne[4] = {37, 5, 3, 1};
        tt g = tf_make(be, &r, RB_F32, ne, TF_PERM, -12, 12), u = tf_make(be, &r, RB_F32, ne, TF_SLICE, -12, 12);
        tt d = tf_make(be, &r, RB_F32, ne, TF_SLICE, 0, 1);
        const float alpha = 1.702f, limit = 7.0f;
        TU_OK(rb_swiglu_clamp(be, &d.t, &g.t, &u.t, alpha, limit));
        double *got = tf_read(&d), *ref = malloc(sizeof(double) * (size_t)g.n);
        assert_non_null(ref);
        int clamped = 0;
        for (int64_t i = 0; i < g.n; i++) {
            double gv = g.v[i] < limit ? g.v[i] : limit, uv = u.v[i];
            clamped += g.v[i] > limit || fabs(uv) > limit;
            uv = uv < -limit ? -limit : (uv > limit ? limit : uv);
            ref[i] = (uv + 1.0) * gv / (1.0 + exp(-alpha * gv));
        }
        assert_true(clamped > 20);
        tf_expect_close(got, ref, g.n, 2e-6, 1e-6, "swiglu_clamp");
        assert_true(tf_pad_intact(&d));
        /* in place over gate */
        TU_OK(rb_swiglu_clamp(be, &g.t, &g.t, &u.t, alpha, limit));
        double *inpl = tf_read(&g);
        tf_expect_close(inpl, ref, g.n, 2e-6, 1e-6, "swiglu_clamp in place");
        assert_int_equal(rb_swiglu_clamp(be, &d.t, &g.t, &u.t, alpha, 0.0f), RB_E_INVALID);
        free(got);
        free(ref);
        free(inpl);
        tf_free(&g);
        tf_free(&u);
        tf_free(&d);
        rb_backend_destroy(be);
    }
}

/* softmax over [scores..., sink] (the sink's share dropped) times V, in double */
static void ref_attention_sinks(const tt *q, const tt *k, const tt *v, const double *sinks, double scale, int window,
                                double *y) {
    const int64_t *qn = q->t.ne, *kn = k->t.ne;
    const int64_t D = qn[0], Tq = qn[1], Hq = qn[2], Tk = kn[1], Hkv = kn[2], Dv = v->t.ne[0];
    const int64_t vne[4] = {Dv, Tk, Hkv, 1}, yne[4] = {Dv, Hq, Tq, 1};
    double *s = malloc(sizeof(double) * (size_t)Tk);
    assert_non_null(s);
    for (int64_t h = 0; h < Hq; h++)
        for (int64_t i = 0; i < Tq; i++) {
            const int64_t g = h / (Hq / Hkv), pos = Tk - Tq + i;
            double mx = sinks[h];
            for (int64_t j = 0; j < Tk; j++) {
                double d = 0;
                for (int64_t e = 0; e < D; e++) d += q->v[tf_idx(qn, e, i, h, 0)] * k->v[tf_idx(kn, e, j, g, 0)];
                s[j] = (j > pos || (window > 0 && pos - j >= window)) ? -INFINITY : d * scale;
                if (s[j] > mx) mx = s[j];
            }
            double sum = exp(sinks[h] - mx);
            for (int64_t j = 0; j < Tk; j++) sum += (s[j] = exp(s[j] - mx));
            double *yr = y + tf_idx(yne, 0, h, i, 0);
            for (int64_t e = 0; e < Dv; e++) {
                double acc = 0;
                for (int64_t j = 0; j < Tk; j++) acc += s[j] / sum * v->v[tf_idx(vne, e, j, g, 0)];
                yr[e] = acc;
            }
        }
    free(s);
}

static void test_attention_sinks(void **state) {
    (void)state;
    for (int ci = 0; ci < tf_ncfgs; ci++) {
        rb_backend *be = tf_backend(&tf_cfgs[ci]);
        tu_rng r;
        tu_rng_seed(&r, 31 + (uint64_t)ci);
        const struct { int64_t D, Tq, Tk, Hq, Hkv; int window; rb_dtype kv; } cs[] = {
            {16, 6, 6, 4, 2, 0, RB_F32}, {16, 5, 90, 4, 1, 8, RB_F16}, {32, 1, 70, 2, 2, 0, RB_F32},
            {8, 9, 9, 3, 3, 3, RB_F32},
        };
        for (size_t n = 0; n < sizeof cs / sizeof cs[0]; n++) {
            const int64_t qne[4] = {cs[n].D, cs[n].Tq, cs[n].Hq, 1}, kne[4] = {cs[n].D, cs[n].Tk, cs[n].Hkv, 1};
            const int64_t dne[4] = {cs[n].D, cs[n].Hq, cs[n].Tq, 1}, sne[4] = {cs[n].Hq, 1, 1, 1};
            tt q = tf_make(be, &r, RB_F32, qne, TF_SLICE, -1, 1);
            tt k = tf_make(be, &r, cs[n].kv, kne, TF_PERM, -1, 1), v = tf_make(be, &r, cs[n].kv, kne, TF_SLICE, -1, 1);
            tt sk = tf_make(be, &r, RB_F32, sne, TF_CONTIG, -2, 3);
            tt d = tf_make(be, &r, RB_F32, dne, TF_SLICE, 0, 1);
            const float scale = 1.0f / sqrtf((float)cs[n].D);
            rb_attn_params p = {.scale = scale, .causal = true, .window = cs[n].window,
                                .q_pos0 = cs[n].Tk - cs[n].Tq, .sinks = &sk.t};
            TU_OK(rb_attention(be, &d.t, &q.t, &k.t, &v.t, &p));
            double *got = tf_read(&d), *ref = malloc(sizeof(double) * (size_t)d.n);
            assert_non_null(ref);
            ref_attention_sinks(&q, &k, &v, sk.v, scale, cs[n].window, ref);
            tf_expect_close(got, ref, d.n, 1e-5, 2e-5, "attention with sinks");
            free(got);
            free(ref);
            /* wrong sink count */
            const int64_t sbad[4] = {cs[n].Hq + 1, 1, 1, 1};
            tt s2 = tf_make(be, &r, RB_F32, sbad, TF_CONTIG, 0, 1);
            p.sinks = &s2.t;
            assert_int_equal(rb_attention(be, &d.t, &q.t, &k.t, &v.t, &p), RB_E_INVALID);
            tf_free(&s2);
            tf_free(&q);
            tf_free(&k);
            tf_free(&v);
            tf_free(&sk);
            tf_free(&d);
        }
        rb_backend_destroy(be);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_id),
        cmocka_unit_test(test_matmul_id_reads_selected_only),
        cmocka_unit_test(test_matmul_id_bad),
        cmocka_unit_test(test_swiglu_clamp),
        cmocka_unit_test(test_attention_sinks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

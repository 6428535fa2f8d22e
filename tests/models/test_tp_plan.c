/* The tensor-parallel split (include/rbee/tp.h) against hand-worked splits of
 * real shapes, and the slicing of quantized weights against slicing their
 * decoded values: a rank's column-parallel rows and row-parallel columns,
 * decoded, equal the same region of the whole matrix decoded. Bad splits
 * and bad slices give errors. */
#include "testutil.h"

#include "rbee/quant.h"
#include "rbee/tp.h"

#include <stdlib.h>
#include <string.h>

static rb_model_config shape(int64_t hq, int64_t hkv, int64_t ff, int64_t vocab) {
    rb_model_config c;
    memset(&c, 0, sizeof c);
    c.n_head = hq;
    c.n_head_kv = hkv;
    c.head_dim = 128;
    c.n_embd = hq * 128;
    c.n_ff = ff;
    c.n_vocab = vocab;
    c.n_layer = 2;
    return c;
}

static void expect_range(rb_tp_range r, int64_t first, int64_t count) {
    assert_int_equal(r.first, first);
    assert_int_equal(r.count, count);
}

/* Every unit of each dimension belongs to exactly one rank (kv heads: each
 * rank's q heads read the kv head it holds). */
static void check_cover(const rb_model_config *c, const rb_tp_plan *p) {
    int64_t q = 0, ff = 0, v = 0, kv = 0;
    for (int r = 0; r < p->n_rank; r++) {
        const rb_tp_rank *k = &p->rank[r];
        assert_int_equal(k->q_heads.first, q);
        assert_int_equal(k->ff.first, ff);
        assert_int_equal(k->vocab.first, v);
        q += k->q_heads.count;
        ff += k->ff.count;
        v += k->vocab.count;
        const int64_t group = c->n_head / c->n_head_kv;
        for (int64_t h = k->q_heads.first; h < k->q_heads.first + k->q_heads.count; h++) {
            const int64_t need = h / group;
            assert_true(need >= k->kv_heads.first && need < k->kv_heads.first + k->kv_heads.count);
        }
        if (!p->kv_replicated) {
            assert_int_equal(k->kv_heads.first, kv);
            kv += k->kv_heads.count;
        }
        if (p->n_rank > 1) assert_int_equal(k->ff.count % RB_TP_FF_UNIT, 0);
    }
    assert_int_equal(q, c->n_head);
    assert_int_equal(ff, c->n_ff);
    assert_int_equal(v, c->n_vocab);
    if (!p->kv_replicated) assert_int_equal(kv, c->n_head_kv);
}

static void test_plans(void **state) {
    (void)state;
    rb_tp_plan p;
    /* Llama-2-7B: 32/32 heads, ff 11008 = 43 x 256, vocab 32000 */
    rb_model_config c = shape(32, 32, 11008, 32000);
    TU_OK(rb_tp_plan_make(&c, 2, &p, NULL));
    assert_false(p.kv_replicated);
    expect_range(p.rank[0].q_heads, 0, 16);
    expect_range(p.rank[1].kv_heads, 16, 16);
    expect_range(p.rank[0].ff, 0, 22 * 256);
    expect_range(p.rank[1].ff, 22 * 256, 21 * 256);
    expect_range(p.rank[1].vocab, 16000, 16000);
    check_cover(&c, &p);
    TU_OK(rb_tp_plan_make(&c, 4, &p, NULL));
    expect_range(p.rank[3].ff, (11 + 11 + 11) * 256, 10 * 256);
    expect_range(p.rank[3].q_heads, 24, 8);
    check_cover(&c, &p);
    /* Llama-3.2-1B: 32 q heads over 8 kv heads, vocab 128256 over 3 does not divide evenly */
    c = shape(32, 8, 8192, 128256);
    TU_OK(rb_tp_plan_make(&c, 4, &p, NULL));
    expect_range(p.rank[2].kv_heads, 4, 2);
    check_cover(&c, &p);
    /* 16 ranks, 8 kv heads: each kv head on two ranks */
    c = shape(32, 8, 8192, 1001);
    TU_OK(rb_tp_plan_make(&c, 16, &p, NULL));
    assert_true(p.kv_replicated);
    expect_range(p.rank[5].q_heads, 10, 2);
    expect_range(p.rank[5].kv_heads, 2, 1);
    expect_range(p.rank[15].vocab, 1001 - 62, 62);
    expect_range(p.rank[0].vocab, 0, 63);
    check_cover(&c, &p);
    /* one kv head (MQA) on every rank */
    c = shape(8, 1, 1024, 100);
    TU_OK(rb_tp_plan_make(&c, 8, &p, NULL));
    for (int r = 0; r < 8; r++) expect_range(p.rank[r].kv_heads, 0, 1);
    check_cover(&c, &p);
    /* one rank: the whole model, any feed-forward width */
    c = shape(6, 2, 1000, 50);
    TU_OK(rb_tp_plan_make(&c, 1, &p, NULL));
    expect_range(p.rank[0].ff, 0, 1000);
    check_cover(&c, &p);
}

static void test_bad_plans(void **state) {
    (void)state;
    rb_tp_plan p;
    rb_error err;
    rb_model_config c = shape(32, 32, 11008, 32000);
    assert_int_equal(rb_tp_plan_make(&c, 3, &p, &err), RB_E_UNSUPPORTED); /* 32 heads over 3 */
    assert_non_null(strstr(err.msg, "heads"));
    c = shape(24, 12, 4096, 100);
    assert_int_equal(rb_tp_plan_make(&c, 8, &p, &err), RB_E_UNSUPPORTED); /* 12 kv heads vs 8 ranks */
    c = shape(32, 8, 1000, 100);
    assert_int_equal(rb_tp_plan_make(&c, 2, &p, &err), RB_E_UNSUPPORTED); /* ff not whole blocks */
    c = shape(32, 8, 8192, 100);
    c.n_expert = 8;
    assert_int_equal(rb_tp_plan_make(&c, 2, &p, &err), RB_E_UNSUPPORTED);
    c.n_expert = 0;
    assert_int_equal(rb_tp_plan_make(&c, 0, &p, &err), RB_E_RANGE);
    assert_int_equal(rb_tp_plan_make(&c, RB_TP_MAX_RANKS + 1, &p, &err), RB_E_RANGE);
    assert_int_equal(rb_tp_plan_make(NULL, 2, &p, &err), RB_E_INVALID);
    c.n_head_kv = 3; /* 32 q heads do not group over 3 kv heads */
    assert_int_equal(rb_tp_plan_make(&c, 2, &p, &err), RB_E_INVALID);
}

/* A rank's slices of a quantized matrix decode to the same region of the whole
 * matrix decoded. */
static void dequant(rb_dtype t, const void *src, float *dst, int64_t nrows, int64_t n) {
    const size_t rb = rb_dtype_row_size(t, n);
    for (int64_t r = 0; r < nrows; r++) TU_OK(rb_dequantize_row(t, (const char *)src + rb * (size_t)r, dst + r * n, n));
}

static void check_slices(rb_dtype t) {
    const int64_t K = 1024, N = 12;
    float *src = malloc(sizeof(float) * (size_t)(K * N)), *whole = malloc(sizeof(float) * (size_t)(K * N));
    const size_t rb = rb_dtype_row_size(t, K);
    char *q = malloc(rb * (size_t)N), *part = malloc(rb * (size_t)N);
    float *dec = malloc(sizeof(float) * (size_t)(K * N));
    assert_non_null(src);
    assert_non_null(whole);
    assert_non_null(q);
    assert_non_null(part);
    assert_non_null(dec);
    uint32_t s = 7;
    for (int64_t i = 0; i < K * N; i++) {
        s = s * 1664525u + 1013904223u;
        src[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    TU_OK(rb_quantize_rows(t, src, q, N, K));
    dequant(t, q, whole, N, K);
    /* rows 5..8 */
    TU_OK(rb_tp_slice_rows(t, K, N, q, rb * (size_t)N, 5, 4, part, rb * (size_t)N, NULL));
    dequant(t, part, dec, 4, K);
    assert_memory_equal(dec, whole + 5 * K, sizeof(float) * (size_t)(4 * K));
    /* columns 256..767 of every row */
    TU_OK(rb_tp_slice_cols(t, K, N, q, rb * (size_t)N, 256, 512, part, rb * (size_t)N, NULL));
    dequant(t, part, dec, N, 512);
    for (int64_t r = 0; r < N; r++) assert_memory_equal(dec + r * 512, whole + r * K + 256, sizeof(float) * 512);
    /* bad slices */
    rb_error err;
    assert_int_equal(rb_tp_slice_cols(t, K, N, q, rb * (size_t)N, 128, 512, part, rb * (size_t)N, &err),
                     rb_dtype_info((int)t)->block_size > 128 ? RB_E_INVALID : RB_OK);
    assert_int_equal(rb_tp_slice_cols(t, K, N, q, rb * (size_t)N, 768, 512, part, rb * (size_t)N, &err), RB_E_RANGE);
    assert_int_equal(rb_tp_slice_rows(t, K, N, q, rb * (size_t)N, 10, 3, part, rb * (size_t)N, &err), RB_E_RANGE);
    assert_int_equal(rb_tp_slice_rows(t, K, N, q, rb * (size_t)(N - 1), 0, 1, part, rb, &err), RB_E_FORMAT);
    assert_int_equal(rb_tp_slice_rows(t, K, N, q, rb * (size_t)N, 0, 2, part, rb, &err), RB_E_RANGE);
    assert_int_equal(rb_tp_slice_cols(RB_DTYPE_END_, K, N, q, rb * (size_t)N, 0, 256, part, rb * (size_t)N, &err),
                     RB_E_INVALID);
    free(src);
    free(whole);
    free(q);
    free(part);
    free(dec);
}

static void test_slices(void **state) {
    (void)state;
    const rb_dtype types[] = {RB_F32, RB_F16, RB_Q8_0, RB_Q4_0, RB_Q4_K, RB_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) check_slices(types[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plans),
        cmocka_unit_test(test_bad_plans),
        cmocka_unit_test(test_slices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

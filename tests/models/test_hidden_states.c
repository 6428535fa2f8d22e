/* rb_model_forward_hidden and rb_kv_cache_copy on the bundled default model
 * (HF folder, float32, tied embeddings). The hidden states are checked
 * against an independent reference: the output head is a plain product
 * with the embedding matrix read here from model.safetensors, so W h_t
 * must give rb_model_forward's logits of every position, for prompts long
 * enough for the plain path and short enough for the fused decode path,
 * and in several micro-batches. A copied KV cache must continue exactly as
 * its source does (the same logits, bit for bit), whatever it held before;
 * mismatched caches are refused. rb_kv_cache_copy_prefix: the copied
 * positions' key and value rows equal the source's byte for byte (read from
 * the cache memory), within a pool and across pools, and the copy then
 * continues as the source truncated to those positions does; bad counts and
 * mismatched caches are refused. */
#include "testutil.h"

#include "models/kv_cache_internal.h"
#include "rbee/model.h"
#include "rbee/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_DIR RBEE_TEST_DATA_DIR "/../../models/default/hf"

typedef struct fixture {
    rb_backend *be;
    rb_model *m;
    rb_st_set *st;
    const float *w; /* [V rows of E] */
    int64_t V, E;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    rb_error err;
    rb_error_clear(&err);
    if (!f || rb_backend_create("cpu", NULL, &f->be, &err) != RB_OK ||
        rb_model_load(HF_DIR, f->be, NULL, &f->m, &err) != RB_OK || rb_st_open(HF_DIR, &f->st, &err) != RB_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    const rb_model_config *c = rb_model_get_config(f->m);
    f->V = c->n_vocab;
    f->E = c->n_embd;
    const rb_st_tensor *t = rb_st_find(f->st, "lm_head.weight");
    if (!t) t = rb_st_find(f->st, "model.embed_tokens.weight");
    if (!t || t->dtype != RB_F32 || t->ne[0] != f->E || t->ne[1] != f->V) return -1;
    f->w = t->data;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    rb_st_close(f->st);
    rb_model_free(f->m);
    rb_backend_destroy(f->be);
    free(f);
    return 0;
}

static void tokens_of(int32_t *t, int64_t n, int64_t V, uint64_t seed) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    t[0] = 0; /* BOS */
    for (int64_t i = 1; i < n; i++) t[i] = (int32_t)(2 + tu_rng_u64(&r) % (uint64_t)(V - 2));
}

/* Hidden states of n tokens vs W h = logits at every position. */
static void check_hidden(fixture *f, int64_t n, int64_t ctx) {
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    float *h = malloc(sizeof(float) * (size_t)(n * f->E));
    float *lg = malloc(sizeof(float) * (size_t)(n * f->V));
    assert_true(tok && h && lg);
    tokens_of(tok, n, f->V, (uint64_t)n);
    rb_kv_cache *a = NULL, *b = NULL;
    TU_OK(rb_kv_cache_create(f->m, ctx, RB_F16, &a, NULL));
    TU_OK(rb_kv_cache_create(f->m, ctx, RB_F16, &b, NULL));
    TU_OK(rb_model_forward_hidden(f->m, a, tok, n, h, NULL));
    assert_int_equal(rb_kv_cache_used(a), n);
    TU_OK(rb_model_forward(f->m, b, tok, n, true, lg, NULL));
    double worst = 0;
    for (int64_t t = 0; t < n; t++) {
        const float *ht = h + t * f->E;
        double norm = 0;
        for (int64_t e = 0; e < f->E; e++) norm += (double)ht[e] * ht[e];
        assert_true(norm > 1.0); /* an RMS-normed vector: about n_embd times the norm weights squared */
        for (int64_t v = 0; v < f->V; v++) {
            double dot = 0;
            const float *wv = f->w + v * f->E;
            for (int64_t e = 0; e < f->E; e++) dot += (double)wv[e] * ht[e];
            const double d = fabs(dot - lg[t * f->V + v]) / (1.0 + fabs(dot));
            if (d > worst) worst = d;
        }
    }
    print_message("%3lld tokens: |W h - logits| <= %.2e (relative)\n", (long long)n, worst);
    assert_true(worst < 1e-5);
    rb_kv_cache_free(a);
    rb_kv_cache_free(b);
    free(tok);
    free(h);
    free(lg);
}

static void test_hidden_is_the_heads_input(void **state) {
    fixture *f = *state;
    check_hidden(f, 1, 16);   /* one token: the fused decode form */
    check_hidden(f, 3, 16);   /* a few rows: still fused */
    check_hidden(f, 37, 64);  /* the plain path */
    check_hidden(f, 600, 640); /* two micro-batches (512 + 88) */
}

static void test_hidden_bad_args(void **state) {
    fixture *f = *state;
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(f->m, 4, RB_F16, &kv, NULL));
    int32_t t[5] = {0, 5, 6, 7, 8};
    float h[5 * 256];
    rb_error e;
    assert_int_equal(rb_model_forward_hidden(f->m, kv, t, 2, NULL, &e), RB_E_INVALID);
    assert_int_equal(rb_model_forward_hidden(f->m, kv, t, 5, h, &e), RB_E_RANGE); /* does not fit */
    t[1] = (int32_t)f->V;
    assert_int_equal(rb_model_forward_hidden(f->m, kv, t, 2, h, &e), RB_E_RANGE);
    assert_int_equal(rb_kv_cache_used(kv), 0);
    rb_kv_cache_free(kv);
}

static void test_kv_copy(void **state) {
    fixture *f = *state;
    const int64_t ctx = 48, n = 21;
    int32_t tok[21], other[30];
    tokens_of(tok, n, f->V, 5);
    tokens_of(other, 30, f->V, 6);
    rb_kv_cache *src = NULL, *dst = NULL, *ref = NULL;
    TU_OK(rb_kv_cache_create(f->m, ctx, RB_F16, &src, NULL));
    TU_OK(rb_kv_cache_create(f->m, ctx, RB_F16, &dst, NULL));
    TU_OK(rb_kv_cache_create(f->m, ctx, RB_F16, &ref, NULL));
    float *l1 = malloc(sizeof(float) * (size_t)f->V), *l2 = malloc(sizeof(float) * (size_t)f->V),
          *l3 = malloc(sizeof(float) * (size_t)f->V);
    assert_true(l1 && l2 && l3);
    TU_OK(rb_model_forward(f->m, src, tok, n, false, l1, NULL));
    TU_OK(rb_model_forward(f->m, dst, other, 30, false, l2, NULL)); /* something else first, longer */
    TU_OK(rb_kv_cache_copy(dst, src, NULL));
    assert_int_equal(rb_kv_cache_used(dst), n);
    TU_OK(rb_model_forward(f->m, ref, tok, n, false, l3, NULL));
    /* three decode steps on each: identical logits */
    int32_t next = 17;
    for (int step = 0; step < 3; step++) {
        TU_OK(rb_model_forward(f->m, src, &next, 1, false, l1, NULL));
        TU_OK(rb_model_forward(f->m, dst, &next, 1, false, l2, NULL));
        TU_OK(rb_model_forward(f->m, ref, &next, 1, false, l3, NULL));
        assert_memory_equal(l1, l2, sizeof(float) * (size_t)f->V);
        assert_memory_equal(l1, l3, sizeof(float) * (size_t)f->V);
        next = (int32_t)(100 + step);
    }
    /* an empty source empties the copy */
    rb_kv_cache_truncate(src, 0);
    TU_OK(rb_kv_cache_copy(dst, src, NULL));
    assert_int_equal(rb_kv_cache_used(dst), 0);
    /* mismatched caches */
    rb_kv_cache *small = NULL, *f32 = NULL;
    TU_OK(rb_kv_cache_create(f->m, ctx / 2, RB_F16, &small, NULL));
    TU_OK(rb_kv_cache_create(f->m, ctx, RB_F32, &f32, NULL));
    rb_error e;
    assert_int_equal(rb_kv_cache_copy(small, dst, &e), RB_E_INVALID);
    assert_int_equal(rb_kv_cache_copy(f32, dst, &e), RB_E_INVALID);
    assert_int_equal(rb_kv_cache_copy(NULL, dst, &e), RB_E_INVALID);
    rb_kv_cache_free(small);
    rb_kv_cache_free(f32);
    rb_kv_cache_free(src);
    rb_kv_cache_free(dst);
    rb_kv_cache_free(ref);
    free(l1);
    free(l2);
    free(l3);
}

/* The bytes of positions [0, n) of every layer of kv (k and v rows alternate). */
static unsigned char *kv_rows(fixture *f, const rb_kv_cache *kv, int64_t n, size_t *len) {
    const rb_model_config *c = rb_model_get_config(f->m);
    const size_t row = rb_dtype_row_size(kv->dtype, c->head_dim * c->n_head_kv), per = 2 * row * (size_t)n;
    unsigned char *b = malloc(per * (size_t)c->n_layer + 1);
    assert_non_null(b);
    for (int64_t il = 0; il < c->n_layer; il++)
        TU_OK(rb_buffer_get(kv->pool->buf, kv->k[il].offs, b + (size_t)il * per, per));
    *len = per * (size_t)c->n_layer;
    return b;
}

static void test_kv_copy_prefix(void **state) {
    fixture *f = *state;
    const int64_t ctx = 48;
    int32_t tok[25], other[31];
    tokens_of(tok, 25, f->V, 11);
    tokens_of(other, 31, f->V, 12);
    rb_kv_cache *pool[3] = {NULL, NULL, NULL}, *lone = NULL;
    TU_OK(rb_kv_cache_create_many(f->m, 3, ctx, RB_F16, pool, NULL));
    TU_OK(rb_kv_cache_create(f->m, ctx, RB_F16, &lone, NULL));
    float *l1 = malloc(sizeof(float) * (size_t)f->V), *l2 = malloc(sizeof(float) * (size_t)f->V);
    assert_true(l1 && l2);
    rb_kv_cache *src = pool[1];
    TU_OK(rb_model_forward(f->m, src, tok, 25, false, l1, NULL));
    TU_OK(rb_model_forward(f->m, pool[0], other, 31, false, l2, NULL)); /* longer, other tokens */
    TU_OK(rb_model_forward(f->m, lone, other, 7, false, l2, NULL));     /* shorter */
    const int64_t ns[] = {13, 1, 25, 0};
    rb_kv_cache *dsts[] = {pool[0], lone, pool[2], pool[0]};
    for (int i = 0; i < 4; i++) {
        const int64_t n = ns[i];
        rb_kv_cache *dst = dsts[i];
        TU_OK(rb_kv_cache_copy_prefix(dst, src, n, NULL));
        assert_int_equal(rb_kv_cache_used(dst), n);
        assert_int_equal(rb_kv_cache_used(src), 25); /* the source is left as it was */
        size_t la = 0, lb = 0;
        unsigned char *a = kv_rows(f, src, n, &la), *b = kv_rows(f, dst, n, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(a, b, la);
        free(a);
        free(b);
    }
    /* a copied prefix continues as the source cut to the same length does, bit for bit */
    TU_OK(rb_kv_cache_copy_prefix(lone, src, 13, NULL));
    rb_kv_cache_truncate(src, 13);
    TU_OK(rb_model_forward(f->m, src, tok + 13, 6, false, l1, NULL));
    TU_OK(rb_model_forward(f->m, lone, tok + 13, 6, false, l2, NULL));
    assert_memory_equal(l1, l2, sizeof(float) * (size_t)f->V);
    int32_t next = 42;
    TU_OK(rb_model_forward(f->m, src, &next, 1, false, l1, NULL));
    TU_OK(rb_model_forward(f->m, lone, &next, 1, false, l2, NULL));
    assert_memory_equal(l1, l2, sizeof(float) * (size_t)f->V);
    /* onto itself: a truncation */
    TU_OK(rb_kv_cache_copy_prefix(src, src, 5, NULL));
    assert_int_equal(rb_kv_cache_used(src), 5);
    /* bad counts and mismatched caches; the destination is untouched */
    rb_error e;
    const int64_t used = rb_kv_cache_used(lone);
    assert_int_equal(rb_kv_cache_copy_prefix(lone, src, 6, &e), RB_E_INVALID); /* more than src holds */
    assert_non_null(strstr(e.msg, "the source holds 5"));
    assert_int_equal(rb_kv_cache_copy_prefix(lone, src, -1, &e), RB_E_INVALID);
    assert_int_equal(rb_kv_cache_used(lone), used);
    rb_kv_cache *small = NULL, *f32 = NULL;
    TU_OK(rb_kv_cache_create(f->m, ctx / 2, RB_F16, &small, NULL));
    TU_OK(rb_kv_cache_create(f->m, ctx, RB_F32, &f32, NULL));
    assert_int_equal(rb_kv_cache_copy_prefix(small, src, 1, &e), RB_E_INVALID);
    assert_int_equal(rb_kv_cache_copy_prefix(f32, src, 1, &e), RB_E_INVALID);
    assert_int_equal(rb_kv_cache_copy_prefix(NULL, src, 1, &e), RB_E_INVALID);
    assert_int_equal(rb_kv_cache_copy_prefix(lone, NULL, 0, &e), RB_E_INVALID);
    rb_kv_cache_free(small);
    rb_kv_cache_free(f32);
    for (int i = 0; i < 3; i++) rb_kv_cache_free(pool[i]);
    rb_kv_cache_free(lone);
    free(l1);
    free(l2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hidden_is_the_heads_input),
        cmocka_unit_test(test_hidden_bad_args),
        cmocka_unit_test(test_kv_copy),
        cmocka_unit_test(test_kv_copy_prefix),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

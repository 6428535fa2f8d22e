/* Checks the quant module against files written by llama.cpp itself
 * (shared/fixtures/llamacpp): decoding every quantized fixture must give
 * ggml's to_float output exactly, and re-quantizing the F32 weights of
 * tiny-f32.gguf must give exactly the bytes llama-quantize --pure wrote. */
#include "testutil.h"

#include "rbee/gguf.h"
#include "rbee/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture_type {
    const char *file_tag; /* tiny-<tag>.gguf */
    rb_dtype dtype;
} fixture_type;

static const fixture_type k_types[] = {
    {"q8_0", RB_Q8_0}, {"q4_0", RB_Q4_0}, {"q4_1", RB_Q4_1}, {"q5_0", RB_Q5_0}, {"q5_1", RB_Q5_1},
    {"q2_k", RB_Q2_K}, {"q3_k", RB_Q3_K}, {"q4_k", RB_Q4_K}, {"q5_k", RB_Q5_K}, {"q6_k", RB_Q6_K},
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

static const char *const k_dequant_names[] = {"blk.0.attn_q.weight", "blk.0.ffn_down.weight", "blk.1.attn_k.weight"};

static rb_gguf *open_fixture(const char *rel) {
    char path[1024];
    tu_fixture(path, sizeof path, rel);
    rb_gguf *g = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_gguf_open(path, &g, &err) != RB_OK) fail_msg("cannot open %s: %s", path, err.msg);
    return g;
}

static int64_t n_elements(const rb_gguf_tensor_info *ti) {
    int64_t n = 1;
    for (int d = 0; d < RB_MAX_DIMS; d++) n *= ti->ne[d];
    return n;
}

/* Decoding each fixture's three reference tensors reproduces ggml's floats bit for bit. */
static void test_dequantize_matches_ggml(void **state) {
    (void)state;
    for (size_t t = 0; t < N_TYPES; t++) {
        char rel[128];
        snprintf(rel, sizeof rel, "llamacpp/tiny-%s.gguf", k_types[t].file_tag);
        rb_gguf *q = open_fixture(rel);
        snprintf(rel, sizeof rel, "llamacpp/tiny-%s.dequant.gguf", k_types[t].file_tag);
        rb_gguf *ref = open_fixture(rel);
        for (size_t k = 0; k < sizeof k_dequant_names / sizeof k_dequant_names[0]; k++) {
            const rb_gguf_tensor_info *tq = rb_gguf_find_tensor(q, k_dequant_names[k]);
            const rb_gguf_tensor_info *tr = rb_gguf_find_tensor(ref, k_dequant_names[k]);
            assert_non_null(tq);
            assert_non_null(tr);
            assert_int_equal(tq->dtype, k_types[t].dtype);
            assert_int_equal(tr->dtype, RB_F32);
            const int64_t n = n_elements(tq);
            assert_int_equal(n, n_elements(tr));
            assert_int_equal(tr->nbytes, (size_t)n * sizeof(float));
            assert_int_equal(tq->nbytes, rb_dtype_row_size(tq->dtype, n));
            float *out = malloc((size_t)n * sizeof(float));
            assert_non_null(out);
            TU_OK(rb_dequantize_row(tq->dtype, tq->data, out, n));
            if (memcmp(out, tr->data, (size_t)n * sizeof(float)) != 0) {
                const float *want = tr->data;
                int64_t bad = 0, first = -1;
                for (int64_t i = 0; i < n; i++) {
                    if (memcmp(&out[i], &want[i], sizeof(float)) != 0) {
                        if (first < 0) first = i;
                        bad++;
                    }
                }
                fail_msg("%s %s: %lld of %lld values differ, first at %lld: %.9g vs %.9g", k_types[t].file_tag,
                         k_dequant_names[k], (long long)bad, (long long)n, (long long)first, (double)out[first],
                         (double)want[first]);
            }
            free(out);
        }
        rb_gguf_close(ref);
        rb_gguf_close(q);
    }
}

/* Quantizing every 2-D F32 weight of tiny-f32.gguf reproduces the bytes of
 * tiny-<t>.gguf exactly, for the legacy formats and the k-quants alike
 * (llama-quantize without imatrix runs ggml's quantize_row_<t>_ref). */
static void check_quantizer_bytes(const fixture_type *ft) {
    rb_gguf *f32 = open_fixture("llamacpp/tiny-f32.gguf");
    char rel[128];
    snprintf(rel, sizeof rel, "llamacpp/tiny-%s.gguf", ft->file_tag);
    rb_gguf *q = open_fixture(rel);
    int checked = 0;
    for (int64_t i = 0; i < rb_gguf_n_tensors(f32); i++) {
        const rb_gguf_tensor_info *src = rb_gguf_tensor_at(f32, i);
        if (src->n_dims != 2) continue;
        assert_int_equal(src->dtype, RB_F32);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)src->name.len, src->name.ptr);
        const rb_gguf_tensor_info *want = rb_gguf_find_tensor(q, name);
        assert_non_null(want);
        assert_int_equal(want->dtype, ft->dtype);
        const int64_t ncols = src->ne[0], nrows = src->ne[1];
        const size_t nbytes = (size_t)nrows * rb_dtype_row_size(ft->dtype, ncols);
        assert_int_equal(want->nbytes, nbytes);
        unsigned char *out = malloc(nbytes);
        assert_non_null(out);
        memset(out, 0xA5, nbytes); /* poison: every byte must be written */
        TU_OK(rb_quantize_rows(ft->dtype, src->data, out, nrows, ncols));
        if (memcmp(out, want->data, nbytes) != 0) {
            const size_t bs = rb_dtype_row_size(ft->dtype, rb_dtype_info((int)ft->dtype)->block_size);
            size_t bad = 0, first = SIZE_MAX;
            for (size_t b = 0; b < nbytes / bs; b++) {
                if (memcmp(out + b * bs, (const unsigned char *)want->data + b * bs, bs) != 0) {
                    if (first == SIZE_MAX) first = b;
                    bad++;
                }
            }
            fail_msg("%s %s: %zu of %zu blocks differ (first: block %zu)", ft->file_tag, name, bad, nbytes / bs, first);
        }
        free(out);
        checked++;
    }
    assert_true(checked >= 15); /* token_embd, output and 2 x 7 layer matrices */
    rb_gguf_close(q);
    rb_gguf_close(f32);
}

static void test_quantize_q8_0(void **state) { (void)state; check_quantizer_bytes(&k_types[0]); }
static void test_quantize_q4_0(void **state) { (void)state; check_quantizer_bytes(&k_types[1]); }
static void test_quantize_q4_1(void **state) { (void)state; check_quantizer_bytes(&k_types[2]); }
static void test_quantize_q5_0(void **state) { (void)state; check_quantizer_bytes(&k_types[3]); }
static void test_quantize_q5_1(void **state) { (void)state; check_quantizer_bytes(&k_types[4]); }
static void test_quantize_q2_K(void **state) { (void)state; check_quantizer_bytes(&k_types[5]); }
static void test_quantize_q3_K(void **state) { (void)state; check_quantizer_bytes(&k_types[6]); }
static void test_quantize_q4_K(void **state) { (void)state; check_quantizer_bytes(&k_types[7]); }
static void test_quantize_q5_K(void **state) { (void)state; check_quantizer_bytes(&k_types[8]); }
static void test_quantize_q6_K(void **state) { (void)state; check_quantizer_bytes(&k_types[9]); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequantize_matches_ggml),
        cmocka_unit_test(test_quantize_q8_0),
        cmocka_unit_test(test_quantize_q4_0),
        cmocka_unit_test(test_quantize_q4_1),
        cmocka_unit_test(test_quantize_q5_0),
        cmocka_unit_test(test_quantize_q5_1),
        cmocka_unit_test(test_quantize_q2_K),
        cmocka_unit_test(test_quantize_q3_K),
        cmocka_unit_test(test_quantize_q4_K),
        cmocka_unit_test(test_quantize_q5_K),
        cmocka_unit_test(test_quantize_q6_K),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

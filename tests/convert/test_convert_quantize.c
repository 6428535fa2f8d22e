/* `rbee quantize` (rb_quantize_gguf): requantizing a converted f32 file to
 * q8_0 gives byte-for-byte the tensors of a direct q8_0 conversion;
 * requantizing llama.cpp's own tiny-f32.gguf reproduces the tensor bytes of
 * llama-quantize's files (--pure, no imatrix) for every legacy and k-quant
 * format; metadata is copied with general.file_type
 * updated; already-quantized input is requantized with a warning. */
#include "convert_testutil.h"

#include "convert/convert.h"
#include "rbee/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void run_quantize(const char *in, const char *out, rb_dtype t, FILE *log, rb_convert_stats *st) {
    rb_convert_opts o = {.type = t, .log = log};
    rb_error err;
    rb_error_clear(&err);
    if (rb_quantize_gguf(in, out, &o, st, &err) != RB_OK) fail_msg("quantize %s: %s", in, err.msg);
}

static char *tname(const rb_gguf_tensor_info *ti, char *buf, size_t len) {
    snprintf(buf, len, "%.*s", (int)ti->name.len, ti->name.ptr);
    return buf;
}

/* Same tensor set, shapes, dtypes and bytes. */
static void assert_same_tensors(const rb_gguf *a, const rb_gguf *b) {
    assert_int_equal(rb_gguf_n_tensors(a), rb_gguf_n_tensors(b));
    for (int64_t i = 0; i < rb_gguf_n_tensors(a); i++) {
        const rb_gguf_tensor_info *x = rb_gguf_tensor_at(a, i);
        char nm[128];
        const rb_gguf_tensor_info *y = rb_gguf_find_tensor(b, tname(x, nm, sizeof nm));
        if (!y) fail_msg("tensor %s missing", nm);
        if (x->dtype != y->dtype) fail_msg("%s: %s vs %s", nm, rb_dtype_name(x->dtype), rb_dtype_name(y->dtype));
        assert_memory_equal(x->ne, y->ne, sizeof x->ne);
        assert_int_equal(x->nbytes, y->nbytes);
        if (memcmp(x->data, y->data, x->nbytes) != 0) fail_msg("%s: tensor bytes differ", nm);
    }
}

/* Every key of want is in got with the same type and value (file_type aside). */
static void assert_kvs_copied(const rb_gguf *want, const rb_gguf *got) {
    for (int64_t i = 0; i < rb_gguf_n_kv(want); i++) {
        const rb_gguf_kv *k = rb_gguf_kv_at(want, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)k->key.len, k->key.ptr);
        if (strcmp(key, "general.file_type") == 0) continue;
        const rb_gguf_kv *g = rb_gguf_find_kv(got, key);
        if (!g) fail_msg("key %s was not copied", key);
        assert_int_equal(g->type, k->type);
        if (k->type == RB_GGUF_ARRAY) {
            assert_int_equal(g->arr_type, k->arr_type);
            assert_int_equal(g->arr_len, k->arr_len);
            for (uint64_t j = 0; j < k->arr_len && k->arr_type == RB_GGUF_STRING; j++) {
                rb_gguf_str s1 = rb_gguf_arr_str(k, j), s2 = rb_gguf_arr_str(g, j);
                assert_true(s1.len == s2.len && memcmp(s1.ptr, s2.ptr, s1.len) == 0);
            }
        } else if (k->type == RB_GGUF_STRING) {
            rb_gguf_str s1, s2;
            memcpy(&s1, k->data, sizeof s1);
            memcpy(&s2, g->data, sizeof s2);
            assert_true(s1.len == s2.len && memcmp(s1.ptr, s2.ptr, s1.len) == 0);
        } else {
            uint64_t v1 = 0, v2 = 0;
            if (rb_gguf_get_u64(want, key, &v1) == RB_OK) {
                TU_OK(rb_gguf_get_u64(got, key, &v2));
                assert_int_equal(v1, v2);
            }
        }
    }
}

static uint32_t file_type(const rb_gguf *g) {
    uint32_t v = 999;
    TU_OK(rb_gguf_get_u32(g, "general.file_type", &v));
    return v;
}

/* rbee quantize of the f32 conversion equals converting straight to the
 * type: q8_0, and mxfp4 (llama.cpp's MXFP4_MOE: expert stacks mxfp4, other
 * matrices q8_0, routers f32) */
static void test_requantize_equals_direct_convert(void **state) {
    (void)state;
    char *names[64];
    int n = tu_model_names(names, 64);
    char tmp[1024];
    ct_tmpdir(tmp, sizeof tmp);
    static const struct { rb_dtype type; uint32_t ftype; } types[] = {{RB_Q8_0, 7}, {RB_MXFP4, 38}};
    for (int i = 0; i < n; i++) {
        char dir[1024], f32p[2048], direct[2048], requant[2048];
        ct_model_dir(dir, sizeof dir, names[i]);
        snprintf(f32p, sizeof f32p, "%s/f32.gguf", tmp);
        snprintf(direct, sizeof direct, "%s/direct.gguf", tmp);
        snprintf(requant, sizeof requant, "%s/requant.gguf", tmp);
        rb_convert_opts o = {.type = RB_F32};
        rb_error err;
        rb_error_clear(&err);
        if (rb_convert_hf_to_gguf(dir, f32p, &o, NULL, &err) != RB_OK) fail_msg("%s", err.msg);
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            o.type = types[k].type;
            rb_convert_stats sd, sq;
            if (rb_convert_hf_to_gguf(dir, direct, &o, &sd, &err) != RB_OK) fail_msg("%s", err.msg);
            run_quantize(f32p, requant, types[k].type, NULL, &sq);
            assert_int_equal(sd.n_quantized, sq.n_quantized);
            assert_int_equal(sd.n_fallback, sq.n_fallback);
            rb_gguf *a = ct_gguf_open(direct), *b = ct_gguf_open(requant), *f = ct_gguf_open(f32p);
            assert_same_tensors(a, b);
            assert_int_equal(rb_gguf_n_kv(a), rb_gguf_n_kv(b));
            assert_kvs_copied(a, b);
            assert_kvs_copied(f, b);
            assert_int_equal(file_type(a), types[k].ftype);
            assert_int_equal(file_type(b), types[k].ftype);
            assert_int_equal(file_type(f), 0);
            print_message("%-24s quantize(f32 -> %s) == convert(%s): %lld tensors identical\n", names[i],
                          rb_dtype_name(types[k].type), rb_dtype_name(types[k].type), (long long)rb_gguf_n_tensors(a));
            rb_gguf_close(a);
            rb_gguf_close(b);
            rb_gguf_close(f);
            remove(direct);
            remove(requant);
        }
        remove(f32p);
        free(names[i]);
    }
    ct_rmtree(tmp);
}

/* rel L2 of the decoded values of two tensors */
static double decoded_rel(const rb_gguf_tensor_info *x, const rb_gguf_tensor_info *ref) {
    int64_t n = x->ne[0] * x->ne[1];
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    assert_non_null(a);
    assert_non_null(b);
    TU_OK(rb_dequantize_row(x->dtype, x->data, a, n));
    TU_OK(rb_dequantize_row(ref->dtype, ref->data, b, n));
    double e = tu_rel_l2_f(a, b, (size_t)n);
    assert_true(e == e);
    free(a);
    free(b);
    return e;
}

static void test_llamacpp_fixture(void **state) {
    (void)state;
    char src[1024];
    tu_fixture(src, sizeof src, "llamacpp/tiny-f32.gguf");
    char tmp[1024];
    ct_tmpdir(tmp, sizeof tmp);
    static const struct { const char *name; rb_dtype t; uint32_t ftype; } cases[] = {
        {"q8_0", RB_Q8_0, 7},   {"q4_0", RB_Q4_0, 2},   {"q4_1", RB_Q4_1, 3},  {"q5_0", RB_Q5_0, 8},
        {"q5_1", RB_Q5_1, 9},   {"q6_k", RB_Q6_K, 18},  {"q5_k", RB_Q5_K, 17}, {"q4_k", RB_Q4_K, 15},
        {"q3_k", RB_Q3_K, 12},  {"q2_k", RB_Q2_K, 10},
    };
    rb_gguf *in = ct_gguf_open(src);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char out[2048], refp[1024], rel[128];
        snprintf(out, sizeof out, "%s/%s.gguf", tmp, cases[c].name);
        snprintf(rel, sizeof rel, "llamacpp/tiny-%s.gguf", cases[c].name);
        tu_fixture(refp, sizeof refp, rel);
        rb_convert_stats st;
        run_quantize(src, out, cases[c].t, NULL, &st);
        assert_int_equal(st.n_fallback, 0);
        assert_int_equal(st.n_quantized, 16); /* 7 per layer + token_embd + output */
        rb_gguf *got = ct_gguf_open(out), *want = ct_gguf_open(refp);
        assert_int_equal(file_type(got), cases[c].ftype);
        assert_int_equal(file_type(want), cases[c].ftype);
        assert_kvs_copied(in, got);
        assert_kvs_copied(want, got); /* incl. general.quantization_version */
        int64_t same = 0;
        for (int64_t i = 0; i < rb_gguf_n_tensors(want); i++) {
            const rb_gguf_tensor_info *w = rb_gguf_tensor_at(want, i);
            char nm[128];
            const rb_gguf_tensor_info *g = rb_gguf_find_tensor(got, tname(w, nm, sizeof nm));
            if (!g) fail_msg("%s: tensor %s missing", cases[c].name, nm);
            assert_int_equal(g->dtype, w->dtype);
            assert_int_equal(g->nbytes, w->nbytes);
            if (memcmp(g->data, w->data, w->nbytes) == 0) same++;
            else fail_msg("%s: %s differs from llama-quantize's bytes (decoded rel L2 %.3g)", cases[c].name, nm,
                          decoded_rel(g, w));
        }
        print_message("tiny-f32 -> %-4s: %lld/%lld tensors byte-identical to llama-quantize\n", cases[c].name,
                      (long long)same, (long long)rb_gguf_n_tensors(want));
        rb_gguf_close(got);
        rb_gguf_close(want);
        remove(out);
    }
    rb_gguf_close(in);
    ct_rmtree(tmp);
}

static void test_requantize_quantized_input_warns(void **state) {
    (void)state;
    char src[1024];
    tu_fixture(src, sizeof src, "llamacpp/tiny-q4_0.gguf");
    char tmp[1024], out[2048], logp[2048];
    ct_tmpdir(tmp, sizeof tmp);
    snprintf(out, sizeof out, "%s/q8.gguf", tmp);
    snprintf(logp, sizeof logp, "%s/log.txt", tmp);
    FILE *log = fopen(logp, "w+");
    assert_non_null(log);
    rb_convert_stats st;
    run_quantize(src, out, RB_Q8_0, log, &st);
    fclose(log);
    size_t n = 0;
    char *text = tu_read_file(logp, &n);
    char *z = malloc(n + 1);
    assert_non_null(z);
    memcpy(z, text, n);
    z[n] = '\0';
    assert_non_null(strstr(z, "16 weights are already block-quantized"));
    free(z);
    free(text);
    rb_gguf *in = ct_gguf_open(src), *got = ct_gguf_open(out);
    for (int64_t i = 0; i < rb_gguf_n_tensors(in); i++) {
        const rb_gguf_tensor_info *x = rb_gguf_tensor_at(in, i);
        char nm[128];
        const rb_gguf_tensor_info *y = rb_gguf_find_tensor(got, tname(x, nm, sizeof nm));
        assert_non_null(y);
        assert_int_equal(y->dtype, x->n_dims == 2 ? RB_Q8_0 : RB_F32);
        /* q4_0 values re-encoded in q8_0: within q8_0's rounding (rel L2 measured ~4e-3) */
        if (x->n_dims == 2) assert_true(decoded_rel(y, x) < 1e-2);
    }
    rb_gguf_close(in);
    rb_gguf_close(got);
    /* to f16: 2-D f16, 1-D f32 */
    run_quantize(src, out, RB_F16, NULL, &st);
    got = ct_gguf_open(out);
    assert_int_equal(file_type(got), 1);
    for (int64_t i = 0; i < rb_gguf_n_tensors(got); i++) {
        const rb_gguf_tensor_info *y = rb_gguf_tensor_at(got, i);
        assert_int_equal(y->dtype, y->n_dims == 2 ? RB_F16 : RB_F32);
    }
    rb_gguf_close(got);
    remove(out);
    remove(logp);
    ct_rmtree(tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requantize_equals_direct_convert),
        cmocka_unit_test(test_llamacpp_fixture),
        cmocka_unit_test(test_requantize_quantized_input_warns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

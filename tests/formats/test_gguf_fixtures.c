/* Reads every GGUF written by llama.cpp in the fixtures folder and checks the
 * metadata llama.cpp wrote, every tensor's dtype, shape and placement, and
 * sample weight values (the expected numbers come from an independent Python
 * struct-based dump of the files). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rbee/gguf.h"
#include "testutil.h"

typedef struct fixture {
    const char *file;
    rb_dtype weight_dtype; /* of every 2-D weight */
    uint32_t file_type;    /* general.file_type (llama_ftype) */
} fixture;

static const fixture k_fixtures[] = {
    {"llamacpp/tiny-f32.gguf", RB_F32, 0},    {"llamacpp/tiny-q8_0.gguf", RB_Q8_0, 7},
    {"llamacpp/tiny-q4_0.gguf", RB_Q4_0, 2},  {"llamacpp/tiny-q4_1.gguf", RB_Q4_1, 3},
    {"llamacpp/tiny-q5_0.gguf", RB_Q5_0, 8},  {"llamacpp/tiny-q5_1.gguf", RB_Q5_1, 9},
    {"llamacpp/tiny-q2_k.gguf", RB_Q2_K, 10}, {"llamacpp/tiny-q3_k.gguf", RB_Q3_K, 12},
    {"llamacpp/tiny-q4_k.gguf", RB_Q4_K, 15}, {"llamacpp/tiny-q5_k.gguf", RB_Q5_K, 17},
    {"llamacpp/tiny-q6_k.gguf", RB_Q6_K, 18},
};
#define N_FIXTURES (sizeof k_fixtures / sizeof k_fixtures[0])

static const char *const k_layer_tensors[] = {"attn_norm", "attn_q",  "attn_k",   "attn_v", "attn_output",
                                              "ffn_norm",  "ffn_gate", "ffn_up", "ffn_down"};

static bool str_eq(rb_gguf_str s, const char *c) { return s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0; }

static void check_u32(const rb_gguf *g, const char *key, uint32_t want) {
    uint32_t v = 0;
    TU_OK(rb_gguf_get_u32(g, key, &v));
    if (v != want) fail_msg("%s = %u, want %u", key, v, want);
}

/* Metadata common to all fixtures (written by convert + llama-quantize). */
static void check_common_metadata(const rb_gguf *g) {
    assert_int_equal(rb_gguf_version(g), 3);
    assert_int_equal(rb_gguf_alignment(g), 32);
    char *s = NULL;
    TU_OK(rb_gguf_get_str(g, "general.architecture", &s));
    assert_string_equal(s, "llama");
    free(s);
    TU_OK(rb_gguf_get_str(g, "general.name", &s));
    assert_string_equal(s, "tiny-random-llama");
    free(s);
    TU_OK(rb_gguf_get_str(g, "tokenizer.ggml.model", &s));
    assert_string_equal(s, "llama");
    free(s);
    check_u32(g, "llama.block_count", 2);
    check_u32(g, "llama.embedding_length", 256);
    check_u32(g, "llama.vocab_size", 259);
    check_u32(g, "llama.context_length", 256);
    check_u32(g, "llama.feed_forward_length", 512);
    check_u32(g, "llama.attention.head_count", 4);
    check_u32(g, "llama.attention.head_count_kv", 2);
    check_u32(g, "llama.rope.dimension_count", 64);
    check_u32(g, "tokenizer.ggml.bos_token_id", 1);
    check_u32(g, "tokenizer.ggml.eos_token_id", 2);
    check_u32(g, "tokenizer.ggml.unknown_token_id", 0);
    float eps = 0, base = 0;
    TU_OK(rb_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps));
    assert_true(eps == 1e-5f);
    TU_OK(rb_gguf_get_f32(g, "llama.rope.freq_base", &base));
    assert_true(base == 10000.0f);
    double based = 0;
    TU_OK(rb_gguf_get_f64(g, "llama.rope.freq_base", &based));
    assert_true(based == 10000.0);
    bool b = false;
    TU_OK(rb_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b));
    assert_true(b);
    TU_OK(rb_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b));
    assert_false(b);
    /* Type mismatches are reported, not converted. */
    uint32_t u;
    assert_int_equal(rb_gguf_get_u32(g, "general.architecture", &u), RB_E_FORMAT);
    assert_int_equal(rb_gguf_get_bool(g, "llama.block_count", &b), RB_E_FORMAT);
    assert_int_equal(rb_gguf_get_str(g, "llama.block_count", &s), RB_E_FORMAT);
    assert_int_equal(rb_gguf_get_u32(g, "no.such.key", &u), RB_E_NOT_FOUND);
    assert_null(rb_gguf_find_kv(g, "llama.block_coun"));

    /* Vocabulary: <unk>, <s>, </s>, then the 256 byte tokens. */
    const rb_gguf_kv *tok = rb_gguf_find_kv(g, "tokenizer.ggml.tokens");
    assert_non_null(tok);
    assert_int_equal(tok->type, RB_GGUF_ARRAY);
    assert_int_equal(tok->arr_type, RB_GGUF_STRING);
    assert_int_equal(tok->arr_len, 259);
    assert_true(str_eq(rb_gguf_arr_str(tok, 0), "<unk>"));
    assert_true(str_eq(rb_gguf_arr_str(tok, 1), "<s>"));
    assert_true(str_eq(rb_gguf_arr_str(tok, 2), "</s>"));
    for (int i = 0; i < 256; i++) {
        char want[16];
        snprintf(want, sizeof want, "<0x%02X>", i);
        if (!str_eq(rb_gguf_arr_str(tok, 3 + (uint64_t)i), want)) fail_msg("token %d is not %s", 3 + i, want);
    }
    assert_null(rb_gguf_arr_str(tok, 259).ptr);
    const rb_gguf_kv *scores = rb_gguf_find_kv(g, "tokenizer.ggml.scores");
    assert_non_null(scores);
    assert_int_equal(scores->arr_type, RB_GGUF_FLOAT32);
    assert_int_equal(scores->arr_len, 259);
    assert_true(rb_gguf_arr_float(scores, 0) == 0.0);
    assert_true(rb_gguf_arr_float(scores, 3) == -1000.0);
    assert_true(rb_gguf_arr_float(scores, 258) == -1255.0);
    assert_true(isnan(rb_gguf_arr_float(scores, 259)));
    const rb_gguf_kv *tt = rb_gguf_find_kv(g, "tokenizer.ggml.token_type");
    assert_non_null(tt);
    assert_int_equal(tt->arr_type, RB_GGUF_INT32);
    assert_int_equal(rb_gguf_arr_int(tt, 0), 2);
    assert_int_equal(rb_gguf_arr_int(tt, 1), 3);
    assert_int_equal(rb_gguf_arr_int(tt, 3), 6);
    assert_int_equal(rb_gguf_arr_int(tt, 258), 6);
}

/* Every tensor: data inside the mapped file, aligned, sizes consistent and
 * non-overlapping (checked independently of the reader). */
static void check_placement(const rb_gguf *g) {
    const uint8_t *base = rb_gguf_base(g);
    size_t size = rb_gguf_file_size(g), doff = rb_gguf_data_offset(g);
    assert_true(doff % 32 == 0 && doff < size);
    size_t total = 0;
    for (int64_t i = 0; i < rb_gguf_n_tensors(g); i++) {
        const rb_gguf_tensor_info *t = rb_gguf_tensor_at(g, i);
        const uint8_t *p = t->data;
        assert_true(p >= base + doff && p + t->nbytes <= base + size);
        assert_true((size_t)(p - base) % 32 == 0);
        assert_true(t->offset == (uint64_t)(p - base - (ptrdiff_t)doff));
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        assert_int_equal(t->nbytes, rb_dtype_row_size(t->dtype, t->ne[0]) * (size_t)rows);
        assert_true(rb_gguf_find_tensor(g, "") == NULL);
        char name[128];
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = '\0';
        assert_ptr_equal(rb_gguf_find_tensor(g, name), t);
        for (int64_t j = 0; j < i; j++) { /* pairwise overlap, naive */
            const rb_gguf_tensor_info *u = rb_gguf_tensor_at(g, j);
            assert_true(t->offset + t->nbytes <= u->offset || u->offset + u->nbytes <= t->offset);
        }
        total += t->nbytes;
    }
    assert_true(total <= size - doff);
}

static void check_llama_tensors(const rb_gguf *g, const fixture *fx) {
    assert_int_equal(rb_gguf_n_tensors(g), 21);
    const rb_gguf_tensor_info *emb = rb_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(emb);
    assert_int_equal(emb->n_dims, 2);
    assert_int_equal(emb->ne[0], 256);
    assert_int_equal(emb->ne[1], 259);
    assert_int_equal(emb->ne[2], 1);
    assert_int_equal(emb->ne[3], 1);
    assert_int_equal(emb->dtype, fx->weight_dtype);
    const rb_gguf_tensor_info *out = rb_gguf_find_tensor(g, "output.weight");
    assert_non_null(out);
    assert_int_equal(out->ne[0], 256);
    assert_int_equal(out->ne[1], 259);
    const rb_gguf_tensor_info *on = rb_gguf_find_tensor(g, "output_norm.weight");
    assert_non_null(on);
    assert_int_equal(on->dtype, RB_F32);
    assert_int_equal(on->n_dims, 1);
    assert_int_equal(on->ne[0], 256);
    for (int l = 0; l < 2; l++) {
        for (size_t k = 0; k < sizeof k_layer_tensors / sizeof k_layer_tensors[0]; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, k_layer_tensors[k]);
            const rb_gguf_tensor_info *t = rb_gguf_find_tensor(g, name);
            if (!t) fail_msg("%s: missing %s", fx->file, name);
            bool norm = strstr(name, "norm") != NULL;
            assert_int_equal(t->dtype, norm ? RB_F32 : fx->weight_dtype);
            assert_int_equal(t->n_dims, norm ? 1 : 2);
            int64_t ne0 = strstr(name, "ffn_down") ? 512 : 256;
            int64_t ne1 = norm ? 1 : strstr(name, "attn_k") || strstr(name, "attn_v") ? 128
                          : strstr(name, "ffn_gate") || strstr(name, "ffn_up")   ? 512
                                                                                  : 256;
            assert_int_equal(t->ne[0], ne0);
            assert_int_equal(t->ne[1], ne1);
        }
    }
    /* The norms are all ones (llama.cpp's converter default). */
    const float *w = on->data;
    for (int i = 0; i < 256; i++) assert_true(w[i] == 1.0f);
}

static void test_llamacpp_models(void **state) {
    (void)state;
    for (size_t f = 0; f < N_FIXTURES; f++) {
        char path[1024];
        tu_fixture(path, sizeof path, k_fixtures[f].file);
        rb_gguf *g = NULL;
        rb_error err;
        rb_status st = rb_gguf_open(path, &g, &err);
        if (st != RB_OK) fail_msg("%s: %s", path, err.msg);
        check_common_metadata(g);
        check_u32(g, "general.file_type", k_fixtures[f].file_type);
        check_llama_tensors(g, &k_fixtures[f]);
        check_placement(g);
        if (f > 0) check_u32(g, "general.quantization_version", 2);
        /* The mapping is the file: data section bytes equal the file's. */
        size_t size;
        uint8_t *copy = tu_read_file(path, &size);
        assert_int_equal(size, rb_gguf_file_size(g));
        assert_memory_equal(copy, rb_gguf_base(g), size);
        free(copy);
        rb_gguf_close(g);
    }
}

/* Sample values (from the independent Python dump) of tiny-f32.gguf. */
static void test_f32_values(void **state) {
    (void)state;
    char path[1024];
    rb_gguf *g = NULL;
    TU_OK(rb_gguf_open(tu_fixture(path, sizeof path, "llamacpp/tiny-f32.gguf"), &g, NULL));
    assert_int_equal(rb_gguf_n_kv(g), 23);
    assert_int_equal(rb_gguf_data_offset(g), 7904);
    assert_int_equal(rb_gguf_file_size(g), 5262048);
    const rb_gguf_tensor_info *t = rb_gguf_find_tensor(g, "token_embd.weight");
    assert_int_equal(t->offset, 0);
    const float *x = t->data;
    assert_true(x[0] == -0.007619271520525217f && x[1] == 0.009563582018017769f && x[2] == 0.06787369400262833f);
    t = rb_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    assert_int_equal(t->offset, 4463616);
    x = t->data;
    assert_true(x[0] == 0.06733466684818268f && x[1] == 0.0025906336959451437f && x[2] == -0.056214384734630585f);
    t = rb_gguf_find_tensor(g, "output.weight");
    assert_int_equal(t->offset, 4988928);
    assert_int_equal(t->nbytes, 256 * 259 * 4);
    x = t->data;
    assert_true(x[0] == 0.047220539301633835f && x[1] == -0.0025036425795406103f);
    /* The first kv, in file order. */
    const rb_gguf_kv *kv = rb_gguf_kv_at(g, 0);
    assert_true(str_eq(kv->key, "general.architecture"));
    assert_null(rb_gguf_kv_at(g, 23));
    assert_null(rb_gguf_tensor_at(g, 21));
    assert_null(rb_gguf_tensor_at(g, -1));
    rb_gguf_close(g);
}

/* ggml's dequantized copies: three F32 tensors per file. */
static void test_dequant_files(void **state) {
    (void)state;
    static const char *const names[] = {"blk.0.attn_q.weight", "blk.0.ffn_down.weight", "blk.1.attn_k.weight"};
    static const int64_t shapes[3][2] = {{256, 256}, {512, 256}, {256, 128}};
    for (size_t f = 1; f < N_FIXTURES; f++) {
        char rel[128], path[1024];
        snprintf(rel, sizeof rel, "%.*s.dequant.gguf", (int)(strlen(k_fixtures[f].file) - 5), k_fixtures[f].file);
        rb_gguf *g = NULL;
        rb_error err;
        if (rb_gguf_open(tu_fixture(path, sizeof path, rel), &g, &err) != RB_OK) fail_msg("%s: %s", rel, err.msg);
        check_common_metadata(g);
        assert_int_equal(rb_gguf_n_tensors(g), 3);
        for (int i = 0; i < 3; i++) {
            const rb_gguf_tensor_info *t = rb_gguf_find_tensor(g, names[i]);
            assert_non_null(t);
            assert_ptr_equal(t, rb_gguf_tensor_at(g, i));
            assert_int_equal(t->dtype, RB_F32);
            assert_int_equal(t->ne[0], shapes[i][0]);
            assert_int_equal(t->ne[1], shapes[i][1]);
            assert_int_equal(t->nbytes, (size_t)(shapes[i][0] * shapes[i][1] * 4));
        }
        check_placement(g);
        rb_gguf_close(g);
    }
}

/* Opening a path that is not a GGUF file. */
static void test_open_errors(void **state) {
    (void)state;
    rb_gguf *g = (rb_gguf *)1;
    rb_error err;
    assert_int_equal(rb_gguf_open("/nonexistent/x.gguf", &g, &err), RB_E_NOT_FOUND);
    assert_null(g);
    assert_non_null(strstr(err.msg, "No such file"));
    assert_int_equal(rb_gguf_open("/tmp", &g, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "directory"));
    char path[1024];
    tu_fixture(path, sizeof path, "llamacpp/tiny-f32.logits.f32");
    assert_int_equal(rb_gguf_open(path, &g, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "magic"));
    assert_non_null(strstr(err.msg, "llamacpp/tiny-f32.logits.f32"));
    char tmpl[] = "/tmp/rbee_empty_XXXXXX";
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(rb_gguf_open(tmpl, &g, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "empty"));
    remove(tmpl);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llamacpp_models),
        cmocka_unit_test(test_f32_values),
        cmocka_unit_test(test_dequant_files),
        cmocka_unit_test(test_open_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Bad input to the converters: unknown model_type (message lists the
 * supported architectures), a missing or mis-shaped tensor (message names
 * it, no output file left behind), a path that is not a folder, an
 * unsupported target type, a garbage GGUF for quantize, an unwritable output
 * path; plus the type helpers (llama.cpp file types, f16 fallback rule). */
#include "convert_testutil.h"

#include "convert/convert.h"
#include "rbee/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static rb_status convert(const char *dir, const char *out, rb_dtype t, rb_error *err) {
    rb_convert_opts o = {.type = t};
    rb_error_clear(err);
    return rb_convert_hf_to_gguf(dir, out, &o, NULL, err);
}

static void test_unknown_model_type(void **state) {
    (void)state;
    char tmp[1024], path[2048], out[2048];
    ct_tmpdir(tmp, sizeof tmp);
    snprintf(path, sizeof path, "%s/config.json", tmp);
    ct_write_text(path, "{\"model_type\": \"bert\", \"hidden_size\": 64, \"num_hidden_layers\": 2}");
    snprintf(out, sizeof out, "%s/out.gguf", tmp);
    rb_error err;
    assert_int_equal(convert(tmp, out, RB_F16, &err), RB_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "'bert'"));
    assert_non_null(strstr(err.msg, rb_arch_supported_list()));
    assert_false(exists(out));
    /* config.json that is not JSON */
    ct_write_text(path, "{\"model_type\": ");
    assert_int_equal(convert(tmp, out, RB_F16, &err), RB_E_FORMAT);
    assert_false(exists(out));
    ct_rmtree(tmp);
}

static void test_missing_and_misshaped_tensor(void **state) {
    (void)state;
    char src[1024], tmp[1024], out[2048], part[2100];
    ct_model_dir(src, sizeof src, "llama_gqa");
    ct_tmpdir(tmp, sizeof tmp);
    snprintf(out, sizeof out, "%s/out.gguf", tmp);
    snprintf(part, sizeof part, "%s.part", out);
    rb_error err;
    ct_copy_hf(src, tmp, "model.layers.2.mlp.down_proj.weight", NULL);
    assert_int_equal(convert(tmp, out, RB_Q8_0, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "missing tensor 'model.layers.2.mlp.down_proj.weight'"));
    assert_false(exists(out));
    assert_false(exists(part));
    ct_copy_hf(src, tmp, "lm_head.weight", NULL); /* untied model without lm_head */
    assert_int_equal(convert(tmp, out, RB_F32, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "'lm_head.weight'"));
    ct_copy_hf(src, tmp, NULL, "model.layers.0.self_attn.k_proj.weight");
    assert_int_equal(convert(tmp, out, RB_F32, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "tensor 'model.layers.0.self_attn.k_proj.weight' has shape"));
    assert_false(exists(out));
    /* the untouched copy converts */
    ct_copy_hf(src, tmp, NULL, NULL);
    assert_int_equal(convert(tmp, out, RB_F32, &err), RB_OK);
    assert_true(exists(out));
    assert_false(exists(part));
    ct_rmtree(tmp);
}

/* Both the converter and the loader refuse a folder with a broken expert
 * tensor, naming it. */
static void expect_both_fail(const char *dir, const char *out, const char *what) {
    rb_error err;
    assert_int_equal(convert(dir, out, RB_F32, &err), RB_E_FORMAT);
    if (!strstr(err.msg, what)) fail_msg("convert: '%s' does not name %s", err.msg, what);
    assert_false(exists(out));
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_model *m = NULL;
    rb_error_clear(&err);
    assert_int_equal(rb_model_load(dir, be, NULL, &m, &err), RB_E_FORMAT);
    assert_null(m);
    if (!strstr(err.msg, what)) fail_msg("load: '%s' does not name %s", err.msg, what);
    rb_backend_destroy(be);
}

static void test_expert_errors(void **state) {
    (void)state;
    char src[1024], tmp[1024], out[2048];
    ct_tmpdir(tmp, sizeof tmp);
    snprintf(out, sizeof out, "%s/out.gguf", tmp);
    ct_model_dir(src, sizeof src, "mixtral"); /* one expert's matrix missing */
    ct_copy_hf(src, tmp, "model.layers.1.block_sparse_moe.experts.2.w3.weight", NULL);
    expect_both_fail(tmp, out, "'model.layers.1.block_sparse_moe.experts.2.w3.weight'");
    ct_copy_hf(src, tmp, NULL, "model.layers.0.block_sparse_moe.experts.3.w2.weight");
    expect_both_fail(tmp, out, "'model.layers.0.block_sparse_moe.experts.3.w2.weight' has shape");
    ct_model_dir(src, sizeof src, "gpt_oss"); /* stacked experts missing or mis-shaped */
    ct_copy_hf(src, tmp, "model.layers.0.mlp.experts.down_proj", NULL);
    expect_both_fail(tmp, out, "'model.layers.0.mlp.experts.down_proj'");
    ct_copy_hf(src, tmp, NULL, "model.layers.1.mlp.experts.gate_up_proj");
    expect_both_fail(tmp, out, "'model.layers.1.mlp.experts.gate_up_proj' has shape");
    ct_copy_hf(src, tmp, "model.layers.1.self_attn.sinks", NULL);
    expect_both_fail(tmp, out, "'model.layers.1.self_attn.sinks'");
    /* qwen3_moe without a router: the layer reads as dense, whose MLP is missing */
    ct_model_dir(src, sizeof src, "qwen3_moe");
    ct_copy_hf(src, tmp, "model.layers.0.mlp.gate.weight", NULL);
    expect_both_fail(tmp, out, "'model.layers.0.mlp.gate_proj.weight'");
    ct_rmtree(tmp);
}

static void test_bad_paths_and_types(void **state) {
    (void)state;
    char src[1024], tmp[1024], out[2048];
    ct_model_dir(src, sizeof src, "llama_mha");
    ct_tmpdir(tmp, sizeof tmp);
    snprintf(out, sizeof out, "%s/out.gguf", tmp);
    rb_error err;
    assert_int_equal(convert("/nonexistent/rbee-model", out, RB_F16, &err), RB_E_NOT_FOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/rbee-model"));
    assert_int_equal(convert(tmp, out, RB_F16, &err), RB_E_NOT_FOUND); /* folder without config.json */
    assert_non_null(strstr(err.msg, "config.json"));
    assert_int_equal(convert(src, out, RB_Q8_1, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "q8_1"));
    assert_int_equal(convert(src, out, RB_I32, &err), RB_E_INVALID);
    assert_int_equal(convert(src, "/nonexistent-dir/out.gguf", RB_F16, &err), RB_E_IO);

    /* quantize: garbage input, missing input */
    char garbage[2048];
    snprintf(garbage, sizeof garbage, "%s/garbage.gguf", tmp);
    ct_write_text(garbage, "GGUF but not really a gguf file at all, just text");
    rb_convert_opts o = {.type = RB_Q8_0};
    rb_error_clear(&err);
    assert_int_equal(rb_quantize_gguf(garbage, out, &o, NULL, &err), RB_E_FORMAT);
    assert_true(err.msg[0] != '\0');
    assert_false(exists(out));
    assert_int_not_equal(rb_quantize_gguf("/nonexistent.gguf", out, &o, NULL, &err), RB_OK);
    o.type = RB_Q8_K;
    char fx[1024];
    tu_fixture(fx, sizeof fx, "llamacpp/tiny-f32.gguf");
    assert_int_equal(rb_quantize_gguf(fx, out, &o, NULL, &err), RB_E_INVALID);
    assert_false(exists(out));
    assert_int_equal(rb_convert_hf_to_gguf(NULL, out, &o, NULL, &err), RB_E_INVALID);
    ct_rmtree(tmp);
}

static void test_type_helpers(void **state) {
    (void)state;
    /* llama.cpp enum llama_ftype ids */
    assert_int_equal(rb_convert_file_type(RB_F32), 0);
    assert_int_equal(rb_convert_file_type(RB_F16), 1);
    assert_int_equal(rb_convert_file_type(RB_Q4_0), 2);
    assert_int_equal(rb_convert_file_type(RB_Q8_0), 7);
    assert_int_equal(rb_convert_file_type(RB_Q4_K), 15);
    assert_int_equal(rb_convert_file_type(RB_Q6_K), 18);
    assert_int_equal(rb_convert_file_type(RB_BF16), 32);
    assert_true(rb_convert_type_ok(RB_Q4_K));
    assert_false(rb_convert_type_ok(RB_Q8_K));
    assert_false(rb_convert_type_ok(RB_F64));
    assert_int_equal(rb_convert_weight_dtype(RB_Q4_K, 256, false), RB_Q4_K);
    assert_int_equal(rb_convert_weight_dtype(RB_Q4_K, 64, false), RB_F16);
    assert_int_equal(rb_convert_weight_dtype(RB_Q8_0, 96, false), RB_Q8_0);
    assert_int_equal(rb_convert_weight_dtype(RB_Q8_0, 48, false), RB_F16);
    assert_int_equal(rb_convert_weight_dtype(RB_BF16, 7, false), RB_BF16);
    assert_int_equal(rb_convert_weight_dtype(RB_F32, 3, false), RB_F32);
    /* mxfp4: llama.cpp's MXFP4_MOE (experts mxfp4, other matrices q8_0) */
    assert_true(rb_convert_type_ok(RB_MXFP4));
    assert_int_equal(rb_convert_file_type(RB_MXFP4), 38);
    assert_int_equal(rb_convert_weight_dtype(RB_MXFP4, 64, true), RB_MXFP4);
    assert_int_equal(rb_convert_weight_dtype(RB_MXFP4, 64, false), RB_Q8_0);
    assert_int_equal(rb_convert_weight_dtype(RB_MXFP4, 48, true), RB_F16);
    assert_int_equal(rb_convert_intended_dtype(RB_MXFP4, false), RB_Q8_0);
    assert_int_equal(rb_convert_intended_dtype(RB_Q4_K, true), RB_Q4_K);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_model_type),
        cmocka_unit_test(test_missing_and_misshaped_tensor),
        cmocka_unit_test(test_expert_errors),
        cmocka_unit_test(test_bad_paths_and_types),
        cmocka_unit_test(test_type_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

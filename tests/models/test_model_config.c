/* Model hyper-parameters that llama.cpp's GGUF files leave implicit and the
 * loader must infer as llama.cpp does: the attention scale of the gemma2 /
 * gemma3 27B models (query_pre_attn_scalar = n_embd / n_head: 144, 168)
 * against head_dim for the other sizes, and an explicit attention.scale
 * winning over both. Metadata-only files (the config reader needs the token
 * embeddings for the vocabulary size). */
#include "testutil.h"

#include "models/model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static float scale_of(const char *arch, uint32_t layers, uint32_t embd, uint32_t heads, uint32_t head_dim,
                      float explicit_scale) {
    char path[] = "/tmp/rb_cfg_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    rb_gguf_writer *w = NULL;
    TU_OK(rb_gguf_writer_create(&w, NULL));
    char key[128];
    TU_OK(rb_gguf_writer_set_str(w, "general.architecture", arch));
#define U32(k, v)                                                                                              \
    do {                                                                                                       \
        snprintf(key, sizeof key, "%s." k, arch);                                                              \
        TU_OK(rb_gguf_writer_set_u32(w, key, v));                                                              \
    } while (0)
    U32("embedding_length", embd);
    U32("block_count", layers);
    U32("feed_forward_length", 4 * embd);
    U32("attention.head_count", heads);
    U32("attention.head_count_kv", heads / 2);
    U32("attention.key_length", head_dim);
#undef U32
    if (explicit_scale > 0) {
        snprintf(key, sizeof key, "%s.attention.scale", arch);
        TU_OK(rb_gguf_writer_set_f32(w, key, explicit_scale));
    }
    const int64_t ne[2] = {embd, 2};
    float *z = calloc(2 * (size_t)embd, sizeof *z);
    assert_non_null(z);
    TU_OK(rb_gguf_writer_add_tensor(w, "token_embd.weight", RB_F32, 2, ne, z, sizeof(float) * 2 * (size_t)embd));
    TU_OK(rb_gguf_writer_write(w, path, 0, NULL));
    rb_gguf_writer_free(w);
    free(z);
    rb_gguf *g = NULL;
    TU_OK(rb_gguf_open(path, &g, NULL));
    rb_model_config c;
    rb_error err;
    rb_error_clear(&err);
    if (rb_model_config_from_gguf(g, &c, &err) != RB_OK) fail_msg("%s", err.msg);
    rb_gguf_close(g);
    unlink(path);
    return c.attn_scale;
}

static void test_gemma_attention_scale(void **state) {
    (void)state;
    /* 27B: n_embd / n_head */
    assert_true(fabsf(scale_of("gemma2", 46, 4608, 32, 128, 0) - 1.0f / sqrtf(144.0f)) < 1e-7f);
    assert_true(fabsf(scale_of("gemma3", 62, 5376, 32, 128, 0) - 1.0f / sqrtf(168.0f)) < 1e-7f);
    /* the other sizes: head_dim (gemma-2-9b 42 layers, gemma-3-12b 48, gemma-3-1b 26) */
    assert_true(fabsf(scale_of("gemma2", 42, 3584, 16, 256, 0) - 1.0f / 16.0f) < 1e-7f);
    assert_true(fabsf(scale_of("gemma3", 48, 3840, 16, 256, 0) - 1.0f / 16.0f) < 1e-7f);
    assert_true(fabsf(scale_of("gemma3", 26, 1152, 4, 256, 0) - 1.0f / 16.0f) < 1e-7f);
    /* 62 layers of another architecture: head_dim */
    assert_true(fabsf(scale_of("llama", 62, 5376, 32, 128, 0) - 1.0f / sqrtf(128.0f)) < 1e-7f);
    /* an explicit key wins */
    assert_true(scale_of("gemma3", 62, 5376, 32, 128, 0.125f) == 0.125f);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gemma_attention_scale)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

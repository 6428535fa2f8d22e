/* A small random llama GGUF with a k-quant mix as llama-quantize writes
 * Q4_K_M (tu_kmix.h): q4_K everywhere, q6_K for the output matrix and for
 * attn_v and ffn_down in the layers its use-more-bits rule picks. Loaders
 * that join q/k/v into one matrix can do so in the other layers only. */
#include "tu_kmix.h"

#include "testutil.h"

#include "rbee/gguf.h"
#include "rbee/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool tu_kmix_more_bits(int il, int n) { return il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2; }

static void add_random(rb_gguf_writer *w, const char *name, rb_dtype t, int64_t K, int64_t N, float amp,
                       uint32_t *seed) {
    float *src = malloc(sizeof(float) * (size_t)(K * N));
    const size_t rs = rb_dtype_row_size(t, K);
    char *q = malloc(rs * (size_t)N);
    assert_non_null(src);
    assert_non_null(q);
    for (int64_t i = 0; i < K * N; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        src[i] = amp * ((float)(*seed >> 8) / 16777216.0f * 2.0f - 1.0f);
    }
    if (t == RB_F32) memcpy(q, src, rs * (size_t)N);
    else TU_OK(rb_quantize_rows(t, src, q, N, K));
    const int64_t ne[2] = {K, N};
    TU_OK(rb_gguf_writer_add_tensor(w, name, t, N > 1 ? 2 : 1, ne, q, rs * (size_t)N));
    free(src);
    free(q);
}

void tu_write_kquant_mix(char *path, size_t cap) {
    snprintf(path, cap, "/tmp/rbee-kmix-XXXXXX.gguf");
    const int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    close(fd);
    const int64_t E = 256, NL = TU_KMIX_LAYERS, H = 4, HKV = 2, D = E / H, F = 256, V = 320;
    rb_gguf_writer *w = NULL;
    TU_OK(rb_gguf_writer_create(&w, NULL));
    TU_OK(rb_gguf_writer_set_str(w, "general.architecture", "llama"));
    TU_OK(rb_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)E));
    TU_OK(rb_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)NL));
    TU_OK(rb_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)F));
    TU_OK(rb_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)H));
    TU_OK(rb_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)HKV));
    TU_OK(rb_gguf_writer_set_u32(w, "llama.context_length", 64));
    TU_OK(rb_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)D));
    TU_OK(rb_gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f));
    TU_OK(rb_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
    uint32_t seed = 12345;
    add_random(w, "token_embd.weight", RB_Q4_K, E, V, 1.0f, &seed);
    add_random(w, "output.weight", RB_Q6_K, E, V, 0.1f, &seed);
    add_random(w, "output_norm.weight", RB_F32, E, 1, 1.0f, &seed);
    for (int il = 0; il < NL; il++) {
        const rb_dtype more = tu_kmix_more_bits(il, (int)NL) ? RB_Q6_K : RB_Q4_K;
        char nm[64];
#define NM(sfx) (snprintf(nm, sizeof nm, "blk.%d.%s", il, (sfx)), nm)
        add_random(w, NM("attn_norm.weight"), RB_F32, E, 1, 1.0f, &seed);
        add_random(w, NM("attn_q.weight"), RB_Q4_K, E, H * D, 0.1f, &seed);
        add_random(w, NM("attn_k.weight"), RB_Q4_K, E, HKV * D, 0.1f, &seed);
        add_random(w, NM("attn_v.weight"), more, E, HKV * D, 0.1f, &seed);
        add_random(w, NM("attn_output.weight"), RB_Q4_K, H * D, E, 0.1f, &seed);
        add_random(w, NM("ffn_norm.weight"), RB_F32, E, 1, 1.0f, &seed);
        add_random(w, NM("ffn_gate.weight"), RB_Q4_K, E, F, 0.1f, &seed);
        add_random(w, NM("ffn_up.weight"), RB_Q4_K, E, F, 0.1f, &seed);
        add_random(w, NM("ffn_down.weight"), more, F, E, 0.1f, &seed);
#undef NM
    }
    TU_OK(rb_gguf_writer_write(w, path, 0, NULL));
    rb_gguf_writer_free(w);
}


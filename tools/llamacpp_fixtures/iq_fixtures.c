/* Writes the llama.cpp reference data for tests/data/llamacpp/tiny-iq*.
 * Not built by the project: compile it by hand against an unmodified
 * llama.cpp build (see tests/data/llamacpp/README.md). For one GGUF file it
 * writes <prefix>.<tensor>.f32 = ggml's to_float of every non-F32 tensor
 * (raw little-endian floats; the README's sha256 list is made from these)
 * and <prefix>.logits.f32 = llama.cpp's CPU logits for the 32 tokens the
 * shared llamacpp fixtures use (32 rows x n_vocab, one batch, 2 threads). */
#include "ggml.h"
#include "gguf.h"
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>

static const llama_token k_tokens[32] = {1,   72,  101, 108, 108, 111, 35, 119, 111, 114, 108,
                                         100, 3,   200, 150, 66,  67,  68, 255, 258, 100, 40,
                                         41,  42,  43,  44,  45,  46,  47, 48,  49,  50};

static int dump_dequant(const char *model, const char *prefix) {
    struct gguf_init_params gp = {.no_alloc = true, .ctx = NULL};
    struct gguf_context *g = gguf_init_from_file(model, gp);
    if (!g) return 1;
    FILE *f = fopen(model, "rb");
    if (!f) return 1;
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc((size_t)size);
    if (!bytes || fread(bytes, 1, (size_t)size, f) != (size_t)size) return 1;
    fclose(f);
    for (int64_t i = 0; i < gguf_get_n_tensors(g); i++) {
        const enum ggml_type t = gguf_get_tensor_type(g, i);
        if (t == GGML_TYPE_F32) continue;
        const size_t nbytes = gguf_get_tensor_size(g, i);
        const int64_t n = (int64_t)(nbytes / ggml_type_size(t)) * ggml_blck_size(t);
        float *out = malloc((size_t)n * sizeof(float));
        if (!out) return 1;
        ggml_get_type_traits(t)->to_float(bytes + gguf_get_data_offset(g) + gguf_get_tensor_offset(g, i), out, n);
        char path[1024];
        snprintf(path, sizeof path, "%s.%s.f32", prefix, gguf_get_tensor_name(g, i));
        FILE *o = fopen(path, "wb");
        if (!o || fwrite(out, sizeof(float), (size_t)n, o) != (size_t)n || fclose(o) != 0) return 1;
        printf("%s %s %lld\n", gguf_get_tensor_name(g, i), ggml_type_name(t), (long long)n);
        free(out);
    }
    free(bytes);
    gguf_free(g);
    return 0;
}

static int dump_logits(const char *model, const char *prefix) {
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *m = llama_model_load_from_file(model, mp);
    if (!m) return 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 32;
    cp.n_ubatch = 32;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    struct llama_context *c = llama_init_from_model(m, cp);
    if (!c) return 1;
    struct llama_batch b = llama_batch_init(32, 0, 1);
    for (int i = 0; i < 32; i++) {
        b.token[i] = k_tokens[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = 32;
    if (llama_decode(c, b) != 0) return 1;
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(m));
    char path[1024];
    snprintf(path, sizeof path, "%s.logits.f32", prefix);
    FILE *o = fopen(path, "wb");
    if (!o) return 1;
    for (int i = 0; i < 32; i++)
        if (fwrite(llama_get_logits_ith(c, i), sizeof(float), (size_t)nv, o) != (size_t)nv) return 1;
    if (fclose(o) != 0) return 1;
    llama_batch_free(b);
    llama_free(c);
    llama_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf OUT_PREFIX\n", argv[0]);
        return 2;
    }
    if (dump_dequant(argv[1], argv[2]) != 0) {
        fprintf(stderr, "dequantization dump failed\n");
        return 1;
    }
    if (dump_logits(argv[1], argv[2]) != 0) {
        fprintf(stderr, "logits failed\n");
        return 1;
    }
    return 0;
}

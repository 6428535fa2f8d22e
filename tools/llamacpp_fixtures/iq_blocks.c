/* Writes small IQ decoding fixtures with ggml itself (not built by the
 * project; see tests/data/llamacpp/README.md): reads one F32 tensor of a
 * GGUF file, quantizes it with ggml_quantize_chunk (no importance matrix)
 * to the named type, and writes OUT.blocks (the raw blocks) and OUT.f32
 * (ggml's to_float of those blocks, little-endian floats).
 * usage: iq_blocks IN.gguf TENSOR TYPE_ID OUT */
#include "ggml.h"
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s IN.gguf TENSOR TYPE_ID OUT\n", argv[0]);
        return 2;
    }
    struct ggml_context *meta = NULL;
    struct gguf_init_params gp = {.no_alloc = false, .ctx = &meta};
    struct gguf_context *g = gguf_init_from_file(argv[1], gp);
    if (!g) return 1;
    struct ggml_tensor *t = ggml_get_tensor(meta, argv[2]);
    if (!t || t->type != GGML_TYPE_F32) return 1;
    const enum ggml_type type = (enum ggml_type)atoi(argv[3]);
    const int64_t ncols = t->ne[0], nrows = ggml_nrows(t), n = ncols * nrows;
    ggml_quantize_init(type);
    const size_t bytes = ggml_row_size(type, ncols) * (size_t)nrows;
    void *q = malloc(bytes);
    float *back = malloc((size_t)n * sizeof(float));
    if (!q || !back) return 1;
    if (ggml_quantize_chunk(type, t->data, q, 0, nrows, ncols, NULL) != bytes) return 1;
    ggml_get_type_traits(type)->to_float(q, back, n);
    char path[1024];
    snprintf(path, sizeof path, "%s.blocks", argv[4]);
    FILE *o = fopen(path, "wb");
    if (!o || fwrite(q, 1, bytes, o) != bytes || fclose(o) != 0) return 1;
    snprintf(path, sizeof path, "%s.f32", argv[4]);
    o = fopen(path, "wb");
    if (!o || fwrite(back, sizeof(float), (size_t)n, o) != (size_t)n || fclose(o) != 0) return 1;
    printf("%s %s %lld x %lld, %zu bytes\n", argv[2], ggml_type_name(type), (long long)ncols, (long long)nrows, bytes);
    return 0;
}

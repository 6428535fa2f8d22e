/* Writes small IQ decoding fixtures with ggml itself (not built by the
 * project; see tests/data/llamacpp/README.md): reads one F32 tensor of a
 * GGUF file, quantizes it with ggml_quantize_chunk to the named type (no
 * importance matrix, or one of all ones for the types ggml refuses to
 * quantize without one: iq2_xxs, iq2_xs), and writes OUT.blocks (the raw
 * blocks), OUT.gguf (those blocks as the one tensor TENSOR of a GGUF file
 * written by ggml's gguf library) and OUT.f32 (ggml's to_float of the
 * blocks, little-endian floats).
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
    float *ones = ggml_quantize_requires_imatrix(type) ? malloc((size_t)ncols * sizeof(float)) : NULL;
    if (!q || !back || (ggml_quantize_requires_imatrix(type) && !ones)) return 1;
    for (int64_t i = 0; ones && i < ncols; i++) ones[i] = 1.0f;
    if (ggml_quantize_chunk(type, t->data, q, 0, nrows, ncols, ones) != bytes) return 1;
    ggml_get_type_traits(type)->to_float(q, back, n);
    char path[1024];
    snprintf(path, sizeof path, "%s.blocks", argv[4]);
    FILE *o = fopen(path, "wb");
    if (!o || fwrite(q, 1, bytes, o) != bytes || fclose(o) != 0) return 1;
    struct ggml_init_params ip = {.mem_size = ggml_tensor_overhead() + 1024, .mem_buffer = NULL, .no_alloc = true};
    struct ggml_context *tctx = ggml_init(ip);
    if (!tctx) return 1;
    struct ggml_tensor *qt = ggml_new_tensor_2d(tctx, type, ncols, nrows);
    ggml_set_name(qt, argv[2]);
    qt->data = q;
    struct gguf_context *out = gguf_init_empty();
    gguf_add_tensor(out, qt);
    snprintf(path, sizeof path, "%s.gguf", argv[4]);
    if (!gguf_write_to_file(out, path, false)) return 1;
    gguf_free(out);
    ggml_free(tctx);
    snprintf(path, sizeof path, "%s.f32", argv[4]);
    o = fopen(path, "wb");
    if (!o || fwrite(back, sizeof(float), (size_t)n, o) != (size_t)n || fclose(o) != 0) return 1;
    printf("%s %s %lld x %lld, %zu bytes\n", argv[2], ggml_type_name(type), (long long)ncols, (long long)nrows, bytes);
    return 0;
}

/* Writes a whole-model IQ fixture with ggml itself (not built by the
 * project; see tests/data/llamacpp/README.md): copies a GGUF file's metadata
 * and tensors, quantizing every 2-D F32 tensor whose rows are whole 256-value
 * blocks to the named type with ggml_quantize_chunk and an importance matrix
 * of all ones (ggml's iq2_xxs, iq2_xs and iq1_s quantizers refuse to run
 * without one, and so does llama-quantize without an imatrix file; the
 * other types take it too, for one rule); other tensors are copied as they
 * are. usage: iq_model IN.gguf OUT.gguf TYPE_ID */
#include "ggml.h"
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s IN.gguf OUT.gguf TYPE_ID\n", argv[0]);
        return 2;
    }
    struct ggml_context *meta = NULL;
    struct gguf_init_params gp = {.no_alloc = false, .ctx = &meta};
    struct gguf_context *g = gguf_init_from_file(argv[1], gp);
    if (!g) return 1;
    const enum ggml_type type = (enum ggml_type)atoi(argv[3]);
    ggml_quantize_init(type);
    struct gguf_context *out = gguf_init_empty();
    gguf_set_kv(out, g);
    const int64_t nt = gguf_get_n_tensors(g);
    struct ggml_init_params ip = {
        .mem_size = (size_t)nt * ggml_tensor_overhead() + 4096, .mem_buffer = NULL, .no_alloc = true};
    struct ggml_context *tctx = ggml_init(ip);
    if (!tctx) return 1;
    int nq = 0;
    for (int64_t i = 0; i < nt; i++) {
        struct ggml_tensor *t = ggml_get_tensor(meta, gguf_get_tensor_name(g, i));
        const int q = t->type == GGML_TYPE_F32 && ggml_n_dims(t) == 2 && t->ne[0] % 256 == 0;
        struct ggml_tensor *o = ggml_new_tensor(tctx, q ? type : t->type, ggml_n_dims(t), t->ne);
        ggml_set_name(o, t->name);
        o->data = t->data;
        if (q) {
            const int64_t nc = t->ne[0], nr = ggml_nrows(t);
            float *ones = malloc((size_t)nc * sizeof(float));
            void *d = malloc(ggml_row_size(type, nc) * (size_t)nr);
            if (!ones || !d) return 1;
            for (int64_t k = 0; k < nc; k++) ones[k] = 1.0f;
            if (ggml_quantize_chunk(type, t->data, d, 0, nr, nc, ones) != ggml_row_size(type, nc) * (size_t)nr) return 1;
            free(ones);
            o->data = d;
            nq++;
        }
        gguf_add_tensor(out, o);
    }
    if (!gguf_write_to_file(out, argv[2], false)) return 1;
    printf("%s: %d tensors, %d as %s\n", argv[2], (int)nt, nq, ggml_type_name(type));
    return 0;
}

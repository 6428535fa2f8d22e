/* libFuzzer target: the GGUF reader on arbitrary bytes, then every accessor
 * over what it accepted (kvs, typed getters, array elements, tensor lookups,
 * tensor data bytes) and a metadata copy through the writer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rbee/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk_kv(const rb_gguf *g, const rb_gguf_kv *kv) {
    char key[256];
    size_t n = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
    memcpy(key, kv->key.ptr, n);
    key[n] = '\0';
    uint64_t u64;
    int64_t i64;
    uint32_t u32;
    double f64;
    float f32;
    bool b;
    char *s = NULL;
    (void)rb_gguf_get_u64(g, key, &u64);
    (void)rb_gguf_get_i64(g, key, &i64);
    (void)rb_gguf_get_u32(g, key, &u32);
    (void)rb_gguf_get_f64(g, key, &f64);
    (void)rb_gguf_get_f32(g, key, &f32);
    (void)rb_gguf_get_bool(g, key, &b);
    if (rb_gguf_get_str(g, key, &s) == RB_OK) free(s);
    if (kv->type == RB_GGUF_ARRAY) {
        uint64_t lim = kv->arr_len < 4096 ? kv->arr_len : 4096;
        volatile uint64_t acc = 0;
        for (uint64_t i = 0; i <= lim; i++) { /* one past the end too */
            rb_gguf_str str = rb_gguf_arr_str(kv, i);
            if (str.len) acc += (uint8_t)str.ptr[0] + (uint8_t)str.ptr[str.len - 1];
            acc += (uint64_t)rb_gguf_arr_int(kv, i);
            double d = rb_gguf_arr_float(kv, i);
            acc += d == d; /* NaN for non-numeric elements */
        }
        (void)acc;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rb_gguf *g = NULL;
    rb_error err;
    if (rb_gguf_open_memory(data, size, &g, &err) != RB_OK) return 0;
    for (int64_t i = 0; i < rb_gguf_n_kv(g); i++) walk_kv(g, rb_gguf_kv_at(g, i));
    volatile uint8_t sink = 0;
    for (int64_t i = 0; i < rb_gguf_n_tensors(g); i++) {
        const rb_gguf_tensor_info *t = rb_gguf_tensor_at(g, i);
        char name[256];
        size_t n = t->name.len < sizeof name - 1 ? (size_t)t->name.len : sizeof name - 1;
        memcpy(name, t->name.ptr, n);
        name[n] = '\0';
        const rb_gguf_tensor_info *f = rb_gguf_find_tensor(g, name);
        if (n == t->name.len && f != t) abort(); /* names are unique */
        if (t->nbytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    (void)sink;
    (void)rb_gguf_find_kv(g, "general.architecture");
    rb_gguf_writer *w = NULL;
    if (rb_gguf_writer_create(&w, NULL) == RB_OK) {
        (void)rb_gguf_writer_copy_kv(w, g, "tokenizer.");
        rb_gguf_writer_free(w);
    }
    rb_gguf_close(g);
    return 0;
}

/* libFuzzer target: the safetensors single-image parser on arbitrary bytes,
 * then every tensor (lookup by name, first and last data byte) and metadata
 * lookups over what it accepted. */
#include <stdint.h>
#include <stdlib.h>

#include "rbee/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rb_st_set *s = NULL;
    rb_error err;
    if (rb_st_open_memory(data, size, &s, &err) != RB_OK) return 0;
    volatile uint8_t sink = 0;
    for (int64_t i = 0; i < rb_st_n_tensors(s); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(s, i);
        if (rb_st_find(s, t->name) != t) abort(); /* names are unique */
        if (t->n_dims < 0 || t->n_dims > 4) abort();
        if (t->nbytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    (void)sink;
    (void)rb_st_metadata(s, "format");
    (void)rb_st_tensor_at(s, rb_st_n_tensors(s));
    rb_st_close(s);
    return 0;
}

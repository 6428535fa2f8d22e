/* Implementation of the hand-made GGUF byte builder (gguf_builder.h). */
#include "gguf_builder.h"

#include <stdlib.h>
#include <string.h>

#include "testutil.h"

void gb_bytes(gb *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        assert_non_null(q);
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}

void gb_u8(gb *b, uint8_t v) { gb_bytes(b, &v, 1); }
void gb_u32(gb *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    gb_bytes(b, x, 4);
}
void gb_u64(gb *b, uint64_t v) {
    gb_u32(b, (uint32_t)v);
    gb_u32(b, (uint32_t)(v >> 32));
}
void gb_str(gb *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}
void gb_pad(gb *b, size_t align) {
    while (b->len % align) gb_u8(b, 0);
}
void gb_header(gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
void gb_kv_u32(gb *b, const char *key, uint32_t v) {
    gb_str(b, key);
    gb_u32(b, 4);
    gb_u32(b, v);
}
void gb_kv_str(gb *b, const char *key, const char *v) {
    gb_str(b, key);
    gb_u32(b, 8);
    gb_str(b, v);
}
void gb_tensor(gb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}
void gb_free(gb *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* Test helper: a byte builder for hand-made GGUF images (valid or broken on
 * purpose), written independently of the library's writer so the reader is
 * checked against an encoding the test spells out byte by byte. */
#ifndef RBEE_TEST_GGUF_BUILDER_H
#define RBEE_TEST_GGUF_BUILDER_H

#include <stddef.h>
#include <stdint.h>

typedef struct gb {
    uint8_t *p;
    size_t len, cap;
} gb;

void gb_bytes(gb *b, const void *src, size_t n);
void gb_u8(gb *b, uint8_t v);
void gb_u32(gb *b, uint32_t v);
void gb_u64(gb *b, uint64_t v);
void gb_str(gb *b, const char *s);           /* u64 length + bytes */
void gb_pad(gb *b, size_t align);            /* zero bytes up to a multiple of align */
void gb_header(gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
void gb_kv_u32(gb *b, const char *key, uint32_t v);
void gb_kv_str(gb *b, const char *key, const char *v);
/* Tensor info with n_dims extents ne[0..n_dims). */
void gb_tensor(gb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset);
void gb_free(gb *b);

#endif

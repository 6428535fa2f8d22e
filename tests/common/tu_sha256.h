/* SHA-256 (FIPS 180-4) for the tests: reference data records checksums of
 * tensors and files (hashlib.sha256 of the same bytes). */
#ifndef RBEE_TU_SHA256_H
#define RBEE_TU_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct tu_sha256 {
    uint32_t h[8];
    uint8_t buf[64];
    size_t fill;
    uint64_t bytes;
} tu_sha256;

void tu_sha256_init(tu_sha256 *s);
void tu_sha256_update(tu_sha256 *s, const void *data, size_t n);
/* Finishes s and writes the digest as 64 lowercase hex digits + NUL. */
void tu_sha256_hex(tu_sha256 *s, char out[65]);
/* The digest of n floats as little-endian float32 bytes. */
void tu_sha256_floats_le(const float *x, size_t n, char out[65]);

#endif

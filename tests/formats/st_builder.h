/* Test helper: builds safetensors file images byte by byte (8-byte
 * little-endian header length, JSON header padded with spaces, data) and
 * writes files, independently of the library's parser. */
#ifndef RBEE_TEST_ST_BUILDER_H
#define RBEE_TEST_ST_BUILDER_H

#include <stddef.h>
#include <stdint.h>

/* malloc'ed image of json (padded to a multiple of 8) followed by data. */
uint8_t *st_image(const char *json, const void *data, size_t data_len, size_t *out_len);
/* Writes len bytes to path; fails the test on error. */
void st_write(const char *path, const void *p, size_t len);
/* st_image + st_write. */
void st_write_image(const char *path, const char *json, const void *data, size_t data_len);

#endif

/* Implementation of the safetensors test image builder (st_builder.h). */
#include "st_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

uint8_t *st_image(const char *json, const void *data, size_t data_len, size_t *out_len) {
    size_t jl = strlen(json), padded = (jl + 7) / 8 * 8;
    size_t total = 8 + padded + data_len;
    uint8_t *p = malloc(total);
    assert_non_null(p);
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(p + 8, json, jl);
    memset(p + 8 + jl, ' ', padded - jl);
    if (data_len) memcpy(p + 8 + padded, data, data_len);
    *out_len = total;
    return p;
}

void st_write(const char *path, const void *p, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot create %s", path);
    if (len && fwrite(p, 1, len, f) != len) fail_msg("short write %s", path);
    if (fclose(f) != 0) fail_msg("close %s", path);
}

void st_write_image(const char *path, const char *json, const void *data, size_t data_len) {
    size_t n;
    uint8_t *img = st_image(json, data, data_len, &n);
    st_write(path, img, n);
    free(img);
}

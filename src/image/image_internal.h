/* Shared helpers of the image layer: argument and limit checks done before
 * any pixel allocation, the channel conversions applied after decoding, a
 * growable output buffer for the encoders, and Latin-1 <-> UTF-8 for PNG
 * text. */
#ifndef RBEE_IMAGE_INTERNAL_H
#define RBEE_IMAGE_INTERNAL_H

#include "rbee/image.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Resolved decode options: channels 0..4 checked, limits filled in. */
typedef struct img_opts {
    int channels;
    uint64_t max_pixels;
    uint32_t max_side;
} img_opts;

rb_status img_resolve_opts(const rb_image_decode_opts *in, img_opts *out, rb_error *err);
/* RB_E_RANGE if w x h is zero or over the limits (checked before allocating). */
rb_status img_check_size(const img_opts *o, uint64_t w, uint64_t h, rb_error *err);

/* The decoders, to the file's natural layout (1 gray, 3 RGB, 4 RGBA). */
rb_status img_png_decode(const uint8_t *data, size_t len, const img_opts *o, rb_image *out, rb_error *err);
rb_status img_jpeg_decode(const uint8_t *data, size_t len, const img_opts *o, rb_image *out, rb_error *err);

/* Converts img in place (reallocating) from its channel count to want (1, 3, 4). */
rb_status img_convert_channels(rb_image *img, int want, rb_error *err);

/* Growable byte buffer (encoder output). */
typedef struct img_buf {
    uint8_t *p;
    size_t len, cap;
    bool failed;
} img_buf;
void img_buf_append(img_buf *b, const void *data, size_t n);

/* Latin-1 <-> UTF-8. to_latin1 fails (returns false) on invalid UTF-8 or a
 * code point above U+00FF. Outputs are malloc'ed and NUL-terminated; NULL on
 * allocation failure (with *oom set). */
bool img_utf8_to_latin1(const char *s, size_t len, char **out, size_t *out_len, bool *oom);
char *img_latin1_to_utf8(const uint8_t *s, size_t len, size_t *out_len);
bool img_utf8_valid(const char *s, size_t len);

#endif

/* 8-bit images and their PNG / JPEG files, for Stable Diffusion inputs
 * (img2img, inpaint masks) and outputs. Decoding (libpng, libjpeg-turbo)
 * accepts any PNG bit depth and color type (palette, gray, 16-bit, alpha,
 * Adam7 interlacing) and baseline/progressive JPEG (gray, YCbCr, RGB, CMYK,
 * YCCK), and converts to 8 bits in the channel count asked for. Sizes are
 * checked against limits before any pixel buffer is allocated; every library
 * error, truncated or corrupt file becomes an rb_status with a message.
 * PNG text chunks (tEXt, zTXt, iTXt) are read and written the way
 * AUTOMATIC1111 stores its "parameters" infotext: tEXt when the text is
 * Latin-1, iTXt (UTF-8) otherwise, as PIL's PngInfo.add_text does.
 * Nothing here keeps state between calls; all functions are thread-safe. */
#ifndef RBEE_IMAGE_H
#define RBEE_IMAGE_H

#include "rbee/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Pixels row-major, rows packed (stride = width * channels), channels
 * interleaved: 1 = gray, 3 = RGB, 4 = RGBA (straight alpha). */
typedef struct rb_image {
    int32_t width, height, channels;
    uint8_t *data;
} rb_image;

typedef enum rb_image_format {
    RB_IMAGE_FORMAT_UNKNOWN = 0,
    RB_IMAGE_FORMAT_PNG,
    RB_IMAGE_FORMAT_JPEG,
} rb_image_format;

#define RB_IMAGE_DEFAULT_MAX_PIXELS ((uint64_t)64 << 20) /* 64 Mpixel: 8192 x 8192 */
#define RB_IMAGE_DEFAULT_MAX_SIDE 65535u

typedef struct rb_image_decode_opts {
    int channels;        /* 0: the file's own (1 gray, 3 color, 4 with alpha or tRNS);
                            1: gray (color is converted as PIL's convert("L") does); 3: RGB (alpha dropped,
                            gray replicated); 4: RGBA (opaque alpha added where the file has none) */
    uint64_t max_pixels; /* width * height limit; 0 = RB_IMAGE_DEFAULT_MAX_PIXELS */
    uint32_t max_side;   /* width and height limit; 0 = RB_IMAGE_DEFAULT_MAX_SIDE */
} rb_image_decode_opts;

/* Allocates a zeroed w x h x c image (c in 1, 3, 4). */
rb_status rb_image_alloc(rb_image *img, int32_t width, int32_t height, int32_t channels, rb_error *err);
/* Frees img->data and zeroes img (NULL-safe). */
void rb_image_free(rb_image *img);

/* Detects PNG or JPEG by signature. */
rb_image_format rb_image_detect(const void *data, size_t len);

/* Decodes a PNG or JPEG held in memory. opts may be NULL (file's channels,
 * default limits). Errors: RB_E_FORMAT (not an image, truncated, corrupt),
 * RB_E_RANGE (over a limit; nothing allocated), RB_E_UNSUPPORTED,
 * RB_E_NOMEM, RB_E_INVALID (bad arguments). 16-bit samples keep their high
 * byte (as PIL does); PNG gamma chunks are not applied. CMYK/YCCK JPEGs are
 * converted to RGB as PIL does (Adobe files store inverted CMYK). */
rb_status rb_image_decode(const void *data, size_t len, const rb_image_decode_opts *opts, rb_image *out,
                          rb_error *err);

/* One PNG text chunk. key: 1-79 Latin-1 characters, given and returned as
 * UTF-8; text: UTF-8 (tEXt/zTXt Latin-1 is converted), NUL-terminated, len
 * excludes the NUL. */
typedef struct rb_png_text {
    char *key;
    char *text;
    size_t len;
} rb_png_text;

typedef struct rb_png_encode_opts {
    int compression;          /* zlib level 0..9; -1 = 6 */
    const rb_png_text *texts; /* written before the image data; may be NULL */
    size_t n_texts;
} rb_png_encode_opts;

/* Encodes img (1, 3 or 4 channels, 8-bit) as PNG into a malloc'ed buffer.
 * Each text goes in a tEXt chunk when it is Latin-1 representable, else in
 * an uncompressed iTXt; a key that is empty, longer than 79 characters, not
 * Latin-1 or holding characters PNG forbids gives RB_E_INVALID. */
rb_status rb_png_encode(const rb_image *img, const rb_png_encode_opts *opts, uint8_t **out, size_t *out_len,
                        rb_error *err);

/* Encodes img (1 or 3 channels) as baseline JPEG, quality 1..100 (4:2:0
 * chroma for color, as PIL's default), into a malloc'ed buffer. RGBA gives
 * RB_E_UNSUPPORTED (JPEG has no alpha; drop it first, as PIL requires). */
rb_status rb_jpeg_encode(const rb_image *img, int quality, uint8_t **out, size_t *out_len, rb_error *err);

/* All text chunks of a PNG in file order (before and after the image data),
 * CRCs checked, zTXt / compressed iTXt inflated (at most 16 MiB each). A
 * non-PNG, truncated or corrupt chunk stream gives RB_E_FORMAT. *texts is
 * malloc'ed (NULL when none); free with rb_png_texts_free(). */
rb_status rb_png_read_text(const void *data, size_t len, rb_png_text **texts, size_t *n_texts, rb_error *err);
void rb_png_texts_free(rb_png_text *texts, size_t n);

#ifdef __cplusplus
}
#endif
#endif

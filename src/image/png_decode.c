/* PNG decoding through libpng from a memory buffer. Every bit depth and
 * color type is normalized to 8-bit gray, RGB or RGBA (palette expanded,
 * tRNS turned into alpha, gray+alpha widened to RGBA, 16-bit samples cut to
 * their high byte, Adam7 passes merged). libpng reports errors by longjmp:
 * the state that must survive it (error text, buffers) lives in a context
 * owned by the caller of the setjmp frame, so no local of that frame is
 * read after the jump. */
#include "image/image_internal.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *data;
    size_t len, pos;
    char msg[256];
    rb_status code;      /* status to report for the current longjmp */
    uint8_t *pixels;     /* owned until handed to the image */
    png_bytep *rows;
    uint32_t width, height;
    int channels;
} png_dec;

static void on_error(png_structp png, png_const_charp msg) {
    png_dec *d = png_get_error_ptr(png);
    snprintf(d->msg, sizeof d->msg, "%s", msg ? msg : "libpng error");
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg; /* ancillary-chunk problems: libpng skips the chunk */
}

static void read_mem(png_structp png, png_bytep out, size_t n) {
    png_dec *d = png_get_io_ptr(png);
    if (n > d->len - d->pos) png_error(png, "truncated PNG data");
    memcpy(out, d->data + d->pos, n);
    d->pos += n;
}

/* Walks the chunk headers before libpng sees the file: a chunk longer than
 * what is left of the buffer (truncation, or a length field made to make
 * libpng allocate gigabytes for a text chunk) or a missing IEND is an error
 * here, so libpng only ever allocates for data that exists. */
static rb_status prescan(const uint8_t *p, size_t len, rb_error *err) {
    for (size_t pos = 8;;) {
        if (len - pos < 12) return rb_error_set(err, RB_E_FORMAT, "PNG: truncated (chunk header at byte %zu)", pos);
        uint32_t n = (uint32_t)p[pos] << 24 | (uint32_t)p[pos + 1] << 16 | (uint32_t)p[pos + 2] << 8 | p[pos + 3];
        if (n > 0x7FFFFFFFu || n > len - pos - 12)
            return rb_error_set(err, RB_E_FORMAT, "PNG: truncated or corrupt (%.4s chunk of %u bytes at byte %zu)",
                                (const char *)p + pos + 4, n, pos);
        if (memcmp(p + pos + 4, "IEND", 4) == 0) return RB_OK;
        pos += 12 + (size_t)n;
    }
}

/* The setjmp frame: every object it writes after setjmp lives in *d. */
static int decode(png_structp png, png_infop info, png_dec *d, const img_opts *o, rb_error *err) {
    if (setjmp(png_jmpbuf(png))) return 1;
    png_set_read_fn(png, d, read_mem);
    png_set_user_limits(png, 0x7fffffffu, 0x7fffffffu); /* sizes are checked below with our own status */
    png_set_chunk_malloc_max(png, (png_alloc_size_t)16 << 20);
    png_set_chunk_cache_max(png, 1000);
    /* metadata the pixels do not need is skipped unparsed (text is read by rb_png_read_text) */
    static const png_byte skip[] = "tEXt\0zTXt\0iTXt\0iCCP\0sPLT\0eXIf\0";
    png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, skip, (int)(sizeof skip - 1) / 5);
    png_read_info(png, info);
    png_uint_32 w = 0, h = 0;
    int depth = 0, ctype = 0, interlace = 0;
    png_get_IHDR(png, info, &w, &h, &depth, &ctype, &interlace, NULL, NULL);
    rb_status st = img_check_size(o, w, h, err);
    if (st) {
        d->code = st;
        return 2; /* message already in err */
    }
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if ((ctype & PNG_COLOR_MASK_COLOR) == 0 && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
    if (depth == 16) png_set_strip_16(png);
    bool alpha = (ctype & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS);
    bool color = (ctype & PNG_COLOR_MASK_COLOR) != 0;
    if (!color && alpha) png_set_gray_to_rgb(png); /* gray + alpha -> RGBA */
    (void)png_set_interlace_handling(png);
    png_read_update_info(png, info);
    d->channels = png_get_channels(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    if ((d->channels != 1 && d->channels != 3 && d->channels != 4) || rowbytes != (size_t)w * (size_t)d->channels)
        png_error(png, "unexpected pixel layout after conversion");
    d->pixels = malloc((size_t)h * rowbytes);
    d->rows = malloc((size_t)h * sizeof *d->rows);
    if (!d->pixels || !d->rows) {
        d->code = RB_E_NOMEM;
        png_error(png, "out of memory for the pixels");
    }
    for (png_uint_32 y = 0; y < h; y++) d->rows[y] = d->pixels + (size_t)y * rowbytes;
    png_read_image(png, d->rows);
    png_read_end(png, NULL);
    d->width = w;
    d->height = h;
    return 0;
}

rb_status img_png_decode(const uint8_t *data, size_t len, const img_opts *o, rb_image *out, rb_error *err) {
    rb_status pre = prescan(data, len, err);
    if (pre) return pre;
    png_dec *d = calloc(1, sizeof *d);
    if (!d) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    d->data = data;
    d->len = len;
    d->code = RB_E_FORMAT;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, d, on_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    rb_status st = RB_OK;
    if (!png || !info) {
        st = rb_error_set(err, RB_E_NOMEM, "cannot create the libpng reader");
    } else {
        int r = decode(png, info, d, o, err);
        if (r == 1) st = rb_error_set(err, d->code, "PNG: %s", d->msg);
        else if (r == 2) st = d->code;
    }
    png_destroy_read_struct(png ? &png : NULL, info ? &info : NULL, NULL);
    if (!st) {
        out->width = (int32_t)d->width;
        out->height = (int32_t)d->height;
        out->channels = d->channels;
        out->data = d->pixels;
        d->pixels = NULL;
    }
    free(d->pixels);
    free(d->rows);
    free(d);
    return st;
}

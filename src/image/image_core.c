/* Image allocation, format detection, decode option resolution and limit
 * checks, and the channel conversions (gray <-> RGB <-> RGBA) applied after
 * decoding; the dispatch of rb_image_decode to the PNG or JPEG decoder. */
#include "image/image_internal.h"

#include <stdlib.h>
#include <string.h>

rb_status rb_image_alloc(rb_image *img, int32_t width, int32_t height, int32_t channels, rb_error *err) {
    if (!img) return rb_error_set(err, RB_E_INVALID, "image is NULL");
    memset(img, 0, sizeof *img);
    if (width <= 0 || height <= 0 || (channels != 1 && channels != 3 && channels != 4))
        return rb_error_set(err, RB_E_INVALID, "bad image shape %d x %d x %d", (int)width, (int)height, (int)channels);
    uint64_t n = (uint64_t)width * (uint64_t)height * (uint64_t)channels;
    if (n > SIZE_MAX) return rb_error_set(err, RB_E_RANGE, "image of %llu bytes is too large", (unsigned long long)n);
    img->data = calloc((size_t)n, 1);
    if (!img->data) return rb_error_set(err, RB_E_NOMEM, "out of memory for a %d x %d image", (int)width, (int)height);
    img->width = width;
    img->height = height;
    img->channels = channels;
    return RB_OK;
}

void rb_image_free(rb_image *img) {
    if (!img) return;
    free(img->data);
    memset(img, 0, sizeof *img);
}

rb_image_format rb_image_detect(const void *data, size_t len) {
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    const uint8_t *p = data;
    if (!p) return RB_IMAGE_FORMAT_UNKNOWN;
    if (len >= 8 && memcmp(p, png, 8) == 0) return RB_IMAGE_FORMAT_PNG;
    if (len >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return RB_IMAGE_FORMAT_JPEG;
    return RB_IMAGE_FORMAT_UNKNOWN;
}

rb_status img_resolve_opts(const rb_image_decode_opts *in, img_opts *out, rb_error *err) {
    out->channels = in ? in->channels : 0;
    out->max_pixels = in && in->max_pixels ? in->max_pixels : RB_IMAGE_DEFAULT_MAX_PIXELS;
    out->max_side = in && in->max_side ? in->max_side : RB_IMAGE_DEFAULT_MAX_SIDE;
    if (out->channels != 0 && out->channels != 1 && out->channels != 3 && out->channels != 4)
        return rb_error_set(err, RB_E_INVALID, "channels must be 0, 1, 3 or 4 (got %d)", out->channels);
    if (out->max_side > 0x7FFFFFFF) out->max_side = 0x7FFFFFFF;
    return RB_OK;
}

rb_status img_check_size(const img_opts *o, uint64_t w, uint64_t h, rb_error *err) {
    if (w == 0 || h == 0) return rb_error_set(err, RB_E_FORMAT, "image has a zero size (%llu x %llu)",
                                              (unsigned long long)w, (unsigned long long)h);
    if (w > o->max_side || h > o->max_side)
        return rb_error_set(err, RB_E_RANGE, "image %llu x %llu exceeds the side limit %u", (unsigned long long)w,
                            (unsigned long long)h, o->max_side);
    if (w * h > o->max_pixels)
        return rb_error_set(err, RB_E_RANGE, "image %llu x %llu exceeds the limit of %llu pixels",
                            (unsigned long long)w, (unsigned long long)h, (unsigned long long)o->max_pixels);
    if (w * h > SIZE_MAX / 8) return rb_error_set(err, RB_E_RANGE, "image too large for this machine");
    return RB_OK;
}

/* PIL's ITU-R 601-2 luma with 16-bit fixed point (convert("L")). */
static uint8_t luma(const uint8_t *p) {
    return (uint8_t)(((uint32_t)p[0] * 19595u + (uint32_t)p[1] * 38470u + (uint32_t)p[2] * 7471u + 0x8000u) >> 16);
}

rb_status img_convert_channels(rb_image *img, int want, rb_error *err) {
    int have = img->channels;
    if (want == 0 || want == have) return RB_OK;
    size_t n = (size_t)img->width * (size_t)img->height;
    uint8_t *d = malloc(n * (size_t)want);
    if (!d) return rb_error_set(err, RB_E_NOMEM, "out of memory converting the image");
    const uint8_t *s = img->data;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *px = s + i * (size_t)have;
        uint8_t *q = d + i * (size_t)want;
        uint8_t r = px[0], g = have >= 3 ? px[1] : px[0], b = have >= 3 ? px[2] : px[0];
        uint8_t a = have == 4 ? px[3] : 255;
        if (want == 1) {
            q[0] = have == 1 ? r : luma(px);
        } else {
            q[0] = r;
            q[1] = g;
            q[2] = b;
            if (want == 4) q[3] = a;
        }
    }
    free(img->data);
    img->data = d;
    img->channels = want;
    return RB_OK;
}

void img_buf_append(img_buf *b, const void *data, size_t n) {
    if (b->failed) return;
    if (n > SIZE_MAX - b->len) {
        b->failed = true;
        return;
    }
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->len + n) nc = nc > SIZE_MAX / 2 ? b->len + n : nc * 2;
        uint8_t *p = realloc(b->p, nc);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = nc;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

rb_status rb_image_decode(const void *data, size_t len, const rb_image_decode_opts *opts, rb_image *out,
                          rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "out is NULL");
    memset(out, 0, sizeof *out);
    if (!data && len) return rb_error_set(err, RB_E_INVALID, "data is NULL");
    img_opts o;
    rb_status st = img_resolve_opts(opts, &o, err);
    if (st) return st;
    switch (rb_image_detect(data, len)) {
    case RB_IMAGE_FORMAT_PNG: st = img_png_decode(data, len, &o, out, err); break;
    case RB_IMAGE_FORMAT_JPEG: st = img_jpeg_decode(data, len, &o, out, err); break;
    default: return rb_error_set(err, RB_E_FORMAT, "not a PNG or JPEG file (%zu bytes)", len);
    }
    if (!st) st = img_convert_channels(out, o.channels, err);
    if (st) rb_image_free(out);
    return st;
}

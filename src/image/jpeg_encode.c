/* JPEG encoding through libjpeg-turbo into memory: 8-bit gray or RGB,
 * quality 1..100 with libjpeg's standard tables (4:2:0 chroma for color).
 * The output buffer libjpeg grows lives in a context outside the setjmp
 * frame so the error path can free it. */
#include "image/image_internal.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

typedef struct {
    struct jpeg_error_mgr pub; /* first: libjpeg casts cinfo->err to this struct */
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    unsigned char *buf; /* jpeg_mem_dest's malloc'ed output */
    unsigned long size;
} jpeg_enc;

static void on_error_exit(j_common_ptr cinfo) {
    jpeg_enc *e = (jpeg_enc *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jb, 1);
}

static void on_output(j_common_ptr cinfo) { (void)cinfo; }

static int encode(struct jpeg_compress_struct *c, jpeg_enc *e, const rb_image *img, int quality) {
    if (setjmp(e->jb)) return 1;
    jpeg_create_compress(c);
    jpeg_mem_dest(c, &e->buf, &e->size);
    c->image_width = (JDIMENSION)img->width;
    c->image_height = (JDIMENSION)img->height;
    c->input_components = img->channels;
    c->in_color_space = img->channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(c);
    jpeg_set_quality(c, quality, TRUE);
    jpeg_start_compress(c, TRUE);
    size_t stride = (size_t)img->width * (size_t)img->channels;
    while (c->next_scanline < c->image_height) {
        JSAMPROW row = img->data + (size_t)c->next_scanline * stride;
        jpeg_write_scanlines(c, &row, 1);
    }
    jpeg_finish_compress(c);
    return 0;
}

rb_status rb_jpeg_encode(const rb_image *img, int quality, uint8_t **out, size_t *out_len, rb_error *err) {
    if (!out || !out_len) return rb_error_set(err, RB_E_INVALID, "out or out_len is NULL");
    *out = NULL;
    *out_len = 0;
    if (!img || !img->data || img->width <= 0 || img->height <= 0)
        return rb_error_set(err, RB_E_INVALID, "bad image (need width, height > 0 and data)");
    if (img->channels == 4) return rb_error_set(err, RB_E_UNSUPPORTED, "JPEG cannot store alpha; drop it first");
    if (img->channels != 1 && img->channels != 3)
        return rb_error_set(err, RB_E_INVALID, "JPEG needs 1 or 3 channels (got %d)", (int)img->channels);
    if (img->width > 65500 || img->height > 65500)
        return rb_error_set(err, RB_E_RANGE, "JPEG sides are limited to 65500 (got %d x %d)", (int)img->width,
                            (int)img->height);
    if (quality < 1 || quality > 100) return rb_error_set(err, RB_E_INVALID, "quality %d outside 1..100", quality);
    jpeg_enc *e = calloc(1, sizeof *e);
    struct jpeg_compress_struct *c = calloc(1, sizeof *c);
    if (!e || !c) {
        free(e);
        free(c);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    c->err = jpeg_std_error(&e->pub);
    e->pub.error_exit = on_error_exit;
    e->pub.output_message = on_output;
    rb_status st = RB_OK;
    if (encode(c, e, img, quality)) st = rb_error_set(err, RB_E_INVALID, "JPEG encode: %s", e->msg);
    jpeg_destroy_compress(c);
    if (!st) {
        *out = e->buf;
        *out_len = e->size;
        e->buf = NULL;
    }
    free(e->buf);
    free(e);
    free(c);
    return st;
}

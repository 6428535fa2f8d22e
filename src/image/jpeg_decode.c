/* JPEG decoding through libjpeg-turbo from a memory buffer: baseline,
 * extended and progressive, gray / YCbCr / RGB to 8-bit gray or RGB, and
 * CMYK / YCCK to RGB as PIL converts them. libjpeg reports fatal errors by
 * longjmp and corrupt data (truncated stream, bad Huffman codes, lost
 * markers) only as warnings; those warnings are turned into errors here, as
 * PIL refuses truncated files. A progress monitor caps the number of scans
 * so a hostile progressive file cannot run for long. State that must survive
 * the longjmp lives in a context owned outside the setjmp frame. */
#include "image/image_internal.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#define MAX_SCANS 1000

typedef struct {
    struct jpeg_error_mgr pub; /* first: libjpeg casts cinfo->err to this struct */
    struct jpeg_progress_mgr progress;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX + 64];
    rb_status code;
    uint8_t *pixels;
    uint32_t width, height;
    int channels;
    bool cmyk, adobe;
} jpeg_dec;

static void on_error_exit(j_common_ptr cinfo) {
    jpeg_dec *d = (jpeg_dec *)cinfo->err;
    char m[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, m);
    snprintf(d->msg, sizeof d->msg, "%s", m);
    longjmp(d->jb, 1);
}

/* Warnings that mean the pixels are wrong; the rest (JFIF version, extra
 * bytes between markers, a bad ICC profile...) are ignored. */
static bool fatal_warning(int code, const char *msg) {
    return code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_MUST_RESYNC ||
           code == JWRN_HUFF_BAD_CODE || code == JWRN_NOT_SEQUENTIAL || code == JWRN_BOGUS_PROGRESSION ||
           strstr(msg, "bad arithmetic code") != NULL; /* JWRN_ARITH_BAD_CODE exists only in some builds */
}

static void on_emit(j_common_ptr cinfo, int level) {
    if (level >= 0) return; /* trace messages */
    jpeg_dec *d = (jpeg_dec *)cinfo->err;
    char m[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, m);
    if (fatal_warning(cinfo->err->msg_code, m)) {
        snprintf(d->msg, sizeof d->msg, "%s", m);
        longjmp(d->jb, 1);
    }
    cinfo->err->num_warnings++;
}

static void on_output(j_common_ptr cinfo) { (void)cinfo; }

static void on_progress(j_common_ptr cinfo) {
    if (cinfo->is_decompressor && ((j_decompress_ptr)cinfo)->input_scan_number > MAX_SCANS) {
        jpeg_dec *d = (jpeg_dec *)cinfo->err;
        snprintf(d->msg, sizeof d->msg, "more than %d scans", MAX_SCANS);
        longjmp(d->jb, 1);
    }
}

/* PIL's MULDIV255: a * b / 255 rounded. */
static uint8_t muldiv255(unsigned a, unsigned b) {
    unsigned t = a * b + 128;
    return (uint8_t)((t + (t >> 8)) >> 8);
}

static int decode(struct jpeg_decompress_struct *cinfo, jpeg_dec *d, const uint8_t *data, size_t len,
                  const img_opts *o, rb_error *err) {
    if (setjmp(d->jb)) return 1;
    jpeg_create_decompress(cinfo);
    cinfo->progress = &d->progress;
    jpeg_mem_src(cinfo, data, (unsigned long)len);
    if (jpeg_read_header(cinfo, TRUE) != JPEG_HEADER_OK) {
        snprintf(d->msg, sizeof d->msg, "no image in the file");
        return 1;
    }
    rb_status st = img_check_size(o, cinfo->image_width, cinfo->image_height, err);
    if (st) {
        d->code = st;
        return 2;
    }
    switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE: cinfo->out_color_space = JCS_GRAYSCALE; break;
    case JCS_CMYK:
    case JCS_YCCK:
        cinfo->out_color_space = JCS_CMYK;
        d->cmyk = true;
        d->adobe = cinfo->saw_Adobe_marker;
        break;
    default: cinfo->out_color_space = JCS_RGB; break;
    }
    jpeg_start_decompress(cinfo);
    int nc = cinfo->output_components;
    if (cinfo->output_width != cinfo->image_width || cinfo->output_height != cinfo->image_height ||
        !(nc == 1 || nc == 3 || (nc == 4 && d->cmyk))) {
        snprintf(d->msg, sizeof d->msg, "unexpected output layout (%d components)", nc);
        return 1;
    }
    size_t stride = (size_t)cinfo->output_width * (size_t)nc;
    d->pixels = malloc(stride * cinfo->output_height);
    if (!d->pixels) {
        d->code = RB_E_NOMEM;
        snprintf(d->msg, sizeof d->msg, "out of memory for the pixels");
        return 1;
    }
    while (cinfo->output_scanline < cinfo->output_height) {
        JSAMPROW row = d->pixels + (size_t)cinfo->output_scanline * stride;
        if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
            snprintf(d->msg, sizeof d->msg, "truncated image data");
            return 1;
        }
    }
    jpeg_finish_decompress(cinfo);
    d->width = cinfo->output_width;
    d->height = cinfo->output_height;
    d->channels = nc;
    return 0;
}

rb_status img_jpeg_decode(const uint8_t *data, size_t len, const img_opts *o, rb_image *out, rb_error *err) {
    if (len > (size_t)0xFFFFFFFFu) return rb_error_set(err, RB_E_RANGE, "JPEG larger than 4 GiB");
    jpeg_dec *d = calloc(1, sizeof *d);
    struct jpeg_decompress_struct *cinfo = calloc(1, sizeof *cinfo);
    if (!d || !cinfo) {
        free(d);
        free(cinfo);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    d->code = RB_E_FORMAT;
    cinfo->err = jpeg_std_error(&d->pub);
    d->pub.error_exit = on_error_exit;
    d->pub.emit_message = on_emit;
    d->pub.output_message = on_output;
    d->progress.progress_monitor = on_progress;
    int r = decode(cinfo, d, data, len, o, err);
    rb_status st = RB_OK;
    if (r == 1) st = rb_error_set(err, d->code, "JPEG: %s", d->msg);
    else if (r == 2) st = d->code;
    jpeg_destroy_decompress(cinfo);
    if (!st && d->cmyk) { /* PIL's cmyk2rgb: R = (255 - K) - (255 - K) C / 255; Adobe files store 255 - value */
        size_t n = (size_t)d->width * d->height;
        uint8_t *rgb = malloc(n * 3);
        if (!rgb) st = rb_error_set(err, RB_E_NOMEM, "out of memory");
        unsigned inv = d->adobe ? 255u : 0u;
        for (size_t i = 0; rgb && i < n; i++) {
            const uint8_t *p = d->pixels + 4 * i;
            unsigned nk = 255u - (inv ^ p[3]);
            for (int c = 0; c < 3; c++) rgb[3 * i + c] = (uint8_t)(nk - muldiv255(inv ^ p[c], nk));
        }
        free(d->pixels);
        d->pixels = rgb;
        d->channels = 3;
    }
    if (!st) {
        out->width = (int32_t)d->width;
        out->height = (int32_t)d->height;
        out->channels = d->channels;
        out->data = d->pixels;
        d->pixels = NULL;
    }
    free(d->pixels);
    free(d);
    free(cinfo);
    return st;
}

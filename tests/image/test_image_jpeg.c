/* JPEG tests. References: files made by libjpeg-turbo's cjpeg (baseline,
 * progressive, grayscale; tests/image/gen_test_images.py) against djpeg's
 * decodes of them (exact: same default IDCT and upsampling) and against the
 * source pattern (PSNR); encode/decode round trips within PSNR bounds; CMYK
 * and YCCK files written here through libjpeg's compressor, checked against
 * PIL's CMYK -> RGB rule; truncated, corrupted and oversize files. */
#include "testutil.h"

#include "rbee/image.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

static uint8_t *read_data(const char *rel, size_t *n) {
    char p[4096];
    return tu_read_file(tu_data(p, sizeof p, rel), n);
}

/* Parses a binary PNM (P5 / P6, maxval 255) written by djpeg. */
static uint8_t *read_pnm(const char *rel, int *w, int *h, int *c) {
    size_t n = 0;
    uint8_t *d = read_data(rel, &n);
    int off = 0, maxv = 0;
    char magic[3] = {0};
    if (sscanf((const char *)d, "%2s %d %d %d%n", magic, w, h, &maxv, &off) != 4 || maxv != 255)
        fail_msg("%s: not a PNM", rel);
    *c = strcmp(magic, "P6") == 0 ? 3 : 1;
    off++; /* one whitespace byte after maxval */
    size_t sz = (size_t)*w * *h * *c;
    assert_true((size_t)off + sz <= n);
    uint8_t *p = malloc(sz);
    memcpy(p, d + off, sz);
    free(d);
    return p;
}

static double psnr(const uint8_t *a, const uint8_t *b, size_t n) {
    double se = 0;
    for (size_t i = 0; i < n; i++) se += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return se == 0 ? 99.0 : 10.0 * log10(255.0 * 255.0 * (double)n / se);
}

static rb_image decode_ok(const void *d, size_t n, int channels, const char *what) {
    rb_image_decode_opts o = {.channels = channels};
    rb_image img;
    rb_error e;
    rb_status st = rb_image_decode(d, n, &o, &img, &e);
    if (st) fail_msg("%s: %s", what, e.msg);
    return img;
}

static void test_cjpeg_files(void **s) {
    (void)s;
    static const char *const names[] = {"rgb_q90", "rgb_prog", "gray_q90"};
    for (int f = 0; f < 3; f++) {
        char rel[128];
        snprintf(rel, sizeof rel, "image/%s.jpg", names[f]);
        size_t n = 0;
        uint8_t *d = read_data(rel, &n);
        assert_int_equal(rb_image_detect(d, n), RB_IMAGE_FORMAT_JPEG);
        rb_image img = decode_ok(d, n, 0, rel);
        int w, h, c;
        snprintf(rel, sizeof rel, "image/%s.%s", names[f], f == 2 ? "pgm" : "ppm");
        uint8_t *ref = read_pnm(rel, &w, &h, &c);
        assert_int_equal(img.width, w);
        assert_int_equal(img.height, h);
        assert_int_equal(img.channels, c);
        assert_memory_equal(img.data, ref, (size_t)w * h * c);
        /* against the source pattern the files were made from */
        uint8_t *src = malloc((size_t)w * h * c);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                uint8_t v[3] = {(uint8_t)((8 * x + 3 * y) % 256), (uint8_t)((5 * y + 2 * x) % 256), (uint8_t)((x * y) % 256)};
                memcpy(src + ((size_t)y * w + x) * c, v, (size_t)c);
            }
        double p = psnr(img.data, src, (size_t)w * h * c);
        if (p < 25.0) fail_msg("%s: PSNR %.1f dB against the source", names[f], p);
        /* other channel counts */
        rb_image rgba = decode_ok(d, n, 4, names[f]);
        for (size_t i = 0; i < (size_t)w * h; i++) {
            for (int k = 0; k < 3; k++) assert_int_equal(rgba.data[4 * i + k], ref[i * c + (c == 3 ? k : 0)]);
            assert_int_equal(rgba.data[4 * i + 3], 255);
        }
        rb_image_free(&rgba);
        free(src);
        free(ref);
        rb_image_free(&img);
        free(d);
    }
}

static void smooth_image(rb_image *img, int w, int h, int c) {
    TU_OK(rb_image_alloc(img, w, h, c, NULL));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                img->data[((size_t)y * w + x) * c + k] =
                    (uint8_t)(127.5 + 100.0 * sin(0.11 * x + 0.7 * k) * cos(0.07 * y - 0.3 * k));
}

static void test_jpeg_round_trip(void **s) {
    (void)s;
    for (int c = 1; c <= 3; c += 2) {
        rb_image img;
        smooth_image(&img, 61, 47, c);
        size_t prev = 0;
        static const int qs[] = {20, 50, 90, 100};
        static const double min_psnr[] = {28, 32, 38, 44};
        for (int qi = 0; qi < 4; qi++) {
            uint8_t *j = NULL;
            size_t n = 0;
            rb_error e;
            TU_OK(rb_jpeg_encode(&img, qs[qi], &j, &n, &e));
            assert_int_equal(rb_image_detect(j, n), RB_IMAGE_FORMAT_JPEG);
            assert_true(n > prev); /* higher quality, larger file */
            prev = n;
            rb_image back = decode_ok(j, n, 0, "jpeg round trip");
            assert_int_equal(back.width, 61);
            assert_int_equal(back.height, 47);
            assert_int_equal(back.channels, c);
            double p = psnr(back.data, img.data, (size_t)61 * 47 * c);
            if (p < min_psnr[qi]) fail_msg("channels %d quality %d: PSNR %.1f dB", c, qs[qi], p);
            rb_image_free(&back);
            free(j);
        }
        rb_image_free(&img);
    }
    rb_image img;
    smooth_image(&img, 8, 8, 4);
    uint8_t *j = NULL;
    size_t n = 0;
    rb_error e;
    assert_int_equal(rb_jpeg_encode(&img, 90, &j, &n, &e), RB_E_UNSUPPORTED);
    assert_null(j);
    img.channels = 3;
    assert_int_equal(rb_jpeg_encode(&img, 0, &j, &n, &e), RB_E_INVALID);
    assert_int_equal(rb_jpeg_encode(&img, 101, &j, &n, &e), RB_E_INVALID);
    assert_int_equal(rb_jpeg_encode(NULL, 90, &j, &n, &e), RB_E_INVALID);
    assert_int_equal(rb_jpeg_encode(&img, 90, NULL, &n, &e), RB_E_INVALID);
    img.channels = 4;
    rb_image_free(&img);
}

/* A CMYK (or YCCK) JPEG written with libjpeg directly; flat 16x16 blocks
 * (whole MCUs even with YCCK's 2x2 chroma subsampling) so quality 100 keeps
 * the values within a few units. */
static uint8_t *cmyk_jpeg(J_COLOR_SPACE space, const uint8_t *px, int w, int h, size_t *n) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &buf, &size);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 4;
    c.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, space);
    jpeg_set_quality(&c, 100, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * w * 4);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *n = size;
    return buf;
}

static void test_cmyk(void **s) {
    (void)s;
    enum { CW = 64, CH = 32 };
    uint8_t px[CW * CH * 4];
    for (int y = 0; y < CH; y++)
        for (int x = 0; x < CW; x++) {
            int b = (x / 16) + 4 * (y / 16); /* block index 0..7 */
            uint8_t v[4] = {(uint8_t)(30 * b), (uint8_t)(255 - 25 * b), (uint8_t)(90 + 20 * b), (uint8_t)(200 - 15 * b)};
            memcpy(px + ((size_t)y * CW + x) * 4, v, 4);
        }
    J_COLOR_SPACE spaces[2] = {JCS_CMYK, JCS_YCCK};
    for (int sp = 0; sp < 2; sp++) {
        size_t n = 0;
        uint8_t *j = cmyk_jpeg(spaces[sp], px, CW, CH, &n);
        rb_image img = decode_ok(j, n, 0, "cmyk");
        assert_int_equal(img.channels, 3);
        for (size_t i = 0; i < (size_t)CW * CH; i++) {
            int bx = (int)(i % CW) % 16, by = (int)(i / CW) % 16;
            if (bx < 4 || bx > 11 || by < 4 || by > 11) continue; /* upsampling blends chroma across block edges */
            /* libjpeg writes an Adobe marker, so the stored values are inverted CMYK: R = C' K' / 255 */
            const uint8_t *q = px + 4 * i;
            for (int k = 0; k < 3; k++) {
                double want = q[k] * (double)q[3] / 255.0;
                if (fabs(img.data[3 * i + k] - want) > 4.0)
                    fail_msg("space %d pixel %zu[%d]: %u vs %.1f", sp, i, k, img.data[3 * i + k], want);
            }
        }
        rb_image_free(&img);
        free(j);
    }
}

static void test_bad_jpeg(void **s) {
    (void)s;
    size_t n = 0;
    rb_image img = {0};
    rb_error e;
    static const char *const files[] = {"image/rgb_q90.jpg", "image/rgb_prog.jpg", "image/gray_q90.jpg"};
    for (int f = 0; f < 3; f++) {
        uint8_t *d = read_data(files[f], &n);
        /* every truncation fails */
        for (size_t cut = 0; cut < n; cut++) {
            rb_status st = rb_image_decode(d, cut, NULL, &img, &e);
            if (st != RB_E_FORMAT) fail_msg("%s cut at %zu of %zu: %s", files[f], cut, n, rb_status_str(st));
            assert_null(img.data);
        }
        /* flipped bytes: an error or an image, never a crash or a leak */
        uint8_t *c = malloc(n);
        for (size_t i = 2; i < n; i++) {
            memcpy(c, d, n);
            c[i] ^= (uint8_t)(0x11 + i);
            rb_status st = rb_image_decode(c, n, NULL, &img, &e);
            assert_true(st == RB_OK || st == RB_E_FORMAT || st == RB_E_RANGE);
            if (st == RB_OK) rb_image_free(&img);
        }
        free(c);
        free(d);
    }
    /* oversize: the frame header says 60000 x 60000; rejected before any pixel buffer */
    uint8_t *d = read_data("image/rgb_q90.jpg", &n);
    uint8_t *sof = NULL;
    for (size_t i = 0; i + 9 < n; i++)
        if (d[i] == 0xFF && d[i + 1] == 0xC0) {
            sof = d + i;
            break;
        }
    assert_non_null(sof);
    sof[5] = sof[7] = 0xEA; /* height, width: 0xEA60 = 60000 */
    sof[6] = sof[8] = 0x60;
    assert_int_equal(rb_image_decode(d, n, NULL, &img, &e), RB_E_RANGE);
    assert_null(img.data);
    free(d);
    d = read_data("image/rgb_q90.jpg", &n);
    rb_image_decode_opts lim = {.max_pixels = 24 * 16 - 1};
    assert_int_equal(rb_image_decode(d, n, &lim, &img, &e), RB_E_RANGE);
    lim = (rb_image_decode_opts){.max_side = 23};
    assert_int_equal(rb_image_decode(d, n, &lim, &img, &e), RB_E_RANGE);
    free(d);
    /* a JPEG signature and nothing else; tables only */
    assert_int_equal(rb_image_decode("\xff\xd8\xff", 3, NULL, &img, &e), RB_E_FORMAT);
    assert_int_equal(rb_image_decode("\xff\xd8\xff\xd9", 4, NULL, &img, &e), RB_E_FORMAT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cjpeg_files),
        cmocka_unit_test(test_jpeg_round_trip),
        cmocka_unit_test(test_cmyk),
        cmocka_unit_test(test_bad_jpeg),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

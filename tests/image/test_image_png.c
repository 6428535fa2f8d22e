/* PNG tests. References: the diffusers fixtures' output PNGs against their
 * run's `image` tensor (round(image * 255), exact) and init_image.png
 * against the pipeline's preprocessed `init_image`; PNGs written byte by
 * byte with Python's zlib (tests/image/gen_test_images.py: every color type
 * and bit depth, tRNS, Adam7, all row filters, text chunks) against the
 * formulas that made them; encode/decode round trips; text chunks (tEXt for
 * Latin-1, iTXt for the rest) read back and found in the file as the right
 * chunk type; truncated, corrupted and oversize files. */
#include "testutil.h"

#include "rbee/image.h"
#include "rbee/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint8_t *read_data(const char *rel, size_t *n) {
    char p[4096];
    return tu_read_file(tu_data(p, sizeof p, rel), n);
}

static rb_image decode_ok(const void *d, size_t n, int channels, const char *what) {
    rb_image_decode_opts o = {.channels = channels};
    rb_image img;
    rb_error e;
    rb_status st = rb_image_decode(d, n, &o, &img, &e);
    if (st) fail_msg("%s: %s", what, e.msg);
    return img;
}

/* ---- diffusers fixture PNGs ---- */

static void test_fixture_images(void **s) {
    (void)s;
    static const char *const pipes[] = {"sd15", "sd21v", "sdxl", "sd15-inpaint"};
    static const char *const runs[] = {"txt2img_euler", "txt2img_ddim", "txt2img_euler_a", "txt2img_dpmpp_2m_karras",
                                       "txt2img_euler_64x96", "txt2img_lcm", "img2img_euler", "img2img_ddim",
                                       "inpaint_euler", "inpaint_ddim", "txt2img_euler_no_negative"};
    char refs[4096];
    tu_fixture(refs, sizeof refs, "diffusers/refs"); /* skipped (or failed under CI) without the fixtures */
    int checked = 0;
    for (size_t p = 0; p < 4; p++) {
        for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
            char rel[256], path[4096];
            snprintf(rel, sizeof rel, "diffusers/refs/%s/%s.safetensors", pipes[p], runs[r]);
            const char *fx = getenv("RBEE_FIXTURES_DIR");
            snprintf(path, sizeof path, "%s/%s", fx && *fx ? fx : RBEE_FIXTURES_DIR, rel);
            FILE *f = fopen(path, "rb");
            if (!f) continue; /* not every pipeline has every run */
            fclose(f);
            rb_st_set *st = NULL;
            rb_error e;
            TU_OK(rb_st_open(path, &st, &e));
            const rb_st_tensor *t = rb_st_find(st, "image");
            assert_non_null(t);
            assert_int_equal(t->n_dims, 3);
            assert_int_equal(t->ne[0], 3);
            snprintf(rel, sizeof rel, "diffusers/refs/%s/%s.png", pipes[p], runs[r]);
            size_t n = 0;
            uint8_t *png = tu_read_file(tu_fixture(path, sizeof path, rel), &n);
            assert_int_equal(rb_image_detect(png, n), RB_IMAGE_FORMAT_PNG);
            rb_image img = decode_ok(png, n, 0, rel);
            assert_int_equal(img.channels, 3);
            assert_int_equal(img.width, t->ne[1]);
            assert_int_equal(img.height, t->ne[2]);
            const float *x = t->data;
            size_t total = (size_t)img.width * img.height * 3;
            for (size_t i = 0; i < total; i++) {
                float v = x[i] * 255.0f; /* numpy: float32 multiply, round half to even */
                uint8_t want = (uint8_t)rintf(v);
                if (img.data[i] != want) fail_msg("%s: byte %zu is %u, want %u", rel, i, img.data[i], want);
            }
            rb_image_free(&img);
            /* the img2img / inpaint input: init_image tensor = png / 255 * 2 - 1 */
            const rb_st_tensor *ii = rb_st_find(st, "init_image");
            if (ii) {
                snprintf(rel, sizeof rel, "diffusers/refs/%s/init_image.png", pipes[p]);
                uint8_t *ip = tu_read_file(tu_fixture(path, sizeof path, rel), &n);
                img = decode_ok(ip, n, 3, rel);
                const float *y = ii->data;
                size_t hw = (size_t)img.width * img.height;
                assert_int_equal(ii->ne[0] * ii->ne[1], hw);
                for (size_t c = 0; c < 3; c++)
                    for (size_t k = 0; k < hw; k++) {
                        double want = img.data[k * 3 + c] / 255.0 * 2.0 - 1.0;
                        if (fabs(y[c * hw + k] - want) > 1e-6) fail_msg("%s: %zu/%zu", rel, c, k);
                    }
                rb_image_free(&img);
                free(ip);
            }
            free(png);
            rb_st_close(st);
            checked++;
        }
    }
    assert_true(checked >= 20);
}

/* ---- PNGs written by gen_test_images.py ---- */

enum { W = 13, H = 11 };
static int v8(int x, int y, int c) { return (37 * x + 71 * y + 113 * c + 17) % 256; }

typedef enum { K_GRAYBITS, K_GRAY, K_GRAYA, K_RGB, K_RGBA, K_PAL, K_PAL_TRNS, K_GRAY_TRNS, K_RGB_TRNS } kind;

typedef struct {
    const char *file;
    kind k;
    int bits;
    int natural;
} png_case;

static const png_case k_cases[] = {
    {"gray1.png", K_GRAYBITS, 1, 1},       {"gray2.png", K_GRAYBITS, 2, 1},     {"gray4.png", K_GRAYBITS, 4, 1},
    {"gray8.png", K_GRAY, 8, 1},           {"gray16.png", K_GRAY, 16, 1},       {"graya8.png", K_GRAYA, 8, 4},
    {"graya16.png", K_GRAYA, 16, 4},       {"rgb8.png", K_RGB, 8, 3},           {"rgb16.png", K_RGB, 16, 3},
    {"rgba8.png", K_RGBA, 8, 4},           {"rgba16.png", K_RGBA, 16, 4},       {"pal8.png", K_PAL, 8, 3},
    {"pal4_trns.png", K_PAL_TRNS, 4, 4},   {"gray8_trns.png", K_GRAY_TRNS, 8, 4}, {"rgb8_trns.png", K_RGB_TRNS, 8, 4},
    {"rgb8_adam7.png", K_RGB, 8, 3},       {"gray1_adam7.png", K_GRAYBITS, 1, 1}, {"rgba16_adam7.png", K_RGBA, 16, 4},
    {"pal8_adam7.png", K_PAL, 8, 3},       {"text.png", K_RGB, 8, 3},
};

/* Expected RGBA of pixel (x, y); 16-bit files keep the high byte, which is v8. */
static void expected(const png_case *c, int x, int y, uint8_t px[4]) {
    int i = (x + y) % 16;
    px[3] = 255;
    switch (c->k) {
    case K_GRAYBITS: {
        int max = (1 << c->bits) - 1;
        px[0] = px[1] = px[2] = (uint8_t)(((x + 2 * y) % (max + 1)) * 255 / max);
        break;
    }
    case K_GRAY: px[0] = px[1] = px[2] = (uint8_t)v8(x, y, 0); break;
    case K_GRAYA: px[0] = px[1] = px[2] = (uint8_t)v8(x, y, 0); px[3] = (uint8_t)v8(x, y, 1); break;
    case K_RGB:
    case K_RGBA:
        for (int k = 0; k < 3; k++) px[k] = (uint8_t)v8(x, y, k);
        if (c->k == K_RGBA) px[3] = (uint8_t)v8(x, y, 3);
        break;
    case K_PAL:
    case K_PAL_TRNS:
        px[0] = (uint8_t)(16 * i);
        px[1] = (uint8_t)(255 - 16 * i);
        px[2] = (uint8_t)(50 * i % 256);
        if (c->k == K_PAL_TRNS && i < 4) px[3] = (uint8_t)(60 * i);
        break;
    case K_GRAY_TRNS:
        px[0] = px[1] = px[2] = (uint8_t)v8(x, y, 0);
        if (v8(x, y, 0) == v8(0, 0, 0)) px[3] = 0;
        break;
    case K_RGB_TRNS:
        for (int k = 0; k < 3; k++) px[k] = (uint8_t)v8(x, y, k);
        if (v8(x, y, 0) == v8(1, 1, 0) && v8(x, y, 1) == v8(1, 1, 1) && v8(x, y, 2) == v8(1, 1, 2)) px[3] = 0;
        break;
    }
}

static void test_generated_pngs(void **s) {
    (void)s;
    for (size_t f = 0; f < sizeof k_cases / sizeof k_cases[0]; f++) {
        const png_case *c = &k_cases[f];
        char rel[128];
        snprintf(rel, sizeof rel, "image/%s", c->file);
        size_t n = 0;
        uint8_t *d = read_data(rel, &n);
        for (int want = 0; want <= 4; want++) {
            if (want == 2) continue;
            rb_image img = decode_ok(d, n, want, c->file);
            int ch = want ? want : c->natural;
            assert_int_equal(img.width, W);
            assert_int_equal(img.height, H);
            assert_int_equal(img.channels, ch);
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) {
                    uint8_t px[4];
                    expected(c, x, y, px);
                    const uint8_t *got = img.data + ((size_t)y * W + x) * ch;
                    if (ch == 1) {
                        /* color to gray: PIL's L = 0.299 R + 0.587 G + 0.114 B (fixed point, so within 1) */
                        bool gray = px[0] == px[1] && px[1] == px[2];
                        double l = gray ? px[0] : 0.299 * px[0] + 0.587 * px[1] + 0.114 * px[2];
                        if (fabs(got[0] - l) > (gray ? 0.0 : 1.0))
                            fail_msg("%s ch1 (%d,%d): %u vs %.2f", c->file, x, y, got[0], l);
                    } else {
                        for (int k = 0; k < ch; k++)
                            if (got[k] != px[k])
                                fail_msg("%s ch%d (%d,%d)[%d]: %u, want %u", c->file, ch, x, y, k, got[k], px[k]);
                    }
                }
            rb_image_free(&img);
        }
        free(d);
    }
}

/* ---- round trips ---- */

static void random_image(rb_image *img, int w, int h, int c, uint64_t seed) {
    TU_OK(rb_image_alloc(img, w, h, c, NULL));
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (size_t i = 0; i < (size_t)w * h * c; i++) img->data[i] = (uint8_t)tu_rng_u64(&r);
}

static void test_png_round_trip(void **s) {
    (void)s;
    static const int chans[] = {1, 3, 4};
    static const int levels[] = {0, 1, 6, 9, -1};
    for (int ci = 0; ci < 3; ci++)
        for (int li = 0; li < 5; li++) {
            rb_image img;
            random_image(&img, 37 + li, 19 + ci, chans[ci], (uint64_t)(ci * 10 + li));
            rb_png_encode_opts o = {.compression = levels[li]};
            uint8_t *png = NULL;
            size_t n = 0;
            rb_error e;
            TU_OK(rb_png_encode(&img, &o, &png, &n, &e));
            assert_int_equal(rb_image_detect(png, n), RB_IMAGE_FORMAT_PNG);
            rb_image back = decode_ok(png, n, 0, "round trip");
            assert_int_equal(back.width, img.width);
            assert_int_equal(back.height, img.height);
            assert_int_equal(back.channels, img.channels);
            assert_memory_equal(back.data, img.data, (size_t)img.width * img.height * img.channels);
            rb_image_free(&back);
            free(png);
            rb_image_free(&img);
        }
    /* level 0 stores, level 9 compresses a smooth image much smaller */
    rb_image img;
    TU_OK(rb_image_alloc(&img, 64, 64, 3, NULL));
    for (size_t i = 0; i < 64 * 64 * 3; i++) img.data[i] = (uint8_t)(i / 192);
    uint8_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    rb_png_encode_opts o0 = {.compression = 0}, o9 = {.compression = 9};
    TU_OK(rb_png_encode(&img, &o0, &a, &na, NULL));
    TU_OK(rb_png_encode(&img, &o9, &b, &nb, NULL));
    assert_true(na > 64 * 64 * 3 && nb < na / 10);
    free(a);
    free(b);
    TU_OK(rb_png_encode(&img, NULL, &a, &na, NULL));
    free(a);
    rb_image_free(&img);
}

/* ---- text chunks ---- */

/* Type of the chunk holding keyword key (tEXt / zTXt / iTXt), by walking the file. */
static const char *chunk_type_of(const uint8_t *p, size_t n, const char *key, char out[5]) {
    for (size_t pos = 8; pos + 12 <= n;) {
        uint32_t len = (uint32_t)p[pos] << 24 | (uint32_t)p[pos + 1] << 16 | (uint32_t)p[pos + 2] << 8 | p[pos + 3];
        const char *t = (const char *)p + pos + 4;
        if ((!memcmp(t, "tEXt", 4) || !memcmp(t, "iTXt", 4) || !memcmp(t, "zTXt", 4)) && len > strlen(key) &&
            memcmp(p + pos + 8, key, strlen(key) + 1) == 0) {
            memcpy(out, t, 4);
            out[4] = '\0';
            return out;
        }
        pos += 12 + len;
    }
    return NULL;
}

static void test_text_chunks(void **s) {
    (void)s;
    rb_image img;
    random_image(&img, 8, 8, 3, 7);
    const rb_png_text in[] = {
        {"parameters", "a cat, masterpiece\nSteps: 20, Sampler: Euler a, CFG scale: 7, Seed: 1", 0},
        {"latin", "caf\xc3\xa9 \xc2\xbd \xc3\xbf", 0},                       /* café ½ ÿ: Latin-1 */
        {"cjk", "\xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x90\xb1", 0},             /* 東京 🐱 */
        {"empty", "", 0},
        {"k\xc3\xa9y", "x", 0},                                              /* key "kéy" is Latin-1 */
    };
    rb_png_text t[5];
    memcpy(t, in, sizeof t);
    for (int i = 0; i < 5; i++) t[i].len = strlen(t[i].text);
    rb_png_encode_opts o = {.compression = -1, .texts = t, .n_texts = 5};
    uint8_t *png = NULL;
    size_t n = 0;
    rb_error e;
    TU_OK(rb_png_encode(&img, &o, &png, &n, &e));
    char ty[5];
    assert_string_equal(chunk_type_of(png, n, "parameters", ty), "tEXt");
    assert_string_equal(chunk_type_of(png, n, "latin", ty), "tEXt");
    assert_string_equal(chunk_type_of(png, n, "cjk", ty), "iTXt");
    assert_string_equal(chunk_type_of(png, n, "k\xe9y", ty), "tEXt"); /* stored as Latin-1 */
    /* the Latin-1 text is stored as Latin-1 bytes: "caf\xe9 \xbd \xff" */
    assert_non_null(memmem(png, n, "latin\0caf\xe9 \xbd \xff", 14));
    rb_png_text *out = NULL;
    size_t no = 0;
    TU_OK(rb_png_read_text(png, n, &out, &no, &e));
    assert_int_equal(no, 5);
    for (int i = 0; i < 5; i++) {
        assert_string_equal(out[i].key, t[i].key);
        assert_string_equal(out[i].text, t[i].text);
        assert_int_equal(out[i].len, t[i].len);
    }
    rb_png_texts_free(out, no);
    rb_image back = decode_ok(png, n, 0, "text png");
    assert_memory_equal(back.data, img.data, 8 * 8 * 3);
    rb_image_free(&back);
    free(png);
    /* the hand-made file: tEXt, zTXt (Latin-1), iTXt plain and compressed, tEXt after IDAT */
    size_t fn = 0;
    uint8_t *f = read_data("image/text.png", &fn);
    TU_OK(rb_png_read_text(f, fn, &out, &no, &e));
    assert_int_equal(no, 5);
    assert_string_equal(out[0].key, "parameters");
    assert_string_equal(out[0].text, "a cat, masterpiece\nSteps: 20, Sampler: Euler a, CFG scale: 7");
    assert_string_equal(out[1].key, "Comment");
    assert_string_equal(out[1].text, "caf\xc3\xa9 \xc2\xbd");
    assert_string_equal(out[2].key, "Title");
    assert_string_equal(out[2].text, "\xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x90\xb1");
    assert_string_equal(out[3].key, "Description");
    assert_int_equal(out[3].len, 50 * strlen("long \xc3\xbcnic\xc3\xb6" "de "));
    assert_memory_equal(out[3].text, "long \xc3\xbcnic\xc3\xb6" "de long", 19);
    assert_string_equal(out[4].key, "After");
    assert_string_equal(out[4].text, "written after IDAT");
    rb_png_texts_free(out, no);
    /* a PNG without text */
    size_t gn = 0;
    uint8_t *g = read_data("image/gray8.png", &gn);
    TU_OK(rb_png_read_text(g, gn, &out, &no, &e));
    assert_int_equal(no, 0);
    assert_null(out);
    /* bad keys and texts */
    const char *bad_keys[] = {"", " lead", "trail ", "two  spaces", "\xe6\x9d\xb1", "tab\tkey", "\xff",
                              "0123456789012345678901234567890123456789012345678901234567890123456789012345678901"};
    for (size_t i = 0; i < sizeof bad_keys / sizeof bad_keys[0]; i++) {
        rb_png_text bt = {(char *)bad_keys[i], "x", 1};
        rb_png_encode_opts bo = {.compression = -1, .texts = &bt, .n_texts = 1};
        png = (uint8_t *)1;
        assert_int_equal(rb_png_encode(&img, &bo, &png, &n, &e), RB_E_INVALID);
        assert_null(png);
    }
    rb_png_text bt = {"k", "bad \xff utf8", 10};
    rb_png_encode_opts bo = {.compression = -1, .texts = &bt, .n_texts = 1};
    assert_int_equal(rb_png_encode(&img, &bo, &png, &n, &e), RB_E_INVALID);
    bt.text = "nul\0inside";
    bt.len = 10;
    assert_int_equal(rb_png_encode(&img, &bo, &png, &n, &e), RB_E_INVALID);
    /* corrupt text chunks: bad CRC, bad zlib data, truncated */
    uint8_t *c = malloc(fn);
    memcpy(c, f, fn);
    uint8_t *z = memmem(c, fn, "zTXtComment", 11);
    assert_non_null(z);
    z[4 + 8 + 2] ^= 0xFF; /* inside the zlib stream: CRC now wrong */
    assert_int_equal(rb_png_read_text(c, fn, &out, &no, &e), RB_E_FORMAT);
    assert_non_null(strstr(e.msg, "CRC"));
    uint32_t len = (uint32_t)z[-4] << 24 | (uint32_t)z[-3] << 16 | (uint32_t)z[-2] << 8 | z[-1];
    uint32_t crc = (uint32_t)crc32(0, z, len + 4); /* fix the CRC: now the zlib stream is corrupt */
    for (int i = 0; i < 4; i++) z[4 + len + i] = (uint8_t)(crc >> (24 - 8 * i));
    assert_int_equal(rb_png_read_text(c, fn, &out, &no, &e), RB_E_FORMAT);
    for (size_t cut = 0; cut < fn; cut += 7) {
        rb_status st = rb_png_read_text(f, cut, &out, &no, &e);
        assert_int_equal(st, RB_E_FORMAT);
        assert_null(out);
    }
    assert_int_equal(rb_png_read_text(NULL, 0, &out, &no, &e), RB_E_FORMAT);
    assert_int_equal(rb_png_read_text(f, fn, NULL, &no, &e), RB_E_INVALID);
    free(c);
    free(g);
    free(f);
    rb_image_free(&img);
}

/* ---- bad input ---- */

static uint8_t *png_with_size(uint32_t w, uint32_t h, size_t *n) {
    uint8_t *p = malloc(8 + 25 + 12 + 12);
    memcpy(p, "\x89PNG\r\n\x1a\n", 8);
    uint8_t ihdr[17] = {'I', 'H', 'D', 'R', (uint8_t)(w >> 24), (uint8_t)(w >> 16), (uint8_t)(w >> 8), (uint8_t)w,
                        (uint8_t)(h >> 24), (uint8_t)(h >> 16), (uint8_t)(h >> 8), (uint8_t)h, 8, 2, 0, 0, 0};
    memcpy(p + 8, "\0\0\0\x0d", 4);
    memcpy(p + 12, ihdr, 17);
    uint32_t crc = (uint32_t)crc32(0, ihdr, 17);
    for (int i = 0; i < 4; i++) p[29 + i] = (uint8_t)(crc >> (24 - 8 * i));
    memcpy(p + 33, "\0\0\0\0IDAT\x35\xaf\x06\x1e", 12); /* empty IDAT: libpng stops reading the header there */
    memcpy(p + 45, "\0\0\0\0IEND\xae\x42\x60\x82", 12);
    *n = 57;
    return p;
}

static void test_bad_png(void **s) {
    (void)s;
    rb_image img = {0};
    rb_error e;
    size_t n = 0;
    /* oversize: rejected by the limits before allocating */
    uint8_t *p = png_with_size(100000, 100000, &n);
    assert_int_equal(rb_image_decode(p, n, NULL, &img, &e), RB_E_RANGE);
    assert_null(img.data);
    free(p);
    p = png_with_size(70000, 1, &n);
    assert_int_equal(rb_image_decode(p, n, NULL, &img, &e), RB_E_RANGE);
    free(p);
    p = png_with_size(0, 5, &n); /* width 0: invalid IHDR */
    assert_int_equal(rb_image_decode(p, n, NULL, &img, &e), RB_E_FORMAT);
    free(p);
    uint8_t *d = read_data("image/rgb8.png", &n);
    rb_image_decode_opts lim = {.max_pixels = W * H - 1};
    assert_int_equal(rb_image_decode(d, n, &lim, &img, &e), RB_E_RANGE);
    lim = (rb_image_decode_opts){.max_side = 12};
    assert_int_equal(rb_image_decode(d, n, &lim, &img, &e), RB_E_RANGE);
    lim = (rb_image_decode_opts){.max_pixels = W * H, .max_side = 13};
    TU_OK(rb_image_decode(d, n, &lim, &img, &e));
    rb_image_free(&img);
    lim = (rb_image_decode_opts){.channels = 2};
    assert_int_equal(rb_image_decode(d, n, &lim, &img, &e), RB_E_INVALID);
    /* every truncation fails (IEND included) */
    for (size_t cut = 0; cut < n; cut++) {
        rb_status st = rb_image_decode(d, cut, NULL, &img, &e);
        if (st != RB_E_FORMAT) fail_msg("cut at %zu of %zu: %s", cut, n, rb_status_str(st));
        assert_null(img.data);
    }
    /* flipped bytes: an error or (in ancillary data) an image, never a crash */
    uint8_t *c = malloc(n);
    for (size_t i = 8; i < n; i++) {
        memcpy(c, d, n);
        c[i] ^= 0x41;
        rb_status st = rb_image_decode(c, n, NULL, &img, &e);
        assert_true(st == RB_OK || st == RB_E_FORMAT || st == RB_E_RANGE);
        if (st == RB_OK) rb_image_free(&img);
        else assert_null(img.data);
    }
    /* a corrupt IDAT with a correct CRC: zlib's checks catch it */
    memcpy(c, d, n);
    uint8_t *idat = memmem(c, n, "IDAT", 4);
    uint32_t len = (uint32_t)idat[-4] << 24 | (uint32_t)idat[-3] << 16 | (uint32_t)idat[-2] << 8 | idat[-1];
    for (uint32_t i = 2; i < len; i++) idat[4 + i] ^= 0x5A;
    uint32_t crc = (uint32_t)crc32(0, idat, len + 4);
    for (int i = 0; i < 4; i++) idat[4 + len + i] = (uint8_t)(crc >> (24 - 8 * i));
    assert_int_equal(rb_image_decode(c, n, NULL, &img, &e), RB_E_FORMAT);
    free(c);
    free(d);
    /* not an image, NULLs */
    assert_int_equal(rb_image_decode("GIF89a....", 10, NULL, &img, &e), RB_E_FORMAT);
    assert_int_equal(rb_image_decode(NULL, 0, NULL, &img, &e), RB_E_FORMAT);
    assert_int_equal(rb_image_decode(NULL, 5, NULL, &img, &e), RB_E_INVALID);
    assert_int_equal(rb_image_decode("x", 1, NULL, NULL, &e), RB_E_INVALID);
    assert_int_equal(rb_image_detect(NULL, 8), RB_IMAGE_FORMAT_UNKNOWN);
    /* encoder argument checks */
    uint8_t *out = NULL;
    rb_image bad = {4, 4, 2, (uint8_t[32]){0}};
    assert_int_equal(rb_png_encode(&bad, NULL, &out, &n, &e), RB_E_INVALID);
    bad.channels = 3;
    bad.data = NULL;
    assert_int_equal(rb_png_encode(&bad, NULL, &out, &n, &e), RB_E_INVALID);
    rb_image ok;
    random_image(&ok, 2, 2, 3, 1);
    rb_png_encode_opts o = {.compression = 10};
    assert_int_equal(rb_png_encode(&ok, &o, &out, &n, &e), RB_E_INVALID);
    assert_int_equal(rb_png_encode(&ok, NULL, NULL, &n, &e), RB_E_INVALID);
    rb_image_free(&ok);
    assert_int_equal(rb_image_alloc(&ok, 0, 1, 3, &e), RB_E_INVALID);
    assert_int_equal(rb_image_alloc(&ok, 1, 1, 2, &e), RB_E_INVALID);
    rb_image_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_images), cmocka_unit_test(test_generated_pngs),
        cmocka_unit_test(test_png_round_trip), cmocka_unit_test(test_text_chunks),
        cmocka_unit_test(test_bad_png),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

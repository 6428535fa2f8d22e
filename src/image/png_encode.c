/* PNG encoding through libpng into a memory buffer: 8-bit gray, RGB or
 * RGBA, a zlib level, and text chunks written before the image data as
 * PIL's PngInfo.add_text does (tEXt for Latin-1 text, uncompressed iTXt
 * otherwise). libpng errors arrive by longjmp; everything the error path
 * frees lives in a context outside the setjmp frame. */
#include "image/image_internal.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    img_buf out;
    char msg[256];
    png_bytep *rows;
    png_text *texts;
    char **owned; /* converted keys and texts */
    size_t n_owned;
} png_enc;

static void on_error(png_structp png, png_const_charp msg) {
    png_enc *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg ? msg : "libpng error");
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static void write_mem(png_structp png, png_bytep data, size_t n) {
    png_enc *e = png_get_io_ptr(png);
    img_buf_append(&e->out, data, n);
    if (e->out.failed) png_error(png, "out of memory for the encoded image");
}

static void flush_mem(png_structp png) { (void)png; }

/* PNG keywords: 1-79 Latin-1 printable characters, no leading, trailing or
 * doubled spaces. */
static bool keyword_ok(const char *k, size_t n) {
    if (n == 0 || n > 79 || k[0] == ' ' || k[n - 1] == ' ') return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)k[i];
        if (!((c >= 32 && c <= 126) || c >= 161)) return false;
        if (c == ' ' && k[i + 1] == ' ') return false;
    }
    return true;
}

static char *own(png_enc *e, char *s) {
    if (s) e->owned[e->n_owned++] = s;
    return s;
}

/* Builds libpng's text records; RB_OK or an error (nothing written yet). */
static rb_status make_texts(png_enc *e, const rb_png_encode_opts *o, rb_error *err) {
    if (!o || !o->n_texts) return RB_OK;
    if (!o->texts) return rb_error_set(err, RB_E_INVALID, "texts is NULL");
    e->texts = calloc(o->n_texts, sizeof *e->texts);
    e->owned = calloc(2 * o->n_texts, sizeof *e->owned);
    if (!e->texts || !e->owned) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (size_t i = 0; i < o->n_texts; i++) {
        const rb_png_text *t = &o->texts[i];
        if (!t->key || (!t->text && t->len)) return rb_error_set(err, RB_E_INVALID, "text %zu: NULL key or text", i);
        const char *txt = t->text ? t->text : "";
        if (memchr(txt, 0, t->len)) return rb_error_set(err, RB_E_INVALID, "text '%.79s' contains a NUL byte", t->key);
        char *key = NULL, *lat = NULL;
        size_t kl = 0, ll = 0;
        bool oom = false;
        if (!img_utf8_to_latin1(t->key, strlen(t->key), &key, &kl, &oom) || !keyword_ok(own(e, key), kl))
            return oom ? rb_error_set(err, RB_E_NOMEM, "out of memory")
                       : rb_error_set(err, RB_E_INVALID, "'%.79s' is not a valid PNG keyword", t->key);
        png_text *p = &e->texts[i];
        p->key = key;
        if (img_utf8_to_latin1(txt, t->len, &lat, &ll, &oom)) {
            p->compression = PNG_TEXT_COMPRESSION_NONE;
            p->text = own(e, lat);
            p->text_length = ll;
        } else if (oom) {
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        } else if (!img_utf8_valid(txt, t->len)) {
            return rb_error_set(err, RB_E_INVALID, "text of '%.79s' is not valid UTF-8", t->key);
        } else {
            p->compression = PNG_ITXT_COMPRESSION_NONE;
            char *u = malloc(t->len + 1);
            if (!u) return rb_error_set(err, RB_E_NOMEM, "out of memory");
            memcpy(u, txt, t->len);
            u[t->len] = '\0';
            p->text = own(e, u);
            p->itxt_length = t->len;
            p->lang = (png_charp) "";
            p->lang_key = (png_charp) "";
        }
    }
    return RB_OK;
}

static int encode(png_structp png, png_infop info, png_enc *e, const rb_image *img, const rb_png_encode_opts *o) {
    if (setjmp(png_jmpbuf(png))) return 1;
    png_set_write_fn(png, e, write_mem, flush_mem);
    int ct = img->channels == 1 ? PNG_COLOR_TYPE_GRAY : img->channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_RGBA;
    png_set_IHDR(png, info, (png_uint_32)img->width, (png_uint_32)img->height, 8, ct, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(png, o && o->compression >= 0 ? o->compression : 6);
    if (e->texts) png_set_text(png, info, e->texts, (int)o->n_texts);
    png_write_info(png, info);
    size_t stride = (size_t)img->width * (size_t)img->channels;
    for (int32_t y = 0; y < img->height; y++) e->rows[y] = img->data + (size_t)y * stride;
    png_write_image(png, e->rows);
    png_write_end(png, info);
    return 0;
}

rb_status rb_png_encode(const rb_image *img, const rb_png_encode_opts *opts, uint8_t **out, size_t *out_len,
                        rb_error *err) {
    if (!out || !out_len) return rb_error_set(err, RB_E_INVALID, "out or out_len is NULL");
    *out = NULL;
    *out_len = 0;
    if (!img || !img->data || img->width <= 0 || img->height <= 0 ||
        (img->channels != 1 && img->channels != 3 && img->channels != 4))
        return rb_error_set(err, RB_E_INVALID, "bad image (need width, height > 0, 1/3/4 channels, data)");
    if ((uint32_t)img->width > 0x7FFFFFFFu / 4 || (uint32_t)img->height > 0x7FFFFFFFu)
        return rb_error_set(err, RB_E_RANGE, "image too large for PNG");
    if (opts && (opts->compression < -1 || opts->compression > 9))
        return rb_error_set(err, RB_E_INVALID, "compression level %d outside -1..9", opts->compression);
    if (opts && opts->n_texts > 1000) return rb_error_set(err, RB_E_RANGE, "too many text chunks");
    png_enc *e = calloc(1, sizeof *e);
    if (!e) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    rb_status st = make_texts(e, opts, err);
    png_structp png = NULL;
    png_infop info = NULL;
    if (!st) {
        e->rows = malloc((size_t)img->height * sizeof *e->rows);
        png = png_create_write_struct(PNG_LIBPNG_VER_STRING, e, on_error, on_warning);
        info = png ? png_create_info_struct(png) : NULL;
        if (!e->rows || !png || !info) st = rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    if (!st && encode(png, info, e, img, opts))
        st = rb_error_set(err, e->out.failed ? RB_E_NOMEM : RB_E_INVALID, "PNG encode: %s", e->msg);
    png_destroy_write_struct(png ? &png : NULL, info ? &info : NULL);
    if (!st) {
        *out = e->out.p;
        *out_len = e->out.len;
        e->out.p = NULL;
    }
    free(e->out.p);
    free(e->rows);
    free(e->texts);
    for (size_t i = 0; i < e->n_owned; i++) free(e->owned[i]);
    free(e->owned);
    free(e);
    return st;
}

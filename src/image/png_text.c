/* PNG text chunks: a chunk walker over the file (signature, lengths, CRCs)
 * that collects tEXt, zTXt and iTXt without decoding the image, zlib
 * inflation with a size cap, the Latin-1 <-> UTF-8 conversions PNG text
 * needs (tEXt/zTXt are Latin-1, iTXt is UTF-8), and keyword validation. */
#include "image/image_internal.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define TEXT_MAX ((size_t)16 << 20)

bool img_utf8_valid(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!k || k > len - i) return false;
        uint32_t cp = k == 1 ? c : c & (0x7Fu >> k);
        for (size_t j = 1; j < k; j++) {
            if ((u[i + j] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (u[i + j] & 0x3Fu);
        }
        if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k;
    }
    return true;
}

bool img_utf8_to_latin1(const char *s, size_t len, char **out, size_t *out_len, bool *oom) {
    *out = NULL;
    *oom = false;
    if (!img_utf8_valid(s, len)) return false;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len; i++)
        if (u[i] >= 0xC4) return false; /* lead byte of a code point above U+00FF */
    char *o = malloc(len + 1);
    if (!o) {
        *oom = true;
        return false;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (u[i] < 0x80) o[n++] = (char)u[i];
        else {
            o[n++] = (char)(((u[i] & 0x03u) << 6) | (u[i + 1] & 0x3Fu));
            i++;
        }
    }
    o[n] = '\0';
    *out = o;
    *out_len = n;
    return true;
}

char *img_latin1_to_utf8(const uint8_t *s, size_t len, size_t *out_len) {
    char *o = malloc(2 * len + 1);
    if (!o) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < 0x80) o[n++] = (char)s[i];
        else {
            o[n++] = (char)(0xC0 | (s[i] >> 6));
            o[n++] = (char)(0x80 | (s[i] & 0x3F));
        }
    }
    o[n] = '\0';
    *out_len = n;
    return o;
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* zlib data -> malloc'ed bytes (NUL-terminated), at most TEXT_MAX. */
static rb_status inflate_text(const uint8_t *in, size_t n, uint8_t **out, size_t *out_len, rb_error *err) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit(&z) != Z_OK) return rb_error_set(err, RB_E_NOMEM, "zlib init failed");
    size_t cap = n * 4 + 64 < TEXT_MAX ? n * 4 + 64 : TEXT_MAX, len = 0;
    uint8_t *buf = malloc(cap + 1);
    rb_status st = buf ? RB_OK : rb_error_set(err, RB_E_NOMEM, "out of memory");
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    while (!st) {
        if (len == cap) {
            if (cap >= TEXT_MAX) {
                st = rb_error_set(err, RB_E_RANGE, "compressed text larger than %zu bytes", TEXT_MAX);
                break;
            }
            size_t nc = cap * 2 < TEXT_MAX ? cap * 2 : TEXT_MAX;
            uint8_t *p = realloc(buf, nc + 1);
            if (!p) {
                st = rb_error_set(err, RB_E_NOMEM, "out of memory");
                break;
            }
            buf = p;
            cap = nc;
        }
        z.next_out = buf + len;
        z.avail_out = (uInt)(cap - len);
        int r = inflate(&z, Z_NO_FLUSH);
        len = cap - z.avail_out;
        if (r == Z_STREAM_END) break;
        if (r == Z_OK) continue;
        if (r == Z_BUF_ERROR && z.avail_out == 0) continue;
        st = rb_error_set(err, RB_E_FORMAT, "corrupt compressed text (%s)", z.msg ? z.msg : "truncated");
    }
    inflateEnd(&z);
    if (st) {
        free(buf);
        return st;
    }
    buf[len] = 0;
    *out = buf;
    *out_len = len;
    return RB_OK;
}

typedef struct {
    rb_png_text *v;
    size_t n, cap;
} text_list;

static rb_status push_text(text_list *l, const uint8_t *key, size_t key_len, char *text, size_t text_len,
                           rb_error *err) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 8;
        rb_png_text *p = realloc(l->v, nc * sizeof *p);
        if (!p) {
            free(text);
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
        l->v = p;
        l->cap = nc;
    }
    size_t kl;
    char *k = img_latin1_to_utf8(key, key_len, &kl);
    if (!k) {
        free(text);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    l->v[l->n++] = (rb_png_text){k, text, text_len};
    return RB_OK;
}

/* One text chunk's payload. */
static rb_status parse_chunk(text_list *l, const char type[4], const uint8_t *p, size_t n, rb_error *err) {
    const uint8_t *nul = memchr(p, 0, n);
    if (!nul || nul == p || nul - p > 79) return rb_error_set(err, RB_E_FORMAT, "%.4s chunk with a bad keyword", type);
    size_t kl = (size_t)(nul - p), off = kl + 1;
    uint8_t *raw = NULL;
    size_t raw_len = 0;
    rb_status st = RB_OK;
    if (memcmp(type, "tEXt", 4) == 0) {
        size_t ol;
        char *t = img_latin1_to_utf8(p + off, n - off, &ol);
        if (!t) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        return push_text(l, p, kl, t, ol, err);
    }
    if (memcmp(type, "zTXt", 4) == 0) {
        if (off >= n || p[off] != 0) return rb_error_set(err, RB_E_FORMAT, "zTXt chunk with an unknown compression");
        st = inflate_text(p + off + 1, n - off - 1, &raw, &raw_len, err);
        if (st) return st;
        size_t ol;
        char *t = img_latin1_to_utf8(raw, raw_len, &ol);
        free(raw);
        if (!t) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        return push_text(l, p, kl, t, ol, err);
    }
    /* iTXt: flag, method, language\0, translated keyword\0, text */
    if (n - off < 2 || p[off] > 1 || p[off + 1] != 0)
        return rb_error_set(err, RB_E_FORMAT, "iTXt chunk with a bad compression flag or method");
    bool comp = p[off] == 1;
    off += 2;
    for (int k = 0; k < 2; k++) {
        const uint8_t *z = memchr(p + off, 0, n - off);
        if (!z) return rb_error_set(err, RB_E_FORMAT, "truncated iTXt chunk");
        off = (size_t)(z - p) + 1;
    }
    if (comp) {
        st = inflate_text(p + off, n - off, &raw, &raw_len, err);
        if (st) return st;
    } else {
        raw_len = n - off;
        raw = malloc(raw_len + 1);
        if (!raw) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        memcpy(raw, p + off, raw_len);
        raw[raw_len] = 0;
    }
    if (!img_utf8_valid((const char *)raw, raw_len)) {
        free(raw);
        return rb_error_set(err, RB_E_FORMAT, "iTXt text is not valid UTF-8");
    }
    return push_text(l, p, kl, (char *)raw, raw_len, err);
}

rb_status rb_png_read_text(const void *data, size_t len, rb_png_text **texts, size_t *n_texts, rb_error *err) {
    if (!texts || !n_texts) return rb_error_set(err, RB_E_INVALID, "texts or n_texts is NULL");
    *texts = NULL;
    *n_texts = 0;
    if (!data && len) return rb_error_set(err, RB_E_INVALID, "data is NULL");
    if (rb_image_detect(data, len) != RB_IMAGE_FORMAT_PNG) return rb_error_set(err, RB_E_FORMAT, "not a PNG file");
    const uint8_t *p = data;
    text_list l = {0};
    rb_status st = RB_OK;
    bool first = true, end = false;
    for (size_t pos = 8; !st && !end;) {
        if (len - pos < 12) {
            st = rb_error_set(err, RB_E_FORMAT, "truncated PNG: chunk header at byte %zu", pos);
            break;
        }
        uint32_t n = be32(p + pos);
        const char *type = (const char *)p + pos + 4;
        if (n > 0x7FFFFFFFu || n > len - pos - 12) {
            st = rb_error_set(err, RB_E_FORMAT, "truncated PNG: %.4s chunk of %u bytes at byte %zu", type, n, pos);
            break;
        }
        if (crc32(crc32(0L, Z_NULL, 0), p + pos + 4, n + 4) != be32(p + pos + 8 + n)) {
            st = rb_error_set(err, RB_E_FORMAT, "PNG %.4s chunk at byte %zu has a bad CRC", type, pos);
            break;
        }
        if (first && memcmp(type, "IHDR", 4) != 0) {
            st = rb_error_set(err, RB_E_FORMAT, "PNG does not start with IHDR");
            break;
        }
        first = false;
        if (memcmp(type, "tEXt", 4) == 0 || memcmp(type, "zTXt", 4) == 0 || memcmp(type, "iTXt", 4) == 0)
            st = parse_chunk(&l, type, p + pos + 8, n, err);
        else if (memcmp(type, "IEND", 4) == 0) end = true;
        pos += 12 + (size_t)n;
    }
    if (st) {
        rb_png_texts_free(l.v, l.n);
        return st;
    }
    *texts = l.v;
    *n_texts = l.n;
    return RB_OK;
}

void rb_png_texts_free(rb_png_text *texts, size_t n) {
    if (!texts) return;
    for (size_t i = 0; i < n; i++) {
        free(texts[i].key);
        free(texts[i].text);
    }
    free(texts);
}

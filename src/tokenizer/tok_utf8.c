/* UTF-8 validation, lossy decoding and the GPT-2 byte-level map (see tok_utf8.h). */
#include "tokenizer/tok_utf8.h"

size_t tok_utf8_seq_len(const unsigned char *s, size_t avail) {
    if (avail == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) { n = 3; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) n = 3;
    else if (c == 0xED) { n = 3; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) n = 3;
    else if (c == 0xF0) { n = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) { n = 4; hi = 0x8F; }
    else return 0;
    if (avail < 2 || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (i >= avail || (s[i] & 0xC0) != 0x80) return 0;
    return n;
}

bool tok_utf8_validate(const char *s, size_t len, size_t *bad_off) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (u[i] < 0x80) { i++; continue; }
        size_t n = tok_utf8_seq_len(u + i, len - i);
        if (!n) {
            if (bad_off) *bad_off = i;
            return false;
        }
        i += n;
    }
    return true;
}

size_t tok_utf8_decode(const unsigned char *s, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    if (c < 0xE0) { *cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu); return 2; }
    if (c < 0xF0) { *cp = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu); return 3; }
    *cp = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    return 4;
}

size_t tok_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Bytes of the longest prefix of s that could start a valid sequence (the
 * "maximal subpart"), at least 1. */
static size_t maximal_subpart(const unsigned char *s, size_t avail) {
    unsigned c = s[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) { n = 3; lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) n = 3;
    else if (c == 0xED) { n = 3; hi = 0x9F; }
    else if (c == 0xF0) { n = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) { n = 4; hi = 0x8F; }
    else return 1;
    size_t i = 1;
    if (i < avail && s[1] >= lo && s[1] <= hi) {
        i = 2;
        while (i < n && i < avail && (s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

rb_status tok_utf8_lossy(const char *s, size_t len, tok_buf *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    rb_status st = tok_buf_reserve(out, len);
    if (st) return st;
    while (i < len) {
        size_t n = u[i] < 0x80 ? 1 : tok_utf8_seq_len(u + i, len - i);
        if (n) { i += n; continue; }
        st = tok_buf_append(out, s + run, i - run);
        if (!st) st = tok_buf_append(out, TOK_FFFD, 3);
        if (st) return st;
        i += maximal_subpart(u + i, len - i);
        run = i;
    }
    return tok_buf_append(out, s + run, len - run);
}

static bool byte_is_printable(unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
}

uint32_t tok_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    /* the non-printable bytes take 256, 257, ... in increasing byte order */
    uint32_t k = 0;
    for (unsigned x = 0; x < b; x++)
        if (!byte_is_printable(x)) k++;
    return 256 + k;
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t k = cp - 256;
    for (unsigned x = 0; x < 256; x++)
        if (!byte_is_printable(x) && k-- == 0) return (int)x;
    return -1;
}

bool tok_cp_is_ws(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

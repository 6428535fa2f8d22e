/* Implementation of wk_base64.h. */
#include "worker/wk_base64.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char k_alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t wk_base64_len(size_t n) { return (n + 2) / 3 * 4; }

char *wk_base64_encode(const void *data, size_t n) {
    if (n > (SIZE_MAX - 1) / 4 * 3 - 3) return NULL;
    const uint8_t *p = data;
    char *out = malloc(wk_base64_len(n) + 1);
    if (!out) return NULL;
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        const uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[o++] = k_alpha[v >> 18];
        out[o++] = k_alpha[(v >> 12) & 63];
        out[o++] = k_alpha[(v >> 6) & 63];
        out[o++] = k_alpha[v & 63];
    }
    if (i < n) {
        const uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        out[o++] = k_alpha[v >> 18];
        out[o++] = k_alpha[(v >> 12) & 63];
        out[o++] = i + 1 < n ? k_alpha[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}

json_t *wk_base64_json(const void *data, size_t n) {
    char *s = wk_base64_encode(data, n);
    if (!s) return NULL;
    json_t *j = json_stringn_nocheck(s, strlen(s));
    free(s);
    return j;
}

const char *wk_base64_error(wk_b64_result r) {
    switch (r) {
    case WK_B64_OK: return "ok";
    case WK_B64_EMPTY: return "empty";
    case WK_B64_BAD_CHAR: return "not valid base64: a character outside the base64 alphabet";
    case WK_B64_BAD_PAD: return "not valid base64: bad padding or length";
    case WK_B64_TOO_LARGE: return "the decoded data is too large";
    case WK_B64_NOMEM: return "out of memory";
    }
    return "not valid base64";
}

static int value_of(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Length of a "data:...;base64," prefix at s, or 0. */
static size_t data_url_prefix(const char *s, size_t len) {
    if (len < 5 || strncmp(s, "data:", 5) != 0) return 0;
    const char *comma = memchr(s, ',', len);
    if (!comma) return 0;
    const size_t n = (size_t)(comma - s);
    if (n < 12 || strncmp(comma - 7, ";base64", 7) != 0) return 0;
    return n + 1;
}

wk_b64_result wk_base64_decode(const char *s, size_t len, size_t max_out, uint8_t **out, size_t *out_len,
                               size_t *bad_offset) {
    *out = NULL;
    *out_len = 0;
    if (bad_offset) *bad_offset = 0;
    const size_t start = data_url_prefix(s, len);
    size_t digits = 0, pads = 0;
    for (size_t i = start; i < len; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (is_space(c)) continue;
        if (c == '=') {
            pads++;
            continue;
        }
        if (value_of(c) < 0 || pads > 0) { /* a digit after padding is as bad as a foreign character */
            if (bad_offset) *bad_offset = i;
            return pads > 0 && value_of(c) >= 0 ? WK_B64_BAD_PAD : WK_B64_BAD_CHAR;
        }
        digits++;
    }
    if (digits == 0 && pads == 0) return WK_B64_EMPTY;
    /* digits % 4: 0 complete, 2 or 3 a final partial group; padding, when
     * present, must complete the last group exactly */
    if (digits % 4 == 1 || pads > 2 || (pads > 0 && (digits + pads) % 4 != 0)) return WK_B64_BAD_PAD;
    const size_t n = digits / 4 * 3 + (digits % 4 == 0 ? 0 : digits % 4 - 1);
    if (n > max_out) return WK_B64_TOO_LARGE;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return WK_B64_NOMEM;
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = start; i < len; i++) {
        const int v = value_of((unsigned char)s[i]);
        if (v < 0) continue;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o < n) buf[o++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    *out = buf;
    *out_len = n;
    return WK_B64_OK;
}

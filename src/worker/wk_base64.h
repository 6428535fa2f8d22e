/* Base64 (RFC 4648, standard alphabet) for binary payloads carried in JSON:
 * images in and out of the image APIs. Decoding is strict about the
 * alphabet and the padding but skips ASCII whitespace (line-wrapped
 * base64, as Python's encodebytes writes it), and accepts a data URL
 * prefix ("data:image/png;base64,"), as browsers and image tools send. */
#ifndef RBEE_WK_BASE64_H
#define RBEE_WK_BASE64_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Encoded length of n bytes (without the NUL). */
size_t wk_base64_len(size_t n);
/* Encodes n bytes into a malloc'ed NUL-terminated string; NULL when out of memory. */
char *wk_base64_encode(const void *data, size_t n);
/* The same as a JSON string; NULL when out of memory. */
json_t *wk_base64_json(const void *data, size_t n);

typedef enum wk_b64_result {
    WK_B64_OK = 0,
    WK_B64_EMPTY,     /* nothing but whitespace (or an empty data URL) */
    WK_B64_BAD_CHAR,  /* a character outside the alphabet; *bad_offset says where */
    WK_B64_BAD_PAD,   /* '=' in the middle, too many, or a length that cannot be base64 */
    WK_B64_TOO_LARGE, /* the decoded size would exceed max_out */
    WK_B64_NOMEM,
} wk_b64_result;

/* A message for a result ("not valid base64: ..."). */
const char *wk_base64_error(wk_b64_result r);

/* Decodes s[0..len) into a malloc'ed buffer (*out, *out_len). A leading
 * "data:<type>;base64," is skipped. bad_offset (may be NULL) gets the
 * offset of the first bad character. */
wk_b64_result wk_base64_decode(const char *s, size_t len, size_t max_out, uint8_t **out, size_t *out_len,
                               size_t *bad_offset);

#endif

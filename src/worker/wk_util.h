/* Small helpers of the worker layer: UTF-8 validation of untrusted bytes
 * (and JSON strings made safe from them), constant-time comparison for API
 * tokens, clocks, RFC 3339 timestamps and random identifiers. */
#ifndef RBEE_WK_UTIL_H
#define RBEE_WK_UTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True if s[0..len) is well-formed UTF-8 (no overlongs, no surrogates, at
 * most U+10FFFF). On failure *bad_offset (may be NULL) gets the offset of
 * the first byte of the bad sequence. */
bool wk_utf8_valid(const char *s, size_t len, size_t *bad_offset);

/* JSON string from possibly-invalid UTF-8 (each bad byte becomes U+FFFD);
 * NULL only when out of memory. */
json_t *wk_json_text(const char *s, size_t len);

/* Copies s into buf (cap > 0 bytes, NUL-terminated) as valid UTF-8: each
 * bad byte becomes U+FFFD, and a cut for lack of room falls between
 * characters. Returns buf. */
char *wk_utf8_sanitize(const char *s, char *buf, size_t cap);

/* The shortest decimal text that reads back as exactly v ("2.0000001",
 * not "2"); buf of at least 32 bytes. Returns buf. */
char *wk_fmt_double(double v, char *buf, size_t len);

/* Compares two byte strings in time that depends only on their lengths, not
 * on where they differ. */
bool wk_ct_equal(const char *a, size_t alen, const char *b, size_t blen);

double wk_now_ms(void);        /* monotonic clock */
int64_t wk_unix_time(void);    /* wall clock, seconds */
/* Writes "2025-01-02T03:04:05.678Z" (UTC) into buf (>= 32 bytes). */
void wk_rfc3339_now(char *buf, size_t len);

/* Fills buf with n random bytes from the OS (getrandom); falls back to a
 * time-seeded mix if the OS refuses. */
void wk_random_bytes(void *buf, size_t n);
/* prefix + 24 hex digits of fresh randomness, e.g. "job-3fa2...". */
void wk_random_id(const char *prefix, char *buf, size_t len);

/* Sleeps ms milliseconds (restarts after signals). */
void wk_sleep_ms(int64_t ms);

#endif

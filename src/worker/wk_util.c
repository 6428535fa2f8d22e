/* Implementation of wk_util.h. */
#include "worker/wk_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

bool wk_utf8_valid(const char *s, size_t len, size_t *bad_offset) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        size_t n;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; min = 0x10000; }
        else goto bad;
        if (len - i <= n) goto bad;
        for (size_t k = 1; k <= n; k++) {
            if ((p[i + k] & 0xC0) != 0x80) goto bad;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) goto bad;
        i += n + 1;
    }
    return true;
bad:
    if (bad_offset) *bad_offset = i;
    return false;
}

json_t *wk_json_text(const char *s, size_t len) {
    if (wk_utf8_valid(s, len, NULL)) return json_stringn(s, len);
    char *buf = malloc(len * 3 + 1);
    if (!buf) return NULL;
    size_t w = 0, i = 0;
    while (i < len) {
        size_t bad = 0;
        if (wk_utf8_valid(s + i, len - i, &bad)) bad = len - i;
        memcpy(buf + w, s + i, bad);
        w += bad;
        i += bad;
        if (i < len) { /* one bad byte -> U+FFFD */
            memcpy(buf + w, "\xEF\xBF\xBD", 3);
            w += 3;
            i++;
        }
    }
    json_t *j = json_stringn(buf, w);
    free(buf);
    return j;
}

char *wk_utf8_sanitize(const char *s, char *buf, size_t cap) {
    size_t len = strlen(s), i = 0, w = 0;
    while (i < len) {
        size_t good = 0;
        if (wk_utf8_valid(s + i, len - i, &good)) good = len - i;
        /* copy whole characters of the good run while they fit */
        size_t take = 0;
        while (take < good) {
            size_t cl = 1;
            unsigned char c = (unsigned char)s[i + take];
            if (c >= 0xF0) cl = 4;
            else if (c >= 0xE0) cl = 3;
            else if (c >= 0xC0) cl = 2;
            if (w + take + cl >= cap) break;
            take += cl;
        }
        memcpy(buf + w, s + i, take);
        w += take;
        i += take;
        if (take < good) break; /* no room */
        if (i < len) {            /* one bad byte -> U+FFFD */
            if (w + 3 >= cap) break;
            memcpy(buf + w, "\xEF\xBF\xBD", 3);
            w += 3;
            i++;
        }
    }
    buf[w] = '\0';
    return buf;
}

char *wk_fmt_double(double v, char *buf, size_t len) {
    if (fabs(v) < 1e15 && v == (double)(long long)v) { /* whole numbers plainly: "30", not "3e+01" */
        snprintf(buf, len, "%.0f", v);
        return buf;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return buf;
    }
    return buf;
}

bool wk_ct_equal(const char *a, size_t alen, const char *b, size_t blen) {
    /* Walk the expected value (b) fully; fold the length difference in. */
    volatile unsigned char acc = (unsigned char)(alen != blen);
    for (size_t i = 0; i < blen; i++) {
        unsigned char x = i < alen ? (unsigned char)a[i] : 0;
        acc |= (unsigned char)(x ^ (unsigned char)b[i]);
    }
    return acc == 0;
}

double wk_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int64_t wk_unix_time(void) { return (int64_t)time(NULL); }

void wk_rfc3339_now(char *buf, size_t len) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03ldZ", base, ts.tv_nsec / 1000000L);
}

void wk_random_bytes(void *buf, size_t n) {
    unsigned char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(p + got, n - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (got == n) return;
    /* Fallback: splitmix64 over the clocks and address entropy. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)(uintptr_t)buf ^ (uint64_t)getpid();
    for (; got < n; got++) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        p[got] = (unsigned char)(z ^ (z >> 31));
    }
}

void wk_random_id(const char *prefix, char *buf, size_t len) {
    unsigned char r[12];
    wk_random_bytes(r, sizeof r);
    char hex[25];
    for (int i = 0; i < 12; i++) snprintf(hex + 2 * i, 3, "%02x", r[i]);
    snprintf(buf, len, "%s%s", prefix ? prefix : "", hex);
}

void wk_sleep_ms(int64_t ms) {
    if (ms <= 0) return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

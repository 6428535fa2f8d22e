/* Cross-origin resource sharing (--cors-origin): which browser origins may
 * call the API, and the headers of a preflight answer. Off unless
 * configured; "*" allows every origin. */
#ifndef RBEE_WK_CORS_H
#define RBEE_WK_CORS_H

#include <stdbool.h>
#include <stddef.h>

/* allowed: the configured value ("*" or "https://a.example,https://b.example").
 * origin: the request's Origin header. True when the origin may call;
 * then out gets the Access-Control-Allow-Origin value ("*" or the origin). */
bool wk_cors_allow(const char *allowed, const char *origin, char *out, size_t len);

/* The Access-Control-Allow-Headers value of a preflight: the requested
 * header names when they are a plain comma-separated token list, else the
 * ones the API uses. */
void wk_cors_allow_headers(const char *requested, char *out, size_t len);

#endif

/* Implementation of wk_cors.h. */
#include "worker/wk_cors.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

bool wk_cors_allow(const char *allowed, const char *origin, char *out, size_t len) {
    if (!allowed || !*allowed || !origin || !*origin) return false;
    if (strcmp(allowed, "*") == 0) {
        snprintf(out, len, "*");
        return true;
    }
    size_t ol = strlen(origin);
    for (const char *p = allowed; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        size_t n = (size_t)(e - p);
        while (n > 0 && p[n - 1] == ' ') n--;
        if (n > 0 && n == ol && strncmp(p, origin, n) == 0 && ol < len) {
            memcpy(out, origin, ol + 1);
            return true;
        }
        p = e;
    }
    return false;
}

void wk_cors_allow_headers(const char *requested, char *out, size_t len) {
    static const char dflt[] = "Authorization, Content-Type";
    bool ok = requested && *requested && strlen(requested) < len && strlen(requested) < 512;
    for (const char *p = requested; ok && *p; p++)
        ok = isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == ',' || *p == ' ';
    snprintf(out, len, "%s", ok ? requested : dflt);
}

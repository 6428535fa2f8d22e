/* Implementation of wk_auth.h. */
#include "worker/wk_auth.h"
#include "worker/wk_util.h"

#include <string.h>
#include <strings.h>

const char *wk_auth_check(const char *h, const char *token) {
    if (!token) return NULL;
    if (!h || !*h) return "MISSING_API_KEY";
    static const char bearer[] = "Bearer ";
    if (strncasecmp(h, bearer, sizeof bearer - 1) != 0) return "INVALID_API_KEY";
    const char *tok = h + sizeof bearer - 1;
    while (*tok == ' ') tok++;
    size_t n = strlen(tok);
    while (n > 0 && (tok[n - 1] == ' ' || tok[n - 1] == '\t')) n--;
    if (!wk_ct_equal(tok, n, token, strlen(token))) return "INVALID_API_KEY";
    return NULL;
}

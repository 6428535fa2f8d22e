/* Bearer-token authentication of a request: the Authorization header is
 * compared with the worker's token in constant time. */
#ifndef RBEE_WK_AUTH_H
#define RBEE_WK_AUTH_H

/* NULL when header authorizes token (or no token is configured); otherwise
 * the 401 code: "MISSING_API_KEY" or "INVALID_API_KEY". */
const char *wk_auth_check(const char *authorization_header, const char *token);

#endif

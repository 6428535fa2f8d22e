/* A worker's built-in web page: files embedded in the binary at build time
 * (cmake/embed.cmake turns them into a table of these), served as public
 * GET routes — the page itself needs no token; every API call it makes
 * carries the token the user types in, so authentication stays on.
 * --no-webui leaves them out. */
#ifndef RBEE_WK_WEB_H
#define RBEE_WK_WEB_H

#include "rbee/status.h"
#include "worker/wk_router.h"

#include <stddef.h>

typedef struct rb_embedded_file {
    const char *path;  /* URL path: "/", "/chat.js" */
    const char *ctype; /* content type */
    const unsigned char *data;
    size_t size;
} rb_embedded_file;

/* Registers every file as a public GET route. */
rb_status wk_web_add(wk_router *rt, const rb_embedded_file *files, int n, rb_error *err);

#endif

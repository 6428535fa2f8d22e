/* Implementation of wk_form.h: the collected body is fed to an
 * MHD_PostProcessor in one call; its iterator delivers each part in
 * chunks (offset 0 starts a part), which are appended here. The post
 * processor reports a body that ends before its closing boundary when it
 * is destroyed. It also refuses anything after the closing boundary, but
 * RFC 2046 allows an epilogue there (to be ignored) and clients send one
 * (the openai package ends its bodies with an extra CRLF): the body is fed
 * up to the end of the close-delimiter line. */
#include "worker/wk_form.h"
#include "worker/wk_http_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static bool new_part(wk_form *f, const char *key, const char *filename, const char *ctype) {
    if (f->n == WK_FORM_MAX_PARTS) {
        f->too_many = true;
        return false;
    }
    if (f->n == f->cap) {
        size_t nc = f->cap ? 2 * f->cap : 8;
        wk_form_part *np = realloc(f->parts, nc * sizeof *np);
        if (!np) {
            f->oom = true;
            return false;
        }
        f->parts = np;
        f->cap = nc;
    }
    wk_form_part *p = &f->parts[f->n];
    memset(p, 0, sizeof *p);
    p->name = strdup(key ? key : "");
    p->filename = dup_or_null(filename);
    p->content_type = dup_or_null(ctype);
    p->data = malloc(1);
    if (!p->name || (filename && !p->filename) || (ctype && !p->content_type) || !p->data) {
        free(p->name);
        free(p->filename);
        free(p->content_type);
        free(p->data);
        f->oom = true;
        return false;
    }
    p->data[0] = '\0';
    f->n++;
    return true;
}

static enum MHD_Result on_part(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                               const char *content_type, const char *transfer_encoding, const char *data, uint64_t off,
                               size_t size) {
    (void)kind;
    (void)transfer_encoding;
    wk_form *f = cls;
    wk_form_part *cur = f->n ? &f->parts[f->n - 1] : NULL;
    const bool same = cur && off == cur->len && off > 0 && key && !strcmp(key, cur->name);
    if (!same) {
        if (off != 0) return MHD_NO; /* a continuation of nothing */
        if (!new_part(f, key, filename, content_type)) return MHD_NO;
        cur = &f->parts[f->n - 1];
    }
    if (size == 0) return MHD_YES;
    uint8_t *nd = realloc(cur->data, cur->len + size + 1);
    if (!nd) {
        f->oom = true;
        return MHD_NO;
    }
    memcpy(nd + cur->len, data, size);
    cur->data = nd;
    cur->len += size;
    cur->data[cur->len] = '\0';
    return MHD_YES;
}

/* The boundary parameter of a multipart Content-Type (quotes removed), or
 * false. */
static bool boundary_of(const char *ct, char *out, size_t cap) {
    const char *b = strcasestr(ct, "boundary=");
    if (!b) return false;
    b += 9;
    size_t n = 0;
    if (*b == '"') {
        b++;
        while (b[n] && b[n] != '"') n++;
    } else {
        while (b[n] && b[n] != ';' && b[n] != ' ' && b[n] != '\t') n++;
    }
    if (n == 0 || n + 1 > cap) return false;
    memcpy(out, b, n);
    out[n] = '\0';
    return true;
}

/* Length of body up to the end of its close delimiter ("--" boundary "--",
 * at the start or after CRLF) and that line's CRLF; len when there is none. */
static size_t without_epilogue(const char *body, size_t len, const char *boundary) {
    char delim[128];
    const int dn = snprintf(delim, sizeof delim, "--%s--", boundary);
    if (dn <= 0 || (size_t)dn >= sizeof delim || (size_t)dn > len) return len;
    for (size_t i = 0; i + (size_t)dn <= len; i++) {
        if (memcmp(body + i, delim, (size_t)dn) != 0) continue;
        if (i != 0 && (i < 2 || body[i - 2] != '\r' || body[i - 1] != '\n')) continue;
        size_t end = i + (size_t)dn;
        if (end + 2 <= len && body[end] == '\r' && body[end + 1] == '\n') end += 2;
        return end;
    }
    return len;
}

rb_status wk_req_form(wk_req *r, wk_form *out, rb_error *err) {
    memset(out, 0, sizeof *out);
    const char *ct = wk_req_header(r, "Content-Type");
    if (!ct) return rb_error_set(err, RB_E_FORMAT, "the request has no Content-Type; send multipart/form-data");
    struct MHD_PostProcessor *pp = MHD_create_post_processor(r->conn, 64 * 1024, on_part, out);
    if (!pp)
        return rb_error_set(err, RB_E_FORMAT, "the body must be multipart/form-data (with a boundary) or "
                            "application/x-www-form-urlencoded");
    size_t len = 0;
    const char *body = wk_req_body(r, &len);
    char boundary[100];
    if (strncasecmp(ct, "multipart/", 10) == 0 && boundary_of(ct, boundary, sizeof boundary))
        len = without_epilogue(body, len, boundary);
    enum MHD_Result res = len ? MHD_post_process(pp, body, len) : MHD_YES;
    enum MHD_Result fin = MHD_destroy_post_processor(pp);
    if (out->oom) return rb_error_set(err, RB_E_NOMEM, "out of memory reading the form");
    if (out->too_many) return rb_error_set(err, RB_E_RANGE, "the form has more than %d parts", WK_FORM_MAX_PARTS);
    if (res != MHD_YES || fin != MHD_YES)
        return rb_error_set(err, RB_E_FORMAT, "the form body is malformed or truncated (no closing boundary)");
    return RB_OK;
}

const wk_form_part *wk_form_get(const wk_form *f, const char *name) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->parts[i].name, name)) return &f->parts[i];
    return NULL;
}

size_t wk_form_count(const wk_form *f, const char *name) {
    size_t c = 0;
    for (size_t i = 0; i < f->n; i++) c += !strcmp(f->parts[i].name, name);
    return c;
}

void wk_form_free(wk_form *f) {
    for (size_t i = 0; i < f->n; i++) {
        free(f->parts[i].name);
        free(f->parts[i].filename);
        free(f->parts[i].content_type);
        free(f->parts[i].data);
    }
    free(f->parts);
    memset(f, 0, sizeof *f);
}

/* wk_req_form through the real transport: a server on 127.0.0.1 whose one
 * route parses its body as a form and answers the parts, fed raw HTTP
 * requests over a socket. Checked: multipart fields and files with bytes
 * that look like framing (CRLF, "--", the boundary without its CRLF, NUL,
 * every byte value), a file larger than the parser's buffer, empty and
 * repeated fields, url-encoded forms, and the refusals: a body cut before
 * the closing boundary, a content type that is no form, a multipart type
 * without a boundary, too many parts; an epilogue after the closing
 * boundary is ignored, as RFC 2046 says. */
#include "testutil.h"

#include "worker/wk_base64.h"
#include "worker/wk_config.h"
#include "worker/wk_form.h"
#include "worker/wk_http.h"
#include "worker/wk_log.h"
#include "worker/wk_metrics.h"
#include "worker/wk_router.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static bool route_form(wk_req *r, void *ctx) {
    (void)ctx;
    wk_form f;
    rb_error err;
    rb_error_clear(&err);
    rb_status s = wk_req_form(r, &f, &err);
    if (s != RB_OK) {
        wk_form_free(&f);
        return wk_reply_json(r, 400, json_pack("{s:s,s:s}", "status", rb_status_str(s), "message", err.msg));
    }
    json_t *parts = json_array();
    for (size_t i = 0; i < f.n; i++) {
        const wk_form_part *p = &f.parts[i];
        json_array_append_new(parts, json_pack("{s:s,s:s?,s:s?,s:I,s:o}", "name", p->name, "filename", p->filename,
                                               "type", p->content_type, "len", (json_int_t)p->len, "data",
                                               wk_base64_json(p->data, p->len)));
    }
    wk_form_free(&f);
    return wk_reply_json(r, 200, json_pack("{s:o}", "parts", parts));
}

typedef struct srv {
    wk_config cfg;
    wk_log log;
    wk_metrics metrics;
    wk_router router;
    wk_http *http;
    int port;
} srv;

static int setup(void **state) {
    srv *s = calloc(1, sizeof *s);
    assert_non_null(s);
    wk_config_defaults(&s->cfg, "form-test");
    s->cfg.local_mode = true;
    s->cfg.max_body_bytes = 4 << 20;
    wk_log_init(&s->log, stderr, false, WK_LOG_WARN, "form-test");
    wk_metrics_init(&s->metrics);
    wk_router_init(&s->router);
    TU_OK(wk_router_add(&s->router, "POST", "/form", route_form, NULL, NULL, 0, NULL));
    wk_http_opts o = {.cfg = &s->cfg, .router = &s->router, .metrics = &s->metrics, .log = &s->log};
    TU_OK(wk_http_start(&o, &s->http, &s->port, NULL));
    *state = s;
    return 0;
}

static int teardown(void **state) {
    srv *s = *state;
    wk_http_stop(s->http);
    wk_router_destroy(&s->router);
    wk_metrics_destroy(&s->metrics);
    wk_log_destroy(&s->log);
    free(s);
    return 0;
}

/* Sends one request with the given content type and body; returns the
 * status and the parsed JSON answer. */
static json_t *post(srv *s, const char *ctype, const void *body, size_t len, int *status) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "POST /form HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s%s%sContent-Length: %zu\r\n\r\n",
                      ctype ? "Content-Type: " : "", ctype ? ctype : "", ctype ? "\r\n" : "", len);
    assert_int_equal(write(fd, head, (size_t)hn), hn);
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, (const char *)body + off, len - off);
        assert_true(w > 0);
        off += (size_t)w;
    }
    size_t cap = 1 << 16, n = 0;
    char *resp = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) resp = realloc(resp, cap *= 2);
        ssize_t r = read(fd, resp + n, cap - n - 1);
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    resp[n] = '\0';
    assert_true(sscanf(resp, "HTTP/1.1 %d", status) == 1);
    const char *b = strstr(resp, "\r\n\r\n");
    assert_non_null(b);
    json_error_t je;
    json_t *j = json_loads(b + 4, 0, &je);
    if (!j) fail_msg("bad answer: %s", resp);
    free(resp);
    return j;
}

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

static void part(buf *b, const char *bnd, const char *name, const char *filename, const char *type, const void *d,
                 size_t n) {
    char h[512];
    snprintf(h, sizeof h, "--%s\r\nContent-Disposition: form-data; name=\"%s\"%s%s%s\r\n%s%s%s\r\n", bnd, name,
             filename ? "; filename=\"" : "", filename ? filename : "", filename ? "\"" : "",
             type ? "Content-Type: " : "", type ? type : "", type ? "\r\n" : "");
    puts_(b, h);
    put(b, d, n);
    puts_(b, "\r\n");
}

static void check_part(json_t *parts, size_t i, const char *name, const char *filename, const void *d, size_t n) {
    json_t *p = json_array_get(parts, i);
    assert_non_null(p);
    assert_string_equal(json_string_value(json_object_get(p, "name")), name);
    if (filename) assert_string_equal(json_string_value(json_object_get(p, "filename")), filename);
    else assert_null(json_string_value(json_object_get(p, "filename")));
    assert_int_equal(json_integer_value(json_object_get(p, "len")), n);
    const char *b64 = json_string_value(json_object_get(p, "data"));
    uint8_t *got = NULL;
    size_t gn = 0;
    if (n == 0) {
        assert_string_equal(b64, "");
        return;
    }
    assert_int_equal(wk_base64_decode(b64, strlen(b64), n, &got, &gn, NULL), WK_B64_OK);
    assert_int_equal(gn, n);
    assert_memory_equal(got, d, n);
    free(got);
}

static void test_multipart(void **state) {
    srv *s = *state;
    const char *bnd = "----rbeeBoundary7MA4YWxk";
    /* a file whose bytes imitate the framing (but hold no delimiter, CRLF +
     * "--" + the boundary, which RFC 2046 forbids inside a part), and every
     * byte value */
    buf file = {0};
    puts_(&file, "\r\n--\r\nx------rbeeBoundary7MA4YWxk not after a line break\r\n");
    puts_(&file, "x\r\n----rbeeBoundary7MA4YWx\r\n"); /* the boundary minus one character */
    for (int i = 0; i < 256; i++) {
        char c = (char)i;
        put(&file, &c, 1);
    }
    put(&file, "\0\0\r\n", 4);
    /* larger than the parser's 64 KiB buffer */
    buf big = {0};
    tu_rng rng;
    tu_rng_seed(&rng, 3);
    for (int i = 0; i < 200000; i++) {
        char c = (char)tu_rng_u64(&rng);
        put(&big, &c, 1);
    }
    buf b = {0};
    part(&b, bnd, "prompt", NULL, NULL, "a cat\r\non two lines", 19);
    part(&b, bnd, "image", "in.png", "image/png", file.p, file.n);
    part(&b, bnd, "empty", NULL, NULL, "", 0);
    part(&b, bnd, "n", NULL, NULL, "2", 1);
    part(&b, bnd, "n", NULL, NULL, "3", 1);
    part(&b, bnd, "mask", "m.bin", "application/octet-stream", big.p, big.n);
    puts_(&b, "--");
    puts_(&b, bnd);
    puts_(&b, "--\r\n");
    char ct[128];
    snprintf(ct, sizeof ct, "multipart/form-data; boundary=%s", bnd);
    int st = 0;
    json_t *j = post(s, ct, b.p, b.n, &st);
    if (st != 200) fail_msg("status %d: %s", st, json_dumps(j, 0));
    json_t *parts = json_object_get(j, "parts");
    assert_int_equal(json_array_size(parts), 6);
    check_part(parts, 0, "prompt", NULL, "a cat\r\non two lines", 19);
    check_part(parts, 1, "image", "in.png", file.p, file.n);
    assert_string_equal(json_string_value(json_object_get(json_array_get(parts, 1), "type")), "image/png");
    check_part(parts, 2, "empty", NULL, "", 0);
    check_part(parts, 3, "n", NULL, "2", 1);
    check_part(parts, 4, "n", NULL, "3", 1);
    check_part(parts, 5, "mask", "m.bin", big.p, big.n);
    json_decref(j);

    /* an epilogue after the close delimiter is ignored (RFC 2046; the openai
     * package sends an extra CRLF) */
    buf epi = {0};
    put(&epi, b.p, b.n);
    puts_(&epi, "\r\nthis is the epilogue\r\n");
    j = post(s, ct, epi.p, epi.n, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(json_object_get(j, "parts")), 6);
    check_part(json_object_get(j, "parts"), 5, "mask", "m.bin", big.p, big.n);
    json_decref(j);
    free(epi.p);
    /* the boundary quoted in the content type */
    char qct[128];
    snprintf(qct, sizeof qct, "multipart/form-data; boundary=\"%s\"", bnd);
    j = post(s, qct, b.p, b.n, &st);
    assert_int_equal(st, 200);
    json_decref(j);
    /* cut before the closing boundary, in the middle of a part */
    j = post(s, ct, b.p, b.n - 300, &st);
    assert_int_equal(st, 400);
    assert_string_equal(json_string_value(json_object_get(j, "status")), rb_status_str(RB_E_FORMAT));
    printf("  truncated: %s\n", json_string_value(json_object_get(j, "message")));
    json_decref(j);
    /* no form at all */
    j = post(s, "application/json", "{}", 2, &st);
    assert_int_equal(st, 400);
    assert_string_equal(json_string_value(json_object_get(j, "status")), rb_status_str(RB_E_FORMAT));
    json_decref(j);
    j = post(s, NULL, "a=1", 3, &st);
    assert_int_equal(st, 400);
    json_decref(j);
    j = post(s, "multipart/form-data", b.p, b.n, &st);
    assert_int_equal(st, 400);
    json_decref(j);
    /* more parts than allowed */
    buf many = {0};
    for (int i = 0; i < WK_FORM_MAX_PARTS + 1; i++) part(&many, bnd, "f", NULL, NULL, "v", 1);
    puts_(&many, "--");
    puts_(&many, bnd);
    puts_(&many, "--\r\n");
    j = post(s, ct, many.p, many.n, &st);
    assert_int_equal(st, 400);
    assert_string_equal(json_string_value(json_object_get(j, "status")), rb_status_str(RB_E_RANGE));
    json_decref(j);
    free(many.p);
    free(b.p);
    free(file.p);
    free(big.p);
}

static void test_urlencoded(void **state) {
    srv *s = *state;
    const char *body = "prompt=a%20red%20fox&n=2&note=%E2%9C%93";
    int st = 0;
    json_t *j = post(s, "application/x-www-form-urlencoded", body, strlen(body), &st);
    assert_int_equal(st, 200);
    json_t *parts = json_object_get(j, "parts");
    assert_int_equal(json_array_size(parts), 3);
    check_part(parts, 0, "prompt", NULL, "a red fox", 9);
    check_part(parts, 1, "n", NULL, "2", 1);
    check_part(parts, 2, "note", NULL, "\xe2\x9c\x93", 3);
    json_decref(j);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multipart),
        cmocka_unit_test(test_urlencoded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

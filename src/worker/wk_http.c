/* Implementation of wk_http.h and wk_req.h: libmicrohttpd setup (address
 * family, TLS), the access handler (the head's verdict from wk_dispatch.h,
 * body collection, dispatch) and the reply helpers every handler uses. */
#include "worker/wk_conn.h"
#include "worker/wk_dispatch.h"
#include "worker/wk_http_internal.h"
#include "worker/wk_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define WK_TLS_FILE_MAX ((size_t)1 << 20)

/* Connections beyond --max-connections that libmicrohttpd still accepts, so
 * the tracker can evict a stalled one to make room. */
#define WK_CONN_RESERVE 64

struct wk_http {
    struct MHD_Daemon *mhd;
    wk_http_opts o;
    wk_metric *requests, *duration;
    wk_conns conns;
    bool conns_ok;
    char host[80];
    char *tls_cert, *tls_key;
};

/* ---- request accessors ---- */

const char *wk_req_method(const wk_req *r) { return r->method; }
const char *wk_req_path(const wk_req *r) { return r->path ? r->path : ""; }
const char *wk_req_route_label(const wk_req *r) { return r->route ? r->route->label : "other"; }
bool wk_req_openai(const wk_req *r) { return r->route && (r->route->flags & WK_ROUTE_OPENAI); }
double wk_req_start_ms(const wk_req *r) { return r->t0; }

const char *wk_req_param(const wk_req *r, const char *name) {
    size_t nl = strlen(name);
    for (int i = 0; i < r->params.n; i++)
        if (r->params.name_lens[i] == nl && strncmp(r->params.names[i], name, nl) == 0) return r->params.values[i];
    return NULL;
}

const char *wk_req_body(const wk_req *r, size_t *len) {
    if (len) *len = r->body ? r->len : 0;
    return r->body ? r->body : "";
}

const char *wk_req_header(wk_req *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *wk_req_query(wk_req *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

bool wk_req_client_gone(wk_req *r) { return wk_http_conn_gone(r->conn); }

bool wk_http_conn_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    /* A peer that only shut its write side (half-close) is still there:
     * only a reset or a hangup means it left (TCP keepalive turns a vanished
     * peer into one). */
    struct pollfd p = {.fd = ci->connect_fd, .events = 0, .revents = 0};
    if (poll(&p, 1, 0) < 0) return false;
    return (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
}

/* ---- replies ---- */

void wk_req_count(wk_req *r, int status) {
    char st[16];
    snprintf(st, sizeof st, "%d", status);
    const char *labels[] = {wk_req_route_label(r), st};
    wk_counter_add(r->h->requests, labels, 1);
    r->counted = true;
}

void wk_http_add_cors(wk_req *r, struct MHD_Response *resp) {
    if (!r->cors[0]) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->cors);
    if (strcmp(r->cors, "*") != 0) MHD_add_response_header(resp, "Vary", "Origin");
}

bool wk_http_queue(wk_req *r, int status, struct MHD_Response *resp) {
    if (!resp) {
        wk_req_count(r, 500);
        return false;
    }
    wk_http_add_cors(r, resp);
    enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    wk_req_count(r, status);
    return ret == MHD_YES;
}

bool wk_reply_text(wk_req *r, int status, const char *ctype, char *text) {
    if (!text) return wk_reply_error(r, 500, "INTERNAL", "server_error", "out of memory");
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return wk_http_queue(r, 500, NULL);
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    return wk_http_queue(r, status, resp);
}

bool wk_reply_static(wk_req *r, int status, const char *ctype, const void *data, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_PERSISTENT);
    if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    return wk_http_queue(r, status, resp);
}

bool wk_reply_json_hdr(wk_req *r, int status, json_t *body, const char *hname, const char *hval) {
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s) {
        static const char oom[] = "{\"error\":{\"code\":\"INTERNAL\",\"message\":\"out of memory\"}}";
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        return wk_http_queue(r, 500, resp);
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(s);
        return wk_http_queue(r, 500, NULL);
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (hname) MHD_add_response_header(resp, hname, hval);
    return wk_http_queue(r, status, resp);
}

bool wk_reply_json(wk_req *r, int status, json_t *body) { return wk_reply_json_hdr(r, status, body, NULL, NULL); }

bool wk_reply_error(wk_req *r, int status, const char *code, const char *type, const char *msg) {
    json_t *j = json_pack("{s:{s:s,s:o,s:s}}", "error", "code", code, "message", wk_json_text(msg, strlen(msg)),
                          "type", type);
    return wk_reply_json(r, status, j);
}

bool wk_reply_invalid(wk_req *r, const wk_errors *errs) {
    return wk_reply_json(r, 400, wk_req_openai(r) ? wk_errors_openai_json(errs) : wk_errors_json(errs));
}

bool wk_reply_unavailable(wk_req *r, const char *code, const char *msg) {
    json_t *j = json_pack("{s:{s:s,s:s,s:s}}", "error", "code", code, "message", msg, "type", "overloaded_error");
    return wk_reply_json_hdr(r, 503, j, MHD_HTTP_HEADER_RETRY_AFTER, "1");
}

/* ---- the access handler ---- */

static bool reply_preflight(wk_req *r, const wk_dispatch *d) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return wk_http_queue(r, 500, NULL);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", d->allow);
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", d->allow_headers);
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    return wk_http_queue(r, 204, resp);
}

static bool reply_unauthorized(wk_req *r, const char *code) {
    const char *msg = strcmp(code, "MISSING_API_KEY") == 0 ? "missing API key: send Authorization: Bearer <token>"
                                                            : "invalid API key";
    json_t *j = json_pack("{s:{s:s,s:s,s:s}}", "error", "code", code, "message", msg, "type", "authentication_error");
    return wk_reply_json_hdr(r, 401, j, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
}

static bool reply_body_too_big(wk_req *r) {
    wk_errors e = {.n = 0};
    wk_errors_add(&e, "body", "max_bytes", "the request body exceeds the limit of %lld bytes",
                  (long long)r->h->o.cfg->max_body_bytes);
    return wk_reply_json(r, MHD_HTTP_CONTENT_TOO_LARGE, wk_req_openai(r) ? wk_errors_openai_json(&e) : wk_errors_json(&e));
}

static bool reply_plain_error(wk_req *r, int status, const char *code, const char *msg) {
    return wk_reply_error(r, status, code, "invalid_request_error", msg);
}

/* The head as wk_dispatch.h reads it: libmicrohttpd's header table. */
static const char *mhd_header(void *ctx, const char *name) {
    return MHD_lookup_connection_value(ctx, MHD_HEADER_KIND, name);
}

typedef struct each_ctx { wk_header_fn fn; void *acc; } each_ctx;

static enum MHD_Result each_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                   const char *value, size_t value_size) {
    (void)kind;
    const each_ctx *e = cls;
    e->fn(e->acc, key, key_size, value, value_size);
    return MHD_YES;
}

static void mhd_each(void *ctx, wk_header_fn fn, void *acc) {
    each_ctx e = {fn, acc};
    MHD_get_connection_values_n(ctx, MHD_HEADER_KIND, each_header, &e);
}

/* Applies the head's verdict: true (reply queued or none needed) or false. */
static bool apply_verdict(wk_req *r, const wk_dispatch *d) {
    char msg[200];
    switch (d->verdict) {
    case WK_GO: return true;
    case WK_BAD_METHOD:
        return reply_plain_error(r, MHD_HTTP_NOT_IMPLEMENTED, "BAD_METHOD", "the request method is not a valid token");
    case WK_BAD_TE:
        return reply_plain_error(r, MHD_HTTP_NOT_IMPLEMENTED, "UNSUPPORTED_TRANSFER_ENCODING",
                                 "only the chunked transfer encoding is supported");
    case WK_BAD_FRAMING: return reply_plain_error(r, 400, "BAD_FRAMING", d->msg);
    case WK_CORS_DENIED:
        return wk_reply_error(r, 403, "CORS_ORIGIN_NOT_ALLOWED", "invalid_request_error",
                              "this origin may not call the API (see --cors-origin)");
    case WK_PREFLIGHT: return reply_preflight(r, d);
    case WK_UNAUTHORIZED: return reply_unauthorized(r, d->code);
    case WK_NOT_ALLOWED: {
        snprintf(msg, sizeof msg, "method %.16s is not allowed here (allowed: %s)", r->method, d->allow);
        json_t *j = json_pack("{s:{s:s,s:s,s:s}}", "error", "code", "METHOD_NOT_ALLOWED", "message", msg, "type",
                              "invalid_request_error");
        return wk_reply_json_hdr(r, 405, j, MHD_HTTP_HEADER_ALLOW, d->allow);
    }
    case WK_TOO_BIG:
        r->too_big = true;
        return reply_body_too_big(r);
    }
    return false;
}

/* First call for a request: headers only. Returns MHD_YES to go on reading
 * the body, or the result of an early reply. */
static enum MHD_Result begin(wk_http *h, wk_req *r, const char *url, const char *method) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci && ci->socket_context) wk_conns_head_done(&h->conns, ci->socket_context);
    wk_head head = {.method = method, .url = url, .ctx = r->conn, .header = mhd_header, .each = mhd_each};
    wk_dispatch d;
    wk_dispatch_head(h->o.cfg, h->o.router, &head, &d);
    bool bad_method = d.verdict == WK_BAD_METHOD;
    snprintf(r->method, sizeof r->method, "%s", bad_method ? "?" : method);
    r->path = strdup(bad_method ? "" : url);
    if (!r->path) return MHD_NO;
    r->route = d.route;
    r->params = d.params;
    memcpy(r->cors, d.cors, sizeof r->cors);
    return apply_verdict(r, &d) ? MHD_YES : MHD_NO;
}

/* A chunked body that crosses --max-body-bytes is not stored; the rest is
 * read and dropped up to WK_BODY_DRAIN more bytes so the 413 reaches the
 * client (closing a socket with unread input resets it, and the client
 * then sees no answer at all); past that the connection is closed at once,
 * so an endless upload costs at most that much reading. */
#define WK_BODY_DRAIN ((size_t)1 << 20)

static enum MHD_Result append_body(wk_http *h, wk_req *r, const char *data, size_t n) {
    const size_t cap_max = (size_t)h->o.cfg->max_body_bytes;
    if (r->too_big) {
        r->len += n; /* counts the dropped bytes */
        return r->len > WK_BODY_DRAIN ? MHD_NO : MHD_YES;
    }
    if (r->len + n > cap_max) {
        r->too_big = true;
        free(r->body);
        r->body = NULL;
        r->len = n;
        r->cap = 0;
        return MHD_YES;
    }
    if (r->len + n + 1 > r->cap) {
        size_t nc = r->cap ? r->cap : 4096;
        while (nc < r->len + n + 1) nc *= 2;
        if (nc > cap_max + 1) nc = cap_max + 1;
        char *nb = realloc(r->body, nc);
        if (!nb) return MHD_NO;
        r->body = nb;
        r->cap = nc;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    wk_http *h = cls;
    wk_req *r = *con_cls;
    if (!r) return MHD_NO; /* out of memory when the request line came */
    if (!r->begun) {       /* the head is complete: its first call */
        r->begun = true;
        r->conn = c;
        return begin(h, r, url, method);
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return append_body(h, r, upload_data, n);
    }
    if (r->too_big) return reply_body_too_big(r) ? MHD_YES : MHD_NO;
    if (!r->route) {
        char msg[300];
        snprintf(msg, sizeof msg, "no route for %.16s %.200s", method, url);
        return wk_reply_error(r, 404, "NOT_FOUND", "invalid_request_error", msg) ? MHD_YES : MHD_NO;
    }
    return r->route->fn(r, r->route->ctx) ? MHD_YES : MHD_NO;
}

/* Called when a request line arrives, before its headers: the request's
 * state starts here (it becomes *con_cls), so a request the HTTP library
 * refuses on its own (a malformed or oversized head) is still counted. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)uri;
    wk_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->h = cls;
    r->conn = c;
    r->t0 = wk_now_ms();
    return r;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    wk_http *h = cls;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci && ci->socket_context) wk_conns_request_done(&h->conns, ci->socket_context);
    wk_req *r = *con_cls;
    if (!r) return;
    if (!r->begun && !r->counted) { /* answered by libmicrohttpd itself: a malformed or oversized request head */
        const char *lv[] = {"other", "rejected"};
        wk_counter_add(h->requests, lv, 1);
    }
    const char *labels[] = {wk_req_route_label(r)};
    wk_histogram_observe(h->duration, labels, (wk_now_ms() - r->t0) / 1e3);
    free(r->path);
    free(r->body);
    free(r);
    *con_cls = NULL;
}

/* Connection opened / closed: the tracker of wk_conn.h. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    wk_http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        wk_conns_close(&h->conns, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ad = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char peer[64] = "";
    if (ad && ad->client_addr) {
        const struct sockaddr *sa = ad->client_addr;
        if (sa->sa_family == AF_INET) {
            inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, peer, sizeof peer);
        } else if (sa->sa_family == AF_INET6) {
            const struct in6_addr *a6 = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
            if (IN6_IS_ADDR_V4MAPPED(a6)) inet_ntop(AF_INET, (const char *)a6 + 12, peer, sizeof peer);
            else inet_ntop(AF_INET6, a6, peer, sizeof peer);
        }
    }
    *socket_context = fd ? wk_conns_open(&h->conns, fd->connect_fd, peer) : NULL;
}

static double conns_evicted(void *u) {
    wk_conns *c = u;
    pthread_mutex_lock(&c->mu);
    double v = (double)(c->evicted + c->head_timeouts + c->refused);
    pthread_mutex_unlock(&c->mu);
    return v;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    wk_http *h = cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = '\0';
    WK_DEBUG(h->o.log, "http", "%s", buf);
}

/* Reads a PEM file (bounded) into a NUL-terminated string. */
static rb_status read_pem(const char *path, const char *what, char **out, rb_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return rb_error_set(err, RB_E_IO, "cannot open the TLS %s %s", what, path);
    char *buf = malloc(WK_TLS_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, WK_TLS_FILE_MAX + 1, f) : 0;
    bool bad = ferror(f) != 0;
    fclose(f);
    if (!buf) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    if (bad || n == 0 || n > WK_TLS_FILE_MAX || !strstr(buf, "-----BEGIN")) {
        free(buf);
        return rb_error_set(err, RB_E_FORMAT, "the TLS %s %s is not a PEM file (or is over 1 MiB)", what, path);
    }
    buf[n] = '\0';
    *out = buf;
    return RB_OK;
}

/* Parses the listen address into sa; sets the address-family flags. */
static rb_status listen_addr(wk_http *h, const char *addr, int port, struct sockaddr_storage *sa, unsigned *flags,
                             rb_error *err) {
    memset(sa, 0, sizeof *sa);
    char a[64];
    size_t n = strlen(addr);
    if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']') { /* [::1] */
        if (n - 2 >= sizeof a) return rb_error_set(err, RB_E_INVALID, "bad listen address '%s'", addr);
        memcpy(a, addr + 1, n - 2);
        a[n - 2] = '\0';
    } else {
        snprintf(a, sizeof a, "%s", addr);
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
    if (inet_pton(AF_INET, a, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        snprintf(h->host, sizeof h->host, "%s", a);
        return RB_OK;
    }
    if (inet_pton(AF_INET6, a, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        *flags |= IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr) ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
        snprintf(h->host, sizeof h->host, "[%s]", a);
        return RB_OK;
    }
    return rb_error_set(err, RB_E_INVALID, "bad listen address '%s' (an IPv4 or IPv6 address is expected)", addr);
}

static void free_http(wk_http *h) {
    if (h->conns_ok) wk_conns_destroy(&h->conns);
    free(h->tls_cert);
    free(h->tls_key);
    free(h);
}

rb_status wk_http_start(const wk_http_opts *o, wk_http **out, int *out_port, rb_error *err) {
    *out = NULL;
    wk_http *h = calloc(1, sizeof *h);
    if (!h) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    h->o = *o;
    const wk_config *cfg = o->cfg;
    const char *const route_label[] = {"route", "status", NULL};
    h->requests = wk_metrics_counter(o->metrics, "llorch_requests_total", "HTTP requests by route and status code.",
                                     route_label);
    const char *const route_only[] = {"route", NULL};
    h->duration = wk_metrics_histogram(o->metrics, "llorch_request_duration_seconds",
                                       "Time from a request's arrival to the end of its reply (streams included).",
                                       route_only, wk_latency_buckets, wk_latency_buckets_n);
    wk_metrics_counter_fn(o->metrics, "llorch_http_connections_dropped_total",
                          "Connections closed for not completing a request head in time, or evicted or refused "
                          "at the connection limits.",
                          conns_evicted, &h->conns);
    wk_conns_init(&h->conns, (int)cfg->max_connections, (int)cfg->max_per_client, 1e3 * (double)cfg->header_timeout_s,
                  1e3 * (double)cfg->http_timeout_s);
    h->conns_ok = true;
    if (wk_conns_start(&h->conns) != 0) {
        free_http(h);
        return rb_error_set(err, RB_E_NOMEM, "cannot start the connection watch thread");
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    const char *addr = cfg->bind_addr ? cfg->bind_addr : cfg->local_mode ? "127.0.0.1" : "0.0.0.0";
    struct sockaddr_storage sa;
    rb_status s = listen_addr(h, addr, (int)cfg->port, &sa, &flags, err);
    if (s == RB_OK && cfg->tls_cert) {
        if (!MHD_is_feature_supported(MHD_FEATURE_TLS))
            s = rb_error_set(err, RB_E_UNSUPPORTED, "this libmicrohttpd was built without TLS support");
        else if ((s = read_pem(cfg->tls_cert, "certificate", &h->tls_cert, err)) == RB_OK)
            s = read_pem(cfg->tls_key, "key", &h->tls_key, err);
        flags |= MHD_USE_TLS;
    }
    if (s != RB_OK) {
        free_http(h);
        return s;
    }
    struct MHD_OptionItem tls_opts[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls_cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls_key},
        {MHD_OPTION_END, 0, NULL},
    };
    h->mhd = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, h,
                              MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections + WK_CONN_RESERVE,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->http_timeout_s,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, (void *)h,
                              MHD_OPTION_NOTIFY_CONNECTION, on_connection, (void *)h,
                              MHD_OPTION_URI_LOG_CALLBACK, on_request_line, (void *)h,
                              MHD_OPTION_THREAD_STACK_SIZE, (size_t)1 << 20,
                              MHD_OPTION_EXTERNAL_LOGGER, mhd_log, (void *)h,
                              MHD_OPTION_ARRAY, cfg->tls_cert ? tls_opts : tls_opts + 2,
                              MHD_OPTION_END);
    if (!h->mhd) {
        rb_error_set(err, RB_E_IO, "cannot listen on %s:%lld%s", h->host, (long long)cfg->port,
                     cfg->tls_cert ? " (port in use, or the TLS certificate and key do not match?)" : " (port in use?)");
        free_http(h);
        return RB_E_IO;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
    *out_port = di ? (int)di->port : (int)cfg->port;
    *out = h;
    return RB_OK;
}

wk_log *wk_http_log(const wk_http *h) { return h->o.log; }

double wk_http_keepalive_ms(const wk_http *h) {
    double half = 500.0 * (double)h->o.cfg->http_timeout_s;
    return half < 15000.0 ? half : 15000.0;
}

const char *wk_http_listen_host(const wk_http *h) { return h ? h->host : ""; }

void wk_http_quiesce(wk_http *h) {
    if (!h || !h->mhd) return;
    MHD_socket s = MHD_quiesce_daemon(h->mhd);
    if (s != MHD_INVALID_SOCKET) close(s);
}

unsigned wk_http_connections(wk_http *h) {
    if (!h || !h->mhd) return 0;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return di ? di->num_connections : 0;
}

void wk_http_stop(wk_http *h) {
    if (!h) return;
    if (h->mhd) MHD_stop_daemon(h->mhd);
    free_http(h);
}

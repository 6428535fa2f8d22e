/* Implementation of srv_http.h: libmicrohttpd setup, the access handler
 * (routing, auth, body collection) and the shared reply helpers. */
#include "server/srv_http.h"
#include "server/srv_http_internal.h"
#include "server/srv_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- reply helpers ---- */

static enum MHD_Result queue(struct MHD_Connection *c, srv_req *r, int status, struct MHD_Response *resp) {
    if (!resp) {
        if (r) srv_metrics_request(&r->w->metrics, r->route, 500);
        return MHD_NO;
    }
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    if (r) srv_metrics_request(&r->w->metrics, r->route, status);
    return ret;
}

enum MHD_Result srv_reply_text(struct MHD_Connection *c, srv_req *r, int status, const char *ctype, char *text) {
    if (!text) return srv_reply_error(c, r, 500, "INTERNAL", "server_error", "out of memory");
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return queue(c, r, 500, NULL);
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    return queue(c, r, status, resp);
}

enum MHD_Result srv_reply_json_hdr(struct MHD_Connection *c, srv_req *r, int status, json_t *body, const char *hname,
                                   const char *hval) {
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s) {
        static const char oom[] = "{\"error\":{\"code\":\"INTERNAL\",\"message\":\"out of memory\"}}";
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        return queue(c, r, 500, resp);
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(s);
        return queue(c, r, 500, NULL);
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (hname) MHD_add_response_header(resp, hname, hval);
    return queue(c, r, status, resp);
}

enum MHD_Result srv_reply_json(struct MHD_Connection *c, srv_req *r, int status, json_t *body) {
    return srv_reply_json_hdr(c, r, status, body, NULL, NULL);
}

enum MHD_Result srv_reply_error(struct MHD_Connection *c, srv_req *r, int status, const char *code, const char *type,
                                const char *msg) {
    json_t *j = json_pack("{s:{s:s,s:o,s:s}}", "error", "code", code, "message", srv_json_text(msg, strlen(msg)),
                          "type", type);
    return srv_reply_json(c, r, status, j);
}

enum MHD_Result srv_reply_invalid(struct MHD_Connection *c, srv_req *r, const srv_errors *errs, bool openai) {
    return srv_reply_json(c, r, 400, openai ? srv_errors_openai_json(errs) : srv_errors_json(errs));
}

enum MHD_Result srv_reply_unavailable(struct MHD_Connection *c, srv_req *r, const char *code, const char *msg,
                                      bool openai) {
    (void)openai;
    json_t *j = json_pack("{s:{s:s,s:s,s:s}}", "error", "code", code, "message", msg, "type", "overloaded_error");
    return srv_reply_json_hdr(c, r, 503, j, MHD_HTTP_HEADER_RETRY_AFTER, "1");
}

bool srv_conn_closed(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP, .revents = 0};
    if (poll(&p, 1, 0) < 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

json_t *srv_json_text(const char *s, size_t len) {
    if (srv_utf8_valid(s, len, NULL)) return json_stringn(s, len);
    char *buf = malloc(len * 3 + 1);
    if (!buf) return NULL;
    size_t w = 0, i = 0;
    while (i < len) {
        size_t bad = 0;
        if (srv_utf8_valid(s + i, len - i, &bad)) bad = len - i;
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

/* ---- routing ---- */

static bool match_job_path(const char *url, const char *suffix, char *id, size_t idlen) {
    static const char pre[] = "/v1/jobs/";
    if (strncmp(url, pre, sizeof pre - 1) != 0) return false;
    const char *p = url + sizeof pre - 1;
    const char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    if (n == 0 || n >= idlen) return false;
    const char *rest = p + n;
    if (strcmp(rest, suffix) != 0) return false;
    memcpy(id, p, n);
    id[n] = '\0';
    return true;
}

typedef enum { M_GET, M_POST, M_DELETE, M_OTHER } method_t;

/* Picks the route; *allowed gets the Allow header for a 405 (NULL if the
 * path is unknown). */
static srv_route pick_route(const char *url, method_t m, srv_req *r, const char **allowed) {
    static const struct {
        const char *path;
        srv_route route;
        method_t method;
        const char *allow;
    } table[] = {
        {"/health", SRV_ROUTE_HEALTH, M_GET, "GET"},
        {"/v1/health", SRV_ROUTE_HEALTH, M_GET, "GET"},
        {"/v1/ready", SRV_ROUTE_READY, M_GET, "GET"},
        {"/v1/info", SRV_ROUTE_INFO, M_GET, "GET"},
        {"/metrics", SRV_ROUTE_METRICS, M_GET, "GET"},
        {"/v1/jobs", SRV_ROUTE_JOBS, M_POST, "POST"},
        {"/v1/inference", SRV_ROUTE_INFERENCE, M_POST, "POST"},
        {"/v1/models", SRV_ROUTE_MODELS, M_GET, "GET"},
        {"/v1/completions", SRV_ROUTE_COMPLETIONS, M_POST, "POST"},
        {"/v1/chat/completions", SRV_ROUTE_CHAT, M_POST, "POST"},
    };
    *allowed = NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(url, table[i].path) != 0) continue;
        if (table[i].method == m) return table[i].route;
        *allowed = table[i].allow;
        return SRV_ROUTE_UNKNOWN;
    }
    if (match_job_path(url, "/stream", r->path_id, sizeof r->path_id)) {
        if (m == M_GET) return SRV_ROUTE_JOB_STREAM;
        *allowed = "GET";
        return SRV_ROUTE_UNKNOWN;
    }
    if (match_job_path(url, "", r->path_id, sizeof r->path_id)) {
        if (m == M_DELETE) return SRV_ROUTE_JOB_DELETE;
        if (m == M_GET) return SRV_ROUTE_JOB_STREAM; /* marked below as a status query */
        *allowed = "GET, DELETE";
        return SRV_ROUTE_UNKNOWN;
    }
    return SRV_ROUTE_UNKNOWN;
}

static bool is_openai_route(srv_route r) {
    return r == SRV_ROUTE_MODELS || r == SRV_ROUTE_COMPLETIONS || r == SRV_ROUTE_CHAT;
}

/* NULL if authorized, else the 401 code. */
static const char *check_auth(srv_worker *w, struct MHD_Connection *c) {
    if (!w->cfg.api_token) return NULL;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || !*h) return "MISSING_API_KEY";
    static const char bearer[] = "Bearer ";
    if (strncasecmp(h, bearer, sizeof bearer - 1) != 0) return "INVALID_API_KEY";
    const char *tok = h + sizeof bearer - 1;
    while (*tok == ' ') tok++;
    size_t n = strlen(tok);
    while (n > 0 && (tok[n - 1] == ' ' || tok[n - 1] == '\t')) n--;
    if (!srv_ct_equal(tok, n, w->cfg.api_token, strlen(w->cfg.api_token))) return "INVALID_API_KEY";
    return NULL;
}

static enum MHD_Result dispatch(struct MHD_Connection *c, srv_req *r, const char *url, const char *method) {
    switch (r->route) {
    case SRV_ROUTE_HEALTH: return srv_route_health(c, r);
    case SRV_ROUTE_READY: return srv_route_ready(c, r);
    case SRV_ROUTE_INFO: return srv_route_info(c, r);
    case SRV_ROUTE_METRICS: return srv_route_metrics(c, r);
    case SRV_ROUTE_MODELS: return srv_route_models(c, r);
    case SRV_ROUTE_JOBS:
    case SRV_ROUTE_INFERENCE: return srv_route_jobs_create(c, r);
    case SRV_ROUTE_JOB_STREAM:
        if (strstr(url + 9, "/stream")) return srv_route_job_stream(c, r);
        return srv_route_job_get(c, r);
    case SRV_ROUTE_JOB_DELETE: return srv_route_job_delete(c, r);
    case SRV_ROUTE_COMPLETIONS: return srv_route_openai(c, r, false);
    case SRV_ROUTE_CHAT: return srv_route_openai(c, r, true);
    default: break;
    }
    char msg[300];
    snprintf(msg, sizeof msg, "no route for %.16s %.200s", method, url);
    return srv_reply_error(c, r, 404, "NOT_FOUND", "invalid_request_error", msg);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    srv_worker *w = cls;
    srv_req *r = *con_cls;
    if (!r) { /* first call: headers only */
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->w = w;
        *con_cls = r;
        method_t m = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 ? M_GET
                     : strcmp(method, "POST") == 0                              ? M_POST
                     : strcmp(method, "DELETE") == 0                            ? M_DELETE
                                                                                : M_OTHER;
        const char *allowed = NULL;
        r->route = pick_route(url, m, r, &allowed);
        if (r->route != SRV_ROUTE_HEALTH) {
            const char *code = check_auth(w, c);
            if (code) {
                const char *msg = strcmp(code, "MISSING_API_KEY") == 0
                                      ? "missing API key: send Authorization: Bearer <token>"
                                      : "invalid API key";
                json_t *j = json_pack("{s:{s:s,s:s,s:s}}", "error", "code", code, "message", msg, "type",
                                      "authentication_error");
                return srv_reply_json_hdr(c, r, 401, j, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
            }
        }
        if (allowed) {
            char msg[160];
            snprintf(msg, sizeof msg, "method %.16s is not allowed here (allowed: %s)", method, allowed);
            json_t *j = json_pack("{s:{s:s,s:s,s:s}}", "error", "code", "METHOD_NOT_ALLOWED", "message", msg, "type",
                                  "invalid_request_error");
            return srv_reply_json_hdr(c, r, 405, j, MHD_HTTP_HEADER_ALLOW, allowed);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end = NULL;
            unsigned long long v = strtoull(cl, &end, 10);
            if (end != cl && v > w->cfg.max_body_bytes) r->too_big = true;
        }
        if (r->too_big) goto body_too_big;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->too_big) return MHD_YES;
        if (r->len + n > w->cfg.max_body_bytes) {
            r->too_big = true;
            free(r->body);
            r->body = NULL;
            r->len = r->cap = 0;
            return MHD_YES;
        }
        if (r->len + n + 1 > r->cap) {
            size_t nc = r->cap ? r->cap : 4096;
            while (nc < r->len + n + 1) nc *= 2;
            if (nc > w->cfg.max_body_bytes + 1) nc = w->cfg.max_body_bytes + 1;
            char *nb = realloc(r->body, nc);
            if (!nb) return MHD_NO;
            r->body = nb;
            r->cap = nc;
        }
        memcpy(r->body + r->len, upload_data, n);
        r->len += n;
        r->body[r->len] = '\0';
        return MHD_YES;
    }
    if (r->too_big) goto body_too_big;
    return dispatch(c, r, url, method);

body_too_big: {
    srv_errors e = {.n = 0};
    srv_errors_add(&e, "body", "max_bytes", "the request body exceeds the limit of %zu bytes", w->cfg.max_body_bytes);
    return srv_reply_invalid(c, r, &e, is_openai_route(r->route));
}
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    (void)toe;
    srv_req *r = *con_cls;
    if (!r) return;
    free(r->body);
    free(r);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    srv_worker *w = cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = '\0';
    SRV_DEBUG(&w->log, "http", "%s", buf);
}

rb_status srv_http_start(srv_worker *w, rb_error *err) {
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)w->cfg.port);
    const char *addr = w->cfg.bind_addr ? w->cfg.bind_addr : w->cfg.local_mode ? "127.0.0.1" : "0.0.0.0";
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        return rb_error_set(err, RB_E_INVALID, "bad listen address '%s' (an IPv4 address is expected)", addr);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    w->mhd = MHD_start_daemon(flags, (uint16_t)w->cfg.port, NULL, NULL, on_request, w,
                              MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)w->cfg.max_connections,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)w->cfg.http_timeout_s,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, (void *)w,
                              MHD_OPTION_THREAD_STACK_SIZE, (size_t)1 << 20,
                              MHD_OPTION_EXTERNAL_LOGGER, mhd_log, (void *)w,
                              MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                              MHD_OPTION_END);
    if (!w->mhd) return rb_error_set(err, RB_E_IO, "cannot listen on %s:%d (port in use?)", addr, w->cfg.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(w->mhd, MHD_DAEMON_INFO_BIND_PORT);
    w->port = di ? (int)di->port : w->cfg.port;
    return RB_OK;
}

void srv_http_quiesce(srv_worker *w) {
    if (!w->mhd) return;
    MHD_socket s = MHD_quiesce_daemon(w->mhd);
    if (s != MHD_INVALID_SOCKET) close(s);
}

unsigned srv_http_connections(srv_worker *w) {
    if (!w->mhd) return 0;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(w->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return di ? di->num_connections : 0;
}

void srv_http_stop(srv_worker *w) {
    if (!w->mhd) return;
    MHD_stop_daemon(w->mhd);
    w->mhd = NULL;
}

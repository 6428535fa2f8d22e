/* Implementation of wk_sse.h: a libmicrohttpd content reader that waits on
 * the job for new events, formats them, sends a keep-alive comment when the
 * job is silent (a request waiting in the queue must not be timed out by the
 * server that owes it an answer), ends with "data: [DONE]", and cancels the
 * job when its last reader goes away. A HEAD request gets the headers and
 * subscribes to nothing. */
#include "worker/wk_http_internal.h"
#include "worker/wk_sse.h"
#include "worker/wk_util.h"

#include <stdlib.h>
#include <string.h>

struct wk_sse_out {
    char *buf;
    size_t len, off, cap;
    bool oom;
};

typedef struct wk_stream {
    wk_job *job;
    struct MHD_Connection *conn;
    wk_log *log;
    const wk_sse_flavor *fl;
    void *ctx;
    size_t next_event;
    bool sent_final;
    double keepalive_ms, last_write_ms;
    wk_sse_out out;
} wk_stream;

static void put(wk_sse_out *o, const char *p, size_t n) {
    if (o->oom) return;
    if (o->len + n > o->cap) {
        size_t nc = o->cap ? o->cap : 1024;
        while (nc < o->len + n) nc *= 2;
        char *nb = realloc(o->buf, nc);
        if (!nb) {
            o->oom = true;
            return;
        }
        o->buf = nb;
        o->cap = nc;
    }
    memcpy(o->buf + o->len, p, n);
    o->len += n;
}

void wk_sse_put(wk_sse_out *o, json_t *obj) {
    char *js = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!js) {
        o->oom = true;
        return;
    }
    put(o, "data: ", 6);
    put(o, js, strlen(js));
    put(o, "\n\n", 2);
    free(js);
}

/* Formats every new event into the buffer. Returns true when the job has
 * nothing more to say (its final event and [DONE] are in the buffer).
 * Called with the job's mutex held. */
static bool format_new(wk_stream *s) {
    wk_job *j = s->job;
    bool final_seen = false;
    for (; s->next_event < j->n_events; s->next_event++) {
        const wk_event *e = &j->events[s->next_event];
        if (s->fl && s->fl->event) s->fl->event(s->ctx, j, e, &s->out);
        else wk_sse_put(&s->out, json_incref(e->data));
        if (!strcmp(e->type, "end") || !strcmp(e->type, "error")) final_seen = true;
    }
    if (j->state != WK_JOB_DONE && j->state != WK_JOB_FAILED) return false;
    if (!final_seen && (j->n_events == 0 || (strcmp(j->events[j->n_events - 1].type, "end") != 0 &&
                                             strcmp(j->events[j->n_events - 1].type, "error") != 0))) {
        /* the final event could not be recorded (out of memory) */
        wk_sse_put(&s->out, json_pack("{s:s,s:s,s:s}", "type", "error", "code", "INTERNAL", "message",
                                      "out of memory while recording the job's end"));
    }
    put(&s->out, "data: [DONE]\n\n", 14);
    return true;
}

static ssize_t reader(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    wk_stream *s = cls;
    wk_sse_out *o = &s->out;
    for (;;) {
        if (o->off < o->len) {
            s->last_write_ms = wk_now_ms();
            size_t n = o->len - o->off < max ? o->len - o->off : max;
            memcpy(out, o->buf + o->off, n);
            o->off += n;
            if (o->off == o->len) o->off = o->len = 0;
            return (ssize_t)n;
        }
        if (o->oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (s->sent_final) return MHD_CONTENT_READER_END_OF_STREAM;
        wk_job *j = s->job;
        pthread_mutex_lock(&j->mu);
        s->sent_final = format_new(s);
        size_t seen = j->n_events;
        pthread_mutex_unlock(&j->mu);
        if (o->len > 0 || s->sent_final) continue;
        if (wk_http_conn_gone(s->conn)) return MHD_CONTENT_READER_END_WITH_ERROR; /* stream_free decides */
        if (wk_now_ms() - s->last_write_ms >= s->keepalive_ms) {
            put(o, ": keep-alive\n\n", 14);
            continue;
        }
        wk_job_wait_events(j, seen, 25);
    }
}

static void stream_free(void *cls) {
    wk_stream *s = cls;
    int left = wk_job_unsubscribe(s->job);
    if (!s->sent_final && !wk_job_is_finished(s->job) && left == 0) { /* the last reader went away mid-stream */
        wk_job_cancel(s->job);
        wk_log_event(s->log, WK_LOG_INFO, "client_disconnected", json_pack("{s:s}", "job_id", s->job->id),
                     "stream closed before the end; job cancelled");
    }
    if (s->fl && s->fl->free_ctx) s->fl->free_ctx(s->ctx);
    wk_job_unref(s->job);
    free(s->out.buf);
    free(s);
}

static struct MHD_Response *sse_headers(struct MHD_Response *resp) {
    if (!resp) return NULL;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    return resp;
}

bool wk_sse_reply(wk_req *r, wk_job *j, const wk_sse_flavor *fl, void *ctx) {
    if (strcmp(wk_req_method(r), "HEAD") == 0) { /* headers only: no reader, nothing to cancel */
        if (fl && fl->free_ctx) fl->free_ctx(ctx);
        return wk_http_queue(r, 200, sse_headers(MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT)));
    }
    wk_stream *s = calloc(1, sizeof *s);
    if (!s) {
        if (fl && fl->free_ctx) fl->free_ctx(ctx);
        return wk_reply_error(r, 500, "INTERNAL", "server_error", "out of memory");
    }
    s->job = wk_job_ref(j);
    wk_job_subscribe(j);
    s->conn = r->conn;
    s->log = wk_http_log(r->h);
    s->keepalive_ms = wk_http_keepalive_ms(r->h);
    s->last_write_ms = wk_now_ms();
    s->fl = fl;
    s->ctx = ctx;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, reader, s, stream_free);
    if (!resp) {
        stream_free(s);
        return wk_reply_error(r, 500, "INTERNAL", "server_error", "out of memory");
    }
    return wk_http_queue(r, 200, sse_headers(resp));
}

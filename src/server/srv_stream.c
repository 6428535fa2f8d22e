/* Server-sent-event streaming of a job: a libmicrohttpd content reader that
 * waits on the job for new text, formats events in the job's API flavour
 * (rbee: started/token/end|error; OpenAI: chunks, usage, finish_reason),
 * ends with "data: [DONE]", and cancels the job if the client goes away. */
#include "server/srv_http_internal.h"
#include "server/srv_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct srv_stream {
    srv_worker *w;
    srv_job *job;
    struct MHD_Connection *conn;
    char model[256];
    /* cursor */
    bool sent_started;
    size_t next_piece;
    bool sent_final;
    /* bytes formatted but not yet handed to MHD */
    char *buf;
    size_t len, off, cap;
    bool oom;
} srv_stream;

static void put(srv_stream *s, const char *p, size_t n) {
    if (s->oom) return;
    if (s->len + n > s->cap) {
        size_t nc = s->cap ? s->cap : 1024;
        while (nc < s->len + n) nc *= 2;
        char *nb = realloc(s->buf, nc);
        if (!nb) {
            s->oom = true;
            return;
        }
        s->buf = nb;
        s->cap = nc;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

static void put_event(srv_stream *s, json_t *ev) {
    char *js = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    json_decref(ev);
    if (!js) {
        s->oom = true;
        return;
    }
    put(s, "data: ", 6);
    put(s, js, strlen(js));
    put(s, "\n\n", 2);
    free(js);
}

static void put_done(srv_stream *s) { put(s, "data: [DONE]\n\n", 14); }

/* Formats everything new on the job into s->buf. Returns true if the job
 * has nothing more to say (the final events are in the buffer). Called with
 * the job's mutex held. */
static bool format_new(srv_stream *s) {
    srv_job *j = s->job;
    const bool finished = j->state == SRV_JOB_DONE || j->state == SRV_JOB_FAILED;
    const bool rbee = j->api == SRV_API_RBEE;
    if (!s->sent_started && (j->state != SRV_JOB_QUEUED)) {
        s->sent_started = true;
        if (rbee) {
            char ts[40];
            srv_rfc3339_now(ts, sizeof ts);
            put_event(s, json_pack("{s:s,s:s,s:s,s:I,s:s}", "type", "started", "job_id", j->id, "model", s->model,
                                   "prompt_tokens", (json_int_t)j->req.n_prompt, "started_at", ts));
        } else if (j->api == SRV_API_CHAT) {
            put_event(s, srv_openai_chunk(j, s->model, NULL, 0, NULL, true));
        }
    }
    for (; s->next_piece < j->n_pieces; s->next_piece++) {
        const srv_piece *p = &j->pieces[s->next_piece];
        if (rbee)
            put_event(s, json_pack("{s:s,s:o,s:I}", "type", "token", "t", srv_json_text(p->text, p->len), "i",
                                   (json_int_t)s->next_piece));
        else
            put_event(s, srv_openai_chunk(j, s->model, p->text, p->len, NULL, false));
    }
    if (!finished) return false;
    if (j->state == SRV_JOB_FAILED) {
        if (rbee)
            put_event(s, json_pack("{s:s,s:s,s:s}", "type", "error", "code", j->err_code, "message", j->err_msg));
        else
            put_event(s, json_pack("{s:{s:s,s:s,s:s}}", "error", "message", j->err_msg, "type", "server_error", "code",
                                   j->err_code));
    } else if (rbee) {
        put_event(s, json_pack("{s:s,s:I,s:I,s:f,s:f,s:s}", "type", "end", "tokens_out", (json_int_t)j->tokens_out,
                               "prompt_tokens", (json_int_t)j->req.n_prompt, "decode_time_ms", j->decode_ms,
                               "prefill_time_ms", j->prefill_ms, "stop_reason", rb_stop_reason_name(j->stop_reason)));
    } else if (j->stop_reason == RB_STOP_CANCELLED) {
        put_event(s, json_pack("{s:{s:s,s:s,s:s}}", "error", "message", "the request was cancelled", "type",
                               "server_error", "code", "cancelled"));
    } else {
        put_event(s, srv_openai_chunk(j, s->model, NULL, 0, srv_openai_finish_reason(j->stop_reason), false));
        if (j->req.include_usage) {
            json_t *u = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", j->id, "object",
                                  j->api == SRV_API_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                                  (json_int_t)j->created_unix, "model", s->model, "choices", "usage",
                                  srv_openai_usage(j));
            put_event(s, u);
        }
    }
    put_done(s);
    return true;
}

static ssize_t reader(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    srv_stream *s = cls;
    for (;;) {
        if (s->off < s->len) {
            size_t n = s->len - s->off < max ? s->len - s->off : max;
            memcpy(out, s->buf + s->off, n);
            s->off += n;
            if (s->off == s->len) s->off = s->len = 0;
            return (ssize_t)n;
        }
        if (s->oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (s->sent_final) return MHD_CONTENT_READER_END_OF_STREAM;
        srv_job *j = s->job;
        pthread_mutex_lock(&j->mu);
        s->sent_final = format_new(s);
        size_t seen = j->n_pieces;
        srv_job_state st = j->state;
        pthread_mutex_unlock(&j->mu);
        if (s->len > 0 || s->sent_final) continue;
        if (srv_conn_closed(s->conn)) {
            srv_job_request_cancel(j);
            srv_worker_poke(s->w);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        srv_job_wait_change(j, seen, st, 25);
    }
}

static void stream_free(void *cls) {
    srv_stream *s = cls;
    if (!s->sent_final && !srv_job_is_finished(s->job)) { /* the client went away mid-stream */
        srv_job_request_cancel(s->job);
        srv_worker_poke(s->w);
        srv_log_event(&s->w->log, SRV_LOG_INFO, "client_disconnected", json_pack("{s:s}", "job_id", s->job->id),
                      "stream closed before the end; job cancelled");
    }
    srv_job_unref(s->job);
    free(s->buf);
    free(s);
}

enum MHD_Result srv_stream_reply(struct MHD_Connection *c, srv_req *r, srv_job *j) {
    srv_stream *s = calloc(1, sizeof *s);
    if (!s) return srv_reply_error(c, r, 500, "INTERNAL", "server_error", "out of memory");
    s->w = r->w;
    s->job = srv_job_ref(j);
    s->conn = c;
    snprintf(s->model, sizeof s->model, "%s", srv_openai_model_name(r->w, j));
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, reader, s, stream_free);
    if (!resp) {
        stream_free(s);
        return srv_reply_error(c, r, 500, "INTERNAL", "server_error", "out of memory");
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    srv_metrics_request(&r->w->metrics, r->route, 200);
    return ret;
}

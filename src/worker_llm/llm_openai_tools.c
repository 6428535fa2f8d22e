/* Implementation of llm_openai_tools.h. */
#include "worker_llm/llm_openai_tools.h"
#include "worker/wk_util.h"

#include <stdlib.h>
#include <string.h>

/* Bytes of one streamed arguments fragment at most (cut on a UTF-8 character boundary). */
#define ARG_FRAGMENT 24

static rb_status parse(const llm_task *t, const char *text, size_t len, rb_tool_parse *p) {
    const llm_tools *tl = &t->req.tools;
    rb_error err;
    return rb_tool_calls_parse(tl->family, text, len, (const char *const *)tl->names, tl->n, p, &err);
}

json_t *llm_openai_tool_message(const llm_task *t, const char *text, size_t len, const char **finish) {
    if (!llm_tools_parsing(&t->req.tools))
        return json_pack("{s:s,s:o}", "role", "assistant", "content", wk_json_text(text, len));
    rb_tool_parse p;
    if (parse(t, text, len, &p) != RB_OK) return NULL;
    json_t *msg;
    if (p.n_calls == 0) {
        msg = json_pack("{s:s,s:o}", "role", "assistant", "content", wk_json_text(text, len));
    } else {
        json_t *calls = json_array();
        for (size_t i = 0; calls && i < p.n_calls; i++) {
            char id[32];
            llm_tools_call_id(t->req.tools.family, id);
            if (json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function",
                                                       "name", p.calls[i].name, "arguments", p.calls[i].arguments))) {
                json_decref(calls);
                calls = NULL;
            }
        }
        json_t *content = p.content ? wk_json_text(p.content, p.content_len) : json_null();
        msg = calls ? json_pack("{s:s,s:o,s:o}", "role", "assistant", "content", content, "tool_calls", calls) : NULL;
        if (!calls) json_decref(content);
        *finish = "tool_calls";
    }
    rb_tool_parse_free(&p);
    return msg;
}

void llm_tool_stream_free(llm_tool_stream *s) {
    if (!s) return;
    free(s->buf);
    memset(s, 0, sizeof *s);
}

bool llm_tool_stream_push(llm_tool_stream *s, rb_tool_family f, const char *text, size_t len, const char **out,
                          size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (s->len + len + 1 > s->cap) {
        size_t nc = s->cap ? s->cap : 256;
        while (nc < s->len + len + 1) nc *= 2;
        char *nb = realloc(s->buf, nc);
        if (!nb) return false;
        s->buf = nb;
        s->cap = nc;
    }
    memcpy(s->buf + s->len, text, len);
    s->len += len;
    if (s->started) return true;
    const size_t hold = rb_tool_calls_hold(f, s->buf, s->len, s->sent, &s->started);
    if (hold > s->sent) {
        *out = s->buf + s->sent;
        *out_len = hold - s->sent;
        s->sent = hold;
    }
    return true;
}

static json_t *content_delta(const char *s, size_t n) {
    return json_pack("{s:o}", "content", wk_json_text(s, n));
}

/* Where the next fragment of a[i..n) ends: at most ARG_FRAGMENT bytes, not
 * inside a UTF-8 character. */
static size_t fragment_end(const char *a, size_t i, size_t n) {
    size_t e = i + ARG_FRAGMENT < n ? i + ARG_FRAGMENT : n;
    while (e < n && e > i + 1 && ((unsigned char)a[e] & 0xC0) == 0x80) e--;
    return e;
}

bool llm_tool_stream_end(llm_tool_stream *s, const llm_task *t, json_t *deltas, const char **finish) {
    rb_tool_parse p;
    memset(&p, 0, sizeof p);
    if (parse(t, s->buf ? s->buf : "", s->len, &p) != RB_OK) return false;
    bool ok = true;
    if (p.n_calls == 0) {
        if (s->len > s->sent) ok = json_array_append_new(deltas, content_delta(s->buf + s->sent, s->len - s->sent)) == 0;
    } else {
        if (p.content_len > s->sent)
            ok = json_array_append_new(deltas, content_delta(p.content + s->sent, p.content_len - s->sent)) == 0;
        for (size_t k = 0; ok && k < p.n_calls; k++) {
            char id[32];
            llm_tools_call_id(t->req.tools.family, id);
            ok = json_array_append_new(deltas, json_pack("{s:[{s:I,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index",
                                                         (json_int_t)k, "id", id, "type", "function", "function",
                                                         "name", p.calls[k].name, "arguments", "")) == 0;
            const char *a = p.calls[k].arguments;
            const size_t n = strlen(a);
            for (size_t i = 0; ok && i < n;) {
                const size_t e = fragment_end(a, i, n);
                ok = json_array_append_new(deltas, json_pack("{s:[{s:I,s:{s:o}}]}", "tool_calls", "index", (json_int_t)k,
                                                             "function", "arguments", wk_json_text(a + i, e - i))) == 0;
                i = e;
            }
        }
        *finish = "tool_calls";
    }
    rb_tool_parse_free(&p);
    return ok;
}

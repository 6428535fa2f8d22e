/* Implementation of llm_openai.h. */
#include "worker_llm/llm_openai.h"
#include "worker_llm/llm_openai_tools.h"
#include "worker/wk_util.h"

#include <stdlib.h>
#include <string.h>

const char *llm_openai_finish_reason(rb_stop_reason why) { return why == RB_STOP_MAX_TOKENS ? "length" : "stop"; }

json_t *llm_openai_error(const char *type, const char *code, const char *msg) {
    return json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", msg, "type", type, "param", "code", code);
}

static int64_t utf8_chars(const char *s, size_t len) {
    int64_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

/* The legacy completions shape of chat-shaped entries (consumed). */
static json_t *legacy_logprobs(json_t *entries, int64_t *offset) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e) {
        json_t *tok = json_object_get(e, "token");
        json_t *top = json_object();
        size_t k;
        json_t *alt;
        json_array_foreach(json_object_get(e, "top_logprobs"), k, alt) {
            json_t *at = json_object_get(alt, "token");
            /* two ids with the same text (U+FFFD of partial bytes): the likelier one stays */
            if (top && json_is_string(at) && !json_object_getn(top, json_string_value(at), json_string_length(at)))
                json_object_setn(top, json_string_value(at), json_string_length(at), json_object_get(alt, "logprob"));
        }
        json_array_append(tokens, tok);
        json_array_append(lps, json_object_get(e, "logprob"));
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)*offset));
        *offset += utf8_chars(json_string_value(tok), json_string_length(tok));
    }
    json_decref(entries);
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops, "text_offset",
                     offs);
}

static json_t *logprobs_object(bool chat, json_t *entries, int64_t *offset) {
    if (!entries) return json_null();
    if (chat) return json_pack("{s:o,s:n}", "content", entries, "refusal");
    return legacy_logprobs(entries, offset);
}

/* A chat stream chunk with the given delta object (consumed; NULL: {}). */
static json_t *llm_openai_chunk_delta(const wk_job *j, int choice, json_t *delta, json_t *entries, const char *finish) {
    const llm_task *t = llm_job_task(j);
    json_t *lp = logprobs_object(true, entries, NULL);
    json_t *c = json_pack("{s:i,s:o,s:o,s:s?}", "index", choice, "delta", delta ? delta : json_object(), "logprobs", lp,
                          "finish_reason", finish);
    if (c && !finish) json_object_set_new(c, "finish_reason", json_null());
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", j->id, "object", "chat.completion.chunk", "created",
                     (json_int_t)j->created_unix, "model", t->model_name, "choices", c);
}

json_t *llm_openai_chunk(const wk_job *j, int choice, const char *text, size_t len, json_t *entries,
                         int64_t *offset, const char *finish, bool role_delta) {
    const llm_task *t = llm_job_task(j);
    json_t *c;
    const bool chat = t->api == LLM_API_CHAT;
    if (chat) {
        json_t *delta = json_object();
        if (role_delta) {
            json_object_set_new(delta, "role", json_string("assistant"));
            json_object_set_new(delta, "content", json_string(""));
        } else if (text) {
            json_object_set_new(delta, "content", wk_json_text(text, len));
        }
        return llm_openai_chunk_delta(j, choice, delta, entries, finish);
    } else {
        json_t *lp = logprobs_object(chat, entries, offset);
        c = json_pack("{s:i,s:o,s:o,s:s?}", "index", choice, "text", text ? wk_json_text(text, len) : json_string(""),
                      "logprobs", lp, "finish_reason", finish);
    }
    if (c && !finish) json_object_set_new(c, "finish_reason", json_null());
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", j->id, "object", chat ? "chat.completion.chunk" : "text_completion",
                     "created", (json_int_t)j->created_unix, "model", t->model_name, "choices", c);
}

json_t *llm_openai_usage(const wk_job *j) {
    const llm_task *t = llm_job_task(j);
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)t->req.n_prompt, "completion_tokens",
                     (json_int_t)t->tokens_out, "total_tokens", (json_int_t)(t->req.n_prompt + (size_t)t->tokens_out),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)t->cached_tokens);
}

/* The choice an event belongs to. */
static int event_choice(const wk_event *e, int n) {
    json_t *c = json_object_get(e->data, "choice");
    int i = json_is_integer(c) ? (int)json_integer_value(c) : 0;
    return i >= 0 && i < n ? i : 0;
}

typedef struct text_acc {
    char *p;
    size_t len, cap;
} text_acc;

static bool acc_put(text_acc *a, const char *s, size_t n) {
    if (a->len + n + 1 > a->cap) {
        size_t nc = a->cap ? a->cap : 256;
        while (nc < a->len + n + 1) nc *= 2;
        char *np = realloc(a->p, nc);
        if (!np) return false;
        a->p = np;
        a->cap = nc;
    }
    memcpy(a->p + a->len, s, n);
    a->len += n;
    return true;
}

json_t *llm_openai_full(const wk_job *j) {
    const llm_task *t = llm_job_task(j);
    const bool chat = t->api == LLM_API_CHAT;
    const int n = llm_gen_choices(&t->req);
    text_acc *text = calloc((size_t)n, sizeof *text);
    json_t **entries = calloc((size_t)n, sizeof *entries);
    json_t *choices = json_array();
    bool ok = text && entries && choices;
    for (int c = 0; ok && c < n && t->req.logprobs; c++) ok = (entries[c] = json_array()) != NULL;
    for (size_t i = 0; ok && i < j->n_events; i++) {
        const wk_event *e = &j->events[i];
        if (!strcmp(e->type, "token") && e->raw) ok = acc_put(&text[event_choice(e, n)], e->raw, e->raw_len);
        else if (!strcmp(e->type, "logprobs") && entries[event_choice(e, n)])
            ok = json_array_append(entries[event_choice(e, n)], json_object_get(e->data, "entry")) == 0;
    }
    for (int c = 0; ok && c < n; c++) {
        const char *finish = llm_openai_finish_reason(t->choices[c].stop_reason);
        int64_t offset = t->req.prompt_chars;
        json_t *lp = logprobs_object(chat, entries[c], &offset);
        entries[c] = NULL;
        json_t *o;
        if (chat) {
            json_t *msg = llm_openai_tool_message(t, text[c].p ? text[c].p : "", text[c].len, &finish);
            o = msg ? json_pack("{s:i,s:o,s:o,s:s}", "index", c, "message", msg, "logprobs", lp, "finish_reason", finish)
                    : NULL;
        } else {
            o = json_pack("{s:i,s:o,s:o,s:s}", "index", c, "text", wk_json_text(text[c].p ? text[c].p : "", text[c].len),
                          "logprobs", lp, "finish_reason", finish);
        }
        ok = o && json_array_append_new(choices, o) == 0;
    }
    for (int c = 0; text && c < n; c++) free(text[c].p);
    for (int c = 0; entries && c < n; c++) json_decref(entries[c]);
    free(text);
    free(entries);
    if (!ok) {
        json_decref(choices);
        return NULL;
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", j->id, "object", chat ? "chat.completion" : "text_completion",
                     "created", (json_int_t)j->created_unix, "model", t->model_name, "choices", choices, "usage",
                     llm_openai_usage(j));
}

/* ---- the stream ---- */

typedef struct sse_ctx {
    int n;
    json_t **pending; /* per choice: entries whose text has not been sent */
    int64_t *offset;  /* per choice: the legacy text_offset */
    llm_tool_stream *tools; /* per choice, when the chat's tool calls are parsed; else NULL */
} sse_ctx;

static void sse_ctx_free(void *p) {
    sse_ctx *c = p;
    if (!c) return;
    for (int i = 0; c->pending && i < c->n; i++) json_decref(c->pending[i]);
    for (int i = 0; c->tools && i < c->n; i++) llm_tool_stream_free(&c->tools[i]);
    free(c->pending);
    free(c->offset);
    free(c->tools);
    free(c);
}

void *llm_openai_sse_ctx(const wk_job *j) {
    const llm_task *t = llm_job_task(j);
    sse_ctx *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->n = llm_gen_choices(&t->req);
    c->pending = calloc((size_t)c->n, sizeof *c->pending);
    c->offset = calloc((size_t)c->n, sizeof *c->offset);
    if (t->api == LLM_API_CHAT && llm_tools_parsing(&t->req.tools)) c->tools = calloc((size_t)c->n, sizeof *c->tools);
    if (!c->pending || !c->offset || (llm_tools_parsing(&t->req.tools) && t->api == LLM_API_CHAT && !c->tools)) {
        sse_ctx_free(c);
        return NULL;
    }
    for (int i = 0; i < c->n; i++) c->offset[i] = t->req.prompt_chars;
    return c;
}

/* The entries waiting for choice i (an empty array when there are none and
 * log probabilities were asked for, NULL when they were not). */
static json_t *take_pending(sse_ctx *c, const llm_task *t, int i) {
    if (!t->req.logprobs) return NULL;
    json_t *p = c->pending[i];
    c->pending[i] = NULL;
    return p ? p : json_array();
}

/* The end of choice i of a chat whose tool calls are parsed: what the
 * stream held back (content, calls), then the finish chunk. */
static void tool_stream_end(sse_ctx *c, const wk_job *j, int i, rb_stop_reason why, wk_sse_out *o) {
    const llm_task *t = llm_job_task(j);
    const char *finish = llm_openai_finish_reason(why);
    json_t *deltas = json_array();
    if (!deltas || !llm_tool_stream_end(&c->tools[i], t, deltas, &finish)) {
        json_decref(deltas);
        wk_sse_put(o, NULL); /* out of memory: the stream breaks */
        return;
    }
    size_t k;
    json_t *d;
    json_array_foreach(deltas, k, d) wk_sse_put(o, llm_openai_chunk_delta(j, i, json_incref(d), NULL, NULL));
    json_decref(deltas);
    wk_sse_put(o, llm_openai_chunk_delta(j, i, NULL, take_pending(c, t, i), finish));
}

static void sse_event(void *ctx, const wk_job *j, const wk_event *e, wk_sse_out *o) {
    sse_ctx *c = ctx;
    const llm_task *t = llm_job_task(j);
    if (!strcmp(e->type, "started")) {
        for (int i = 0; t->api == LLM_API_CHAT && i < c->n; i++)
            wk_sse_put(o, llm_openai_chunk(j, i, NULL, 0, NULL, NULL, NULL, true));
    } else if (!strcmp(e->type, "logprobs")) {
        const int i = event_choice(e, c->n);
        if (!c->pending[i]) c->pending[i] = json_array();
        if (!c->pending[i] || json_array_append(c->pending[i], json_object_get(e->data, "entry")) != 0)
            wk_sse_put(o, NULL); /* out of memory: the stream breaks */
    } else if (!strcmp(e->type, "token") && c->tools) {
        const int i = event_choice(e, c->n);
        const char *out = NULL;
        size_t n = 0;
        if (!llm_tool_stream_push(&c->tools[i], t->req.tools.family, e->raw, e->raw_len, &out, &n))
            wk_sse_put(o, NULL);
        else if (n > 0)
            wk_sse_put(o, llm_openai_chunk(j, i, out, n, take_pending(c, t, i), &c->offset[i], NULL, false));
    } else if (!strcmp(e->type, "token")) {
        const int i = event_choice(e, c->n);
        wk_sse_put(o, llm_openai_chunk(j, i, e->raw, e->raw_len, take_pending(c, t, i), &c->offset[i], NULL, false));
    } else if (!strcmp(e->type, "choice_end")) {
        const int i = event_choice(e, c->n);
        const rb_stop_reason why = t->choices[i].stop_reason;
        if (why != RB_STOP_CANCELLED && c->tools)
            tool_stream_end(c, j, i, why, o);
        else if (why != RB_STOP_CANCELLED)
            wk_sse_put(o, llm_openai_chunk(j, i, NULL, 0, take_pending(c, t, i), &c->offset[i],
                                           llm_openai_finish_reason(why), false));
    } else if (!strcmp(e->type, "error")) {
        wk_sse_put(o, json_pack("{s:{s:s,s:s,s:s}}", "error", "message", j->err_msg, "type", "server_error", "code",
                                j->err_code));
    } else if (!strcmp(e->type, "end")) {
        if (t->stop_reason == RB_STOP_CANCELLED) {
            wk_sse_put(o, json_pack("{s:{s:s,s:s,s:s}}", "error", "message", "the request was cancelled", "type",
                                    "server_error", "code", "cancelled"));
            return;
        }
        if (t->req.include_usage)
            wk_sse_put(o, json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", j->id, "object",
                                    t->api == LLM_API_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                                    (json_int_t)j->created_unix, "model", t->model_name, "choices", "usage",
                                    llm_openai_usage(j)));
    }
}

const wk_sse_flavor llm_openai_sse = {.event = sse_event, .free_ctx = sse_ctx_free};

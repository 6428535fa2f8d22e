/* Streaming decoder for generation. It keeps a small window of ids: the ids
 * emitted last time (as context, so decoders that look at the start of the
 * text such as Strip behave as in a full decode) plus the ids not yet
 * emitted. Each push decodes the window and returns the part after the
 * context text, but only when it ends in complete UTF-8 and not inside a run
 * of <0xNN> byte tokens (whose validity is only known when the run ends), so
 * the pieces concatenate to exactly the full decode. Strip steps after the
 * tokens are joined (Fuse, ByteLevel) act on the whole text, so the window
 * is decoded without them and the pieces go through streaming strips: the
 * text's first characters dropped once, trailing ones held back until more
 * text comes or the stream ends. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_utf8.h"

#include <stdlib.h>
#include <string.h>

/* One Strip step over a stream of text (its content is one ASCII byte). */
typedef struct strip_stage {
    char c;
    int start, stop; /* the step's counts */
    int lead_left;   /* leading c's still to drop */
    bool lead_done;  /* a character has passed */
    int held;        /* trailing c's held back (at most stop) */
} strip_stage;

#define MAX_STRIPS 4

struct rb_tokenizer_stream {
    const rb_tokenizer *t;
    unsigned flags;
    bool byte_fallback_dec;
    size_t n_steps;  /* decoder steps the window goes through (the rest are strips) */
    strip_stage strips[MAX_STRIPS];
    size_t n_strips;
    tok_buf stage[2]; /* scratch between strip stages */
    tok_ids ids;     /* window */
    size_t ctx;      /* ids[0..ctx) were emitted already */
    tok_buf ctx_txt; /* decode(ids[0..ctx)) */
    tok_buf out;     /* last returned piece */
    tok_buf full;    /* scratch decode */
};

rb_status rb_tokenizer_stream_create(const rb_tokenizer *t, unsigned flags, rb_tokenizer_stream **out,
                                     rb_error *err) {
    rb_error_clear(err);
    if (!t || !out) return rb_error_set(err, RB_E_INVALID, "stream_create: NULL argument");
    rb_tokenizer_stream *s = calloc(1, sizeof *s);
    if (!s) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    s->t = t;
    s->flags = flags;
    for (size_t i = 0; i < t->n_decs; i++)
        if (t->decs[i].kind == DEC_BYTEFALLBACK) s->byte_fallback_dec = true;
    /* the final Strip steps after a joining step (tok_decoder_check allows nothing else there) */
    s->n_steps = t->n_decs;
    bool joined = false;
    for (size_t i = 0; i < t->n_decs; i++) {
        if (t->decs[i].kind == DEC_FUSE || t->decs[i].kind == DEC_BYTELEVEL) joined = true;
        if (joined && t->decs[i].kind == DEC_STRIP) {
            s->n_steps = i;
            break;
        }
    }
    for (size_t i = s->n_steps; i < t->n_decs; i++) {
        const tok_dec *d = &t->decs[i];
        if (d->kind != DEC_STRIP || s->n_strips == MAX_STRIPS || d->strip_cp > 0x7F) {
            free(s);
            return rb_error_set(err, RB_E_UNSUPPORTED, "stream: decoder chain not streamable");
        }
        strip_stage g = {.c = (char)d->strip_cp, .start = d->start, .stop = d->stop, .lead_left = d->start};
        s->strips[s->n_strips++] = g;
    }
    *out = s;
    return RB_OK;
}

/* Feeds n bytes through one strip stage, appending what passes to out. */
static rb_status strip_feed(strip_stage *g, const char *p, size_t n, tok_buf *out) {
    rb_status st = RB_OK;
    for (size_t i = 0; i < n && !st; i++) {
        char ch = p[i];
        if (!g->lead_done) {
            if (ch == g->c && g->lead_left > 0) {
                g->lead_left--;
                continue;
            }
            g->lead_done = true;
        }
        if (g->stop > 0 && ch == g->c) {
            if (g->held < g->stop) g->held++;
            else st = tok_buf_putc(out, g->c); /* the oldest held one is text now */
            continue;
        }
        for (; g->held > 0 && !st; g->held--) st = tok_buf_putc(out, g->c);
        if (!st) st = tok_buf_putc(out, ch);
    }
    return st;
}

/* Runs s->out through every strip stage (the held trailing characters are
 * dropped when the stream ends) and leaves the result in s->out. */
static rb_status strip_all(rb_tokenizer_stream *s, bool end) {
    rb_status st = RB_OK;
    for (size_t k = 0; k < s->n_strips && !st; k++) {
        tok_buf *o = &s->stage[k & 1];
        o->len = 0;
        st = strip_feed(&s->strips[k], s->out.p ? s->out.p : "", s->out.len, o);
        if (end) {
            strip_stage *g = &s->strips[k];
            *g = (strip_stage){.c = g->c, .start = g->start, .stop = g->stop, .lead_left = g->start};
        }
        s->out.len = 0;
        if (!st) st = tok_buf_append(&s->out, o->p ? o->p : "", o->len);
    }
    if (!st) st = tok_buf_terminate(&s->out);
    return st;
}

void rb_tokenizer_stream_free(rb_tokenizer_stream *s) {
    if (!s) return;
    tok_ids_free(&s->ids);
    tok_buf_free(&s->ctx_txt);
    tok_buf_free(&s->out);
    tok_buf_free(&s->full);
    tok_buf_free(&s->stage[0]);
    tok_buf_free(&s->stage[1]);
    free(s);
}

static bool is_byte_token(const rb_tokenizer *t, int32_t id) {
    size_t len;
    const char *p = tok_vocab_text(&t->vocab, id, &len);
    return p && len == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>';
}

/* Decodes the window into s->full. */
static rb_status decode_window(rb_tokenizer_stream *s, size_t n, tok_buf *dst, rb_error *err) {
    dst->len = 0;
    return tok_decode_ids_steps(s->t, s->ids.p, n, s->flags, s->n_steps, dst, err);
}

static rb_status emit_diff(rb_tokenizer_stream *s, const char **text, size_t *len, bool end) {
    s->out.len = 0;
    size_t pl = s->ctx_txt.len;
    rb_status st;
    if (s->full.len >= pl && memcmp(s->full.p, s->ctx_txt.p ? s->ctx_txt.p : "", pl) == 0)
        st = tok_buf_append(&s->out, s->full.p + pl, s->full.len - pl);
    else /* cannot happen for the supported decoders; keep the text rather than lose it */
        st = tok_buf_append(&s->out, s->full.p, s->full.len);
    if (!st) st = tok_buf_terminate(&s->out);
    if (!st) st = strip_all(s, end);
    *text = s->out.p;
    *len = s->out.len;
    return st;
}

rb_status rb_tokenizer_stream_push(rb_tokenizer_stream *s, int32_t id, const char **text, size_t *len,
                                   rb_error *err) {
    rb_error_clear(err);
    if (!s || !text || !len) return rb_error_set(err, RB_E_INVALID, "stream_push: NULL argument");
    *text = "";
    *len = 0;
    const rb_tokenizer *t = s->t;
    if (!tok_vocab_text(&t->vocab, id, NULL))
        return rb_error_set(err, RB_E_RANGE, "stream: token id %d out of range (n_vocab %d)", (int)id, (int)t->vocab.n);
    if ((s->flags & RB_TOK_SKIP_SPECIAL) && t->is_special[id]) return RB_OK;
    if (tok_ids_push(&s->ids, id)) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    if (s->byte_fallback_dec && is_byte_token(t, id)) return RB_OK; /* run not finished */
    rb_status st = decode_window(s, s->ids.len, &s->full, err);
    if (st) return st;
    if (s->full.len >= 3 && memcmp(s->full.p + s->full.len - 3, TOK_FFFD, 3) == 0) return RB_OK; /* incomplete */
    if ((st = emit_diff(s, text, len, false)) != RB_OK) return rb_error_set(err, st, "out of memory");
    /* slide: the ids just emitted become the context of the next window */
    memmove(s->ids.p, s->ids.p + s->ctx, (s->ids.len - s->ctx) * sizeof *s->ids.p);
    s->ids.len -= s->ctx;
    s->ctx = s->ids.len;
    return decode_window(s, s->ctx, &s->ctx_txt, err);
}

rb_status rb_tokenizer_stream_flush(rb_tokenizer_stream *s, const char **text, size_t *len, rb_error *err) {
    rb_error_clear(err);
    if (!s || !text || !len) return rb_error_set(err, RB_E_INVALID, "stream_flush: NULL argument");
    rb_status st = decode_window(s, s->ids.len, &s->full, err);
    if (st) return st;
    if ((st = emit_diff(s, text, len, true)) != RB_OK) return rb_error_set(err, st, "out of memory");
    s->ids.len = 0;
    s->ctx = 0;
    s->ctx_txt.len = 0;
    return RB_OK;
}

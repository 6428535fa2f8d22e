/* Streaming decoder for generation. It keeps a small window of ids: the ids
 * emitted last time (as context, so decoders that look at the start of the
 * text such as Strip behave as in a full decode) plus the ids not yet
 * emitted. Each push decodes the window and returns the part after the
 * context text, but only when it ends in complete UTF-8 and not inside a run
 * of <0xNN> byte tokens (whose validity is only known when the run ends), so
 * the pieces concatenate to exactly the full decode. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_utf8.h"

#include <stdlib.h>
#include <string.h>

struct rb_tokenizer_stream {
    const rb_tokenizer *t;
    unsigned flags;
    bool byte_fallback_dec;
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
    *out = s;
    return RB_OK;
}

void rb_tokenizer_stream_free(rb_tokenizer_stream *s) {
    if (!s) return;
    tok_ids_free(&s->ids);
    tok_buf_free(&s->ctx_txt);
    tok_buf_free(&s->out);
    tok_buf_free(&s->full);
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
    return tok_decode_ids(s->t, s->ids.p, n, s->flags, dst, err);
}

static rb_status emit_diff(rb_tokenizer_stream *s, const char **text, size_t *len) {
    s->out.len = 0;
    size_t pl = s->ctx_txt.len;
    rb_status st;
    if (s->full.len >= pl && memcmp(s->full.p, s->ctx_txt.p ? s->ctx_txt.p : "", pl) == 0)
        st = tok_buf_append(&s->out, s->full.p + pl, s->full.len - pl);
    else /* cannot happen for the supported decoders; keep the text rather than lose it */
        st = tok_buf_append(&s->out, s->full.p, s->full.len);
    if (!st) st = tok_buf_terminate(&s->out);
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
    if ((st = emit_diff(s, text, len)) != RB_OK) return rb_error_set(err, st, "out of memory");
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
    if ((st = emit_diff(s, text, len)) != RB_OK) return rb_error_set(err, st, "out of memory");
    s->ids.len = 0;
    s->ctx = 0;
    s->ctx_txt.len = 0;
    return RB_OK;
}

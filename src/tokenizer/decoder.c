/* Decoder chain (ids -> text) with HF semantics: token texts go through
 * Replace, ByteFallback (<0xNN> runs -> bytes; an invalid run gives one U+FFFD
 * per byte), Fuse, Strip, ByteLevel (unicode -> bytes, lossy UTF-8) and
 * Metaspace steps, each mapping a list of strings to a new list. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_utf8.h"

#include <string.h>

static const char META[] = "\xE2\x96\x81";

int tok_parse_byte_token(const char *s, size_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static rb_status flush_bytes(tok_buf *pend, size_t n_bytes, tok_words *out) {
    rb_status st = RB_OK;
    if (!n_bytes) return RB_OK;
    if (tok_utf8_validate(pend->p, pend->len, NULL)) {
        st = tok_words_push(out, pend->p, pend->len);
    } else {
        for (size_t i = 0; i < n_bytes && !st; i++) st = tok_words_push(out, TOK_FFFD, 3);
    }
    pend->len = 0;
    return st;
}

static rb_status step(const rb_tokenizer *t, const tok_dec *d, const tok_words *in, tok_words *out) {
    rb_status st = RB_OK;
    tok_buf tmp = {0};
    switch (d->kind) {
    case DEC_REPLACE:
        for (size_t i = 0; i < in->n && !st; i++) {
            const char *s = in->text.p + in->w[i].off;
            size_t len = in->w[i].len, run = 0, k = 0;
            tmp.len = 0;
            while (d->alen && k + d->alen <= len && !st) {
                if (memcmp(s + k, d->a, d->alen) == 0) {
                    st = tok_buf_append(&tmp, s + run, k - run);
                    if (!st) st = tok_buf_append(&tmp, d->b, d->blen);
                    k += d->alen;
                    run = k;
                } else {
                    k++;
                }
            }
            if (!st) st = tok_buf_append(&tmp, s + run, len - run);
            if (!st) st = tok_words_push(out, tmp.p ? tmp.p : "", tmp.len);
        }
        break;
    case DEC_BYTEFALLBACK: {
        size_t nb = 0;
        for (size_t i = 0; i < in->n && !st; i++) {
            const char *s = in->text.p + in->w[i].off;
            int b = tok_parse_byte_token(s, in->w[i].len);
            if (b >= 0) {
                char c = (char)b;
                st = tok_buf_append(&tmp, &c, 1);
                nb++;
                continue;
            }
            st = flush_bytes(&tmp, nb, out);
            nb = 0;
            if (!st) st = tok_words_push(out, s, in->w[i].len);
        }
        if (!st) st = flush_bytes(&tmp, nb, out);
        break;
    }
    case DEC_FUSE:
        for (size_t i = 0; i < in->n && !st; i++) st = tok_buf_append(&tmp, in->text.p + in->w[i].off, in->w[i].len);
        if (!st) st = tok_words_push(out, tmp.p ? tmp.p : "", tmp.len);
        break;
    case DEC_STRIP: {
        char c[4];
        size_t cl = tok_utf8_encode(d->strip_cp, c);
        for (size_t i = 0; i < in->n && !st; i++) {
            const char *s = in->text.p + in->w[i].off;
            size_t b = 0, e = in->w[i].len;
            for (int k = 0; k < d->start && b + cl <= e && memcmp(s + b, c, cl) == 0; k++) b += cl;
            for (int k = 0; k < d->stop && e >= b + cl && memcmp(s + e - cl, c, cl) == 0; k++) e -= cl;
            st = tok_words_push(out, s + b, e - b);
        }
        break;
    }
    case DEC_BYTELEVEL: {
        tok_buf raw = {0};
        for (size_t i = 0; i < in->n && !st; i++) {
            const unsigned char *s = (const unsigned char *)in->text.p + in->w[i].off;
            size_t len = in->w[i].len, start = raw.len;
            bool ok = true;
            for (size_t k = 0; k < len && !st;) {
                uint32_t cp;
                k += tok_utf8_decode(s + k, &cp);
                int b = cp < 324 ? t->bl_dec[cp] : -1;
                if (b < 0) { ok = false; break; }
                st = tok_buf_putc(&raw, (char)b);
            }
            if (!ok && !st) { /* a token with characters outside the map keeps its bytes */
                raw.len = start;
                st = tok_buf_append(&raw, s, len);
            }
        }
        if (!st) st = tok_utf8_lossy(raw.p ? raw.p : "", raw.len, &tmp);
        if (!st) st = tok_words_push(out, tmp.p ? tmp.p : "", tmp.len);
        tok_buf_free(&raw);
        break;
    }
    case DEC_METASPACE:
        for (size_t i = 0; i < in->n && !st; i++) {
            const char *s = in->text.p + in->w[i].off;
            size_t len = in->w[i].len;
            tmp.len = 0;
            for (size_t k = 0; k < len && !st;) {
                if (k + 3 <= len && memcmp(s + k, META, 3) == 0) {
                    if (!(i == 0 && d->prepend != PREPEND_NEVER)) st = tok_buf_putc(&tmp, ' ');
                    k += 3;
                } else {
                    st = tok_buf_putc(&tmp, s[k++]);
                }
            }
            if (!st) st = tok_words_push(out, tmp.p ? tmp.p : "", tmp.len);
        }
        break;
    }
    tok_buf_free(&tmp);
    return st;
}

rb_status tok_decode_ids(const rb_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, tok_buf *out,
                         rb_error *err) {
    return tok_decode_ids_steps(t, ids, n, flags, t->n_decs, out, err);
}

rb_status tok_decode_ids_steps(const rb_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, size_t n_steps,
                               tok_buf *out, rb_error *err) {
    tok_words a = {0}, b = {0};
    rb_status st = RB_OK;
    for (size_t i = 0; i < n && !st; i++) {
        int32_t id = ids[i];
        size_t len;
        const char *s = tok_vocab_text(&t->vocab, id, &len);
        if (!s) {
            st = rb_error_set(err, RB_E_RANGE, "decode: token id %d at position %zu is out of range (n_vocab %d)",
                              (int)id, i, (int)t->vocab.n);
            break;
        }
        if ((flags & RB_TOK_SKIP_SPECIAL) && t->is_special[id]) continue;
        st = tok_words_push(&a, s, len);
    }
    tok_words *cur = &a, *nxt = &b;
    for (size_t i = 0; i < n_steps && i < t->n_decs && !st; i++) {
        tok_words_clear(nxt);
        st = step(t, &t->decs[i], cur, nxt);
        tok_words *x = cur;
        cur = nxt;
        nxt = x;
    }
    /* without a decoder HF joins tokens with spaces */
    for (size_t i = 0; i < cur->n && !st; i++) {
        if (t->n_decs == 0 && i > 0) st = tok_buf_putc(out, ' ');
        if (!st) st = tok_buf_append(out, cur->text.p + cur->w[i].off, cur->w[i].len);
    }
    if (!st) st = tok_buf_terminate(out);
    if (st && err && err->code == RB_OK) rb_error_set(err, st, "decode failed: %s", rb_status_str(st));
    tok_words_free(&a);
    tok_words_free(&b);
    return st;
}

rb_status tok_decoder_check(const rb_tokenizer *t, rb_error *err) {
    bool fused = false;
    for (size_t i = 0; i < t->n_decs; i++) {
        tok_dec_kind k = t->decs[i].kind;
        if (fused && k != DEC_STRIP)
            return rb_error_set(err, RB_E_UNSUPPORTED,
                                "decoder: only Strip steps may follow Fuse or ByteLevel (a streamed decode could not "
                                "reproduce step %zu)", i);
        if (k == DEC_FUSE || k == DEC_BYTELEVEL) fused = true;
    }
    return RB_OK;
}

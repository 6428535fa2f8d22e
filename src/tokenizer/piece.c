/* rb_tokenizer_token_piece: the bytes one token stands for inside decoded
 * text (what log-probability answers and /tokenize's pieces show per token).
 * The decoder chain runs on that token alone as if it sat in the middle of
 * a sequence: Replace as usual, a byte token (<0xNN>) and byte-level
 * characters become their raw bytes (even a lone part of a UTF-8 sequence,
 * which a whole decode would turn into U+FFFD), Fuse changes nothing,
 * Strip steps (which only trim the ends of a whole text) are skipped, and
 * Metaspace turns every ▁ into a space. Concatenating the pieces of ids
 * therefore gives the bytes of their decode, up to what Strip and a
 * leading ▁ remove at the start. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_utf8.h"

#include <stdlib.h>
#include <string.h>

static const char META[] = "\xE2\x96\x81";

/* One decoder step on cur (len bytes) into out. */
static rb_status piece_step(const rb_tokenizer *t, const tok_dec *d, const char *cur, size_t len, tok_buf *out) {
    rb_status st = RB_OK;
    switch (d->kind) {
    case DEC_REPLACE: {
        size_t k = 0, run = 0;
        while (d->alen && k + d->alen <= len && !st) {
            if (memcmp(cur + k, d->a, d->alen) == 0) {
                st = tok_buf_append(out, cur + run, k - run);
                if (!st) st = tok_buf_append(out, d->b, d->blen);
                k += d->alen;
                run = k;
            } else {
                k++;
            }
        }
        if (!st) st = tok_buf_append(out, cur + run, len - run);
        break;
    }
    case DEC_BYTEFALLBACK: {
        int b = tok_parse_byte_token(cur, len);
        st = b >= 0 ? tok_buf_putc(out, (char)b) : tok_buf_append(out, cur, len);
        break;
    }
    case DEC_BYTELEVEL: {
        const unsigned char *s = (const unsigned char *)cur;
        for (size_t k = 0; k < len && !st;) {
            uint32_t cp;
            k += tok_utf8_decode(s + k, &cp);
            int b = cp < 324 ? t->bl_dec[cp] : -1;
            if (b < 0) { /* characters outside the map: the token keeps its bytes */
                out->len = 0;
                return tok_buf_append(out, cur, len);
            }
            st = tok_buf_putc(out, (char)b);
        }
        break;
    }
    case DEC_METASPACE:
        for (size_t k = 0; k < len && !st;) {
            if (k + 3 <= len && memcmp(cur + k, META, 3) == 0) {
                st = tok_buf_putc(out, ' ');
                k += 3;
            } else {
                st = tok_buf_putc(out, cur[k++]);
            }
        }
        break;
    case DEC_FUSE:
    case DEC_STRIP:
        st = tok_buf_append(out, cur, len);
        break;
    }
    return st;
}

rb_status rb_tokenizer_token_piece(const rb_tokenizer *t, int32_t id, char **piece, size_t *len, rb_error *err) {
    if (!t || !piece) return rb_error_set(err, RB_E_INVALID, "token_piece: NULL argument");
    *piece = NULL;
    if (len) *len = 0;
    size_t tl = 0;
    const char *s = tok_vocab_text(&t->vocab, id, &tl);
    if (!s)
        return rb_error_set(err, RB_E_RANGE, "token id %d is out of range (n_vocab %d)", (int)id, (int)t->vocab.n);
    tok_buf a = {0}, b = {0};
    rb_status st = tok_buf_append(&a, s, tl);
    for (size_t i = 0; i < t->n_decs && !st; i++) {
        b.len = 0;
        st = piece_step(t, &t->decs[i], a.p ? a.p : "", a.len, &b);
        tok_buf x = a;
        a = b;
        b = x;
    }
    if (!st) st = tok_buf_terminate(&a);
    tok_buf_free(&b);
    if (st) {
        tok_buf_free(&a);
        return rb_error_set(err, st, "out of memory");
    }
    if (!a.p) { /* an empty token text and no step wrote anything */
        a.p = calloc(1, 1);
        if (!a.p) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    *piece = a.p;
    if (len) *len = a.len;
    return RB_OK;
}

/* Growable byte buffer, id vector and word list used by the tokenizer
 * pipeline (see tok_buf.h). */
#include "tokenizer/tok_buf.h"

#include <stdlib.h>
#include <string.h>

static rb_status grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return RB_OK;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (nc > SIZE_MAX / 2 / elem) return RB_E_NOMEM;
        nc *= 2;
    }
    void *q = realloc(*p, nc * elem);
    if (!q) return RB_E_NOMEM;
    *p = q;
    *cap = nc;
    return RB_OK;
}

rb_status tok_buf_reserve(tok_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len - 1) return RB_E_NOMEM;
    return grow((void **)&b->p, &b->cap, b->len + extra + 1, 1);
}

rb_status tok_buf_append(tok_buf *b, const void *s, size_t n) {
    rb_status st = tok_buf_reserve(b, n);
    if (st) return st;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return RB_OK;
}

rb_status tok_buf_putc(tok_buf *b, char c) { return tok_buf_append(b, &c, 1); }

rb_status tok_buf_terminate(tok_buf *b) {
    rb_status st = tok_buf_reserve(b, 0);
    if (st) return st;
    b->p[b->len] = 0;
    return RB_OK;
}

void tok_buf_free(tok_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

rb_status tok_ids_push(tok_ids *v, int32_t id) {
    rb_status st = grow((void **)&v->p, &v->cap, v->len + 1, sizeof *v->p);
    if (st) return st;
    v->p[v->len++] = id;
    return RB_OK;
}

void tok_ids_free(tok_ids *v) {
    free(v->p);
    v->p = NULL;
    v->len = v->cap = 0;
}

rb_status tok_words_push(tok_words *w, const char *s, size_t len) {
    rb_status st = grow((void **)&w->w, &w->cap, w->n + 1, sizeof *w->w);
    if (st) return st;
    size_t off = w->text.len;
    st = tok_buf_append(&w->text, s, len);
    if (st) return st;
    w->w[w->n].off = off;
    w->w[w->n].len = len;
    w->n++;
    return RB_OK;
}

void tok_words_clear(tok_words *w) {
    w->n = 0;
    w->text.len = 0;
}

void tok_words_free(tok_words *w) {
    tok_buf_free(&w->text);
    free(w->w);
    w->w = NULL;
    w->n = w->cap = 0;
}

void tok_scratch_free(tok_scratch *sc) {
    free(sc->sym);
    free(sc->heap);
    tok_buf_free(&sc->cat);
    memset(sc, 0, sizeof *sc);
}

/* Pre-tokenizer steps that cut a normalized chunk into words for BPE:
 * Split (regex or literal, with HF's five delimiter behaviours and invert),
 * ByteLevel (optional GPT-2 regex, then the byte -> unicode map), Metaspace
 * and Digits. Each step maps a list of pieces to a new list. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_utf8.h"

#include <stdlib.h>
#include <string.h>

typedef struct piece_range {
    size_t b, e;
    bool m;
} piece_range;

typedef struct range_list {
    piece_range *r;
    size_t n, cap;
} range_list;

static rb_status rl_push(range_list *l, size_t b, size_t e, bool m) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 32;
        piece_range *p = realloc(l->r, nc * sizeof *p);
        if (!p) return RB_E_NOMEM;
        l->r = p;
        l->cap = nc;
    }
    l->r[l->n].b = b;
    l->r[l->n].e = e;
    l->r[l->n].m = m;
    l->n++;
    return RB_OK;
}

/* Appends a match [ms, me) after the gap since *prev. */
static rb_status add_match(range_list *l, size_t *prev, size_t ms, size_t me) {
    rb_status st = RB_OK;
    if (*prev != ms) st = rl_push(l, *prev, ms, false);
    if (!st) st = rl_push(l, ms, me, true);
    *prev = me;
    return st;
}

static rb_status find_regex(const pcre2_code *re, const char *s, size_t len, range_list *l) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return RB_E_NOMEM;
    size_t pos = 0, prev = 0;
    rb_status st = RB_OK;
    while (pos <= len) {
        bool found;
        size_t ms, me;
        if ((st = tok_regex_next(re, md, s, len, pos, &found, &ms, &me)) != RB_OK || !found) break;
        if (me == ms) { /* empty matches split nothing */
            if (ms >= len) break;
            pos = ms + tok_utf8_seq_len((const unsigned char *)s + ms, len - ms);
            continue;
        }
        if ((st = add_match(l, &prev, ms, me)) != RB_OK) break;
        pos = me;
    }
    pcre2_match_data_free(md);
    if (!st && prev != len) st = rl_push(l, prev, len, false);
    return st;
}

static rb_status find_literal(const char *lit, size_t ll, const char *s, size_t len, range_list *l) {
    size_t prev = 0, i = 0;
    rb_status st = RB_OK;
    while (ll && i + ll <= len && !st) {
        if (memcmp(s + i, lit, ll) == 0) {
            st = add_match(l, &prev, i, i + ll);
            i += ll;
        } else {
            i++;
        }
    }
    if (!st && prev != len) st = rl_push(l, prev, len, false);
    return st;
}

/* Each ASCII digit is its own match (Digits pre-tokenizer). */
static rb_status find_digits(const char *s, size_t len, range_list *l) {
    size_t prev = 0;
    rb_status st = RB_OK;
    for (size_t i = 0; i < len && !st; i++)
        if (s[i] >= '0' && s[i] <= '9') st = add_match(l, &prev, i, i + 1);
    if (!st && prev != len) st = rl_push(l, prev, len, false);
    return st;
}

/* Applies a delimiter behaviour to the ranges and pushes the non-empty pieces. */
static rb_status emit_split(const char *s, range_list *l, tok_split_beh beh, bool invert, tok_words *out) {
    for (size_t i = 0; i < l->n; i++)
        if (invert) l->r[i].m = !l->r[i].m;
    size_t w = 0;
    bool prev_match = false;
    switch (beh) {
    case SPLIT_ISOLATED: w = l->n; break;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < l->n; i++)
            if (!l->r[i].m) l->r[w++] = l->r[i];
        break;
    case SPLIT_MERGED_PREV:
        for (size_t i = 0; i < l->n; i++) {
            piece_range r = l->r[i];
            if (r.m && !prev_match && w > 0) l->r[w - 1].e = r.e;
            else l->r[w++] = r;
            prev_match = r.m;
        }
        break;
    case SPLIT_MERGED_NEXT: {
        /* walk backwards, merging a match into the following piece */
        size_t k = l->n;
        for (size_t i = l->n; i-- > 0;) {
            piece_range r = l->r[i];
            if (r.m && !prev_match && k < l->n) l->r[k].b = r.b;
            else l->r[--k] = r;
            prev_match = r.m;
        }
        memmove(l->r, l->r + k, (l->n - k) * sizeof *l->r);
        w = l->n - k;
        break;
    }
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < l->n; i++) {
            piece_range r = l->r[i];
            if (w > 0 && l->r[w - 1].m == r.m) l->r[w - 1].e = r.e;
            else l->r[w++] = r;
        }
        break;
    }
    for (size_t i = 0; i < w; i++) {
        if (l->r[i].e == l->r[i].b) continue;
        rb_status st = tok_words_push(out, s + l->r[i].b, l->r[i].e - l->r[i].b);
        if (st) return st;
    }
    return RB_OK;
}

static rb_status byte_map(const rb_tokenizer *t, const char *s, size_t len, tok_words *out) {
    /* push an empty word, then grow its span in place as bytes are mapped */
    rb_status st = tok_words_push(out, "", 0);
    if (!st) st = tok_buf_reserve(&out->text, len * 2);
    if (st) return st;
    tok_buf *b = &out->text;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)s[i];
        memcpy(b->p + b->len, t->bl_enc[c], t->bl_len[c]);
        b->len += t->bl_len[c];
    }
    b->p[b->len] = 0;
    out->w[out->n - 1].len = b->len - out->w[out->n - 1].off;
    return RB_OK;
}

static rb_status step(const rb_tokenizer *t, const tok_pre *p, const char *s, size_t len, bool at_start,
                      tok_words *out) {
    range_list l = {0};
    rb_status st = RB_OK;
    tok_buf tmp = {0};
    switch (p->kind) {
    case PRE_SPLIT:
        st = p->re ? find_regex(p->re, s, len, &l) : find_literal(p->lit, p->litlen, s, len, &l);
        if (!st) st = emit_split(s, &l, p->behavior, p->invert, out);
        break;
    case PRE_DIGITS:
        st = find_digits(s, len, &l);
        if (!st) st = emit_split(s, &l, p->behavior, false, out);
        break;
    case PRE_BYTELEVEL: {
        const char *src = s;
        size_t sl = len;
        if (p->add_prefix_space && (len == 0 || s[0] != ' ')) {
            st = tok_buf_putc(&tmp, ' ');
            if (!st) st = tok_buf_append(&tmp, s, len);
            src = tmp.p;
            sl = tmp.len;
        }
        if (st) break;
        if (p->use_regex) {
            st = find_regex(p->re, src, sl, &l);
            for (size_t i = 0; i < l.n && !st; i++) st = byte_map(t, src + l.r[i].b, l.r[i].e - l.r[i].b, out);
        } else if (sl) {
            st = byte_map(t, src, sl, out);
        }
        break;
    }
    case PRE_METASPACE: {
        static const char meta[] = "\xE2\x96\x81"; /* ▁ */
        for (size_t i = 0; i < len && !st; i++)
            st = s[i] == ' ' ? tok_buf_append(&tmp, meta, 3) : tok_buf_putc(&tmp, s[i]);
        bool starts = tmp.len >= 3 && memcmp(tmp.p, meta, 3) == 0;
        if (!st && !starts && (p->prepend == PREPEND_ALWAYS || (p->prepend == PREPEND_FIRST && at_start))) {
            tok_buf t2 = {0};
            st = tok_buf_append(&t2, meta, 3);
            if (!st) st = tok_buf_append(&t2, tmp.p, tmp.len);
            tok_buf_free(&tmp);
            tmp = t2;
        }
        if (st) break;
        if (p->split) {
            st = find_literal(meta, 3, tmp.p, tmp.len, &l);
            if (!st) st = emit_split(tmp.p, &l, SPLIT_MERGED_NEXT, false, out);
        } else if (tmp.len) {
            st = tok_words_push(out, tmp.p, tmp.len);
        }
        break;
    }
    }
    free(l.r);
    tok_buf_free(&tmp);
    return st;
}

rb_status tok_pretokenize(const rb_tokenizer *t, const char *s, size_t len, bool first_chunk, tok_words *words) {
    if (t->n_pres == 0) return len ? tok_words_push(words, s, len) : RB_OK;
    tok_words a = {0}, b = {0};
    rb_status st = len ? tok_words_push(&a, s, len) : RB_OK;
    tok_words *cur = &a, *nxt = &b;
    for (size_t i = 0; i < t->n_pres && !st; i++) {
        tok_words_clear(nxt);
        for (size_t k = 0; k < cur->n && !st; k++)
            st = step(t, &t->pres[i], cur->text.p + cur->w[k].off, cur->w[k].len, first_chunk && k == 0, nxt);
        tok_words *x = cur;
        cur = nxt;
        nxt = x;
    }
    for (size_t k = 0; k < cur->n && !st; k++) st = tok_words_push(words, cur->text.p + cur->w[k].off, cur->w[k].len);
    tok_words_free(&a);
    tok_words_free(&b);
    return st;
}

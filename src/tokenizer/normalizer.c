/* Normalizer steps applied to each text chunk between added tokens:
 * Prepend, Replace (literal or regex), NFC and Strip, in HF semantics. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_utf8.h"

#include <string.h>

static rb_status replace_literal(const tok_norm *n, const char *s, size_t len, tok_buf *o) {
    if (n->alen == 0) return tok_buf_append(o, s, len);
    size_t i = 0, run = 0;
    rb_status st = RB_OK;
    while (i + n->alen <= len && !st) {
        if (memcmp(s + i, n->a, n->alen) == 0) {
            st = tok_buf_append(o, s + run, i - run);
            if (!st) st = tok_buf_append(o, n->b, n->blen);
            i += n->alen;
            run = i;
        } else {
            i++;
        }
    }
    if (!st) st = tok_buf_append(o, s + run, len - run);
    return st;
}

static rb_status replace_regex(const tok_norm *n, const char *s, size_t len, tok_buf *o) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(n->re, NULL);
    if (!md) return RB_E_NOMEM;
    size_t pos = 0, run = 0;
    rb_status st = RB_OK;
    while (pos <= len) {
        bool found;
        size_t ms, me;
        if ((st = tok_regex_next(n->re, md, s, len, pos, &found, &ms, &me)) != RB_OK || !found) break;
        if ((st = tok_buf_append(o, s + run, ms - run)) != RB_OK) break;
        if ((st = tok_buf_append(o, n->b, n->blen)) != RB_OK) break;
        run = me;
        if (me == ms) { /* empty match: step one character */
            if (me >= len) break;
            pos = me + tok_utf8_seq_len((const unsigned char *)s + me, len - me);
        } else {
            pos = me;
        }
    }
    pcre2_match_data_free(md);
    if (!st) st = tok_buf_append(o, s + run, len - run);
    return st;
}

static rb_status strip(const tok_norm *n, const char *s, size_t len, tok_buf *o) {
    const unsigned char *u = (const unsigned char *)s;
    size_t b = 0, e = len;
    if (n->left) {
        while (b < e) {
            uint32_t c;
            size_t k = tok_utf8_decode(u + b, &c);
            if (!tok_cp_is_ws(c)) break;
            b += k;
        }
    }
    if (n->right) {
        while (e > b) {
            size_t k = e - 1;
            while (k > b && (u[k] & 0xC0) == 0x80) k--;
            uint32_t c;
            tok_utf8_decode(u + k, &c);
            if (!tok_cp_is_ws(c)) break;
            e = k;
        }
    }
    return tok_buf_append(o, s + b, e - b);
}

rb_status tok_normalize(const rb_tokenizer *t, const char *s, size_t len, tok_buf *out) {
    tok_buf a = {0}, b = {0};
    const char *cur = s;
    size_t cur_len = len;
    rb_status st = RB_OK;
    for (size_t i = 0; i < t->n_norms && !st; i++) {
        const tok_norm *n = &t->norms[i];
        tok_buf *dst = (cur == a.p && a.p) ? &b : &a;
        dst->len = 0;
        switch (n->kind) {
        case NORM_PREPEND:
            if (cur_len) st = tok_buf_append(dst, n->a, n->alen);
            if (!st) st = tok_buf_append(dst, cur, cur_len);
            break;
        case NORM_REPLACE: st = n->re ? replace_regex(n, cur, cur_len, dst) : replace_literal(n, cur, cur_len, dst); break;
        case NORM_NFC: st = tok_nfc(cur, cur_len, dst); break;
        case NORM_STRIP: st = strip(n, cur, cur_len, dst); break;
        }
        if (!st) st = tok_buf_terminate(dst);
        cur = dst->p;
        cur_len = dst->len;
    }
    if (!st) st = tok_buf_append(out, cur, cur_len);
    tok_buf_free(&a);
    tok_buf_free(&b);
    return st;
}

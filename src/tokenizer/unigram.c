/* Unigram (SentencePiece) encoding: the text pipelines of sentencepiece
 * (charsmap, whitespace rules with the dummy "▁" prefix) and of
 * tokenizer.json (added tokens split out first, normalizer steps,
 * WhitespaceSplit / Metaspace pre-tokenizers, template post-processor), the
 * Viterbi segmentation over the pieces' scores with sentencepiece's unknown
 * handling, truncation and padding, and the accessors. */
#include "tokenizer/tok_utf8.h"
#include "tokenizer/unigram_internal.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UG_UNK_PENALTY 10.0 /* unknown characters score min_score - 10 (sentencepiece and tokenizers) */

rb_status ug_new(int32_t n, rb_unigram **out, rb_error *err) {
    *out = NULL;
    if (n < 1 || n > (1 << 24)) return rb_error_set(err, RB_E_FORMAT, "unigram: %d pieces", (int)n);
    rb_unigram *t = calloc(1, sizeof *t);
    if (!t) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    if (tok_vocab_init(&t->v, n) != RB_OK) {
        free(t);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    t->unk_id = t->eos_id = t->pad_id = -1;
    t->add_dummy_prefix = t->remove_extra_ws = t->escape_ws = true;
    memcpy(t->meta_rep, "\xE2\x96\x81", 3);
    t->meta_rep_len = 3;
    t->meta_split = true;
    *out = t;
    return RB_OK;
}

void ug_finish(rb_unigram *t) {
    double mn = DBL_MAX, mx = -DBL_MAX;
    size_t ml = 1;
    for (int32_t i = 0; i < t->v.n; i++) {
        if (t->v.len[i] == UINT32_MAX) continue;
        if (t->v.len[i] > ml) ml = t->v.len[i];
        if (t->spm && t->v.types[i] != TOK_TYPE_NORMAL) continue;
        if (t->v.scores[i] < mn) mn = t->v.scores[i];
        if (t->v.scores[i] > mx) mx = t->v.scores[i];
    }
    t->min_score = mn == DBL_MAX ? 0.0 : mn;
    t->max_score = mx == -DBL_MAX ? 0.0 : mx;
    t->max_piece_len = ml;
}

void rb_unigram_free(rb_unigram *t) {
    if (!t) return;
    tok_vocab_free(&t->v);
    ug_charsmap_free(&t->cm);
    for (size_t i = 0; i < t->n_norms; i++) {
        free(t->norms[i].a);
        free(t->norms[i].b);
    }
    free(t->norms);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].text);
    free(t->added);
    tok_trie_free(&t->added_trie);
    free(t->tpl_pre);
    free(t->tpl_post);
    free(t);
}

int32_t rb_unigram_n_vocab(const rb_unigram *t) { return t ? t->v.n : 0; }
int32_t rb_unigram_pad_id(const rb_unigram *t) { return t ? t->pad_id : -1; }
int32_t rb_unigram_eos_id(const rb_unigram *t) { return t ? t->eos_id : -1; }
int32_t rb_unigram_unk_id(const rb_unigram *t) { return t ? t->unk_id : -1; }
const char *rb_unigram_piece(const rb_unigram *t, int32_t id, size_t *len) {
    if (!t) return NULL;
    return tok_vocab_text(&t->v, id, len);
}

/* ---- Viterbi ---- */

static bool usable(const rb_unigram *t, int32_t id) {
    if (!t->spm) return true; /* tokenizers' Unigram matches every vocabulary entry */
    const int32_t ty = t->v.types[id];
    return ty == TOK_TYPE_NORMAL || ty == TOK_TYPE_USER_DEFINED;
}

static rb_status emit_unknown(const rb_unigram *t, const char *s, size_t len, bool prev_unk, tok_ids *out) {
    if (t->byte_fallback) {
        for (size_t i = 0; i < len; i++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", (unsigned)(uint8_t)s[i]);
            const int32_t id = tok_vocab_find(&t->v, name, 6);
            if (id < 0) goto as_unk;
            if (tok_ids_push(out, id) != RB_OK) return RB_E_NOMEM;
        }
        return RB_OK;
    }
as_unk:
    if (prev_unk) return RB_OK; /* consecutive unknowns become one unk */
    return tok_ids_push(out, t->unk_id);
}

rb_status ug_viterbi(const rb_unigram *t, const char *s, size_t n, tok_ids *out) {
    if (n == 0) return RB_OK;
    double *score = malloc(sizeof(double) * (n + 1));
    int32_t *id = malloc(sizeof(int32_t) * (n + 1));
    size_t *from = malloc(sizeof(size_t) * (n + 1));
    rb_status st = RB_OK;
    if (!score || !id || !from) {
        st = RB_E_NOMEM;
        goto done;
    }
    for (size_t i = 0; i <= n; i++) id[i] = -2; /* -2: not reached */
    id[0] = -1;
    score[0] = 0.0;
    const double unk_score = t->min_score - UG_UNK_PENALTY;
    for (size_t i = 0; i < n;) {
        const size_t cl = tok_utf8_seq_len((const unsigned char *)s + i, n - i);
        if (cl == 0) {
            st = RB_E_INVALID;
            goto done;
        }
        bool single = false;
        for (size_t e = i; e < n;) {
            const size_t l = tok_utf8_seq_len((const unsigned char *)s + e, n - e);
            if (l == 0 || e + l - i > t->max_piece_len) break;
            e += l;
            const int32_t pid = tok_vocab_find(&t->v, s + i, e - i);
            if (pid < 0 || !usable(t, pid)) continue;
            const double sc = t->spm && t->v.types[pid] == TOK_TYPE_USER_DEFINED
                                  ? (double)(e - i) * t->max_score - 0.1
                                  : (double)t->v.scores[pid];
            if (e - i == cl) single = true;
            const double c = score[i] + sc;
            if (id[e] == -2 || c > score[e]) {
                score[e] = c;
                id[e] = pid;
                from[e] = i;
            }
        }
        if (!single) {
            const size_t e = i + cl;
            const double c = score[i] + unk_score;
            if (id[e] == -2 || c > score[e]) {
                score[e] = c;
                id[e] = -3; /* unknown */
                from[e] = i;
            }
        }
        i += cl;
    }
    /* backtrack: collect the ends, then emit in order */
    size_t cnt = 0;
    for (size_t e = n; e > 0; e = from[e]) cnt++;
    size_t *ends = malloc(sizeof(size_t) * cnt);
    if (!ends) {
        st = RB_E_NOMEM;
        goto done;
    }
    size_t k = cnt;
    for (size_t e = n; e > 0; e = from[e]) ends[--k] = e;
    bool prev_unk = false;
    for (size_t j = 0; j < cnt && st == RB_OK; j++) {
        const size_t e = ends[j], b = from[e];
        if (id[e] == -3) {
            if (t->unk_id < 0) st = RB_E_INVALID;
            else st = emit_unknown(t, s + b, e - b, prev_unk, out);
            prev_unk = true;
        } else {
            st = tok_ids_push(out, id[e]);
            prev_unk = false;
        }
    }
    free(ends);
done:
    free(score);
    free(id);
    free(from);
    return st;
}

/* ---- sentencepiece's normalizer ---- */

static rb_status put_char(tok_buf *b, const char *s, size_t n, bool escape) {
    for (size_t i = 0; i < n; i++) {
        rb_status st = (escape && s[i] == ' ') ? tok_buf_append(b, "\xE2\x96\x81", 3) : tok_buf_putc(b, s[i]);
        if (st != RB_OK) return st;
    }
    return RB_OK;
}

/* The normalized form of the character(s) at s: the charsmap's replacement
 * or the character itself. */
static const char *norm_prefix(const rb_unigram *t, const char *s, size_t len, size_t *consumed, size_t *out_len) {
    if (t->has_cm) {
        const char *r = ug_charsmap_match(&t->cm, s, len, consumed);
        if (r) {
            *out_len = strlen(r);
            return r;
        }
    }
    *consumed = tok_utf8_seq_len((const unsigned char *)s, len);
    *out_len = *consumed;
    return s;
}

static rb_status spm_normalize(const rb_unigram *t, const char *s, size_t len, tok_buf *b) {
    size_t c, ol;
    if (t->remove_extra_ws) { /* leading whitespace */
        while (len) {
            const char *r = norm_prefix(t, s, len, &c, &ol);
            if (!(ol == 1 && r[0] == ' ')) break;
            s += c;
            len -= c;
        }
    }
    if (!len) return RB_OK;
    const char *ws = t->escape_ws ? "\xE2\x96\x81" : " ";
    const size_t wsl = strlen(ws);
    if (t->add_dummy_prefix && tok_buf_append(b, ws, wsl) != RB_OK) return RB_E_NOMEM;
    bool prev_space = t->remove_extra_ws;
    while (len) {
        const char *r = norm_prefix(t, s, len, &c, &ol);
        if (c == 0) return RB_E_INVALID;
        if (prev_space && t->remove_extra_ws)
            while (ol && r[0] == ' ') {
                r++;
                ol--;
            }
        if (ol) {
            if (put_char(b, r, ol, t->escape_ws) != RB_OK) return RB_E_NOMEM;
            prev_space = r[ol - 1] == ' ';
        }
        s += c;
        len -= c;
        prev_space = prev_space && t->remove_extra_ws;
    }
    if (t->remove_extra_ws)
        while (b->len >= wsl && memcmp(b->p + b->len - wsl, ws, wsl) == 0) b->len -= wsl;
    return RB_OK;
}

/* ---- tokenizer.json's pipeline ---- */

static rb_status norm_step(const rb_unigram *t, const ug_norm *nm, const char *s, size_t len, tok_buf *o) {
    o->len = 0;
    if (nm->kind == UG_NORM_CHARSMAP) {
        size_t c, ol;
        while (len) {
            const char *r = norm_prefix(t, s, len, &c, &ol);
            if (c == 0) return RB_E_INVALID;
            if (tok_buf_append(o, r, ol) != RB_OK) return RB_E_NOMEM;
            s += c;
            len -= c;
        }
    } else if (nm->kind == UG_NORM_STRIP) {
        uint32_t cp;
        if (nm->left)
            while (len) {
                const size_t l = tok_utf8_decode((const unsigned char *)s, &cp);
                if (!tok_cp_is_ws(cp)) break;
                s += l;
                len -= l;
            }
        if (nm->right)
            while (len) {
                size_t st = len - 1;
                while (st > 0 && ((uint8_t)s[st] & 0xC0) == 0x80) st--;
                tok_utf8_decode((const unsigned char *)s + st, &cp);
                if (!tok_cp_is_ws(cp)) break;
                len = st;
            }
        if (tok_buf_append(o, s, len) != RB_OK) return RB_E_NOMEM;
    } else if (nm->kind == UG_NORM_REPLACE_SPACES) {
        for (size_t i = 0; i < len;) {
            size_t j = i;
            while (j < len && s[j] == ' ') j++;
            rb_status st = RB_OK;
            if (j - i >= 2) st = tok_buf_append(o, nm->b, nm->blen);
            else if (j > i) st = tok_buf_putc(o, ' ');
            else st = tok_buf_putc(o, s[j++]);
            if (st != RB_OK) return RB_E_NOMEM;
            i = j;
        }
    } else { /* REPLACE literal */
        for (size_t i = 0; i < len;) {
            if (nm->alen && i + nm->alen <= len && memcmp(s + i, nm->a, nm->alen) == 0) {
                if (tok_buf_append(o, nm->b, nm->blen) != RB_OK) return RB_E_NOMEM;
                i += nm->alen;
            } else if (tok_buf_putc(o, s[i++]) != RB_OK) {
                return RB_E_NOMEM;
            }
        }
    }
    return RB_OK;
}

/* Metaspace on one word, then Viterbi on each of its pieces. */
static rb_status meta_word(const rb_unigram *t, const char *w, size_t len, bool first, tok_buf *tmp, tok_ids *out) {
    if (!t->metaspace) return ug_viterbi(t, w, len, out);
    tmp->len = 0;
    const char *rep = t->meta_rep;
    const size_t rl = t->meta_rep_len;
    bool starts = len >= rl && memcmp(w, rep, rl) == 0;
    if (len && w[0] == ' ') starts = rl == 1 && rep[0] == ' ';
    if (!starts && (t->prepend == UG_PREPEND_ALWAYS || (t->prepend == UG_PREPEND_FIRST && first)))
        if (tok_buf_append(tmp, rep, rl) != RB_OK) return RB_E_NOMEM;
    for (size_t i = 0; i < len; i++) {
        rb_status st = w[i] == ' ' ? tok_buf_append(tmp, rep, rl) : tok_buf_putc(tmp, w[i]);
        if (st != RB_OK) return RB_E_NOMEM;
    }
    const char *p = tmp->p;
    const size_t n = tmp->len;
    if (!t->meta_split) return ug_viterbi(t, p, n, out);
    size_t start = 0;
    for (size_t i = rl; i + rl <= n; i++) { /* split before each replacement (merged with the next) */
        if (memcmp(p + i, rep, rl) != 0) continue;
        rb_status st = ug_viterbi(t, p + start, i - start, out);
        if (st != RB_OK) return st;
        start = i;
        i += rl - 1;
    }
    return ug_viterbi(t, p + start, n - start, out);
}

static rb_status json_segment(const rb_unigram *t, const char *s, size_t len, bool at_start, tok_ids *out) {
    tok_buf a = {0}, b = {0}, tmp = {0};
    rb_status st = tok_buf_append(&a, s, len) == RB_OK ? RB_OK : RB_E_NOMEM;
    for (size_t i = 0; i < t->n_norms && st == RB_OK; i++) {
        st = norm_step(t, &t->norms[i], a.p, a.len, &b);
        tok_buf x = a;
        a = b;
        b = x;
    }
    if (st == RB_OK && a.len) {
        if (!t->ws_split) {
            st = meta_word(t, a.p, a.len, at_start, &tmp, out);
        } else {
            bool first = at_start;
            for (size_t i = 0; i < a.len && st == RB_OK;) {
                uint32_t cp;
                size_t l = tok_utf8_decode((const unsigned char *)a.p + i, &cp);
                if (tok_cp_is_ws(cp)) {
                    i += l;
                    continue;
                }
                size_t j = i;
                while (j < a.len) {
                    l = tok_utf8_decode((const unsigned char *)a.p + j, &cp);
                    if (tok_cp_is_ws(cp)) break;
                    j += l;
                }
                st = meta_word(t, a.p + i, j - i, first, &tmp, out);
                first = false;
                i = j;
            }
        }
    }
    tok_buf_free(&a);
    tok_buf_free(&b);
    tok_buf_free(&tmp);
    return st;
}

static rb_status json_encode(const rb_unigram *t, const char *s, size_t len, tok_ids *out) {
    size_t seg = 0;
    for (size_t i = 0; i < len;) {
        size_t ml = 0;
        const int32_t a = t->n_added ? tok_trie_longest(&t->added_trie, s + i, len - i, &ml) : -1;
        if (a < 0 || ml == 0) {
            i++;
            continue;
        }
        rb_status st = json_segment(t, s + seg, i - seg, seg == 0, out);
        if (st != RB_OK) return st;
        if (tok_ids_push(out, t->added[a].id) != RB_OK) return RB_E_NOMEM;
        i += ml;
        seg = i;
    }
    return json_segment(t, s + seg, len - seg, seg == 0, out);
}

/* ---- public encode ---- */

static rb_status encode_raw(const rb_unigram *t, const char *text, size_t len, tok_ids *ids, rb_error *err) {
    size_t bad;
    if (!tok_utf8_validate(text, len, &bad))
        return rb_error_set(err, RB_E_INVALID, "unigram: invalid UTF-8 at byte %zu", bad);
    rb_status st;
    if (t->spm) {
        tok_buf b = {0};
        st = spm_normalize(t, text, len, &b);
        if (st == RB_OK) st = ug_viterbi(t, b.p, b.len, ids);
        tok_buf_free(&b);
    } else {
        st = json_encode(t, text, len, ids);
    }
    if (st == RB_E_NOMEM) return rb_error_set(err, st, "out of memory");
    if (st == RB_E_INVALID) return rb_error_set(err, st, "unigram: unknown character and no unk id");
    if (st != RB_OK) return rb_error_set(err, st, "unigram: encode failed");
    return RB_OK;
}

/* The ids the post-processor puts before and after the sequence. */
static void specials(const rb_unigram *t, const int32_t **pre, size_t *npre, const int32_t **post, size_t *npost) {
    if (t->spm) {
        *pre = NULL;
        *npre = 0;
        *post = &t->eos_id;
        *npost = t->eos_id >= 0 ? 1 : 0;
    } else {
        *pre = t->tpl_pre;
        *npre = t->n_tpl_pre;
        *post = t->tpl_post;
        *npost = t->n_tpl_post;
    }
}

static rb_status assemble(const rb_unigram *t, const tok_ids *raw, size_t keep, bool add, int32_t *dst) {
    const int32_t *pre, *post;
    size_t npre, npost, k = 0;
    specials(t, &pre, &npre, &post, &npost);
    if (add)
        for (size_t i = 0; i < npre; i++) dst[k++] = pre[i];
    for (size_t i = 0; i < keep; i++) dst[k++] = raw->p[i];
    if (add)
        for (size_t i = 0; i < npost; i++) dst[k++] = post[i];
    return RB_OK;
}

rb_status rb_unigram_tokenize(const rb_unigram *t, const char *text, size_t len, bool add_eos, int32_t **ids,
                              size_t *n_ids, rb_error *err) {
    if (!ids || !n_ids) return rb_error_set(err, RB_E_INVALID, "unigram: NULL output");
    *ids = NULL;
    *n_ids = 0;
    if (!t || (!text && len)) return rb_error_set(err, RB_E_INVALID, "unigram: NULL argument");
    tok_ids raw = {0};
    rb_status st = encode_raw(t, text ? text : "", len, &raw, err);
    if (st != RB_OK) {
        tok_ids_free(&raw);
        return st;
    }
    const int32_t *pre, *post;
    size_t npre, npost;
    specials(t, &pre, &npre, &post, &npost);
    const size_t total = raw.len + (add_eos ? npre + npost : 0);
    if (total) {
        *ids = malloc(sizeof(int32_t) * total);
        if (!*ids) {
            tok_ids_free(&raw);
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
        assemble(t, &raw, raw.len, add_eos, *ids);
    }
    *n_ids = total;
    tok_ids_free(&raw);
    return RB_OK;
}

rb_status rb_unigram_encode_padded(const rb_unigram *t, const char *text, size_t len, int32_t *ids, size_t max_len,
                                   size_t *n_untruncated, rb_error *err) {
    if (!t || !ids || (!text && len)) return rb_error_set(err, RB_E_INVALID, "unigram: NULL argument");
    if (max_len < 1) return rb_error_set(err, RB_E_INVALID, "unigram: max_len 0");
    tok_ids raw = {0};
    rb_status st = encode_raw(t, text ? text : "", len, &raw, err);
    if (st != RB_OK) {
        tok_ids_free(&raw);
        return st;
    }
    const int32_t *pre, *post;
    size_t npre, npost;
    specials(t, &pre, &npre, &post, &npost);
    const size_t nsp = npre + npost;
    if (n_untruncated) *n_untruncated = raw.len + nsp;
    const int32_t pad = t->pad_id >= 0 ? t->pad_id : 0;
    if (max_len < nsp) { /* no room for the sequence: the specials, cut */
        int32_t tmp[16];
        if (nsp > 16) {
            tok_ids_free(&raw);
            return rb_error_set(err, RB_E_INVALID, "unigram: max_len %zu too small", max_len);
        }
        assemble(t, &raw, 0, true, tmp);
        memcpy(ids, tmp, sizeof(int32_t) * max_len);
    } else {
        const size_t keep = raw.len < max_len - nsp ? raw.len : max_len - nsp;
        assemble(t, &raw, keep, true, ids);
        for (size_t i = keep + nsp; i < max_len; i++) ids[i] = pad;
    }
    tok_ids_free(&raw);
    return RB_OK;
}

rb_status rb_unigram_load_dir(const char *dir, rb_unigram **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "unigram: out is NULL");
    *out = NULL;
    if (!dir) return rb_error_set(err, RB_E_INVALID, "unigram: NULL dir");
    char path[1024];
    if (snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= (int)sizeof path)
        return rb_error_set(err, RB_E_INVALID, "path too long: %s", dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        return rb_unigram_load_json(path, out, err);
    }
    snprintf(path, sizeof path, "%s/spiece.model", dir);
    f = fopen(path, "rb");
    if (!f) return rb_error_set(err, RB_E_IO, "unigram: neither tokenizer.json nor spiece.model in %s", dir);
    fclose(f);
    return rb_unigram_load_spm(path, out, err);
}

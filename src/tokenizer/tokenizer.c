/* Public tokenizer API: construction helpers shared by the loaders, the
 * encode pipeline (added-token split -> normalizer -> pre-tokenizer -> BPE ->
 * post-processor template), with optional plain ranges where no special
 * token may be matched, decode, and accessors. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rb_status tok_new(int32_t n, rb_tokenizer **out, rb_error *err) {
    rb_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return rb_error_set(err, RB_E_NOMEM, "out of memory allocating tokenizer");
    rb_status st = tok_vocab_init(&t->vocab, n);
    if (st) {
        free(t);
        return rb_error_set(err, st, "cannot allocate a vocabulary of %d tokens", (int)n);
    }
    t->is_special = calloc((size_t)n, sizeof *t->is_special);
    if (!t->is_special) {
        rb_tokenizer_free(t);
        return rb_error_set(err, RB_E_NOMEM, "out of memory allocating tokenizer");
    }
    t->unk_id = t->bos_id = t->eos_id = t->pad_id = -1;
    for (int i = 0; i < 256; i++) t->byte_ids[i] = -1;
    for (int i = 0; i < 324; i++) t->bl_dec[i] = -1;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_byte_to_cp((uint8_t)b);
        char u[4];
        t->bl_len[b] = (uint8_t)tok_utf8_encode(cp, u);
        memcpy(t->bl_enc[b], u, t->bl_len[b]);
        t->bl_dec[cp] = (int16_t)b;
    }
    *out = t;
    return RB_OK;
}

void rb_tokenizer_free(rb_tokenizer *t) {
    if (!t) return;
    tok_vocab_free(&t->vocab);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].text);
    free(t->added);
    tok_trie_free(&t->trie_raw);
    tok_trie_free(&t->trie_norm);
    free(t->is_special);
    for (size_t i = 0; i < t->n_norms; i++) {
        free(t->norms[i].a);
        free(t->norms[i].b);
        pcre2_code_free(t->norms[i].re);
    }
    free(t->norms);
    for (size_t i = 0; i < t->n_pres; i++) {
        pcre2_code_free(t->pres[i].re);
        free(t->pres[i].lit);
        free(t->pres[i].regex_src);
    }
    free(t->pres);
    for (size_t i = 0; i < t->n_decs; i++) {
        free(t->decs[i].a);
        free(t->decs[i].b);
    }
    free(t->decs);
    for (size_t i = 0; i < t->n_tpl; i++) free(t->tpl[i].ids);
    free(t->tpl);
    free(t->pre_name);
    free(t->chat_template);
    free(t);
}

rb_status tok_finish_added(rb_tokenizer *t, rb_error *err) {
    for (size_t i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        if (a->id < 0 || a->id >= t->vocab.n)
            return rb_error_set(err, RB_E_FORMAT, "added token '%.*s' has id %d outside 0..%d", (int)a->len,
                                a->text, (int)a->id, (int)t->vocab.n - 1);
        rb_status st = tok_vocab_set(&t->vocab, a->id, a->text, a->len);
        if (st) return rb_error_set(err, st, "out of memory storing added tokens");
        t->is_special[a->id] = a->special;
        t->vocab.types[a->id] = a->id == t->unk_id ? TOK_TYPE_UNKNOWN
                                : a->special       ? TOK_TYPE_CONTROL
                                                   : TOK_TYPE_USER_DEFINED;
        if (a->len == 0) continue;
        st = tok_trie_insert(a->normalized ? &t->trie_norm : &t->trie_raw, a->text, a->len, (int32_t)i);
        if (st) return rb_error_set(err, st, "out of memory indexing added tokens");
    }
    if (t->byte_fallback) {
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            int32_t id = tok_vocab_find(&t->vocab, name, 6);
            t->byte_ids[b] = id;
            if (id >= 0 && t->vocab.types[id] == TOK_TYPE_NORMAL) t->vocab.types[id] = TOK_TYPE_BYTE;
        }
    }
    return RB_OK;
}

static rb_status tpl_add(rb_tokenizer *t, bool is_seq, const int32_t *ids, size_t n) {
    tok_tpl_item *p = realloc(t->tpl, (t->n_tpl + 1) * sizeof *p);
    if (!p) return RB_E_NOMEM;
    t->tpl = p;
    tok_tpl_item *it = &t->tpl[t->n_tpl];
    it->is_seq = is_seq;
    it->ids = NULL;
    it->n_ids = 0;
    if (n) {
        it->ids = malloc(n * sizeof *ids);
        if (!it->ids) return RB_E_NOMEM;
        memcpy(it->ids, ids, n * sizeof *ids);
        it->n_ids = n;
    }
    t->n_tpl++;
    return RB_OK;
}

rb_status tok_template_from_flags(rb_tokenizer *t, rb_error *err) {
    rb_status st = RB_OK;
    if (t->add_bos && t->bos_id >= 0) st = tpl_add(t, false, &t->bos_id, 1);
    if (!st) st = tpl_add(t, true, NULL, 0);
    if (!st && t->add_eos && t->eos_id >= 0) st = tpl_add(t, false, &t->eos_id, 1);
    if (st) return rb_error_set(err, st, "out of memory building the post-processor");
    return RB_OK;
}

rb_status tok_tpl_append(rb_tokenizer *t, bool is_seq, const int32_t *ids, size_t n) { return tpl_add(t, is_seq, ids, n); }

void tok_flags_from_template(rb_tokenizer *t) {
    bool seen_seq = false;
    t->add_bos = t->add_eos = false;
    for (size_t i = 0; i < t->n_tpl; i++) {
        const tok_tpl_item *it = &t->tpl[i];
        if (it->is_seq) { seen_seq = true; continue; }
        if (!it->n_ids) continue;
        if (!seen_seq) {
            t->add_bos = true;
            if (t->bos_id < 0) t->bos_id = it->ids[0];
        } else {
            t->add_eos = true;
            if (t->eos_id < 0) t->eos_id = it->ids[it->n_ids - 1];
        }
    }
}

/* ---- encode ---- */

typedef struct enc_ctx {
    const rb_tokenizer *t;
    tok_ids ids;
    tok_words words;
    tok_scratch sc;
    tok_buf norm;
} enc_ctx;

/* Byte ranges where special tokens are not matched (all: the whole text). */
typedef struct plain_set {
    const rb_text_range *r;
    size_t n;
    bool all;
} plain_set;

static bool plain_hit(const plain_set *ps, size_t b, size_t e) {
    if (b >= e) return false;
    if (ps->all) return true;
    size_t lo = 0, hi = ps->n; /* first range ending after b */
    while (lo < hi) {
        size_t m = lo + (hi - lo) / 2;
        if (ps->r[m].end <= b) lo = m + 1;
        else hi = m;
    }
    return lo < ps->n && ps->r[lo].begin < e;
}

static bool is_word_cp(uint32_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (c >= 0x80 && !tok_cp_is_ws(c));
}

/* Finds the leftmost added-token match in s[from..len) allowed by the flags
 * (a special token only with parse_special and none of its bytes plain);
 * returns its added index and the (possibly lstrip/rstrip-extended) range. */
static int32_t find_added(const rb_tokenizer *t, const tok_trie *tr, const char *s, size_t len, size_t from,
                          bool parse_special, const plain_set *ps, size_t *ms, size_t *me) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t pos = from; pos < len;) {
        size_t ml = 0;
        int32_t idx = tok_trie_longest(tr, s + pos, len - pos, &ml);
        size_t cl = tok_utf8_seq_len(u + pos, len - pos);
        if (!cl) cl = 1;
        if (idx >= 0) {
            const tok_added *a = &t->added[idx];
            bool ok = !a->special || (parse_special && !plain_hit(ps, pos, pos + ml));
            if (ok && a->single_word) {
                if (pos > 0) {
                    size_t k = pos - 1;
                    while (k > 0 && (u[k] & 0xC0) == 0x80) k--;
                    uint32_t c;
                    tok_utf8_decode(u + k, &c);
                    if (is_word_cp(c)) ok = false;
                }
                if (ok && pos + ml < len) {
                    uint32_t c;
                    tok_utf8_decode(u + pos + ml, &c);
                    if (is_word_cp(c)) ok = false;
                }
            }
            if (ok) {
                size_t b = pos, e = pos + ml;
                if (a->lstrip) {
                    while (b > from) {
                        size_t k = b - 1;
                        while (k > from && (u[k] & 0xC0) == 0x80) k--;
                        uint32_t c;
                        tok_utf8_decode(u + k, &c);
                        if (!tok_cp_is_ws(c)) break;
                        b = k;
                    }
                }
                if (a->rstrip) {
                    while (e < len) {
                        uint32_t c;
                        size_t k = tok_utf8_decode(u + e, &c);
                        if (!tok_cp_is_ws(c)) break;
                        e += k;
                    }
                }
                *ms = b;
                *me = e;
                return idx;
            }
        }
        pos += cl;
    }
    return -1;
}

static rb_status encode_words(enc_ctx *c, const char *s, size_t len, bool first) {
    tok_words_clear(&c->words);
    rb_status st = tok_pretokenize(c->t, s, len, first, &c->words);
    for (size_t i = 0; i < c->words.n && !st; i++)
        st = tok_bpe_word(c->t, c->words.text.p + c->words.w[i].off, c->words.w[i].len, &c->sc, &c->ids);
    return st;
}

/* A chunk of raw text between added tokens: normalize, split on normalized
 * added tokens, BPE. Offsets do not survive normalization, so a chunk with
 * any plain byte (ps->all) matches no normalized special token. */
static rb_status encode_chunk(enc_ctx *c, const char *s, size_t len, bool first, bool parse_special,
                              const plain_set *ps) {
    if (len == 0) return RB_OK;
    const rb_tokenizer *t = c->t;
    c->norm.len = 0;
    rb_status st = tok_normalize(t, s, len, &c->norm);
    if (st) return st;
    tok_buf nb = c->norm; /* take ownership: encode_words does not touch c->norm */
    c->norm = (tok_buf){0};
    size_t from = 0;
    while (!st && t->trie_norm.n) {
        size_t ms, me;
        int32_t idx = find_added(t, &t->trie_norm, nb.p, nb.len, from, parse_special, ps, &ms, &me);
        if (idx < 0) break;
        st = encode_words(c, nb.p + from, ms - from, first && from == 0);
        if (!st) st = tok_ids_push(&c->ids, t->added[idx].id);
        from = me;
    }
    if (!st) st = encode_words(c, nb.p + from, nb.len - from, first && from == 0);
    c->norm = nb;
    return st;
}

rb_status rb_tokenizer_encode(const rb_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                              size_t *n_ids, rb_error *err) {
    return rb_tokenizer_encode_plain(t, text, len, flags, NULL, 0, ids, n_ids, err);
}

/* The plain set of a chunk [b, e) of the text, for its normalized matches. */
static plain_set chunk_plain(const plain_set *ps, size_t b, size_t e) {
    plain_set c = {NULL, 0, plain_hit(ps, b, e)};
    return c;
}

rb_status rb_tokenizer_encode_plain(const rb_tokenizer *t, const char *text, size_t len, unsigned flags,
                                    const rb_text_range *plain, size_t n_plain, int32_t **ids, size_t *n_ids,
                                    rb_error *err) {
    rb_error_clear(err);
    if (!t || !ids || !n_ids || (!text && len) || (!plain && n_plain))
        return rb_error_set(err, RB_E_INVALID, "encode: NULL argument");
    *ids = NULL;
    *n_ids = 0;
    for (size_t i = 0; i < n_plain; i++) {
        if (plain[i].begin >= plain[i].end || plain[i].end > len || (i && plain[i].begin < plain[i - 1].end))
            return rb_error_set(err, RB_E_INVALID,
                                "encode: plain range %zu [%zu, %zu) is empty, past the text's %zu bytes or out of order",
                                i, plain[i].begin, plain[i].end, len);
    }
    const plain_set ps = {plain, n_plain, false};
    size_t bad;
    if (!tok_utf8_validate(text, len, &bad))
        return rb_error_set(err, RB_E_INVALID, "encode: input is not valid UTF-8 (byte 0x%02X at offset %zu)",
                            (unsigned)(unsigned char)text[bad], bad);
    bool parse_special = (flags & RB_TOK_PARSE_SPECIAL) != 0;
    enc_ctx c = {.t = t};
    rb_status st = RB_OK;
    size_t from = 0;
    for (;;) {
        size_t ms = len, me = len;
        int32_t idx = find_added(t, &t->trie_raw, text, len, from, parse_special, &ps, &ms, &me);
        if (idx < 0) break;
        plain_set cps = chunk_plain(&ps, from, ms);
        st = encode_chunk(&c, text + from, ms - from, from == 0, parse_special, &cps);
        if (!st) st = tok_ids_push(&c.ids, t->added[idx].id);
        if (st) break;
        from = me;
    }
    if (!st) {
        plain_set cps = chunk_plain(&ps, from, len);
        st = encode_chunk(&c, text + from, len - from, from == 0, parse_special, &cps);
    }
    tok_ids res = {0};
    if (!st && (flags & RB_TOK_ADD_SPECIAL) && t->n_tpl) {
        for (size_t i = 0; i < t->n_tpl && !st; i++) {
            const tok_tpl_item *it = &t->tpl[i];
            if (it->is_seq)
                for (size_t k = 0; k < c.ids.len && !st; k++) st = tok_ids_push(&res, c.ids.p[k]);
            else
                for (size_t k = 0; k < it->n_ids && !st; k++) st = tok_ids_push(&res, it->ids[k]);
        }
        tok_ids_free(&c.ids);
    } else {
        res = c.ids;
        c.ids = (tok_ids){0};
    }
    tok_words_free(&c.words);
    tok_scratch_free(&c.sc);
    tok_buf_free(&c.norm);
    tok_ids_free(&c.ids);
    if (st) {
        tok_ids_free(&res);
        return rb_error_set(err, st, "encode failed: %s", rb_status_str(st));
    }
    if (!res.p) res.p = malloc(sizeof *res.p); /* non-NULL result even when empty */
    if (!res.p) return rb_error_set(err, RB_E_NOMEM, "encode: out of memory");
    *ids = res.p;
    *n_ids = res.len;
    return RB_OK;
}

rb_status rb_tokenizer_decode(const rb_tokenizer *t, const int32_t *ids, size_t n_ids, unsigned flags, char **text,
                              size_t *len, rb_error *err) {
    rb_error_clear(err);
    if (!t || !text || (!ids && n_ids)) return rb_error_set(err, RB_E_INVALID, "decode: NULL argument");
    *text = NULL;
    if (len) *len = 0;
    tok_buf out = {0};
    rb_status st = tok_decode_ids(t, ids, n_ids, flags, &out, err);
    if (st) {
        tok_buf_free(&out);
        return st;
    }
    *text = out.p;
    if (len) *len = out.len;
    return RB_OK;
}

rb_tokenizer_kind rb_tokenizer_get_kind(const rb_tokenizer *t) { return t->kind; }
int32_t rb_tokenizer_n_vocab(const rb_tokenizer *t) { return t->vocab.n; }
int32_t rb_tokenizer_bos(const rb_tokenizer *t) { return t->bos_id; }
int32_t rb_tokenizer_eos(const rb_tokenizer *t) { return t->eos_id; }
const char *rb_tokenizer_chat_template(const rb_tokenizer *t) { return t->chat_template; }

const char *rb_tokenizer_token_text(const rb_tokenizer *t, int32_t id, size_t *len) {
    return tok_vocab_text(&t->vocab, id, len);
}

int32_t rb_tokenizer_token_id(const rb_tokenizer *t, const char *text, size_t len) {
    if (!text) return -1;
    return tok_vocab_find(&t->vocab, text, len);
}

bool rb_tokenizer_is_special(const rb_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->vocab.n && t->is_special[id];
}

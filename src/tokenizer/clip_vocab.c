/* CLIP tokenizer construction shared by every loader: the vocabulary and
 * merge tables (tok_vocab), the byte-symbol tables BPE starts from, special
 * token ids, the verbatim-matched added tokens and the word regex; also the
 * in-memory list loader and the small accessors. */
#include "tokenizer/clip_internal.h"
#include "tokenizer/tok_utf8.h"

#include <stdlib.h>
#include <string.h>

/* CLIP's word pattern with \s spelled out as Unicode White_Space (what
 * Oniguruma's \s matches in HF tokenizers). */
#define CLIP_WS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char k_word_pattern[] = "<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|\\p{L}+|\\p{N}|"
                                     "[^" CLIP_WS "\\p{L}\\p{N}]+";

rb_status clip_new(int32_t n, rb_clip_tokenizer **out, rb_error *err) {
    *out = NULL;
    if (n <= 0 || n > (1 << 24)) return rb_error_set(err, RB_E_FORMAT, "CLIP vocabulary size %d out of range", (int)n);
    rb_clip_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    if (tok_vocab_init(&t->vocab, n) != RB_OK) {
        free(t);
        return rb_error_set(err, RB_E_NOMEM, "out of memory for a %d-token vocabulary", (int)n);
    }
    for (int i = 0; i < CLIP_SP_COUNT; i++) t->sp_id[i] = -1;
    *out = t;
    return RB_OK;
}

void rb_clip_tokenizer_free(rb_clip_tokenizer *t) {
    if (!t) return;
    tok_vocab_free(&t->vocab);
    for (int i = 0; i < CLIP_SP_COUNT; i++) free(t->sp_text[i]);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].text);
    free(t->added);
    if (t->word_re) pcre2_code_free(t->word_re);
    free(t);
}

rb_status clip_add_merge(rb_clip_tokenizer *t, const char *line, size_t len, size_t line_no, rb_error *err) {
    if (len && line[len - 1] == '\r') len--;
    const char *sp = memchr(line, ' ', len);
    if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp - line) - 1))
        return rb_error_set(err, RB_E_FORMAT, "merges line %zu: expected two symbols separated by one space", line_no);
    size_t la = (size_t)(sp - line), lb = len - la - 1;
    if (!la || !lb) return rb_error_set(err, RB_E_FORMAT, "merges line %zu: empty symbol", line_no);
    if (!tok_utf8_validate(line, len, NULL))
        return rb_error_set(err, RB_E_FORMAT, "merges line %zu: not valid UTF-8", line_no);
    int32_t a = tok_vocab_find(&t->vocab, line, la), b = tok_vocab_find(&t->vocab, sp + 1, lb);
    if (a < 0 || b < 0)
        return rb_error_set(err, RB_E_FORMAT, "merges line %zu: symbol '%.*s' is not in the vocabulary", line_no,
                            (int)(a < 0 ? (la > 64 ? 64 : la) : (lb > 64 ? 64 : lb)), a < 0 ? line : sp + 1);
    char stack[256];
    char *cat = la + lb <= sizeof stack ? stack : malloc(la + lb);
    if (!cat) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    memcpy(cat, line, la);
    memcpy(cat + la, sp + 1, lb);
    int32_t r = tok_vocab_find(&t->vocab, cat, la + lb);
    if (cat != stack) free(cat);
    if (r < 0)
        return rb_error_set(err, RB_E_FORMAT, "merges line %zu: result '%.*s%.*s' is not in the vocabulary", line_no,
                            (int)(la > 64 ? 64 : la), line, (int)(lb > 64 ? 64 : lb), sp + 1);
    if (tok_vocab_add_merge(&t->vocab, a, b, r) != RB_OK) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    return RB_OK;
}

rb_status clip_add_token(rb_clip_tokenizer *t, const char *text, size_t len, int32_t id, rb_error *err) {
    if (!len) return rb_error_set(err, RB_E_FORMAT, "empty added token (id %d)", (int)id);
    if (id < 0 || id >= t->vocab.n)
        return rb_error_set(err, RB_E_UNSUPPORTED, "added token id %d is outside the vocabulary (%d ids)", (int)id,
                            (int)t->vocab.n);
    if (!tok_utf8_validate(text, len, NULL))
        return rb_error_set(err, RB_E_FORMAT, "added token (id %d) is not valid UTF-8", (int)id);
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == len && memcmp(t->added[i].text, text, len) == 0) return RB_OK; /* first one wins */
    clip_added *p = realloc(t->added, (t->n_added + 1) * sizeof *p);
    if (!p) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    t->added = p;
    char *s = malloc(len + 1);
    if (!s) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    memcpy(s, text, len);
    s[len] = '\0';
    p[t->n_added++] = (clip_added){s, len, id};
    return RB_OK;
}

rb_status clip_finish(rb_clip_tokenizer *t, const rb_clip_special_tokens *sp, rb_error *err) {
    static const char *const names[CLIP_SP_COUNT] = {"bos", "eos", "unk", "pad"};
    const char *texts[CLIP_SP_COUNT] = {CLIP_BOS_TEXT, CLIP_EOS_TEXT, CLIP_EOS_TEXT, CLIP_EOS_TEXT};
    if (sp) {
        if (sp->bos) texts[CLIP_SP_BOS] = sp->bos;
        if (sp->eos) texts[CLIP_SP_EOS] = sp->eos;
        if (sp->unk) texts[CLIP_SP_UNK] = sp->unk;
        if (sp->pad) texts[CLIP_SP_PAD] = sp->pad;
    }
    for (int i = 0; i < CLIP_SP_COUNT; i++) {
        size_t n = strlen(texts[i]);
        int32_t id = tok_vocab_find(&t->vocab, texts[i], n);
        if (id < 0)
            return rb_error_set(err, RB_E_FORMAT, "%s token '%.64s' is not in the vocabulary", names[i], texts[i]);
        t->sp_id[i] = id;
        t->sp_text[i] = strdup(texts[i]);
        if (!t->sp_text[i]) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    /* special tokens are matched in the raw text before anything else (bos, eos, unk, pad order; duplicates once) */
    clip_added *old = t->added;
    size_t n_old = t->n_added;
    t->added = NULL;
    t->n_added = 0;
    rb_status st = RB_OK;
    for (int i = 0; i < CLIP_SP_COUNT && !st; i++)
        st = clip_add_token(t, t->sp_text[i], strlen(t->sp_text[i]), t->sp_id[i], err);
    for (size_t i = 0; i < n_old; i++) {
        if (!st) st = clip_add_token(t, old[i].text, old[i].len, old[i].id, err);
        free(old[i].text);
    }
    free(old);
    if (st) return st;
    for (int b = 0; b < 256; b++) {
        char s[4 + sizeof CLIP_EOW];
        size_t n = tok_utf8_encode(tok_byte_to_cp((uint8_t)b), s);
        t->byte_id[b] = tok_vocab_find(&t->vocab, s, n);
        memcpy(s + n, CLIP_EOW, sizeof CLIP_EOW - 1);
        t->byte_eow[b] = tok_vocab_find(&t->vocab, s, n + sizeof CLIP_EOW - 1);
    }
    return tok_regex_compile(k_word_pattern, sizeof k_word_pattern - 1, &t->word_re, err);
}

rb_status rb_clip_tokenizer_from_lists(const char *const *tokens, const size_t *token_lens, int32_t n_tokens,
                                       const char *const *merges, size_t n_merges, const rb_clip_special_tokens *sp,
                                       rb_clip_tokenizer **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "out is NULL");
    *out = NULL;
    if (!tokens || (n_merges && !merges)) return rb_error_set(err, RB_E_INVALID, "token or merge list is NULL");
    rb_clip_tokenizer *t;
    rb_status st = clip_new(n_tokens, &t, err);
    if (st) return st;
    for (int32_t i = 0; i < n_tokens && !st; i++) {
        if (!tokens[i]) {
            st = rb_error_set(err, RB_E_FORMAT, "token %d is NULL", (int)i);
            break;
        }
        size_t n = token_lens ? token_lens[i] : strlen(tokens[i]);
        if (!tok_utf8_validate(tokens[i], n, NULL)) st = rb_error_set(err, RB_E_FORMAT, "token %d is not valid UTF-8", (int)i);
        else if (tok_vocab_find(&t->vocab, tokens[i], n) >= 0)
            st = rb_error_set(err, RB_E_FORMAT, "token %d '%.*s' appears twice", (int)i, (int)(n > 64 ? 64 : n), tokens[i]);
        else if (tok_vocab_set(&t->vocab, i, tokens[i], n) != RB_OK) st = rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n_merges && !st; i++) {
        if (!merges[i]) st = rb_error_set(err, RB_E_FORMAT, "merge %zu is NULL", i);
        else st = clip_add_merge(t, merges[i], strlen(merges[i]), i + 1, err);
    }
    if (!st) st = clip_finish(t, sp, err);
    if (st) {
        rb_clip_tokenizer_free(t);
        return st;
    }
    *out = t;
    return RB_OK;
}

int32_t rb_clip_n_vocab(const rb_clip_tokenizer *t) { return t ? t->vocab.n : 0; }
int32_t rb_clip_bos_id(const rb_clip_tokenizer *t) { return t ? t->sp_id[CLIP_SP_BOS] : -1; }
int32_t rb_clip_eos_id(const rb_clip_tokenizer *t) { return t ? t->sp_id[CLIP_SP_EOS] : -1; }
int32_t rb_clip_pad_id(const rb_clip_tokenizer *t) { return t ? t->sp_id[CLIP_SP_PAD] : -1; }

int32_t rb_clip_token_id(const rb_clip_tokenizer *t, const char *text, size_t len) {
    if (!t || (!text && len)) return -1;
    return tok_vocab_find(&t->vocab, text ? text : "", len);
}

const char *rb_clip_token_text(const rb_clip_tokenizer *t, int32_t id, size_t *len) {
    if (!t) return NULL;
    return tok_vocab_text(&t->vocab, id, len);
}

/* CLIP text -> ids: special tokens split out of the raw text
 * (leftmost-longest), each other piece NFC-normalized, lower-cased and cut
 * into words by CLIP's pattern, each word BPE-encoded; plus diffusers'
 * 77-id encoding (BOS + 75 + EOS + padding). */
#include "tokenizer/clip_internal.h"
#include "tokenizer/tok_utf8.h"

#include <stdlib.h>
#include <string.h>

/* The words "<|startoftext|>" / "<|endoftext|>" produced by the pattern (the
 * special texts typed in another case, so not split out as special tokens)
 * are cut again by HF's ByteLevel pre-tokenizer (GPT-2 pattern) into "<|",
 * the letters and "|>"; every other CLIP word is one GPT-2 word already. */
static rb_status encode_word(const rb_clip_tokenizer *t, const char *w, size_t n, tok_ids *ids, rb_error *err) {
    if ((n == 15 && memcmp(w, CLIP_BOS_TEXT, 15) == 0) || (n == 13 && memcmp(w, CLIP_EOS_TEXT, 13) == 0)) {
        rb_status st = clip_bpe_word(t, w, 2, ids, err);
        if (!st) st = clip_bpe_word(t, w + 2, n - 4, ids, err);
        if (!st) st = clip_bpe_word(t, w + n - 2, 2, ids, err);
        return st;
    }
    return clip_bpe_word(t, w, n, ids, err);
}

rb_status clip_encode_piece(const rb_clip_tokenizer *t, const char *s, size_t len, tok_ids *ids, rb_error *err) {
    if (!len) return RB_OK;
    tok_buf nfc = {0}, low = {0};
    rb_status st = tok_nfc(s, len, &nfc);
    if (!st) st = clip_lower(nfc.p ? nfc.p : "", nfc.len, &low);
    tok_buf_free(&nfc);
    if (st) {
        tok_buf_free(&low);
        return rb_error_set(err, st, "out of memory normalizing the prompt");
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->word_re, NULL);
    if (!md) {
        tok_buf_free(&low);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    size_t pos = 0;
    while (!st && pos < low.len) {
        bool found = false;
        size_t ms = 0, me = 0;
        st = tok_regex_next(t->word_re, md, low.p, low.len, pos, &found, &ms, &me);
        if (st) {
            st = rb_error_set(err, st, "word split failed");
            break;
        }
        if (!found) break;
        if (me == ms) { /* the pattern cannot match empty; guard against looping anyway */
            pos = ms + 1;
            continue;
        }
        st = encode_word(t, low.p + ms, me - ms, ids, err);
        pos = me;
    }
    pcre2_match_data_free(md);
    tok_buf_free(&low);
    return st;
}

/* The added entry that RB_CLIP_PAD_AS_TEXT turns into plain text: the pad
 * token's, unless bos, eos or unk share its text. NULL if none. */
static const clip_added *plain_pad(const rb_clip_tokenizer *t, unsigned flags) {
    const char *pad = t->sp_text[CLIP_SP_PAD];
    if (!(flags & RB_CLIP_PAD_AS_TEXT) || strcmp(pad, t->sp_text[CLIP_SP_BOS]) == 0 ||
        strcmp(pad, t->sp_text[CLIP_SP_EOS]) == 0 || strcmp(pad, t->sp_text[CLIP_SP_UNK]) == 0)
        return NULL;
    for (size_t i = 0; i < t->n_added; i++)
        if (strcmp(t->added[i].text, pad) == 0) return &t->added[i];
    return NULL;
}

/* Longest added token starting at s (within n bytes), skip excepted, or NULL. */
static const clip_added *match_added(const rb_clip_tokenizer *t, const char *s, size_t n, const clip_added *skip) {
    const clip_added *best = NULL;
    for (size_t i = 0; i < t->n_added; i++) {
        const clip_added *a = &t->added[i];
        if (a == skip || a->len > n || (best && a->len <= best->len)) continue;
        if (memcmp(s, a->text, a->len) == 0) best = a;
    }
    return best;
}

rb_status clip_encode_text(const rb_clip_tokenizer *t, const char *s, size_t len, unsigned flags, tok_ids *ids,
                           rb_error *err) {
    const clip_added *skip = plain_pad(t, flags);
    size_t start = 0;
    rb_status st = RB_OK;
    for (size_t i = 0; i < len && !st;) {
        const clip_added *a = match_added(t, s + i, len - i, skip);
        if (!a) {
            i++;
            continue;
        }
        st = clip_encode_piece(t, s + start, i - start, ids, err);
        if (!st && tok_ids_push(ids, a->id)) st = rb_error_set(err, RB_E_NOMEM, "out of memory");
        i += a->len;
        start = i;
    }
    if (!st) st = clip_encode_piece(t, s + start, len - start, ids, err);
    return st;
}

static rb_status check_text(const rb_clip_tokenizer *t, const char *text, size_t len, rb_error *err) {
    if (!t) return rb_error_set(err, RB_E_INVALID, "tokenizer is NULL");
    if (!text && len) return rb_error_set(err, RB_E_INVALID, "prompt is NULL");
    size_t bad = 0;
    if (len && !tok_utf8_validate(text, len, &bad))
        return rb_error_set(err, RB_E_INVALID, "prompt is not valid UTF-8 (byte 0x%02X at offset %zu)",
                            (unsigned)(unsigned char)text[bad], bad);
    return RB_OK;
}

rb_status rb_clip_tokenize(const rb_clip_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                           size_t *n_ids, rb_error *err) {
    if (!ids || !n_ids) return rb_error_set(err, RB_E_INVALID, "ids or n_ids is NULL");
    *ids = NULL;
    *n_ids = 0;
    rb_status st = check_text(t, text, len, err);
    if (st) return st;
    tok_ids v = {0};
    st = clip_encode_text(t, text ? text : "", len, flags, &v, err);
    if (st) {
        tok_ids_free(&v);
        return st;
    }
    *ids = v.p;
    *n_ids = v.len;
    return RB_OK;
}

rb_status rb_clip_encode(const rb_clip_tokenizer *t, const char *text, size_t len, unsigned flags,
                         int32_t ids[RB_CLIP_CONTEXT], size_t *n_untruncated, rb_error *err) {
    if (!ids) return rb_error_set(err, RB_E_INVALID, "ids is NULL");
    int32_t *tok = NULL;
    size_t n = 0;
    rb_status st = rb_clip_tokenize(t, text, len, flags, &tok, &n, err);
    if (st) return st;
    size_t keep = n < RB_CLIP_CHUNK_TOKENS ? n : RB_CLIP_CHUNK_TOKENS;
    ids[0] = t->sp_id[CLIP_SP_BOS];
    if (keep) memcpy(ids + 1, tok, keep * sizeof *tok);
    ids[1 + keep] = t->sp_id[CLIP_SP_EOS];
    for (size_t i = 2 + keep; i < RB_CLIP_CONTEXT; i++) ids[i] = t->sp_id[CLIP_SP_PAD];
    if (n_untruncated) *n_untruncated = n + 2;
    free(tok);
    return RB_OK;
}

/* Exports a tokenizer as GGUF metadata the way llama.cpp's convert script
 * does (tokenizer.ggml.*), after checking that the pipeline is one the GGUF
 * loader rebuilds exactly; anything else is RB_E_UNSUPPORTED rather than a
 * file that would tokenize differently. */
#include "tokenizer/pretok_patterns.h"
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META "\xE2\x96\x81"

static bool is_lit(const char *p, size_t n, const char *s) { return p && n == strlen(s) && !memcmp(p, s, n); }

/* SPM: [Prepend ▁]? Replace(' ' -> ▁); optional no-op Split on " "; standard decoders. */
static bool spm_expressible(const rb_tokenizer *t) {
    size_t i = 0;
    if (t->add_space_prefix) {
        if (t->n_norms < 1 || t->norms[0].kind != NORM_PREPEND || !is_lit(t->norms[0].a, t->norms[0].alen, META)) return false;
        i = 1;
    }
    if (t->n_norms != i + 1 || t->norms[i].kind != NORM_REPLACE || t->norms[i].re ||
        !is_lit(t->norms[i].a, t->norms[i].alen, " ") || !is_lit(t->norms[i].b, t->norms[i].blen, META))
        return false;
    for (size_t k = 0; k < t->n_pres; k++) /* spaces are gone after the normalizer: splitting on " " is a no-op */
        if (t->pres[k].kind != PRE_SPLIT || t->pres[k].re || !is_lit(t->pres[k].lit, t->pres[k].litlen, " ") || t->pres[k].invert)
            return false;
    size_t nd = t->add_space_prefix ? 4 : 3;
    if (t->n_decs != nd || t->decs[0].kind != DEC_REPLACE || !is_lit(t->decs[0].a, t->decs[0].alen, META) ||
        !is_lit(t->decs[0].b, t->decs[0].blen, " ") || t->decs[1].kind != DEC_BYTEFALLBACK || t->decs[2].kind != DEC_FUSE)
        return false;
    if (nd == 4 && (t->decs[3].kind != DEC_STRIP || t->decs[3].strip_cp != ' ' || t->decs[3].start != 1 || t->decs[3].stop != 0))
        return false;
    return t->byte_fallback && !t->ignore_merges;
}

/* Byte-level: returns the GGUF pre name or NULL. */
static const char *byte_level_pre(const rb_tokenizer *t) {
    if (t->n_decs != 1 || t->decs[0].kind != DEC_BYTELEVEL || t->byte_fallback) return NULL;
    if (t->n_pres == 1 && t->pres[0].kind == PRE_BYTELEVEL && t->pres[0].use_regex && !t->pres[0].add_prefix_space &&
        t->n_norms == 0 && !t->ignore_merges)
        return "gpt2";
    if (t->n_pres != 2 || t->pres[0].kind != PRE_SPLIT || !t->pres[0].regex_src || t->pres[0].invert ||
        t->pres[0].behavior != SPLIT_ISOLATED || t->pres[1].kind != PRE_BYTELEVEL || t->pres[1].use_regex ||
        t->pres[1].add_prefix_space)
        return NULL;
    const char *re = t->pres[0].regex_src;
    /* llama.cpp's llama-bpe implies ignore_merges; a tokenizer trained without it
     * (HF's default) additionally gets tokenizer.rbee.ignore_merges = false */
    if (!strcmp(re, TOK_RE_LLAMA3) && t->n_norms == 0) return "llama-bpe";
    if (!strcmp(re, TOK_RE_QWEN2) && t->n_norms == 1 && t->norms[0].kind == NORM_NFC && !t->ignore_merges) return "qwen2";
    if (!strcmp(re, TOK_RE_GPT4O) && t->n_norms == 0) return "gpt-4o";
    return NULL;
}

/* The template must be [bos]? sequence [eos]?. */
static bool template_expressible(const rb_tokenizer *t) {
    bool seen = false;
    for (size_t i = 0; i < t->n_tpl; i++) {
        const tok_tpl_item *it = &t->tpl[i];
        if (it->is_seq) {
            if (seen) return false;
            seen = true;
        } else if (it->n_ids > 1 || (it->n_ids == 1 && it->ids[0] != (seen ? t->eos_id : t->bos_id))) {
            return false;
        }
    }
    return t->n_tpl == 0 || seen;
}

static rb_status wr(rb_status st, rb_error *err, const char *key) {
    if (st) return rb_error_set(err, st, "writing %s failed: %s", key, rb_status_str(st));
    return RB_OK;
}

rb_status rb_tokenizer_write_gguf(const rb_tokenizer *t, rb_gguf_writer *w, rb_error *err) {
    rb_error_clear(err);
    if (!t || !w) return rb_error_set(err, RB_E_INVALID, "write_gguf: NULL argument");
    const char *model, *pre;
    if (t->kind == RB_TOKENIZER_SPM) {
        if (!spm_expressible(t))
            return rb_error_set(err, RB_E_UNSUPPORTED, "this SentencePiece-style pipeline has no GGUF equivalent");
        model = "llama";
        pre = "default";
    } else {
        pre = byte_level_pre(t);
        if (!pre) return rb_error_set(err, RB_E_UNSUPPORTED, "byte-level pre-tokenizer not known to GGUF (llama-bpe, qwen2, gpt-4o, gpt2)");
        model = "gpt2";
    }
    if (!template_expressible(t))
        return rb_error_set(err, RB_E_UNSUPPORTED, "post-processor template is not [BOS] sequence [EOS]");
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].lstrip || t->added[i].rstrip || t->added[i].single_word || t->added[i].normalized)
            return rb_error_set(err, RB_E_UNSUPPORTED, "added token '%s' has lstrip/rstrip/single_word/normalized flags",
                                t->added[i].text);
    int32_t n = t->vocab.n;
    rb_status st = RB_OK;
    char **toks = calloc((size_t)n, sizeof *toks);
    float *scores = calloc((size_t)n, sizeof *scores);
    int32_t *types = malloc((size_t)n * sizeof *types);
    size_t nm = t->vocab.n_merges;
    char **merges = calloc(nm ? nm : 1, sizeof *merges);
    if (!toks || !scores || !types || !merges) {
        st = rb_error_set(err, RB_E_NOMEM, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n && !st; i++) {
        size_t len;
        const char *s = tok_vocab_text(&t->vocab, i, &len);
        char pad[32];
        if (!s) {
            snprintf(pad, sizeof pad, "[PAD%d]", (int)i);
            s = pad;
            len = strlen(pad);
        }
        if (memchr(s, 0, len)) {
            st = rb_error_set(err, RB_E_UNSUPPORTED, "token %d contains a NUL byte", (int)i);
            break;
        }
        if (!(toks[i] = malloc(len + 1))) st = rb_error_set(err, RB_E_NOMEM, "out of memory");
        else {
            memcpy(toks[i], s, len);
            toks[i][len] = 0;
        }
        types[i] = tok_vocab_text(&t->vocab, i, NULL) ? t->vocab.types[i] : TOK_TYPE_UNUSED;
        scores[i] = t->vocab.scores[i];
    }
    for (size_t r = 0; r < nm && !st; r++) {
        size_t al, bl;
        const char *a = tok_vocab_text(&t->vocab, t->vocab.merge_left[r], &al);
        const char *b = tok_vocab_text(&t->vocab, t->vocab.merge_right[r], &bl);
        if (!(merges[r] = malloc(al + bl + 2))) {
            st = rb_error_set(err, RB_E_NOMEM, "out of memory");
            break;
        }
        memcpy(merges[r], a, al);
        merges[r][al] = ' ';
        memcpy(merges[r] + al + 1, b, bl);
        merges[r][al + bl + 1] = 0;
        if (t->kind == RB_TOKENIZER_SPM && !t->use_scores) {
            /* SentencePiece-ranked scores for tools that ignore merges: earlier merge, higher score */
            int32_t rank, res;
            if (tok_vocab_merge(&t->vocab, t->vocab.merge_left[r], t->vocab.merge_right[r], &rank, &res) &&
                scores[res] == 0.0f)
                scores[res] = -1.0f - (float)r;
        }
    }
    if (st) goto done;
    if ((st = wr(rb_gguf_writer_set_str(w, "tokenizer.ggml.model", model), err, "tokenizer.ggml.model")) ||
        (st = wr(rb_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre), err, "tokenizer.ggml.pre")) ||
        ((!strcmp(pre, "llama-bpe") || !strcmp(pre, "gpt-4o")) && !t->ignore_merges &&
         (st = wr(rb_gguf_writer_set_bool(w, "tokenizer.rbee.ignore_merges", false), err,
                  "tokenizer.rbee.ignore_merges"))) ||
        (st = wr(rb_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)n), err,
                 "tokenizer.ggml.tokens")) ||
        (st = wr(rb_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", RB_GGUF_INT32, types, (uint64_t)n), err,
                 "tokenizer.ggml.token_type")))
        goto done;
    if (t->kind == RB_TOKENIZER_SPM &&
        (st = wr(rb_gguf_writer_set_arr(w, "tokenizer.ggml.scores", RB_GGUF_FLOAT32, scores, (uint64_t)n), err,
                 "tokenizer.ggml.scores")))
        goto done;
    if (nm && (st = wr(rb_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, nm), err,
                       "tokenizer.ggml.merges")))
        goto done;
    static const char *const id_keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    const int32_t ids[] = {t->bos_id, t->eos_id, t->unk_id, t->pad_id};
    for (int k = 0; k < 4 && !st; k++)
        if (ids[k] >= 0) st = wr(rb_gguf_writer_set_u32(w, id_keys[k], (uint32_t)ids[k]), err, id_keys[k]);
    if (st) goto done;
    if ((st = wr(rb_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos), err, "add_bos_token")) ||
        (st = wr(rb_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", t->add_eos), err, "add_eos_token")))
        goto done;
    if (t->kind == RB_TOKENIZER_SPM &&
        (st = wr(rb_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", t->add_space_prefix), err, "add_space_prefix")))
        goto done;
    if (t->chat_template)
        st = wr(rb_gguf_writer_set_str(w, "tokenizer.chat_template", t->chat_template), err, "tokenizer.chat_template");
done:
    if (toks)
        for (int32_t i = 0; i < n; i++) free(toks[i]);
    if (merges)
        for (size_t r = 0; r < nm; r++) free(merges[r]);
    free(toks);
    free(merges);
    free(scores);
    free(types);
    return st;
}

/* Loader for the tokenizer.ggml.* metadata of a GGUF file (as written by
 * llama.cpp's convert script or rb_tokenizer_write_gguf): "llama" models get
 * the SentencePiece pipeline (optional ▁ prefix, ▁ for spaces, byte
 * fallback, merges or else score-ranked merging), "gpt2" models the byte-level
 * pipeline selected by tokenizer.ggml.pre. Control/unknown tokens become
 * special added tokens, user-defined tokens non-special added tokens. */
#include "tokenizer/pretok_patterns.h"
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#define META "\xE2\x96\x81"

static rb_status opt_id(const rb_gguf *g, const char *key, int32_t n, int32_t *out, rb_error *err) {
    uint64_t v;
    rb_status st = rb_gguf_get_u64(g, key, &v);
    if (st == RB_E_NOT_FOUND) return RB_OK;
    if (st) return rb_error_set(err, RB_E_FORMAT, "%s has a non-integer type", key);
    if (v >= (uint64_t)n) return rb_error_set(err, RB_E_FORMAT, "%s = %llu is outside the vocabulary", key, (unsigned long long)v);
    *out = (int32_t)v;
    return RB_OK;
}

static rb_status opt_bool(const rb_gguf *g, const char *key, bool *out, rb_error *err) {
    rb_status st = rb_gguf_get_bool(g, key, out);
    if (st == RB_E_NOT_FOUND) return RB_OK;
    if (st) return rb_error_set(err, RB_E_FORMAT, "%s is not a bool", key);
    return RB_OK;
}

static const rb_gguf_kv *array_kv(const rb_gguf *g, const char *key, uint64_t n, bool numeric, rb_status *st,
                                  rb_error *err) {
    const rb_gguf_kv *kv = rb_gguf_find_kv(g, key);
    *st = RB_OK;
    if (!kv) return NULL;
    bool type_ok = kv->type == RB_GGUF_ARRAY &&
                   (numeric ? (kv->arr_type != RB_GGUF_STRING && kv->arr_type != RB_GGUF_ARRAY) : kv->arr_type == RB_GGUF_STRING);
    if (!type_ok || (n && kv->arr_len != n)) {
        *st = rb_error_set(err, RB_E_FORMAT, "%s: wrong type or length (%llu, expected %llu)", key,
                           (unsigned long long)kv->arr_len, (unsigned long long)n);
        return NULL;
    }
    return kv;
}

static rb_status add_norm(rb_tokenizer *t, tok_norm_kind k, const char *a, const char *b) {
    tok_norm *p = realloc(t->norms, (t->n_norms + 1) * sizeof *p);
    if (!p) return RB_E_NOMEM;
    t->norms = p;
    tok_norm *n = &p[t->n_norms++];
    memset(n, 0, sizeof *n);
    n->kind = k;
    if (a && !(n->a = strdup(a))) return RB_E_NOMEM;
    if (b && !(n->b = strdup(b))) return RB_E_NOMEM;
    n->alen = a ? strlen(a) : 0;
    n->blen = b ? strlen(b) : 0;
    return RB_OK;
}

static rb_status add_dec(rb_tokenizer *t, tok_dec_kind k, const char *a, const char *b) {
    tok_dec *p = realloc(t->decs, (t->n_decs + 1) * sizeof *p);
    if (!p) return RB_E_NOMEM;
    t->decs = p;
    tok_dec *d = &p[t->n_decs++];
    memset(d, 0, sizeof *d);
    d->kind = k;
    if (a && !(d->a = strdup(a))) return RB_E_NOMEM;
    if (b && !(d->b = strdup(b))) return RB_E_NOMEM;
    d->alen = a ? strlen(a) : 0;
    d->blen = b ? strlen(b) : 0;
    if (k == DEC_STRIP) {
        d->strip_cp = ' ';
        d->start = 1;
    }
    return RB_OK;
}

static rb_status add_pre(rb_tokenizer *t, tok_pre_kind k, const char *regex, rb_error *err) {
    tok_pre *p = realloc(t->pres, (t->n_pres + 1) * sizeof *p);
    if (!p) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    t->pres = p;
    tok_pre *x = &p[t->n_pres++];
    memset(x, 0, sizeof *x);
    x->kind = k;
    x->behavior = SPLIT_ISOLATED;
    if (k == PRE_BYTELEVEL) x->use_regex = regex != NULL;
    if (!regex) return RB_OK;
    if (k == PRE_SPLIT && !(x->regex_src = strdup(regex))) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    return tok_regex_compile(regex, strlen(regex), &x->re, err);
}

static rb_status byte_level_pipeline(rb_tokenizer *t, const char *pre, rb_error *err) {
    rb_status st;
    if (!strcmp(pre, "default") || !strcmp(pre, "gpt2")) {
        st = add_pre(t, PRE_BYTELEVEL, TOK_RE_GPT2, err);
    } else if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3")) {
        t->ignore_merges = true;
        st = add_pre(t, PRE_SPLIT, TOK_RE_LLAMA3, err);
        if (!st) st = add_pre(t, PRE_BYTELEVEL, NULL, err);
    } else if (!strcmp(pre, "qwen2")) {
        if (add_norm(t, NORM_NFC, NULL, NULL)) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        st = add_pre(t, PRE_SPLIT, TOK_RE_QWEN2, err);
        if (!st) st = add_pre(t, PRE_BYTELEVEL, NULL, err);
    } else if (!strcmp(pre, "gpt-4o")) { /* gpt-oss: its tokenizer.json ignores merges for whole words */
        t->ignore_merges = true;
        st = add_pre(t, PRE_SPLIT, TOK_RE_GPT4O, err);
        if (!st) st = add_pre(t, PRE_BYTELEVEL, NULL, err);
    } else {
        return rb_error_set(err, RB_E_UNSUPPORTED, "unsupported tokenizer.ggml.pre '%s' for a gpt2 tokenizer", pre);
    }
    if (!st && add_dec(t, DEC_BYTELEVEL, NULL, NULL)) st = rb_error_set(err, RB_E_NOMEM, "out of memory");
    return st;
}

static rb_status spm_pipeline(rb_tokenizer *t, rb_error *err) {
    rb_status st = RB_OK;
    if (t->add_space_prefix) st = add_norm(t, NORM_PREPEND, META, NULL);
    if (!st) st = add_norm(t, NORM_REPLACE, " ", META);
    if (!st) st = add_dec(t, DEC_REPLACE, META, " ");
    if (!st) st = add_dec(t, DEC_BYTEFALLBACK, NULL, NULL);
    if (!st) st = add_dec(t, DEC_FUSE, NULL, NULL);
    if (!st && t->add_space_prefix) st = add_dec(t, DEC_STRIP, NULL, NULL);
    return st ? rb_error_set(err, st, "out of memory") : RB_OK;
}

static rb_status load_merges(rb_tokenizer *t, const rb_gguf_kv *kv, rb_error *err) {
    for (uint64_t i = 0; i < kv->arr_len; i++) {
        rb_gguf_str s = rb_gguf_arr_str(kv, i);
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) return rb_error_set(err, RB_E_FORMAT, "tokenizer.ggml.merges[%llu] has no space", (unsigned long long)i);
        size_t al = (size_t)(sp - s.ptr), bl = s.len - al - 1;
        int32_t a = tok_vocab_find(&t->vocab, s.ptr, al), b = tok_vocab_find(&t->vocab, sp + 1, bl);
        char *cat = malloc(al + bl + 1);
        if (!cat) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        memcpy(cat, s.ptr, al);
        memcpy(cat + al, sp + 1, bl);
        int32_t r = tok_vocab_find(&t->vocab, cat, al + bl);
        free(cat);
        if (a < 0 || b < 0 || r < 0)
            return rb_error_set(err, RB_E_FORMAT, "tokenizer.ggml.merges[%llu] '%.*s' uses unknown tokens",
                                (unsigned long long)i, (int)(s.len > 100 ? 100 : s.len), s.ptr);
        if (tok_vocab_add_merge(&t->vocab, a, b, r)) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    return RB_OK;
}

rb_status rb_tokenizer_load_gguf(const rb_gguf *g, rb_tokenizer **out, rb_error *err) {
    rb_error_clear(err);
    if (!g || !out) return rb_error_set(err, RB_E_INVALID, "load_gguf: NULL argument");
    *out = NULL;
    char *model = NULL, *pre = NULL;
    rb_status st = rb_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (st == RB_E_NOT_FOUND) return rb_error_set(err, RB_E_NOT_FOUND, "GGUF has no tokenizer.ggml.model");
    if (st) return rb_error_set(err, RB_E_FORMAT, "tokenizer.ggml.model is not a string");
    rb_tokenizer_kind kind;
    if (!strcmp(model, "llama")) kind = RB_TOKENIZER_SPM;
    else if (!strcmp(model, "gpt2")) kind = RB_TOKENIZER_BYTE_LEVEL;
    else {
        st = rb_error_set(err, RB_E_UNSUPPORTED, "unsupported tokenizer.ggml.model '%s'", model);
        free(model);
        return st;
    }
    free(model);
    const rb_gguf_kv *tokens = array_kv(g, "tokenizer.ggml.tokens", 0, false, &st, err);
    if (st) return st;
    if (!tokens || tokens->arr_len == 0 || tokens->arr_len >= (1u << 27))
        return rb_error_set(err, RB_E_FORMAT, "tokenizer.ggml.tokens is missing, empty or too large");
    int32_t n = (int32_t)tokens->arr_len;
    const rb_gguf_kv *scores = array_kv(g, "tokenizer.ggml.scores", tokens->arr_len, true, &st, err);
    if (st) return st;
    const rb_gguf_kv *types = array_kv(g, "tokenizer.ggml.token_type", tokens->arr_len, true, &st, err);
    if (st) return st;
    const rb_gguf_kv *merges = array_kv(g, "tokenizer.ggml.merges", 0, false, &st, err);
    if (st) return st;
    rb_tokenizer *t;
    if ((st = tok_new(n, &t, err)) != RB_OK) return st;
    t->kind = kind;
    for (int32_t i = 0; i < n && !st; i++) {
        rb_gguf_str s = rb_gguf_arr_str(tokens, (uint64_t)i);
        if (!s.ptr && s.len) st = rb_error_set(err, RB_E_FORMAT, "tokenizer.ggml.tokens[%d] unreadable", (int)i);
        else st = tok_vocab_set(&t->vocab, i, s.ptr ? s.ptr : "", s.len);
        if (!st && scores) t->vocab.scores[i] = (float)rb_gguf_arr_float(scores, (uint64_t)i);
        if (!st && types) {
            int64_t ty = rb_gguf_arr_int(types, (uint64_t)i);
            if (ty < 0 || ty > TOK_TYPE_BYTE) st = rb_error_set(err, RB_E_FORMAT, "token %d has type %lld", (int)i, (long long)ty);
            else t->vocab.types[i] = ty == 0 ? TOK_TYPE_NORMAL : (int32_t)ty;
        }
    }
    if (st) goto fail;
    if (kind == RB_TOKENIZER_SPM) {
        t->bos_id = n > 1 ? 1 : -1;
        t->eos_id = n > 2 ? 2 : -1;
        t->add_bos = true;
        t->add_space_prefix = true;
        t->byte_fallback = true;
        t->fuse_unk = true;
    }
    if ((st = opt_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos_id, err)) ||
        (st = opt_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos_id, err)) ||
        (st = opt_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk_id, err)) ||
        (st = opt_id(g, "tokenizer.ggml.padding_token_id", n, &t->pad_id, err)) ||
        (st = opt_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err)) ||
        (st = opt_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err)) ||
        (st = opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err)))
        goto fail;
    if (t->unk_id < 0)
        for (int32_t i = 0; i < n; i++)
            if (t->vocab.types[i] == TOK_TYPE_UNKNOWN) { t->unk_id = i; break; }
    /* control / unknown / user-defined tokens are matched before BPE */
    size_t n_added = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t ty = t->vocab.types[i];
        if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN || ty == TOK_TYPE_USER_DEFINED) n_added++;
    }
    if (n_added && !(t->added = calloc(n_added, sizeof *t->added))) goto fail_oom;
    for (int32_t i = 0; i < n; i++) {
        int32_t ty = t->vocab.types[i];
        if (ty != TOK_TYPE_CONTROL && ty != TOK_TYPE_UNKNOWN && ty != TOK_TYPE_USER_DEFINED) continue;
        tok_added *a = &t->added[t->n_added++];
        size_t len;
        const char *s = tok_vocab_text(&t->vocab, i, &len);
        a->id = i;
        a->special = ty != TOK_TYPE_USER_DEFINED;
        if (!(a->text = malloc(len + 1))) goto fail_oom;
        memcpy(a->text, s, len);
        a->text[len] = 0;
        a->len = len;
    }
    if (merges && (st = load_merges(t, merges, err)) != RB_OK) goto fail;
    if ((st = tok_finish_added(t, err)) != RB_OK) goto fail;
    if (kind == RB_TOKENIZER_SPM) {
        t->use_scores = !merges || merges->arr_len == 0;
        st = spm_pipeline(t, err);
        if (!st) st = (pre = strdup("default")) ? RB_OK : rb_error_set(err, RB_E_NOMEM, "out of memory");
    } else {
        st = rb_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
        if (st == RB_E_NOT_FOUND) st = (pre = strdup("default")) ? RB_OK : RB_E_NOMEM;
        if (st) {
            st = rb_error_set(err, st == RB_E_NOMEM ? st : RB_E_FORMAT, "bad tokenizer.ggml.pre");
            goto fail;
        }
        if (!merges) {
            st = rb_error_set(err, RB_E_FORMAT, "gpt2 tokenizer without tokenizer.ggml.merges");
            goto fail;
        }
        st = byte_level_pipeline(t, pre, err);
        bool im; /* written by rb_tokenizer_write_gguf when it differs from the pre's default */
        if (!st && rb_gguf_get_bool(g, "tokenizer.rbee.ignore_merges", &im) == RB_OK) t->ignore_merges = im;
    }
    t->pre_name = pre;
    pre = NULL;
    if (st) goto fail;
    if ((st = tok_template_from_flags(t, err)) != RB_OK) goto fail;
    char *ct = NULL;
    st = rb_gguf_get_str(g, "tokenizer.chat_template", &ct);
    if (st == RB_OK) t->chat_template = ct;
    else if (st != RB_E_NOT_FOUND) {
        st = rb_error_set(err, RB_E_FORMAT, "tokenizer.chat_template is not a string");
        goto fail;
    }
    *out = t;
    return RB_OK;
fail_oom:
    st = rb_error_set(err, RB_E_NOMEM, "out of memory loading the GGUF tokenizer");
fail:
    free(pre);
    rb_tokenizer_free(t);
    return st;
}

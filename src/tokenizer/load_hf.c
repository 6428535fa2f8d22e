/* Loader for Hugging Face tokenizer.json (+ tokenizer_config.json): the BPE
 * model (vocab, merges as "a b" strings or [a, b] pairs, byte_fallback,
 * ignore_merges, unk), added tokens, and the normalizer / pre-tokenizer /
 * post-processor / decoder variants used by Llama 2/3, Mistral, Qwen, Gemma. */
#include "tokenizer/tok_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define HF_MAX_FILE (512u << 20)

static const char *jstr(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(const json_t *o, const char *k, bool def) {
    const json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static rb_status dup_str(const char *s, size_t n, char **out, size_t *out_len) {
    char *p = malloc(n + 1);
    if (!p) return RB_E_NOMEM;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    *out = p;
    if (out_len) *out_len = n;
    return RB_OK;
}

/* pattern: {"String": s} or {"Regex": r} */
static rb_status get_pattern(const json_t *o, const char **s, size_t *len, bool *is_regex, rb_error *err) {
    const json_t *p = json_object_get(o, "pattern");
    const json_t *v;
    if ((v = json_object_get(p, "String")) != NULL && json_is_string(v)) *is_regex = false;
    else if ((v = json_object_get(p, "Regex")) != NULL && json_is_string(v)) *is_regex = true;
    else return rb_error_set(err, RB_E_FORMAT, "pattern must be {\"String\": ...} or {\"Regex\": ...}");
    *s = json_string_value(v);
    *len = json_string_length(v);
    return RB_OK;
}

static rb_status grow_arr(void **p, size_t n, size_t elem) {
    void *q = realloc(*p, (n + 1) * elem);
    if (!q) return RB_E_NOMEM;
    *p = q;
    memset((char *)q + n * elem, 0, elem);
    return RB_OK;
}

static tok_prepend_scheme prepend_scheme(const json_t *o) {
    const char *ps = jstr(o, "prepend_scheme");
    if (ps) return !strcmp(ps, "always") ? PREPEND_ALWAYS : !strcmp(ps, "never") ? PREPEND_NEVER : PREPEND_FIRST;
    return jbool(o, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
}

static rb_status parse_normalizer(rb_tokenizer *t, const json_t *o, int depth, rb_error *err) {
    if (json_is_null(o) || !o) return RB_OK;
    const char *type = jstr(o, "type");
    if (!json_is_object(o) || !type || depth > 8) return rb_error_set(err, RB_E_FORMAT, "normalizer without a type");
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(o, "normalizers");
        if (!json_is_array(arr)) return rb_error_set(err, RB_E_FORMAT, "Sequence normalizer without normalizers");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            rb_status st = parse_normalizer(t, json_array_get(arr, i), depth + 1, err);
            if (st) return st;
        }
        return RB_OK;
    }
    if (grow_arr((void **)&t->norms, t->n_norms, sizeof *t->norms)) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    tok_norm *n = &t->norms[t->n_norms];
    rb_status st = RB_OK;
    if (!strcmp(type, "Prepend")) {
        const json_t *v = json_object_get(o, "prepend");
        if (!json_is_string(v)) return rb_error_set(err, RB_E_FORMAT, "Prepend normalizer without prepend");
        n->kind = NORM_PREPEND;
        st = dup_str(json_string_value(v), json_string_length(v), &n->a, &n->alen);
    } else if (!strcmp(type, "Replace")) {
        const char *p = NULL;
        size_t pl = 0;
        bool re = false;
        if ((st = get_pattern(o, &p, &pl, &re, err)) != RB_OK) return st;
        const json_t *c = json_object_get(o, "content");
        if (!json_is_string(c)) return rb_error_set(err, RB_E_FORMAT, "Replace normalizer without content");
        n->kind = NORM_REPLACE;
        st = dup_str(p, pl, &n->a, &n->alen);
        if (!st) st = dup_str(json_string_value(c), json_string_length(c), &n->b, &n->blen);
        if (!st && re) {
            t->n_norms++;
            return tok_regex_compile(p, pl, &n->re, err);
        }
    } else if (!strcmp(type, "NFC")) {
        n->kind = NORM_NFC;
    } else if (!strcmp(type, "Strip")) {
        n->kind = NORM_STRIP;
        n->left = jbool(o, "strip_left", true);
        n->right = jbool(o, "strip_right", true);
    } else {
        return rb_error_set(err, RB_E_UNSUPPORTED, "unsupported normalizer type '%s'", type);
    }
    if (st) return rb_error_set(err, st, "out of memory");
    t->n_norms++;
    return RB_OK;
}

static rb_status parse_behavior(const char *b, tok_split_beh *out, rb_error *err) {
    static const struct { const char *name; tok_split_beh v; } map[] = {
        {"Removed", SPLIT_REMOVED}, {"Isolated", SPLIT_ISOLATED}, {"MergedWithPrevious", SPLIT_MERGED_PREV},
        {"MergedWithNext", SPLIT_MERGED_NEXT}, {"Contiguous", SPLIT_CONTIGUOUS}};
    for (size_t i = 0; b && i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(b, map[i].name)) { *out = map[i].v; return RB_OK; }
    return rb_error_set(err, RB_E_UNSUPPORTED, "unsupported split behavior '%s'", b ? b : "(none)");
}

#include "tokenizer/pretok_patterns.h"
#define GPT2_REGEX TOK_RE_GPT2

static rb_status parse_pre(rb_tokenizer *t, const json_t *o, int depth, rb_error *err) {
    if (json_is_null(o) || !o) return RB_OK;
    const char *type = jstr(o, "type");
    if (!json_is_object(o) || !type || depth > 8) return rb_error_set(err, RB_E_FORMAT, "pre_tokenizer without a type");
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(o, "pretokenizers");
        if (!json_is_array(arr)) return rb_error_set(err, RB_E_FORMAT, "Sequence pre_tokenizer without pretokenizers");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            rb_status st = parse_pre(t, json_array_get(arr, i), depth + 1, err);
            if (st) return st;
        }
        return RB_OK;
    }
    if (grow_arr((void **)&t->pres, t->n_pres, sizeof *t->pres)) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    tok_pre *p = &t->pres[t->n_pres];
    rb_status st = RB_OK;
    if (!strcmp(type, "Split")) {
        const char *pat = NULL;
        size_t pl = 0;
        bool re = false;
        if ((st = get_pattern(o, &pat, &pl, &re, err)) != RB_OK) return st;
        p->kind = PRE_SPLIT;
        p->invert = jbool(o, "invert", false);
        if ((st = parse_behavior(jstr(o, "behavior"), &p->behavior, err)) != RB_OK) return st;
        t->n_pres++;
        if (re) {
            if (dup_str(pat, pl, &p->regex_src, NULL)) return rb_error_set(err, RB_E_NOMEM, "out of memory");
            return tok_regex_compile(pat, pl, &p->re, err);
        }
        if (dup_str(pat, pl, &p->lit, &p->litlen)) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        return RB_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        p->kind = PRE_BYTELEVEL;
        p->add_prefix_space = jbool(o, "add_prefix_space", true);
        p->use_regex = jbool(o, "use_regex", true);
        t->n_pres++;
        if (p->use_regex) return tok_regex_compile(GPT2_REGEX, strlen(GPT2_REGEX), &p->re, err);
        return RB_OK;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *r = jstr(o, "replacement");
        if (r && strcmp(r, "\xE2\x96\x81") != 0)
            return rb_error_set(err, RB_E_UNSUPPORTED, "Metaspace replacement other than U+2581");
        p->kind = PRE_METASPACE;
        p->prepend = prepend_scheme(o);
        p->split = jbool(o, "split", true);
        t->n_pres++;
        return RB_OK;
    }
    if (!strcmp(type, "Digits")) {
        p->kind = PRE_DIGITS;
        p->behavior = jbool(o, "individual_digits", false) ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS;
        t->n_pres++;
        return RB_OK;
    }
    return rb_error_set(err, RB_E_UNSUPPORTED, "unsupported pre_tokenizer type '%s'", type);
}

static rb_status parse_decoder(rb_tokenizer *t, const json_t *o, int depth, rb_error *err) {
    if (json_is_null(o) || !o) return RB_OK;
    const char *type = jstr(o, "type");
    if (!json_is_object(o) || !type || depth > 8) return rb_error_set(err, RB_E_FORMAT, "decoder without a type");
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(o, "decoders");
        if (!json_is_array(arr)) return rb_error_set(err, RB_E_FORMAT, "Sequence decoder without decoders");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            rb_status st = parse_decoder(t, json_array_get(arr, i), depth + 1, err);
            if (st) return st;
        }
        return RB_OK;
    }
    if (grow_arr((void **)&t->decs, t->n_decs, sizeof *t->decs)) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    tok_dec *d = &t->decs[t->n_decs];
    if (!strcmp(type, "Replace")) {
        const char *p = NULL;
        size_t pl = 0;
        bool re = false;
        rb_status st = get_pattern(o, &p, &pl, &re, err);
        if (st) return st;
        if (re) return rb_error_set(err, RB_E_UNSUPPORTED, "Replace decoder with a Regex pattern");
        const json_t *c = json_object_get(o, "content");
        if (!json_is_string(c)) return rb_error_set(err, RB_E_FORMAT, "Replace decoder without content");
        d->kind = DEC_REPLACE;
        if (dup_str(p, pl, &d->a, &d->alen) || dup_str(json_string_value(c), json_string_length(c), &d->b, &d->blen))
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
    } else if (!strcmp(type, "ByteFallback")) {
        d->kind = DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        d->kind = DEC_FUSE;
    } else if (!strcmp(type, "Strip")) {
        const char *c = jstr(o, "content");
        if (!c || !c[0] || (unsigned char)c[0] >= 0x80 || c[1])
            return rb_error_set(err, RB_E_UNSUPPORTED, "Strip decoder content must be one ASCII character");
        d->kind = DEC_STRIP;
        d->strip_cp = (unsigned char)c[0];
        json_int_t s0 = json_integer_value(json_object_get(o, "start"));
        json_int_t s1 = json_integer_value(json_object_get(o, "stop"));
        if (s0 < 0 || s1 < 0 || s0 > 1024 || s1 > 1024) return rb_error_set(err, RB_E_FORMAT, "Strip decoder counts");
        d->start = (int)s0;
        d->stop = (int)s1;
    } else if (!strcmp(type, "ByteLevel")) {
        d->kind = DEC_BYTELEVEL;
    } else if (!strcmp(type, "Metaspace")) {
        d->kind = DEC_METASPACE;
        d->prepend = prepend_scheme(o);
    } else {
        return rb_error_set(err, RB_E_UNSUPPORTED, "unsupported decoder type '%s'", type);
    }
    t->n_decs++;
    return RB_OK;
}

/* Looks up a special token by its name in the TemplateProcessing table. */
static rb_status template_special(rb_tokenizer *t, const json_t *specials, const char *name, rb_error *err) {
    const json_t *e = json_object_get(specials, name);
    const json_t *ids = json_object_get(e, "ids");
    if (!json_is_array(ids)) return rb_error_set(err, RB_E_FORMAT, "template special token '%s' undefined", name);
    size_t n = json_array_size(ids);
    int32_t *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_int_t id = json_integer_value(json_array_get(ids, i));
        if (!json_is_integer(json_array_get(ids, i)) || id < 0 || id >= t->vocab.n) {
            free(v);
            return rb_error_set(err, RB_E_FORMAT, "template special token '%s' has a bad id", name);
        }
        v[i] = (int32_t)id;
    }
    rb_status st = tok_tpl_append(t, false, v, n);
    free(v);
    return st ? rb_error_set(err, st, "out of memory") : RB_OK;
}

static rb_status parse_post(rb_tokenizer *t, const json_t *o, int depth, rb_error *err) {
    if (json_is_null(o) || !o) return RB_OK;
    const char *type = jstr(o, "type");
    if (!json_is_object(o) || !type || depth > 8) return rb_error_set(err, RB_E_FORMAT, "post_processor without a type");
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(o, "processors");
        if (!json_is_array(arr)) return rb_error_set(err, RB_E_FORMAT, "Sequence post_processor without processors");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            rb_status st = parse_post(t, json_array_get(arr, i), depth + 1, err);
            if (st) return st;
        }
        return RB_OK;
    }
    if (!strcmp(type, "ByteLevel")) return RB_OK; /* only changes offsets */
    if (!strcmp(type, "TemplateProcessing")) {
        if (t->n_tpl) return rb_error_set(err, RB_E_UNSUPPORTED, "more than one TemplateProcessing");
        const json_t *single = json_object_get(o, "single"), *specials = json_object_get(o, "special_tokens");
        if (!json_is_array(single)) return rb_error_set(err, RB_E_FORMAT, "TemplateProcessing without single");
        for (size_t i = 0; i < json_array_size(single); i++) {
            const json_t *it = json_array_get(single, i), *sp = json_object_get(it, "SpecialToken");
            rb_status st;
            if (sp) {
                const char *name = jstr(sp, "id");
                if (!name) return rb_error_set(err, RB_E_FORMAT, "template SpecialToken without id");
                st = template_special(t, specials, name, err);
            } else if (json_object_get(it, "Sequence")) {
                st = tok_tpl_append(t, true, NULL, 0);
                if (st) st = rb_error_set(err, st, "out of memory");
            } else {
                return rb_error_set(err, RB_E_FORMAT, "template item is neither SpecialToken nor Sequence");
            }
            if (st) return st;
        }
        return RB_OK;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        const json_t *cls = json_object_get(o, "cls"), *sep = json_object_get(o, "sep");
        json_int_t c = json_integer_value(json_array_get(cls, 1)), s = json_integer_value(json_array_get(sep, 1));
        if (c < 0 || s < 0 || c >= t->vocab.n || s >= t->vocab.n) return rb_error_set(err, RB_E_FORMAT, "bad cls/sep ids");
        int32_t ci = (int32_t)c, si = (int32_t)s;
        if (tok_tpl_append(t, false, &ci, 1) || tok_tpl_append(t, true, NULL, 0) || tok_tpl_append(t, false, &si, 1))
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        return RB_OK;
    }
    return rb_error_set(err, RB_E_UNSUPPORTED, "unsupported post_processor type '%s'", type);
}

static rb_status parse_merges(rb_tokenizer *t, const json_t *merges, rb_error *err) {
    if (!merges || json_is_null(merges)) return RB_OK;
    if (!json_is_array(merges)) return rb_error_set(err, RB_E_FORMAT, "model.merges is not an array");
    tok_buf cat = {0};
    rb_status st = RB_OK;
    for (size_t i = 0; i < json_array_size(merges) && !st; i++) {
        const json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(m)) {
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                st = rb_error_set(err, RB_E_FORMAT, "merge %zu '%s' is not two tokens separated by one space", i, a);
                break;
            }
            al = (size_t)(sp - a);
            b = sp + 1;
            bl = json_string_length(m) - al - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            al = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            bl = json_string_length(json_array_get(m, 1));
        } else {
            st = rb_error_set(err, RB_E_FORMAT, "merge %zu is neither \"a b\" nor [a, b]", i);
            break;
        }
        int32_t ia = tok_vocab_find(&t->vocab, a, al), ib = tok_vocab_find(&t->vocab, b, bl);
        cat.len = 0;
        if ((st = tok_buf_append(&cat, a, al)) != RB_OK || (st = tok_buf_append(&cat, b, bl)) != RB_OK) break;
        int32_t ir = tok_vocab_find(&t->vocab, cat.p, cat.len);
        if (ia < 0 || ib < 0 || ir < 0) {
            st = rb_error_set(err, RB_E_FORMAT, "merge %zu ('%.*s' + '%.*s') uses a token not in the vocabulary", i,
                              (int)al, a, (int)bl, b);
            break;
        }
        st = tok_vocab_add_merge(&t->vocab, ia, ib, ir);
    }
    tok_buf_free(&cat);
    if (st && err && err->code == RB_OK) rb_error_set(err, st, "out of memory reading merges");
    return st;
}

/* token name in tokenizer_config.json: "x" or {"content": "x"} */
static int32_t config_token(const rb_tokenizer *t, const json_t *cfg, const char *key) {
    const json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v)) return -1;
    return tok_vocab_find(&t->vocab, json_string_value(v), json_string_length(v));
}

static rb_status apply_config(rb_tokenizer *t, const json_t *cfg, rb_error *err) {
    if (!cfg) return RB_OK;
    int32_t id;
    if ((id = config_token(t, cfg, "bos_token")) >= 0) t->bos_id = id;
    if ((id = config_token(t, cfg, "eos_token")) >= 0) t->eos_id = id;
    if ((id = config_token(t, cfg, "pad_token")) >= 0) t->pad_id = id;
    const json_t *ct = json_object_get(cfg, "chat_template");
    const char *tpl = NULL;
    if (json_is_string(ct)) {
        tpl = json_string_value(ct);
    } else if (json_is_array(ct)) { /* [{"name": "default", "template": ...}, ...] */
        for (size_t i = 0; i < json_array_size(ct); i++) {
            const json_t *e = json_array_get(ct, i);
            const char *name = jstr(e, "name");
            if (!tpl || (name && !strcmp(name, "default"))) tpl = jstr(e, "template");
        }
    }
    if (tpl && dup_str(tpl, strlen(tpl), &t->chat_template, NULL)) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    return RB_OK;
}

static rb_status build(const json_t *root, const json_t *cfg, rb_tokenizer **out, rb_error *err) {
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(root) || !json_is_object(model))
        return rb_error_set(err, RB_E_FORMAT, "tokenizer.json has no \"model\" object");
    const char *mtype = jstr(model, "type");
    if (mtype && strcmp(mtype, "BPE") != 0)
        return rb_error_set(err, RB_E_UNSUPPORTED, "unsupported tokenizer model type '%s' (only BPE)", mtype);
    const json_t *vocab = json_object_get(model, "vocab"), *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab) || json_object_size(vocab) == 0)
        return rb_error_set(err, RB_E_FORMAT, "model.vocab is missing or empty");
    const char *csp = jstr(model, "continuing_subword_prefix"), *eows = jstr(model, "end_of_word_suffix");
    if ((csp && csp[0]) || (eows && eows[0]))
        return rb_error_set(err, RB_E_UNSUPPORTED, "BPE continuing_subword_prefix/end_of_word_suffix");
    json_int_t max_id = -1;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)vocab, key, val) {
        json_int_t id = json_integer_value(val);
        if (!json_is_integer(val) || id < 0 || id >= (1 << 27))
            return rb_error_set(err, RB_E_FORMAT, "vocab entry '%s' has a bad id", key);
        if (id > max_id) max_id = id;
    }
    if (added && !json_is_array(added)) return rb_error_set(err, RB_E_FORMAT, "added_tokens is not an array");
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i), *idv = json_object_get(a, "id");
        json_int_t id = json_integer_value(idv);
        if (!json_is_integer(idv) || id < 0 || id >= (1 << 27) || !json_is_string(json_object_get(a, "content")))
            return rb_error_set(err, RB_E_FORMAT, "added_tokens[%zu] needs an id and a content", i);
        if (id > max_id) max_id = id;
    }
    /* ids may leave holes, but not so many that a few bytes of JSON make the
     * per-id tables huge (one id of 2^27 alone would take gigabytes) */
    size_t n_tokens = json_object_size(vocab) + json_array_size(added);
    if ((size_t)max_id >= 2 * n_tokens + ((size_t)1 << 20))
        return rb_error_set(err, RB_E_FORMAT, "token ids reach %lld for %zu tokens: the id space is too sparse",
                            (long long)max_id, n_tokens);
    rb_tokenizer *t;
    rb_status st = tok_new((int32_t)max_id + 1, &t, err);
    if (st) return st;
    json_object_foreach((json_t *)vocab, key, val) {
        st = tok_vocab_set(&t->vocab, (int32_t)json_integer_value(val), key, strlen(key));
        if (st) goto fail_oom;
    }
    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->fuse_unk = jbool(model, "fuse_unk", false);
    t->ignore_merges = jbool(model, "ignore_merges", false);
    const char *unk = jstr(model, "unk_token");
    if (unk) t->unk_id = tok_vocab_find(&t->vocab, unk, strlen(unk));
    if ((st = parse_merges(t, json_object_get(model, "merges"), err)) != RB_OK) goto fail;
    t->n_added = json_array_size(added);
    if (t->n_added && !(t->added = calloc(t->n_added, sizeof *t->added))) goto fail_oom;
    for (size_t i = 0; i < t->n_added; i++) {
        const json_t *a = json_array_get(added, i), *c = json_object_get(a, "content");
        tok_added *d = &t->added[i];
        d->id = (int32_t)json_integer_value(json_object_get(a, "id"));
        d->special = jbool(a, "special", false);
        d->lstrip = jbool(a, "lstrip", false);
        d->rstrip = jbool(a, "rstrip", false);
        d->single_word = jbool(a, "single_word", false);
        d->normalized = jbool(a, "normalized", !d->special);
        if (dup_str(json_string_value(c), json_string_length(c), &d->text, &d->len)) goto fail_oom;
    }
    if (unk && t->unk_id < 0) {
        for (size_t i = 0; i < t->n_added; i++)
            if (!strcmp(t->added[i].text, unk)) t->unk_id = t->added[i].id;
    }
    if ((st = tok_finish_added(t, err)) != RB_OK) goto fail;
    if ((st = parse_normalizer(t, json_object_get(root, "normalizer"), 0, err)) != RB_OK) goto fail;
    if ((st = parse_pre(t, json_object_get(root, "pre_tokenizer"), 0, err)) != RB_OK) goto fail;
    if ((st = parse_post(t, json_object_get(root, "post_processor"), 0, err)) != RB_OK) goto fail;
    if ((st = parse_decoder(t, json_object_get(root, "decoder"), 0, err)) != RB_OK) goto fail;
    if ((st = tok_decoder_check(t, err)) != RB_OK) goto fail;
    if ((st = apply_config(t, cfg, err)) != RB_OK) goto fail;
    tok_flags_from_template(t);
    t->kind = RB_TOKENIZER_SPM;
    for (size_t i = 0; i < t->n_pres; i++)
        if (t->pres[i].kind == PRE_BYTELEVEL) t->kind = RB_TOKENIZER_BYTE_LEVEL;
    for (size_t i = 0; i < t->n_decs; i++)
        if (t->decs[i].kind == DEC_BYTELEVEL) t->kind = RB_TOKENIZER_BYTE_LEVEL;
    for (size_t i = 0; i < t->n_norms; i++)
        if (t->norms[i].kind == NORM_PREPEND && !strcmp(t->norms[i].a, "\xE2\x96\x81")) t->add_space_prefix = true;
    for (size_t i = 0; i < t->n_pres; i++)
        if (t->pres[i].kind == PRE_METASPACE && t->pres[i].prepend != PREPEND_NEVER) t->add_space_prefix = true;
    *out = t;
    return RB_OK;
fail_oom:
    st = rb_error_set(err, RB_E_NOMEM, "out of memory loading tokenizer.json");
fail:
    rb_tokenizer_free(t);
    return st;
}

static rb_status parse_json(const char *data, size_t len, const char *what, size_t flags, json_t **out,
                            rb_error *err) {
    json_error_t je;
    json_t *j = json_loadb(data, len, flags, &je);
    if (!j) return rb_error_set(err, RB_E_FORMAT, "%s: JSON error at line %d column %d: %s", what, je.line, je.column, je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return rb_error_set(err, RB_E_FORMAT, "%s: top level is not a JSON object", what);
    }
    *out = j;
    return RB_OK;
}

rb_status rb_tokenizer_load_hf_memory(const char *json, size_t json_len, const char *config, size_t config_len,
                                      rb_tokenizer **out, rb_error *err) {
    rb_error_clear(err);
    if (!out || (!json && json_len)) return rb_error_set(err, RB_E_INVALID, "load_hf_memory: NULL argument");
    *out = NULL;
    json_t *root = NULL, *cfg = NULL;
    rb_status st = parse_json(json ? json : "", json_len, "tokenizer.json", JSON_ALLOW_NUL, &root, err);
    if (!st && config) st = parse_json(config, config_len, "tokenizer_config.json",
                                      JSON_DECODE_INT_AS_REAL /* model_max_length is ~1e30 */, &cfg, err);
    if (!st) st = build(root, cfg, out, err);
    json_decref(root);
    json_decref(cfg);
    return st;
}

static rb_status read_file(const char *path, char **data, size_t *len, rb_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return rb_error_set(err, RB_E_IO, "cannot open '%s'", path);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            if (cap >= HF_MAX_FILE) {
                free(buf);
                fclose(f);
                return rb_error_set(err, RB_E_RANGE, "'%s' is larger than %u MiB", path, HF_MAX_FILE >> 20);
            }
            cap = cap ? cap * 2 : 1 << 16;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return rb_error_set(err, RB_E_NOMEM, "out of memory reading '%s'", path);
            }
            buf = p;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad) {
        free(buf);
        return rb_error_set(err, RB_E_IO, "error reading '%s'", path);
    }
    *data = buf;
    *len = n;
    return RB_OK;
}

rb_status rb_tokenizer_load_hf(const char *tokenizer_json_path, const char *config_json_path, rb_tokenizer **out,
                               rb_error *err) {
    rb_error_clear(err);
    if (!tokenizer_json_path || !out) return rb_error_set(err, RB_E_INVALID, "load_hf: NULL argument");
    char *j = NULL, *c = NULL;
    size_t jl = 0, cl = 0;
    rb_status st = read_file(tokenizer_json_path, &j, &jl, err);
    if (!st && config_json_path) st = read_file(config_json_path, &c, &cl, err);
    if (!st) st = rb_tokenizer_load_hf_memory(j, jl, c, cl, out, err);
    if (st) rb_error_prefix(err, "%s: ", tokenizer_json_path);
    free(j);
    free(c);
    return st;
}

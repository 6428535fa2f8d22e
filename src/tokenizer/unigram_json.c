/* Loading a `tokenizers` tokenizer.json whose model is a Unigram (T5's
 * layout as transformers' converter writes it): the vocabulary of
 * [piece, score] pairs and unk_id, added tokens (split out of the raw text
 * before normalization), the normalizer (Precompiled with a base64 charsmap,
 * Strip, Replace of " {2,}" or of a literal string, in a Sequence or alone),
 * the pre-tokenizer (Metaspace, optionally after WhitespaceSplit in a
 * Sequence: the older T5 form) and a TemplateProcessing post-processor
 * ("$A </s>"). Anything else gives RB_E_UNSUPPORTED naming it. */
#include "tokenizer/unigram_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(...) rb_error_set(err, RB_E_FORMAT, "tokenizer.json: " __VA_ARGS__)
#define UNSUP(...) rb_error_set(err, RB_E_UNSUPPORTED, "tokenizer.json: " __VA_ARGS__)

static int b64_val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 with '=' padding; false on any other character or a bad length. */
static bool b64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (n % 4) return false;
    size_t pad = 0;
    if (n && s[n - 1] == '=') pad++;
    if (n > 1 && s[n - 2] == '=') pad++;
    uint8_t *o = malloc(n / 4 * 3 + 1);
    if (!o) return false;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (int j = 0; j < 4; j++) {
            const bool last = i + 4 == n;
            if (last && s[i + j] == '=' && j >= 4 - (int)pad) v[j] = 0;
            else if ((v[j] = b64_val((unsigned char)s[i + j])) < 0) {
                free(o);
                return false;
            }
        }
        const uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        o[k++] = (uint8_t)(w >> 16);
        o[k++] = (uint8_t)(w >> 8);
        o[k++] = (uint8_t)w;
    }
    *out = o;
    *out_len = k - pad;
    return true;
}

static rb_status add_norm(rb_unigram *t, ug_norm n, rb_error *err) {
    ug_norm *p = realloc(t->norms, sizeof *p * (t->n_norms + 1));
    if (!p) {
        free(n.a);
        free(n.b);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    t->norms = p;
    t->norms[t->n_norms++] = n;
    return RB_OK;
}

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

static rb_status one_normalizer(rb_unigram *t, json_t *n, rb_error *err) {
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!type) return BAD("normalizer without a type");
    if (!strcmp(type, "Precompiled")) {
        json_t *cm = json_object_get(n, "precompiled_charsmap");
        if (json_is_null(cm) || !cm) return RB_OK; /* identity */
        if (!json_is_string(cm)) return BAD("precompiled_charsmap is not a string");
        if (t->has_cm) return UNSUP("two Precompiled normalizers");
        uint8_t *bytes;
        size_t blen;
        if (!b64_decode(json_string_value(cm), json_string_length(cm), &bytes, &blen))
            return BAD("precompiled_charsmap is not valid base64");
        rb_status st = blen ? ug_charsmap_parse(bytes, blen, &t->cm, err) : RB_OK;
        free(bytes);
        if (st != RB_OK) return st;
        t->has_cm = blen != 0;
        return add_norm(t, (ug_norm){.kind = UG_NORM_CHARSMAP}, err);
    }
    if (!strcmp(type, "Strip")) {
        json_t *l = json_object_get(n, "strip_left"), *r = json_object_get(n, "strip_right");
        return add_norm(t, (ug_norm){.kind = UG_NORM_STRIP, .left = json_is_true(l), .right = json_is_true(r)}, err);
    }
    if (!strcmp(type, "Replace")) {
        json_t *pat = json_object_get(n, "pattern"), *content = json_object_get(n, "content");
        if (!json_is_string(content)) return BAD("Replace without a content string");
        const char *re = json_string_value(json_object_get(pat, "Regex"));
        json_t *lit = json_object_get(pat, "String");
        ug_norm nm = {0};
        if (re && !strcmp(re, " {2,}")) {
            nm.kind = UG_NORM_REPLACE_SPACES;
        } else if (json_is_string(lit) && json_string_length(lit) > 0) {
            nm.kind = UG_NORM_REPLACE;
            nm.alen = json_string_length(lit);
            if (!(nm.a = dup_n(json_string_value(lit), nm.alen))) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        } else {
            return UNSUP("Replace pattern %s", re ? re : "(not a regex or string)");
        }
        nm.blen = json_string_length(content);
        if (!(nm.b = dup_n(json_string_value(content), nm.blen))) {
            free(nm.a);
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
        return add_norm(t, nm, err);
    }
    return UNSUP("normalizer %s", type);
}

static rb_status metaspace(rb_unigram *t, json_t *p, rb_error *err) {
    const char *rep = json_string_value(json_object_get(p, "replacement"));
    if (rep) {
        const size_t l = strlen(rep);
        if (l == 0 || l > 4) return BAD("Metaspace replacement of %zu bytes", l);
        memcpy(t->meta_rep, rep, l);
        t->meta_rep_len = l;
    }
    const char *ps = json_string_value(json_object_get(p, "prepend_scheme"));
    json_t *aps = json_object_get(p, "add_prefix_space");
    if (ps) {
        if (!strcmp(ps, "always")) t->prepend = UG_PREPEND_ALWAYS;
        else if (!strcmp(ps, "first")) t->prepend = UG_PREPEND_FIRST;
        else if (!strcmp(ps, "never")) t->prepend = UG_PREPEND_NEVER;
        else return UNSUP("Metaspace prepend_scheme %s", ps);
    } else {
        t->prepend = (!aps || json_is_true(aps)) ? UG_PREPEND_ALWAYS : UG_PREPEND_NEVER;
    }
    json_t *sp = json_object_get(p, "split");
    t->meta_split = !sp || json_is_true(sp);
    t->metaspace = true;
    return RB_OK;
}

static rb_status pre_tokenizer(rb_unigram *t, json_t *p, rb_error *err) {
    if (!p || json_is_null(p)) return RB_OK;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type) return BAD("pre_tokenizer without a type");
    if (!strcmp(type, "Metaspace")) return metaspace(t, p, err);
    if (!strcmp(type, "WhitespaceSplit")) {
        t->ws_split = true;
        return RB_OK;
    }
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list)) return BAD("pre_tokenizer Sequence without a list");
        size_t i;
        json_t *x;
        bool seen_meta = false;
        json_array_foreach(list, i, x) {
            const char *ty = json_string_value(json_object_get(x, "type"));
            if (ty && !strcmp(ty, "WhitespaceSplit") && !seen_meta) t->ws_split = true;
            else if (ty && !strcmp(ty, "Metaspace") && !seen_meta) {
                rb_status st = metaspace(t, x, err);
                if (st != RB_OK) return st;
                seen_meta = true;
            } else {
                return UNSUP("pre_tokenizer sequence item %s", ty ? ty : "(no type)");
            }
        }
        return RB_OK;
    }
    return UNSUP("pre_tokenizer %s", type);
}

static int32_t id_of(const rb_unigram *t, const char *s) {
    if (!s) return -1;
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == strlen(s) && !memcmp(t->added[i].text, s, t->added[i].len)) return t->added[i].id;
    return tok_vocab_find(&t->v, s, strlen(s));
}

static rb_status push_id(int32_t **v, size_t *n, int32_t id, rb_error *err) {
    int32_t *p = realloc(*v, sizeof *p * (*n + 1));
    if (!p) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    p[(*n)++] = id;
    *v = p;
    return RB_OK;
}

static rb_status post_processor(rb_unigram *t, json_t *p, rb_error *err) {
    if (!p || json_is_null(p)) return RB_OK;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type || strcmp(type, "TemplateProcessing")) return UNSUP("post_processor %s", type ? type : "(no type)");
    json_t *single = json_object_get(p, "single"), *sp = json_object_get(p, "special_tokens");
    if (!json_is_array(single)) return BAD("TemplateProcessing without a single template");
    size_t i;
    json_t *item;
    bool seen_seq = false;
    json_array_foreach(single, i, item) {
        if (json_object_get(item, "Sequence")) {
            if (seen_seq) return BAD("template with two sequences");
            seen_seq = true;
            continue;
        }
        const char *name = json_string_value(json_object_get(json_object_get(item, "SpecialToken"), "id"));
        if (!name) return BAD("template item is neither Sequence nor SpecialToken");
        json_t *ids = json_object_get(json_object_get(sp, name), "ids");
        if (!json_is_array(ids) || json_array_size(ids) == 0) return BAD("template token %s has no ids", name);
        size_t j;
        json_t *idv;
        json_array_foreach(ids, j, idv) {
            const json_int_t id = json_integer_value(idv);
            if (!json_is_integer(idv) || id < 0 || id >= t->v.n) return BAD("template token %s: bad id", name);
            rb_status st = seen_seq ? push_id(&t->tpl_post, &t->n_tpl_post, (int32_t)id, err)
                                    : push_id(&t->tpl_pre, &t->n_tpl_pre, (int32_t)id, err);
            if (st != RB_OK) return st;
        }
    }
    if (!seen_seq) return BAD("template without $A");
    if (t->n_tpl_pre + t->n_tpl_post > 16) return UNSUP("template with more than 16 special tokens");
    return RB_OK;
}

static rb_status added_tokens(rb_unigram *t, json_t *list, rb_error *err) {
    if (!list || json_is_null(list)) return RB_OK;
    if (!json_is_array(list)) return BAD("added_tokens is not a list");
    const size_t n = json_array_size(list);
    if (!n) return RB_OK;
    t->added = calloc(n, sizeof *t->added);
    if (!t->added) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    size_t i;
    json_t *a;
    json_array_foreach(list, i, a) {
        json_t *idv = json_object_get(a, "id"), *c = json_object_get(a, "content");
        const json_int_t id = json_integer_value(idv);
        if (!json_is_integer(idv) || id < 0 || id >= t->v.n || !json_is_string(c) || json_string_length(c) == 0)
            return BAD("added token %zu: bad id or content", i);
        tok_added *d = &t->added[t->n_added];
        d->id = (int32_t)id;
        d->len = json_string_length(c);
        if (!(d->text = dup_n(json_string_value(c), d->len))) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        d->special = json_is_true(json_object_get(a, "special"));
        t->n_added++;
        if (tok_trie_insert(&t->added_trie, d->text, d->len, (int32_t)(t->n_added - 1)) != RB_OK)
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    return RB_OK;
}

static rb_status build(rb_unigram **out, json_t *root, rb_error *err) {
    json_t *model = json_object_get(root, "model");
    const char *mt = json_string_value(json_object_get(model, "type"));
    if (!mt) return BAD("no model type");
    if (strcmp(mt, "Unigram")) return UNSUP("model type %s is not Unigram", mt);
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_array(vocab)) return BAD("model.vocab is not a list");
    const size_t n = json_array_size(vocab);
    if (n == 0 || n > (1u << 24)) return BAD("%zu vocabulary entries", n);
    rb_unigram *t;
    rb_status st = ug_new((int32_t)n, &t, err);
    if (st != RB_OK) return st;
    size_t i;
    json_t *e;
    json_array_foreach(vocab, i, e) {
        json_t *p = json_array_get(e, 0), *s = json_array_get(e, 1);
        if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(p) || !json_is_number(s) ||
            json_string_length(p) == 0) {
            st = BAD("vocab entry %zu is not [piece, score]", i);
            break;
        }
        if (tok_vocab_set(&t->v, (int32_t)i, json_string_value(p), json_string_length(p)) != RB_OK) {
            st = rb_error_set(err, RB_E_NOMEM, "out of memory");
            break;
        }
        t->v.scores[i] = (float)json_number_value(s);
        t->v.types[i] = TOK_TYPE_NORMAL;
    }
    json_t *unk = json_object_get(model, "unk_id");
    if (st == RB_OK && unk && !json_is_null(unk)) {
        const json_int_t u = json_integer_value(unk);
        if (!json_is_integer(unk) || u < 0 || u >= (json_int_t)n) st = BAD("unk_id outside the vocabulary");
        else t->unk_id = (int32_t)u;
    }
    t->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    if (st == RB_OK) st = added_tokens(t, json_object_get(root, "added_tokens"), err);
    json_t *norm = json_object_get(root, "normalizer");
    if (st == RB_OK && norm && !json_is_null(norm)) {
        const char *ty = json_string_value(json_object_get(norm, "type"));
        if (ty && !strcmp(ty, "Sequence")) {
            json_t *list = json_object_get(norm, "normalizers"), *x;
            if (!json_is_array(list)) st = BAD("normalizer Sequence without a list");
            json_array_foreach(list, i, x) {
                if (st != RB_OK) break;
                st = one_normalizer(t, x, err);
            }
        } else {
            st = one_normalizer(t, norm, err);
        }
    }
    if (st == RB_OK) st = pre_tokenizer(t, json_object_get(root, "pre_tokenizer"), err);
    if (st == RB_OK) st = post_processor(t, json_object_get(root, "post_processor"), err);
    if (st != RB_OK) {
        rb_unigram_free(t);
        return st;
    }
    t->eos_id = id_of(t, "</s>");
    t->pad_id = id_of(t, "<pad>");
    if (t->pad_id < 0) t->pad_id = 0;
    ug_finish(t);
    *out = t;
    return RB_OK;
}

rb_status rb_unigram_from_json_memory(const char *json, size_t len, rb_unigram **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "unigram: out is NULL");
    *out = NULL;
    if (!json) return rb_error_set(err, RB_E_INVALID, "unigram: NULL json");
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root) return BAD("line %d: %s", je.line, je.text);
    rb_status st = json_is_object(root) ? build(out, root, err) : BAD("not an object");
    json_decref(root);
    return st;
}

rb_status rb_unigram_load_json(const char *path, rb_unigram **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "unigram: out is NULL");
    *out = NULL;
    if (!path) return rb_error_set(err, RB_E_INVALID, "unigram: NULL path");
    char *data;
    size_t len;
    rb_status st = ug_read_file(path, &data, &len, err);
    if (st != RB_OK) return st;
    st = rb_unigram_from_json_memory(data, len, out, err);
    free(data);
    return st;
}

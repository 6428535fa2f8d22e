/* Loads a CLIP tokenizer from a diffusers/transformers tokenizer folder:
 * vocab.json (text -> id), merges.txt ("#version" header lines skipped, one
 * "left right" merge a line, rank = order) and tokenizer_config.json (special
 * token texts, model_max_length, added_tokens_decoder). */
#include "tokenizer/clip_internal.h"
#include "tokenizer/tok_utf8.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CLIP_FILE_MAX ((size_t)64 << 20)

static rb_status read_file(const char *path, char **buf, size_t *len, rb_error *err) {
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return rb_error_set(err, RB_E_IO, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap);
    rb_status st = p ? RB_OK : rb_error_set(err, RB_E_NOMEM, "out of memory reading %s", path);
    while (!st) {
        if (n == cap) {
            if (cap >= CLIP_FILE_MAX) {
                st = rb_error_set(err, RB_E_FORMAT, "%s is larger than %zu bytes", path, CLIP_FILE_MAX);
                break;
            }
            char *q = realloc(p, cap * 2);
            if (!q) {
                st = rb_error_set(err, RB_E_NOMEM, "out of memory reading %s", path);
                break;
            }
            p = q;
            cap *= 2;
        }
        size_t r = fread(p + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) st = rb_error_set(err, RB_E_IO, "read error on %s", path);
            break;
        }
    }
    fclose(f);
    if (st) {
        free(p);
        return st;
    }
    *buf = p;
    *len = n;
    return RB_OK;
}

static rb_status parse_vocab(const char *json, size_t len, rb_clip_tokenizer **out, rb_error *err) {
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) return rb_error_set(err, RB_E_FORMAT, "vocab.json: %s (line %d)", je.text, je.line);
    rb_status st = RB_OK;
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    if (!json_is_object(root) || json_object_size(root) == 0)
        st = rb_error_set(err, RB_E_FORMAT, "vocab.json: expected a non-empty object of token -> id");
    json_object_foreach(root, key, val) {
        if (st) break;
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= (1 << 24))
            st = rb_error_set(err, RB_E_FORMAT, "vocab.json: id of '%.64s' is not an integer in [0, 2^24)", key);
        else if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    rb_clip_tokenizer *t = NULL;
    if (!st) st = clip_new((int32_t)(max_id + 1), &t, err);
    json_object_foreach(root, key, val) {
        if (st) break;
        int32_t id = (int32_t)json_integer_value(val);
        size_t n = strlen(key);
        if (tok_vocab_text(&t->vocab, id, NULL))
            st = rb_error_set(err, RB_E_FORMAT, "vocab.json: id %d is used twice", (int)id);
        else if (tok_vocab_set(&t->vocab, id, key, n) != RB_OK) st = rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    json_decref(root);
    if (st) {
        rb_clip_tokenizer_free(t);
        return st;
    }
    *out = t;
    return RB_OK;
}

static rb_status parse_merges(rb_clip_tokenizer *t, const char *s, size_t len, rb_error *err) {
    if (!tok_utf8_validate(s, len, NULL)) return rb_error_set(err, RB_E_FORMAT, "merges.txt is not valid UTF-8");
    size_t line_no = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(s + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - (s + i)) : len - i;
        line_no++;
        if (!(n >= 8 && memcmp(s + i, "#version", 8) == 0)) {
            rb_status st = clip_add_merge(t, s + i, n, line_no, err);
            if (st) {
                rb_error_prefix(err, "merges.txt: ");
                return st;
            }
        }
        i += n + (nl ? 1 : 0);
    }
    if (t->vocab.n_merges == 0) return rb_error_set(err, RB_E_FORMAT, "merges.txt: no merges");
    return RB_OK;
}

/* A special token entry: a string or an AddedToken object {"content": ...}. */
static rb_status token_text(json_t *conf, const char *name, char **out, rb_error *err) {
    *out = NULL;
    json_t *v = json_object_get(conf, name);
    if (!v || json_is_null(v)) return RB_OK;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v) || json_string_length(v) == 0)
        return rb_error_set(err, RB_E_FORMAT, "tokenizer_config.json: %s is not a non-empty string", name);
    *out = strdup(json_string_value(v));
    return *out ? RB_OK : rb_error_set(err, RB_E_NOMEM, "out of memory");
}

static rb_status apply_config(rb_clip_tokenizer *t, const char *conf, size_t len, rb_error *err) {
    char *names[CLIP_SP_COUNT] = {0};
    rb_status st = RB_OK;
    json_t *root = NULL;
    if (conf) {
        json_error_t je;
        root = json_loadb(conf, len, 0, &je);
        if (!root || !json_is_object(root)) {
            if (root) json_decref(root);
            return rb_error_set(err, RB_E_FORMAT, "tokenizer_config.json: %s",
                                root ? "expected an object" : je.text);
        }
        static const char *const keys[CLIP_SP_COUNT] = {"bos_token", "eos_token", "unk_token", "pad_token"};
        for (int i = 0; i < CLIP_SP_COUNT && !st; i++) st = token_text(root, keys[i], &names[i], err);
        json_t *ml = json_object_get(root, "model_max_length");
        if (!st && ml && !(json_is_integer(ml) && json_integer_value(ml) == RB_CLIP_CONTEXT))
            st = rb_error_set(err, RB_E_UNSUPPORTED, "tokenizer_config.json: model_max_length is not %d",
                              RB_CLIP_CONTEXT);
        json_t *added = json_object_get(root, "added_tokens_decoder");
        if (!st && added && !json_is_object(added))
            st = rb_error_set(err, RB_E_FORMAT, "tokenizer_config.json: added_tokens_decoder is not an object");
        const char *key;
        json_t *val;
        json_object_foreach(added, key, val) {
            if (st) break;
            char *end = NULL;
            errno = 0;
            long id = strtol(key, &end, 10);
            json_t *c = json_object_get(val, "content");
            if (!*key || *end || errno || id < 0 || id > INT32_MAX || !json_is_string(c))
                st = rb_error_set(err, RB_E_FORMAT, "tokenizer_config.json: bad added_tokens_decoder entry '%.32s'", key);
            else
                st = clip_add_token(t, json_string_value(c), json_string_length(c), (int32_t)id, err);
        }
    }
    rb_clip_special_tokens sp = {names[CLIP_SP_BOS], names[CLIP_SP_EOS], names[CLIP_SP_UNK], names[CLIP_SP_PAD]};
    if (!st) st = clip_finish(t, &sp, err);
    for (int i = 0; i < CLIP_SP_COUNT; i++) free(names[i]);
    if (root) json_decref(root);
    return st;
}

rb_status rb_clip_tokenizer_from_hf_memory(const char *vocab_json, size_t vocab_len, const char *merges_txt,
                                           size_t merges_len, const char *config_json, size_t config_len,
                                           rb_clip_tokenizer **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "out is NULL");
    *out = NULL;
    if (!vocab_json || !merges_txt) return rb_error_set(err, RB_E_INVALID, "vocab or merges is NULL");
    rb_clip_tokenizer *t = NULL;
    rb_status st = parse_vocab(vocab_json, vocab_len, &t, err);
    if (!st) st = parse_merges(t, merges_txt, merges_len, err);
    if (!st) st = apply_config(t, config_json, config_len, err);
    if (st) {
        rb_clip_tokenizer_free(t);
        return st;
    }
    *out = t;
    return RB_OK;
}

rb_status rb_clip_tokenizer_load_dir(const char *dir, rb_clip_tokenizer **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "out is NULL");
    *out = NULL;
    if (!dir) return rb_error_set(err, RB_E_INVALID, "dir is NULL");
    static const char *const files[3] = {"vocab.json", "merges.txt", "tokenizer_config.json"};
    char *buf[3] = {0};
    size_t len[3] = {0};
    rb_status st = RB_OK;
    for (int i = 0; i < 3 && !st; i++) {
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, files[i]) >= sizeof path) {
            st = rb_error_set(err, RB_E_INVALID, "path too long: %s", dir);
            break;
        }
        if (i == 2 && access(path, F_OK) != 0) break; /* the config is optional */
        st = read_file(path, &buf[i], &len[i], err);
    }
    if (!st) st = rb_clip_tokenizer_from_hf_memory(buf[0], len[0], buf[1], len[1], buf[2], len[2], out, err);
    if (st) rb_error_prefix(err, "CLIP tokenizer %s: ", dir);
    for (int i = 0; i < 3; i++) free(buf[i]);
    return st;
}

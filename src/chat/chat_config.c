/* Loading a chat template from tokenizer_config.json: picks `chat_template`
 * (string, or named entry of a list of {name, template}) and records the
 * special tokens transformers hands to templates (its special_tokens_map:
 * strings or AddedToken {content} objects) as default variables. */
#include "chat/chat_template.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CONFIG_BYTES ((size_t)64 << 20)

static const char *const SPECIAL_TOKENS[] = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
};

/* A token given as "text" or {"content": "text", ...}; NULL otherwise. */
static const char *token_text(const json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) {
        const json_t *c = json_object_get(v, "content");
        if (json_is_string(c)) return json_string_value(c);
    }
    return NULL;
}

static rb_status pick_template(const json_t *root, const char *name, const char **src, size_t *len, rb_error *err) {
    const json_t *ct = json_object_get(root, "chat_template");
    if (!ct || json_is_null(ct)) return rb_error_set(err, RB_E_NOT_FOUND, "tokenizer_config.json has no chat_template");
    if (json_is_string(ct)) {
        if (name && strcmp(name, "default") != 0)
            return rb_error_set(err, RB_E_NOT_FOUND, "tokenizer_config.json has no chat template named '%s'", name);
        *src = json_string_value(ct);
        *len = json_string_length(ct);
        return RB_OK;
    }
    if (!json_is_array(ct))
        return rb_error_set(err, RB_E_FORMAT, "tokenizer_config.json: chat_template must be a string or a list");
    const char *want = name ? name : "default";
    size_t i;
    const json_t *e;
    json_array_foreach(ct, i, e) {
        const json_t *n = json_object_get(e, "name"), *tpl = json_object_get(e, "template");
        if (!json_is_object(e) || !json_is_string(n) || !json_is_string(tpl))
            return rb_error_set(err, RB_E_FORMAT, "tokenizer_config.json: chat_template entry %zu is not {name, template}", i);
        if (strcmp(json_string_value(n), want) == 0) {
            *src = json_string_value(tpl);
            *len = json_string_length(tpl);
            return RB_OK;
        }
    }
    return rb_error_set(err, RB_E_NOT_FOUND, "tokenizer_config.json has no chat template named '%s'", want);
}

rb_status rb_chat_template_from_tokenizer_config(const char *json, size_t len, const char *name,
                                                 rb_chat_template **out, rb_error *err) {
    if (!json || !out) return rb_error_set(err, RB_E_INVALID, "tokenizer_config: NULL argument");
    *out = NULL;
    if (len > MAX_CONFIG_BYTES) return rb_error_set(err, RB_E_RANGE, "tokenizer_config.json too large (%zu bytes)", len);
    json_error_t je;
    /* real configs hold integers beyond int64 (model_max_length = 1e30); none is read here */
    json_t *root = json_loadb(json, len, JSON_DECODE_INT_AS_REAL, &je);
    if (!root) return rb_error_set(err, RB_E_FORMAT, "tokenizer_config.json: bad JSON at line %d: %s", je.line, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return rb_error_set(err, RB_E_FORMAT, "tokenizer_config.json: top level is not an object");
    }
    const char *src = NULL;
    size_t slen = 0;
    rb_status st = pick_template(root, name, &src, &slen, err);
    rb_chat_template *t = NULL;
    if (st == RB_OK) st = rb_chat_template_parse(src, slen, &t, err);
    for (size_t i = 0; st == RB_OK && i < sizeof(SPECIAL_TOKENS) / sizeof(SPECIAL_TOKENS[0]); i++) {
        const char *tok = token_text(json_object_get(root, SPECIAL_TOKENS[i]));
        if (tok) st = rb_chat_template_set_str(t, SPECIAL_TOKENS[i], tok, err);
    }
    const json_t *extra = json_object_get(root, "additional_special_tokens");
    if (st == RB_OK && json_is_array(extra) && json_array_size(extra) > 0) {
        json_t *list = json_array();
        size_t i;
        const json_t *e;
        if (!list) st = rb_error_set(err, RB_E_NOMEM, "out of memory");
        json_array_foreach(extra, i, e) {
            const char *tok = token_text(e);
            if (st == RB_OK && tok && json_array_append_new(list, json_string(tok)) != 0)
                st = rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
        if (st == RB_OK && json_object_set_new((json_t *)t->defaults, "additional_special_tokens", list) != 0)
            st = rb_error_set(err, RB_E_NOMEM, "out of memory");
        else if (st != RB_OK)
            json_decref(list);
    }
    json_decref(root);
    if (st != RB_OK) {
        rb_chat_template_free(t);
        return st;
    }
    *out = t;
    return RB_OK;
}

rb_status rb_chat_template_load_tokenizer_config(const char *path, const char *name, rb_chat_template **out,
                                                 rb_error *err) {
    if (!path || !out) return rb_error_set(err, RB_E_INVALID, "tokenizer_config: NULL argument");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return rb_error_set(err, RB_E_IO, "cannot open %s", path);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    rb_status st = RB_OK;
    for (;;) {
        if (n == cap) {
            if (cap >= MAX_CONFIG_BYTES) {
                st = rb_error_set(err, RB_E_RANGE, "%s is larger than %zu bytes", path, MAX_CONFIG_BYTES);
                break;
            }
            size_t nc = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, nc);
            if (!nb) {
                st = rb_error_set(err, RB_E_NOMEM, "out of memory reading %s", path);
                break;
            }
            buf = nb;
            cap = nc;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) st = rb_error_set(err, RB_E_IO, "read error on %s", path);
            break;
        }
    }
    fclose(f);
    if (st == RB_OK) {
        st = rb_chat_template_from_tokenizer_config(buf, n, name, out, err);
        if (st != RB_OK) rb_error_prefix(err, "%s: ", path);
    }
    free(buf);
    return st;
}

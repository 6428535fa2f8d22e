/* JSON configuration files (config.json and friends) behind a small typed
 * accessor API over jansson (see include/rbee/json_config.h). Paths are
 * dotted ("rope_scaling.factor"); a key that itself contains dots is found
 * too, because each level first tries the longest matching key. */
#include "rbee/json_config.h"

#include "formats/mapped_file.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CONFIG_BYTES (64u << 20)
#define MAX_PATH_BYTES 1024

struct rb_json_config {
    json_t *root;
};

rb_status rb_json_config_parse(const char *data, size_t len, rb_json_config **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "json: out is NULL");
    *out = NULL;
    if (!data && len) return rb_error_set(err, RB_E_INVALID, "json: data is NULL");
    if (len > MAX_CONFIG_BYTES)
        return rb_error_set(err, RB_E_FORMAT, "json: document of %zu bytes exceeds the %u byte limit", len,
                            MAX_CONFIG_BYTES);
    json_error_t jerr;
    json_t *root = json_loadb(data ? data : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return rb_error_set(err, RB_E_FORMAT, "json: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
    if (!json_is_object(root)) {
        json_decref(root);
        return rb_error_set(err, RB_E_FORMAT, "json: top level is not an object");
    }
    rb_json_config *c = malloc(sizeof *c);
    if (!c) {
        json_decref(root);
        return rb_error_set(err, RB_E_NOMEM, "json: out of memory");
    }
    c->root = root;
    *out = c;
    return RB_OK;
}

rb_status rb_json_config_load(const char *path, rb_json_config **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "json: out is NULL");
    *out = NULL;
    rb_mapped_file map;
    rb_status st = rb_mapped_file_open(path, &map, err);
    if (st != RB_OK) return st;
    st = rb_json_config_parse(map.data, map.size, out, err);
    rb_mapped_file_close(&map);
    if (st != RB_OK) rb_error_prefix(err, "%s: ", path);
    return st;
}

void rb_json_config_free(rb_json_config *c) {
    if (!c) return;
    json_decref(c->root);
    free(c);
}

void *rb_json_config_root(const rb_json_config *c) { return c ? c->root : NULL; }

/* Resolves the dotted path buf[0..len) in obj. */
static json_t *lookup(json_t *obj, const char *buf, size_t len) {
    if (!json_is_object(obj)) return NULL;
    json_t *v = json_object_getn(obj, buf, len);
    if (v) return v;
    for (size_t i = len; i-- > 0;) { /* longest key prefix first */
        if (buf[i] != '.') continue;
        json_t *child = json_object_getn(obj, buf, i);
        if (!json_is_object(child)) continue;
        json_t *r = lookup(child, buf + i + 1, len - i - 1);
        if (r) return r;
    }
    return NULL;
}

/* The value at path: RB_E_NOT_FOUND if absent or null. */
static rb_status get(const rb_json_config *c, const char *path, json_t **out) {
    if (!c || !path) return RB_E_INVALID;
    size_t len = strlen(path);
    if (len >= MAX_PATH_BYTES) return RB_E_NOT_FOUND;
    json_t *v = lookup(c->root, path, len);
    if (!v || json_is_null(v)) return RB_E_NOT_FOUND;
    *out = v;
    return RB_OK;
}

static rb_status as_int(const json_t *v, int64_t *out) {
    if (!json_is_integer(v)) return RB_E_FORMAT;
    *out = (int64_t)json_integer_value(v);
    return RB_OK;
}

static rb_status as_num(const json_t *v, double *out) {
    if (!json_is_number(v)) return RB_E_FORMAT;
    *out = json_number_value(v);
    return RB_OK;
}

static rb_status as_str(const json_t *v, const char **out) {
    if (!json_is_string(v)) return RB_E_FORMAT;
    *out = json_string_value(v);
    return RB_OK;
}

rb_status rb_json_config_int(const rb_json_config *c, const char *path, int64_t *out) {
    json_t *v;
    rb_status st = get(c, path, &v);
    return st != RB_OK ? st : as_int(v, out);
}

rb_status rb_json_config_num(const rb_json_config *c, const char *path, double *out) {
    json_t *v;
    rb_status st = get(c, path, &v);
    return st != RB_OK ? st : as_num(v, out);
}

rb_status rb_json_config_bool(const rb_json_config *c, const char *path, bool *out) {
    json_t *v;
    rb_status st = get(c, path, &v);
    if (st != RB_OK) return st;
    if (!json_is_boolean(v)) return RB_E_FORMAT;
    *out = json_is_true(v);
    return RB_OK;
}

rb_status rb_json_config_str(const rb_json_config *c, const char *path, const char **out) {
    json_t *v;
    rb_status st = get(c, path, &v);
    return st != RB_OK ? st : as_str(v, out);
}

rb_status rb_json_config_arr_len(const rb_json_config *c, const char *path, size_t *out) {
    json_t *v;
    rb_status st = get(c, path, &v);
    if (st != RB_OK) return st;
    if (!json_is_array(v)) return RB_E_FORMAT;
    *out = json_array_size(v);
    return RB_OK;
}

/* Element i of the array at path: RB_E_RANGE past the end. */
static rb_status elem(const rb_json_config *c, const char *path, size_t i, json_t **out) {
    json_t *v;
    rb_status st = get(c, path, &v);
    if (st != RB_OK) return st;
    if (!json_is_array(v)) return RB_E_FORMAT;
    if (i >= json_array_size(v)) return RB_E_RANGE;
    *out = json_array_get(v, i);
    return RB_OK;
}

rb_status rb_json_config_arr_int(const rb_json_config *c, const char *path, size_t i, int64_t *out) {
    json_t *v;
    rb_status st = elem(c, path, i, &v);
    return st != RB_OK ? st : as_int(v, out);
}

rb_status rb_json_config_arr_num(const rb_json_config *c, const char *path, size_t i, double *out) {
    json_t *v;
    rb_status st = elem(c, path, i, &v);
    return st != RB_OK ? st : as_num(v, out);
}

rb_status rb_json_config_arr_str(const rb_json_config *c, const char *path, size_t i, const char **out) {
    json_t *v;
    rb_status st = elem(c, path, i, &v);
    return st != RB_OK ? st : as_str(v, out);
}

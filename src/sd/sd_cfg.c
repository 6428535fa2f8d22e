/* Typed model config.json reads for the Stable Diffusion network loaders
 * (see sd_cfg.h). */
#include "sd/sd_cfg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

rb_status sd_cfg_open(sd_cfg *j, const char *path, rb_error *err) {
    memset(j, 0, sizeof *j);
    j->path = path;
    j->err = err;
    rb_status s = rb_json_config_load(path, &j->cfg, err);
    if (s != RB_OK) return s;
    j->root = rb_json_config_root(j->cfg);
    return RB_OK;
}

void sd_cfg_close(sd_cfg *j) {
    rb_json_config_free(j->cfg);
    j->cfg = NULL;
    j->root = NULL;
}

static json_t *get(const sd_cfg *j, const char *key) {
    json_t *v = json_object_get(j->root, key);
    return json_is_null(v) ? NULL : v;
}

bool sd_cfg_has(const sd_cfg *j, const char *key) { return get(j, key) != NULL; }

static rb_status bad(const sd_cfg *j, const char *key, const char *what) {
    return rb_error_set(j->err, RB_E_FORMAT, "%s: field '%s' must be %s", j->path, key, what);
}

static bool as_int(const json_t *v, int64_t *out) {
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != floor(d) || fabs(d) > 9e15) return false;
        *out = (int64_t)d;
        return true;
    }
    return false;
}

rb_status sd_cfg_int(const sd_cfg *j, const char *key, int64_t def, int64_t *out) {
    json_t *v = get(j, key);
    if (!v) {
        *out = def;
        return RB_OK;
    }
    return as_int(v, out) ? RB_OK : bad(j, key, "an integer");
}

rb_status sd_cfg_num(const sd_cfg *j, const char *key, double def, double *out) {
    json_t *v = get(j, key);
    if (!v) {
        *out = def;
        return RB_OK;
    }
    if (!json_is_number(v)) return bad(j, key, "a number");
    *out = json_number_value(v);
    return isfinite(*out) ? RB_OK : bad(j, key, "a finite number");
}

rb_status sd_cfg_bool(const sd_cfg *j, const char *key, bool def, bool *out) {
    json_t *v = get(j, key);
    if (!v) {
        *out = def;
        return RB_OK;
    }
    if (!json_is_boolean(v)) return bad(j, key, "true or false");
    *out = json_is_true(v);
    return RB_OK;
}

rb_status sd_cfg_str(const sd_cfg *j, const char *key, const char **out) {
    json_t *v = get(j, key);
    *out = NULL;
    if (!v) return RB_OK;
    if (!json_is_string(v)) return bad(j, key, "a string");
    *out = json_string_value(v);
    return RB_OK;
}

rb_status sd_cfg_int_levels(const sd_cfg *j, const char *key, int n, int64_t *out) {
    json_t *v = get(j, key);
    if (!v) return rb_error_set(j->err, RB_E_FORMAT, "%s: field '%s' is missing", j->path, key);
    int64_t x;
    if (as_int(v, &x)) {
        for (int i = 0; i < n; i++) out[i] = x;
        return RB_OK;
    }
    if (!json_is_array(v)) return bad(j, key, "an integer or a list of integers");
    if ((int)json_array_size(v) != n)
        return rb_error_set(j->err, RB_E_FORMAT, "%s: field '%s' has %zu entries, expected %d (one per block)", j->path,
                            key, json_array_size(v), n);
    for (int i = 0; i < n; i++)
        if (!as_int(json_array_get(v, (size_t)i), &out[i]))
            return rb_error_set(j->err, RB_E_UNSUPPORTED, "%s: field '%s' entry %d is not an integer (nested lists "
                                "are not supported)", j->path, key, i);
    return RB_OK;
}

rb_status sd_cfg_int_list(const sd_cfg *j, const char *key, int max, int64_t *out, int *n) {
    json_t *v = get(j, key);
    if (!v) return rb_error_set(j->err, RB_E_FORMAT, "%s: field '%s' is missing", j->path, key);
    if (!json_is_array(v) || json_array_size(v) < 1) return bad(j, key, "a non-empty list of integers");
    if (json_array_size(v) > (size_t)max)
        return rb_error_set(j->err, RB_E_UNSUPPORTED, "%s: field '%s' has %zu entries (at most %d supported)", j->path,
                            key, json_array_size(v), max);
    *n = (int)json_array_size(v);
    for (int i = 0; i < *n; i++)
        if (!as_int(json_array_get(v, (size_t)i), &out[i])) return bad(j, key, "a list of integers");
    return RB_OK;
}

rb_status sd_cfg_str_list(const sd_cfg *j, const char *key, int n, const char **out) {
    json_t *v = get(j, key);
    if (!v) return rb_error_set(j->err, RB_E_FORMAT, "%s: field '%s' is missing", j->path, key);
    if (!json_is_array(v)) return bad(j, key, "a list of strings");
    if ((int)json_array_size(v) != n)
        return rb_error_set(j->err, RB_E_FORMAT, "%s: field '%s' has %zu entries, expected %d", j->path, key,
                            json_array_size(v), n);
    for (int i = 0; i < n; i++) {
        json_t *e = json_array_get(v, (size_t)i);
        if (!json_is_string(e)) return bad(j, key, "a list of strings");
        out[i] = json_string_value(e);
    }
    return RB_OK;
}

rb_status sd_cfg_unsupported(const sd_cfg *j, const char *key, const char *why) {
    json_t *v = get(j, key);
    char *txt = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    rb_status s = rb_error_set(j->err, RB_E_UNSUPPORTED, "%s: %s = %s is not supported (%s)", j->path, key,
                               txt ? txt : "null", why);
    free(txt);
    return s;
}

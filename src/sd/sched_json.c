/* Implementation of src/sd/sched_json.h: a one-pass rewrite of the non-finite
 * number tokens outside strings, then jansson. */
#include "sched_json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const NONFINITE[3] = {"-Infinity", "Infinity", "NaN"};

json_t *rb_sched_json_parse(const char *text, size_t len, rb_error *err) {
    if (!text) {
        rb_error_set(err, RB_E_INVALID, "JSON: NULL text");
        return NULL;
    }
    if (len > RB_SCHED_JSON_MAX_BYTES) {
        rb_error_set(err, RB_E_FORMAT, "JSON: %zu bytes is over the %u-byte limit", len, RB_SCHED_JSON_MAX_BYTES);
        return NULL;
    }
    /* each rewritten token (3 bytes or more) grows by its 2 quotes */
    char *buf = malloc(len + len / 3 * 2 + 3);
    if (!buf) {
        rb_error_set(err, RB_E_NOMEM, "JSON: out of memory");
        return NULL;
    }
    size_t o = 0;
    int in_str = 0;
    for (size_t i = 0; i < len;) {
        char ch = text[i];
        if (in_str) {
            buf[o++] = ch, i++;
            if (ch == '\\' && i < len) buf[o++] = text[i++];
            else if (ch == '"') in_str = 0;
            continue;
        }
        if (ch == '"') {
            in_str = 1;
            buf[o++] = ch, i++;
            continue;
        }
        int matched = 0;
        for (int k = 0; k < 3 && !matched; k++) {
            size_t kl = strlen(NONFINITE[k]);
            if (len - i >= kl && memcmp(text + i, NONFINITE[k], kl) == 0) {
                buf[o++] = '"';
                memcpy(buf + o, NONFINITE[k], kl);
                o += kl;
                buf[o++] = '"';
                i += kl;
                matched = 1;
            }
        }
        if (!matched) buf[o++] = ch, i++;
    }
    json_error_t je;
    json_t *root = json_loadb(buf, o, JSON_REJECT_DUPLICATES, &je);
    free(buf);
    if (!root) rb_error_set(err, RB_E_FORMAT, "JSON: %s (line %d)", je.text, je.line);
    return root;
}

json_t *rb_sched_json_load(const char *path, rb_error *err) {
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        rb_error_set(err, RB_E_IO, "cannot open %s: %s", path ? path : "(null)", strerror(errno));
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            if (ncap > (size_t)RB_SCHED_JSON_MAX_BYTES + 1) ncap = (size_t)RB_SCHED_JSON_MAX_BYTES + 1;
            if (ncap == cap) break; /* over the limit: parse reports it */
            char *t = realloc(text, ncap);
            if (!t) {
                free(text);
                fclose(f);
                rb_error_set(err, RB_E_NOMEM, "%s: out of memory", path);
                return NULL;
            }
            text = t, cap = ncap;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(text);
        rb_error_set(err, RB_E_IO, "read error on %s", path);
        return NULL;
    }
    json_t *root = rb_sched_json_parse(text ? text : "", len, err);
    free(text);
    if (!root) rb_error_prefix(err, "%s: ", path);
    return root;
}

bool rb_sched_json_number(const json_t *v, double *out) {
    if (json_is_integer(v)) {
        *out = (double)json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        *out = json_real_value(v);
        return true;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "-Infinity") == 0) *out = -INFINITY;
        else if (strcmp(s, "Infinity") == 0) *out = INFINITY;
        else if (strcmp(s, "NaN") == 0) *out = NAN;
        else return false;
        return true;
    }
    return false;
}

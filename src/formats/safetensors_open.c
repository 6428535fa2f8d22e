/* Opening safetensors by path: a single .safetensors file, a sharded
 * checkpoint's model.safetensors.index.json (every referenced shard mapped
 * once, every weight_map entry checked against its shard), or a folder
 * holding either. */
#include "formats/safetensors_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define MAX_INDEX_BYTES (64u << 20)

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* The directory part of path ("." if none), heap. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

static rb_status add_file(rb_st_set *s, const char *path, rb_error *err) {
    rb_mapped_file map;
    rb_status st = rb_mapped_file_open(path, &map, err);
    if (st != RB_OK) return st;
    return rb_st_add_image(s, map.data, map.size, &map, path, err);
}

/* A shard name must be a plain file name inside the index's folder. */
static bool safe_shard_name(const char *n) {
    return *n && !strchr(n, '/') && !strchr(n, '\\') && strcmp(n, ".") != 0 && strcmp(n, "..") != 0;
}

static rb_status open_index(rb_st_set *s, const char *path, rb_error *err) {
    rb_mapped_file map;
    rb_status st = rb_mapped_file_open(path, &map, err);
    if (st != RB_OK) return st;
    json_t *root = NULL;
    char *dir = NULL;
    rb_name_index shards = {0};
    if (map.size > MAX_INDEX_BYTES) {
        st = rb_error_set(err, RB_E_FORMAT, "%s: index larger than %u bytes", path, MAX_INDEX_BYTES);
        goto done;
    }
    json_error_t jerr;
    root = json_loadb(map.data, map.size, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        st = rb_error_set(err, RB_E_FORMAT, "%s: bad JSON: %s (line %d)", path, jerr.text, jerr.line);
        goto done;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        st = rb_error_set(err, RB_E_FORMAT, "%s: missing \"weight_map\" object", path);
        goto done;
    }
    dir = dir_of(path);
    if (!dir) {
        st = rb_error_set(err, RB_E_NOMEM, "safetensors: out of memory");
        goto done;
    }
    /* Open each distinct shard once, in order of first mention. */
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        if (!json_is_string(v) || !safe_shard_name(json_string_value(v))) {
            st = rb_error_set(err, RB_E_FORMAT, "%s: weight_map entry '%s' is not a plain file name", path, name);
            goto done;
        }
        const char *file = json_string_value(v);
        if (rb_name_index_find(&shards, file, strlen(file)) >= 0) continue;
        if (rb_name_index_insert(&shards, file, strlen(file), (int64_t)s->n_files, NULL) != RB_OK) {
            st = rb_error_set(err, RB_E_NOMEM, "safetensors: out of memory");
            goto done;
        }
        char *full = join(dir, file);
        if (!full) {
            st = rb_error_set(err, RB_E_NOMEM, "safetensors: out of memory");
            goto done;
        }
        st = add_file(s, full, err);
        free(full);
        if (st != RB_OK) {
            rb_error_prefix(err, "%s (shard of %s): ", file, path);
            goto done;
        }
    }
    /* Every mapped tensor must be in the shard the index names. */
    json_object_foreach(wm, name, v) {
        const char *file = json_string_value(v);
        int64_t fi = rb_name_index_find(&shards, file, strlen(file));
        int64_t ti = rb_name_index_find(&s->index, name, strlen(name));
        if (ti < 0 || (int64_t)s->tensor_file[ti] != fi) {
            st = rb_error_set(err, RB_E_FORMAT, "%s: weight_map puts tensor '%s' in '%s' but it is not there", path,
                              name, file);
            goto done;
        }
    }
done:
    rb_name_index_free(&shards);
    json_decref(root);
    free(dir);
    rb_mapped_file_close(&map);
    return st;
}

rb_status rb_st_open(const char *path, rb_st_set **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "safetensors: out is NULL");
    *out = NULL;
    if (!path) return rb_error_set(err, RB_E_INVALID, "safetensors: path is NULL");
    rb_st_set *s;
    rb_status st = rb_st_set_new(&s, err);
    if (st != RB_OK) return st;

    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char *single = join(path, SINGLE_NAME), *index = join(path, INDEX_NAME);
        if (!single || !index) {
            st = rb_error_set(err, RB_E_NOMEM, "safetensors: out of memory");
        } else if (stat(single, &sb) == 0) {
            st = add_file(s, single, err);
        } else if (stat(index, &sb) == 0) {
            st = open_index(s, index, err);
        } else {
            st = rb_error_set(err, RB_E_NOT_FOUND, "%s: folder has neither %s nor %s", path, SINGLE_NAME, INDEX_NAME);
        }
        free(single);
        free(index);
    } else if (ends_with(path, ".json")) {
        st = open_index(s, path, err);
    } else {
        st = add_file(s, path, err);
    }
    if (st != RB_OK) {
        rb_st_close(s);
        return st;
    }
    *out = s;
    return RB_OK;
}

/* Safetensors single-file parser: 8-byte little-endian header length, JSON
 * header (jansson, duplicate keys rejected), and validation of every tensor
 * entry (dtype, shape, byte count, offsets inside the data section, no
 * overlaps). Also the accessors of a set. */
#include "formats/safetensors_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct st_dtype_map {
    const char *name;
    rb_dtype dtype;
    size_t size;
} st_dtype_map;

static const st_dtype_map k_dtypes[] = {
    {"F64", RB_F64, 8}, {"F32", RB_F32, 4}, {"F16", RB_F16, 2}, {"BF16", RB_BF16, 2}, {"I64", RB_I64, 8},
    {"I32", RB_I32, 4}, {"I16", RB_I16, 2}, {"I8", RB_I8, 1},   {"U8", RB_I8, 1},     {"BOOL", RB_I8, 1},
};

static const st_dtype_map *find_dtype(const char *name) {
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (strcmp(k_dtypes[i].name, name) == 0) return &k_dtypes[i];
    return NULL;
}

rb_status rb_st_set_new(rb_st_set **out, rb_error *err) {
    *out = calloc(1, sizeof **out);
    return *out ? RB_OK : rb_error_set(err, RB_E_NOMEM, "safetensors: out of memory");
}

void rb_st_close(rb_st_set *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n_files; i++) {
        json_decref(s->files[i].header);
        rb_mapped_file_close(&s->files[i].map);
    }
    free(s->files);
    free(s->tensors);
    free(s->tensor_file);
    rb_name_index_free(&s->index);
    free(s);
}

int64_t rb_st_n_tensors(const rb_st_set *s) { return s ? s->n_tensors : 0; }

const rb_st_tensor *rb_st_tensor_at(const rb_st_set *s, int64_t i) {
    if (!s || i < 0 || i >= s->n_tensors) return NULL;
    return &s->tensors[i];
}

const rb_st_tensor *rb_st_find(const rb_st_set *s, const char *name) {
    if (!s || !name) return NULL;
    int64_t i = rb_name_index_find(&s->index, name, strlen(name));
    return i >= 0 ? &s->tensors[i] : NULL;
}

const char *rb_st_metadata(const rb_st_set *s, const char *key) {
    if (!s || !key) return NULL;
    for (size_t i = 0; i < s->n_files; i++) {
        json_t *v = json_object_get(json_object_get(s->files[i].header, "__metadata__"), key);
        if (json_is_string(v)) return json_string_value(v);
    }
    return NULL;
}

/* A non-negative JSON integer. */
static bool get_uint(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return false;
    json_int_t x = json_integer_value(v);
    if (x < 0) return false;
    *out = (uint64_t)x;
    return true;
}

typedef struct span {
    uint64_t begin, end;
    const char *name;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Fills t from one header entry; the byte range goes to sp. */
static rb_status parse_entry(const char *name, json_t *e, size_t data_size, rb_st_tensor *t, span *sp,
                             rb_error *err) {
    if (!json_is_object(e))
        return rb_error_set(err, RB_E_FORMAT, "safetensors: tensor '%s': entry is not an object", name);
    json_t *jdt = json_object_get(e, "dtype"), *jshape = json_object_get(e, "shape");
    json_t *joffs = json_object_get(e, "data_offsets");
    if (!json_is_string(jdt))
        return rb_error_set(err, RB_E_FORMAT, "safetensors: tensor '%s': missing or non-string \"dtype\"", name);
    if (!json_is_array(jshape))
        return rb_error_set(err, RB_E_FORMAT, "safetensors: tensor '%s': missing or non-array \"shape\"", name);
    if (!json_is_array(joffs) || json_array_size(joffs) != 2)
        return rb_error_set(err, RB_E_FORMAT, "safetensors: tensor '%s': \"data_offsets\" must be an array of 2",
                            name);
    const st_dtype_map *dm = find_dtype(json_string_value(jdt));
    if (!dm)
        return rb_error_set(err, RB_E_UNSUPPORTED, "safetensors: tensor '%s': dtype '%s' is not supported", name,
                            json_string_value(jdt));
    size_t nd = json_array_size(jshape);
    if (nd > RB_MAX_DIMS)
        return rb_error_set(err, RB_E_UNSUPPORTED, "safetensors: tensor '%s' has %zu dimensions (at most %d)", name,
                            nd, RB_MAX_DIMS);
    t->name = name;
    t->dtype = dm->dtype;
    t->n_dims = (int)nd;
    for (int d = 0; d < RB_MAX_DIMS; d++) t->ne[d] = 1;
    uint64_t nelem = 1;
    for (size_t d = 0; d < nd; d++) {
        uint64_t v = 0;
        if (!get_uint(json_array_get(jshape, d), &v) || v > (uint64_t)INT64_MAX)
            return rb_error_set(err, RB_E_FORMAT, "safetensors: tensor '%s': shape[%zu] is not a non-negative integer",
                                name, d);
        if (v != 0 && nelem > (uint64_t)INT64_MAX / v)
            return rb_error_set(err, RB_E_FORMAT, "safetensors: tensor '%s': element count overflows", name);
        nelem *= v;
        t->ne[nd - 1 - d] = (int64_t)v; /* ggml order: last dimension first */
    }
    uint64_t begin = 0, end = 0;
    if (!get_uint(json_array_get(joffs, 0), &begin) || !get_uint(json_array_get(joffs, 1), &end) || end < begin)
        return rb_error_set(err, RB_E_FORMAT,
                            "safetensors: tensor '%s': \"data_offsets\" must be non-negative integers begin <= end",
                            name);
    if (nelem > UINT64_MAX / dm->size || nelem * dm->size != end - begin)
        return rb_error_set(err, RB_E_FORMAT,
                            "safetensors: tensor '%s': shape needs %llu elements of %zu bytes but data_offsets span "
                            "%llu bytes", name, (unsigned long long)nelem, dm->size,
                            (unsigned long long)(end - begin));
    if (end > data_size)
        return rb_error_set(err, RB_E_FORMAT,
                            "safetensors: tensor '%s': data_offsets [%llu, %llu) outside the data section of %zu "
                            "bytes", name, (unsigned long long)begin, (unsigned long long)end, data_size);
    t->nbytes = (size_t)(end - begin);
    *sp = (span){begin, end, name};
    return RB_OK;
}

static rb_status check_metadata(json_t *md, rb_error *err) {
    if (!json_is_object(md)) return rb_error_set(err, RB_E_FORMAT, "safetensors: \"__metadata__\" is not an object");
    const char *k;
    json_t *v;
    json_object_foreach(md, k, v) {
        if (!json_is_string(v))
            return rb_error_set(err, RB_E_FORMAT, "safetensors: \"__metadata__\" value of '%s' is not a string", k);
    }
    return RB_OK;
}

static rb_status reserve_tensors(rb_st_set *s, size_t more, rb_error *err) {
    if ((size_t)s->n_tensors + more <= s->cap_tensors) return RB_OK;
    size_t cap = s->cap_tensors ? s->cap_tensors : 16;
    while (cap < (size_t)s->n_tensors + more) cap *= 2;
    rb_st_tensor *t = realloc(s->tensors, cap * sizeof *t);
    if (t) s->tensors = t;
    uint32_t *f = realloc(s->tensor_file, cap * sizeof *f);
    if (f) s->tensor_file = f;
    if (!t || !f) return rb_error_set(err, RB_E_NOMEM, "safetensors: out of memory for %zu tensors", cap);
    s->cap_tensors = cap;
    return RB_OK;
}

/* Validates the header of file fi and appends its tensors. */
static rb_status parse_header(rb_st_set *s, size_t fi, const uint8_t *base, size_t size, rb_error *err) {
    if (size < 8)
        return rb_error_set(err, RB_E_FORMAT, "safetensors: file of %zu bytes is too small for the header length",
                            size);
    uint64_t hlen = 0;
    memcpy(&hlen, base, 8);
    if (hlen > RB_ST_MAX_HEADER || hlen > size - 8)
        return rb_error_set(err, RB_E_FORMAT,
                            "safetensors: header length %llu exceeds the file size %zu or the 100 MB limit",
                            (unsigned long long)hlen, size);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return rb_error_set(err, RB_E_FORMAT, "safetensors: bad JSON header: %s (at byte %d)", jerr.text,
                                   jerr.position);
    s->files[fi].header = root;
    if (!json_is_object(root)) return rb_error_set(err, RB_E_FORMAT, "safetensors: JSON header is not an object");

    const uint8_t *data = base + 8 + hlen;
    size_t data_size = size - 8 - (size_t)hlen;
    size_t n = json_object_size(root);
    span *spans = malloc((n ? n : 1) * sizeof *spans);
    if (!spans) return rb_error_set(err, RB_E_NOMEM, "safetensors: out of memory");
    rb_status st = reserve_tensors(s, n, err);
    size_t ns = 0;
    const char *name;
    json_t *e;
    json_object_foreach(root, name, e) {
        if (st != RB_OK) break;
        if (strcmp(name, "__metadata__") == 0) {
            st = check_metadata(e, err);
            continue;
        }
        rb_st_tensor *t = &s->tensors[s->n_tensors];
        if ((st = parse_entry(name, e, data_size, t, &spans[ns], err)) != RB_OK) break;
        t->data = data + spans[ns].begin;
        ns++;
        int64_t prev = -1;
        st = rb_name_index_insert(&s->index, name, strlen(name), s->n_tensors, &prev);
        if (st == RB_E_INVALID) {
            st = rb_error_set(err, RB_E_FORMAT, "safetensors: tensor '%s' appears in more than one shard", name);
            break;
        }
        if (st != RB_OK) {
            st = rb_error_set(err, RB_E_NOMEM, "safetensors: out of memory");
            break;
        }
        s->tensor_file[s->n_tensors] = (uint32_t)fi;
        s->n_tensors++;
    }
    if (st == RB_OK && ns > 1) {
        qsort(spans, ns, sizeof *spans, cmp_span);
        uint64_t end = 0;
        const char *last = NULL;
        for (size_t i = 0; i < ns; i++) {
            if (spans[i].begin == spans[i].end) continue;
            if (last && spans[i].begin < end) {
                st = rb_error_set(err, RB_E_FORMAT, "safetensors: tensor '%s' overlaps tensor '%s'", spans[i].name,
                                  last);
                break;
            }
            end = spans[i].end;
            last = spans[i].name;
        }
    }
    free(spans);
    return st;
}

rb_status rb_st_add_image(rb_st_set *s, const void *data, size_t size, const rb_mapped_file *map, const char *label,
                          rb_error *err) {
    rb_mapped_file m = map ? *map : (rb_mapped_file){0};
    if (s->n_files == s->cap_files) {
        size_t cap = s->cap_files ? 2 * s->cap_files : 4;
        rb_st_file *f = realloc(s->files, cap * sizeof *f);
        if (!f) {
            rb_mapped_file_close(&m);
            return rb_error_set(err, RB_E_NOMEM, "safetensors: out of memory");
        }
        s->files = f;
        s->cap_files = cap;
    }
    size_t fi = s->n_files++;
    s->files[fi] = (rb_st_file){m, NULL};
    rb_status st = parse_header(s, fi, data, size, err);
    if (st != RB_OK && label) rb_error_prefix(err, "%s: ", label);
    return st;
}

rb_status rb_st_open_memory(const void *data, size_t size, rb_st_set **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "safetensors: out is NULL");
    *out = NULL;
    if (!data && size) return rb_error_set(err, RB_E_INVALID, "safetensors: data is NULL");
    rb_st_set *s;
    rb_status st = rb_st_set_new(&s, err);
    if (st != RB_OK) return st;
    if ((st = rb_st_add_image(s, data ? data : "", size, NULL, NULL, err)) != RB_OK) {
        rb_st_close(s);
        return st;
    }
    *out = s;
    return RB_OK;
}

/* GGUF v2/v3 parser and validator (see include/rbee/gguf.h). Every read goes
 * through a bounds-checked cursor; every count is checked against the bytes
 * that remain before anything is allocated for it, so a hostile header fails
 * fast. Tensor data stays in the mapping. */
#include "formats/gguf_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Smallest encodings, used to bound counts by the remaining bytes. */
#define MIN_KV_BYTES 14     /* key length (8) + non-empty key (1) + type (4) + smallest value (1) */
#define MIN_TENSOR_BYTES 33 /* name length (8) + name (1) + n_dims (4) + one ne (8) + type (4) + offset (8) */

typedef struct cursor {
    const uint8_t *p;
    size_t size;
    size_t pos;
    rb_error *err;
} cursor;

static size_t remaining(const cursor *c) { return c->size - c->pos; }

/* Adds context to the message of failure st and returns st. */
#define FAIL_CTX(err_, st_, ...) (rb_error_prefix((err_), __VA_ARGS__), (st_))

static rb_status truncated(cursor *c, const char *what) {
    return rb_error_set(c->err, RB_E_FORMAT, "gguf: file truncated at offset %zu while reading %s (file size %zu)",
                        c->pos, what, c->size);
}

static rb_status rd_bytes(cursor *c, void *dst, size_t n, const char *what) {
    if (remaining(c) < n) return truncated(c, what);
    memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return RB_OK;
}

static rb_status rd_u32(cursor *c, uint32_t *v, const char *what) { return rd_bytes(c, v, 4, what); }
static rb_status rd_u64(cursor *c, uint64_t *v, const char *what) { return rd_bytes(c, v, 8, what); }

/* A length-prefixed string; the bytes stay in the image. */
static rb_status rd_str(cursor *c, rb_gguf_str *s, const char *what) {
    uint64_t len = 0;
    rb_status st = rd_u64(c, &len, what);
    if (st != RB_OK) return st;
    if (len > remaining(c))
        return rb_error_set(c->err, RB_E_FORMAT,
                            "gguf: %s length %llu at offset %zu exceeds the %zu bytes left in the file", what,
                            (unsigned long long)len, c->pos - 8, remaining(c));
    s->ptr = (const char *)(c->p + c->pos);
    s->len = len;
    c->pos += (size_t)len;
    return RB_OK;
}

/* Printable, shortened copy of a name for error messages. */
static const char *printable(const rb_gguf_str *s, char *buf, size_t cap) {
    size_t n = s->len < cap - 4 ? (size_t)s->len : cap - 4;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s->ptr[i];
        buf[i] = isprint(ch) ? (char)ch : '?';
    }
    if (n < s->len) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

static bool has_nul(const rb_gguf_str *s) { return s->len > 0 && memchr(s->ptr, 0, (size_t)s->len) != NULL; }

static rb_status parse_header(cursor *c, rb_gguf *g, uint64_t *n_tensors, uint64_t *n_kv) {
    if (c->size < 4 || memcmp(c->p, RB_GGUF_MAGIC, 4) != 0) {
        if (c->size < 4) return rb_error_set(c->err, RB_E_FORMAT, "gguf: file of %zu bytes is too small", c->size);
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: bad magic %02x %02x %02x %02x (expected \"GGUF\")", c->p[0],
                            c->p[1], c->p[2], c->p[3]);
    }
    c->pos = 4;
    uint32_t version = 0;
    rb_status st = rd_u32(c, &version, "version");
    if (st != RB_OK) return st;
    if (version == 1)
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: version 1 files are not supported (only v2 and v3)");
    if ((version & 0xffffu) == 0 && (version == 0x02000000u || version == 0x03000000u))
        return rb_error_set(c->err, RB_E_FORMAT,
                            "gguf: big-endian GGUF file (version %u byte-swapped) is not supported", version >> 24);
    if (version != 2 && version != 3)
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: unsupported version %u (only v2 and v3)", version);
    g->version = version;
    if ((st = rd_u64(c, n_tensors, "tensor count")) != RB_OK) return st;
    if ((st = rd_u64(c, n_kv, "metadata kv count")) != RB_OK) return st;

    size_t left = remaining(c);
    if (*n_kv > left / MIN_KV_BYTES)
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: metadata kv count %llu is impossible in a file of %zu bytes",
                            (unsigned long long)*n_kv, c->size);
    if (*n_tensors > left / MIN_TENSOR_BYTES ||
        *n_kv * MIN_KV_BYTES + *n_tensors * MIN_TENSOR_BYTES > left)
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: tensor count %llu is impossible in a file of %zu bytes",
                            (unsigned long long)*n_tensors, c->size);
    return RB_OK;
}

static rb_status parse_value(cursor *c, rb_gguf_kv_entry *e, const char *key) {
    rb_gguf_kv *kv = &e->kv;
    uint32_t type = 0;
    rb_status st = rd_u32(c, &type, "kv value type");
    if (st != RB_OK) return st;
    if (type >= RB_GGUF_TYPE_COUNT_)
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: key '%s' has invalid value type %u", key, type);
    kv->type = (rb_gguf_type)type;

    if (kv->type == RB_GGUF_STRING) {
        if ((st = rd_str(c, &e->str, "string value")) != RB_OK) return FAIL_CTX(c->err, st, "key '%s': ", key);
        kv->data = &e->str;
        return RB_OK;
    }
    if (kv->type != RB_GGUF_ARRAY) {
        size_t sz = rb_gguf_type_size(kv->type);
        if (remaining(c) < sz) {
            st = truncated(c, "kv value");
            return FAIL_CTX(c->err, st, "key '%s': ", key);
        }
        kv->data = c->p + c->pos;
        c->pos += sz;
        return RB_OK;
    }

    uint32_t et = 0;
    uint64_t n = 0;
    if ((st = rd_u32(c, &et, "array element type")) != RB_OK) return FAIL_CTX(c->err, st, "key '%s': ", key);
    if (et >= RB_GGUF_TYPE_COUNT_)
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: key '%s': array has invalid element type %u", key, et);
    if (et == RB_GGUF_ARRAY)
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: key '%s': arrays of arrays are not supported", key);
    if ((st = rd_u64(c, &n, "array length")) != RB_OK) return FAIL_CTX(c->err, st, "key '%s': ", key);
    kv->arr_type = (rb_gguf_type)et;
    size_t esz = et == RB_GGUF_STRING ? 8 : rb_gguf_type_size(kv->arr_type); /* strings: >= 8 bytes each */
    if (n > remaining(c) / esz)
        return rb_error_set(c->err, RB_E_FORMAT,
                            "gguf: key '%s': array length %llu of %s exceeds the %zu bytes left in the file", key,
                            (unsigned long long)n, rb_gguf_type_name(kv->arr_type), remaining(c));
    kv->arr_len = n;
    if (et != RB_GGUF_STRING) {
        kv->data = c->p + c->pos;
        c->pos += (size_t)n * esz;
        return RB_OK;
    }
    e->strs = malloc((n ? (size_t)n : 1) * sizeof *e->strs);
    if (!e->strs) return rb_error_set(c->err, RB_E_NOMEM, "gguf: key '%s': out of memory for %llu strings", key,
                                      (unsigned long long)n);
    kv->data = e->strs;
    for (uint64_t i = 0; i < n; i++) {
        if ((st = rd_str(c, &e->strs[i], "array string")) != RB_OK)
            return FAIL_CTX(c->err, st, "key '%s' element %llu: ", key, (unsigned long long)i);
    }
    return RB_OK;
}

static rb_status parse_kvs(cursor *c, rb_gguf *g, uint64_t n_kv) {
    g->kvs = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kvs);
    if (!g->kvs) return rb_error_set(c->err, RB_E_NOMEM, "gguf: out of memory for %llu kvs", (unsigned long long)n_kv);
    if (rb_name_index_reserve(&g->kv_index, (size_t)n_kv) != RB_OK)
        return rb_error_set(c->err, RB_E_NOMEM, "gguf: out of memory indexing kvs");
    char name[96];
    for (uint64_t i = 0; i < n_kv; i++) {
        rb_gguf_kv_entry *e = &g->kvs[i];
        g->n_kv = (int64_t)i + 1; /* entries so far are freed by rb_gguf_close */
        rb_status st = rd_str(c, &e->kv.key, "kv key");
        if (st != RB_OK) return FAIL_CTX(c->err, st, "kv #%llu: ", (unsigned long long)i);
        if (e->kv.key.len == 0 || has_nul(&e->kv.key))
            return rb_error_set(c->err, RB_E_FORMAT, "gguf: kv #%llu has an empty key or a key with NUL bytes",
                                (unsigned long long)i);
        printable(&e->kv.key, name, sizeof name);
        if ((st = parse_value(c, e, name)) != RB_OK) return st;
        st = rb_name_index_insert(&g->kv_index, e->kv.key.ptr, (size_t)e->kv.key.len, (int64_t)i, NULL);
        if (st == RB_E_INVALID) return rb_error_set(c->err, RB_E_FORMAT, "gguf: duplicate key '%s'", name);
        if (st != RB_OK) return rb_error_set(c->err, st, "gguf: out of memory indexing kvs");
    }
    return RB_OK;
}

static rb_status read_alignment(cursor *c, rb_gguf *g) {
    g->alignment = RB_GGUF_DEFAULT_ALIGNMENT;
    const rb_gguf_kv *kv = rb_gguf_find_kv(g, RB_GGUF_ALIGNMENT_KEY);
    if (!kv) return RB_OK;
    if (kv->type != RB_GGUF_UINT32)
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: %s must be uint32, not %s", RB_GGUF_ALIGNMENT_KEY,
                            rb_gguf_type_name(kv->type));
    uint32_t a = 0;
    memcpy(&a, kv->data, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: %s = %u is not a non-zero power of two",
                            RB_GGUF_ALIGNMENT_KEY, a);
    g->alignment = a;
    return RB_OK;
}

static rb_status parse_tensor_info(cursor *c, rb_gguf *g, uint64_t i) {
    rb_gguf_tensor_info *t = &g->tensors[i];
    char name[96];
    rb_status st = rd_str(c, &t->name, "tensor name");
    if (st != RB_OK) return FAIL_CTX(c->err, st, "tensor #%llu: ", (unsigned long long)i);
    printable(&t->name, name, sizeof name);
    if (t->name.len == 0 || has_nul(&t->name))
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: tensor #%llu has an empty name or a name with NUL bytes",
                            (unsigned long long)i);
    uint32_t n_dims = 0;
    if ((st = rd_u32(c, &n_dims, "tensor n_dims")) != RB_OK) return FAIL_CTX(c->err, st, "tensor '%s': ", name);
    if (n_dims < 1 || n_dims > RB_MAX_DIMS)
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: tensor '%s' has n_dims %u (must be 1..%d)", name, n_dims,
                            RB_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < RB_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne = 0;
        if ((st = rd_u64(c, &ne, "tensor dimension")) != RB_OK) return FAIL_CTX(c->err, st, "tensor '%s': ", name);
        if (ne > (uint64_t)INT64_MAX)
            return rb_error_set(c->err, RB_E_FORMAT, "gguf: tensor '%s' dimension %u is negative (%lld)", name, d,
                                (long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    uint32_t type = 0;
    if ((st = rd_u32(c, &type, "tensor type")) != RB_OK) return FAIL_CTX(c->err, st, "tensor '%s': ", name);
    if (type >= (uint32_t)RB_DTYPE_END_ || !rb_dtype_info((int)type))
        return rb_error_set(c->err, RB_E_FORMAT, "gguf: tensor '%s' has unknown type id %u", name, type);
    t->dtype = (rb_dtype)type;
    if ((st = rd_u64(c, &t->offset, "tensor offset")) != RB_OK) return FAIL_CTX(c->err, st, "tensor '%s': ", name);

    st = rb_name_index_insert(&g->tensor_index, t->name.ptr, (size_t)t->name.len, (int64_t)i, NULL);
    if (st == RB_E_INVALID) return rb_error_set(c->err, RB_E_FORMAT, "gguf: duplicate tensor name '%s'", name);
    if (st != RB_OK) return rb_error_set(c->err, st, "gguf: out of memory indexing tensors");
    return RB_OK;
}

/* Shape, size, alignment and bounds of one tensor (data section known). */
static rb_status check_tensor(rb_gguf *g, rb_gguf_tensor_info *t, rb_error *err) {
    char name[96];
    printable(&t->name, name, sizeof name);
    const rb_dtype_traits *tr = rb_dtype_info((int)t->dtype);
    uint64_t nelem = 1;
    for (int d = 0; d < RB_MAX_DIMS; d++) {
        uint64_t ne = (uint64_t)t->ne[d];
        if (ne != 0 && nelem > (uint64_t)INT64_MAX / ne)
            return rb_error_set(err, RB_E_FORMAT, "gguf: tensor '%s': element count overflows", name);
        nelem *= ne;
    }
    if (t->ne[0] % tr->block_size != 0)
        return rb_error_set(err, RB_E_FORMAT,
                            "gguf: tensor '%s': ne[0] = %lld is not a multiple of the %s block size %lld", name,
                            (long long)t->ne[0], tr->name, (long long)tr->block_size);
    uint64_t rows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3]; /* <= nelem when ne[0] > 0 */
    uint64_t blocks = (uint64_t)(t->ne[0] / tr->block_size);
    if (blocks > UINT64_MAX / tr->type_size)
        return rb_error_set(err, RB_E_FORMAT, "gguf: tensor '%s': byte size overflows", name);
    uint64_t row_bytes = blocks * tr->type_size;
    uint64_t nbytes = 0;
    if (row_bytes != 0 && rows != 0) {
        if (rows > UINT64_MAX / row_bytes || row_bytes * rows > (uint64_t)SIZE_MAX)
            return rb_error_set(err, RB_E_FORMAT, "gguf: tensor '%s': byte size overflows", name);
        nbytes = row_bytes * rows;
    }
    t->nbytes = (size_t)nbytes;
    if (t->offset % g->alignment != 0)
        return rb_error_set(err, RB_E_FORMAT, "gguf: tensor '%s': offset %llu is not a multiple of the alignment %zu",
                            name, (unsigned long long)t->offset, g->alignment);
    if (t->offset > g->data_size || nbytes > g->data_size - t->offset)
        return rb_error_set(err, RB_E_FORMAT,
                            "gguf: tensor '%s': data [%llu, +%llu) lies outside the data section of %zu bytes", name,
                            (unsigned long long)t->offset, (unsigned long long)nbytes, g->data_size);
    t->data = g->base + g->data_offset + t->offset;
    return RB_OK;
}

static int cmp_by_offset(const void *a, const void *b) {
    const rb_gguf_tensor_info *x = *(const rb_gguf_tensor_info *const *)a;
    const rb_gguf_tensor_info *y = *(const rb_gguf_tensor_info *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

static rb_status check_overlaps(rb_gguf *g, rb_error *err) {
    if (g->n_tensors < 2) return RB_OK;
    const rb_gguf_tensor_info **order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order) return rb_error_set(err, RB_E_NOMEM, "gguf: out of memory checking tensor overlaps");
    for (int64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_by_offset);
    const rb_gguf_tensor_info *prev = NULL;
    uint64_t end = 0;
    rb_status st = RB_OK;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const rb_gguf_tensor_info *t = order[i];
        if (t->nbytes == 0) continue;
        if (prev && t->offset < end) {
            char a[96], b[96];
            st = rb_error_set(err, RB_E_FORMAT, "gguf: tensor '%s' overlaps tensor '%s' at data offset %llu",
                              printable(&t->name, a, sizeof a), printable(&prev->name, b, sizeof b),
                              (unsigned long long)t->offset);
            break;
        }
        prev = t;
        end = t->offset + t->nbytes;
    }
    free(order);
    return st;
}

static rb_status parse(rb_gguf *g, rb_error *err) {
    cursor c = {g->base, g->size, 0, err};
    uint64_t n_tensors = 0, n_kv = 0;
    rb_status st = parse_header(&c, g, &n_tensors, &n_kv);
    if (st != RB_OK) return st;
    if ((st = parse_kvs(&c, g, n_kv)) != RB_OK) return st;
    if ((st = read_alignment(&c, g)) != RB_OK) return st;

    if (n_tensors > remaining(&c) / MIN_TENSOR_BYTES)
        return rb_error_set(err, RB_E_FORMAT, "gguf: tensor count %llu exceeds the %zu bytes left after the metadata",
                            (unsigned long long)n_tensors, remaining(&c));
    g->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    if (!g->tensors) return rb_error_set(err, RB_E_NOMEM, "gguf: out of memory for %llu tensors",
                                         (unsigned long long)n_tensors);
    if (rb_name_index_reserve(&g->tensor_index, (size_t)n_tensors) != RB_OK)
        return rb_error_set(err, RB_E_NOMEM, "gguf: out of memory indexing tensors");
    for (uint64_t i = 0; i < n_tensors; i++) {
        if ((st = parse_tensor_info(&c, g, i)) != RB_OK) return st;
        g->n_tensors = (int64_t)i + 1;
    }
    g->n_tensors = (int64_t)n_tensors;

    /* Data section: the end of the header rounded up to the alignment. */
    size_t a = g->alignment;
    size_t start = c.pos;
    if (start % a != 0) {
        size_t pad = a - start % a;
        if (pad > g->size - start) {
            if (n_tensors > 0)
                return rb_error_set(err, RB_E_FORMAT,
                                    "gguf: file truncated: data section would start at offset %llu beyond the file "
                                    "size %zu", (unsigned long long)start + pad, g->size);
            pad = g->size - start; /* metadata-only file without trailing padding */
        }
        start += pad;
    }
    g->data_offset = start;
    g->data_size = g->size - start;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if ((st = check_tensor(g, &g->tensors[i], err)) != RB_OK) return st;
    return check_overlaps(g, err);
}

static rb_status open_image(const void *data, size_t size, const rb_mapped_file *map, rb_gguf **out, rb_error *err) {
    rb_gguf *g = calloc(1, sizeof *g);
    if (!g) return rb_error_set(err, RB_E_NOMEM, "gguf: out of memory");
    if (map) g->map = *map;
    g->base = data;
    g->size = size;
    rb_status st = parse(g, err);
    if (st != RB_OK) {
        if (map) g->map = (rb_mapped_file){0}; /* the caller unmaps */
        rb_gguf_close(g);
        return st;
    }
    *out = g;
    return RB_OK;
}

rb_status rb_gguf_open_memory(const void *data, size_t size, rb_gguf **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "gguf: out is NULL");
    *out = NULL;
    if (!data && size) return rb_error_set(err, RB_E_INVALID, "gguf: data is NULL");
    if (!data) data = "";
    return open_image(data, size, NULL, out, err);
}

rb_status rb_gguf_open(const char *path, rb_gguf **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "gguf: out is NULL");
    *out = NULL;
    rb_mapped_file map;
    rb_status st = rb_mapped_file_open(path, &map, err);
    if (st != RB_OK) return st;
    st = open_image(map.data, map.size, &map, out, err);
    if (st != RB_OK) {
        rb_mapped_file_close(&map);
        return FAIL_CTX(err, st, "%s: ", path);
    }
    return RB_OK;
}

void rb_gguf_close(rb_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) free(g->kvs[i].strs);
    free(g->kvs);
    free(g->tensors);
    rb_name_index_free(&g->kv_index);
    rb_name_index_free(&g->tensor_index);
    rb_mapped_file_close(&g->map);
    free(g);
}

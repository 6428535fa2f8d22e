/* Accessors of an open GGUF file: properties, kv and tensor lookup, typed
 * getters with lossless-conversion checks, and array element access. Values
 * in the image may be unaligned, so every read goes through memcpy. */
#include "formats/gguf_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t rb_gguf_type_size(rb_gguf_type t) {
    switch (t) {
    case RB_GGUF_UINT8: case RB_GGUF_INT8: case RB_GGUF_BOOL: return 1;
    case RB_GGUF_UINT16: case RB_GGUF_INT16: return 2;
    case RB_GGUF_UINT32: case RB_GGUF_INT32: case RB_GGUF_FLOAT32: return 4;
    case RB_GGUF_UINT64: case RB_GGUF_INT64: case RB_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

const char *rb_gguf_type_name(rb_gguf_type t) {
    static const char *const names[RB_GGUF_TYPE_COUNT_] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)t < RB_GGUF_TYPE_COUNT_ ? names[t] : "?";
}

uint32_t rb_gguf_version(const rb_gguf *g) { return g ? g->version : 0; }
size_t rb_gguf_alignment(const rb_gguf *g) { return g ? g->alignment : 0; }
const void *rb_gguf_base(const rb_gguf *g) { return g ? g->base : NULL; }
size_t rb_gguf_file_size(const rb_gguf *g) { return g ? g->size : 0; }
size_t rb_gguf_data_offset(const rb_gguf *g) { return g ? g->data_offset : 0; }
int64_t rb_gguf_n_kv(const rb_gguf *g) { return g ? g->n_kv : 0; }
int64_t rb_gguf_n_tensors(const rb_gguf *g) { return g ? g->n_tensors : 0; }

const rb_gguf_kv *rb_gguf_kv_at(const rb_gguf *g, int64_t i) {
    if (!g || i < 0 || i >= g->n_kv) return NULL;
    return &g->kvs[i].kv;
}

const rb_gguf_kv *rb_gguf_find_kv(const rb_gguf *g, const char *key) {
    if (!g || !key) return NULL;
    int64_t i = rb_name_index_find(&g->kv_index, key, strlen(key));
    return i >= 0 ? &g->kvs[i].kv : NULL;
}

const rb_gguf_tensor_info *rb_gguf_tensor_at(const rb_gguf *g, int64_t i) {
    if (!g || i < 0 || i >= g->n_tensors) return NULL;
    return &g->tensors[i];
}

const rb_gguf_tensor_info *rb_gguf_find_tensor(const rb_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    int64_t i = rb_name_index_find(&g->tensor_index, name, strlen(name));
    return i >= 0 ? &g->tensors[i] : NULL;
}

/* An integer stored as type t at p: *is_neg / *mag (magnitude) form, so both
 * signed and unsigned 64-bit ranges are exact. Returns false if t is not an
 * integer type. */
static bool read_int(rb_gguf_type t, const void *p, bool *is_neg, uint64_t *mag) {
    int64_t s = 0;
    uint64_t u = 0;
    bool is_signed = true;
    switch (t) {
    case RB_GGUF_UINT8: { uint8_t v; memcpy(&v, p, 1); u = v; is_signed = false; break; }
    case RB_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); u = v; is_signed = false; break; }
    case RB_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); u = v; is_signed = false; break; }
    case RB_GGUF_UINT64: { memcpy(&u, p, 8); is_signed = false; break; }
    case RB_GGUF_INT8: { int8_t v; memcpy(&v, p, 1); s = v; break; }
    case RB_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); s = v; break; }
    case RB_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); s = v; break; }
    case RB_GGUF_INT64: { memcpy(&s, p, 8); break; }
    default: return false;
    }
    if (is_signed) {
        *is_neg = s < 0;
        *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    } else {
        *is_neg = false;
        *mag = u;
    }
    return true;
}

/* Any numeric (integer, float or bool) value at p as a double. */
static bool read_num(rb_gguf_type t, const void *p, double *out) {
    bool neg = false;
    uint64_t mag = 0;
    if (read_int(t, p, &neg, &mag)) {
        *out = neg ? -(double)mag : (double)mag;
        return true;
    }
    switch (t) {
    case RB_GGUF_FLOAT32: { float v; memcpy(&v, p, 4); *out = v; return true; }
    case RB_GGUF_FLOAT64: { memcpy(out, p, 8); return true; }
    case RB_GGUF_BOOL: { uint8_t v; memcpy(&v, p, 1); *out = v != 0; return true; }
    default: return false;
    }
}

static rb_status find_scalar(const rb_gguf *g, const char *key, const rb_gguf_kv **kv) {
    *kv = rb_gguf_find_kv(g, key);
    return *kv ? RB_OK : RB_E_NOT_FOUND;
}

rb_status rb_gguf_get_u64(const rb_gguf *g, const char *key, uint64_t *out) {
    const rb_gguf_kv *kv;
    if (find_scalar(g, key, &kv) != RB_OK) return RB_E_NOT_FOUND;
    bool neg = false;
    uint64_t mag = 0;
    if (!read_int(kv->type, kv->data, &neg, &mag) || neg) return RB_E_FORMAT;
    *out = mag;
    return RB_OK;
}

rb_status rb_gguf_get_i64(const rb_gguf *g, const char *key, int64_t *out) {
    const rb_gguf_kv *kv;
    if (find_scalar(g, key, &kv) != RB_OK) return RB_E_NOT_FOUND;
    bool neg = false;
    uint64_t mag = 0;
    if (!read_int(kv->type, kv->data, &neg, &mag)) return RB_E_FORMAT;
    if (neg) {
        if (mag > (uint64_t)INT64_MAX + 1) return RB_E_FORMAT;
        *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    } else {
        if (mag > (uint64_t)INT64_MAX) return RB_E_FORMAT;
        *out = (int64_t)mag;
    }
    return RB_OK;
}

rb_status rb_gguf_get_u32(const rb_gguf *g, const char *key, uint32_t *out) {
    uint64_t v = 0;
    rb_status st = rb_gguf_get_u64(g, key, &v);
    if (st != RB_OK) return st;
    if (v > UINT32_MAX) return RB_E_FORMAT;
    *out = (uint32_t)v;
    return RB_OK;
}

/* Floats, and integers whose magnitude is exactly representable (<= 2^53). */
rb_status rb_gguf_get_f64(const rb_gguf *g, const char *key, double *out) {
    const rb_gguf_kv *kv;
    if (find_scalar(g, key, &kv) != RB_OK) return RB_E_NOT_FOUND;
    bool neg = false;
    uint64_t mag = 0;
    if (read_int(kv->type, kv->data, &neg, &mag)) {
        if (mag > (1ull << 53)) return RB_E_FORMAT;
        *out = neg ? -(double)mag : (double)mag;
        return RB_OK;
    }
    if (kv->type != RB_GGUF_FLOAT32 && kv->type != RB_GGUF_FLOAT64) return RB_E_FORMAT;
    return read_num(kv->type, kv->data, out) ? RB_OK : RB_E_FORMAT;
}

/* f32 exactly; f64 rounded to the nearest float when within float range
 * (config values such as 1e-5 are commonly stored as f64); integers only
 * when exactly representable (<= 2^24). */
rb_status rb_gguf_get_f32(const rb_gguf *g, const char *key, float *out) {
    const rb_gguf_kv *kv;
    if (find_scalar(g, key, &kv) != RB_OK) return RB_E_NOT_FOUND;
    if (kv->type == RB_GGUF_FLOAT32) {
        memcpy(out, kv->data, 4);
        return RB_OK;
    }
    double v = 0;
    rb_status st = rb_gguf_get_f64(g, key, &v);
    if (st != RB_OK) return st;
    if (kv->type != RB_GGUF_FLOAT64 && fabs(v) > 16777216.0) return RB_E_FORMAT;
    if (isfinite(v) && fabs(v) > 3.4028234663852886e38) return RB_E_FORMAT;
    *out = (float)v;
    return RB_OK;
}

rb_status rb_gguf_get_bool(const rb_gguf *g, const char *key, bool *out) {
    const rb_gguf_kv *kv;
    if (find_scalar(g, key, &kv) != RB_OK) return RB_E_NOT_FOUND;
    if (kv->type != RB_GGUF_BOOL) return RB_E_FORMAT;
    uint8_t v = 0;
    memcpy(&v, kv->data, 1);
    *out = v != 0;
    return RB_OK;
}

rb_status rb_gguf_get_str(const rb_gguf *g, const char *key, char **out) {
    const rb_gguf_kv *kv;
    if (find_scalar(g, key, &kv) != RB_OK) return RB_E_NOT_FOUND;
    if (kv->type != RB_GGUF_STRING) return RB_E_FORMAT;
    const rb_gguf_str *s = kv->data;
    if (s->len >= SIZE_MAX) return RB_E_NOMEM;
    char *p = malloc((size_t)s->len + 1);
    if (!p) return RB_E_NOMEM;
    if (s->len) memcpy(p, s->ptr, (size_t)s->len);
    p[s->len] = '\0';
    *out = p;
    return RB_OK;
}

static const void *arr_elem(const rb_gguf_kv *kv, uint64_t i) {
    if (!kv || kv->type != RB_GGUF_ARRAY || i >= kv->arr_len) return NULL;
    size_t sz = rb_gguf_type_size(kv->arr_type);
    if (sz == 0) return NULL;
    return (const uint8_t *)kv->data + (size_t)i * sz;
}

rb_gguf_str rb_gguf_arr_str(const rb_gguf_kv *kv, uint64_t i) {
    rb_gguf_str none = {NULL, 0};
    if (!kv || kv->type != RB_GGUF_ARRAY || kv->arr_type != RB_GGUF_STRING || i >= kv->arr_len) return none;
    return ((const rb_gguf_str *)kv->data)[i];
}

/* 0 when i is out of range, the element is not an integer/bool, or a uint64
 * element exceeds INT64_MAX. */
int64_t rb_gguf_arr_int(const rb_gguf_kv *kv, uint64_t i) {
    const void *p = arr_elem(kv, i);
    if (!p) return 0;
    if (kv->arr_type == RB_GGUF_BOOL) return *(const uint8_t *)p != 0;
    bool neg = false;
    uint64_t mag = 0;
    if (!read_int(kv->arr_type, p, &neg, &mag)) return 0;
    if (!neg) return mag > (uint64_t)INT64_MAX ? 0 : (int64_t)mag;
    return mag > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)mag;
}

/* NaN when i is out of range or the elements are not numeric. */
double rb_gguf_arr_float(const rb_gguf_kv *kv, uint64_t i) {
    const void *p = arr_elem(kv, i);
    double v = 0;
    if (!p || !read_num(kv->arr_type, p, &v)) return NAN;
    return v;
}

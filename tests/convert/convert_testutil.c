/* Implementation of convert_testutil.h. */
#include "convert_testutil.h"

#include "rbee/model.h"
#include "rbee/quant.h"
#include "rbee/safetensors.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ct_tmpdir(char *buf, size_t len) {
    const char *base = getenv("TMPDIR");
    snprintf(buf, len, "%s/rbee-convert-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(buf)) fail_msg("mkdtemp %s failed", buf);
}

void ct_rmtree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            remove(path);
        }
    closedir(d);
    rmdir(dir);
}

void ct_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot create %s", path);
    size_t n = strlen(text);
    if (fwrite(text, 1, n, f) != n || fclose(f) != 0) fail_msg("cannot write %s", path);
}

void ct_write_safetensors(const char *path, const ct_st_entry *e, size_t n) {
    size_t total = 0, jcap = 256 + n * 256;
    for (size_t i = 0; i < n; i++) total += e[i].nbytes;
    char *json = malloc(jcap);
    uint8_t *data = malloc(total ? total : 1);
    assert_non_null(json);
    assert_non_null(data);
    size_t jl = (size_t)snprintf(json, jcap, "{");
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        char shape[96];
        if (e[i].n_dims == 1) snprintf(shape, sizeof shape, "[%lld]", (long long)e[i].shape[0]);
        else if (e[i].n_dims == 2)
            snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)e[i].shape[0], (long long)e[i].shape[1]);
        else
            snprintf(shape, sizeof shape, "[%lld,%lld,%lld]", (long long)e[i].shape[0], (long long)e[i].shape[1],
                     (long long)e[i].shape[2]);
        jl += (size_t)snprintf(json + jl, jcap - jl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                               i ? "," : "", e[i].name, e[i].dtype, shape, off, off + e[i].nbytes);
        assert_true(jl < jcap);
        memcpy(data + off, e[i].data, e[i].nbytes);
        off += e[i].nbytes;
    }
    jl += (size_t)snprintf(json + jl, jcap - jl, "}");
    assert_true(jl < jcap);
    /* 8-byte little-endian header length, header padded with spaces, data */
    size_t padded = (jl + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot create %s", path);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(json, 1, jl, f);
    for (size_t i = jl; i < padded; i++) fputc(' ', f);
    if ((total && fwrite(data, 1, total, f) != total) || fclose(f) != 0) fail_msg("cannot write %s", path);
    free(json);
    free(data);
}

static const char *st_dtype_name(rb_dtype t) {
    switch (t) {
    case RB_F32: return "F32";
    case RB_F16: return "F16";
    case RB_BF16: return "BF16";
    default: fail_msg("unexpected dtype %s", rb_dtype_name(t));
    }
    return "";
}

void ct_copy_hf(const char *src_dir, const char *dst_dir, const char *drop, const char *reshape) {
    char path[4096];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/config.json", src_dir);
    char *cfg = tu_read_file(path, &n);
    char *cfgz = malloc(n + 1);
    assert_non_null(cfgz);
    memcpy(cfgz, cfg, n);
    cfgz[n] = '\0';
    snprintf(path, sizeof path, "%s/config.json", dst_dir);
    ct_write_text(path, cfgz);
    free(cfg);
    free(cfgz);
    rb_st_set *st = NULL;
    TU_OK(rb_st_open(src_dir, &st, NULL));
    int64_t nt = rb_st_n_tensors(st);
    ct_st_entry *e = calloc((size_t)nt, sizeof *e);
    assert_non_null(e);
    size_t k = 0;
    for (int64_t i = 0; i < nt; i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        if (drop && strcmp(t->name, drop) == 0) continue;
        ct_st_entry *x = &e[k++];
        x->name = t->name;
        x->dtype = st_dtype_name(t->dtype);
        x->n_dims = t->n_dims;
        for (int d = 0; d < t->n_dims && d < 3; d++) x->shape[d] = t->ne[t->n_dims - 1 - d];
        if (reshape && strcmp(t->name, reshape) == 0 && t->n_dims == 2 && t->ne[0] != t->ne[1]) {
            x->shape[0] = t->ne[0]; /* transposed shape */
            x->shape[1] = t->ne[1];
        } else if (reshape && strcmp(t->name, reshape) == 0 && t->n_dims == 2) {
            x->shape[0] = 2 * t->ne[1]; /* square: transposing would not change it; same size, other shape */
            x->shape[1] = t->ne[0] / 2;
        } else if (reshape && strcmp(t->name, reshape) == 0 && t->n_dims == 3) { /* rotated shape */
            x->shape[0] = t->ne[1];
            x->shape[1] = t->ne[0];
            x->shape[2] = t->ne[2];
        }
        x->data = t->data;
        x->nbytes = t->nbytes;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dst_dir);
    ct_write_safetensors(path, e, k);
    free(e);
    rb_st_close(st);
}

static void copy_config(const char *src_dir, const char *dst_dir) {
    char path[4096];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/config.json", src_dir);
    char *cfg = tu_read_file(path, &n); /* NUL-terminated */
    snprintf(path, sizeof path, "%s/config.json", dst_dir);
    ct_write_text(path, cfg);
    free(cfg);
}

void ct_copy_hf_as(const char *src_dir, const char *dst_dir, rb_dtype dtype) {
    assert_true(dtype == RB_F16 || dtype == RB_BF16);
    copy_config(src_dir, dst_dir);
    rb_st_set *st = NULL;
    TU_OK(rb_st_open(src_dir, &st, NULL));
    const int64_t nt = rb_st_n_tensors(st);
    ct_st_entry *e = calloc((size_t)nt, sizeof *e);
    uint16_t **bufs = calloc((size_t)nt, sizeof *bufs);
    assert_true(e && bufs);
    for (int64_t i = 0; i < nt; i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        const int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
        bufs[i] = malloc(sizeof(uint16_t) * (size_t)(n ? n : 1));
        assert_true(x && bufs[i]);
        TU_OK(rb_dequantize_row(t->dtype, t->data, x, n));
        if (dtype == RB_F16) rb_f32_to_f16_row(x, bufs[i], n);
        else rb_f32_to_bf16_row(x, bufs[i], n);
        free(x);
        ct_st_entry *y = &e[i];
        y->name = t->name;
        y->dtype = st_dtype_name(dtype);
        y->n_dims = t->n_dims;
        for (int d = 0; d < t->n_dims && d < 3; d++) y->shape[d] = t->ne[t->n_dims - 1 - d];
        y->data = bufs[i];
        y->nbytes = sizeof(uint16_t) * (size_t)n;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dst_dir);
    ct_write_safetensors(path, e, (size_t)nt);
    for (int64_t i = 0; i < nt; i++) free(bufs[i]);
    free(bufs);
    free(e);
    rb_st_close(st);
}

void ct_model_dir(char *buf, size_t len, const char *name) {
    char rel[512];
    snprintf(rel, sizeof rel, "models/%s", name);
    tu_data(buf, len, rel);
}

int32_t *ct_ids(const rb_json_config *j, const char *key, size_t *n) {
    TU_OK(rb_json_config_arr_len(j, key, n));
    int32_t *ids = malloc(sizeof(int32_t) * (*n ? *n : 1));
    assert_non_null(ids);
    for (size_t i = 0; i < *n; i++) {
        int64_t v;
        TU_OK(rb_json_config_arr_int(j, key, i, &v));
        ids[i] = (int32_t)v;
    }
    return ids;
}

float *ct_logits(const char *path, const int32_t *tokens, size_t n, int64_t *V) {
    rb_error err;
    rb_error_clear(&err);
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, &err));
    rb_model *m = NULL;
    if (rb_model_load(path, be, NULL, &m, &err) != RB_OK) fail_msg("%s", err.msg);
    *V = rb_model_get_config(m)->n_vocab;
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(m, (int64_t)n, RB_F32, &kv, &err));
    float *out = malloc(sizeof(float) * n * (size_t)*V);
    assert_non_null(out);
    if (rb_model_forward(m, kv, tokens, (int64_t)n, true, out, &err) != RB_OK) fail_msg("%s: %s", path, err.msg);
    rb_kv_cache_free(kv);
    rb_model_free(m);
    rb_backend_destroy(be);
    return out;
}

static int32_t argmax(const float *x, int64_t n) {
    int64_t a = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[a]) a = i;
    return (int32_t)a;
}

bool ct_greedy_matches(const char *path, const int32_t *prompt, size_t np, const int32_t *want, size_t ng) {
    rb_error err;
    rb_error_clear(&err);
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, &err));
    rb_model *m = NULL;
    if (rb_model_load(path, be, NULL, &m, &err) != RB_OK) fail_msg("%s", err.msg);
    int64_t V = rb_model_get_config(m)->n_vocab;
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(m, (int64_t)(np + ng), RB_F32, &kv, &err));
    float *logits = malloc(sizeof(float) * (size_t)V);
    assert_non_null(logits);
    bool ok = true;
    if (rb_model_forward(m, kv, prompt, (int64_t)np, false, logits, &err) != RB_OK) fail_msg("%s", err.msg);
    for (size_t i = 0; i < ng && ok; i++) {
        int32_t t = argmax(logits, V);
        if (t != want[i]) ok = false;
        else if (i + 1 < ng && rb_model_forward(m, kv, &t, 1, false, logits, &err) != RB_OK) fail_msg("%s", err.msg);
    }
    free(logits);
    rb_kv_cache_free(kv);
    rb_model_free(m);
    rb_backend_destroy(be);
    return ok;
}

rb_gguf *ct_gguf_open(const char *path) {
    rb_error err;
    rb_error_clear(&err);
    rb_gguf *g = NULL;
    if (rb_gguf_open(path, &g, &err) != RB_OK) fail_msg("%s", err.msg);
    return g;
}

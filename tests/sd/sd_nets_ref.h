/* Helpers of the SD network tests (test_sd_clip_text.c, test_sd_unet.c,
 * test_sd_vae.c): reading the diffusers reference tensors, moving tensors
 * between host and the CPU backend, comparing, and writing modified copies
 * of component folders (renamed keys, other dtypes, a tensor dropped or
 * reshaped, a truncated file, an edited config) for the loader tests.
 * Header-only (static inline) because each test file is its own program. */
#ifndef RBEE_TEST_SD_NETS_REF_H
#define RBEE_TEST_SD_NETS_REF_H

#include "testutil.h"

#include "rbee/backend.h"
#include "rbee/safetensors.h"
#include "rbee/sd_model.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The fixture path of pipelines/<pipe>/<rel> or refs/<pipe>/<rel>. */
static inline const char *ref_path(char *buf, size_t cap, const char *kind, const char *pipe, const char *rel) {
    char r[512];
    snprintf(r, sizeof r, "diffusers/%s/%s/%s", kind, pipe, rel);
    return tu_fixture(buf, cap, r);
}

static inline rb_st_set *ref_open(const char *pipe, const char *file) {
    char p[1024];
    rb_st_set *s = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_st_open(ref_path(p, sizeof p, "refs", pipe, file), &s, &err) != RB_OK) fail_msg("%s", err.msg);
    return s;
}

/* An f32 reference tensor's data and element count (fails the test if absent). */
static inline const float *ref_f32(const rb_st_set *s, const char *name, int64_t *n) {
    const rb_st_tensor *t = rb_st_find(s, name);
    if (!t) fail_msg("reference tensor '%s' missing", name);
    assert_int_equal(t->dtype, RB_F32);
    if (n) *n = (int64_t)(t->nbytes / 4);
    return (const float *)t->data;
}

static inline bool ref_has(const rb_st_set *s, const char *name) { return rb_st_find(s, name) != NULL; }

/* int64 token ids as int32. */
static inline void ref_ids(const rb_st_set *s, const char *name, int32_t *out, int64_t n) {
    const rb_st_tensor *t = rb_st_find(s, name);
    if (!t) fail_msg("reference tensor '%s' missing", name);
    assert_int_equal(t->dtype, RB_I64);
    assert_int_equal((int64_t)(t->nbytes / 8), n);
    for (int64_t i = 0; i < n; i++) {
        int64_t v;
        memcpy(&v, (const char *)t->data + 8 * i, 8);
        out[i] = (int32_t)v;
    }
}

static inline rb_tensor dev_tensor(rb_backend *be, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                                   const float *data) {
    rb_tensor t;
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    TU_OK(rb_tensor_alloc(be, RB_F32, 4, ne, &t));
    if (data) TU_OK(rb_tensor_set(&t, data, sizeof(float) * (size_t)(ne0 * ne1 * ne2 * ne3)));
    else TU_OK(rb_fill(be, &t, NAN));
    return t;
}

static inline float *dev_read(const rb_tensor *t) {
    const size_t n = (size_t)rb_tensor_nelements(t);
    float *h = malloc(n * sizeof(float) + 1);
    assert_non_null(h);
    TU_OK(rb_tensor_get(t, h, n * sizeof(float)));
    return h;
}

static inline double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    return m;
}

static inline double max_abs(const float *a, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

/* Asserts max |got - ref| <= tol, printing the observed error. */
static inline void expect_close(const float *got, const float *ref, int64_t n, double tol, const char *what) {
    const double d = max_abs_diff(got, ref, n);
    printf("  %-58s max|diff| %.3g (max|ref| %.3g)\n", what, d, max_abs(ref, n));
    if (!(d <= tol)) fail_msg("%s: max abs diff %.3g exceeds %.3g", what, d, tol);
}

static inline double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* CPU time of this process in ms (all threads). */
static inline double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- writing modified copies of a component folder ---- */

typedef struct st_xform {
    const char *drop;         /* leave this tensor out */
    const char *strip_prefix; /* remove from the start of names */
    rb_dtype to;              /* stored dtype: RB_F32 (0), RB_F16, RB_BF16 */
    rb_dtype round_through;   /* with to == RB_F32: round values through this dtype (RB_F32: none) */
    const char *reshape;      /* store this tensor with shape new_shape (torch order, same element count) */
    int64_t new_shape[4];
    int new_nd;
    /* optional: may rewrite a tensor's name (cap bytes) and torch-order shape (same element count) */
    void (*edit)(const char *name, char *new_name, size_t cap, int64_t *shape, int *nd);
} st_xform;

static inline const char *st_dtype_name(rb_dtype t) {
    return t == RB_F16 ? "F16" : t == RB_BF16 ? "BF16" : t == RB_I64 ? "I64" : "F32";
}

static inline void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot write %s", path);
    if (n && fwrite(data, 1, n, f) != n) fail_msg("short write %s", path);
    fclose(f);
}

static inline void copy_file(const char *from, const char *to) {
    size_t n;
    void *d = tu_read_file(from, &n);
    write_file(to, d, n);
    free(d);
}

/* The folder of component pipelines/<pipe>/<comp>. The fixtures store the
 * weights shared between pipelines as small text files holding the relative
 * path of the real file (git's form of a symlink where links are not
 * checked out as links); for those this makes a temporary folder with the
 * config and a real symlink to the target, and returns true (the caller
 * removes it with tu_tmpdir_remove). */
static inline bool fixture_component(char *dir, size_t cap, const char *pipe, const char *comp, const char *weights) {
    char rel[256], w[1024];
    snprintf(rel, sizeof rel, "%s/%s", comp, weights);
    ref_path(w, sizeof w, "pipelines", pipe, rel);
    size_t n;
    char *txt = tu_read_file(w, &n);
    const bool link = n < 512 && strncmp(txt, "../", 3) == 0;
    if (!link) {
        free(txt);
        snprintf(rel, sizeof rel, "diffusers/pipelines/%s/%s", pipe, comp);
        tu_fixture(dir, cap, rel);
        return false;
    }
    while (n && (txt[n - 1] == '\n' || txt[n - 1] == ' ')) txt[--n] = '\0';
    char target[2048], *slash = strrchr(w, '/');
    snprintf(target, sizeof target, "%.*s/%s", (int)(slash - w), w, txt);
    free(txt);
    char *real = realpath(target, NULL);
    if (!real) fail_msg("cannot resolve %s -> %s", w, target);
    if (tu_tmpdir_make(dir, cap, "rbee_sd_") != 0) fail_msg("cannot make a temporary folder");
    char src[1024], dst[1024];
    snprintf(rel, sizeof rel, "%s/config.json", comp);
    if (snprintf(dst, sizeof dst, "%s/config.json", dir) >= (int)sizeof dst) fail_msg("path too long");
    copy_file(ref_path(src, sizeof src, "pipelines", pipe, rel), dst);
    if (snprintf(dst, sizeof dst, "%s/%s", dir, weights) >= (int)sizeof dst) fail_msg("path too long");
    if (symlink(real, dst) != 0) fail_msg("cannot link %s", dst);
    free(real);
    return true;
}

/* Converts n f32 values to dtype `to` (2 or 4 bytes each) into out. */
static inline void st_convert(const float *in, int64_t n, rb_dtype to, rb_dtype round_through, void *out) {
    for (int64_t i = 0; i < n; i++) {
        float v = in[i];
        if (to == RB_F16) {
            rb_f16 h = rb_f32_to_f16(v);
            memcpy((char *)out + 2 * i, &h, 2);
            continue;
        }
        if (to == RB_BF16) {
            rb_bf16 h = rb_f32_to_bf16(v);
            memcpy((char *)out + 2 * i, &h, 2);
            continue;
        }
        if (round_through == RB_F16) v = rb_f16_to_f32(rb_f32_to_f16(v));
        if (round_through == RB_BF16) v = rb_bf16_to_f32(rb_f32_to_bf16(v));
        memcpy((char *)out + 4 * i, &v, 4);
    }
}

/* Writes every tensor of src (f32) into dst_file with the transformation x. */
static inline void st_rewrite(const char *src_file, const char *dst_file, const st_xform *x) {
    rb_st_set *s = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_st_open(src_file, &s, &err) != RB_OK) fail_msg("%s", err.msg);
    const int64_t nt = rb_st_n_tensors(s);
    const size_t es = x->to == RB_F16 || x->to == RB_BF16 ? 2 : 4;
    json_t *hdr = json_object();
    size_t total = 0;
    for (int64_t i = 0; i < nt; i++) { /* sizes first */
        const rb_st_tensor *t = rb_st_tensor_at(s, i);
        if (x->drop && strcmp(t->name, x->drop) == 0) continue;
        total += (size_t)(t->nbytes / 4) * es;
    }
    char *data = malloc(total + 1);
    assert_non_null(data);
    size_t off = 0;
    for (int64_t i = 0; i < nt; i++) {
        const rb_st_tensor *t = rb_st_tensor_at(s, i);
        if (x->drop && strcmp(t->name, x->drop) == 0) continue;
        assert_int_equal(t->dtype, RB_F32);
        const int64_t n = (int64_t)(t->nbytes / 4);
        st_convert((const float *)t->data, n, x->to, x->round_through, data + off);
        int64_t shp[4];
        int nd = t->n_dims;
        for (int d = 0; d < nd; d++) shp[d] = t->ne[nd - 1 - d];
        if (x->reshape && strcmp(t->name, x->reshape) == 0) {
            nd = x->new_nd;
            memcpy(shp, x->new_shape, sizeof shp);
        }
        char nn[512];
        snprintf(nn, sizeof nn, "%s", t->name);
        if (x->edit) x->edit(t->name, nn, sizeof nn, shp, &nd);
        json_t *shape = json_array();
        for (int d = 0; d < nd; d++) json_array_append_new(shape, json_integer(shp[d]));
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(st_dtype_name(x->to)));
        json_object_set_new(e, "shape", shape);
        json_t *offs = json_array();
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + (size_t)n * es)));
        json_object_set_new(e, "data_offsets", offs);
        const char *name = nn;
        if (x->strip_prefix && strncmp(name, x->strip_prefix, strlen(x->strip_prefix)) == 0)
            name += strlen(x->strip_prefix);
        json_object_set_new(hdr, name, e);
        off += (size_t)n * es;
    }
    char *h = json_dumps(hdr, JSON_COMPACT);
    assert_non_null(h);
    size_t hl = strlen(h), padded = (hl + 7) & ~(size_t)7;
    FILE *f = fopen(dst_file, "wb");
    if (!f) fail_msg("cannot write %s", dst_file);
    uint64_t n8 = padded;
    fwrite(&n8, 8, 1, f);
    fwrite(h, 1, hl, f);
    for (size_t i = hl; i < padded; i++) fputc(' ', f);
    if (total) fwrite(data, 1, total, f);
    fclose(f);
    free(h);
    free(data);
    json_decref(hdr);
    rb_st_close(s);
}

/* Makes a temporary copy of component folder pipelines/<pipe>/<comp>: its
 * config.json (or `config` text when non-NULL) and its weights rewritten
 * by x into <tmp>/<weights_name>. Writes the folder path into dir. */
static inline void make_component(char *dir, size_t cap, const char *pipe, const char *comp, const char *src_weights,
                                  const char *weights_name, const st_xform *x, const char *config) {
    if (tu_tmpdir_make(dir, cap, "rbee_sd_") != 0) fail_msg("cannot make a temporary folder");
    char src[1024], rel[256], dst[1024];
    snprintf(rel, sizeof rel, "%s/config.json", comp);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    if (config)
        write_file(dst, config, strlen(config));
    else
        copy_file(ref_path(src, sizeof src, "pipelines", pipe, rel), dst);
    snprintf(rel, sizeof rel, "%s/%s", comp, src_weights);
    snprintf(dst, sizeof dst, "%s/%s", dir, weights_name);
    st_rewrite(ref_path(src, sizeof src, "pipelines", pipe, rel), dst, x);
}

/* config.json of pipelines/<pipe>/<comp> with the first occurrence of `from` replaced by `to` (malloc'ed). */
static inline char *edited_config(const char *pipe, const char *comp, const char *from, const char *to) {
    char p[1024], rel[256];
    snprintf(rel, sizeof rel, "%s/config.json", comp);
    size_t n;
    char *c = tu_read_file(ref_path(p, sizeof p, "pipelines", pipe, rel), &n);
    char *at = strstr(c, from);
    if (!at) fail_msg("'%s' not in %s", from, rel);
    char *out = malloc(n + strlen(to) + 1);
    assert_non_null(out);
    snprintf(out, n + strlen(to) + 1, "%.*s%s%s", (int)(at - c), c, to, at + strlen(from));
    free(c);
    return out;
}

#endif

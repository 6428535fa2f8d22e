/* Helpers of the pipeline and loader tests (test_sd_pipeline*.c,
 * test_sd_load*.c): a fixture pipeline folder made loadable (the fixtures
 * keep files shared between pipelines as small text files holding the
 * relative path of the real file; this links a temporary copy of the
 * folder's layout to the real files), the run list of refs/<pipe>/meta.json,
 * reference tensors and PNGs, and tolerance checks. Header-only (static
 * inline) because each test file is its own program. */
#ifndef RBEE_TEST_SD_PIPELINE_REF_H
#define RBEE_TEST_SD_PIPELINE_REF_H

#include "testutil.h"

#include "rbee/image.h"
#include "rbee/safetensors.h"
#include "rbee/sd_pipeline.h"
#include "sd/sched_json.h"

#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The real file behind a fixture file (following a text-stub link). */
static inline char *fixture_real(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) fail_msg("missing %s", path);
    if (S_ISREG(st.st_mode) && st.st_size < 512) {
        size_t n;
        char *txt = tu_read_file(path, &n);
        if (strncmp(txt, "../", 3) == 0) {
            while (n && (txt[n - 1] == '\n' || txt[n - 1] == ' ')) txt[--n] = '\0';
            char target[2048];
            const char *slash = strrchr(path, '/');
            snprintf(target, sizeof target, "%.*s/%s", (int)(slash - path), path, txt);
            free(txt);
            char *real = realpath(target, NULL);
            if (!real) fail_msg("cannot resolve %s", target);
            return real;
        }
        free(txt);
    }
    char *real = realpath(path, NULL);
    if (!real) fail_msg("cannot resolve %s", path);
    return real;
}

/* Mirrors src (files and one level of folders) into dst as symbolic links to the real files. */
static inline void mirror_dir(const char *src, const char *dst, int depth) {
    DIR *d = opendir(src);
    if (!d) fail_msg("cannot open %s", src);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char s[2048], t[2048];
        if (snprintf(s, sizeof s, "%s/%s", src, e->d_name) >= (int)sizeof s ||
            snprintf(t, sizeof t, "%s/%s", dst, e->d_name) >= (int)sizeof t)
            fail_msg("path too long");
        struct stat st;
        if (stat(s, &st) != 0) fail_msg("cannot stat %s", s);
        if (S_ISDIR(st.st_mode)) {
            if (depth > 0) {
                if (mkdir(t, 0755) != 0) fail_msg("cannot make %s", t);
                mirror_dir(s, t, depth - 1);
            }
            continue;
        }
        char *real = fixture_real(s);
        if (symlink(real, t) != 0) fail_msg("cannot link %s", t);
        free(real);
    }
    closedir(d);
}

/* A loadable copy of pipelines/<pipe> in a fresh temporary folder (dir, cap
 * >= 64); remove it with tu_tmpdir_remove. */
static inline void pipeline_dir(char *dir, size_t cap, const char *pipe) {
    char rel[256], src[1024];
    snprintf(rel, sizeof rel, "diffusers/pipelines/%s", pipe);
    tu_fixture(src, sizeof src, rel);
    if (tu_tmpdir_make(dir, cap, "rbee_sdp_") != 0) fail_msg("cannot make a temporary folder");
    mirror_dir(src, dir, 1);
}

/* The same, as <tmp>/<name>: a loadable copy whose folder has a known name
 * (parent receives <tmp>; remove that). */
static inline void pipeline_dir_named(char *parent, size_t pcap, char *dir, size_t cap, const char *pipe,
                                      const char *name) {
    char rel[256], src[1024];
    snprintf(rel, sizeof rel, "diffusers/pipelines/%s", pipe);
    tu_fixture(src, sizeof src, rel);
    if (tu_tmpdir_make(parent, pcap, "rbee_sdp_") != 0) fail_msg("cannot make a temporary folder");
    if (snprintf(dir, cap, "%s/%s", parent, name) >= (int)cap) fail_msg("path too long");
    if (mkdir(dir, 0755) != 0) fail_msg("cannot make %s", dir);
    mirror_dir(src, dir, 1);
}

static inline const char *refs_path(char *buf, size_t cap, const char *pipe, const char *file) {
    char rel[512];
    snprintf(rel, sizeof rel, "diffusers/refs/%s/%s", pipe, file);
    return tu_fixture(buf, cap, rel);
}

/* meta.json (Python's JSON: bare -Infinity tokens, read by rb_sched_json_load). */
static inline json_t *load_meta(const char *pipe) {
    char p[1024];
    rb_error err;
    rb_error_clear(&err);
    json_t *m = rb_sched_json_load(refs_path(p, sizeof p, pipe, "meta.json"), &err);
    if (!m) fail_msg("meta.json of %s: %s", pipe, err.msg);
    return m;
}

static inline rb_st_set *open_refs(const char *pipe, const char *file) {
    char p[1024];
    rb_st_set *s = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_st_open(refs_path(p, sizeof p, pipe, file), &s, &err) != RB_OK) fail_msg("%s", err.msg);
    return s;
}

static inline const float *st_f32(const rb_st_set *s, const char *name, size_t *n) {
    const rb_st_tensor *t = rb_st_find(s, name);
    if (!t) fail_msg("reference tensor %s missing", name);
    assert_int_equal(t->dtype, RB_F32);
    if (n) *n = t->nbytes / 4;
    return t->data;
}

/* Decodes a PNG / JPEG file (channels 0: the file's own). */
static inline rb_image decode_file(const char *path, int channels) {
    size_t n;
    void *d = tu_read_file(path, &n);
    rb_image img;
    rb_image_decode_opts o = {.channels = channels};
    rb_error err;
    rb_error_clear(&err);
    if (rb_image_decode(d, n, &o, &img, &err) != RB_OK) fail_msg("%s: %s", path, err.msg);
    free(d);
    return img;
}

static inline rb_sd_model *load_model(rb_backend *be, const char *path, const rb_sd_model_opts *o) {
    rb_sd_model *m = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_sd_model_load(path, be, o, &m, &err) != RB_OK) fail_msg("load %s: %s", path, err.msg);
    return m;
}

static inline double max_abs_d(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

static inline double max_abs_1(const float *a, size_t n) {
    double m = 1.0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

/* Checks max |got - ref| <= tol x (scaled ? max(1, max|ref|) : 1); returns the scaled error. */
static inline double check_close(const char *what, const float *got, const float *ref, size_t n, double tol,
                                 bool scaled) {
    const double d = max_abs_d(got, ref, n), s = scaled ? max_abs_1(ref, n) : 1.0;
    if (!(d <= tol * s)) fail_msg("%s: max |diff| %.3g exceeds %.3g (scale %.3g)", what, d, tol * s, s);
    return d / s;
}

#endif

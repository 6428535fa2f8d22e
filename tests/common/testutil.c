/* Implementation of tests/common/testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void tu_rng_seed(tu_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) { /* splitmix64 */
        seed += 0x9e3779b97f4a7c15ull;
        uint64_t z = seed;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        r->s[i] = z ^ (z >> 31);
    }
}

uint64_t tu_rng_u64(tu_rng *r) {
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}

double tu_rng_uniform(tu_rng *r) { return (double)(tu_rng_u64(r) >> 11) * 0x1.0p-53; }
float tu_rng_range(tu_rng *r, float lo, float hi) { return lo + (hi - lo) * (float)tu_rng_uniform(r); }

float tu_rng_normal(tu_rng *r) {
    double u1 = tu_rng_uniform(r), u2 = tu_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void tu_fill_uniform(tu_rng *r, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = tu_rng_range(r, lo, hi);
}

const char *tu_data(char *buf, size_t len, const char *relpath) {
    /* RBEE_TEST_DATA_DIR in the environment: binaries built here and run in a
     * copy of the tree elsewhere (the GPU machine) */
    const char *dir = getenv("RBEE_TEST_DATA_DIR");
    if (!dir || !*dir) dir = RBEE_TEST_DATA_DIR;
    snprintf(buf, len, "%s/%s", dir, relpath);
    struct stat st;
    if (stat(buf, &st) != 0) fail_msg("test data missing: %s", buf);
    return buf;
}

void *tu_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)(n > 0 ? n : 0) + 1);
    assert_non_null(p);
    if (n > 0 && fread(p, 1, (size_t)n, f) != (size_t)n) fail_msg("short read %s", path);
    p[n > 0 ? n : 0] = '\0'; /* so text files can be used as C strings */
    fclose(f);
    *size = (size_t)n;
    return p;
}

double tu_rel_l2(const float *a, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        if (isnan(a[i])) return INFINITY;
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

double tu_rel_l2_f(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        if (isnan(a[i])) return INFINITY;
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

double tu_max_rel(const float *a, const double *ref, size_t n, double floor) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i])) return INFINITY;
        double den = fabs(ref[i]) > floor ? fabs(ref[i]) : floor;
        double e = fabs((double)a[i] - ref[i]) / den;
        if (e > m) m = e;
    }
    return m;
}

int tu_tmpdir_make(char *buf, size_t len, const char *prefix) {
    int n = snprintf(buf, len, "/tmp/%sXXXXXX", prefix);
    if (n < 0 || (size_t)n >= len) return -1;
    return mkdtemp(buf) ? 0 : -1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int tu_tmpdir_remove(const char *dir) { return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int tu_model_names(char **names, int max) {
    char root[1024];
    tu_data(root, sizeof root, "models");
    DIR *d = opendir(root);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < max)
        if (de->d_name[0] != '.') names[n++] = strdup(de->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    return n;
}

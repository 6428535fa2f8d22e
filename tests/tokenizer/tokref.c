/* Reference-case loading and id-list comparison for the tokenizer tests (see tokref.h). */
#include "tokref.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int32_t *ids_of(const json_t *a, size_t *n) {
    assert_true(json_is_array(a));
    *n = json_array_size(a);
    int32_t *v = malloc((*n ? *n : 1) * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

static char *str_of(const json_t *s, size_t *len) {
    assert_true(json_is_string(s));
    size_t n = json_string_length(s);
    char *p = malloc(n + 1);
    assert_non_null(p);
    memcpy(p, json_string_value(s), n);
    p[n] = 0;
    if (len) *len = n;
    return p;
}

void tokref_load(tokref *r, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.json", RBEE_TOKENIZER_DATA, name);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!root) fail_msg("%s: %s", path, je.text);
    const json_t *cases = json_object_get(root, "cases");
    assert_true(json_is_array(cases));
    r->n = json_array_size(cases);
    assert_true(r->n > 0);
    r->cases = calloc(r->n, sizeof *r->cases);
    assert_non_null(r->cases);
    for (size_t i = 0; i < r->n; i++) {
        const json_t *c = json_array_get(cases, i);
        tokref_case *k = &r->cases[i];
        k->text = str_of(json_object_get(c, "text"), &k->text_len);
        k->ids_special = ids_of(json_object_get(c, "ids_special"), &k->n_special);
        k->ids_plain = ids_of(json_object_get(c, "ids_plain"), &k->n_plain);
        k->decoded = str_of(json_object_get(c, "decoded"), NULL);
        k->decoded_plain = str_of(json_object_get(c, "decoded_plain"), NULL);
    }
    json_decref(root);
}

void tokref_free(tokref *r) {
    for (size_t i = 0; i < r->n; i++) {
        tokref_case *k = &r->cases[i];
        free(k->text);
        free(k->ids_special);
        free(k->ids_plain);
        free(k->decoded);
        free(k->decoded_plain);
    }
    free(r->cases);
    r->cases = NULL;
    r->n = 0;
}

rb_tokenizer *tokref_tokenizer(const char *name) {
    char tj[1024], tc[1024];
    const char *dir = getenv("RBEE_TOKENIZERS_DIR");
    if (!dir) dir = RBEE_TOKENIZERS_DIR;
    snprintf(tj, sizeof tj, "%s/%s/tokenizer.json", dir, name);
    snprintf(tc, sizeof tc, "%s/%s/tokenizer_config.json", dir, name);
    rb_tokenizer *t = NULL;
    rb_error e;
    rb_status st = rb_tokenizer_load_hf(tj, tc, &t, &e);
    if (st) fail_msg("loading %s: %s", tj, e.msg);
    return t;
}

bool tokref_ids_equal(const char *what, const char *text, const int32_t *got, size_t n_got, const int32_t *want,
                      size_t n_want) {
    size_t i = 0;
    while (i < n_got && i < n_want && got[i] == want[i]) i++;
    if (i == n_got && i == n_want) return true;
    fprintf(stderr, "%s mismatch for text \"%.200s\" at index %zu\n  got :", what, text, i);
    for (size_t k = 0; k < n_got && k < 64; k++) fprintf(stderr, " %d", (int)got[k]);
    fprintf(stderr, "\n  want:");
    for (size_t k = 0; k < n_want && k < 64; k++) fprintf(stderr, " %d", (int)want[k]);
    fprintf(stderr, "\n");
    return false;
}

double tokref_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

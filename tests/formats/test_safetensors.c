/* Safetensors reader tests on files built byte by byte in the test: every
 * supported dtype with odd shapes and random data, the ggml-order shape
 * conversion, single files, folders, sharded checkpoints with an index and a
 * config.json, and malformed headers, offsets, dtypes and indexes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rbee/json_config.h"
#include "rbee/safetensors.h"
#include "st_builder.h"
#include "testutil.h"

static char g_dir[64];

static const char *tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

static int setup(void **state) {
    (void)state;
    return tu_tmpdir_make(g_dir, sizeof g_dir, "rbee_st_");
}

static int teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(g_dir);
}

typedef struct spec {
    const char *name;
    const char *st_dtype;
    rb_dtype dtype;
    size_t esize;
    int n_dims;
    int64_t shape[4]; /* safetensors (row-major) order */
} spec;

static const spec k_specs[] = {
    {"model.a", "F32", RB_F32, 4, 2, {3, 5}},         {"model.b", "F16", RB_F16, 2, 1, {7}},
    {"model.c", "BF16", RB_BF16, 2, 3, {2, 3, 4}},    {"scalar", "I64", RB_I64, 8, 0, {0}},
    {"bytes", "U8", RB_I8, 1, 1, {11}},               {"mask", "BOOL", RB_I8, 1, 2, {1, 3}},
    {"dbl", "F64", RB_F64, 8, 4, {2, 1, 3, 1}},       {"empty", "I32", RB_I32, 4, 2, {0, 5}},
    {"shorts", "I16", RB_I16, 2, 1, {9}},             {"bytes.signed", "I8", RB_I8, 1, 1, {5}},
    {"x.i32", "I32", RB_I32, 4, 3, {1, 1, 13}},
};
#define N_SPECS (sizeof k_specs / sizeof k_specs[0])

static size_t spec_bytes(const spec *s) {
    size_t n = s->esize;
    for (int d = 0; d < s->n_dims; d++) n *= (size_t)s->shape[d];
    return n;
}

/* Header JSON for specs[first..last) laid out back to back in order from
 * data offset 0, in reverse key order (key order must not matter). */
static char *make_header(const spec *specs, size_t n, const char *metadata, size_t *data_len) {
    size_t cap = 8192, len = 0;
    char *j = malloc(cap);
    assert_non_null(j);
    len += (size_t)snprintf(j + len, cap - len, "{");
    if (metadata) len += (size_t)snprintf(j + len, cap - len, "\"__metadata__\":%s,", metadata);
    size_t *offs = calloc(n + 1, sizeof *offs);
    for (size_t i = 0; i < n; i++) offs[i + 1] = offs[i] + spec_bytes(&specs[i]);
    for (size_t k = n; k-- > 0;) {
        const spec *s = &specs[k];
        len += (size_t)snprintf(j + len, cap - len, "\"%s\":{\"dtype\":\"%s\",\"shape\":[", s->name, s->st_dtype);
        for (int d = 0; d < s->n_dims; d++)
            len += (size_t)snprintf(j + len, cap - len, "%s%lld", d ? "," : "", (long long)s->shape[d]);
        len += (size_t)snprintf(j + len, cap - len, "],\"data_offsets\":[%zu,%zu]}%s", offs[k], offs[k + 1],
                                k ? "," : "");
    }
    snprintf(j + len, cap - len, "}");
    *data_len = offs[n];
    free(offs);
    return j;
}

static uint8_t *random_bytes(tu_rng *r, size_t n) {
    uint8_t *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(tu_rng_u64(r) >> 40);
    return p;
}

/* Checks every spec tensor of set s against data (specs laid out from base). */
static void check_specs(const rb_st_set *s, const spec *specs, size_t n, const uint8_t *data) {
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const spec *sp = &specs[i];
        const rb_st_tensor *t = rb_st_find(s, sp->name);
        if (!t) fail_msg("tensor %s not found", sp->name);
        assert_string_equal(t->name, sp->name);
        assert_int_equal(t->dtype, sp->dtype);
        assert_int_equal(t->n_dims, sp->n_dims);
        for (int d = 0; d < 4; d++) {
            int64_t want = d < sp->n_dims ? sp->shape[sp->n_dims - 1 - d] : 1;
            if (t->ne[d] != want) fail_msg("%s ne[%d] = %lld, want %lld", sp->name, d, (long long)t->ne[d],
                                           (long long)want);
        }
        size_t nb = spec_bytes(sp);
        assert_int_equal(t->nbytes, nb);
        if (nb) assert_memory_equal(t->data, data + off, nb);
        off += nb;
    }
}

static void test_single_memory(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 4242);
    size_t dlen, ilen;
    char *json = make_header(k_specs, N_SPECS, "{\"format\":\"pt\",\"note\":\"hi\"}", &dlen);
    uint8_t *data = random_bytes(&r, dlen);
    uint8_t *img = st_image(json, data, dlen, &ilen);
    rb_st_set *s = NULL;
    rb_error err;
    if (rb_st_open_memory(img, ilen, &s, &err) != RB_OK) fail_msg("%s", err.msg);
    assert_int_equal(rb_st_n_tensors(s), N_SPECS);
    check_specs(s, k_specs, N_SPECS, data);
    /* Data pointers are inside the image, right after the header. */
    for (int64_t i = 0; i < rb_st_n_tensors(s); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(s, i);
        assert_true((const uint8_t *)t->data >= img + ilen - dlen);
        assert_true((const uint8_t *)t->data + t->nbytes <= img + ilen);
    }
    assert_null(rb_st_tensor_at(s, (int64_t)N_SPECS));
    assert_null(rb_st_find(s, "model"));
    assert_string_equal(rb_st_metadata(s, "format"), "pt");
    assert_string_equal(rb_st_metadata(s, "note"), "hi");
    assert_null(rb_st_metadata(s, "missing"));
    rb_st_close(s);

    /* The same as a file and as a folder holding model.safetensors. */
    char path[128];
    st_write(tmp_path(path, sizeof path, "one.safetensors"), img, ilen);
    TU_OK(rb_st_open(path, &s, NULL));
    check_specs(s, k_specs, N_SPECS, data);
    rb_st_close(s);
    char sub[128], file[160];
    tmp_path(sub, sizeof sub, "single");
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(file, sizeof file, "%s/model.safetensors", sub);
    st_write(file, img, ilen);
    TU_OK(rb_st_open(sub, &s, NULL));
    check_specs(s, k_specs, N_SPECS, data);
    rb_st_close(s);
    free(img);
    free(data);
    free(json);
}

static void test_sharded(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 99);
    char dir[128], p[200];
    tmp_path(dir, sizeof dir, "sharded");
    assert_int_equal(mkdir(dir, 0700), 0);
    /* Three shards: specs [0,4), [4,8), [8,11). */
    const size_t cuts[4] = {0, 4, 8, N_SPECS};
    uint8_t *datas[3];
    for (int sh = 0; sh < 3; sh++) {
        size_t dlen;
        char *json = make_header(&k_specs[cuts[sh]], cuts[sh + 1] - cuts[sh], sh == 1 ? "{\"shard\":\"two\"}" : NULL,
                                 &dlen);
        datas[sh] = random_bytes(&r, dlen);
        snprintf(p, sizeof p, "%s/model-%05d-of-00003.safetensors", dir, sh + 1);
        st_write_image(p, json, datas[sh], dlen);
        free(json);
    }
    char index[4096];
    size_t len = (size_t)snprintf(index, sizeof index, "{\"metadata\":{\"total_size\":1234},\"weight_map\":{");
    for (int sh = 0; sh < 3; sh++)
        for (size_t i = cuts[sh]; i < cuts[sh + 1]; i++)
            len += (size_t)snprintf(index + len, sizeof index - len, "%s\"%s\":\"model-%05d-of-00003.safetensors\"",
                                    i ? "," : "", k_specs[i].name, sh + 1);
    snprintf(index + len, sizeof index - len, "}}");
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    st_write(p, index, strlen(index));
    const char *config = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":256,\"num_hidden_layers\":2,"
                         "\"rms_norm_eps\":1e-05,\"rope_scaling\":{\"factor\":8.0,\"type\":\"llama3\"},"
                         "\"tie_word_embeddings\":false}";
    snprintf(p, sizeof p, "%s/config.json", dir);
    st_write(p, config, strlen(config));

    rb_st_set *s = NULL;
    rb_error err;
    if (rb_st_open(dir, &s, &err) != RB_OK) fail_msg("%s", err.msg);
    assert_int_equal(rb_st_n_tensors(s), N_SPECS);
    for (int sh = 0; sh < 3; sh++) check_specs(s, &k_specs[cuts[sh]], cuts[sh + 1] - cuts[sh], datas[sh]);
    assert_string_equal(rb_st_metadata(s, "shard"), "two");
    rb_st_close(s);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    TU_OK(rb_st_open(p, &s, NULL)); /* the index path directly */
    assert_int_equal(rb_st_n_tensors(s), N_SPECS);
    rb_st_close(s);

    rb_json_config *c = NULL;
    snprintf(p, sizeof p, "%s/config.json", dir);
    TU_OK(rb_json_config_load(p, &c, NULL));
    int64_t h;
    double f;
    const char *str;
    bool b = true;
    TU_OK(rb_json_config_int(c, "hidden_size", &h));
    assert_int_equal(h, 256);
    TU_OK(rb_json_config_num(c, "rms_norm_eps", &f));
    assert_true(f == 1e-5);
    TU_OK(rb_json_config_num(c, "rope_scaling.factor", &f));
    assert_true(f == 8.0);
    TU_OK(rb_json_config_arr_str(c, "architectures", 0, &str));
    assert_string_equal(str, "LlamaForCausalLM");
    TU_OK(rb_json_config_bool(c, "tie_word_embeddings", &b));
    assert_false(b);
    rb_json_config_free(c);

    /* A tensor listed in the wrong shard, a missing shard, a shard name
     * escaping the folder, a duplicate tensor across shards. */
    char bad[4096];
    snprintf(bad, sizeof bad,
             "{\"weight_map\":{\"model.a\":\"model-00002-of-00003.safetensors\","
             "\"bytes\":\"model-00001-of-00003.safetensors\"}}"); /* both shards open, names swapped */
    snprintf(p, sizeof p, "%s/wrong.index.json", dir);
    st_write(p, bad, strlen(bad));
    assert_int_equal(rb_st_open(p, &s, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "model.a"));
    assert_non_null(strstr(err.msg, "is not there"));
    snprintf(bad, sizeof bad, "{\"weight_map\":{\"model.a\":\"model-00009-of-00003.safetensors\"}}");
    snprintf(p, sizeof p, "%s/missing.index.json", dir);
    st_write(p, bad, strlen(bad));
    assert_int_equal(rb_st_open(p, &s, &err), RB_E_NOT_FOUND);
    assert_non_null(strstr(err.msg, "model-00009-of-00003.safetensors"));
    snprintf(bad, sizeof bad, "{\"weight_map\":{\"model.a\":\"../x.safetensors\"}}");
    snprintf(p, sizeof p, "%s/escape.index.json", dir);
    st_write(p, bad, strlen(bad));
    assert_int_equal(rb_st_open(p, &s, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "plain file name"));
    snprintf(bad, sizeof bad, "{\"weight_map\":[]}");
    snprintf(p, sizeof p, "%s/nomap.index.json", dir);
    st_write(p, bad, strlen(bad));
    assert_int_equal(rb_st_open(p, &s, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "weight_map"));
    /* Shard 4 repeats model.b, which shard 1 has. */
    size_t dlen;
    char *json = make_header(&k_specs[1], 1, NULL, &dlen);
    snprintf(p, sizeof p, "%s/dup.safetensors", dir);
    st_write_image(p, json, datas[0], dlen);
    free(json);
    snprintf(bad, sizeof bad,
             "{\"weight_map\":{\"model.a\":\"model-00001-of-00003.safetensors\",\"model.b\":\"dup.safetensors\"}}");
    snprintf(p, sizeof p, "%s/dup.index.json", dir);
    st_write(p, bad, strlen(bad));
    assert_int_equal(rb_st_open(p, &s, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "model.b"));
    assert_non_null(strstr(err.msg, "more than one shard"));
    /* A folder with neither file. */
    tmp_path(p, sizeof p, "emptydir");
    assert_int_equal(mkdir(p, 0700), 0);
    assert_int_equal(rb_st_open(p, &s, &err), RB_E_NOT_FOUND);
    assert_non_null(strstr(err.msg, "model.safetensors"));
    for (int sh = 0; sh < 3; sh++) free(datas[sh]);
}

/* Expects header json (+ data_len bytes of data) to be refused with code and
 * a message containing needle. */
static void expect_bad_(const char *json, size_t data_len, rb_status code, const char *needle, int line) {
    uint8_t *data = calloc(1, data_len + 1);
    for (size_t i = 0; i < data_len; i++) data[i] = (uint8_t)(i * 13 + 5);
    size_t n;
    uint8_t *img = st_image(json, data, data_len, &n);
    rb_st_set *s = (rb_st_set *)1;
    rb_error err = {0};
    rb_status st = rb_st_open_memory(img, n, &s, &err);
    if (st != code) fail_msg("line %d: got %s (%s), want %s", line, rb_status_str(st), err.msg, rb_status_str(code));
    if (!strstr(err.msg, needle)) fail_msg("line %d: message '%s' lacks '%s'", line, err.msg, needle);
    assert_null(s);
    free(img);
    free(data);
}
#define expect_bad(json, dl, code, needle) expect_bad_(json, dl, code, needle, __LINE__)

static void test_malformed(void **state) {
    (void)state;
    /* Positive control for the shapes used below. */
    size_t n;
    uint8_t *img = st_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", "0123456789abcdef",
                            16, &n);
    rb_st_set *s = NULL;
    TU_OK(rb_st_open_memory(img, n, &s, NULL));
    rb_st_close(s);
    /* Header length beyond the file, beyond 100 MB, file too small. */
    rb_error err;
    uint64_t hl = n; /* one more than what follows the length field */
    memcpy(img, &hl, 8);
    assert_int_equal(rb_st_open_memory(img, n, &s, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "header length"));
    hl = 200000000;
    memcpy(img, &hl, 8);
    assert_int_equal(rb_st_open_memory(img, n, &s, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "header length"));
    hl = UINT64_MAX;
    memcpy(img, &hl, 8);
    assert_int_equal(rb_st_open_memory(img, n, &s, &err), RB_E_FORMAT);
    assert_int_equal(rb_st_open_memory(img, 7, &s, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "too small"));
    /* Truncation at every byte. */
    hl = n - 8 - 16;
    memcpy(img, &hl, 8);
    for (size_t len = 0; len < n; len++) {
        uint8_t *cut = malloc(len ? len : 1);
        memcpy(cut, img, len);
        assert_int_equal(rb_st_open_memory(cut, len, &s, &err), RB_E_FORMAT);
        free(cut);
    }
    free(img);

    expect_bad("{\"w\":{\"dtype\":\"F32\",", 0, RB_E_FORMAT, "bad JSON");
    expect_bad("[1,2,3]", 0, RB_E_FORMAT, "not an object");
    expect_bad("{\"w\":5}", 0, RB_E_FORMAT, "'w': entry is not an object");
    expect_bad("{\"w\":{\"shape\":[4],\"data_offsets\":[0,16]}}", 16, RB_E_FORMAT,
               "'w': missing or non-string \"dtype\"");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", 16, RB_E_FORMAT, "\"shape\"");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4]}}", 16, RB_E_FORMAT, "\"data_offsets\"");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}}", 16, RB_E_FORMAT, "data_offsets");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[0,16]}}", 16, RB_E_FORMAT,
               "'w': shape needs 5");
    expect_bad("{\"w\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, RB_E_FORMAT, "span 16");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}", 16, RB_E_FORMAT,
               "outside the data section");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[20,20]}}", 16, RB_E_FORMAT,
               "outside the data section");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", 16, RB_E_FORMAT, "begin <= end");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[-16,0]}}", 16, RB_E_FORMAT, "data_offsets");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", 16, RB_E_FORMAT, "shape[0]");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4.0],\"data_offsets\":[0,16]}}", 16, RB_E_FORMAT, "shape[0]");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,4],\"data_offsets\":[0,16]}}", 16, RB_E_UNSUPPORTED,
               "'w' has 5 dimensions");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,16]}}", 16,
               RB_E_FORMAT, "overflows");
    expect_bad("{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 16, RB_E_FORMAT,
               "'w': shape needs");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
               16, RB_E_FORMAT, "overlaps");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               16, RB_E_FORMAT, "duplicate");
    expect_bad("{\"fp8.w\":{\"dtype\":\"F8_E4M3\",\"shape\":[16],\"data_offsets\":[0,16]}}", 16, RB_E_UNSUPPORTED,
               "'fp8.w': dtype 'F8_E4M3'");
    expect_bad("{\"u\":{\"dtype\":\"U32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, RB_E_UNSUPPORTED, "'u'");
    expect_bad("{\"w\":{\"dtype\":7,\"shape\":[4],\"data_offsets\":[0,16]}}", 16, RB_E_FORMAT, "dtype");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, RB_E_FORMAT, "__metadata__");
    expect_bad("{\"__metadata__\":[]}", 0, RB_E_FORMAT, "__metadata__");
    /* Adjacent and zero-size tensors are fine; an empty header is fine. */
    img = st_image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                   "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
                   "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}",
                   "0123456789abcdef", 16, &n);
    TU_OK(rb_st_open_memory(img, n, &s, NULL));
    assert_int_equal(rb_st_n_tensors(s), 3);
    assert_memory_equal(rb_st_find(s, "a")->data, "89abcdef", 8);
    rb_st_close(s);
    free(img);
    img = st_image("{}", NULL, 0, &n);
    TU_OK(rb_st_open_memory(img, n, &s, NULL));
    assert_int_equal(rb_st_n_tensors(s), 0);
    rb_st_close(s);
    free(img);
    /* Paths: missing, a directory without model files covered above, a
     * non-file. */
    assert_int_equal(rb_st_open("/nonexistent/model.safetensors", &s, &err), RB_E_NOT_FOUND);
    assert_int_equal(rb_st_open_memory(NULL, 10, &s, &err), RB_E_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_memory),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

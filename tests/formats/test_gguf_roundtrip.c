/* GGUF writer tests: every metadata type and tensors of many dtypes and
 * alignments survive a write/read round trip; the writer's bytes equal an
 * image spelled out by hand; tiny-f32.gguf re-written through copy_kv comes
 * back byte-identical; bad writer input is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf_builder.h"
#include "rbee/gguf.h"
#include "testutil.h"

static char g_dir[64];

static const char *tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

static int setup(void **state) {
    (void)state;
    return tu_tmpdir_make(g_dir, sizeof g_dir, "rbee_gguf_rt_");
}

static int teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(g_dir);
}

static bool str_eq(rb_gguf_str s, const char *c) { return s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0; }

typedef struct tspec {
    const char *name;
    rb_dtype dtype;
    int n_dims;
    int64_t ne[4];
} tspec;

static const tspec k_tensors[] = {
    {"w.f32", RB_F32, 3, {7, 3, 5, 1}},      {"w.f16", RB_F16, 1, {13, 1, 1, 1}},
    {"w.q4_0", RB_Q4_0, 2, {64, 3, 1, 1}},   {"w.q8_0", RB_Q8_0, 2, {96, 1, 1, 1}},
    {"w.q4_K", RB_Q4_K, 2, {256, 2, 1, 1}},  {"w.i8", RB_I8, 4, {3, 2, 2, 2}},
    {"w.bf16", RB_BF16, 2, {5, 7, 1, 1}},    {"w.f64", RB_F64, 1, {3, 1, 1, 1}},
    {"w.empty", RB_F32, 2, {0, 4, 1, 1}},    {"w.i32", RB_I32, 2, {1, 1, 1, 1}},
    {"w.q6_K", RB_Q6_K, 3, {256, 1, 3, 1}},
};
#define N_T (sizeof k_tensors / sizeof k_tensors[0])

static size_t spec_bytes(const tspec *t) {
    return rb_dtype_row_size(t->dtype, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

static const uint8_t k_u8[] = {0, 1, 255, 17, 3};
static const int8_t k_i8[] = {-128, 127, 0, -1};
static const uint16_t k_u16[] = {65535, 0, 12345};
static const int16_t k_i16[] = {-32768, 32767, -7};
static const uint32_t k_u32[] = {4294967295u, 0, 99, 100000};
static const int32_t k_i32[] = {-2147483647 - 1, 2147483647, 5};
static const float k_f32[] = {1.5f, -0.0f, 3.25e-20f};
static const uint8_t k_bool[] = {1, 0, 1, 1, 0};
static const uint64_t k_u64[] = {18446744073709551615ull, 1};
static const int64_t k_i64[] = {-9223372036854775807ll - 1, 9223372036854775807ll, -3};
static const double k_f64[] = {3.141592653589793, -1e300};
static const char *const k_strs[] = {"alpha", "", "γάμμα", "with space", "x"};

static void set_all_kvs(rb_gguf_writer *w) {
    TU_OK(rb_gguf_writer_set_u8(w, "t.u8", 200));
    TU_OK(rb_gguf_writer_set_i8(w, "t.i8", -100));
    TU_OK(rb_gguf_writer_set_u16(w, "t.u16", 60000));
    TU_OK(rb_gguf_writer_set_i16(w, "t.i16", -30000));
    TU_OK(rb_gguf_writer_set_u32(w, "t.u32", 4000000000u));
    TU_OK(rb_gguf_writer_set_i32(w, "t.i32", -2000000000));
    TU_OK(rb_gguf_writer_set_f32(w, "t.f32", 0.1f));
    TU_OK(rb_gguf_writer_set_bool(w, "t.bool", true));
    TU_OK(rb_gguf_writer_set_str(w, "t.str", "hello, gguf"));
    TU_OK(rb_gguf_writer_set_u64(w, "t.u64", 18000000000000000000ull));
    TU_OK(rb_gguf_writer_set_i64(w, "t.i64", -9000000000000000000ll));
    TU_OK(rb_gguf_writer_set_f64(w, "t.f64", 2.718281828459045));
    TU_OK(rb_gguf_writer_set_str(w, "t.empty_str", ""));
    TU_OK(rb_gguf_writer_set_arr(w, "a.u8", RB_GGUF_UINT8, k_u8, 5));
    TU_OK(rb_gguf_writer_set_arr(w, "a.i8", RB_GGUF_INT8, k_i8, 4));
    TU_OK(rb_gguf_writer_set_arr(w, "a.u16", RB_GGUF_UINT16, k_u16, 3));
    TU_OK(rb_gguf_writer_set_arr(w, "a.i16", RB_GGUF_INT16, k_i16, 3));
    TU_OK(rb_gguf_writer_set_arr(w, "a.u32", RB_GGUF_UINT32, k_u32, 4));
    TU_OK(rb_gguf_writer_set_arr(w, "a.i32", RB_GGUF_INT32, k_i32, 3));
    TU_OK(rb_gguf_writer_set_arr(w, "a.f32", RB_GGUF_FLOAT32, k_f32, 3));
    TU_OK(rb_gguf_writer_set_arr(w, "a.bool", RB_GGUF_BOOL, k_bool, 5));
    TU_OK(rb_gguf_writer_set_arr(w, "a.u64", RB_GGUF_UINT64, k_u64, 2));
    TU_OK(rb_gguf_writer_set_arr(w, "a.i64", RB_GGUF_INT64, k_i64, 3));
    TU_OK(rb_gguf_writer_set_arr(w, "a.f64", RB_GGUF_FLOAT64, k_f64, 2));
    TU_OK(rb_gguf_writer_set_arr(w, "a.empty", RB_GGUF_INT32, NULL, 0));
    TU_OK(rb_gguf_writer_set_arr_str(w, "a.str", k_strs, 5));
    TU_OK(rb_gguf_writer_set_arr_str(w, "a.str_empty", NULL, 0));
}

static void check_all_kvs(const rb_gguf *g) {
    uint64_t u64;
    int64_t i64;
    uint32_t u32;
    double f64;
    float f32;
    bool b;
    char *s;
    TU_OK(rb_gguf_get_u64(g, "t.u8", &u64));
    assert_true(u64 == 200);
    TU_OK(rb_gguf_get_i64(g, "t.i8", &i64));
    assert_true(i64 == -100);
    assert_int_equal(rb_gguf_get_u64(g, "t.i8", &u64), RB_E_FORMAT); /* negative */
    TU_OK(rb_gguf_get_u32(g, "t.u16", &u32));
    assert_true(u32 == 60000);
    TU_OK(rb_gguf_get_i64(g, "t.i16", &i64));
    assert_true(i64 == -30000);
    TU_OK(rb_gguf_get_u32(g, "t.u32", &u32));
    assert_true(u32 == 4000000000u);
    TU_OK(rb_gguf_get_i64(g, "t.i32", &i64));
    assert_true(i64 == -2000000000);
    TU_OK(rb_gguf_get_f32(g, "t.f32", &f32));
    assert_true(f32 == 0.1f);
    TU_OK(rb_gguf_get_f64(g, "t.f32", &f64));
    assert_true(f64 == (double)0.1f);
    TU_OK(rb_gguf_get_bool(g, "t.bool", &b));
    assert_true(b);
    TU_OK(rb_gguf_get_str(g, "t.str", &s));
    assert_string_equal(s, "hello, gguf");
    free(s);
    TU_OK(rb_gguf_get_str(g, "t.empty_str", &s));
    assert_string_equal(s, "");
    free(s);
    TU_OK(rb_gguf_get_u64(g, "t.u64", &u64));
    assert_true(u64 == 18000000000000000000ull);
    assert_int_equal(rb_gguf_get_i64(g, "t.u64", &i64), RB_E_FORMAT); /* > INT64_MAX */
    assert_int_equal(rb_gguf_get_u32(g, "t.u64", &u32), RB_E_FORMAT);
    assert_int_equal(rb_gguf_get_f64(g, "t.u64", &f64), RB_E_FORMAT); /* not exact as double */
    TU_OK(rb_gguf_get_i64(g, "t.i64", &i64));
    assert_true(i64 == -9000000000000000000ll);
    TU_OK(rb_gguf_get_f64(g, "t.f64", &f64));
    assert_true(f64 == 2.718281828459045);
    TU_OK(rb_gguf_get_f64(g, "t.u16", &f64)); /* small integers are exact doubles */
    assert_true(f64 == 60000.0);
    assert_int_equal(rb_gguf_get_f64(g, "t.str", &f64), RB_E_FORMAT);
    assert_int_equal(rb_gguf_get_u64(g, "t.f32", &u64), RB_E_FORMAT);
    assert_int_equal(rb_gguf_get_u64(g, "a.u8", &u64), RB_E_FORMAT);

    struct {
        const char *key;
        rb_gguf_type t;
        uint64_t n;
    } arrs[] = {{"a.u8", RB_GGUF_UINT8, 5},    {"a.i8", RB_GGUF_INT8, 4},     {"a.u16", RB_GGUF_UINT16, 3},
                {"a.i16", RB_GGUF_INT16, 3},   {"a.u32", RB_GGUF_UINT32, 4},  {"a.i32", RB_GGUF_INT32, 3},
                {"a.f32", RB_GGUF_FLOAT32, 3}, {"a.bool", RB_GGUF_BOOL, 5},   {"a.u64", RB_GGUF_UINT64, 2},
                {"a.i64", RB_GGUF_INT64, 3},   {"a.f64", RB_GGUF_FLOAT64, 2}, {"a.empty", RB_GGUF_INT32, 0},
                {"a.str", RB_GGUF_STRING, 5},  {"a.str_empty", RB_GGUF_STRING, 0}};
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) {
        const rb_gguf_kv *kv = rb_gguf_find_kv(g, arrs[i].key);
        assert_non_null(kv);
        assert_int_equal(kv->type, RB_GGUF_ARRAY);
        assert_int_equal(kv->arr_type, arrs[i].t);
        assert_int_equal(kv->arr_len, arrs[i].n);
    }
    const rb_gguf_kv *kv;
    kv = rb_gguf_find_kv(g, "a.u8");
    for (int i = 0; i < 5; i++) assert_int_equal(rb_gguf_arr_int(kv, (uint64_t)i), k_u8[i]);
    kv = rb_gguf_find_kv(g, "a.i8");
    for (int i = 0; i < 4; i++) assert_int_equal(rb_gguf_arr_int(kv, (uint64_t)i), k_i8[i]);
    kv = rb_gguf_find_kv(g, "a.u16");
    for (int i = 0; i < 3; i++) assert_int_equal(rb_gguf_arr_int(kv, (uint64_t)i), k_u16[i]);
    kv = rb_gguf_find_kv(g, "a.i16");
    for (int i = 0; i < 3; i++) assert_int_equal(rb_gguf_arr_int(kv, (uint64_t)i), k_i16[i]);
    kv = rb_gguf_find_kv(g, "a.u32");
    for (int i = 0; i < 4; i++) assert_true(rb_gguf_arr_int(kv, (uint64_t)i) == (int64_t)k_u32[i]);
    kv = rb_gguf_find_kv(g, "a.i32");
    for (int i = 0; i < 3; i++) assert_true(rb_gguf_arr_int(kv, (uint64_t)i) == k_i32[i]);
    kv = rb_gguf_find_kv(g, "a.f32");
    for (int i = 0; i < 3; i++) assert_true(rb_gguf_arr_float(kv, (uint64_t)i) == (double)k_f32[i]);
    assert_int_equal(rb_gguf_arr_int(kv, 0), 0); /* floats are not integers */
    kv = rb_gguf_find_kv(g, "a.bool");
    for (int i = 0; i < 5; i++) assert_int_equal(rb_gguf_arr_int(kv, (uint64_t)i), k_bool[i]);
    kv = rb_gguf_find_kv(g, "a.u64");
    assert_int_equal(rb_gguf_arr_int(kv, 0), 0); /* does not fit int64 */
    assert_int_equal(rb_gguf_arr_int(kv, 1), 1);
    assert_true(rb_gguf_arr_float(kv, 0) == 18446744073709551615.0);
    kv = rb_gguf_find_kv(g, "a.i64");
    for (int i = 0; i < 3; i++) assert_true(rb_gguf_arr_int(kv, (uint64_t)i) == k_i64[i]);
    assert_int_equal(rb_gguf_arr_int(kv, 3), 0); /* out of range */
    kv = rb_gguf_find_kv(g, "a.f64");
    for (int i = 0; i < 2; i++) assert_true(rb_gguf_arr_float(kv, (uint64_t)i) == k_f64[i]);
    kv = rb_gguf_find_kv(g, "a.str");
    for (int i = 0; i < 5; i++) assert_true(str_eq(rb_gguf_arr_str(kv, (uint64_t)i), k_strs[i]));
    assert_null(rb_gguf_arr_str(kv, 5).ptr);
    assert_null(rb_gguf_arr_str(rb_gguf_find_kv(g, "a.u8"), 0).ptr);
}

static void fill_random(tu_rng *r, uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(tu_rng_u64(r) >> 56);
}

static void roundtrip(size_t alignment, uint64_t seed) {
    tu_rng rng;
    tu_rng_seed(&rng, seed);
    rb_gguf_writer *w = NULL;
    TU_OK(rb_gguf_writer_create(&w, NULL));
    set_all_kvs(w);
    uint8_t *datas[N_T];
    for (size_t i = 0; i < N_T; i++) {
        size_t n = spec_bytes(&k_tensors[i]);
        datas[i] = malloc(n + 1);
        fill_random(&rng, datas[i], n);
        TU_OK(rb_gguf_writer_add_tensor(w, k_tensors[i].name, k_tensors[i].dtype, k_tensors[i].n_dims,
                                        k_tensors[i].ne, datas[i], n));
    }
    char path[128];
    rb_error err;
    if (rb_gguf_writer_write(w, tmp_path(path, sizeof path, "rt.gguf"), alignment, &err) != RB_OK)
        fail_msg("write: %s", err.msg);
    rb_gguf_writer_free(w);

    rb_gguf *g = NULL;
    if (rb_gguf_open(path, &g, &err) != RB_OK) fail_msg("reopen (alignment %zu): %s", alignment, err.msg);
    assert_int_equal(rb_gguf_version(g), 3);
    size_t want_align = alignment ? alignment : 32;
    assert_int_equal(rb_gguf_alignment(g), want_align);
    assert_int_equal(rb_gguf_n_kv(g), 27 + (want_align != 32 ? 1 : 0));
    if (want_align != 32) {
        uint32_t a;
        TU_OK(rb_gguf_get_u32(g, "general.alignment", &a));
        assert_int_equal(a, want_align);
    }
    check_all_kvs(g);
    assert_int_equal(rb_gguf_n_tensors(g), N_T);
    assert_int_equal(rb_gguf_data_offset(g) % want_align, 0);
    for (size_t i = 0; i < N_T; i++) {
        const rb_gguf_tensor_info *t = rb_gguf_tensor_at(g, (int64_t)i);
        assert_true(str_eq(t->name, k_tensors[i].name));
        assert_int_equal(t->dtype, k_tensors[i].dtype);
        assert_int_equal(t->n_dims, k_tensors[i].n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], k_tensors[i].ne[d]);
        assert_int_equal(t->nbytes, spec_bytes(&k_tensors[i]));
        assert_int_equal(t->offset % want_align, 0);
        assert_int_equal(((const uint8_t *)t->data - (const uint8_t *)rb_gguf_base(g)) % (ptrdiff_t)want_align, 0);
        if (t->nbytes) assert_memory_equal(t->data, datas[i], t->nbytes);
        free(datas[i]);
    }
    rb_gguf_close(g);
}

static void test_roundtrip_alignments(void **state) {
    (void)state;
    static const size_t aligns[] = {0, 32, 1, 8, 64, 4096};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) roundtrip(aligns[i], 1000 + i);
}

/* The writer's bytes equal a hand-spelled image of the same content. */
static void test_writer_bytes(void **state) {
    (void)state;
    rb_gguf_writer *w = NULL;
    TU_OK(rb_gguf_writer_create(&w, NULL));
    TU_OK(rb_gguf_writer_set_str(w, "general.architecture", "llama"));
    TU_OK(rb_gguf_writer_set_u32(w, "llama.block_count", 7));
    const float a[3] = {1.0f, -2.0f, 0.5f};
    const int64_t ne_a[1] = {3};
    const uint16_t b[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    const int64_t ne_b[2] = {5, 2};
    TU_OK(rb_gguf_writer_add_tensor(w, "a", RB_F32, 1, ne_a, a, sizeof a));
    TU_OK(rb_gguf_writer_add_tensor(w, "bb", RB_F16, 2, ne_b, b, sizeof b));
    char path[128];
    TU_OK(rb_gguf_writer_write(w, tmp_path(path, sizeof path, "bytes.gguf"), 0, NULL));
    rb_gguf_writer_free(w);

    gb e = {0};
    gb_header(&e, 3, 2, 2);
    gb_kv_str(&e, "general.architecture", "llama");
    gb_kv_u32(&e, "llama.block_count", 7);
    gb_tensor(&e, "a", 1, (const uint64_t[]){3}, 0, 0);
    gb_tensor(&e, "bb", 2, (const uint64_t[]){5, 2}, 1, 32);
    gb_pad(&e, 32);
    gb_bytes(&e, a, sizeof a);
    gb_pad(&e, 32);
    gb_bytes(&e, b, sizeof b);
    gb_pad(&e, 32);
    size_t n;
    uint8_t *got = tu_read_file(path, &n);
    assert_int_equal(n, e.len);
    assert_memory_equal(got, e.p, n);
    free(got);
    gb_free(&e);
}

/* tiny-f32.gguf re-written via copy_kv + add_tensor is byte-identical
 * (llama.cpp lays tensors out back to back, padded to 32). */
static void test_rewrite_fixture(void **state) {
    (void)state;
    char fx[1024], out[128];
    rb_gguf *src = NULL;
    TU_OK(rb_gguf_open(tu_fixture(fx, sizeof fx, "llamacpp/tiny-f32.gguf"), &src, NULL));
    rb_gguf_writer *w = NULL;
    TU_OK(rb_gguf_writer_create(&w, NULL));
    TU_OK(rb_gguf_writer_copy_kv(w, src, NULL));
    assert_int_equal(rb_gguf_writer_copy_kv(w, src, NULL), RB_E_INVALID); /* duplicates */
    for (int64_t i = 0; i < rb_gguf_n_tensors(src); i++) {
        const rb_gguf_tensor_info *t = rb_gguf_tensor_at(src, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        TU_OK(rb_gguf_writer_add_tensor(w, name, t->dtype, t->n_dims, t->ne, t->data, t->nbytes));
    }
    TU_OK(rb_gguf_writer_write(w, tmp_path(out, sizeof out, "copy.gguf"), 0, NULL));
    rb_gguf_writer_free(w);
    size_t n1, n2;
    uint8_t *a = tu_read_file(fx, &n1), *b = tu_read_file(out, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    free(a);
    free(b);

    /* Skipping a prefix drops exactly those keys. */
    TU_OK(rb_gguf_writer_create(&w, NULL));
    TU_OK(rb_gguf_writer_copy_kv(w, src, "tokenizer."));
    TU_OK(rb_gguf_writer_set_u32(w, "tokenizer.extra", 5));
    TU_OK(rb_gguf_writer_write(w, out, 64, NULL));
    rb_gguf_writer_free(w);
    rb_gguf *g = NULL;
    TU_OK(rb_gguf_open(out, &g, NULL));
    assert_int_equal(rb_gguf_n_tensors(g), 0);
    assert_int_equal(rb_gguf_alignment(g), 64); /* copied general.alignment was rewritten */
    int64_t kept = 0;
    for (int64_t i = 0; i < rb_gguf_n_kv(src); i++) {
        const rb_gguf_kv *kv = rb_gguf_kv_at(src, i);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        const rb_gguf_kv *got = rb_gguf_find_kv(g, key);
        if (strncmp(key, "tokenizer.", 10) == 0) {
            assert_null(got);
            continue;
        }
        kept++;
        assert_non_null(got);
        assert_int_equal(got->type, kv->type);
        if (kv->type == RB_GGUF_STRING) {
            const rb_gguf_str *x = kv->data, *y = got->data;
            assert_int_equal(x->len, y->len);
            assert_memory_equal(x->ptr, y->ptr, x->len);
        } else if (strcmp(key, "general.alignment") != 0) {
            assert_true(kv->type == RB_GGUF_UINT32 || kv->type == RB_GGUF_FLOAT32);
            assert_memory_equal(kv->data, got->data, 4);
        }
    }
    assert_int_equal(kept, 14);
    assert_int_equal(rb_gguf_n_kv(g), kept + 1);
    rb_gguf_close(g);
    rb_gguf_close(src);
}

static void test_writer_rejects(void **state) {
    (void)state;
    rb_gguf_writer *w = NULL;
    TU_OK(rb_gguf_writer_create(&w, NULL));
    TU_OK(rb_gguf_writer_set_u32(w, "k", 1));
    assert_int_equal(rb_gguf_writer_set_u32(w, "k", 2), RB_E_INVALID);
    assert_int_equal(rb_gguf_writer_set_str(w, "k", "x"), RB_E_INVALID);
    assert_int_equal(rb_gguf_writer_set_u32(w, "", 2), RB_E_INVALID);
    assert_int_equal(rb_gguf_writer_set_u32(w, NULL, 2), RB_E_INVALID);
    assert_int_equal(rb_gguf_writer_set_str(w, "s", NULL), RB_E_INVALID);
    assert_int_equal(rb_gguf_writer_set_arr(w, "arr", RB_GGUF_STRING, k_strs, 2), RB_E_INVALID);
    assert_int_equal(rb_gguf_writer_set_arr(w, "arr", RB_GGUF_ARRAY, k_u8, 2), RB_E_INVALID);
    assert_int_equal(rb_gguf_writer_set_arr(w, "arr", RB_GGUF_UINT8, NULL, 2), RB_E_INVALID);
    const char *with_null[] = {"a", NULL};
    assert_int_equal(rb_gguf_writer_set_arr_str(w, "arr", with_null, 2), RB_E_INVALID);
    float d[64] = {0.5f};
    const int64_t ne[4] = {32, 2, 1, 1};
    TU_OK(rb_gguf_writer_add_tensor(w, "t", RB_F32, 2, ne, d, 256));
    assert_int_equal(rb_gguf_writer_add_tensor(w, "t", RB_F32, 2, ne, d, 256), RB_E_INVALID);  /* dup */
    assert_int_equal(rb_gguf_writer_add_tensor(w, "u", RB_F32, 2, ne, d, 255), RB_E_INVALID);  /* size */
    assert_int_equal(rb_gguf_writer_add_tensor(w, "u", RB_F32, 0, ne, d, 128), RB_E_INVALID);  /* n_dims */
    assert_int_equal(rb_gguf_writer_add_tensor(w, "u", RB_F32, 5, ne, d, 256), RB_E_INVALID);
    assert_int_equal(rb_gguf_writer_add_tensor(w, "u", (rb_dtype)4, 1, ne, d, 128), RB_E_INVALID);
    const int64_t ne_q[1] = {48}; /* not a whole number of q4_0 blocks */
    assert_int_equal(rb_gguf_writer_add_tensor(w, "u", RB_Q4_0, 1, ne_q, d, 27), RB_E_INVALID);
    const int64_t ne_neg[2] = {32, -1};
    assert_int_equal(rb_gguf_writer_add_tensor(w, "u", RB_F32, 2, ne_neg, d, 0), RB_E_INVALID);
    const int64_t ne_huge[4] = {1ll << 40, 1ll << 40, 1ll << 40, 1};
    assert_int_equal(rb_gguf_writer_add_tensor(w, "u", RB_F32, 3, ne_huge, d, 0), RB_E_RANGE);
    rb_error err;
    char path[128];
    assert_int_equal(rb_gguf_writer_write(w, tmp_path(path, sizeof path, "bad.gguf"), 3, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "alignment"));
    assert_int_equal(rb_gguf_writer_write(w, "/nonexistent-dir/x.gguf", 0, &err), RB_E_IO);
    assert_non_null(strstr(err.msg, "nonexistent-dir"));
    /* What was accepted still writes and reads back. */
    TU_OK(rb_gguf_writer_write(w, path, 0, NULL));
    rb_gguf *g = NULL;
    TU_OK(rb_gguf_open(path, &g, NULL));
    assert_int_equal(rb_gguf_n_kv(g), 1);
    assert_int_equal(rb_gguf_n_tensors(g), 1);
    assert_true(((const float *)rb_gguf_find_tensor(g, "t")->data)[0] == 0.5f);
    rb_gguf_close(g);
    rb_gguf_writer_free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_alignments),
        cmocka_unit_test(test_writer_bytes),
        cmocka_unit_test(test_rewrite_fixture),
        cmocka_unit_test(test_writer_rejects),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

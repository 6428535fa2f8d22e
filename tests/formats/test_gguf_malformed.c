/* Malformed and hostile GGUF images: truncation at every header byte, huge
 * counts and lengths, bad type ids, bad shapes, bad offsets, bad alignment,
 * duplicates, bad magic and versions. Each must fail with RB_E_FORMAT and a
 * message naming the problem, never crash or over-read (images are copied to
 * exact-size buffers so the sanitizer build catches any over-read). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_builder.h"
#include "rbee/gguf.h"
#include "testutil.h"

/* Opens the first len bytes of img from an exact-size copy. */
static rb_status open_exact(const void *img, size_t len, rb_error *err) {
    void *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len) memcpy(copy, img, len);
    rb_gguf *g = (rb_gguf *)1;
    err->msg[0] = '\0';
    rb_status st = rb_gguf_open_memory(copy, len, &g, err);
    if (st == RB_OK) {
        /* Walk everything the API exposes. */
        for (int64_t i = 0; i < rb_gguf_n_kv(g); i++) {
            const rb_gguf_kv *kv = rb_gguf_kv_at(g, i);
            if (kv->type == RB_GGUF_ARRAY)
                for (uint64_t j = 0; j < kv->arr_len; j++) {
                    (void)rb_gguf_arr_str(kv, j);
                    (void)rb_gguf_arr_int(kv, j);
                    (void)rb_gguf_arr_float(kv, j);
                }
        }
        volatile uint8_t sink = 0;
        for (int64_t i = 0; i < rb_gguf_n_tensors(g); i++) {
            const rb_gguf_tensor_info *t = rb_gguf_tensor_at(g, i);
            if (t->nbytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
        }
        (void)sink;
        rb_gguf_close(g);
    } else {
        assert_null(g);
    }
    free(copy);
    return st;
}

static void expect_format_(const gb *b, const char *needle, const char *needle2, int line) {
    rb_error err;
    rb_status st = open_exact(b->p, b->len, &err);
    if (st != RB_E_FORMAT) fail_msg("line %d: expected RB_E_FORMAT, got %s (%s)", line, rb_status_str(st), err.msg);
    if (!strstr(err.msg, needle)) fail_msg("line %d: message '%s' lacks '%s'", line, err.msg, needle);
    if (needle2 && !strstr(err.msg, needle2)) fail_msg("line %d: message '%s' lacks '%s'", line, err.msg, needle2);
}
#define expect_format(b, needle, needle2) expect_format_(b, needle, needle2, __LINE__)

static void expect_ok_(const gb *b, int line) {
    rb_error err;
    rb_status st = open_exact(b->p, b->len, &err);
    if (st != RB_OK) fail_msg("line %d: expected OK, got %s (%s)", line, rb_status_str(st), err.msg);
}
#define expect_ok(b) expect_ok_(b, __LINE__)

/* A valid image: two kvs, then n tensor infos given by the caller, then
 * 256 bytes of data. */
static void start(gb *b, uint64_t n_tensors, uint64_t n_kv) {
    b->len = 0;
    gb_header(b, 3, n_tensors, n_kv);
}
static void finish(gb *b) {
    gb_pad(b, 32);
    for (int i = 0; i < 256; i++) gb_u8(b, (uint8_t)(i * 7 + 1));
}

static const uint64_t k_ne16[1] = {16};

static void test_truncate_every_header_byte(void **state) {
    (void)state;
    char path[1024];
    size_t size;
    uint8_t *img = tu_read_file(tu_fixture(path, sizeof path, "llamacpp/tiny-q4_0.gguf"), &size);
    rb_error err;
    assert_int_equal(open_exact(img, size, &err), RB_OK);
    const size_t header = 7936; /* data section offset of this file */
    for (size_t len = 0; len < header + 64; len++) {
        rb_status st = open_exact(img, len, &err);
        if (st != RB_E_FORMAT || err.msg[0] == '\0')
            fail_msg("truncated at %zu: %s '%s'", len, rb_status_str(st), err.msg);
        if (len >= 24 && len < header - 32 && !strstr(err.msg, "truncated") && !strstr(err.msg, "exceeds") &&
            !strstr(err.msg, "impossible"))
            fail_msg("truncated at %zu: unexpected message '%s'", len, err.msg);
    }
    for (size_t len = header + 64; len < size; len += 4099) {
        assert_int_equal(open_exact(img, len, &err), RB_E_FORMAT);
        assert_non_null(strstr(err.msg, "tensor"));
        assert_non_null(strstr(err.msg, "outside the data section"));
    }
    assert_int_equal(open_exact(img, size - 1, &err), RB_E_FORMAT);
    free(img);
}

static void test_magic_and_version(void **state) {
    (void)state;
    gb b = {0};
    start(&b, 0, 0);
    expect_ok(&b);
    b.p[3] = 'G';
    expect_format(&b, "magic", NULL);
    start(&b, 0, 0);
    b.p[4] = 1;
    expect_format(&b, "version 1", NULL);
    b.p[4] = 4;
    expect_format(&b, "version 4", NULL);
    b.p[4] = 2;
    expect_ok(&b);
    b.p[4] = 0;
    b.p[7] = 3; /* version written big-endian */
    expect_format(&b, "big-endian", NULL);
    gb_free(&b);
    rb_error err;
    assert_int_equal(open_exact("GG", 2, &err), RB_E_FORMAT);
    assert_int_equal(open_exact("", 0, &err), RB_E_FORMAT);
}

static void test_hostile_counts(void **state) {
    (void)state;
    gb b = {0};
    start(&b, 0, 1ull << 60);
    gb_kv_u32(&b, "a", 1);
    expect_format(&b, "kv count", NULL);
    start(&b, 0, 1ull << 28); /* would be ~10 GB of entries */
    gb_kv_u32(&b, "a", 1);
    expect_format(&b, "kv count", NULL);
    start(&b, 1ull << 60, 0);
    expect_format(&b, "tensor count", NULL);
    start(&b, UINT64_MAX, UINT64_MAX);
    expect_format(&b, "count", NULL);
    /* Key string length huge. */
    start(&b, 0, 1);
    gb_u64(&b, 1ull << 63);
    gb_bytes(&b, "abcdefgh", 8);
    gb_u32(&b, 4);
    gb_u32(&b, 1);
    expect_format(&b, "length", "kv #0");
    /* String value length huge. */
    start(&b, 0, 1);
    gb_str(&b, "s.key");
    gb_u32(&b, 8);
    gb_u64(&b, UINT64_MAX);
    gb_u64(&b, 0);
    expect_format(&b, "s.key", "length");
    /* Array lengths huge: numeric and string elements. */
    start(&b, 0, 1);
    gb_str(&b, "arr.key");
    gb_u32(&b, 9);
    gb_u32(&b, 4);
    gb_u64(&b, 1ull << 62);
    gb_u64(&b, 0);
    expect_format(&b, "arr.key", "array length");
    start(&b, 0, 1);
    gb_str(&b, "arr.key");
    gb_u32(&b, 9);
    gb_u32(&b, 8);
    gb_u64(&b, 1ull << 40);
    gb_str(&b, "x");
    expect_format(&b, "arr.key", "array length");
    /* A string element longer than what is left. */
    start(&b, 0, 1);
    gb_str(&b, "arr.key");
    gb_u32(&b, 9);
    gb_u32(&b, 8);
    gb_u64(&b, 2);
    gb_str(&b, "ok");
    gb_u64(&b, 1000);
    gb_bytes(&b, "short", 5);
    expect_format(&b, "arr.key", "element 1");
    /* Tensor name length huge. */
    start(&b, 1, 0);
    gb_u64(&b, 1ull << 50);
    gb_bytes(&b, "name", 4);
    for (int i = 0; i < 8; i++) gb_u32(&b, 0);
    expect_format(&b, "tensor #0", "length");
    gb_free(&b);
}

static void test_bad_type_ids(void **state) {
    (void)state;
    gb b = {0};
    static const uint32_t bad[] = {13, 100, 0xffffffffu};
    for (size_t i = 0; i < 3; i++) {
        start(&b, 0, 1);
        gb_str(&b, "my.key");
        gb_u32(&b, bad[i]);
        gb_u32(&b, 0);
        gb_u64(&b, 0);
        expect_format(&b, "my.key", "invalid value type");
        start(&b, 0, 1);
        gb_str(&b, "my.arr");
        gb_u32(&b, 9);
        gb_u32(&b, bad[i]);
        gb_u64(&b, 0);
        expect_format(&b, "my.arr", "invalid element type");
    }
    start(&b, 0, 1); /* arrays of arrays */
    gb_str(&b, "nested");
    gb_u32(&b, 9);
    gb_u32(&b, 9);
    gb_u64(&b, 1);
    gb_u32(&b, 4);
    gb_u64(&b, 1);
    gb_u32(&b, 7);
    expect_format(&b, "nested", "arrays of arrays");
    start(&b, 0, 1); /* empty key */
    gb_str(&b, "");
    gb_u32(&b, 4);
    gb_u32(&b, 1);
    expect_format(&b, "empty key", NULL);
    /* Tensor dtype ids that are not types: 4 and 5 (removed q4_2/q4_3), 31,
     * ggml formats not read (34 tq1_0, 35 tq2_0), huge. */
    static const uint32_t bad_dt[] = {4, 5, 31, 34, 35, 1000, 0xffffffffu};
    for (size_t i = 0; i < sizeof bad_dt / sizeof bad_dt[0]; i++) {
        start(&b, 1, 0);
        gb_tensor(&b, "tt", 1, k_ne16, bad_dt[i], 0);
        finish(&b);
        expect_format(&b, "'tt'", "unknown type id");
    }
    /* a known block type (23 = iq4_xs) with a row that is not whole blocks */
    start(&b, 1, 0);
    gb_tensor(&b, "tt", 1, k_ne16, 23, 0);
    finish(&b);
    expect_format(&b, "'tt'", "not a multiple of the iq4_xs block size 256");
    start(&b, 1, 0); /* and 16 = iq2_xxs, read now */
    gb_tensor(&b, "tt", 1, k_ne16, 16, 0);
    finish(&b);
    expect_format(&b, "'tt'", "not a multiple of the iq2_xxs block size 256");
    /* and 19 = iq1_s, 22 = iq2_s, 29 = iq1_m, read now */
    static const struct {
        uint32_t id;
        const char *msg;
    } low[] = {{19, "not a multiple of the iq1_s block size 256"},
               {22, "not a multiple of the iq2_s block size 256"},
               {29, "not a multiple of the iq1_m block size 256"}};
    for (size_t i = 0; i < sizeof low / sizeof low[0]; i++) {
        start(&b, 1, 0);
        gb_tensor(&b, "tt", 1, k_ne16, low[i].id, 0);
        finish(&b);
        expect_format(&b, "'tt'", low[i].msg);
    }
    start(&b, 1, 0); /* positive control for the above */
    gb_tensor(&b, "tt", 1, k_ne16, 0, 0);
    finish(&b);
    expect_ok(&b);
    gb_free(&b);
}

static void test_bad_shapes(void **state) {
    (void)state;
    gb b = {0};
    const uint64_t ne5[5] = {1, 1, 1, 1, 1};
    start(&b, 1, 0);
    gb_tensor(&b, "t0", 0, ne5, 0, 0);
    finish(&b);
    expect_format(&b, "'t0'", "n_dims 0");
    start(&b, 1, 0);
    gb_tensor(&b, "t5", 5, ne5, 0, 0);
    finish(&b);
    expect_format(&b, "'t5'", "n_dims 5");
    start(&b, 1, 0);
    gb_tensor(&b, "t4", 4, ne5, 0, 0); /* 4 is fine */
    finish(&b);
    expect_ok(&b);
    const uint64_t big[3] = {1ull << 32, 1ull << 32, 1ull << 32};
    start(&b, 1, 0);
    gb_tensor(&b, "ovf", 3, big, 0, 0);
    finish(&b);
    expect_format(&b, "'ovf'", "overflows");
    const uint64_t big2[2] = {1ull << 62, 4}; /* elements fit int64 barely not; bytes would not */
    start(&b, 1, 0);
    gb_tensor(&b, "ovf2", 2, big2, 0, 0);
    finish(&b);
    expect_format(&b, "'ovf2'", "overflows");
    const uint64_t bytes_ovf[1] = {1ull << 62}; /* elements fit, f32 bytes overflow 64 bits */
    start(&b, 1, 0);
    gb_tensor(&b, "ovf3", 1, bytes_ovf, 0, 0);
    finish(&b);
    expect_format(&b, "'ovf3'", "overflows");
    const uint64_t neg[2] = {16, UINT64_MAX};
    start(&b, 1, 0);
    gb_tensor(&b, "neg", 2, neg, 0, 0);
    finish(&b);
    expect_format(&b, "'neg'", "negative");
    const uint64_t ne33[1] = {33};
    start(&b, 1, 0);
    gb_tensor(&b, "q", 1, ne33, 2 /* q4_0 */, 0);
    finish(&b);
    expect_format(&b, "'q'", "block size");
    const uint64_t ne64[1] = {64};
    start(&b, 1, 0);
    gb_tensor(&b, "q", 1, ne64, 2, 0); /* 2 blocks of 18 bytes: fine */
    finish(&b);
    expect_ok(&b);
    const uint64_t zero[2] = {0, 7};
    start(&b, 2, 0); /* zero-size tensors overlap nothing */
    gb_tensor(&b, "z", 2, zero, 0, 0);
    gb_tensor(&b, "f", 1, k_ne16, 0, 0);
    finish(&b);
    expect_ok(&b);
    gb_free(&b);
}

static void test_bad_offsets(void **state) {
    (void)state;
    gb b = {0};
    start(&b, 1, 0);
    gb_tensor(&b, "mis", 1, k_ne16, 0, 4);
    finish(&b);
    expect_format(&b, "'mis'", "alignment");
    start(&b, 2, 0);
    gb_tensor(&b, "a", 1, k_ne16, 0, 0);
    gb_tensor(&b, "b", 1, k_ne16, 0, 32); /* a covers [0, 64) */
    finish(&b);
    expect_format(&b, "overlaps", "'a'");
    start(&b, 2, 0);
    gb_tensor(&b, "a", 1, k_ne16, 0, 64);
    gb_tensor(&b, "b", 1, k_ne16, 0, 0); /* adjacent, reverse order: fine */
    finish(&b);
    expect_ok(&b);
    start(&b, 1, 0);
    gb_tensor(&b, "far", 1, k_ne16, 0, 1ull << 40);
    finish(&b);
    expect_format(&b, "'far'", "outside the data section");
    start(&b, 1, 0);
    gb_tensor(&b, "end", 1, k_ne16, 0, 224); /* [224, 288) of 256 bytes */
    finish(&b);
    expect_format(&b, "'end'", "outside the data section");
    start(&b, 1, 0);
    gb_tensor(&b, "wrap", 1, k_ne16, 0, UINT64_MAX - 31); /* offset + size wraps */
    finish(&b);
    expect_format(&b, "'wrap'", "outside the data section");
    start(&b, 1, 0);
    gb_tensor(&b, "last", 1, k_ne16, 0, 192); /* exactly the last 64 bytes */
    finish(&b);
    expect_ok(&b);
    gb_free(&b);
}

static void test_alignment_key(void **state) {
    (void)state;
    gb b = {0};
    static const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < 4; i++) {
        start(&b, 0, 1);
        gb_kv_u32(&b, "general.alignment", bad[i]);
        expect_format(&b, "general.alignment", "power of two");
    }
    start(&b, 0, 1);
    gb_str(&b, "general.alignment");
    gb_u32(&b, 10); /* uint64: wrong type */
    gb_u64(&b, 32);
    expect_format(&b, "general.alignment", "uint32");
    /* alignment 64: a tensor at offset 32 is misaligned, at 64 it is fine;
     * the data section starts at a multiple of 64. */
    start(&b, 1, 1);
    gb_kv_u32(&b, "general.alignment", 64);
    gb_tensor(&b, "t", 1, k_ne16, 0, 32);
    finish(&b);
    expect_format(&b, "'t'", "alignment 64");
    start(&b, 1, 1);
    gb_kv_u32(&b, "general.alignment", 64);
    gb_tensor(&b, "t", 1, k_ne16, 0, 64);
    gb_pad(&b, 64);
    for (int i = 0; i < 128; i++) gb_u8(&b, (uint8_t)i);
    rb_gguf *g = NULL;
    TU_OK(rb_gguf_open_memory(b.p, b.len, &g, NULL));
    assert_int_equal(rb_gguf_alignment(g), 64);
    assert_int_equal(rb_gguf_data_offset(g) % 64, 0);
    assert_int_equal(((const uint8_t *)rb_gguf_tensor_at(g, 0)->data)[0], 64);
    rb_gguf_close(g);
    gb_free(&b);
}

static void test_duplicates(void **state) {
    (void)state;
    gb b = {0};
    start(&b, 0, 2);
    gb_kv_u32(&b, "dup.key", 1);
    gb_kv_str(&b, "dup.key", "x");
    expect_format(&b, "duplicate key", "dup.key");
    start(&b, 2, 0);
    gb_tensor(&b, "same", 1, k_ne16, 0, 0);
    gb_tensor(&b, "same", 1, k_ne16, 0, 64);
    finish(&b);
    expect_format(&b, "duplicate tensor name", "same");
    start(&b, 0, 2); /* a key that is a prefix of the other is not a duplicate */
    gb_kv_u32(&b, "k", 1);
    gb_kv_u32(&b, "k2", 2);
    expect_ok(&b);
    gb_free(&b);
}

/* Random byte corruption of a small valid image: any outcome but a crash or
 * an over-read (checked by the sanitizer build) is acceptable; status must be
 * OK or FORMAT with a message. */
static void test_random_corruption(void **state) {
    (void)state;
    gb b = {0};
    start(&b, 3, 4);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "general.alignment", 32);
    gb_str(&b, "tok");
    gb_u32(&b, 9);
    gb_u32(&b, 8);
    gb_u64(&b, 3);
    gb_str(&b, "a");
    gb_str(&b, "bc");
    gb_str(&b, "");
    gb_str(&b, "arr");
    gb_u32(&b, 9);
    gb_u32(&b, 6);
    gb_u64(&b, 2);
    gb_u32(&b, 0x3f800000u);
    gb_u32(&b, 0x40000000u);
    const uint64_t ne2[2] = {8, 2};
    gb_tensor(&b, "x", 2, ne2, 0, 0);
    gb_tensor(&b, "y", 1, k_ne16, 1, 64);
    gb_tensor(&b, "z", 1, k_ne16, 0, 128);
    finish(&b);
    expect_ok(&b);
    tu_rng r;
    tu_rng_seed(&r, 77);
    uint8_t *work = malloc(b.len);
    int n_ok = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(work, b.p, b.len);
        int flips = 1 + (int)(tu_rng_u64(&r) % 4);
        for (int f = 0; f < flips; f++) {
            size_t pos = (size_t)(tu_rng_u64(&r) % (b.len - 256)); /* header region */
            work[pos] = (uint8_t)tu_rng_u64(&r);
        }
        size_t len = b.len - (size_t)(tu_rng_u64(&r) % 2) * (size_t)(tu_rng_u64(&r) % b.len);
        rb_error err;
        rb_status st = open_exact(work, len, &err);
        if (st == RB_OK) n_ok++;
        else if (st != RB_E_FORMAT || !err.msg[0]) fail_msg("iteration %d: %s '%s'", it, rb_status_str(st), err.msg);
    }
    assert_true(n_ok > 0 && n_ok < 20000);
    free(work);
    gb_free(&b);
}

static void test_api_misuse(void **state) {
    (void)state;
    rb_error err;
    assert_int_equal(rb_gguf_open_memory("GGUF", 4, NULL, &err), RB_E_INVALID);
    rb_gguf *g = NULL;
    assert_int_equal(rb_gguf_open_memory(NULL, 10, &g, &err), RB_E_INVALID);
    assert_int_equal(rb_gguf_n_kv(NULL), 0);
    assert_null(rb_gguf_find_kv(NULL, "x"));
    assert_null(rb_gguf_find_tensor(NULL, "x"));
    assert_int_equal(rb_gguf_arr_int(NULL, 0), 0);
    assert_null(rb_gguf_arr_str(NULL, 0).ptr);
    rb_gguf_close(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncate_every_header_byte),
        cmocka_unit_test(test_magic_and_version),
        cmocka_unit_test(test_hostile_counts),
        cmocka_unit_test(test_bad_type_ids),
        cmocka_unit_test(test_bad_shapes),
        cmocka_unit_test(test_bad_offsets),
        cmocka_unit_test(test_alignment_key),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_random_corruption),
        cmocka_unit_test(test_api_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

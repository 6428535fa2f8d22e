/* Regressions found by fuzz_tokenizer_json (tests/fuzz), each on the
 * smallest tokenizer.json that shows it, with the expected result written
 * out by hand from HF tokenizers' documented semantics. */
#include "testutil.h"

#include "rbee/tokenizer.h"

#include <stdlib.h>
#include <string.h>

static rb_tokenizer *load(const char *json) {
    rb_tokenizer *t = NULL;
    rb_error e;
    if (rb_tokenizer_load_hf_memory(json, strlen(json), NULL, 0, &t, &e) != RB_OK) fail_msg("load: %s", e.msg);
    return t;
}

/* The streamed pieces of ids, concatenated. */
static char *stream_all(const rb_tokenizer *t, const int32_t *ids, size_t n) {
    rb_tokenizer_stream *s = NULL;
    rb_error e;
    TU_OK(rb_tokenizer_stream_create(t, 0, &s, &e));
    char *acc = calloc(1, 256);
    assert_non_null(acc);
    size_t at = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *p = NULL;
        size_t len = 0;
        if (i < n) TU_OK(rb_tokenizer_stream_push(s, ids[i], &p, &len, &e));
        else TU_OK(rb_tokenizer_stream_flush(s, &p, &len, &e));
        assert_true(at + len < 256);
        memcpy(acc + at, p, len);
        at += len;
    }
    rb_tokenizer_stream_free(s);
    return acc;
}

/* A Strip decoder that removes up to 5 leading spaces strips them from the
 * start of the whole text only (Fuse makes one piece of it). Streaming used
 * to lose a space after "<s>": the context " " alone decoded to nothing, so
 * the next window "  " was stripped anew. */
static void test_stream_multi_strip(void **state) {
    (void)state;
    rb_tokenizer *t = load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u2581\":0,\"a\":1,\"<s>\":2},\"merges\":[]},"
                           "\"added_tokens\":[{\"id\":2,\"content\":\"<s>\",\"special\":true}],"
                           "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":"
                           "{\"String\":\"\\u2581\"},\"content\":\" \"},{\"type\":\"Fuse\"},{\"type\":\"Strip\","
                           "\"content\":\" \",\"start\":5,\"stop\":0}]}}");
    const int32_t ids[] = {0, 1, 2, 0, 0, 1, 0};
    char *full = NULL;
    size_t len = 0;
    rb_error e;
    TU_OK(rb_tokenizer_decode(t, ids, 7, 0, &full, &len, &e));
    assert_string_equal(full, "a<s>  a ");
    char *streamed = stream_all(t, ids, 7);
    assert_string_equal(streamed, full);
    /* the text start is stripped up to 5 spaces in both */
    const int32_t lead[] = {0, 0, 0, 1};
    free(full);
    free(streamed);
    TU_OK(rb_tokenizer_decode(t, lead, 4, 0, &full, &len, &e));
    assert_string_equal(full, "a");
    streamed = stream_all(t, lead, 4);
    assert_string_equal(streamed, "a");
    free(full);
    free(streamed);
    rb_tokenizer_free(t);
}

/* Strip with start 1 and stop 1 (trailing spaces of the whole text): a
 * space that ended one push was held back and then stripped as if it began
 * the next window's text. The stream now holds trailing spaces until more
 * text comes (then they are text) or it ends (then they are dropped). */
static void test_stream_trailing_strip(void **state) {
    (void)state;
    rb_tokenizer *t = load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u2581\":0,\"a\":1,\"</s>\":2},\"merges\":[]},"
                           "\"added_tokens\":[{\"id\":2,\"content\":\"</s>\",\"special\":true}],"
                           "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":"
                           "{\"String\":\"\\u2581\"},\"content\":\" \"},{\"type\":\"Fuse\"},{\"type\":\"Strip\","
                           "\"content\":\" \",\"start\":1,\"stop\":1}]}}");
    struct { int32_t ids[8]; size_t n; const char *want; } cases[] = {
        {{0, 1, 2, 2, 0, 1}, 6, "a</s></s> a"},
        {{1, 0, 0}, 3, "a "},     /* one trailing space stripped, the other kept */
        {{0, 0, 1, 0}, 4, " a"},  /* one leading space stripped */
        {{0}, 1, ""},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char *full = NULL;
        size_t len = 0;
        rb_error e;
        TU_OK(rb_tokenizer_decode(t, cases[c].ids, cases[c].n, 0, &full, &len, &e));
        assert_string_equal(full, cases[c].want);
        char *streamed = stream_all(t, cases[c].ids, cases[c].n);
        assert_string_equal(streamed, cases[c].want);
        free(full);
        free(streamed);
    }
    rb_tokenizer_free(t);
}

/* After the tokens are joined (Fuse, ByteLevel) only Strip steps can be
 * streamed: a Replace of "ab" there could match across two pushes. Such
 * chains are refused when the tokenizer loads. */
static void test_steps_after_fuse_refused(void **state) {
    (void)state;
    const char *json = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]},"
                       "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":"
                       "\"Replace\",\"pattern\":{\"String\":\"ab\"},\"content\":\"Z\"}]}}";
    rb_tokenizer *t = NULL;
    rb_error e;
    assert_int_equal(rb_tokenizer_load_hf_memory(json, strlen(json), NULL, 0, &t, &e), RB_E_UNSUPPORTED);
    assert_null(t);
    assert_non_null(strstr(e.msg, "only Strip steps may follow"));
}

/* Found while fuzzing the loader: ids may reach 2^27, and a 60-byte file
 * with one token of id 134217727 made the per-id tables take 3 GB and a
 * minute to fill. Holes are now bounded by the number of tokens. */
static void test_sparse_ids_bounded(void **state) {
    (void)state;
    const char *huge = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":134217727},\"merges\":[]}}";
    rb_tokenizer *t = NULL;
    rb_error e;
    assert_int_equal(rb_tokenizer_load_hf_memory(huge, strlen(huge), NULL, 0, &t, &e), RB_E_FORMAT);
    assert_null(t);
    assert_non_null(strstr(e.msg, "too sparse"));
    const char *added = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                        "\"added_tokens\":[{\"id\":99999999,\"content\":\"<x>\",\"special\":true}]}";
    assert_int_equal(rb_tokenizer_load_hf_memory(added, strlen(added), NULL, 0, &t, &e), RB_E_FORMAT);
    /* a few holes, as sparse real vocabularies have, still load */
    const char *holes = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":5000},\"merges\":[]}}";
    TU_OK(rb_tokenizer_load_hf_memory(holes, strlen(holes), NULL, 0, &t, &e));
    assert_int_equal(rb_tokenizer_n_vocab(t), 5001);
    int32_t *ids = NULL;
    size_t n = 0;
    TU_OK(rb_tokenizer_encode(t, "ba", 2, 0, &ids, &n, &e));
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 5000);
    assert_int_equal(ids[1], 0);
    free(ids);
    rb_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_multi_strip),
        cmocka_unit_test(test_stream_trailing_strip),
        cmocka_unit_test(test_steps_after_fuse_refused),
        cmocka_unit_test(test_sparse_ids_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

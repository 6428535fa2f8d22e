/* rb_tokenizer_encode_plain on a small hand-written tokenizer: special
 * tokens are matched only where none of their bytes is in a plain range
 * (request text of a chat prompt), while everything else (non-special added
 * tokens, BPE merges across a range edge, lstrip, the normalized-token pass)
 * behaves as rb_tokenizer_encode; bad ranges are refused. Expected ids are
 * written out by hand from the vocabulary below. */
#include "testutil.h"

#include "rbee/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Characters a..y are ids 0.. in VOCAB order; "ab" (the one merge) is 40.
 * Added: <|end|> special 100, <tool> non-special 101, <ls> special with
 * lstrip 102, @n@ special normalized 103. No pre-tokenizer: a piece between
 * added tokens is one BPE word, so a merge across a range edge shows. */
static const char VOCAB[] = "abdelnorsty<|>@ ";
enum { AB = 40, END = 100, TOOL = 101, LS = 102, NORM = 103 };

static int32_t ch(char c) { return (int32_t)(strchr(VOCAB, c) - VOCAB); }

static rb_tokenizer *make_tokenizer(void) {
    char json[2048];
    size_t o = 0;
    o += (size_t)snprintf(json + o, sizeof json - o, "{\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (size_t i = 0; VOCAB[i]; i++) o += (size_t)snprintf(json + o, sizeof json - o, "\"%c\":%zu,", VOCAB[i], i);
    o += (size_t)snprintf(json + o, sizeof json - o,
                          "\"ab\":%d},\"merges\":[\"a b\"],\"byte_fallback\":false,\"fuse_unk\":false},"
                          "\"added_tokens\":["
                          "{\"id\":100,\"content\":\"<|end|>\",\"special\":true},"
                          "{\"id\":101,\"content\":\"<tool>\",\"special\":false,\"normalized\":false},"
                          "{\"id\":102,\"content\":\"<ls>\",\"special\":true,\"lstrip\":true},"
                          "{\"id\":103,\"content\":\"@n@\",\"special\":true,\"normalized\":true}]}",
                          AB);
    rb_tokenizer *t = NULL;
    rb_error e;
    if (rb_tokenizer_load_hf_memory(json, o, NULL, 0, &t, &e) != RB_OK) fail_msg("load: %s", e.msg);
    return t;
}

/* Encodes text with the plain ranges and compares with want. */
static void expect(const rb_tokenizer *t, const char *text, unsigned flags, const rb_text_range *r, size_t nr,
                   const int32_t *want, size_t n_want) {
    int32_t *ids = NULL;
    size_t n = 0;
    rb_error e;
    if (rb_tokenizer_encode_plain(t, text, strlen(text), flags, r, nr, &ids, &n, &e) != RB_OK)
        fail_msg("encode_plain(%s): %s", text, e.msg);
    if (n != n_want || memcmp(ids, want, n * sizeof *ids) != 0) {
        fprintf(stderr, "%s: got", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
        fail_msg("encode_plain(%s): wrong ids (%zu, want %zu)", text, n, n_want);
    }
    free(ids);
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void test_special_only_outside_plain(void **state) {
    (void)state;
    rb_tokenizer *t = make_tokenizer();
    const unsigned P = RB_TOK_PARSE_SPECIAL;
    /* "d<|end|>s": bytes 1..8 are the special token */
    const int32_t matched[] = {ch('d'), END, ch('s')};
    const int32_t text_ids[] = {ch('d'), ch('<'), ch('|'), ch('e'), ch('n'), ch('d'), ch('|'), ch('>'), ch('s')};
    expect(t, "d<|end|>s", P, NULL, 0, matched, N(matched));
    const rb_text_range all[] = {{0, 9}}, inside[] = {{1, 8}}, before[] = {{0, 1}}, after[] = {{8, 9}};
    const rb_text_range tail[] = {{5, 9}}, head[] = {{0, 2}}, one_byte[] = {{4, 5}}, two[] = {{0, 1}, {8, 9}};
    expect(t, "d<|end|>s", P, all, 1, text_ids, N(text_ids));
    expect(t, "d<|end|>s", P, inside, 1, text_ids, N(text_ids));
    expect(t, "d<|end|>s", P, before, 1, matched, N(matched));
    expect(t, "d<|end|>s", P, after, 1, matched, N(matched));
    expect(t, "d<|end|>s", P, two, 2, matched, N(matched));
    /* a special token reaching into request text, from either side or by one byte, stays text */
    expect(t, "d<|end|>s", P, tail, 1, text_ids, N(text_ids));
    expect(t, "d<|end|>s", P, head, 1, text_ids, N(text_ids));
    expect(t, "d<|end|>s", P, one_byte, 1, text_ids, N(text_ids));
    /* without PARSE_SPECIAL no special token is matched, ranges or not */
    expect(t, "d<|end|>s", 0, before, 1, text_ids, N(text_ids));
    /* a special token right after plain text (the template's, after a message) */
    const int32_t two_end[] = {ch('<'), ch('|'), ch('e'), ch('n'), ch('d'), ch('|'), ch('>'), END};
    const rb_text_range first7[] = {{0, 7}};
    expect(t, "<|end|><|end|>", P, first7, 1, two_end, N(two_end));
    rb_tokenizer_free(t);
}

static void test_rest_unchanged(void **state) {
    (void)state;
    rb_tokenizer *t = make_tokenizer();
    const unsigned P = RB_TOK_PARSE_SPECIAL;
    /* the merge a+b spans the edge of a plain range: still one token */
    const int32_t ab[] = {AB, END};
    const rb_text_range b_only[] = {{1, 2}};
    expect(t, "ab<|end|>", P, b_only, 1, ab, N(ab));
    /* non-special added tokens are matched in plain text too (as in /v1/completions) */
    const int32_t tool[] = {ch('o'), TOOL, ch('y')};
    const rb_text_range whole[] = {{0, 8}};
    expect(t, "o<tool>y", P, whole, 1, tool, N(tool));
    /* lstrip: a template's special token still eats the request's spaces before it */
    const int32_t ls[] = {ch('a'), LS, ch('b')};
    const rb_text_range spaces[] = {{1, 3}};
    expect(t, "a  <ls>b", P, spaces, 1, ls, N(ls));
    /* a normalized special token: matched in a piece with no plain byte only */
    const int32_t norm[] = {ch('a'), NORM, ch('b')};
    const int32_t norm_text[] = {ch('a'), ch('@'), ch('n'), ch('@'), ch('b')};
    const rb_text_range a_only[] = {{0, 1}};
    expect(t, "a@n@b", P, NULL, 0, norm, N(norm));
    expect(t, "a@n@b", P, a_only, 1, norm_text, N(norm_text));
    const int32_t split[] = {ch('a'), END, NORM};
    expect(t, "a<|end|>@n@", P, a_only, 1, split, N(split));
    rb_tokenizer_free(t);
}

static void test_bad_ranges(void **state) {
    (void)state;
    rb_tokenizer *t = make_tokenizer();
    const char *s = "abab";
    const rb_text_range unsorted[] = {{2, 3}, {0, 1}}, overlap[] = {{0, 2}, {1, 3}}, empty[] = {{2, 2}},
                        past[] = {{1, 5}}, inverted[] = {{3, 1}};
    const rb_text_range *bad[] = {unsorted, overlap, empty, past, inverted};
    const size_t nbad[] = {2, 2, 1, 1, 1};
    for (size_t i = 0; i < N(bad); i++) {
        int32_t *ids = NULL;
        size_t n = 7;
        rb_error e;
        assert_int_equal(rb_tokenizer_encode_plain(t, s, 4, RB_TOK_PARSE_SPECIAL, bad[i], nbad[i], &ids, &n, &e),
                         RB_E_INVALID);
        assert_null(ids);
        assert_int_equal(n, 0);
        assert_non_null(strstr(e.msg, "plain range"));
    }
    int32_t *ids = NULL;
    size_t n = 0;
    rb_error e;
    assert_int_equal(rb_tokenizer_encode_plain(t, s, 4, 0, NULL, 1, &ids, &n, &e), RB_E_INVALID);
    /* adjacent ranges are fine */
    const rb_text_range adj[] = {{0, 2}, {2, 4}};
    TU_OK(rb_tokenizer_encode_plain(t, s, 4, 0, adj, 2, &ids, &n, &e));
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], AB);
    assert_int_equal(ids[1], AB);
    free(ids);
    rb_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_special_only_outside_plain),
        cmocka_unit_test(test_rest_unchanged),
        cmocka_unit_test(test_bad_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

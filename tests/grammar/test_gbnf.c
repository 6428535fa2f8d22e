/* GBNF parser and matcher on characters: syntax errors with their line and
 * column, undefined rules and left recursion, and acceptance/rejection of
 * strings fed byte by byte (UTF-8 characters split over bytes, classes,
 * repetitions, nesting), with expected answers written by hand from the
 * grammar's meaning. */
#include "gram_testutil.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static void expect_error(const char *text, rb_status code, const char *msg_part) {
    rb_grammar *g = NULL;
    rb_error err = {0};
    rb_status st = rb_grammar_parse(text, strlen(text), NULL, &g, &err);
    if (st != code || !strstr(err.msg, msg_part))
        fail_msg("grammar %s: got status %d '%s', want %d containing '%s'", text, st, err.msg, code, msg_part);
    assert_null(g);
}

static void test_parse_errors(void **state) {
    (void)state;
    expect_error("root ::= \"abc", RB_E_FORMAT, "line 1, column 10: unterminated string literal");
    expect_error("root ::= [a-", RB_E_FORMAT, "line 1, column 10: unterminated character class");
    expect_error("root ::= a\n\na ::= \"x\" )", RB_E_FORMAT, "line 3, column 11: unexpected character");
    expect_error("root ::= \"x\"\nfoo = \"y\"", RB_E_FORMAT, "line 2, column 5: unexpected character");
    expect_error("root ::= [z-a]", RB_E_FORMAT, "line 1, column 12: character range is backwards");
    expect_error("root ::= \"\\q\"", RB_E_FORMAT, "line 1, column 11: unknown escape");
    expect_error("root ::= \"\\xZ1\"", RB_E_FORMAT, "line 1, column 13: bad hexadecimal digit");
    expect_error("root ::= \"\\uD800\"", RB_E_FORMAT, "not a Unicode scalar value");
    expect_error("root ::= \"a\"{3,2}", RB_E_FORMAT, "line 1, column 13: repetition {m,n} with n < m");
    expect_error("root ::= \"a\"{99999}", RB_E_FORMAT, "repetition count too large");
    expect_error("root ::= (\"a\"", RB_E_FORMAT, "line 1, column 14: expected ')'");
    expect_error("::= \"a\"", RB_E_FORMAT, "line 1, column 1: expected a rule name");
    expect_error("root \"a\"", RB_E_FORMAT, "line 1, column 6: expected '::='");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", RB_E_FORMAT, "line 2, column 1: rule defined twice");
    expect_error("# only a comment\nroot ::= x\n", RB_E_NOT_FOUND, "line 2, column 10: undefined rule 'x'");
    expect_error("start ::= \"a\"", RB_E_NOT_FOUND, "no rule 'root'");
    expect_error("root ::= root \"a\" | \"b\"", RB_E_INVALID, "rule 'root' is left-recursive");
    expect_error("root ::= a\na ::= b? a \"x\"\nb ::= \"y\"", RB_E_INVALID, "left-recursive");
    expect_error("root ::= (\"a\"?)*", RB_E_INVALID, "left recursion");
    expect_error("root ::= \"\xff\"", RB_E_FORMAT, "invalid UTF-8");
    /* a NULL text with a length */
    rb_grammar *g = NULL;
    assert_int_equal(rb_grammar_parse(NULL, 3, NULL, &g, NULL), RB_E_INVALID);
}

#define ACC(g, s) assert_true(gt_accepts(g, s, strlen(s)))
#define REJ(g, s) assert_false(gt_accepts(g, s, strlen(s)))

static void test_literals_and_classes(void **state) {
    (void)state;
    rb_grammar *g = gt_parse("root ::= \"ab\" [c-e] [^x-z\\n] . 'q'\n");
    ACC(g, "abcaaq");
    ACC(g, "abe\xc3\xa9" "\xe2\x82\xac" "q"); /* é then € for . */
    REJ(g, "abfaaq");
    REJ(g, "abcxaq");
    REJ(g, "abc\naq");
    REJ(g, "abca");          /* incomplete */
    REJ(g, "abcaaqq");       /* trailing */
    REJ(g, "abca\xc3q");     /* cut character */
    REJ(g, "abca\xc0\x80q"); /* overlong NUL */
    REJ(g, "abca\xed\xa0\x80q"); /* surrogate */
    assert_int_equal(gt_prefix_len(g, "abca\xed\xa0\x80q", 8), 5); /* ED is fine, A0 makes it a surrogate */
    rb_grammar_free(g);

    /* classes over non-ASCII ranges: the lead byte is pruned at once */
    g = gt_parse("root ::= [\\u00e0-\\u00ff\\u4e00-\\u9fff]+");
    ACC(g, "\xc3\xa0\xe4\xb8\x80\xc3\xbf");
    REJ(g, "\xc3\x9f");                               /* U+00DF */
    assert_int_equal(gt_prefix_len(g, "\xc4\x80", 2), 0); /* C4 starts only U+0100..U+013F */
    assert_int_equal(gt_prefix_len(g, "\xe4\xb7\xbf", 3), 1); /* E4 may start U+4E00.., E4 B7 only U+4DC0..U+4DFF */
    rb_grammar_free(g);
}

static void test_repetition(void **state) {
    (void)state;
    rb_grammar *g = gt_parse("root ::= \"a\"{2,4} \"b\"* (\"c\" | \"de\")+ \"f\"? \"g\"{3} \"h\"{2,}\n");
    ACC(g, "aacggghh");
    ACC(g, "aaaabbbdecdefggghhhh");
    REJ(g, "acggghh");     /* one a */
    REJ(g, "aaaaacggghh"); /* five a */
    REJ(g, "aaggghh");     /* no c/de */
    REJ(g, "aacgghh");     /* two g */
    REJ(g, "aacgggh");     /* one h */
    REJ(g, "aacffggghh");
    rb_grammar_free(g);
    g = gt_parse("root ::= [0-9]{,3}");
    ACC(g, "");
    ACC(g, "123");
    REJ(g, "1234");
    rb_grammar_free(g);
}

static void test_nesting_and_layout(void **state) {
    (void)state;
    /* rules over several lines, comments, recursion, empty alternative */
    rb_grammar *g = gt_parse("# balanced parentheses\n"
                             "root ::= item*   # any number\n"
                             "item ::=\n"
                             "    \"(\" root \")\"\n"
                             "  | [a-z]\n"
                             "empty ::= \n"
                             "unused ::= empty \"x\" |\n");
    ACC(g, "");
    ACC(g, "(a(b)c)(())");
    REJ(g, "(a(b)c");
    REJ(g, "a)");
    assert_int_equal(gt_prefix_len(g, "(()))", 5), 4);
    rb_grammar_free(g);

    /* ambiguity: both branches stay alive until they part */
    g = gt_parse("root ::= \"ab\" \"c\" | \"a\" \"bd\" | x\nx ::= \"a\" [b-b] \"c\" \"e\"");
    ACC(g, "abc");
    ACC(g, "abd");
    ACC(g, "abce");
    REJ(g, "abe");
    rb_grammar_free(g);

    /* a chosen start rule and an escape-rich literal */
    rb_grammar *g2 = NULL;
    const char *t = "a ::= \"\\t\\\"\\\\\\x41\\u00e9\\U0001F600\" b\nb ::= \"!\"";
    assert_int_equal(rb_grammar_parse(t, strlen(t), "a", &g2, NULL), RB_OK);
    ACC(g2, "\t\"\\A\xc3\xa9\xf0\x9f\x98\x80!");
    REJ(g2, "\t\"\\A\xc3\xa9\xf0\x9f\x98\x81!");
    rb_grammar_free(g2);
}

static void test_finished(void **state) {
    (void)state;
    rb_grammar *g = gt_parse("root ::= \"ab\" \"c\"?");
    rb_grammar_matcher *m = NULL;
    assert_int_equal(rb_grammar_matcher_create(g, NULL, &m, NULL), RB_OK);
    assert_false(rb_grammar_matcher_is_complete(m));
    assert_int_equal(rb_grammar_matcher_accept_bytes(m, "ab", 2, NULL), RB_OK);
    assert_true(rb_grammar_matcher_is_complete(m));
    assert_false(rb_grammar_matcher_is_finished(m));
    assert_int_equal(rb_grammar_matcher_accept_bytes(m, "x", 1, NULL), RB_E_INVALID); /* state unchanged */
    assert_int_equal(rb_grammar_matcher_accept_bytes(m, "c", 1, NULL), RB_OK);
    assert_true(rb_grammar_matcher_is_finished(m));
    rb_grammar_matcher_reset(m);
    assert_false(rb_grammar_matcher_is_complete(m));
    /* token calls need a vocabulary */
    float logit = 0;
    assert_int_equal(rb_grammar_matcher_mask_logits(m, &logit, 1, NULL), RB_E_INVALID);
    rb_grammar_matcher_free(m);
    rb_grammar_free(g);
}

/* Exponentially ambiguous grammars hit the matcher's limits with an error. */
static void test_limits(void **state) {
    (void)state;
    rb_grammar *g = gt_parse("root ::= a*\na ::= \"x\" | \"x\" \"x\" | \"x\" \"x\" \"x\"\n");
    rb_grammar_matcher *m = NULL;
    assert_int_equal(rb_grammar_matcher_create(g, NULL, &m, NULL), RB_OK);
    rb_status st = RB_OK;
    for (int i = 0; i < 200 && st == RB_OK; i++) st = rb_grammar_matcher_accept_bytes(m, "x", 1, NULL);
    assert_int_equal(st, RB_OK); /* equal stacks merge: this stays small */
    rb_grammar_matcher_free(m);
    rb_grammar_free(g);

    /* every position of a long bounded repetition is its own state: past the
     * store's soft limit the matcher rebuilds it from the current state and
     * goes on counting correctly */
    g = gt_parse("root ::= [a-c]{0,9500} \"!\"");
    assert_int_equal(rb_grammar_matcher_create(g, NULL, &m, NULL), RB_OK);
    for (int i = 0; i < 9500 && st == RB_OK; i++) st = rb_grammar_matcher_accept_bytes(m, &"abc"[i % 3], 1, NULL);
    assert_int_equal(st, RB_OK);
    assert_int_equal(rb_grammar_matcher_accept_bytes(m, "a", 1, NULL), RB_E_INVALID); /* the 9501st */
    assert_int_equal(rb_grammar_matcher_accept_bytes(m, "!", 1, NULL), RB_OK);
    assert_true(rb_grammar_matcher_is_finished(m));
    rb_grammar_matcher_free(m);
    rb_grammar_free(g);

    /* exponential ambiguity (every nullable choice of a 2000-deep chain) ends in an error, not a hang */
    g = gt_parse("root ::= (\"a\"? \"b\"?){0,2000} \"c\"");
    rb_error err = {0};
    st = rb_grammar_matcher_create(g, NULL, &m, &err);
    if (st == RB_OK) {
        st = rb_grammar_matcher_accept_bytes(m, "c", 1, &err);
        rb_grammar_matcher_free(m);
    }
    assert_true(st == RB_OK || st == RB_E_RANGE);
    rb_grammar_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),   cmocka_unit_test(test_literals_and_classes),
        cmocka_unit_test(test_repetition),     cmocka_unit_test(test_nesting_and_layout),
        cmocka_unit_test(test_finished),       cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

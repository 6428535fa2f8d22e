/* Helpers of the grammar tests (see gram_testutil.h). */
#include "gram_testutil.h"
#include "testutil.h"

#include <string.h>

size_t gt_prefix_len(const rb_grammar *g, const char *s, size_t n) {
    rb_grammar_matcher *m = NULL;
    rb_error err;
    assert_int_equal(rb_grammar_matcher_create(g, NULL, &m, &err), RB_OK);
    size_t i = 0;
    while (i < n && rb_grammar_matcher_accept_bytes(m, s + i, 1, &err) == RB_OK) i++;
    rb_grammar_matcher_free(m);
    return i;
}

int gt_accepts(const rb_grammar *g, const char *s, size_t n) {
    rb_grammar_matcher *m = NULL;
    rb_error err;
    assert_int_equal(rb_grammar_matcher_create(g, NULL, &m, &err), RB_OK);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) ok = rb_grammar_matcher_accept_bytes(m, s + i, 1, &err) == RB_OK;
    if (ok) ok = rb_grammar_matcher_is_complete(m);
    rb_grammar_matcher_free(m);
    return ok;
}

rb_grammar *gt_parse(const char *text) {
    rb_grammar *g = NULL;
    rb_error err = {0};
    rb_status st = rb_grammar_parse(text, strlen(text), NULL, &g, &err);
    if (st != RB_OK) fail_msg("grammar did not parse: %s\n%s", err.msg, text);
    return g;
}

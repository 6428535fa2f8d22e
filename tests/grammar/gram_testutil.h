/* Helpers of the grammar tests: does a grammar accept a string (fed byte by
 * byte through a byte-only matcher), and is every proper prefix of it still
 * alive. */
#ifndef RBEE_TESTS_GRAM_TESTUTIL_H
#define RBEE_TESTS_GRAM_TESTUTIL_H

#include "rbee/grammar.h"

#include <stdbool.h>
#include <stddef.h>

/* 1: complete sentence; 0: rejected at some byte or incomplete at the end. */
int gt_accepts(const rb_grammar *g, const char *s, size_t n);
/* The number of leading bytes the grammar accepts (n if all of them). */
size_t gt_prefix_len(const rb_grammar *g, const char *s, size_t n);
/* Parses text (rule root) or fails the test with the message. */
rb_grammar *gt_parse(const char *text);

#endif

/* Internal form of a compiled grammar, shared by the GBNF parser (which
 * builds it), the JSON schema compiler and the matcher (which walks it).
 *
 * Every rule is a list of alternatives; every alternative a run of elements
 * in one flat array ending with GE_END. A GE_CHARS element matches one code
 * point from a sorted list of disjoint ranges; GE_REF stands for a rule.
 * Repetitions and groups are already rewritten into generated rules, so the
 * matcher only sees these three element kinds. */
#ifndef RBEE_GRAMMAR_GRAM_INTERNAL_H
#define RBEE_GRAMMAR_GRAM_INTERNAL_H

#include "rbee/grammar.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { GE_END = 0, GE_CHARS = 1, GE_REF = 2 };

typedef struct gram_elem {
    int32_t type;
    int32_t a; /* GE_CHARS: first range index; GE_REF: rule id */
    int32_t b; /* GE_CHARS: number of ranges */
} gram_elem;

typedef struct gram_range {
    uint32_t lo, hi; /* inclusive code points */
} gram_range;

typedef struct gram_rule {
    int32_t first_alt; /* index into alt_start */
    int32_t n_alts;
} gram_rule;

struct rb_grammar {
    gram_elem *elems;
    size_t n_elems;
    gram_range *ranges;
    size_t n_ranges;
    int32_t *alt_start; /* element index where each alternative starts */
    size_t n_alts;
    gram_rule *rules;
    size_t n_rules;
    int32_t root;
};

/* Size limits that keep hostile grammars bounded. */
#define GRAM_MAX_TEXT (4u << 20)
#define GRAM_MAX_SYMBOLS (1u << 21)
#define GRAM_MAX_RULES (1u << 18)
#define GRAM_MAX_REPEAT 10000
#define GRAM_MAX_NEST 200

/* True if code point c is in the element's ranges (binary search). */
bool gram_chars_has(const rb_grammar *g, const gram_elem *e, uint32_t c);
/* True if some code point in [lo, hi] is in the element's ranges. */
bool gram_chars_meets(const rb_grammar *g, const gram_elem *e, uint32_t lo, uint32_t hi);

#endif

/* Grammar builder: rules of symbol sequences under construction, used by the
 * GBNF parser. A symbol >= 0 is a rule id, < 0 a character class
 * (-1 - class id). gram_builder_finish checks the rule set and flattens it
 * into an rb_grammar. */
#ifndef RBEE_GRAMMAR_GRAM_BUILD_H
#define RBEE_GRAMMAR_GRAM_BUILD_H

#include "grammar/gram_internal.h"

typedef struct gram_ivec {
    int32_t *v;
    size_t n, cap;
} gram_ivec;

bool gram_ivec_push(gram_ivec *v, int32_t x);

typedef struct gram_builder gram_builder;

rb_status gram_builder_create(gram_builder **out, rb_error *err);
void gram_builder_free(gram_builder *b);
/* A class of the given ranges (any order, may overlap), complemented over
 * all code points if negate. */
rb_status gram_builder_class(gram_builder *b, const gram_range *r, size_t n, bool negate, int32_t *sym,
                             rb_error *err);
/* A new rule, defined (anonymous when name is NULL). */
rb_status gram_builder_new_rule(gram_builder *b, const char *name, size_t len, int32_t *id, rb_error *err);
/* The rule called name, added undefined if new; pos is where it is referenced. */
rb_status gram_builder_ref(gram_builder *b, const char *name, size_t len, size_t pos, int32_t *id, rb_error *err);
/* Marks name defined; RB_E_INVALID if it already is. */
rb_status gram_builder_define(gram_builder *b, const char *name, size_t len, int32_t *id, rb_error *err);
/* Appends a copy of alt as an alternative of rule. */
rb_status gram_builder_add_alt(gram_builder *b, int32_t rule, const gram_ivec *alt, rb_error *err);
/* One symbol standing for the sequence item (a new rule if it has != 1). */
rb_status gram_builder_wrap(gram_builder *b, const gram_ivec *item, int32_t *sym, rb_error *err);
/* Replaces item by sym repeated lo..hi times (hi < 0: unbounded). */
rb_status gram_builder_repeat(gram_builder *b, int32_t sym, int lo, int hi, gram_ivec *item, rb_error *err);
/* Name of a referenced but undefined rule (and where it was first
 * referenced), or NULL. */
const char *gram_builder_undefined(const gram_builder *b, size_t *ref_pos);
rb_status gram_builder_finish(gram_builder *b, const char *root, rb_grammar **out, rb_error *err);

#endif

/* Grammar-constrained sampling: GBNF grammars (llama.cpp's dialect), JSON
 * schemas compiled to GBNF, and a per-sequence matcher that masks the logits
 * of tokens the grammar cannot accept next.
 *
 * A grammar is a set of rules over Unicode code points; the matcher consumes
 * the UTF-8 bytes of token pieces (rb_tokenizer_token_piece), so a token may
 * span several grammar elements and a character may be split over several
 * tokens. End-of-generation tokens are allowed only where the grammar's root
 * rule is complete. Compiled grammars and vocabularies are immutable and may
 * be shared by threads; a matcher belongs to one sequence (one thread at a
 * time). */
#ifndef RBEE_GRAMMAR_H
#define RBEE_GRAMMAR_H

#include "rbee/status.h"
#include "rbee/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rb_grammar rb_grammar;

/* Compiles GBNF text (len bytes, need not be NUL-terminated). root names the
 * start rule (NULL: "root"). Syntax: `name ::= alternatives` rules (names of
 * letters, digits, '-' and '_'; a rule may continue on following lines), "string"
 * and 'string' literals with \n \r \t \\ \" \' \xHH \uHHHH \UHHHHHHHH escapes,
 * character classes [a-z] [^"\\], `.` (any character), grouping ( ),
 * alternation |, postfix * + ? {m} {m,} {m,n}, # comments to end of line.
 * Errors (RB_E_FORMAT: syntax, with "line L, column C"; RB_E_NOT_FOUND:
 * undefined rule; RB_E_INVALID: left recursion; RB_E_RANGE: over the size
 * limits) name the problem in err. */
rb_status rb_grammar_parse(const char *text, size_t len, const char *root, rb_grammar **out, rb_error *err);
void rb_grammar_free(rb_grammar *g);

/* JSON schema -> GBNF text. The value the schema describes is rule
 * `rule_name` (letters, digits, '-'; NULL: "root") and every helper rule is
 * named `rule_name-...`, so the text can be appended to a larger grammar
 * that refers to rule_name (e.g. a tool call: literal prefix, the
 * arguments object per the function's parameters schema, literal suffix)
 * as long as no other rule there starts with `rule_name-`.
 * Supported: type (string, number, integer, boolean, null, object, array,
 * or a list of them), properties, required, additionalProperties
 * (false/true/schema; absent: no extra members when properties are
 * given), enum, const, anyOf, oneOf (only where no value can match two
 * alternatives: different JSON types, objects told apart by a required
 * property pinned to different const/enum values, or disjoint enums),
 * allOf of one schema, items, prefixItems (and draft 7's items array with
 * additionalItems), minItems, maxItems, minLength, maxLength (characters),
 * format (date, time, date-time, uuid), $ref to #, #/$defs/... and
 * #/definitions/..., and the annotations (title,
 * description, default, examples, $schema, $id, $comment, ...). A schema of
 * true / {} is any JSON value; {"type":"object"} any JSON object.
 * Properties come in the order the schema lists them; whitespace is bounded
 * (at most one space, or one newline and up to 16 indenting spaces, between
 * tokens) so the output stays compact and a model cannot loop on spaces;
 * numbers have at most 16 integer and 16 fraction digits.
 * An unsupported keyword or value gives RB_E_UNSUPPORTED naming it (never a
 * looser grammar); a malformed schema RB_E_INVALID. *gbnf is malloc'ed and
 * NUL-terminated (*len, may be NULL, excludes the NUL). */
rb_status rb_json_schema_to_gbnf(const json_t *schema, const char *rule_name, char **gbnf, size_t *len,
                                 rb_error *err);
/* Same from schema text (JSON). */
rb_status rb_json_schema_text_to_gbnf(const char *schema, size_t schema_len, const char *rule_name, char **gbnf,
                                      size_t *len, rb_error *err);
/* Schema -> compiled grammar whose root is the schema's value. */
rb_status rb_grammar_from_json_schema(const json_t *schema, rb_grammar **out, rb_error *err);
/* OpenAI's response_format {"type":"json_object"}: any JSON object. */
rb_status rb_grammar_json_object(rb_grammar **out, rb_error *err);

/* The token vocabulary as the matcher sees it: each token's piece bytes in
 * a byte trie. Build once per tokenizer (it walks the whole vocabulary) and
 * share it. eog lists the end-of-generation ids (EOS, <|eot_id|>, ...): they
 * are allowed only where the grammar is complete. Other special tokens and
 * tokens with an empty piece are never allowed. */
typedef struct rb_grammar_vocab rb_grammar_vocab;
rb_status rb_grammar_vocab_create(const rb_tokenizer *tok, const int32_t *eog, size_t n_eog,
                                  rb_grammar_vocab **out, rb_error *err);
void rb_grammar_vocab_free(rb_grammar_vocab *v);
int32_t rb_grammar_vocab_n_tokens(const rb_grammar_vocab *v);

/* Matcher state of one sequence: the set of grammar positions (pushdown
 * stacks) reachable after the bytes accepted so far. g and v must outlive
 * it. v may be NULL for a matcher that only takes bytes (accept_bytes,
 * is_complete): the token calls then give RB_E_INVALID. */
typedef struct rb_grammar_matcher rb_grammar_matcher;
rb_status rb_grammar_matcher_create(const rb_grammar *g, const rb_grammar_vocab *v, rb_grammar_matcher **out,
                                    rb_error *err);
void rb_grammar_matcher_free(rb_grammar_matcher *m);
/* Back to the start state. */
void rb_grammar_matcher_reset(rb_grammar_matcher *m);

/* Advances by one sampled token. RB_E_INVALID (state unchanged) if the
 * grammar does not allow it here; an end-of-generation token is accepted
 * only when complete and ends the matcher (nothing more is allowed). */
rb_status rb_grammar_matcher_accept_token(rb_grammar_matcher *m, int32_t token, rb_error *err);
/* Advances by raw UTF-8 bytes (e.g. text forced into the output); RB_E_INVALID
 * (state unchanged) if they do not fit the grammar. */
rb_status rb_grammar_matcher_accept_bytes(rb_grammar_matcher *m, const char *bytes, size_t len, rb_error *err);

/* Sets logits[i] = -INFINITY for every token i < n_logits the grammar does
 * not allow next (ids >= the vocabulary's size are disallowed too). Leaves
 * allowed logits unchanged. RB_E_INVALID if no token at all is allowed (the
 * vocabulary cannot spell what the grammar needs); RB_E_RANGE if the state
 * grew past the matcher's limits (pathologically ambiguous grammar). */
rb_status rb_grammar_matcher_mask_logits(rb_grammar_matcher *m, float *logits, size_t n_logits, rb_error *err);
/* Same as a bit set: bit i of allowed[i / 32] for token i, for every id of
 * the vocabulary ((n_tokens + 31) / 32 words). */
rb_status rb_grammar_matcher_allowed(rb_grammar_matcher *m, uint32_t *allowed, rb_error *err);

/* True when the accepted bytes form a complete sentence of the grammar
 * (end-of-generation is allowed). */
bool rb_grammar_matcher_is_complete(const rb_grammar_matcher *m);
/* True when complete and no further byte is allowed (only end of
 * generation remains), or an end-of-generation token was accepted. */
bool rb_grammar_matcher_is_finished(const rb_grammar_matcher *m);

#ifdef __cplusplus
}
#endif
#endif

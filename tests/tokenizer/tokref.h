/* Helpers shared by the tokenizer tests: paths of the fetched tokenizer
 * files, loading the HF-generated reference cases, and comparing id lists
 * with a readable diff on failure. */
#ifndef RBEE_TESTS_TOKREF_H
#define RBEE_TESTS_TOKREF_H

#include "testutil.h"

#include "rbee/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tokref_case {
    char *text;
    size_t text_len;
    int32_t *ids_special, *ids_plain;
    size_t n_special, n_plain;
    char *decoded, *decoded_plain;
} tokref_case;

typedef struct tokref {
    tokref_case *cases;
    size_t n;
} tokref;

/* Loads tests/data/tokenizer/<name>.json; fails the test on error. */
void tokref_load(tokref *r, const char *name);
void tokref_free(tokref *r);
/* Loads the fetched <name>/tokenizer.json + tokenizer_config.json. */
rb_tokenizer *tokref_tokenizer(const char *name);
/* True if equal; otherwise prints both lists with the first difference. */
bool tokref_ids_equal(const char *what, const char *text, const int32_t *got, size_t n_got, const int32_t *want,
                      size_t n_want);
double tokref_now(void);

#endif

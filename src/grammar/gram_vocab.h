/* The vocabulary as the grammar matcher sees it (rb_grammar_vocab): each
 * token's piece bytes, its kind (text, end of generation, never allowed), and
 * a byte trie of the text tokens stored in preorder, so a walk can skip a
 * whole subtree (every token sharing a rejected prefix) with one jump. */
#ifndef RBEE_GRAMMAR_GRAM_VOCAB_H
#define RBEE_GRAMMAR_GRAM_VOCAB_H

#include "rbee/grammar.h"

#include <stdint.h>

enum { GV_NEVER = 0, GV_TEXT = 1, GV_EOG = 2 };

typedef struct gram_trie_node {
    uint8_t byte;
    uint16_t depth; /* 1 for a first byte */
    int32_t end;    /* index just past this node's subtree */
    int32_t tok_first, tok_n; /* tokens whose piece ends here (into tok_ids) */
} gram_trie_node;

struct rb_grammar_vocab {
    int32_t n_tokens;
    uint8_t *kind;
    char *blob;      /* all text pieces */
    size_t *offset;  /* n_tokens + 1 offsets into blob (empty for non-text) */
    gram_trie_node *nodes;
    size_t n_nodes;
    int32_t *tok_ids; /* text tokens sorted by piece */
    int max_depth;
    int32_t *eog;
    size_t n_eog;
};

#endif

/* Matcher states of a grammar: hash-consed pushdown stacks and sets of them,
 * with the byte transitions between sets cached as they are computed.
 *
 * A stack is a chain of nodes (element position, partial UTF-8 character,
 * parent); its top is always a GE_CHARS element (possibly with a partial
 * character under way), and stack 0 is the empty stack: the grammar's root
 * rule is complete. A set is a sorted list of distinct stack ids; set 0 is
 * the empty set (no way forward). Equal stacks and equal sets get equal ids,
 * so a set's transition on a byte is computed once and then read from its
 * 256-entry table; the token trie walk is then mostly table look-ups. */
#ifndef RBEE_GRAMMAR_GRAM_STATE_H
#define RBEE_GRAMMAR_GRAM_STATE_H

#include "grammar/gram_build.h"

typedef struct gram_node {
    int32_t pos;    /* element index (GE_CHARS or GE_REF); -1 for stack 0 */
    uint32_t part;  /* 0, or len << 28 | remaining << 24 | bits so far */
    int32_t parent; /* stack below this node */
} gram_node;

typedef struct gram_set {
    int32_t first, n; /* stack ids in gram_store.items */
    int32_t *next;    /* 256 transitions (-1 unknown), allocated on first use */
    uint32_t *mask;   /* allowed-token bits, owned by the matcher's cache */
    bool complete;    /* holds stack 0 */
} gram_set;

typedef struct gram_store {
    const rb_grammar *g;
    gram_node *nodes;
    size_t n_nodes, cap_nodes;
    int32_t *node_index;
    size_t node_index_cap;
    int32_t *items;
    size_t n_items, cap_items;
    gram_set *sets;
    size_t n_sets, cap_sets;
    int32_t *set_index;
    size_t set_index_cap;
    gram_ivec tmp;
    size_t work;
    rb_status st; /* first failure inside a computation */
    rb_error err;
} gram_store;

/* Soft limits (the matcher rebuilds the store past them between steps) and
 * hard limits (a single step failing with RB_E_RANGE). */
#define GRAM_SOFT_NODES (1u << 20)
#define GRAM_SOFT_SETS (1u << 13)
#define GRAM_HARD_NODES (1u << 23)
#define GRAM_HARD_SETS (1u << 19)
#define GRAM_MAX_SET_SIZE 4096
#define GRAM_MAX_WORK (1u << 22)

rb_status gram_store_init(gram_store *s, const rb_grammar *g, rb_error *err);
void gram_store_free(gram_store *s);
/* Empties the store (ids are invalidated). */
void gram_store_clear(gram_store *s);
/* The start set; -1 on failure (s->st, s->err). */
int32_t gram_store_start(gram_store *s);
/* Set reached from set on byte b (0: none); -1 on failure. */
int32_t gram_store_next(gram_store *s, int32_t set, uint8_t b);
/* Re-creates set in a cleared store; returns its new id (-1 on failure). */
int32_t gram_store_rebase(gram_store *s, int32_t set);
/* True when set holds only stack 0 (complete, nothing may follow). */
bool gram_store_finished(const gram_store *s, int32_t set);

#endif

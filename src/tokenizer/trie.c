/* Byte trie over added-token texts, giving the longest added token that
 * starts at a position (HF matches added tokens leftmost-longest). */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>

static rb_status new_node(tok_trie *tr, uint8_t byte, int32_t *idx) {
    if (tr->n == tr->cap) {
        size_t nc = tr->cap ? tr->cap * 2 : 256;
        tok_trie_node *p = realloc(tr->nodes, nc * sizeof *p);
        if (!p) return RB_E_NOMEM;
        tr->nodes = p;
        tr->cap = nc;
    }
    if (tr->n >= INT32_MAX) return RB_E_NOMEM;
    tok_trie_node *nd = &tr->nodes[tr->n];
    nd->first_child = nd->next_sibling = -1;
    nd->added = -1;
    nd->byte = byte;
    *idx = (int32_t)tr->n++;
    return RB_OK;
}

static int32_t find_child(const tok_trie *tr, int32_t node, uint8_t byte) {
    for (int32_t c = tr->nodes[node].first_child; c >= 0; c = tr->nodes[c].next_sibling)
        if (tr->nodes[c].byte == byte) return c;
    return -1;
}

rb_status tok_trie_insert(tok_trie *tr, const char *s, size_t len, int32_t added_index) {
    int32_t node;
    rb_status st;
    if (tr->n == 0 && (st = new_node(tr, 0, &node)) != RB_OK) return st;
    node = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = find_child(tr, node, b);
        if (c < 0) {
            if ((st = new_node(tr, b, &c)) != RB_OK) return st;
            tr->nodes[c].next_sibling = tr->nodes[node].first_child;
            tr->nodes[node].first_child = c;
        }
        node = c;
    }
    if (tr->nodes[node].added < 0) tr->nodes[node].added = added_index; /* first wins */
    return RB_OK;
}

int32_t tok_trie_longest(const tok_trie *tr, const char *s, size_t len, size_t *match_len) {
    if (tr->n == 0) return -1;
    int32_t node = 0, best = -1;
    for (size_t i = 0; i < len; i++) {
        node = find_child(tr, node, (uint8_t)s[i]);
        if (node < 0) break;
        if (tr->nodes[node].added >= 0) {
            best = tr->nodes[node].added;
            *match_len = i + 1;
        }
    }
    return best;
}

void tok_trie_free(tok_trie *tr) {
    free(tr->nodes);
    tr->nodes = NULL;
    tr->n = tr->cap = 0;
}

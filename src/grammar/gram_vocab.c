/* Builds rb_grammar_vocab from a tokenizer: every token's piece
 * (rb_tokenizer_token_piece), the end-of-generation list, and the preorder
 * byte trie of text pieces built from the pieces in sorted order. */
#include "grammar/gram_vocab.h"

#include <stdlib.h>
#include <string.h>

#define GV_MAX_PIECE 65535


typedef struct sort_item {
    const char *p;
    size_t len;
    int32_t id;
} sort_item;

static int cmp_item(const void *a, const void *b) {
    const sort_item *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void rb_grammar_vocab_free(rb_grammar_vocab *v) {
    if (!v) return;
    free(v->kind);
    free(v->blob);
    free(v->offset);
    free(v->nodes);
    free(v->tok_ids);
    free(v->eog);
    free(v);
}

int32_t rb_grammar_vocab_n_tokens(const rb_grammar_vocab *v) { return v ? v->n_tokens : 0; }

static rb_status nomem(rb_error *err) { return rb_error_set(err, RB_E_NOMEM, "grammar vocabulary: out of memory"); }

rb_status rb_grammar_vocab_create(const rb_tokenizer *tok, const int32_t *eog, size_t n_eog,
                                  rb_grammar_vocab **out, rb_error *err) {
    if (!tok || !out || (n_eog && !eog)) return rb_error_set(err, RB_E_INVALID, "grammar vocabulary: NULL argument");
    *out = NULL;
    int32_t n = rb_tokenizer_n_vocab(tok);
    if (n <= 0) return rb_error_set(err, RB_E_INVALID, "grammar vocabulary: empty vocabulary");
    rb_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return nomem(err);
    v->n_tokens = n;
    v->kind = calloc((size_t)n, 1);
    v->offset = calloc((size_t)n + 1, sizeof *v->offset);
    v->eog = malloc((n_eog ? n_eog : 1) * sizeof *v->eog);
    sort_item *items = malloc((size_t)n * sizeof *items);
    size_t cap = 1u << 20, used = 0;
    v->blob = malloc(cap);
    rb_status st = RB_OK;
    if (!v->kind || !v->offset || !v->eog || !items || !v->blob) { st = nomem(err); goto fail; }
    for (size_t i = 0; i < n_eog; i++) {
        if (eog[i] < 0 || eog[i] >= n) {
            st = rb_error_set(err, RB_E_RANGE, "grammar vocabulary: end-of-generation id %d out of range", (int)eog[i]);
            goto fail;
        }
        v->kind[eog[i]] = GV_EOG;
        v->eog[v->n_eog++] = eog[i];
    }
    for (int32_t id = 0; id < n; id++) {
        v->offset[id] = used;
        if (v->kind[id] == GV_EOG || rb_tokenizer_is_special(tok, id)) continue;
        char *piece = NULL;
        size_t len = 0;
        rb_error e2;
        if (rb_tokenizer_token_piece(tok, id, &piece, &len, &e2) != RB_OK) {
            if (e2.code == RB_E_NOMEM) { st = nomem(err); goto fail; }
            continue; /* a hole in the id space */
        }
        if (len == 0 || len > GV_MAX_PIECE) { free(piece); continue; }
        if (used + len > cap) {
            while (used + len > cap) cap *= 2;
            char *t = realloc(v->blob, cap);
            if (!t) { free(piece); st = nomem(err); goto fail; }
            v->blob = t;
        }
        memcpy(v->blob + used, piece, len);
        free(piece);
        used += len;
        v->kind[id] = GV_TEXT;
    }
    v->offset[n] = used;
    size_t m = 0;
    for (int32_t id = 0; id < n; id++)
        if (v->kind[id] == GV_TEXT)
            items[m++] = (sort_item){v->blob + v->offset[id], v->offset[id + 1] - v->offset[id], id};
    qsort(items, m, sizeof *items, cmp_item);
    v->tok_ids = malloc((m ? m : 1) * sizeof *v->tok_ids);
    size_t node_cap = m * 2 + 16;
    v->nodes = malloc(node_cap * sizeof *v->nodes);
    int32_t *path = malloc((GV_MAX_PIECE + 1) * sizeof *path); /* node index at each depth */
    if (!v->tok_ids || !v->nodes || !path) { free(path); st = nomem(err); goto fail; }
    size_t depth = 0, nn = 0;
    const sort_item *prev = NULL;
    for (size_t i = 0; i < m; i++) {
        const sort_item *it = &items[i];
        v->tok_ids[i] = it->id;
        size_t lcp = 0;
        if (prev) {
            size_t lim = prev->len < it->len ? prev->len : it->len;
            while (lcp < lim && prev->p[lcp] == it->p[lcp]) lcp++;
        }
        while (depth > lcp) v->nodes[path[--depth]].end = (int32_t)nn;
        while (depth < it->len) {
            if (nn == node_cap) {
                node_cap *= 2;
                gram_trie_node *t = realloc(v->nodes, node_cap * sizeof *t);
                if (!t) { free(path); st = nomem(err); goto fail; }
                v->nodes = t;
            }
            v->nodes[nn] = (gram_trie_node){(uint8_t)it->p[depth], (uint16_t)(depth + 1), 0, (int32_t)i, 0};
            path[depth++] = (int32_t)nn++;
        }
        gram_trie_node *leaf = &v->nodes[path[depth - 1]];
        if (leaf->tok_n == 0) leaf->tok_first = (int32_t)i;
        leaf->tok_n++;
        if ((int)it->len > v->max_depth) v->max_depth = (int)it->len;
        prev = it;
    }
    while (depth > 0) v->nodes[path[--depth]].end = (int32_t)nn;
    v->n_nodes = nn;
    free(path);
    free(items);
    *out = v;
    return RB_OK;
fail:
    free(items);
    rb_grammar_vocab_free(v);
    return st;
}

/* The BPE model: splits a pre-tokenized word into characters (byte fallback
 * or <unk> for characters outside the vocabulary), then repeatedly applies the
 * best-ranked merge using a binary heap over adjacent symbol pairs and a
 * linked list of symbols, O(n log n) per word. Ranks come from the merges
 * list, or, for SentencePiece GGUF files without merges, from token scores. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_utf8.h"

#include <stdlib.h>

static bool heap_less(const tok_heap_ent *x, const tok_heap_ent *y) {
    return x->key < y->key || (x->key == y->key && x->pos < y->pos);
}

static rb_status heap_push(tok_scratch *sc, tok_heap_ent e) {
    if (sc->heap_len == sc->heap_cap) {
        size_t nc = sc->heap_cap ? sc->heap_cap * 2 : 64;
        tok_heap_ent *p = realloc(sc->heap, nc * sizeof *p);
        if (!p) return RB_E_NOMEM;
        sc->heap = p;
        sc->heap_cap = nc;
    }
    size_t i = sc->heap_len++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&e, &sc->heap[parent])) break;
        sc->heap[i] = sc->heap[parent];
        i = parent;
    }
    sc->heap[i] = e;
    return RB_OK;
}

static tok_heap_ent heap_pop(tok_scratch *sc) {
    tok_heap_ent top = sc->heap[0];
    tok_heap_ent last = sc->heap[--sc->heap_len];
    size_t i = 0, n = sc->heap_len;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const tok_heap_ent *best = &last;
        if (l < n && heap_less(&sc->heap[l], best)) { m = l; best = &sc->heap[l]; }
        if (r < n && heap_less(&sc->heap[r], best)) m = r;
        if (m == i) break;
        sc->heap[i] = sc->heap[m];
        i = m;
    }
    if (n) sc->heap[i] = last;
    return top;
}

/* Pushes the candidate merge of symbols left and right, if any. */
static rb_status candidate(const rb_tokenizer *t, const char *w, tok_scratch *sc, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return RB_OK;
    const tok_sym *a = &sc->sym[left], *b = &sc->sym[right];
    tok_heap_ent e = {0};
    e.pos = left;
    e.right = right;
    e.a = a->id;
    e.b = b->id;
    if (t->use_scores) {
        /* SentencePiece: merge whose concatenated text is a token with the highest score */
        int32_t id = tok_vocab_find(&t->vocab, w + a->off, (size_t)a->len + b->len);
        if (id < 0 || t->vocab.types[id] == TOK_TYPE_UNUSED) return RB_OK;
        e.res = id;
        e.key = -(double)t->vocab.scores[id];
    } else {
        int32_t rank;
        if (!tok_vocab_merge(&t->vocab, a->id, b->id, &rank, &e.res)) return RB_OK;
        e.key = rank;
    }
    return heap_push(sc, e);
}

static rb_status add_sym(tok_scratch *sc, size_t *n, int32_t id, uint32_t off, uint32_t len) {
    if (*n == sc->sym_cap) {
        size_t nc = sc->sym_cap ? sc->sym_cap * 2 : 64;
        tok_sym *p = realloc(sc->sym, nc * sizeof *p);
        if (!p) return RB_E_NOMEM;
        sc->sym = p;
        sc->sym_cap = nc;
    }
    tok_sym *s = &sc->sym[*n];
    s->id = id;
    s->off = off;
    s->len = len;
    s->prev = (int32_t)*n - 1;
    s->next = (int32_t)*n + 1;
    (*n)++;
    return RB_OK;
}

rb_status tok_bpe_word(const rb_tokenizer *t, const char *w, size_t len, tok_scratch *sc, tok_ids *ids) {
    if (len == 0) return RB_OK;
    if (len >= UINT32_MAX / 2 || len >= INT32_MAX / 2) return RB_E_RANGE;
    if (t->ignore_merges) {
        int32_t id = tok_vocab_find(&t->vocab, w, len);
        if (id >= 0) return tok_ids_push(ids, id);
    }
    size_t n = 0;
    rb_status st = RB_OK;
    const unsigned char *u = (const unsigned char *)w;
    bool prev_unk = false;
    for (size_t i = 0; i < len && !st;) {
        size_t cl = tok_utf8_seq_len(u + i, len - i);
        if (!cl) cl = 1; /* cannot happen on validated text */
        int32_t id = tok_vocab_find(&t->vocab, w + i, cl);
        if (id >= 0) {
            st = add_sym(sc, &n, id, (uint32_t)i, (uint32_t)cl);
            prev_unk = false;
        } else {
            bool bytes_ok = t->byte_fallback;
            for (size_t k = 0; k < cl && bytes_ok; k++) bytes_ok = t->byte_ids[u[i + k]] >= 0;
            if (bytes_ok) {
                for (size_t k = 0; k < cl && !st; k++) st = add_sym(sc, &n, t->byte_ids[u[i + k]], (uint32_t)(i + k), 1);
                prev_unk = false;
            } else if (t->unk_id >= 0) {
                if (t->fuse_unk && prev_unk) sc->sym[n - 1].len += (uint32_t)cl;
                else st = add_sym(sc, &n, t->unk_id, (uint32_t)i, (uint32_t)cl);
                prev_unk = true;
            } /* else: dropped, as HF does without an unk token */
        }
        i += cl;
    }
    if (st || n == 0) return st;
    sc->sym[n - 1].next = -1;
    sc->heap_len = 0;
    for (size_t i = 0; i + 1 < n && !st; i++) st = candidate(t, w, sc, (int32_t)i, (int32_t)i + 1);
    while (!st && sc->heap_len) {
        tok_heap_ent e = heap_pop(sc);
        tok_sym *a = &sc->sym[e.pos];
        if (a->len == 0 || a->next != e.right || a->id != e.a) continue;
        tok_sym *b = &sc->sym[e.right];
        if (b->len == 0 || b->id != e.b) continue;
        a->id = e.res;
        a->len += b->len;
        a->next = b->next;
        if (b->next >= 0) sc->sym[b->next].prev = e.pos;
        b->len = 0;
        st = candidate(t, w, sc, a->prev, e.pos);
        if (!st) st = candidate(t, w, sc, e.pos, a->next);
    }
    for (int32_t i = 0; i >= 0 && !st; i = sc->sym[i].next) st = tok_ids_push(ids, sc->sym[i].id);
    return st;
}

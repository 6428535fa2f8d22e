/* CLIP's BPE on one word: one symbol per UTF-8 byte (the GPT-2 byte map's
 * symbol; the last one carries "</w>"), then the lowest-ranked adjacent merge
 * is applied repeatedly, leftmost first among equal ranks (HF tokenizers'
 * order), with a binary heap over candidate pairs: O(n log n) per word. A
 * byte without a vocabulary symbol becomes the unk token, which never merges. */
#include "tokenizer/clip_internal.h"

#include <stdlib.h>

typedef struct {
    int32_t rank, pos, right, a, b, res;
} cand;

typedef struct {
    int32_t *id, *prev, *next;
    cand *heap;
    size_t heap_len, heap_cap;
} bpe_state;

static bool cand_less(const cand *x, const cand *y) { return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos); }

static void heap_push(bpe_state *s, cand c) {
    size_t i = s->heap_len++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
}

static cand heap_pop(bpe_state *s) {
    cand top = s->heap[0], last = s->heap[--s->heap_len];
    size_t i = 0, n = s->heap_len;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < n && cand_less(&s->heap[l], best)) { m = l; best = &s->heap[l]; }
        if (r < n && cand_less(&s->heap[r], best)) m = r;
        if (m == i) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* Pushes the merge of symbols l and r if there is one. Each merge removes a
 * symbol and adds at most two candidates, so 3n slots always suffice. */
static void candidate(const rb_clip_tokenizer *t, bpe_state *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    cand c = {0, l, r, s->id[l], s->id[r], 0};
    if (tok_vocab_merge(&t->vocab, c.a, c.b, &c.rank, &c.res) && s->heap_len < s->heap_cap) heap_push(s, c);
}

rb_status clip_bpe_word(const rb_clip_tokenizer *t, const char *w, size_t len, tok_ids *ids, rb_error *err) {
    if (len == 0) return RB_OK;
    if (len > (size_t)INT32_MAX / 4) return rb_error_set(err, RB_E_RANGE, "word of %zu bytes is too long", len);
    const unsigned char *u = (const unsigned char *)w;
    int32_t unk = t->sp_id[CLIP_SP_UNK];
    if (len == 1) { /* common case: one byte, no merge possible */
        int32_t id = t->byte_eow[u[0]] >= 0 ? t->byte_eow[u[0]] : unk;
        if (id < 0) return rb_error_set(err, RB_E_FORMAT, "no symbol for byte 0x%02X and no unk token", u[0]);
        return tok_ids_push(ids, id) ? rb_error_set(err, RB_E_NOMEM, "out of memory") : RB_OK;
    }
    bpe_state s = {0};
    s.heap_cap = 3 * len;
    s.id = malloc(len * 3 * sizeof(int32_t));
    s.heap = malloc(s.heap_cap * sizeof *s.heap);
    if (!s.id || !s.heap) {
        free(s.id);
        free(s.heap);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    s.prev = s.id + len;
    s.next = s.prev + len;
    rb_status st = RB_OK;
    for (size_t i = 0; i < len; i++) {
        int32_t id = i + 1 == len ? t->byte_eow[u[i]] : t->byte_id[u[i]];
        if (id < 0) id = unk;
        if (id < 0) {
            st = rb_error_set(err, RB_E_FORMAT, "no symbol for byte 0x%02X and no unk token", u[i]);
            break;
        }
        s.id[i] = id;
        s.prev[i] = (int32_t)i - 1;
        s.next[i] = i + 1 == len ? -1 : (int32_t)i + 1;
    }
    for (size_t i = 0; i + 1 < len && !st; i++) candidate(t, &s, (int32_t)i, (int32_t)i + 1);
    while (!st && s.heap_len) {
        cand c = heap_pop(&s);
        /* stale candidates: a side was merged away or changed since the push */
        if (s.id[c.pos] != c.a || s.next[c.pos] != c.right || s.id[c.right] != c.b) continue;
        s.id[c.pos] = c.res;
        s.next[c.pos] = s.next[c.right];
        if (s.next[c.right] >= 0) s.prev[s.next[c.right]] = c.pos;
        s.id[c.right] = -1;
        s.next[c.right] = -2;
        candidate(t, &s, s.prev[c.pos], c.pos);
        candidate(t, &s, c.pos, s.next[c.pos]);
    }
    for (int32_t i = 0; i >= 0 && !st; i = s.next[i])
        if (tok_ids_push(ids, s.id[i])) st = rb_error_set(err, RB_E_NOMEM, "out of memory");
    free(s.id);
    free(s.heap);
    return st;
}

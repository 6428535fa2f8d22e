/* rb_grammar_matcher: the current set of grammar stacks of one sequence,
 * token acceptance, and the allowed-token mask computed by one preorder walk
 * of the vocabulary trie (a rejected prefix skips its whole subtree). Masks
 * are cached per state set, since generation keeps returning to the same
 * states (inside a string, between digits). */
#include "grammar/gram_state.h"
#include "grammar/gram_vocab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GM_MASK_CACHE_BYTES (8u << 20) /* per matcher: 512 masks of a 128k vocabulary */

struct rb_grammar_matcher {
    const rb_grammar *g;
    const rb_grammar_vocab *v;
    gram_store st;
    int32_t cur;
    bool ended; /* an end-of-generation token was accepted */
    int32_t *walk;
    size_t words;
    size_t n_masks;
};

static rb_status store_error(rb_grammar_matcher *m, rb_error *err) {
    rb_status st = m->st.st != RB_OK ? m->st.st : RB_E_RANGE;
    rb_error_set(err, st, "%s", m->st.st != RB_OK ? m->st.err.msg : "grammar matcher: internal failure");
    m->st.st = RB_OK;
    return st;
}

static void drop_masks(rb_grammar_matcher *m) {
    for (size_t i = 0; i < m->st.n_sets; i++) {
        free(m->st.sets[i].mask);
        m->st.sets[i].mask = NULL;
    }
    m->n_masks = 0;
}

/* Between steps: rebuild the store from the current set when it grew large. */
static rb_status maintain(rb_grammar_matcher *m, rb_error *err) {
    if (m->st.n_nodes <= GRAM_SOFT_NODES && m->st.n_sets <= GRAM_SOFT_SETS) return RB_OK;
    drop_masks(m);
    int32_t id = gram_store_rebase(&m->st, m->cur);
    if (id < 0) return store_error(m, err);
    m->cur = id;
    return RB_OK;
}

rb_status rb_grammar_matcher_create(const rb_grammar *g, const rb_grammar_vocab *v, rb_grammar_matcher **out,
                                    rb_error *err) {
    if (!g || !out) return rb_error_set(err, RB_E_INVALID, "grammar matcher: NULL argument");
    *out = NULL;
    rb_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return rb_error_set(err, RB_E_NOMEM, "grammar matcher: out of memory");
    m->g = g;
    m->v = v;
    m->words = v ? ((size_t)v->n_tokens + 31) / 32 : 0;
    m->walk = malloc(((size_t)(v ? v->max_depth : 0) + 1) * sizeof *m->walk);
    if (!m->walk) {
        free(m);
        return rb_error_set(err, RB_E_NOMEM, "grammar matcher: out of memory");
    }
    rb_status st = gram_store_init(&m->st, g, err);
    if (st != RB_OK) {
        free(m->walk);
        free(m);
        return st;
    }
    m->cur = gram_store_start(&m->st);
    if (m->cur < 0) {
        st = store_error(m, err);
        rb_grammar_matcher_free(m);
        return st;
    }
    *out = m;
    return RB_OK;
}

void rb_grammar_matcher_free(rb_grammar_matcher *m) {
    if (!m) return;
    drop_masks(m);
    gram_store_free(&m->st);
    free(m->walk);
    free(m);
}

void rb_grammar_matcher_reset(rb_grammar_matcher *m) {
    if (!m) return;
    m->ended = false;
    int32_t id = gram_store_start(&m->st);
    if (id < 0) { /* out of room: start over from an empty store */
        drop_masks(m);
        gram_store_clear(&m->st);
        id = gram_store_start(&m->st);
    }
    m->cur = id < 0 ? 0 : id;
}

/* Set after bytes from set (0: rejected, -1: failure). */
static int32_t walk_bytes(rb_grammar_matcher *m, int32_t set, const char *b, size_t n) {
    for (size_t i = 0; i < n && set > 0; i++) set = gram_store_next(&m->st, set, (uint8_t)b[i]);
    return set;
}

rb_status rb_grammar_matcher_accept_bytes(rb_grammar_matcher *m, const char *bytes, size_t len, rb_error *err) {
    if (!m || (len && !bytes)) return rb_error_set(err, RB_E_INVALID, "grammar matcher: NULL argument");
    if (m->ended) return rb_error_set(err, RB_E_INVALID, "grammar matcher: generation already ended");
    rb_status st = maintain(m, err);
    if (st != RB_OK) return st;
    int32_t s = walk_bytes(m, m->cur, bytes, len);
    if (s < 0) return store_error(m, err);
    if (s == 0) return rb_error_set(err, RB_E_INVALID, "grammar matcher: text does not fit the grammar");
    m->cur = s;
    return RB_OK;
}

rb_status rb_grammar_matcher_accept_token(rb_grammar_matcher *m, int32_t token, rb_error *err) {
    if (!m || !m->v) return rb_error_set(err, RB_E_INVALID, "grammar matcher: NULL argument or no vocabulary");
    const rb_grammar_vocab *v = m->v;
    if (token < 0 || token >= v->n_tokens)
        return rb_error_set(err, RB_E_INVALID, "grammar matcher: token %d out of range", (int)token);
    if (m->ended) return rb_error_set(err, RB_E_INVALID, "grammar matcher: generation already ended");
    if (v->kind[token] == GV_EOG) {
        if (!m->st.sets[m->cur].complete)
            return rb_error_set(err, RB_E_INVALID, "grammar matcher: end of generation before the grammar is complete");
        m->ended = true;
        return RB_OK;
    }
    if (v->kind[token] != GV_TEXT)
        return rb_error_set(err, RB_E_INVALID, "grammar matcher: token %d is never allowed", (int)token);
    rb_status st = maintain(m, err);
    if (st != RB_OK) return st;
    int32_t s = walk_bytes(m, m->cur, v->blob + v->offset[token], v->offset[token + 1] - v->offset[token]);
    if (s < 0) return store_error(m, err);
    if (s == 0) return rb_error_set(err, RB_E_INVALID, "grammar matcher: token %d does not fit the grammar", (int)token);
    m->cur = s;
    return RB_OK;
}

/* The allowed-token bits of the current set (cached). */
static rb_status current_mask(rb_grammar_matcher *m, const uint32_t **out, rb_error *err) {
    rb_status st = maintain(m, err);
    if (st != RB_OK) return st;
    int32_t cur = m->cur;
    if (m->st.sets[cur].mask) {
        *out = m->st.sets[cur].mask;
        return RB_OK;
    }
    if ((m->n_masks + 1) * m->words * 4 > GM_MASK_CACHE_BYTES) drop_masks(m);
    uint32_t *bits = calloc(m->words, sizeof *bits);
    if (!bits) return rb_error_set(err, RB_E_NOMEM, "grammar matcher: out of memory");
    const rb_grammar_vocab *v = m->v;
    const gram_trie_node *nodes = v->nodes;
    const int32_t *ids = v->tok_ids;
    int32_t *walk = m->walk;
    walk[0] = cur;
    size_t nn = v->n_nodes;
    for (size_t i = 0; i < nn;) {
        const gram_trie_node *t = &nodes[i];
        int32_t from = walk[t->depth - 1];
        const int32_t *next = m->st.sets[from].next;
        int32_t s = next && next[t->byte] >= 0 ? next[t->byte] : gram_store_next(&m->st, from, t->byte);
        if (s <= 0) {
            if (s < 0) {
                free(bits);
                return store_error(m, err);
            }
            i = (size_t)t->end;
            continue;
        }
        walk[t->depth] = s;
        for (int32_t k = 0; k < t->tok_n; k++) {
            int32_t id = ids[t->tok_first + k];
            bits[id >> 5] |= 1u << (id & 31);
        }
        i++;
    }
    if (m->st.sets[cur].complete)
        for (size_t k = 0; k < v->n_eog; k++) bits[v->eog[k] >> 5] |= 1u << (v->eog[k] & 31);
    m->st.sets[cur].mask = bits;
    m->n_masks++;
    *out = bits;
    return RB_OK;
}

rb_status rb_grammar_matcher_allowed(rb_grammar_matcher *m, uint32_t *allowed, rb_error *err) {
    if (!m || !m->v || !allowed) return rb_error_set(err, RB_E_INVALID, "grammar matcher: NULL argument or no vocabulary");
    if (m->ended) {
        memset(allowed, 0, m->words * sizeof *allowed);
        return RB_OK;
    }
    const uint32_t *bits;
    rb_status st = current_mask(m, &bits, err);
    if (st != RB_OK) return st;
    memcpy(allowed, bits, m->words * sizeof *allowed);
    return RB_OK;
}

rb_status rb_grammar_matcher_mask_logits(rb_grammar_matcher *m, float *logits, size_t n_logits, rb_error *err) {
    if (!m || !m->v || (n_logits && !logits))
        return rb_error_set(err, RB_E_INVALID, "grammar matcher: NULL argument or no vocabulary");
    if (m->ended) return rb_error_set(err, RB_E_INVALID, "grammar matcher: generation already ended");
    const uint32_t *bits;
    rb_status st = current_mask(m, &bits, err);
    if (st != RB_OK) return st;
    size_t n = n_logits < (size_t)m->v->n_tokens ? n_logits : (size_t)m->v->n_tokens;
    bool any = false;
    for (size_t w = 0; w < (n + 31) / 32 && !any; w++) {
        uint32_t x = bits[w];
        if (w == n / 32) x &= (1u << (n % 32)) - 1;
        any = x != 0;
    }
    if (!any) return rb_error_set(err, RB_E_INVALID, "grammar matcher: no token of the vocabulary fits the grammar here");
    const size_t full = n / 32;
    for (size_t w = 0; w < full; w++) { /* whole words: all-allowed and all-masked ones are the common case */
        const uint32_t x = bits[w];
        float *l = logits + w * 32;
        if (x == 0xFFFFFFFFu) continue;
        if (x == 0) {
            for (int j = 0; j < 32; j++) l[j] = -INFINITY;
            continue;
        }
        for (int j = 0; j < 32; j++)
            if (!(x >> j & 1u)) l[j] = -INFINITY;
    }
    for (size_t i = full * 32; i < n; i++)
        if (!(bits[i / 32] >> (i & 31) & 1u)) logits[i] = -INFINITY;
    for (size_t i = n; i < n_logits; i++) logits[i] = -INFINITY;
    return RB_OK;
}

bool rb_grammar_matcher_is_complete(const rb_grammar_matcher *m) {
    return m && (m->ended || m->st.sets[m->cur].complete);
}

bool rb_grammar_matcher_is_finished(const rb_grammar_matcher *m) {
    return m && (m->ended || gram_store_finished(&m->st, m->cur));
}

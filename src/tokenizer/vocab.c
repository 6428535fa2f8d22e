/* The vocabulary store: id -> token text in one arena, an open-addressing
 * hash from text to id, and a hash from an (left, right) id pair to its merge
 * rank and result, so BPE lookups are O(1). */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
}

rb_status tok_vocab_init(tok_vocab *v, int32_t n) {
    memset(v, 0, sizeof *v);
    if (n <= 0 || n > (1 << 28)) return RB_E_RANGE;
    v->n = n;
    size_t cap = 64;
    while (cap < (size_t)n * 4) cap *= 2; /* every id may be set twice (model + added) */
    v->ht_cap = cap;
    v->off = calloc((size_t)n, sizeof *v->off);
    v->len = malloc((size_t)n * sizeof *v->len);
    v->scores = calloc((size_t)n, sizeof *v->scores);
    v->types = malloc((size_t)n * sizeof *v->types);
    v->ht = malloc(cap * sizeof *v->ht);
    if (!v->off || !v->len || !v->scores || !v->types || !v->ht) {
        tok_vocab_free(v);
        return RB_E_NOMEM;
    }
    for (int32_t i = 0; i < n; i++) {
        v->len[i] = UINT32_MAX;
        v->types[i] = TOK_TYPE_UNUSED;
    }
    memset(v->ht, 0xff, cap * sizeof *v->ht);
    return RB_OK;
}

void tok_vocab_free(tok_vocab *v) {
    free(v->arena);
    free(v->off);
    free(v->len);
    free(v->scores);
    free(v->types);
    free(v->ht);
    free(v->mkeys);
    free(v->mrank);
    free(v->mres);
    free(v->merge_left);
    free(v->merge_right);
    memset(v, 0, sizeof *v);
}

const char *tok_vocab_text(const tok_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n || v->len[id] == UINT32_MAX) return NULL;
    if (len) *len = v->len[id];
    return v->arena + v->off[id];
}

static bool same_text(const tok_vocab *v, int32_t id, const char *s, size_t len) {
    return v->len[id] == len && memcmp(v->arena + v->off[id], s, len) == 0;
}

int32_t tok_vocab_find(const tok_vocab *v, const char *s, size_t len) {
    size_t mask = v->ht_cap - 1;
    for (size_t i = (size_t)hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
        int32_t id = v->ht[i];
        if (id == -1) return -1;
        if (id >= 0 && same_text(v, id, s, len)) return id;
    }
}

rb_status tok_vocab_set(tok_vocab *v, int32_t id, const char *s, size_t len) {
    if (id < 0 || id >= v->n || len >= UINT32_MAX) return RB_E_RANGE;
    if (len > SIZE_MAX - v->arena_len - 1 || v->arena_len + len >= UINT32_MAX) return RB_E_NOMEM;
    if (v->arena_len + len > v->arena_cap) {
        size_t nc = v->arena_cap ? v->arena_cap : 4096;
        while (nc < v->arena_len + len) nc *= 2;
        char *p = realloc(v->arena, nc);
        if (!p) return RB_E_NOMEM;
        v->arena = p;
        v->arena_cap = nc;
    }
    /* drop the old index entry of this id (a second set of the same id) */
    size_t mask = v->ht_cap - 1;
    if (v->len[id] != UINT32_MAX) {
        for (size_t i = (size_t)hash_bytes(v->arena + v->off[id], v->len[id]) & mask; v->ht[i] != -1;
             i = (i + 1) & mask) {
            if (v->ht[i] == id) {
                v->ht[i] = -2 - id; /* tombstone: keeps probe chains intact */
                break;
            }
        }
    }
    if (len) memcpy(v->arena + v->arena_len, s, len);
    v->off[id] = (uint32_t)v->arena_len;
    v->len[id] = (uint32_t)len;
    v->arena_len += len;
    if (v->types[id] == TOK_TYPE_UNUSED) v->types[id] = TOK_TYPE_NORMAL;
    /* insert (a later id with the same text wins, as added tokens override) */
    for (size_t i = (size_t)hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
        int32_t cur = v->ht[i];
        if (cur == -1) {
            v->ht[i] = id;
            return RB_OK;
        }
        if (cur >= 0 && same_text(v, cur, s, len)) {
            v->ht[i] = id;
            return RB_OK;
        }
    }
}

static rb_status merges_grow(tok_vocab *v) {
    size_t nc = v->m_cap ? v->m_cap * 2 : 1024;
    uint64_t *k = malloc(nc * sizeof *k);
    int32_t *r = malloc(nc * sizeof *r), *x = malloc(nc * sizeof *x);
    if (!k || !r || !x) {
        free(k);
        free(r);
        free(x);
        return RB_E_NOMEM;
    }
    memset(k, 0xff, nc * sizeof *k);
    for (size_t i = 0; i < v->m_cap; i++) {
        if (v->mkeys[i] == UINT64_MAX) continue;
        size_t j = (size_t)hash_pair(v->mkeys[i]) & (nc - 1);
        while (k[j] != UINT64_MAX) j = (j + 1) & (nc - 1);
        k[j] = v->mkeys[i];
        r[j] = v->mrank[i];
        x[j] = v->mres[i];
    }
    free(v->mkeys);
    free(v->mrank);
    free(v->mres);
    v->mkeys = k;
    v->mrank = r;
    v->mres = x;
    v->m_cap = nc;
    return RB_OK;
}

rb_status tok_vocab_add_merge(tok_vocab *v, int32_t a, int32_t b, int32_t result) {
    if ((v->n_merges + 1) * 2 > v->m_cap) {
        rb_status st = merges_grow(v);
        if (st) return st;
        int32_t *l = realloc(v->merge_left, v->m_cap * sizeof *l);
        if (!l) return RB_E_NOMEM;
        v->merge_left = l;
        int32_t *r = realloc(v->merge_right, v->m_cap * sizeof *r);
        if (!r) return RB_E_NOMEM;
        v->merge_right = r;
    }
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = v->m_cap - 1;
    size_t j = (size_t)hash_pair(key) & mask;
    while (v->mkeys[j] != UINT64_MAX) {
        if (v->mkeys[j] == key) return RB_OK; /* duplicate merge: the first (lowest rank) wins */
        j = (j + 1) & mask;
    }
    v->mkeys[j] = key;
    v->mrank[j] = (int32_t)v->n_merges;
    v->mres[j] = result;
    v->merge_left[v->n_merges] = a;
    v->merge_right[v->n_merges] = b;
    v->n_merges++;
    return RB_OK;
}

bool tok_vocab_merge(const tok_vocab *v, int32_t a, int32_t b, int32_t *rank, int32_t *result) {
    if (!v->m_cap) return false;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = v->m_cap - 1;
    for (size_t j = (size_t)hash_pair(key) & mask; v->mkeys[j] != UINT64_MAX; j = (j + 1) & mask) {
        if (v->mkeys[j] == key) {
            *rank = v->mrank[j];
            *result = v->mres[j];
            return true;
        }
    }
    return false;
}

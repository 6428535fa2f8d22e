/* Stacks, sets and byte transitions of the grammar matcher (see
 * gram_state.h). Advancing a stack on a byte: an ASCII byte or the last byte
 * of a multi-byte character tests the code point against the top class and
 * moves past it (popping finished alternatives and expanding rule
 * references until every resulting stack has a class on top); a lead or
 * middle byte keeps the class on top with the partial character recorded,
 * but only if some valid code point with that prefix is in the class. */
#include "grammar/gram_state.h"

#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xFF51AFD7ED558CCDull;
}

static bool store_fail(gram_store *s, rb_status st, const char *msg) {
    if (s->st == RB_OK) s->st = rb_error_set(&s->err, st, "grammar matcher: %s", msg);
    return false;
}

static bool grow_table(int32_t **tab, size_t *cap, size_t need) {
    if (need * 2 <= *cap) return true;
    size_t nc = *cap ? *cap * 2 : 1024;
    while (need * 2 > nc) nc *= 2;
    int32_t *t = malloc(nc * sizeof *t);
    if (!t) return false;
    memset(t, 0xFF, nc * sizeof *t);
    free(*tab);
    *tab = t;
    *cap = nc;
    return true;
}

static uint64_t node_hash(int32_t pos, uint32_t part, int32_t parent) {
    return mix(mix(mix(0, (uint32_t)pos), part), (uint32_t)parent);
}

static bool rehash_nodes(gram_store *s) {
    size_t cap = s->node_index_cap;
    if (!grow_table(&s->node_index, &s->node_index_cap, s->n_nodes + 1)) return false;
    if (cap == s->node_index_cap) return true;
    size_t m = s->node_index_cap - 1;
    for (size_t i = 1; i < s->n_nodes; i++) {
        const gram_node *n = &s->nodes[i];
        size_t h = (size_t)node_hash(n->pos, n->part, n->parent) & m;
        while (s->node_index[h] >= 0) h = (h + 1) & m;
        s->node_index[h] = (int32_t)i;
    }
    return true;
}

static int32_t intern_node(gram_store *s, int32_t pos, uint32_t part, int32_t parent) {
    size_t m = s->node_index_cap - 1;
    size_t h = (size_t)node_hash(pos, part, parent) & m;
    for (int32_t id; (id = s->node_index[h]) >= 0; h = (h + 1) & m) {
        const gram_node *n = &s->nodes[id];
        if (n->pos == pos && n->part == part && n->parent == parent) return id;
    }
    if (s->n_nodes >= GRAM_HARD_NODES) return store_fail(s, RB_E_RANGE, "too many grammar states"), -1;
    if (s->n_nodes == s->cap_nodes) {
        size_t nc = s->cap_nodes * 2;
        gram_node *t = realloc(s->nodes, nc * sizeof *t);
        if (!t) return store_fail(s, RB_E_NOMEM, "out of memory"), -1;
        s->nodes = t;
        s->cap_nodes = nc;
    }
    int32_t id = (int32_t)s->n_nodes++;
    s->nodes[id] = (gram_node){pos, part, parent};
    s->node_index[h] = id;
    if ((s->n_nodes + 1) * 2 > s->node_index_cap && !rehash_nodes(s))
        return store_fail(s, RB_E_NOMEM, "out of memory"), -1;
    return id;
}

static bool emit(gram_store *s, int32_t stack) {
    if (!gram_ivec_push(&s->tmp, stack)) return store_fail(s, RB_E_NOMEM, "out of memory");
    return true;
}

static bool expand(gram_store *s, int32_t pos, int32_t parent, int depth);

static bool expand_rule(gram_store *s, int32_t rule, int32_t cont, int depth) {
    const gram_rule *r = &s->g->rules[rule];
    for (int32_t a = 0; a < r->n_alts; a++)
        if (!expand(s, s->g->alt_start[r->first_alt + a], cont, depth + 1)) return false;
    return true;
}

/* Emits the normalized stacks for "match element pos next, then parent". */
static bool expand(gram_store *s, int32_t pos, int32_t parent, int depth) {
    if (++s->work > GRAM_MAX_WORK || depth > 4 * GRAM_MAX_NEST + 1000)
        return store_fail(s, RB_E_RANGE, "grammar too ambiguous or too deeply nested to follow");
    const gram_elem *e = &s->g->elems[pos];
    if (e->type == GE_END) {
        if (parent == 0) return emit(s, 0);
        const gram_node *n = &s->nodes[parent];
        if (s->g->elems[n->pos].type == GE_CHARS) return emit(s, parent);
        return expand(s, n->pos, n->parent, depth + 1);
    }
    if (e->type == GE_CHARS) {
        int32_t id = intern_node(s, pos, 0, parent);
        return id >= 0 && emit(s, id);
    }
    int32_t cont = parent;
    if (s->g->elems[pos + 1].type != GE_END) {
        cont = intern_node(s, pos + 1, 0, parent);
        if (cont < 0) return false;
    }
    return expand_rule(s, e->a, cont, depth);
}

static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};

/* Is some valid code point in [lo, hi] (after removing overlong forms of a
 * len-byte character and surrogates) in the class? */
static bool class_meets(const rb_grammar *g, const gram_elem *e, uint32_t lo, uint32_t hi, int len) {
    if (lo < min_cp[len]) lo = min_cp[len];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return false;
    if (lo <= 0xDFFF && hi >= 0xD800) {
        return (lo < 0xD800 && gram_chars_meets(g, e, lo, 0xD7FF)) ||
               (hi > 0xDFFF && gram_chars_meets(g, e, 0xE000, hi));
    }
    return gram_chars_meets(g, e, lo, hi);
}

static bool advance(gram_store *s, int32_t stack, uint8_t b) {
    if (stack == 0) return true;
    const gram_node n = s->nodes[stack];
    const gram_elem *e = &s->g->elems[n.pos];
    uint32_t val;
    int len, rem;
    if (n.part == 0) {
        if (b < 0x80) {
            if (!gram_chars_has(s->g, e, b)) return true;
            return expand(s, n.pos + 1, n.parent, 0);
        }
        if (b >= 0xC2 && b <= 0xDF) { len = 2; val = b & 0x1Fu; }
        else if (b >= 0xE0 && b <= 0xEF) { len = 3; val = b & 0x0Fu; }
        else if (b >= 0xF0 && b <= 0xF4) { len = 4; val = b & 0x07u; }
        else return true;
        rem = len - 1;
    } else {
        if ((b & 0xC0) != 0x80) return true;
        len = (int)(n.part >> 28);
        rem = (int)((n.part >> 24) & 0xF) - 1;
        val = (n.part & 0xFFFFFFu) << 6 | (b & 0x3Fu);
    }
    uint32_t lo = val << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    if (!class_meets(s->g, e, lo, hi, len)) return true;
    if (rem == 0) return expand(s, n.pos + 1, n.parent, 0);
    int32_t id = intern_node(s, n.pos, (uint32_t)len << 28 | (uint32_t)rem << 24 | val, n.parent);
    return id >= 0 && emit(s, id);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t set_hash(const int32_t *v, size_t n) {
    uint64_t h = n;
    for (size_t i = 0; i < n; i++) h = mix(h, (uint32_t)v[i]);
    return h;
}

static bool rehash_sets(gram_store *s) {
    size_t cap = s->set_index_cap;
    if (!grow_table(&s->set_index, &s->set_index_cap, s->n_sets + 1)) return false;
    if (cap == s->set_index_cap) return true;
    size_t m = s->set_index_cap - 1;
    for (size_t i = 0; i < s->n_sets; i++) {
        const gram_set *x = &s->sets[i];
        size_t h = (size_t)set_hash(s->items + x->first, (size_t)x->n) & m;
        while (s->set_index[h] >= 0) h = (h + 1) & m;
        s->set_index[h] = (int32_t)i;
    }
    return true;
}

/* Interns the stacks in s->tmp (sorted and deduplicated here) as a set. */
static int32_t intern_tmp(gram_store *s) {
    int32_t *v = s->tmp.v;
    size_t n = s->tmp.n;
    if (n > 1) {
        qsort(v, n, sizeof *v, cmp_i32);
        size_t k = 1;
        for (size_t i = 1; i < n; i++)
            if (v[i] != v[k - 1]) v[k++] = v[i];
        n = k;
    }
    if (n == 0) return 0;
    if (n > GRAM_MAX_SET_SIZE) return store_fail(s, RB_E_RANGE, "grammar too ambiguous to follow"), -1;
    size_t m = s->set_index_cap - 1;
    size_t h = (size_t)set_hash(v, n) & m;
    for (int32_t id; (id = s->set_index[h]) >= 0; h = (h + 1) & m) {
        const gram_set *x = &s->sets[id];
        if ((size_t)x->n == n && !memcmp(s->items + x->first, v, n * sizeof *v)) return id;
    }
    if (s->n_sets >= GRAM_HARD_SETS) return store_fail(s, RB_E_RANGE, "too many grammar states"), -1;
    if (s->n_items + n > s->cap_items) {
        size_t nc = s->cap_items * 2;
        while (nc < s->n_items + n) nc *= 2;
        int32_t *t = realloc(s->items, nc * sizeof *t);
        if (!t) return store_fail(s, RB_E_NOMEM, "out of memory"), -1;
        s->items = t;
        s->cap_items = nc;
    }
    if (s->n_sets == s->cap_sets) {
        size_t nc = s->cap_sets * 2;
        gram_set *t = realloc(s->sets, nc * sizeof *t);
        if (!t) return store_fail(s, RB_E_NOMEM, "out of memory"), -1;
        s->sets = t;
        s->cap_sets = nc;
    }
    memcpy(s->items + s->n_items, v, n * sizeof *v);
    int32_t id = (int32_t)s->n_sets++;
    s->sets[id] = (gram_set){(int32_t)s->n_items, (int32_t)n, NULL, NULL, v[0] == 0};
    s->n_items += n;
    s->set_index[h] = id;
    if ((s->n_sets + 1) * 2 > s->set_index_cap && !rehash_sets(s))
        return store_fail(s, RB_E_NOMEM, "out of memory"), -1;
    return id;
}

rb_status gram_store_init(gram_store *s, const rb_grammar *g, rb_error *err) {
    memset(s, 0, sizeof *s);
    s->g = g;
    s->cap_nodes = 1024;
    s->cap_items = 1024;
    s->cap_sets = 256;
    s->nodes = malloc(s->cap_nodes * sizeof *s->nodes);
    s->items = malloc(s->cap_items * sizeof *s->items);
    s->sets = malloc(s->cap_sets * sizeof *s->sets);
    if (!s->nodes || !s->items || !s->sets || !grow_table(&s->node_index, &s->node_index_cap, 512) ||
        !grow_table(&s->set_index, &s->set_index_cap, 128)) {
        gram_store_free(s);
        return rb_error_set(err, RB_E_NOMEM, "grammar matcher: out of memory");
    }
    gram_store_clear(s);
    return RB_OK;
}

void gram_store_clear(gram_store *s) {
    for (size_t i = 0; i < s->n_sets; i++) free(s->sets[i].next);
    s->n_nodes = 1;
    s->nodes[0] = (gram_node){-1, 0, -1};
    memset(s->node_index, 0xFF, s->node_index_cap * sizeof *s->node_index);
    memset(s->set_index, 0xFF, s->set_index_cap * sizeof *s->set_index);
    s->n_items = 0;
    s->n_sets = 1;
    s->sets[0] = (gram_set){0, 0, NULL, NULL, false}; /* the empty set, never in the index */
    s->st = RB_OK;
}

void gram_store_free(gram_store *s) {
    if (s->sets)
        for (size_t i = 0; i < s->n_sets; i++) free(s->sets[i].next);
    free(s->nodes);
    free(s->node_index);
    free(s->items);
    free(s->sets);
    free(s->set_index);
    free(s->tmp.v);
    memset(s, 0, sizeof *s);
}

int32_t gram_store_start(gram_store *s) {
    s->tmp.n = 0;
    s->work = 0;
    if (!expand_rule(s, s->g->root, 0, 0)) return -1;
    return intern_tmp(s);
}

int32_t gram_store_next(gram_store *s, int32_t set, uint8_t b) {
    if (set == 0) return 0;
    int32_t *next = s->sets[set].next;
    if (next && next[b] >= 0) return next[b];
    if (!next) {
        next = malloc(256 * sizeof *next);
        if (!next) return store_fail(s, RB_E_NOMEM, "out of memory"), -1;
        memset(next, 0xFF, 256 * sizeof *next);
        s->sets[set].next = next;
    }
    s->tmp.n = 0;
    s->work = 0;
    const int32_t first = s->sets[set].first, n = s->sets[set].n;
    for (int32_t i = 0; i < n; i++)
        if (!advance(s, s->items[first + i], b)) return -1;
    int32_t id = intern_tmp(s);
    if (id < 0) return -1;
    s->sets[set].next[b] = id;
    return id;
}

/* Copies stack `stack` of the old arrays into s (already cleared). */
static int32_t copy_stack(gram_store *s, const gram_node *old, int32_t stack) {
    if (stack <= 0) return stack;
    int32_t parent = copy_stack(s, old, old[stack].parent);
    if (parent < 0) return -1;
    return intern_node(s, old[stack].pos, old[stack].part, parent);
}

int32_t gram_store_rebase(gram_store *s, int32_t set) {
    size_t n_old = s->n_nodes;
    gram_node *old = malloc(n_old * sizeof *old);
    int32_t n = s->sets[set].n;
    int32_t *stacks = malloc(((size_t)n + 1) * sizeof *stacks);
    if (!old || !stacks) {
        free(old);
        free(stacks);
        return store_fail(s, RB_E_NOMEM, "out of memory"), -1;
    }
    memcpy(old, s->nodes, n_old * sizeof *old);
    memcpy(stacks, s->items + s->sets[set].first, (size_t)n * sizeof *stacks);
    gram_store_clear(s);
    s->tmp.n = 0;
    int32_t id = 0;
    for (int32_t i = 0; i < n && id >= 0; i++) {
        id = copy_stack(s, old, stacks[i]);
        if (id >= 0 && !emit(s, id)) id = -1;
    }
    if (id >= 0) id = intern_tmp(s);
    free(old);
    free(stacks);
    return id;
}

bool gram_store_finished(const gram_store *s, int32_t set) {
    return s->sets[set].n == 1 && s->items[s->sets[set].first] == 0;
}

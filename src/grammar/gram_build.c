/* Grammar builder (see gram_build.h): rule table with a name index,
 * character classes normalized to sorted disjoint ranges, the rewriting of
 * repetitions into rules, the left-recursion check and the flattening into
 * rb_grammar's element arrays. */
#include "grammar/gram_build.h"

#include <stdlib.h>
#include <string.h>

typedef struct brule {
    char *name; /* NULL: anonymous */
    bool defined;
    size_t ref_pos;
    gram_ivec *alts;
    size_t n_alts, cap_alts;
} brule;

struct gram_builder {
    brule *rules;
    size_t n_rules, cap_rules;
    int32_t *index; /* open addressing over named rules: rule id or -1 */
    size_t index_cap;
    gram_range *ranges;
    size_t n_ranges, cap_ranges;
    int32_t *cls; /* per class: first range, count (pairs) */
    size_t n_cls, cap_cls;
    size_t n_syms;
};

bool gram_ivec_push(gram_ivec *v, int32_t x) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 8;
        int32_t *t = realloc(v->v, nc * sizeof *t);
        if (!t) return false;
        v->v = t;
        v->cap = nc;
    }
    v->v[v->n++] = x;
    return true;
}

static rb_status nomem(rb_error *err) { return rb_error_set(err, RB_E_NOMEM, "grammar: out of memory"); }

rb_status gram_builder_create(gram_builder **out, rb_error *err) {
    gram_builder *b = calloc(1, sizeof *b);
    if (!b) return nomem(err);
    b->index_cap = 64;
    b->index = malloc(b->index_cap * sizeof *b->index);
    if (!b->index) { free(b); return nomem(err); }
    memset(b->index, 0xFF, b->index_cap * sizeof *b->index);
    *out = b;
    return RB_OK;
}

void gram_builder_free(gram_builder *b) {
    if (!b) return;
    for (size_t i = 0; i < b->n_rules; i++) {
        for (size_t a = 0; a < b->rules[i].n_alts; a++) free(b->rules[i].alts[a].v);
        free(b->rules[i].alts);
        free(b->rules[i].name);
    }
    free(b->rules);
    free(b->index);
    free(b->ranges);
    free(b->cls);
    free(b);
}

static uint64_t hash_name(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static rb_status add_rule(gram_builder *b, const char *name, size_t len, int32_t *id, rb_error *err) {
    if (b->n_rules >= GRAM_MAX_RULES) return rb_error_set(err, RB_E_RANGE, "grammar: more than %u rules", GRAM_MAX_RULES);
    if (b->n_rules == b->cap_rules) {
        size_t nc = b->cap_rules ? b->cap_rules * 2 : 16;
        brule *t = realloc(b->rules, nc * sizeof *t);
        if (!t) return nomem(err);
        b->rules = t;
        b->cap_rules = nc;
    }
    brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    if (name) {
        r->name = malloc(len + 1);
        if (!r->name) return nomem(err);
        memcpy(r->name, name, len);
        r->name[len] = '\0';
    } else {
        r->defined = true;
    }
    *id = (int32_t)b->n_rules++;
    return RB_OK;
}

static rb_status grow_index(gram_builder *b, rb_error *err) {
    size_t nc = b->index_cap * 2;
    int32_t *t = malloc(nc * sizeof *t);
    if (!t) return nomem(err);
    memset(t, 0xFF, nc * sizeof *t);
    for (size_t i = 0; i < b->index_cap; i++) {
        int32_t id = b->index[i];
        if (id < 0) continue;
        const char *nm = b->rules[id].name;
        size_t h = (size_t)hash_name(nm, strlen(nm)) & (nc - 1);
        while (t[h] >= 0) h = (h + 1) & (nc - 1);
        t[h] = id;
    }
    free(b->index);
    b->index = t;
    b->index_cap = nc;
    return RB_OK;
}

/* Finds or adds the named rule; *added tells which. */
static rb_status lookup(gram_builder *b, const char *name, size_t len, int32_t *id, bool *added, rb_error *err) {
    size_t h = (size_t)hash_name(name, len) & (b->index_cap - 1);
    for (;;) {
        int32_t r = b->index[h];
        if (r < 0) break;
        const char *nm = b->rules[r].name;
        if (strlen(nm) == len && !memcmp(nm, name, len)) {
            *id = r;
            *added = false;
            return RB_OK;
        }
        h = (h + 1) & (b->index_cap - 1);
    }
    rb_status st = add_rule(b, name, len, id, err);
    if (st != RB_OK) return st;
    b->index[h] = *id;
    *added = true;
    size_t named = 0;
    for (size_t i = 0; i < b->index_cap; i++) named += b->index[i] >= 0;
    if (named * 2 > b->index_cap) return grow_index(b, err);
    return RB_OK;
}

rb_status gram_builder_new_rule(gram_builder *b, const char *name, size_t len, int32_t *id, rb_error *err) {
    if (!name) return add_rule(b, NULL, 0, id, err);
    rb_status st = gram_builder_define(b, name, len, id, err);
    return st;
}

rb_status gram_builder_ref(gram_builder *b, const char *name, size_t len, size_t pos, int32_t *id, rb_error *err) {
    bool added;
    rb_status st = lookup(b, name, len, id, &added, err);
    if (st == RB_OK && added) b->rules[*id].ref_pos = pos;
    return st;
}

rb_status gram_builder_define(gram_builder *b, const char *name, size_t len, int32_t *id, rb_error *err) {
    bool added;
    rb_status st = lookup(b, name, len, id, &added, err);
    if (st != RB_OK) return st;
    if (b->rules[*id].defined) return rb_error_set(err, RB_E_INVALID, "grammar: rule '%s' defined twice", b->rules[*id].name);
    b->rules[*id].defined = true;
    return RB_OK;
}

rb_status gram_builder_add_alt(gram_builder *b, int32_t rule, const gram_ivec *alt, rb_error *err) {
    b->n_syms += alt->n + 1;
    if (b->n_syms > GRAM_MAX_SYMBOLS) return rb_error_set(err, RB_E_RANGE, "grammar: more than %u symbols", GRAM_MAX_SYMBOLS);
    brule *r = &b->rules[rule];
    if (r->n_alts == r->cap_alts) {
        size_t nc = r->cap_alts ? r->cap_alts * 2 : 2;
        gram_ivec *t = realloc(r->alts, nc * sizeof *t);
        if (!t) return nomem(err);
        r->alts = t;
        r->cap_alts = nc;
    }
    gram_ivec copy = {0};
    if (alt->n) {
        copy.v = malloc(alt->n * sizeof *copy.v);
        if (!copy.v) return nomem(err);
        memcpy(copy.v, alt->v, alt->n * sizeof *copy.v);
        copy.n = copy.cap = alt->n;
    }
    r->alts[r->n_alts++] = copy;
    return RB_OK;
}

static int cmp_range(const void *a, const void *b) {
    const gram_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

rb_status gram_builder_class(gram_builder *b, const gram_range *r, size_t n, bool negate, int32_t *sym,
                             rb_error *err) {
    gram_range *tmp = malloc((n + 1) * sizeof *tmp);
    if (!tmp) return nomem(err);
    if (n) memcpy(tmp, r, n * sizeof *tmp);
    qsort(tmp, n, sizeof *tmp, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && tmp[i].lo <= tmp[m - 1].hi + 1) {
            if (tmp[i].hi > tmp[m - 1].hi) tmp[m - 1].hi = tmp[i].hi;
        } else {
            tmp[m++] = tmp[i];
        }
    }
    if (negate) {
        gram_range *neg = malloc((m + 1) * sizeof *neg);
        if (!neg) { free(tmp); return nomem(err); }
        size_t k = 0;
        uint32_t next = 0;
        for (size_t i = 0; i < m; i++) {
            if (tmp[i].lo > next) neg[k++] = (gram_range){next, tmp[i].lo - 1};
            next = tmp[i].hi + 1;
        }
        if (next <= 0x10FFFF) neg[k++] = (gram_range){next, 0x10FFFF};
        free(tmp);
        tmp = neg;
        m = k;
    }
    if (b->n_ranges + m > b->cap_ranges) {
        size_t nc = b->cap_ranges ? b->cap_ranges : 64;
        while (nc < b->n_ranges + m) nc *= 2;
        gram_range *t = realloc(b->ranges, nc * sizeof *t);
        if (!t) { free(tmp); return nomem(err); }
        b->ranges = t;
        b->cap_ranges = nc;
    }
    if (b->n_cls == b->cap_cls) {
        size_t nc = b->cap_cls ? b->cap_cls * 2 : 64;
        int32_t *t = realloc(b->cls, nc * 2 * sizeof *t);
        if (!t) { free(tmp); return nomem(err); }
        b->cls = t;
        b->cap_cls = nc;
    }
    if (m) memcpy(b->ranges + b->n_ranges, tmp, m * sizeof *tmp);
    free(tmp);
    b->cls[2 * b->n_cls] = (int32_t)b->n_ranges;
    b->cls[2 * b->n_cls + 1] = (int32_t)m;
    b->n_ranges += m;
    *sym = -1 - (int32_t)b->n_cls++;
    return RB_OK;
}

rb_status gram_builder_wrap(gram_builder *b, const gram_ivec *item, int32_t *sym, rb_error *err) {
    if (item->n == 1) {
        *sym = item->v[0];
        return RB_OK;
    }
    int32_t r = -1;
    rb_status st = add_rule(b, NULL, 0, &r, err);
    if (st == RB_OK) st = gram_builder_add_alt(b, r, item, err);
    if (st == RB_OK) *sym = r;
    return st;
}

rb_status gram_builder_repeat(gram_builder *b, int32_t sym, int lo, int hi, gram_ivec *item, rb_error *err) {
    item->n = 0;
    b->n_syms += (size_t)lo + (hi > lo ? (size_t)(hi - lo) * 3 : 3);
    if (b->n_syms > GRAM_MAX_SYMBOLS) return rb_error_set(err, RB_E_RANGE, "grammar: more than %u symbols", GRAM_MAX_SYMBOLS);
    for (int i = 0; i < lo; i++)
        if (!gram_ivec_push(item, sym)) return nomem(err);
    gram_ivec empty = {0};
    if (hi < 0) {
        /* R ::= sym R | (empty) */
        int32_t r = -1;
        rb_status st = add_rule(b, NULL, 0, &r, err);
        if (st != RB_OK) return st;
        int32_t two[2] = {sym, r};
        gram_ivec alt = {two, 2, 2};
        if ((st = gram_builder_add_alt(b, r, &alt, err)) != RB_OK) return st;
        if ((st = gram_builder_add_alt(b, r, &empty, err)) != RB_OK) return st;
        if (!gram_ivec_push(item, r)) return nomem(err);
        return RB_OK;
    }
    /* R_k ::= sym R_(k-1) | (empty), R_1 ::= sym | (empty) */
    int32_t prev = -1;
    for (int k = 0; k < hi - lo; k++) {
        int32_t r = -1;
        rb_status st = add_rule(b, NULL, 0, &r, err);
        if (st != RB_OK) return st;
        int32_t two[2] = {sym, prev};
        gram_ivec alt = {two, prev >= 0 ? 2u : 1u, 2};
        if ((st = gram_builder_add_alt(b, r, &alt, err)) != RB_OK) return st;
        if ((st = gram_builder_add_alt(b, r, &empty, err)) != RB_OK) return st;
        prev = r;
    }
    if (prev >= 0 && !gram_ivec_push(item, prev)) return nomem(err);
    return RB_OK;
}

const char *gram_builder_undefined(const gram_builder *b, size_t *ref_pos) {
    for (size_t i = 0; i < b->n_rules; i++)
        if (!b->rules[i].defined) {
            *ref_pos = b->rules[i].ref_pos;
            return b->rules[i].name;
        }
    return NULL;
}

/* Left recursion: a rule reaching itself through refs that follow only
 * nullable symbols. Returns the id of a rule on such a cycle, or -1; -2 when
 * out of memory. */
static int32_t find_left_recursion(const gram_builder *b) {
    size_t n = b->n_rules;
    bool *nullable = calloc(n + 1, sizeof *nullable);
    uint8_t *color = calloc(n + 1, 1);
    int32_t *stack = malloc((n + 1) * 2 * sizeof *stack);
    size_t *first = malloc((n + 2) * sizeof *first);
    gram_ivec edges = {0};
    int32_t found = -1;
    if (!nullable || !color || !stack || !first) { found = -2; goto done; }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            for (size_t a = 0; a < b->rules[r].n_alts && !nullable[r]; a++) {
                const gram_ivec *alt = &b->rules[r].alts[a];
                size_t i = 0;
                while (i < alt->n && alt->v[i] >= 0 && nullable[alt->v[i]]) i++;
                if (i == alt->n) nullable[r] = changed = true;
            }
        }
    }
    /* Edges r -> s: s may be the first thing r matches. */
    for (size_t r = 0; r < n; r++) {
        first[r] = edges.n;
        for (size_t a = 0; a < b->rules[r].n_alts; a++) {
            const gram_ivec *alt = &b->rules[r].alts[a];
            for (size_t i = 0; i < alt->n && alt->v[i] >= 0; i++) {
                if (!gram_ivec_push(&edges, alt->v[i])) { found = -2; goto done; }
                if (!nullable[alt->v[i]]) break;
            }
        }
    }
    first[n] = edges.n;
    /* Iterative DFS; a frame is (rule, index of its next edge). */
    for (size_t s = 0; s < n && found < 0; s++) {
        if (color[s]) continue;
        stack[0] = (int32_t)s;
        stack[1] = (int32_t)first[s];
        color[s] = 1;
        size_t sp = 1;
        while (sp && found < 0) {
            int32_t r = stack[2 * (sp - 1)];
            int32_t e = stack[2 * (sp - 1) + 1];
            if ((size_t)e >= first[r + 1]) {
                color[r] = 2;
                sp--;
                continue;
            }
            stack[2 * (sp - 1) + 1] = e + 1;
            int32_t next = edges.v[e];
            if (color[next] == 1) found = next;
            else if (color[next] == 0) {
                color[next] = 1;
                stack[2 * sp] = next;
                stack[2 * sp + 1] = (int32_t)first[next];
                sp++;
            }
        }
    }
done:
    free(nullable);
    free(color);
    free(stack);
    free(first);
    free(edges.v);
    return found;
}

rb_status gram_builder_finish(gram_builder *b, const char *root, rb_grammar **out, rb_error *err) {
    int32_t root_id = -1;
    size_t rl = strlen(root);
    size_t h = (size_t)hash_name(root, rl) & (b->index_cap - 1);
    for (int32_t r; (r = b->index[h]) >= 0; h = (h + 1) & (b->index_cap - 1))
        if (!strcmp(b->rules[r].name, root)) { root_id = r; break; }
    if (root_id < 0) return rb_error_set(err, RB_E_NOT_FOUND, "grammar: no rule '%s'", root);
    int32_t lr = find_left_recursion(b);
    if (lr == -2) return nomem(err);
    if (lr >= 0) {
        if (b->rules[lr].name)
            return rb_error_set(err, RB_E_INVALID, "grammar: rule '%s' is left-recursive", b->rules[lr].name);
        return rb_error_set(err, RB_E_INVALID,
                            "grammar: left recursion (a repeated group or rule that can match empty text)");
    }
    rb_grammar *g = calloc(1, sizeof *g);
    if (!g) return nomem(err);
    size_t n_alts = 0, n_elems = 0;
    for (size_t r = 0; r < b->n_rules; r++) {
        n_alts += b->rules[r].n_alts;
        for (size_t a = 0; a < b->rules[r].n_alts; a++) n_elems += b->rules[r].alts[a].n + 1;
    }
    g->rules = malloc((b->n_rules ? b->n_rules : 1) * sizeof *g->rules);
    g->alt_start = malloc((n_alts ? n_alts : 1) * sizeof *g->alt_start);
    g->elems = malloc((n_elems ? n_elems : 1) * sizeof *g->elems);
    g->ranges = malloc((b->n_ranges ? b->n_ranges : 1) * sizeof *g->ranges);
    if (!g->rules || !g->alt_start || !g->elems || !g->ranges) {
        rb_grammar_free(g);
        return nomem(err);
    }
    if (b->n_ranges) memcpy(g->ranges, b->ranges, b->n_ranges * sizeof *g->ranges);
    g->n_ranges = b->n_ranges;
    size_t ai = 0, ei = 0;
    for (size_t r = 0; r < b->n_rules; r++) {
        g->rules[r].first_alt = (int32_t)ai;
        g->rules[r].n_alts = (int32_t)b->rules[r].n_alts;
        for (size_t a = 0; a < b->rules[r].n_alts; a++) {
            g->alt_start[ai++] = (int32_t)ei;
            const gram_ivec *alt = &b->rules[r].alts[a];
            for (size_t i = 0; i < alt->n; i++) {
                int32_t s = alt->v[i];
                if (s >= 0) g->elems[ei++] = (gram_elem){GE_REF, s, 0};
                else {
                    int32_t c = -1 - s;
                    g->elems[ei++] = (gram_elem){GE_CHARS, b->cls[2 * c], b->cls[2 * c + 1]};
                }
            }
            g->elems[ei++] = (gram_elem){GE_END, 0, 0};
        }
    }
    g->n_rules = b->n_rules;
    g->n_alts = n_alts;
    g->n_elems = n_elems;
    g->root = root_id;
    *out = g;
    return RB_OK;
}

void rb_grammar_free(rb_grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->ranges);
    free(g->alt_start);
    free(g->rules);
    free(g);
}

bool gram_chars_has(const rb_grammar *g, const gram_elem *e, uint32_t c) {
    const gram_range *r = g->ranges + e->a;
    size_t lo = 0, hi = (size_t)e->b;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r[mid].hi < c) lo = mid + 1;
        else hi = mid;
    }
    return lo < (size_t)e->b && r[lo].lo <= c;
}

bool gram_chars_meets(const rb_grammar *g, const gram_elem *e, uint32_t lo, uint32_t hi) {
    const gram_range *r = g->ranges + e->a;
    size_t a = 0, z = (size_t)e->b;
    while (a < z) {
        size_t mid = (a + z) / 2;
        if (r[mid].hi < lo) a = mid + 1;
        else z = mid;
    }
    return a < (size_t)e->b && r[a].lo <= hi;
}

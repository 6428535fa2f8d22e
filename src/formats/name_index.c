/* Open-addressing hash index of names (see name_index.h). */
#include "formats/name_index.h"

#include <stdlib.h>
#include <string.h>

static uint64_t name_hash(const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

void rb_name_index_free(rb_name_index *ix) {
    if (!ix) return;
    free(ix->slots);
    ix->slots = NULL;
    ix->cap = 0;
    ix->count = 0;
}

static void place(rb_name_slot *slots, size_t cap, const rb_name_slot *s) {
    size_t i = (size_t)s->hash & (cap - 1);
    while (slots[i].id >= 0) i = (i + 1) & (cap - 1);
    slots[i] = *s;
}

rb_status rb_name_index_reserve(rb_name_index *ix, size_t n) {
    if (n > SIZE_MAX / 4) return RB_E_NOMEM;
    size_t need = 16;
    while (need < 2 * n) need *= 2; /* load factor <= 1/2 */
    if (need <= ix->cap) return RB_OK;
    if (need > SIZE_MAX / sizeof(rb_name_slot)) return RB_E_NOMEM;
    rb_name_slot *slots = malloc(need * sizeof *slots);
    if (!slots) return RB_E_NOMEM;
    for (size_t i = 0; i < need; i++) slots[i].id = -1;
    for (size_t i = 0; i < ix->cap; i++)
        if (ix->slots[i].id >= 0) place(slots, need, &ix->slots[i]);
    free(ix->slots);
    ix->slots = slots;
    ix->cap = need;
    return RB_OK;
}

static size_t probe(const rb_name_index *ix, const char *name, size_t len, uint64_t h) {
    size_t i = (size_t)h & (ix->cap - 1);
    while (ix->slots[i].id >= 0) {
        const rb_name_slot *s = &ix->slots[i];
        if (s->hash == h && s->len == len && (len == 0 || memcmp(s->name, name, len) == 0)) return i;
        i = (i + 1) & (ix->cap - 1);
    }
    return i;
}

rb_status rb_name_index_insert(rb_name_index *ix, const char *name, size_t len, int64_t id, int64_t *existing) {
    if (ix->count + 1 > ix->cap / 2) {
        rb_status s = rb_name_index_reserve(ix, ix->count + 1 < 8 ? 8 : 2 * (ix->count + 1));
        if (s != RB_OK) return s;
    }
    uint64_t h = name_hash(name, len);
    size_t i = probe(ix, name, len, h);
    if (ix->slots[i].id >= 0) {
        if (existing) *existing = ix->slots[i].id;
        return RB_E_INVALID;
    }
    ix->slots[i] = (rb_name_slot){name, len, h, id};
    ix->count++;
    return RB_OK;
}

int64_t rb_name_index_find(const rb_name_index *ix, const char *name, size_t len) {
    if (!ix || ix->cap == 0 || !name) return -1;
    size_t i = probe(ix, name, len, name_hash(name, len));
    return ix->slots[i].id;
}

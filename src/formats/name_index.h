/* Internal helper of the formats layer: a hash index from byte-string names
 * (not necessarily NUL-terminated) to integer ids, so duplicate detection and
 * lookups over files with very many keys or tensors stay O(1) each instead of
 * quadratic. Names are referenced, not copied: they must outlive the index. */
#ifndef RBEE_FORMATS_NAME_INDEX_H
#define RBEE_FORMATS_NAME_INDEX_H

#include "rbee/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct rb_name_slot {
    const char *name;
    size_t len;
    uint64_t hash;
    int64_t id; /* -1 = empty slot */
} rb_name_slot;

typedef struct rb_name_index {
    rb_name_slot *slots;
    size_t cap; /* power of two, or 0 */
    size_t count;
} rb_name_index;

/* Zero-initialised rb_name_index is a valid empty index. */
void rb_name_index_free(rb_name_index *ix);
/* Reserves room for n names without further allocation (RB_E_NOMEM on failure). */
rb_status rb_name_index_reserve(rb_name_index *ix, size_t n);
/* Inserts name -> id. Returns RB_OK, RB_E_INVALID if the name is already
 * present (then *existing receives its id when non-NULL), or RB_E_NOMEM. */
rb_status rb_name_index_insert(rb_name_index *ix, const char *name, size_t len, int64_t id, int64_t *existing);
/* Id of name, or -1. */
int64_t rb_name_index_find(const rb_name_index *ix, const char *name, size_t len);

#endif

/* sentencepiece's precompiled charsmap (normalizer_spec.precompiled_charsmap,
 * also tokenizer.json's "Precompiled" normalizer): parsing, a full check of
 * the double-array trie against its own bounds (it is external input), and
 * the longest-prefix lookup the normalizer runs at each position.
 *
 * Layout: uint32 (little endian) trie size in bytes, the darts-clone units
 * (uint32 each), then the replacement strings, NUL-separated. A unit holds
 * a label (bits 0-7, bit 31 set on value units), a has-leaf flag (bit 8) and
 * an offset (bits 10-31, shifted left by 8 more when bit 9 is set); a child
 * for byte c of node p sits at p ^ offset(p) ^ c, and a node with a leaf keeps
 * its value (an index into the replacements) at p ^ offset(p). */
#include "tokenizer/unigram_internal.h"

#include <stdlib.h>
#include <string.h>

static inline uint32_t u_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
static inline bool u_has_leaf(uint32_t u) { return (u >> 8) & 1u; }
static inline uint32_t u_value(uint32_t u) { return u & 0x7FFFFFFFu; }
static inline uint32_t u_label(uint32_t u) { return u & 0x800000FFu; }

void ug_charsmap_free(ug_charsmap *cm) {
    free(cm->units);
    free(cm->norm);
    memset(cm, 0, sizeof *cm);
}

static bool value_ok(const ug_charsmap *cm, uint32_t v) {
    return v < cm->norm_len && memchr(cm->norm + v, 0, cm->norm_len - v) != NULL;
}

/* Visits every node reachable from the root once (darts-clone shares the
 * subtrees of common suffixes, so the trie is a DAG; a crafted cycle is cut
 * by the visited marks and cannot make a lookup leave the array either,
 * since lookups are bounded by the key) and checks each link and value. */
static rb_status check_trie(const ug_charsmap *cm, rb_error *err) {
    const size_t n = cm->n_units;
    size_t *stack = malloc(sizeof(size_t) * n);
    uint8_t *seen = calloc(n, 1);
    if (!stack || !seen) {
        free(stack);
        free(seen);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    size_t sp = 0;
    stack[sp++] = 0;
    seen[0] = 1;
    rb_status st = RB_OK;
    while (sp && st == RB_OK) {
        const size_t node = stack[--sp];
        const size_t base = node ^ u_offset(cm->units[node]);
        if (base >= n) {
            st = rb_error_set(err, RB_E_FORMAT, "charsmap: trie offset at unit %zu points outside the trie", node);
            break;
        }
        if (node != 0 && u_has_leaf(cm->units[node]) && !value_ok(cm, u_value(cm->units[base]))) {
            st = rb_error_set(err, RB_E_FORMAT, "charsmap: value at unit %zu points outside the replacements", base);
            break;
        }
        for (uint32_t c = 1; c < 256; c++) {
            const size_t child = base ^ c;
            if (child >= n || seen[child] || u_label(cm->units[child]) != c) continue;
            seen[child] = 1;
            stack[sp++] = child; /* at most n pushes: each unit once */
        }
    }
    free(stack);
    free(seen);
    return st;
}

rb_status ug_charsmap_parse(const uint8_t *data, size_t len, ug_charsmap *cm, rb_error *err) {
    memset(cm, 0, sizeof *cm);
    if (len < 4) return rb_error_set(err, RB_E_FORMAT, "charsmap: %zu bytes, too short", len);
    const uint32_t tsize = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
                           (uint32_t)data[3] << 24;
    if (tsize % 4 || tsize == 0 || tsize > len - 4)
        return rb_error_set(err, RB_E_FORMAT, "charsmap: trie size %u does not fit in %zu bytes", tsize, len);
    cm->n_units = tsize / 4;
    cm->norm_len = len - 4 - tsize;
    cm->units = malloc(tsize);
    cm->norm = malloc(cm->norm_len ? cm->norm_len : 1);
    if (!cm->units || !cm->norm) {
        ug_charsmap_free(cm);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < cm->n_units; i++) {
        const uint8_t *p = data + 4 + 4 * i;
        cm->units[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
    if (cm->norm_len) memcpy(cm->norm, data + 4 + tsize, cm->norm_len);
    rb_status st = check_trie(cm, err);
    if (st != RB_OK) ug_charsmap_free(cm);
    return st;
}

const char *ug_charsmap_match(const ug_charsmap *cm, const char *s, size_t len, size_t *consumed) {
    if (!cm->n_units) return NULL;
    size_t node = u_offset(cm->units[0]); /* checked at load: every step below stays inside */
    const char *best = NULL;
    for (size_t i = 0; i < len; i++) {
        const uint32_t c = (uint8_t)s[i];
        if (c == 0) break;
        node ^= c;
        if (node >= cm->n_units) break;
        const uint32_t u = cm->units[node];
        if (u_label(u) != c) break;
        node ^= u_offset(u);
        if (node >= cm->n_units) break;
        if (u_has_leaf(u)) {
            const uint32_t v = u_value(cm->units[node]);
            if (!value_ok(cm, v)) break;
            best = cm->norm + v;
            *consumed = i + 1;
        }
    }
    return best;
}

/* Unicode NFC (canonical decomposition, canonical ordering, canonical
 * composition) for the "NFC" normalizer of Qwen-style tokenizers, driven by
 * the generated tables in unicode_nfc_data.h plus algorithmic Hangul. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_utf8.h"
#include "tokenizer/unicode_nfc_data.h"

#include <stdlib.h>

#define N_DECOMP (sizeof nfc_decomp_index / sizeof nfc_decomp_index[0])
#define N_CCC (sizeof nfc_ccc / sizeof nfc_ccc[0])
#define N_COMP (sizeof nfc_comp / sizeof nfc_comp[0])

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19, VCOUNT = 21, TCOUNT = 28 };
#define NCOUNT (VCOUNT * TCOUNT)
#define SCOUNT (LCOUNT * NCOUNT)

static unsigned ccc_of(uint32_t cp) {
    if (cp < 0x300) return 0;
    size_t lo = 0, hi = N_CCC;
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (nfc_ccc[m][0] == cp) return nfc_ccc[m][1];
        if (nfc_ccc[m][0] < cp) lo = m + 1;
        else hi = m;
    }
    return 0;
}

unsigned tok_ccc(uint32_t cp) { return ccc_of(cp); }

static const uint32_t *decomp_of(uint32_t cp, size_t *n) {
    size_t lo = 0, hi = N_DECOMP;
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (nfc_decomp_index[m][0] == cp) {
            *n = nfc_decomp_index[m][2];
            return nfc_decomp_pool + nfc_decomp_index[m][1];
        }
        if (nfc_decomp_index[m][0] < cp) lo = m + 1;
        else hi = m;
    }
    return NULL;
}

static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    size_t lo = 0, hi = N_COMP;
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        const uint32_t *e = nfc_comp[m];
        if (e[0] == a && e[1] == b) return e[2];
        if (e[0] < a || (e[0] == a && e[1] < b)) lo = m + 1;
        else hi = m;
    }
    return 0;
}

rb_status tok_nfc(const char *s, size_t len, tok_buf *out) {
    size_t i;
    for (i = 0; i < len && (unsigned char)s[i] < 0x80; i++) {}
    if (i == len) return tok_buf_append(out, s, len); /* ASCII is always NFC */
    /* decompose (each byte yields at most 4... decompositions are short: bound by 18x) */
    size_t cap = len * 4 + 16, n = 0;
    uint32_t *cp = malloc(cap * sizeof *cp);
    if (!cp) return RB_E_NOMEM;
    const unsigned char *u = (const unsigned char *)s;
    for (i = 0; i < len;) {
        uint32_t c;
        i += tok_utf8_decode(u + i, &c);
        if (n + 20 > cap) {
            cap *= 2;
            uint32_t *q = realloc(cp, cap * sizeof *cp);
            if (!q) { free(cp); return RB_E_NOMEM; }
            cp = q;
        }
        size_t dn;
        const uint32_t *d;
        if (c >= SBASE && c < SBASE + SCOUNT) {
            uint32_t si = c - SBASE;
            cp[n++] = LBASE + si / NCOUNT;
            cp[n++] = VBASE + (si % NCOUNT) / TCOUNT;
            if (si % TCOUNT) cp[n++] = TBASE + si % TCOUNT;
        } else if (c >= 0xC0 && (d = decomp_of(c, &dn)) != NULL) {
            for (size_t k = 0; k < dn; k++) cp[n++] = d[k];
        } else {
            cp[n++] = c;
        }
    }
    /* canonical ordering: stable insertion sort of each run of non-starters */
    for (size_t k = 1; k < n; k++) {
        unsigned ck = ccc_of(cp[k]);
        if (!ck) continue;
        size_t j = k;
        uint32_t c = cp[k];
        while (j > 0) {
            unsigned cj = ccc_of(cp[j - 1]);
            if (cj <= ck) break;
            cp[j] = cp[j - 1];
            j--;
        }
        cp[j] = c;
    }
    /* canonical composition */
    size_t w = 0;
    long starter = -1;
    unsigned last_ccc = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t c = cp[k];
        unsigned cc = ccc_of(c);
        if (starter >= 0) {
            bool adjacent = (size_t)starter == w - 1;
            if (adjacent || (last_ccc != 0 && last_ccc < cc)) {
                uint32_t p = compose_pair(cp[starter], c);
                if (p) {
                    cp[starter] = p;
                    continue;
                }
            }
        }
        if (cc == 0) {
            starter = (long)w;
            last_ccc = 0;
        } else {
            last_ccc = cc;
        }
        cp[w++] = c;
    }
    rb_status st = tok_buf_reserve(out, w * 4);
    for (size_t k = 0; k < w && !st; k++) {
        char b[4];
        size_t bl = tok_utf8_encode(cp[k], b);
        st = tok_buf_append(out, b, bl);
    }
    free(cp);
    return st;
}

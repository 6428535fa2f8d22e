/* Letter case conversion for the string filters and methods (upper, lower,
 * capitalize, title): Python's mappings for ASCII, Latin-1, Latin
 * Extended-A, Greek (with the final-sigma rule) and Cyrillic, including the
 * one-to-many cases Python applies (German sharp s, dotted capital I).
 * Other scripts pass through unchanged. Each output character keeps the
 * request-data mark of the character it was mapped from. */
#include "chat/jinja.h"

#include <string.h>

static uint32_t cp_upper(uint32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
    if (c == 0xB5) return 0x39C;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 0x20;
    if (c == 0xFF) return 0x178;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return (c & 1) ? c - 1 : c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
    if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 0x20;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 0x25;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 0x3F;
    if (c >= 0x430 && c <= 0x44F) return c - 0x20;
    if (c >= 0x450 && c <= 0x45F) return c - 0x50;
    return c;
}

static uint32_t cp_lower(uint32_t c) {
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
    if (c == 0x178) return 0xFF;
    if ((c >= 0x100 && c <= 0x137 && c != 0x130) || (c >= 0x14A && c <= 0x177)) return (c & 1) ? c : c + 1;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 0x25;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 0x3F;
    if (c >= 0x410 && c <= 0x42F) return c + 0x20;
    if (c >= 0x400 && c <= 0x40F) return c + 0x50;
    return c;
}

static bool cp_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c || c == 0xDF || c == 0x130; }

static void put_cp(jbuf *b, uint32_t c) {
    char t[4];
    jbuf_put(b, t, utf8_encode(c, t));
}

static void put_upper(jbuf *b, uint32_t c) {
    if (c == 0xDF) jbuf_puts(b, "SS");
    else put_cp(b, cp_upper(c));
}

/* Lower-cases c at byte i of s; Greek capital sigma becomes final sigma at
 * the end of a word (preceded by a cased letter, not followed by one). */
static void put_lower(jbuf *b, const char *s, size_t n, size_t i, size_t adv, uint32_t c, bool prev_cased) {
    if (c == 0x130) {
        jbuf_puts(b, "i\xcc\x87");
        return;
    }
    if (c == 0x3A3 && prev_cased) {
        bool next_cased = false;
        if (i + adv < n) next_cased = cp_cased(utf8_decode(s, n, i + adv, NULL));
        if (!next_cased) {
            put_cp(b, 0x3C2);
            return;
        }
    }
    put_cp(b, cp_lower(c));
}

static bool jinja_word_sep(uint32_t c, const char *s, size_t n, size_t i) {
    size_t adv = 0;
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_space_at(s, n, i, &adv);
}

void jinja_case(jbuf *b, jv sv, jcase mode) {
    const char *s = sv.u.s.p;
    size_t n = sv.u.s.n;
    jtcur tc = {sv.u.s.t, 0};
    bool prev_cased = false, word_start = true;
    for (size_t i = 0; i < n;) {
        size_t at = b->n;
        size_t adv = 0;
        uint32_t c = utf8_decode(s, n, i, &adv);
        bool up;
        switch (mode) {
        case JCASE_UPPER: up = true; break;
        case JCASE_LOWER: up = false; break;
        case JCASE_CAPITALIZE: up = i == 0; break;
        case JCASE_TITLE_PY: up = !prev_cased; break;
        default: up = word_start; break; /* JCASE_TITLE_JINJA */
        }
        if (mode == JCASE_TITLE_JINJA && jinja_word_sep(c, s, n, i)) {
            jbuf_put(b, s + i, adv);
            word_start = true;
        } else {
            if (up) put_upper(b, c);
            else put_lower(b, s, n, i, adv, c, prev_cased);
            word_start = false;
        }
        prev_cased = cp_cased(c);
        if (jtcur_hit(&tc, i, i + adv)) jbuf_mark(b, at, b->n); /* mapped from a request character */
        i += adv;
    }
}

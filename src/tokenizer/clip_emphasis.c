/* AUTOMATIC1111's prompt emphasis syntax (parse_prompt_attention), rewritten
 * from its documented behaviour: the prompt is cut into the tokens
 *   \( \) \[ \] \\ (escapes), \ , ( , [ , :<ws>weight<ws>) , ) , ] , runs of
 *   other characters, :
 * "(" and "[" open a range; ")" multiplies the range by 1.1, "]" by 1/1.1,
 * ":w)" by w; an unmatched closer or ":" is text; ranges left open are
 * multiplied at the end; text is split at the word BREAK (segment
 * ("BREAK", -1)); finally neighbouring segments of equal weight are joined.
 * Weights are doubles multiplied in the same order as Python does. */
#include "tokenizer/clip_internal.h"
#include "tokenizer/tok_utf8.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Python's str.isspace() set, which its \s matches. */
#define PY_WS "\\t-\\r\\x{1C}-\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char k_break[] = "[" PY_WS "]*\\bBREAK\\b[" PY_WS "]*";

typedef struct {
    rb_clip_segment *v;
    size_t n, cap;
    size_t *round, *square; /* open bracket positions (indices into v) */
    size_t n_round, n_square, cap_br;
} seglist;

static rb_status push_seg(seglist *l, const char *s, size_t len, double w) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 16;
        rb_clip_segment *p = realloc(l->v, nc * sizeof *p);
        if (!p) return RB_E_NOMEM;
        l->v = p;
        l->cap = nc;
    }
    char *t = malloc(len + 1);
    if (!t) return RB_E_NOMEM;
    if (len) memcpy(t, s, len);
    t[len] = '\0';
    l->v[l->n++] = (rb_clip_segment){t, len, w};
    return RB_OK;
}

static rb_status push_open(seglist *l, bool round) {
    if (l->n_round + l->n_square == l->cap_br) {
        size_t nc = l->cap_br ? l->cap_br * 2 : 16;
        size_t *a = realloc(l->round, nc * sizeof *a);
        if (!a) return RB_E_NOMEM;
        l->round = a;
        size_t *b = realloc(l->square, nc * sizeof *b);
        if (!b) return RB_E_NOMEM;
        l->square = b;
        l->cap_br = nc;
    }
    if (round) l->round[l->n_round++] = l->n;
    else l->square[l->n_square++] = l->n;
    return RB_OK;
}

static void multiply_from(seglist *l, size_t start, double m) {
    for (size_t p = start; p < l->n; p++) l->v[p].weight *= m;
}

/* Plain text: split at BREAK, a ("BREAK", -1) segment between the parts. */
static rb_status push_text(seglist *l, const pcre2_code *re, pcre2_match_data *md, const char *s, size_t len) {
    size_t pos = 0;
    for (;;) {
        bool found = false;
        size_t ms = 0, me = 0;
        rb_status st = tok_regex_next(re, md, s, len, pos, &found, &ms, &me);
        if (st) return st;
        if (!found) break;
        st = push_seg(l, s + pos, ms - pos, 1.0);
        if (!st) st = push_seg(l, "BREAK", 5, -1.0);
        if (st) return st;
        pos = me;
    }
    return push_seg(l, s + pos, len - pos, 1.0);
}

/* The characters A1111's tokens treat specially. */
static bool is_syntax(char c) { return c == '\\' || c == '(' || c == ')' || c == '[' || c == ']' || c == ':'; }

static bool py_space(const unsigned char *s, size_t *adv) {
    uint32_t cp;
    *adv = tok_utf8_decode(s, &cp);
    return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* Matches ":<ws>[+-]?[.0-9]+<ws>)" at s[0] == ':'; returns its length (0 if
 * none) and the number's span. */
static size_t weight_token(const char *s, size_t len, size_t *num_off, size_t *num_len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 1, adv;
    while (i < len && py_space(u + i, &adv)) i += adv;
    size_t a = i;
    if (i < len && (s[i] == '+' || s[i] == '-')) i++;
    size_t d = i;
    while (i < len && (s[i] == '.' || (s[i] >= '0' && s[i] <= '9'))) i++;
    if (i == d) return 0;
    size_t b = i;
    while (i < len && py_space(u + i, &adv)) i += adv;
    if (i >= len || s[i] != ')') return 0;
    *num_off = a;
    *num_len = b - a;
    return i + 1;
}

static rb_status parse(seglist *l, const pcre2_code *re, pcre2_match_data *md, const char *s, size_t len,
                       rb_error *err) {
    rb_status st = RB_OK;
    for (size_t i = 0; i < len && !st;) {
        char c = s[i];
        size_t num_off = 0, num_len = 0, wl = 0;
        if (c == '\\') {
            if (i + 1 < len && is_syntax(s[i + 1]) && s[i + 1] != ':') {
                st = push_seg(l, s + i + 1, 1, 1.0);
                i += 2;
            } else {
                st = push_seg(l, "", 0, 1.0);
                i++;
            }
        } else if (c == '(' || c == '[') {
            st = push_open(l, c == '(');
            i++;
        } else if (c == ':' && (wl = weight_token(s + i, len - i, &num_off, &num_len)) && l->n_round) {
            char num[64];
            if (num_len >= sizeof num)
                return rb_error_set(err, RB_E_INVALID, "emphasis weight at byte %zu is too long", i);
            memcpy(num, s + i + num_off, num_len);
            num[num_len] = '\0';
            char *end = NULL;
            errno = 0;
            double w = strtod(num, &end);
            if (end != num + num_len || errno == ERANGE)
                return rb_error_set(err, RB_E_INVALID, "emphasis weight '%s' at byte %zu is not a number", num, i);
            multiply_from(l, l->round[--l->n_round], w);
            i += wl;
        } else if (c == ')' && l->n_round) {
            multiply_from(l, l->round[--l->n_round], 1.1);
            i++;
        } else if (c == ']' && l->n_square) {
            multiply_from(l, l->square[--l->n_square], 1.0 / 1.1);
            i++;
        } else {
            /* text: a run of other characters, or a lone ':' / ':w)' / ')' / ']' that closes nothing */
            size_t j = i + 1;
            if (c == ':' && wl) j = i + wl;
            else if (c != ':' && c != ')' && c != ']')
                while (j < len && !is_syntax(s[j])) j++;
            st = push_text(l, re, md, s + i, j - i);
            i = j;
        }
    }
    if (st) return rb_error_set(err, st, "out of memory parsing emphasis");
    for (size_t k = 0; k < l->n_round; k++) multiply_from(l, l->round[k], 1.1);
    for (size_t k = 0; k < l->n_square; k++) multiply_from(l, l->square[k], 1.0 / 1.1);
    if (l->n == 0 && push_seg(l, "", 0, 1.0)) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    /* join neighbours of equal weight */
    size_t w = 0;
    for (size_t r = 1; r < l->n; r++) {
        rb_clip_segment *a = &l->v[w], *b = &l->v[r];
        if (a->weight == b->weight) {
            char *t = realloc(a->text, a->len + b->len + 1);
            if (!t) return rb_error_set(err, RB_E_NOMEM, "out of memory");
            memcpy(t + a->len, b->text, b->len + 1);
            a->text = t;
            a->len += b->len;
            free(b->text);
            b->text = NULL;
        } else {
            l->v[++w] = *b;
            if (w != r) b->text = NULL;
        }
    }
    l->n = w + 1;
    return RB_OK;
}

rb_status rb_clip_parse_emphasis(const char *text, size_t len, rb_clip_segment **segs, size_t *n_segs,
                                 rb_error *err) {
    if (!segs || !n_segs) return rb_error_set(err, RB_E_INVALID, "segs or n_segs is NULL");
    *segs = NULL;
    *n_segs = 0;
    if (!text && len) return rb_error_set(err, RB_E_INVALID, "prompt is NULL");
    if (!text) text = "";
    size_t bad = 0;
    if (!tok_utf8_validate(text, len, &bad))
        return rb_error_set(err, RB_E_INVALID, "prompt is not valid UTF-8 (byte 0x%02X at offset %zu)",
                            (unsigned)(unsigned char)text[bad], bad);
    pcre2_code *re = NULL;
    rb_status st = tok_regex_compile(k_break, sizeof k_break - 1, &re, err);
    if (st) return st;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    seglist l = {0};
    st = md ? parse(&l, re, md, text, len, err) : rb_error_set(err, RB_E_NOMEM, "out of memory");
    if (md) pcre2_match_data_free(md);
    pcre2_code_free(re);
    free(l.round);
    free(l.square);
    if (st) {
        rb_clip_segments_free(l.v, l.n);
        return st;
    }
    *segs = l.v;
    *n_segs = l.n;
    return RB_OK;
}

void rb_clip_segments_free(rb_clip_segment *segs, size_t n) {
    if (!segs) return;
    for (size_t i = 0; i < n; i++) free(segs[i].text);
    free(segs);
}

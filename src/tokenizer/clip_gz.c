/* Loads OpenAI CLIP's bpe_simple_vocab_16e6.txt.gz (zlib): line 0 is a
 * header, lines 1..48894 are the merges CLIP uses. The vocabulary is built as
 * OpenAI's simple_tokenizer defines it: the 256 byte symbols in code point
 * order (which is the GPT-2 table's printable-bytes-first order), the same
 * 256 with "</w>", each merge's two symbols joined, then <|startoftext|> and
 * <|endoftext|>: 49408 ids, identical to the published vocab.json. */
#include "tokenizer/clip_internal.h"
#include "tokenizer/tok_utf8.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define GZ_MAX ((size_t)32 << 20) /* the real file unpacks to 1.6 MB */

static rb_status gunzip_file(const char *path, char **out, size_t *out_len, rb_error *err) {
    *out = NULL;
    *out_len = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) return rb_error_set(err, RB_E_IO, "cannot open %s", path);
    size_t cap = 1 << 20, n = 0;
    char *p = malloc(cap);
    rb_status st = p ? RB_OK : rb_error_set(err, RB_E_NOMEM, "out of memory");
    while (!st) {
        if (n == cap) {
            if (cap >= GZ_MAX) {
                st = rb_error_set(err, RB_E_FORMAT, "%s unpacks to more than %zu bytes", path, GZ_MAX);
                break;
            }
            char *q = realloc(p, cap * 2);
            if (!q) {
                st = rb_error_set(err, RB_E_NOMEM, "out of memory");
                break;
            }
            p = q;
            cap *= 2;
        }
        size_t want = cap - n > (1u << 30) ? (1u << 30) : cap - n;
        int r = gzread(f, p + n, (unsigned)want);
        if (r < 0) {
            int zerr = 0;
            const char *m = gzerror(f, &zerr);
            st = rb_error_set(err, zerr == Z_ERRNO ? RB_E_IO : RB_E_FORMAT, "%s: %s", path, m ? m : "read error");
            break;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    /* gzread stops quietly at a truncated stream; gzclose_r reports it */
    int cr = gzclose_r(f);
    if (!st && cr != Z_OK) st = rb_error_set(err, RB_E_FORMAT, "%s: truncated or corrupt gzip data", path);
    if (st) {
        free(p);
        return st;
    }
    *out = p;
    *out_len = n;
    return RB_OK;
}

/* Builds the vocabulary and merges from the unpacked text. */
static rb_status build(const char *s, size_t len, const rb_clip_special_tokens *sp, rb_clip_tokenizer **out,
                       rb_error *err) {
    if (!tok_utf8_validate(s, len, NULL)) return rb_error_set(err, RB_E_FORMAT, "vocabulary file is not valid UTF-8");
    const char **line = malloc((CLIP_OPENAI_MERGES + 1) * sizeof *line);
    size_t *line_len = malloc((CLIP_OPENAI_MERGES + 1) * sizeof *line_len);
    if (!line || !line_len) {
        free(line);
        free(line_len);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    size_t n_lines = 0;
    for (size_t i = 0; i < len && n_lines <= CLIP_OPENAI_MERGES;) {
        const char *nl = memchr(s + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - (s + i)) : len - i;
        line[n_lines] = s + i;
        line_len[n_lines++] = n;
        i += n + 1;
    }
    rb_clip_tokenizer *t = NULL;
    rb_status st = RB_OK;
    if (n_lines < CLIP_OPENAI_MERGES + 1)
        st = rb_error_set(err, RB_E_FORMAT, "vocabulary file has %zu merge lines, CLIP needs %d",
                          n_lines ? n_lines - 1 : 0, CLIP_OPENAI_MERGES);
    if (!st) st = clip_new(512 + CLIP_OPENAI_MERGES + 2, &t, err);
    if (st) {
        free(line);
        free(line_len);
        return st;
    }
    /* byte symbols: code points of the GPT-2 map, ascending */
    uint32_t cps[256];
    for (int b = 0; b < 256; b++) cps[b] = tok_byte_to_cp((uint8_t)b);
    for (int i = 1; i < 256; i++) /* insertion sort: 256 entries */
        for (int j = i; j > 0 && cps[j - 1] > cps[j]; j--) {
            uint32_t x = cps[j];
            cps[j] = cps[j - 1];
            cps[j - 1] = x;
        }
    int32_t id = 0;
    for (int pass = 0; pass < 2 && !st; pass++) {
        for (int i = 0; i < 256 && !st; i++) {
            char buf[4 + 4];
            size_t n = tok_utf8_encode(cps[i], buf);
            if (pass) {
                memcpy(buf + n, CLIP_EOW, 4);
                n += 4;
            }
            if (tok_vocab_set(&t->vocab, id++, buf, n)) st = rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
    }
    for (size_t k = 1; k <= CLIP_OPENAI_MERGES && !st; k++) {
        const char *l = line[k];
        size_t n = line_len[k];
        if (n && l[n - 1] == '\r') n--;
        const char *spc = memchr(l, ' ', n);
        if (!spc || spc == l || spc + 1 == l + n || memchr(spc + 1, ' ', (size_t)(l + n - spc - 1))) {
            st = rb_error_set(err, RB_E_FORMAT, "vocabulary file line %zu: expected two symbols separated by one space",
                              k + 1);
            break;
        }
        /* joined text "ab" from "a b" */
        char stack[256];
        char *j = n <= sizeof stack ? stack : malloc(n);
        if (!j) {
            st = rb_error_set(err, RB_E_NOMEM, "out of memory");
            break;
        }
        size_t la = (size_t)(spc - l);
        memcpy(j, l, la);
        memcpy(j + la, spc + 1, n - la - 1);
        if (tok_vocab_find(&t->vocab, j, n - 1) >= 0)
            st = rb_error_set(err, RB_E_FORMAT, "vocabulary file line %zu: merge result repeats an earlier token", k + 1);
        else if (tok_vocab_set(&t->vocab, id++, j, n - 1))
            st = rb_error_set(err, RB_E_NOMEM, "out of memory");
        if (j != stack) free(j);
    }
    if (!st && tok_vocab_set(&t->vocab, id++, CLIP_BOS_TEXT, strlen(CLIP_BOS_TEXT)))
        st = rb_error_set(err, RB_E_NOMEM, "out of memory");
    if (!st && tok_vocab_set(&t->vocab, id++, CLIP_EOS_TEXT, strlen(CLIP_EOS_TEXT)))
        st = rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (size_t k = 1; k <= CLIP_OPENAI_MERGES && !st; k++) {
        st = clip_add_merge(t, line[k], line_len[k], k + 1, err);
        if (st) rb_error_prefix(err, "vocabulary file: ");
    }
    if (!st) st = clip_finish(t, sp, err);
    free(line);
    free(line_len);
    if (st) {
        rb_clip_tokenizer_free(t);
        return st;
    }
    *out = t;
    return RB_OK;
}

rb_status rb_clip_tokenizer_load_bpe_gz(const char *path, const rb_clip_special_tokens *sp, rb_clip_tokenizer **out,
                                        rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "out is NULL");
    *out = NULL;
    if (!path) return rb_error_set(err, RB_E_INVALID, "path is NULL");
    char *text = NULL;
    size_t len = 0;
    rb_status st = gunzip_file(path, &text, &len, err);
    if (!st) st = build(text, len, sp, out, err);
    if (st && st != RB_E_IO) rb_error_prefix(err, "%s: ", path);
    free(text);
    return st;
}

/* Small growable containers used throughout the tokenizer pipeline: a byte
 * buffer, an id vector, a list of word spans and the BPE scratch space. All
 * growth is checked and reported as RB_E_NOMEM. */
#ifndef RBEE_TOKENIZER_TOK_BUF_H
#define RBEE_TOKENIZER_TOK_BUF_H

#include "rbee/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tok_buf {
    char *p;
    size_t len, cap;
} tok_buf;

typedef struct tok_ids {
    int32_t *p;
    size_t len, cap;
} tok_ids;

/* Word spans [off, off+len) into text. */
typedef struct tok_span {
    size_t off, len;
} tok_span;
typedef struct tok_words {
    tok_buf text;
    tok_span *w;
    size_t n, cap;
} tok_words;

/* BPE working memory, reused across words of one encode call. */
typedef struct tok_sym {
    int32_t id, prev, next;
    uint32_t off, len; /* bytes of the word covered */
} tok_sym;
typedef struct tok_heap_ent {
    double key;
    int32_t pos, right, a, b, res;
} tok_heap_ent;
typedef struct tok_scratch {
    tok_sym *sym;
    size_t sym_cap;
    tok_heap_ent *heap;
    size_t heap_len, heap_cap;
    tok_buf cat; /* concatenation buffer (score mode) */
} tok_scratch;

rb_status tok_buf_reserve(tok_buf *b, size_t extra);
rb_status tok_buf_append(tok_buf *b, const void *s, size_t n);
rb_status tok_buf_putc(tok_buf *b, char c);
/* Keeps the buffer NUL-terminated after its contents (not counted in len). */
rb_status tok_buf_terminate(tok_buf *b);
void tok_buf_free(tok_buf *b);

rb_status tok_ids_push(tok_ids *v, int32_t id);
void tok_ids_free(tok_ids *v);

rb_status tok_words_push(tok_words *w, const char *s, size_t len);
void tok_words_clear(tok_words *w);
void tok_words_free(tok_words *w);

void tok_scratch_free(tok_scratch *sc);

#endif

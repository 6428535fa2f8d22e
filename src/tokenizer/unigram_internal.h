/* Internal representation of the Unigram (SentencePiece) tokenizer shared by
 * its loaders (spiece.model protobuf, tokenizer.json) and the encoder: the
 * pieces with scores and types, the precompiled charsmap, and the text
 * pipeline as data (sentencepiece's whitespace rules, or tokenizer.json's
 * normalizer steps, pre-tokenizer and post-processor). */
#ifndef RBEE_TOKENIZER_UNIGRAM_INTERNAL_H
#define RBEE_TOKENIZER_UNIGRAM_INTERNAL_H

#include "rbee/unigram_tokenizer.h"
#include "tokenizer/tok_internal.h"

/* sentencepiece's precompiled charsmap: a darts-clone double array over
 * UTF-8 keys whose leaves index NUL-terminated replacements in norm. */
typedef struct ug_charsmap {
    uint32_t *units;
    size_t n_units;
    char *norm;
    size_t norm_len;
} ug_charsmap;

/* Parses the serialized form (uint32 trie size in bytes, the units, the
 * replacement blob) and checks that every trie path and value stays inside
 * it. RB_E_FORMAT otherwise. */
rb_status ug_charsmap_parse(const uint8_t *data, size_t len, ug_charsmap *cm, rb_error *err);
void ug_charsmap_free(ug_charsmap *cm);
/* Longest key that prefixes s[0..len): its replacement (NUL-terminated) and
 * the bytes consumed; NULL when no key matches. */
const char *ug_charsmap_match(const ug_charsmap *cm, const char *s, size_t len, size_t *consumed);

typedef enum { UG_NORM_CHARSMAP, UG_NORM_STRIP, UG_NORM_REPLACE_SPACES, UG_NORM_REPLACE } ug_norm_kind;
typedef struct ug_norm {
    ug_norm_kind kind;
    bool left, right;  /* STRIP */
    char *a, *b;       /* REPLACE: literal a -> b; REPLACE_SPACES: runs of >= 2 spaces -> b */
    size_t alen, blen;
} ug_norm;

typedef enum { UG_PREPEND_ALWAYS, UG_PREPEND_FIRST, UG_PREPEND_NEVER } ug_prepend;

struct rb_unigram {
    tok_vocab v; /* texts, scores, TOK_TYPE_* types */
    int32_t unk_id, eos_id, pad_id;
    double min_score, max_score; /* over NORMAL pieces (spm) / all pieces (json) */
    size_t max_piece_len;        /* bytes */
    bool byte_fallback;
    ug_charsmap cm;
    bool has_cm;
    bool spm; /* sentencepiece's pipeline; false: tokenizer.json's */
    /* spm normalizer_spec */
    bool add_dummy_prefix, remove_extra_ws, escape_ws;
    /* tokenizer.json */
    ug_norm *norms;
    size_t n_norms;
    bool ws_split;  /* WhitespaceSplit pre-tokenizer before Metaspace */
    bool metaspace; /* Metaspace pre-tokenizer */
    char meta_rep[8];
    size_t meta_rep_len;
    ug_prepend prepend;
    bool meta_split;
    tok_added *added;
    size_t n_added;
    tok_trie added_trie;
    int32_t *tpl_pre, *tpl_post; /* post-processor ids around the sequence */
    size_t n_tpl_pre, n_tpl_post;
};

/* An empty tokenizer with a vocabulary of n pieces (ids -1 until set). */
rb_status ug_new(int32_t n, rb_unigram **out, rb_error *err);
/* Computes min/max scores and the longest piece once the pieces are set. */
void ug_finish(rb_unigram *t);

/* Reads a whole file (at most 1 GiB); RB_E_IO when it cannot be read. */
rb_status ug_read_file(const char *path, char **data, size_t *len, rb_error *err);

/* Viterbi segmentation of s (normalized, valid UTF-8), ids appended. */
rb_status ug_viterbi(const rb_unigram *t, const char *s, size_t len, tok_ids *out);

#endif

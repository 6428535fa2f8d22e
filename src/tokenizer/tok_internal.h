/* Internal representation of a loaded tokenizer, shared by the loaders
 * (tokenizer.json, GGUF), the encode/decode pipeline stages and the GGUF
 * exporter. Every stage is data here, so both loaders build the same thing. */
#ifndef RBEE_TOKENIZER_TOK_INTERNAL_H
#define RBEE_TOKENIZER_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "rbee/tokenizer.h"
#include "tokenizer/tok_buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* llama.cpp token types (tokenizer.ggml.token_type). */
enum {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

/* ---- vocabulary: id -> text, text -> id, merges ---- */
typedef struct tok_vocab {
    int32_t n;        /* ids 0..n-1 */
    char *arena;      /* all token texts back to back */
    size_t arena_len, arena_cap;
    uint32_t *off;    /* per id */
    uint32_t *len;    /* per id; UINT32_MAX = hole */
    float *scores;    /* per id (0 when unknown) */
    int32_t *types;   /* per id, TOK_TYPE_* */
    int32_t *ht;      /* text hash table of ids, -1 = empty */
    size_t ht_cap;    /* power of two */
    /* merges: (left, right) -> rank, result */
    uint64_t *mkeys;  /* UINT64_MAX = empty */
    int32_t *mrank, *mres;
    size_t m_cap, n_merges;
    int32_t *merge_left, *merge_right; /* by rank, for export */
} tok_vocab;

rb_status tok_vocab_init(tok_vocab *v, int32_t n);
void tok_vocab_free(tok_vocab *v);
/* Sets the text of id (overwriting any earlier text) and indexes it. */
rb_status tok_vocab_set(tok_vocab *v, int32_t id, const char *s, size_t len);
int32_t tok_vocab_find(const tok_vocab *v, const char *s, size_t len);
const char *tok_vocab_text(const tok_vocab *v, int32_t id, size_t *len);
rb_status tok_vocab_add_merge(tok_vocab *v, int32_t a, int32_t b, int32_t result);
/* Rank and result of merging (a, b); false if not a merge. */
bool tok_vocab_merge(const tok_vocab *v, int32_t a, int32_t b, int32_t *rank, int32_t *result);

/* ---- added tokens (matched before BPE) ---- */
typedef struct tok_added {
    int32_t id;
    char *text;
    size_t len;
    bool special, lstrip, rstrip, single_word, normalized;
} tok_added;

typedef struct tok_trie_node {
    int32_t first_child, next_sibling;
    int32_t added; /* index into added[] ending here, -1 if none */
    uint8_t byte;
} tok_trie_node;

typedef struct tok_trie {
    tok_trie_node *nodes;
    size_t n, cap;
} tok_trie;

/* ---- normalizer steps ---- */
typedef enum { NORM_PREPEND, NORM_REPLACE, NORM_NFC, NORM_STRIP } tok_norm_kind;
typedef struct tok_norm {
    tok_norm_kind kind;
    char *a, *b;       /* PREPEND: a; REPLACE: pattern a (literal) -> b */
    size_t alen, blen;
    pcre2_code *re;    /* REPLACE with a Regex pattern */
    bool left, right;  /* STRIP */
} tok_norm;

/* ---- pre-tokenizer steps ---- */
typedef enum { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE, PRE_DIGITS } tok_pre_kind;
typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } tok_split_beh;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } tok_prepend_scheme;
typedef struct tok_pre {
    tok_pre_kind kind;
    pcre2_code *re;     /* SPLIT regex, BYTELEVEL use_regex, DIGITS */
    char *lit;          /* SPLIT with a String pattern */
    size_t litlen;
    char *regex_src;    /* SPLIT: source pattern, kept for GGUF export */
    tok_split_beh behavior;
    bool invert;
    bool add_prefix_space; /* BYTELEVEL */
    bool use_regex;        /* BYTELEVEL */
    tok_prepend_scheme prepend; /* METASPACE */
    bool split;                 /* METASPACE */
} tok_pre;

/* ---- decoder steps ---- */
typedef enum { DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_BYTELEVEL, DEC_METASPACE } tok_dec_kind;
typedef struct tok_dec {
    tok_dec_kind kind;
    char *a, *b;  /* REPLACE a -> b */
    size_t alen, blen;
    uint32_t strip_cp; /* STRIP content */
    int start, stop;   /* STRIP counts */
    tok_prepend_scheme prepend; /* METASPACE */
} tok_dec;

/* ---- post-processor template item: a special id run or the sequence ---- */
typedef struct tok_tpl_item {
    bool is_seq;
    int32_t *ids;
    size_t n_ids;
} tok_tpl_item;

struct rb_tokenizer {
    rb_tokenizer_kind kind;
    tok_vocab vocab;
    /* model */
    bool byte_fallback, fuse_unk, ignore_merges, use_scores;
    int32_t unk_id;
    int32_t byte_ids[256]; /* <0xNN> token ids, -1 if absent */
    /* added tokens */
    tok_added *added;
    size_t n_added;
    tok_trie trie_raw, trie_norm; /* normalized=false / normalized=true tokens */
    bool *is_special;             /* per id */
    /* pipeline */
    tok_norm *norms;
    size_t n_norms;
    tok_pre *pres;
    size_t n_pres;
    tok_dec *decs;
    size_t n_decs;
    tok_tpl_item *tpl;
    size_t n_tpl;
    /* metadata */
    int32_t bos_id, eos_id, pad_id;
    bool add_bos, add_eos, add_space_prefix;
    char *pre_name;      /* GGUF tokenizer.ggml.pre */
    char *chat_template;
    /* GPT-2 byte-level map, precomputed: byte -> UTF-8 of its code point, cp -> byte */
    char bl_enc[256][2];
    uint8_t bl_len[256];
    int16_t bl_dec[324];
};

/* Allocates an empty tokenizer with n ids and every optional part unset. */
rb_status tok_new(int32_t n, rb_tokenizer **out, rb_error *err);
/* Builds tries and the is_special table after added[] is filled. */
rb_status tok_finish_added(rb_tokenizer *t, rb_error *err);
/* Sets add_bos/add_eos from the template (or the template from them). */
rb_status tok_template_from_flags(rb_tokenizer *t, rb_error *err);
void tok_flags_from_template(rb_tokenizer *t);
rb_status tok_tpl_append(rb_tokenizer *t, bool is_seq, const int32_t *ids, size_t n);

/* trie */
rb_status tok_trie_insert(tok_trie *tr, const char *s, size_t len, int32_t added_index);
/* Longest added token starting at s[0..len); returns its added index or -1, and its length. */
int32_t tok_trie_longest(const tok_trie *tr, const char *s, size_t len, size_t *match_len);
void tok_trie_free(tok_trie *tr);

/* Regex helpers (PCRE2, UTF|UCP, JIT when available). The pattern is first
 * rewritten so \s also covers U+0085 like Oniguruma's \s. */
rb_status tok_regex_compile(const char *pattern, size_t len, pcre2_code **out, rb_error *err);
/* Next match at or after start; false when none. Returns error on failure. */
rb_status tok_regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t len, size_t start,
                         bool *found, size_t *ms, size_t *me);

/* Pipeline stages. */
rb_status tok_normalize(const rb_tokenizer *t, const char *s, size_t len, tok_buf *out);
/* Appends the pre-tokenized words of s to words (as spans in words->text). */
rb_status tok_pretokenize(const rb_tokenizer *t, const char *s, size_t len, bool first_chunk, tok_words *words);
/* Appends the ids of one word. */
rb_status tok_bpe_word(const rb_tokenizer *t, const char *w, size_t len, tok_scratch *sc, tok_ids *ids);
/* The byte of a byte-fallback token text "<0xNN>", or -1 for any other text. */
int tok_parse_byte_token(const char *s, size_t len);
/* Decodes ids (already filtered) into out. */
rb_status tok_decode_ids(const rb_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, tok_buf *out,
                         rb_error *err);
/* The same through the first n_steps decoder steps only. */
rb_status tok_decode_ids_steps(const rb_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, size_t n_steps,
                               tok_buf *out, rb_error *err);
/* Decoder chains a stream can reproduce: after a step that joins tokens
 * (Fuse, ByteLevel) only Strip steps (RB_E_UNSUPPORTED otherwise). */
rb_status tok_decoder_check(const rb_tokenizer *t, rb_error *err);

/* NFC (Unicode canonical composition) of valid UTF-8. */
rb_status tok_nfc(const char *s, size_t len, tok_buf *out);
/* Canonical combining class of a code point (0 for starters). */
unsigned tok_ccc(uint32_t cp);

#endif

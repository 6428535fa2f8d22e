/* Internal representation of the CLIP tokenizer shared by its loaders
 * (tokenizer folder, OpenAI .txt.gz, in-memory lists), the text pipeline
 * (special-token split, normalization, word split, BPE) and the A1111
 * chunker. The vocabulary and merge tables are the tokenizer layer's
 * tok_vocab. */
#ifndef RBEE_TOKENIZER_CLIP_INTERNAL_H
#define RBEE_TOKENIZER_CLIP_INTERNAL_H

#include "rbee/clip_tokenizer.h"
#include "tokenizer/tok_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { CLIP_SP_BOS, CLIP_SP_EOS, CLIP_SP_UNK, CLIP_SP_PAD, CLIP_SP_COUNT };

/* A text matched verbatim in the raw prompt before normalization. */
typedef struct clip_added {
    char *text;
    size_t len;
    int32_t id;
} clip_added;

struct rb_clip_tokenizer {
    tok_vocab vocab;
    int32_t byte_id[256];   /* byte symbol, -1 if absent */
    int32_t byte_eow[256];  /* byte symbol + "</w>", -1 if absent */
    int32_t sp_id[CLIP_SP_COUNT];
    char *sp_text[CLIP_SP_COUNT];
    clip_added *added;      /* bos, eos, unk, pad and the config's extra added tokens, deduplicated */
    size_t n_added;
    pcre2_code *word_re;    /* CLIP's word pattern */
};

/* Default special texts. */
#define CLIP_BOS_TEXT "<|startoftext|>"
#define CLIP_EOS_TEXT "<|endoftext|>"
#define CLIP_EOW "</w>"
#define CLIP_OPENAI_MERGES 48894 /* 49152 - 256 - 2 */

/* Allocates a tokenizer with an empty vocabulary of n ids. */
rb_status clip_new(int32_t n, rb_clip_tokenizer **out, rb_error *err);
/* Adds "left right" (one merge line) to the merge table; line_no for messages. */
rb_status clip_add_merge(rb_clip_tokenizer *t, const char *line, size_t len, size_t line_no, rb_error *err);
/* Resolves special token texts (NULL -> default) to ids, builds the byte
 * tables and the word regex. Call once the vocabulary and merges are in. */
rb_status clip_finish(rb_clip_tokenizer *t, const rb_clip_special_tokens *sp, rb_error *err);
/* Adds one verbatim-matched token (an added_tokens_decoder entry). */
rb_status clip_add_token(rb_clip_tokenizer *t, const char *text, size_t len, int32_t id, rb_error *err);

/* Lowercase (per character, as Rust's char::to_lowercase) of NFC text into out. */
rb_status clip_lower(const char *s, size_t len, tok_buf *out);
/* Appends the lowercase mapping of one code point (1 or 2 code points). */
size_t clip_lower_cp(uint32_t cp, uint32_t out[2]);

/* BPE of one word (raw UTF-8 bytes of the word, before the byte map). */
rb_status clip_bpe_word(const rb_clip_tokenizer *t, const char *w, size_t len, tok_ids *ids, rb_error *err);

/* Tokens of valid UTF-8 text without special-token matching (one piece). */
rb_status clip_encode_piece(const rb_clip_tokenizer *t, const char *s, size_t len, tok_ids *ids, rb_error *err);
/* Full pipeline on validated UTF-8 text (special tokens split first). */
rb_status clip_encode_text(const rb_clip_tokenizer *t, const char *s, size_t len, unsigned flags, tok_ids *ids,
                           rb_error *err);

#endif

/* A SentencePiece Unigram tokenizer (T5's), loaded from a sentencepiece
 * `spiece.model` (the ModelProto protobuf) or from a `tokenizers`
 * tokenizer.json with a Unigram model, and encoding as those libraries do:
 *
 *   1. (tokenizer.json) added/special tokens are split out of the raw text
 *      first, leftmost-longest; sentencepiece has no such step, so "</s>" in
 *      a prompt is ordinary text there;
 *   2. normalization: the precompiled charsmap (longest UTF-8 prefix in its
 *      double-array trie -> replacement string, else the character itself),
 *      then the whitespace rules: sentencepiece's (leading, trailing and
 *      repeated spaces removed, a dummy "▁" prefix, spaces -> "▁") or
 *      tokenizer.json's normalizer sequence and Metaspace pre-tokenizer;
 *   3. Viterbi segmentation over the pieces' log-probability scores; a
 *      character no piece covers becomes the unk id (consecutive unknown
 *      characters merge into one unk, as sentencepiece does);
 *   4. T5's "</s>" appended, then (rb_unigram_encode_padded) truncation to
 *      max_len with the "</s>" kept last and padding with the pad id, as
 *      transformers' T5 tokenizer does with padding="max_length",
 *      truncation=True (the SD3 pipeline's call, max_len 256 by default).
 *
 * A loaded tokenizer is immutable and may be used from several threads. */
#ifndef RBEE_UNIGRAM_TOKENIZER_H
#define RBEE_UNIGRAM_TOKENIZER_H

#include "rbee/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rb_unigram rb_unigram;

/* spiece.model: missing file RB_E_IO, malformed protobuf / charsmap RB_E_FORMAT. */
rb_status rb_unigram_load_spm(const char *path, rb_unigram **out, rb_error *err);
rb_status rb_unigram_from_spm_memory(const void *data, size_t len, rb_unigram **out, rb_error *err);
/* tokenizer.json with "model": {"type": "Unigram", ...}. */
rb_status rb_unigram_load_json(const char *path, rb_unigram **out, rb_error *err);
rb_status rb_unigram_from_json_memory(const char *json, size_t len, rb_unigram **out, rb_error *err);
/* A transformers tokenizer folder: tokenizer.json when present, else spiece.model. */
rb_status rb_unigram_load_dir(const char *dir, rb_unigram **out, rb_error *err);
void rb_unigram_free(rb_unigram *t);

int32_t rb_unigram_n_vocab(const rb_unigram *t);
int32_t rb_unigram_pad_id(const rb_unigram *t); /* 0 for T5 */
int32_t rb_unigram_eos_id(const rb_unigram *t); /* 1 for T5; -1 if none */
int32_t rb_unigram_unk_id(const rb_unigram *t);
/* Piece text of id (not NUL-terminated), or NULL if out of range. */
const char *rb_unigram_piece(const rb_unigram *t, int32_t id, size_t *len);

/* The text's ids followed by the eos id when add_eos (sentencepiece's
 * encode(text) + [eos]). *ids is malloc'ed, caller frees (NULL when
 * *n_ids == 0). Invalid UTF-8 gives RB_E_INVALID. */
rb_status rb_unigram_tokenize(const rb_unigram *t, const char *text, size_t len, bool add_eos, int32_t **ids,
                              size_t *n_ids, rb_error *err);
/* Exactly max_len ids: tokenize(add_eos), cut to max_len with the eos id
 * last when longer, padded with the pad id. *n_untruncated (nullable) gets
 * the length before truncation, eos included. */
rb_status rb_unigram_encode_padded(const rb_unigram *t, const char *text, size_t len, int32_t *ids, size_t max_len,
                                   size_t *n_untruncated, rb_error *err);

#ifdef __cplusplus
}
#endif
#endif

/* OpenAI CLIP's byte-level BPE tokenizer, as Stable Diffusion pipelines use it
 * for their text encoders. Behaviour follows transformers' CLIPTokenizer
 * (transformers 5.x, the `tokenizers`-backed class diffusers gets):
 *
 *   1. special tokens (bos, eos, unk, pad texts) are split out of the raw text
 *      first, leftmost-longest, case-sensitively;
 *   2. each remaining piece is NFC-normalized and lower-cased per character;
 *      whitespace (Unicode White_Space) only separates words;
 *   3. words are cut with CLIP's pattern
 *        <|startoftext|> | <|endoftext|> | 's|'t|'re|'ve|'m|'ll|'d | \p{L}+ | \p{N} | [^\s\p{L}\p{N}]+
 *      (PCRE2, Unicode properties), mapped byte -> unicode (GPT-2 table), and
 *      merged by BPE with "</w>" on each word's last symbol.
 *
 * No ftfy repair and no HTML-entity unescaping: OpenAI's simple_tokenizer
 * runs ftfy.fix_text and html.unescape twice, and transformers' slow
 * tokenizer ran ftfy when installed, but the CLIPTokenizer of transformers 5
 * does neither, so "&amp;" stays three tokens here as in diffusers. One
 * consequence of step 1 that diffusers users see: with pad "!" (SD 2.x,
 * SDXL's second tokenizer) every "!" in a prompt becomes the pad id 0 rather
 * than "!</w>" (diffusers issue #4153); RB_CLIP_PAD_AS_TEXT turns that off, as
 * open_clip (A1111's SD 2.x path) tokenizes.
 *
 * Long prompts: rb_clip_encode() truncates to 77 ids as diffusers does;
 * rb_clip_chunk_prompt() splits into 75-token chunks as AUTOMATIC1111 does
 * (comma backtracking, BREAK, and optionally its (emphasis:1.2) weights).
 *
 * A loaded tokenizer is immutable and may be used from several threads. */
#ifndef RBEE_CLIP_TOKENIZER_H
#define RBEE_CLIP_TOKENIZER_H

#include "rbee/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RB_CLIP_CONTEXT 77      /* ids per encoder row: BOS + 75 + EOS */
#define RB_CLIP_CHUNK_TOKENS 75 /* prompt tokens per row */

typedef struct rb_clip_tokenizer rb_clip_tokenizer;

/* Special token texts; a NULL member takes CLIP's default. */
typedef struct rb_clip_special_tokens {
    const char *bos; /* "<|startoftext|>" */
    const char *eos; /* "<|endoftext|>" */
    const char *unk; /* "<|endoftext|>" */
    const char *pad; /* "<|endoftext|>" (SD 1.x); "!" for SD 2.x and SDXL's tokenizer_2 */
} rb_clip_special_tokens;

/* Loads a diffusers/transformers tokenizer folder: vocab.json, merges.txt and
 * (optional) tokenizer_config.json, whose bos/eos/unk/pad_token (strings or
 * {"content": ...} objects) and model_max_length (must be 77 when present)
 * are read; added_tokens_decoder entries (ids inside the vocabulary) are
 * matched verbatim in the raw text like the special tokens (their lstrip,
 * rstrip, single_word and normalized flags are not applied). Missing files
 * give RB_E_IO, malformed ones RB_E_FORMAT. */
rb_status rb_clip_tokenizer_load_dir(const char *dir, rb_clip_tokenizer **out, rb_error *err);

/* Loads OpenAI's bpe_simple_vocab_16e6.txt.gz (shipped as
 * models/clip/bpe_simple_vocab_16e6.txt.gz): the vocabulary is the 256 byte
 * symbols, the same with "</w>", the first 48894 merges joined, then
 * <|startoftext|> and <|endoftext|> (49408 ids). sp may be NULL. */
rb_status rb_clip_tokenizer_load_bpe_gz(const char *path, const rb_clip_special_tokens *sp, rb_clip_tokenizer **out,
                                        rb_error *err);

/* Same as load_dir from memory: vocab.json and merges.txt contents, and the
 * tokenizer_config.json contents (config may be NULL / 0). */
rb_status rb_clip_tokenizer_from_hf_memory(const char *vocab_json, size_t vocab_len, const char *merges_txt,
                                           size_t merges_len, const char *config_json, size_t config_len,
                                           rb_clip_tokenizer **out, rb_error *err);

/* From lists already in memory (a GGUF file's tokenizer.ggml.tokens and
 * .merges): token i has id i (token_lens may be NULL for NUL-terminated
 * texts), each merge is "left right" with one space. sp may be NULL. */
rb_status rb_clip_tokenizer_from_lists(const char *const *tokens, const size_t *token_lens, int32_t n_tokens,
                                       const char *const *merges, size_t n_merges, const rb_clip_special_tokens *sp,
                                       rb_clip_tokenizer **out, rb_error *err);

void rb_clip_tokenizer_free(rb_clip_tokenizer *t);

int32_t rb_clip_n_vocab(const rb_clip_tokenizer *t);
int32_t rb_clip_bos_id(const rb_clip_tokenizer *t);
int32_t rb_clip_eos_id(const rb_clip_tokenizer *t);
int32_t rb_clip_pad_id(const rb_clip_tokenizer *t);
/* Id of an exact vocabulary text (e.g. ",</w>"), or -1. */
int32_t rb_clip_token_id(const rb_clip_tokenizer *t, const char *text, size_t len);
/* Vocabulary text of id (not NUL-terminated), or NULL if out of range. */
const char *rb_clip_token_text(const rb_clip_tokenizer *t, int32_t id, size_t *len);

/* Encode flags. */
enum {
    RB_CLIP_PAD_AS_TEXT = 1u << 0 /* the pad token's text in a prompt is ordinary text (open_clip), not the pad id */
};

/* The prompt's tokens without BOS/EOS and without truncation
 * (transformers: add_special_tokens=False). *ids is malloc'ed, caller frees
 * (may be NULL when *n_ids == 0). Invalid UTF-8 gives RB_E_INVALID. */
rb_status rb_clip_tokenize(const rb_clip_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                           size_t *n_ids, rb_error *err);

/* diffusers' text_input_ids: BOS + the first 75 tokens + EOS, padded to 77
 * with the pad id. *n_untruncated (may be NULL) receives the untruncated
 * length, BOS and EOS included (more than 77 means the prompt was cut). */
rb_status rb_clip_encode(const rb_clip_tokenizer *t, const char *text, size_t len, unsigned flags,
                         int32_t ids[RB_CLIP_CONTEXT], size_t *n_untruncated, rb_error *err);

/* ---- AUTOMATIC1111 long prompts ---- */

typedef struct rb_clip_chunk_opts {
    int comma_backtrack; /* "prompt word wrap length limit": break after the last comma when it is within this
                            many tokens of a full chunk; 0 = off. A1111's default: 20 */
    bool emphasis;       /* parse (text), [text], (text:w), \( escapes and BREAK (A1111 emphasis "Original");
                            false = the whole prompt at weight 1 and BREAK is ordinary text ("None") */
    unsigned flags;      /* RB_CLIP_* encode flags */
} rb_clip_chunk_opts;

/* comma_backtrack 20, emphasis on, flags 0. */
void rb_clip_chunk_opts_default(rb_clip_chunk_opts *o);

typedef struct rb_clip_chunks {
    size_t n;                             /* rows, at least 1 */
    int32_t (*ids)[RB_CLIP_CONTEXT];      /* BOS, 75 tokens or EOS padding, EOS; after the first EOS the pad id */
    float (*weights)[RB_CLIP_CONTEXT];    /* per-position emphasis multipliers (1 for BOS/EOS/padding) */
    size_t token_count;                   /* A1111's count: 75 per full chunk plus the last chunk's tokens */
} rb_clip_chunks;

/* Splits a prompt into 77-id rows as AUTOMATIC1111's
 * FrozenCLIPEmbedderWithCustomWords does (textual-inversion embeddings
 * aside): each weighted segment is tokenized on its own; a row takes 75
 * tokens; when a row is full and the last comma in it is at most
 * comma_backtrack tokens back, the tokens after that comma move to the next
 * row; BREAK starts a new row; rows are padded with EOS then, after the first
 * EOS, the pad id. The encoder's outputs for the rows are concatenated.
 * out is zeroed first; free it with rb_clip_chunks_free(). */
rb_status rb_clip_chunk_prompt(const rb_clip_tokenizer *t, const char *text, size_t len,
                               const rb_clip_chunk_opts *opts, rb_clip_chunks *out, rb_error *err);
void rb_clip_chunks_free(rb_clip_chunks *c);

/* One segment of A1111's parse_prompt_attention: text (NUL-terminated,
 * malloc'ed) and its weight; BREAK is the segment ("BREAK", -1). */
typedef struct rb_clip_segment {
    char *text;
    size_t len;
    double weight;
} rb_clip_segment;

/* A1111's emphasis parser: "(a)" x1.1, "[a]" /1.1, "(a:1.3)" x1.3, "\(" etc.
 * literal, unclosed brackets applied to the end, adjacent equal weights
 * merged, BREAK (a whole word) split out. An unparsable weight such as
 * "(a:1.2.3)" gives RB_E_INVALID (A1111 raises there). *segs is malloc'ed;
 * free with rb_clip_segments_free(). */
rb_status rb_clip_parse_emphasis(const char *text, size_t len, rb_clip_segment **segs, size_t *n_segs,
                                 rb_error *err);
void rb_clip_segments_free(rb_clip_segment *segs, size_t n);

#ifdef __cplusplus
}
#endif
#endif

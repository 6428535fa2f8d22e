/* Text <-> token ids for the supported model families: SentencePiece-style
 * BPE with byte fallback (Llama 2, Mistral, Gemma) and byte-level BPE
 * (Llama 3, Qwen). A tokenizer is loaded either from GGUF metadata
 * (tokenizer.ggml.*) or from a Hugging Face tokenizer.json (+ optional
 * tokenizer_config.json) and follows HF `tokenizers` semantics: added/special
 * tokens are split out first, then normalizer, pre-tokenizer, BPE model and
 * post-processor. A loaded tokenizer is immutable; encode/decode may run
 * concurrently from several threads. */
#ifndef RBEE_TOKENIZER_H
#define RBEE_TOKENIZER_H

#include "rbee/gguf.h"
#include "rbee/status.h"
#include "rbee/text_range.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rb_tokenizer rb_tokenizer;

/* Family of the BPE model, which is also its GGUF tokenizer.ggml.model name. */
typedef enum rb_tokenizer_kind {
    RB_TOKENIZER_SPM = 0,       /* "llama": ▁ for spaces, <0xNN> byte fallback */
    RB_TOKENIZER_BYTE_LEVEL = 1 /* "gpt2": GPT-2 byte-to-unicode map + regex pre-split */
} rb_tokenizer_kind;

/* Encode flags. */
enum {
    RB_TOK_ADD_SPECIAL = 1u << 0,   /* apply the post-processor (BOS/EOS template) */
    RB_TOK_PARSE_SPECIAL = 1u << 1, /* match special tokens in the text; non-special
                                       added tokens are always matched (as HF does) */
};
/* Decode flags. */
enum {
    RB_TOK_SKIP_SPECIAL = 1u << 0 /* drop special tokens from the output */
};

/* Loads tokenizer.json (config_path may be NULL; it supplies bos/eos token
 * names and the chat template). Missing/garbage files give RB_E_IO/RB_E_FORMAT,
 * unknown model or component types RB_E_UNSUPPORTED. */
rb_status rb_tokenizer_load_hf(const char *tokenizer_json_path, const char *config_json_path, rb_tokenizer **out,
                               rb_error *err);
/* Same from memory buffers (config may be NULL / 0). */
rb_status rb_tokenizer_load_hf_memory(const char *json, size_t json_len, const char *config, size_t config_len,
                                      rb_tokenizer **out, rb_error *err);
/* Loads from the tokenizer.ggml.* metadata of an open GGUF file. */
rb_status rb_tokenizer_load_gguf(const rb_gguf *g, rb_tokenizer **out, rb_error *err);
void rb_tokenizer_free(rb_tokenizer *t);

/* Writes the tokenizer as llama.cpp's convert script does
 * (tokenizer.ggml.model/pre/tokens/scores/token_type/merges, special ids,
 * add_bos/add_eos/add_space_prefix, tokenizer.chat_template). Tokens missing
 * from a sparse id space are written as "[PAD<id>]" of type UNUSED.
 * RB_E_UNSUPPORTED if the pipeline cannot be expressed in GGUF metadata. */
rb_status rb_tokenizer_write_gguf(const rb_tokenizer *t, rb_gguf_writer *w, rb_error *err);

rb_tokenizer_kind rb_tokenizer_get_kind(const rb_tokenizer *t);
/* Number of ids (largest id + 1, added tokens included). */
int32_t rb_tokenizer_n_vocab(const rb_tokenizer *t);
/* Special ids, -1 when the tokenizer has none. */
int32_t rb_tokenizer_bos(const rb_tokenizer *t);
int32_t rb_tokenizer_eos(const rb_tokenizer *t);
/* Raw token text (as stored in the vocabulary, e.g. "▁the", "Ġthe", "<0x0A>");
 * NULL for an id out of range or a hole. Not NUL-terminated: see *len. */
const char *rb_tokenizer_token_text(const rb_tokenizer *t, int32_t id, size_t *len);
/* Id of an exact token text (vocabulary or added token); -1 if absent. */
int32_t rb_tokenizer_token_id(const rb_tokenizer *t, const char *text, size_t len);
bool rb_tokenizer_is_special(const rb_tokenizer *t, int32_t id);
/* The bytes token id stands for inside decoded text (llama.cpp's "piece"):
 * the decoder chain on that token alone as if it sat in the middle of a
 * sequence (no Strip steps, every ▁ a space), byte tokens and byte-level
 * characters as their raw bytes, which need not be complete UTF-8 (a
 * character split over several tokens). Special tokens give their text.
 * *piece is malloc'ed and NUL-terminated (*len, may be NULL, excludes the
 * NUL). RB_E_RANGE for an id out of range or a hole. */
rb_status rb_tokenizer_token_piece(const rb_tokenizer *t, int32_t id, char **piece, size_t *len, rb_error *err);
/* Chat template from tokenizer_config.json / tokenizer.chat_template, or NULL. */
const char *rb_tokenizer_chat_template(const rb_tokenizer *t);

/* Encodes len bytes of UTF-8 text. *ids is malloc'ed (caller frees; may be
 * non-NULL even when *n_ids == 0). Invalid UTF-8 gives RB_E_INVALID with the
 * byte offset in the message. */
rb_status rb_tokenizer_encode(const rb_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                              size_t *n_ids, rb_error *err);

/* rb_tokenizer_encode, except that no special token is matched on the bytes
 * of the `plain` ranges (sorted, non-overlapping, non-empty, within len;
 * RB_E_INVALID otherwise): a chat prompt keeps the special tokens written
 * by its template and encodes the request's text (rb_chat_rendered.request)
 * as plain text, as /v1/completions encodes a prompt. A special token is
 * matched only if none of its bytes is plain (a normalized special token,
 * matched after the normalizer, only in a piece between raw added tokens
 * that has no plain byte). The ranges change nothing else: the text between
 * matched added tokens is still one piece for the normalizer, pre-tokenizer
 * and BPE (merges across a range edge are kept), so a text whose plain
 * ranges hold no special-token text gives exactly rb_tokenizer_encode's
 * ids, as transformers and llama.cpp encode a whole rendered prompt. */
rb_status rb_tokenizer_encode_plain(const rb_tokenizer *t, const char *text, size_t len, unsigned flags,
                                    const rb_text_range *plain, size_t n_plain, int32_t **ids, size_t *n_ids,
                                    rb_error *err);

/* Decodes ids to a malloc'ed NUL-terminated string (*len excludes the NUL),
 * applying the decoder chain (▁ -> space, byte fallback, byte-level map).
 * Invalid byte sequences become U+FFFD as HF does. Ids out of range give
 * RB_E_RANGE. */
rb_status rb_tokenizer_decode(const rb_tokenizer *t, const int32_t *ids, size_t n_ids, unsigned flags, char **text,
                              size_t *len, rb_error *err);

/* Streaming decode for generation: push ids one at a time and receive only
 * text that is complete UTF-8 (a character split over several byte tokens is
 * held back until complete). The concatenation of every piece returned by
 * push and the final flush equals rb_tokenizer_decode of all pushed ids. */
typedef struct rb_tokenizer_stream rb_tokenizer_stream;
rb_status rb_tokenizer_stream_create(const rb_tokenizer *t, unsigned flags, rb_tokenizer_stream **out,
                                     rb_error *err);
void rb_tokenizer_stream_free(rb_tokenizer_stream *s);
/* *text points into the stream object (valid until the next call), *len may be 0. */
rb_status rb_tokenizer_stream_push(rb_tokenizer_stream *s, int32_t id, const char **text, size_t *len,
                                   rb_error *err);
/* Returns whatever is still held back (invalid bytes as U+FFFD) and resets. */
rb_status rb_tokenizer_stream_flush(rb_tokenizer_stream *s, const char **text, size_t *len, rb_error *err);

#ifdef __cplusplus
}
#endif
#endif

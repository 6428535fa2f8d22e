/* UTF-8 primitives for the tokenizer: strict validation (to reject invalid
 * input), code point iteration, lossy decoding with U+FFFD as Rust's
 * String::from_utf8_lossy does, and the GPT-2 byte <-> unicode map. */
#ifndef RBEE_TOKENIZER_TOK_UTF8_H
#define RBEE_TOKENIZER_TOK_UTF8_H

#include "tokenizer/tok_buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is invalid or truncated. */
size_t tok_utf8_seq_len(const unsigned char *s, size_t avail);
/* True if all of s is valid UTF-8; else *bad_off is the first bad byte. */
bool tok_utf8_validate(const char *s, size_t len, size_t *bad_off);
/* Decodes a valid sequence (caller validated); returns its length. */
size_t tok_utf8_decode(const unsigned char *s, uint32_t *cp);
size_t tok_utf8_encode(uint32_t cp, char out[4]);
/* Appends s to out replacing each maximal invalid subpart by U+FFFD. */
rb_status tok_utf8_lossy(const char *s, size_t len, tok_buf *out);

/* Unicode White_Space (Rust char::is_whitespace). */
bool tok_cp_is_ws(uint32_t c);

/* GPT-2 byte-level map: byte -> code point (all < 324), and back (-1 if cp is not in the map). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);

#define TOK_FFFD "\xEF\xBF\xBD"

#endif

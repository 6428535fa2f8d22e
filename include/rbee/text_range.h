/* A byte range of a text, shared by the chat-template renderer (which
 * reports the ranges of its output that came from request data) and the
 * tokenizer (which encodes such ranges as plain text, never as special
 * tokens). */
#ifndef RBEE_TEXT_RANGE_H
#define RBEE_TEXT_RANGE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes [begin, end) of a text. */
typedef struct rb_text_range {
    size_t begin, end;
} rb_text_range;

#ifdef __cplusplus
}
#endif
#endif

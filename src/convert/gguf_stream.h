/* Streaming GGUF writer for the converters: metadata comes from an
 * rb_gguf_writer (so the tokenizer exporter and kv copying can fill it), the
 * tensor list is declared up front, and tensor data is then written one
 * tensor at a time (or in slices of one), so a conversion never holds more
 * than one tensor. */
#ifndef RBEE_CONVERT_GGUF_STREAM_H
#define RBEE_CONVERT_GGUF_STREAM_H

#include "rbee/gguf.h"

typedef struct cv_tensor_desc {
    const char *name; /* borrowed until cv_stream_begin returns */
    rb_dtype dtype;
    int n_dims;
    int64_t ne[RB_MAX_DIMS];
} cv_tensor_desc;

typedef struct cv_stream cv_stream;

/* Writes the header, every kv of meta (which must hold no tensors) and the
 * tensor infos to path + ".part". */
rb_status cv_stream_begin(const char *path, rb_gguf_writer *meta, const cv_tensor_desc *tensors, size_t n,
                          cv_stream **out, rb_error *err);
/* Bytes tensor i must have. */
size_t cv_stream_tensor_bytes(const cv_stream *s, size_t i);
/* Writes the data of the next tensor (in declaration order). */
rb_status cv_stream_write(cv_stream *s, const void *data, size_t nbytes, rb_error *err);
/* Writes the next nbytes of the current tensor's data (the tensor ends once
 * its declared size is reached): large tensors in slices, e.g. per expert. */
rb_status cv_stream_write_part(cv_stream *s, const void *data, size_t nbytes, rb_error *err);
/* Checks every tensor was written, closes, and renames to the final path;
 * *bytes_out (may be NULL) receives the file size. Frees s in every case. */
rb_status cv_stream_finish(cv_stream *s, uint64_t *bytes_out, rb_error *err);
/* Abandons the file (removes the partial output) and frees s; NULL is fine. */
void cv_stream_abort(cv_stream *s);

#endif

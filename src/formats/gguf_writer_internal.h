/* Internal to the formats layer's GGUF writer: the collected metadata and
 * in-memory tensors of an rb_gguf_writer (gguf_writer.c), which the one
 * serialiser (gguf_stream.c) writes - for rb_gguf_writer_write directly,
 * for rb_gguf_stream_* ahead of tensor data streamed in later. */
#ifndef RBEE_FORMATS_GGUF_WRITER_INTERNAL_H
#define RBEE_FORMATS_GGUF_WRITER_INTERNAL_H

#include "formats/gguf_internal.h"

typedef struct wkv {
    char *key;
    rb_gguf_type type;
    uint8_t *val; /* encoded value as it appears after the type field */
    size_t val_len;
} wkv;

typedef struct wtensor {
    char *name;
    rb_dtype dtype;
    int n_dims;
    int64_t ne[RB_MAX_DIMS];
    void *data;
    size_t nbytes;
} wtensor;

struct rb_gguf_writer {
    wkv *kvs;
    size_t n_kv, cap_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    rb_name_index kv_index;     /* over wkv.key */
    rb_name_index tensor_index; /* over wtensor.name */
};

/* Opens a stream writing w's header and metadata and the infos of n tensors
 * (desc[i] with nbytes[i] bytes of data each) with the given alignment (0:
 * w's general.alignment, else 32). part non-NULL: written to part and renamed
 * to path by rb_gguf_stream_finish (messages as rb_gguf_stream_*); NULL:
 * written to path itself (messages as rb_gguf_writer_write). */
rb_status rb_gguf_stream_open(const rb_gguf_writer *w, const char *path, const char *part, size_t alignment,
                              const rb_gguf_tensor_desc *desc, const size_t *nbytes, size_t n, rb_gguf_stream **out,
                              rb_error *err);

#endif

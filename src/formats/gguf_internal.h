/* Internal layout of an open GGUF file, shared by the parser (gguf_reader.c)
 * and the typed accessors (gguf_getters.c), plus the GGUF format constants
 * the writer also needs. */
#ifndef RBEE_FORMATS_GGUF_INTERNAL_H
#define RBEE_FORMATS_GGUF_INTERNAL_H

#include "formats/mapped_file.h"
#include "formats/name_index.h"
#include "rbee/gguf.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rbee's GGUF code assumes a little-endian host"
#endif

#define RB_GGUF_MAGIC "GGUF"
#define RB_GGUF_ALIGNMENT_KEY "general.alignment"

/* Bytes of one value of a fixed-size GGUF type, 0 for STRING/ARRAY/invalid. */
size_t rb_gguf_type_size(rb_gguf_type t);
/* "uint8", "string", ... or "?" */
const char *rb_gguf_type_name(rb_gguf_type t);

/* One metadata entry; kv must stay the first member (the public API hands
 * out &entry->kv). */
typedef struct rb_gguf_kv_entry {
    rb_gguf_kv kv;
    rb_gguf_str str;   /* value of a STRING scalar (kv.data points here) */
    rb_gguf_str *strs; /* elements of a STRING array (kv.data points here), heap */
} rb_gguf_kv_entry;

struct rb_gguf {
    rb_mapped_file map; /* zeroed for rb_gguf_open_memory */
    const uint8_t *base;
    size_t size;
    uint32_t version;
    size_t alignment;
    size_t data_offset; /* file offset of the data section */
    size_t data_size;   /* bytes from data_offset to the end of the file */
    int64_t n_kv;
    rb_gguf_kv_entry *kvs;
    int64_t n_tensors;
    rb_gguf_tensor_info *tensors;
    rb_name_index kv_index;
    rb_name_index tensor_index;
};

#endif

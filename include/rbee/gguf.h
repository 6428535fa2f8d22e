/* GGUF (v2/v3) model files: a validating, memory-mapped reader and a writer
 * (whole files, or streamed a tensor at a time).
 * The reader checks every length, count, type, offset and alignment against
 * the file size before use; a truncated, malformed or hostile file yields
 * RB_E_FORMAT with a message naming the problem, never an out-of-bounds read.
 * Tensor data is used in place from the mapping (no copy). */
#ifndef RBEE_GGUF_H
#define RBEE_GGUF_H

#include "rbee/dtype.h"
#include "rbee/status.h"
#include "rbee/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rb_gguf_type {
    RB_GGUF_UINT8 = 0, RB_GGUF_INT8 = 1, RB_GGUF_UINT16 = 2, RB_GGUF_INT16 = 3,
    RB_GGUF_UINT32 = 4, RB_GGUF_INT32 = 5, RB_GGUF_FLOAT32 = 6, RB_GGUF_BOOL = 7,
    RB_GGUF_STRING = 8, RB_GGUF_ARRAY = 9, RB_GGUF_UINT64 = 10, RB_GGUF_INT64 = 11,
    RB_GGUF_FLOAT64 = 12,
    RB_GGUF_TYPE_COUNT_
} rb_gguf_type;

#define RB_GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the file (not NUL-terminated in the mapping). */
typedef struct rb_gguf_str { const char *ptr; uint64_t len; } rb_gguf_str;

typedef struct rb_gguf_kv {
    rb_gguf_str key;
    rb_gguf_type type;
    rb_gguf_type arr_type; /* element type when type == RB_GGUF_ARRAY */
    uint64_t arr_len;      /* element count when type == RB_GGUF_ARRAY */
    const void *data;      /* scalar value, or first array element (strings: see rb_gguf_arr_str) */
                           /* (may be unaligned: read with memcpy; a STRING scalar's data is an rb_gguf_str) */
} rb_gguf_kv;

typedef struct rb_gguf_tensor_info {
    rb_gguf_str name;
    int n_dims;                 /* 1..4 */
    int64_t ne[RB_MAX_DIMS];    /* ggml order; unused dims 1 */
    rb_dtype dtype;
    uint64_t offset;            /* relative to the data section */
    size_t nbytes;              /* validated size of the tensor's data */
    const void *data;           /* pointer into the mapping */
} rb_gguf_tensor_info;

typedef struct rb_gguf rb_gguf; /* an open file */

/* Opens and validates path (mmap). */
rb_status rb_gguf_open(const char *path, rb_gguf **out, rb_error *err);
/* Parses an in-memory image (not copied; must outlive the handle); the entry
 * point of the fuzz target. */
rb_status rb_gguf_open_memory(const void *data, size_t size, rb_gguf **out, rb_error *err);
void rb_gguf_close(rb_gguf *g);

uint32_t rb_gguf_version(const rb_gguf *g);
size_t rb_gguf_alignment(const rb_gguf *g);
const void *rb_gguf_base(const rb_gguf *g);    /* start of the file image */
size_t rb_gguf_file_size(const rb_gguf *g);
size_t rb_gguf_data_offset(const rb_gguf *g);  /* file offset of the tensor data section */

int64_t rb_gguf_n_kv(const rb_gguf *g);
const rb_gguf_kv *rb_gguf_kv_at(const rb_gguf *g, int64_t i);
const rb_gguf_kv *rb_gguf_find_kv(const rb_gguf *g, const char *key); /* NULL if absent */

/* Typed getters: RB_E_NOT_FOUND if absent, RB_E_FORMAT if the stored type
 * does not convert losslessly (any integer type fits an int64/uint64 in range;
 * f32/f64 both read as double). */
rb_status rb_gguf_get_u64(const rb_gguf *g, const char *key, uint64_t *out);
rb_status rb_gguf_get_i64(const rb_gguf *g, const char *key, int64_t *out);
rb_status rb_gguf_get_u32(const rb_gguf *g, const char *key, uint32_t *out);
rb_status rb_gguf_get_f64(const rb_gguf *g, const char *key, double *out);
rb_status rb_gguf_get_f32(const rb_gguf *g, const char *key, float *out);
rb_status rb_gguf_get_bool(const rb_gguf *g, const char *key, bool *out);
/* String value, copied into a NUL-terminated heap string (caller frees). */
rb_status rb_gguf_get_str(const rb_gguf *g, const char *key, char **out);
/* Array element access for a kv of type ARRAY; i < arr_len is checked. */
rb_gguf_str rb_gguf_arr_str(const rb_gguf_kv *kv, uint64_t i);
int64_t rb_gguf_arr_int(const rb_gguf_kv *kv, uint64_t i);  /* integer/bool elements */
double rb_gguf_arr_float(const rb_gguf_kv *kv, uint64_t i); /* any numeric elements */

int64_t rb_gguf_n_tensors(const rb_gguf *g);
const rb_gguf_tensor_info *rb_gguf_tensor_at(const rb_gguf *g, int64_t i);
const rb_gguf_tensor_info *rb_gguf_find_tensor(const rb_gguf *g, const char *name);

/* ---- writer ---- */
typedef struct rb_gguf_writer rb_gguf_writer;

rb_status rb_gguf_writer_create(rb_gguf_writer **out, rb_error *err);
void rb_gguf_writer_free(rb_gguf_writer *w);
/* Metadata (keys must be unique; values are copied). */
rb_status rb_gguf_writer_set_u32(rb_gguf_writer *w, const char *key, uint32_t v);
rb_status rb_gguf_writer_set_i32(rb_gguf_writer *w, const char *key, int32_t v);
rb_status rb_gguf_writer_set_u64(rb_gguf_writer *w, const char *key, uint64_t v);
rb_status rb_gguf_writer_set_f32(rb_gguf_writer *w, const char *key, float v);
rb_status rb_gguf_writer_set_bool(rb_gguf_writer *w, const char *key, bool v);
rb_status rb_gguf_writer_set_str(rb_gguf_writer *w, const char *key, const char *v);
/* The remaining scalar types (added by the formats layer). */
rb_status rb_gguf_writer_set_u8(rb_gguf_writer *w, const char *key, uint8_t v);
rb_status rb_gguf_writer_set_i8(rb_gguf_writer *w, const char *key, int8_t v);
rb_status rb_gguf_writer_set_u16(rb_gguf_writer *w, const char *key, uint16_t v);
rb_status rb_gguf_writer_set_i16(rb_gguf_writer *w, const char *key, int16_t v);
rb_status rb_gguf_writer_set_i64(rb_gguf_writer *w, const char *key, int64_t v);
rb_status rb_gguf_writer_set_f64(rb_gguf_writer *w, const char *key, double v);
/* Array of a scalar type: n elements of the type's natural C size. */
rb_status rb_gguf_writer_set_arr(rb_gguf_writer *w, const char *key, rb_gguf_type elem_type, const void *data,
                                 uint64_t n);
rb_status rb_gguf_writer_set_arr_str(rb_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Copies every kv of an open file (used by quantize/convert). */
rb_status rb_gguf_writer_copy_kv(rb_gguf_writer *w, const rb_gguf *src, const char *skip_prefix);
/* Tensor: data of rb_dtype_row_size(dtype, ne[0]) * rows bytes; copied. */
rb_status rb_gguf_writer_add_tensor(rb_gguf_writer *w, const char *name, rb_dtype dtype, int n_dims,
                                    const int64_t *ne, const void *data, size_t nbytes);
/* Writes version 3 with the given alignment (0 = a copied general.alignment,
 * else the default 32). */
rb_status rb_gguf_writer_write(rb_gguf_writer *w, const char *path, size_t alignment, rb_error *err);

/* ---- streaming: the same file, tensor data written one tensor at a time ----
 * For converters, which must never hold more than one tensor: the metadata
 * comes from an rb_gguf_writer (holding no tensors), the tensors are declared
 * up front, then each one's data is written in declaration order, whole or
 * in slices. The file is written as PATH.part and renamed to PATH by
 * rb_gguf_stream_finish; its bytes are those rb_gguf_writer_write would
 * write for the same metadata and tensors. */
typedef struct rb_gguf_tensor_desc {
    const char *name; /* borrowed until rb_gguf_stream_begin returns */
    rb_dtype dtype;
    int n_dims;
    int64_t ne[RB_MAX_DIMS];
} rb_gguf_tensor_desc;

typedef struct rb_gguf_stream rb_gguf_stream;

/* Writes the header, every kv of meta and the tensor infos. */
rb_status rb_gguf_stream_begin(const char *path, rb_gguf_writer *meta, const rb_gguf_tensor_desc *tensors, size_t n,
                               rb_gguf_stream **out, rb_error *err);
/* Bytes tensor i must have. */
size_t rb_gguf_stream_tensor_bytes(const rb_gguf_stream *s, size_t i);
/* Writes the data of the next tensor (in declaration order). */
rb_status rb_gguf_stream_write(rb_gguf_stream *s, const void *data, size_t nbytes, rb_error *err);
/* Writes the next nbytes of the current tensor's data (the tensor ends once
 * its declared size is reached): large tensors in slices, e.g. per expert. */
rb_status rb_gguf_stream_write_part(rb_gguf_stream *s, const void *data, size_t nbytes, rb_error *err);
/* Checks every tensor was written, closes, and renames to the final path;
 * *bytes_out (may be NULL) receives the file size. Frees s in every case. */
rb_status rb_gguf_stream_finish(rb_gguf_stream *s, uint64_t *bytes_out, rb_error *err);
/* Abandons the file (removes the partial output) and frees s; NULL is fine. */
void rb_gguf_stream_abort(rb_gguf_stream *s);

#ifdef __cplusplus
}
#endif
#endif

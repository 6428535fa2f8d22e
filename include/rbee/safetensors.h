/* Safetensors model files: single files and sharded checkpoints
 * (model.safetensors.index.json), memory-mapped and validated (header length,
 * JSON, dtypes, shapes, offsets inside the file, no overlaps). Also loads a
 * Hugging Face folder's config.json. Shapes are converted to ggml order
 * (ne[0] = last safetensors dimension). */
#ifndef RBEE_SAFETENSORS_H
#define RBEE_SAFETENSORS_H

#include "rbee/dtype.h"
#include "rbee/status.h"
#include "rbee/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rb_st_tensor {
    const char *name;        /* NUL-terminated, owned by the set */
    rb_dtype dtype;          /* F32, F16, BF16, F64, I8, I16, I32, I64 (U8/BOOL map to I8) */
    int n_dims;              /* 0..4 (0 = scalar) */
    int64_t ne[RB_MAX_DIMS]; /* ggml order */
    size_t nbytes;
    const void *data;        /* pointer into the mapping */
} rb_st_tensor;

typedef struct rb_st_set rb_st_set; /* one or more mapped safetensors files */

/* path: a .safetensors file, a model.safetensors.index.json, or a folder
 * (which must hold model.safetensors or model.safetensors.index.json). */
rb_status rb_st_open(const char *path, rb_st_set **out, rb_error *err);
/* Parses one in-memory file image (not copied); the fuzz target's entry. */
rb_status rb_st_open_memory(const void *data, size_t size, rb_st_set **out, rb_error *err);
void rb_st_close(rb_st_set *s);
int64_t rb_st_n_tensors(const rb_st_set *s);
const rb_st_tensor *rb_st_tensor_at(const rb_st_set *s, int64_t i);
const rb_st_tensor *rb_st_find(const rb_st_set *s, const char *name);
/* The "__metadata__" string map value for key, or NULL. */
const char *rb_st_metadata(const rb_st_set *s, const char *key);

#ifdef __cplusplus
}
#endif
#endif

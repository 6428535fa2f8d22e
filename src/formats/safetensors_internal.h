/* Internal layout of an open safetensors set, shared by the single-image
 * parser (safetensors.c) and the path / sharded-index front end
 * (safetensors_open.c). */
#ifndef RBEE_FORMATS_SAFETENSORS_INTERNAL_H
#define RBEE_FORMATS_SAFETENSORS_INTERNAL_H

#include "formats/mapped_file.h"
#include "formats/name_index.h"
#include "rbee/safetensors.h"

#include <jansson.h>

/* Safetensors caps the JSON header at 100 MB. */
#define RB_ST_MAX_HEADER 100000000ull

typedef struct rb_st_file {
    rb_mapped_file map; /* zeroed for in-memory images */
    json_t *header;     /* owns the tensor name strings */
} rb_st_file;

struct rb_st_set {
    rb_st_file *files;
    size_t n_files, cap_files;
    rb_st_tensor *tensors;
    uint32_t *tensor_file; /* index into files of each tensor */
    int64_t n_tensors;
    size_t cap_tensors;
    rb_name_index index; /* tensor name -> index, across all files */
};

/* Allocates an empty set. */
rb_status rb_st_set_new(rb_st_set **out, rb_error *err);
/* Parses one file image and appends its tensors to s. map (may be NULL) is
 * owned by s afterwards, also on failure. label names the file in messages. */
rb_status rb_st_add_image(rb_st_set *s, const void *data, size_t size, const rb_mapped_file *map, const char *label,
                          rb_error *err);

#endif

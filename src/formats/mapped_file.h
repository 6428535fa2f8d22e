/* Internal helper of the formats layer: a whole file mapped read-only
 * (MAP_PRIVATE, PROT_READ) so model weights are used in place, never copied.
 * Refuses directories and empty files with a clear message. */
#ifndef RBEE_FORMATS_MAPPED_FILE_H
#define RBEE_FORMATS_MAPPED_FILE_H

#include "rbee/status.h"

#include <stddef.h>

typedef struct rb_mapped_file {
    const void *data; /* NULL when not mapped */
    size_t size;
} rb_mapped_file;

/* Maps path. RB_E_IO (with errno text) if it cannot be opened, stat'ed or
 * mapped, RB_E_FORMAT if it is not a regular file or is empty. */
rb_status rb_mapped_file_open(const char *path, rb_mapped_file *out, rb_error *err);
/* Unmaps (no-op on a zeroed struct) and zeroes m. */
void rb_mapped_file_close(rb_mapped_file *m);

#endif

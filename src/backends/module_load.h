/* Loading a GPU backend module (module_load.c; the contract in
 * backend_module.h). Internal to the backends layer. */
#ifndef RBEE_MODULE_LOAD_H
#define RBEE_MODULE_LOAD_H

#include "rbee/backend.h"

struct rb_backend_module;

/* Finds, loads and checks the module of a GPU kind; path (len bytes)
 * receives the file's path (also on most failures). RB_E_UNSUPPORTED when it
 * is not installed or cannot be loaded (dlerror's reason in err),
 * RB_E_FORMAT for a file that is not a module of this build. */
rb_status rb_backend_module_load(rb_device_kind kind, const struct rb_backend_module **out, char *path, size_t len,
                                 rb_error *err);

#endif

/* The contract between the registry and a GPU backend module: each GPU kind
 * is built as a shared object (librbee-cuda.so, librbee-rocm.so) that the
 * registry loads with dlopen when a program first asks for that kind, so one
 * build of the programs runs on whatever the machine has. The module
 * exports one table under RB_BACKEND_MODULE_SYMBOL; the registry refuses a
 * table whose ABI stamp (version and the layouts both sides share) differs
 * from its own, since the module carries its own copy of the core. */
#ifndef RBEE_BACKEND_MODULE_H
#define RBEE_BACKEND_MODULE_H

#include "backends/gpu/gpu_tuning.h"
#include "core/backend_impl.h"
#include "rbee/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RB_BACKEND_MODULE_SYMBOL "rb_backend_module_v1"
#define RB_BACKEND_MODULE_ABI 1

/* What both sides must agree on: the interface version, the program
 * version and the sizes of the structures that cross the boundary. */
typedef struct rb_backend_module_stamp {
    int abi;
    char version[32];
    unsigned backend_size, tensor_size, buffer_size, config_size, vtable_size, error_size;
} rb_backend_module_stamp;

#define RB_BACKEND_MODULE_STAMP                                                                                        \
    {RB_BACKEND_MODULE_ABI,         RBEE_VERSION,                        (unsigned)sizeof(struct rb_backend),           \
     (unsigned)sizeof(rb_tensor),   (unsigned)sizeof(struct rb_buffer),  (unsigned)sizeof(rb_backend_config),           \
     (unsigned)sizeof(rb_backend_vtable), (unsigned)sizeof(rb_error)}

typedef struct rb_backend_module {
    rb_backend_module_stamp stamp;
    rb_device_kind kind;
    rb_status (*create)(int index, const rb_backend_config *cfg, rb_backend **out, rb_error *err);
    rb_status (*list)(rb_device_info *infos, int max, int *n, rb_error *err);
    rb_status (*tune)(rb_backend *be, const rb_gpu_tuning *t);
    rb_status (*conv_stats)(rb_backend *be, rb_gpu_conv_stats *out);
} rb_backend_module;

#ifdef __cplusplus
}
#endif
#endif

/* NCCL (and RCCL, its AMD twin with the same API) loaded at run time: the
 * few declarations rbee needs, written from NCCL's documented C API (Debian
 * has no NCCL package, so no header is installed), and a table of the entry
 * points dlopen finds. One process drives all its devices, so only the
 * single-process calls are here (ncclCommInitAll, grouped all-reduces).
 * Internal to the backends layer. */
#ifndef RBEE_NCCL_H
#define RBEE_NCCL_H

#include "rbee/status.h"

#include <stddef.h>

/* ABI values of NCCL's public enums (nccl.h of NCCL 2.x) */
typedef int rb_nccl_result;  /* ncclResult_t: 0 = ncclSuccess */
typedef int rb_nccl_datatype; /* ncclDataType_t */
typedef int rb_nccl_redop;    /* ncclRedOp_t */
enum { RB_NCCL_FLOAT16 = 6, RB_NCCL_FLOAT32 = 7, RB_NCCL_BFLOAT16 = 9 };
enum { RB_NCCL_SUM = 0 };
typedef struct rb_nccl_comm_s *rb_nccl_comm; /* ncclComm_t */

typedef struct rb_nccl {
    void *lib;
    int version; /* ncclGetVersion: major * 10000 + minor * 100 + patch */
    rb_nccl_result (*get_version)(int *version);
    rb_nccl_result (*comm_init_all)(rb_nccl_comm *comms, int ndev, const int *devlist);
    rb_nccl_result (*comm_destroy)(rb_nccl_comm comm);
    rb_nccl_result (*all_reduce)(const void *send, void *recv, size_t count, rb_nccl_datatype type, rb_nccl_redop op,
                                 rb_nccl_comm comm, void *stream);
    rb_nccl_result (*group_start)(void);
    rb_nccl_result (*group_end)(void);
    const char *(*error_string)(rb_nccl_result r);
} rb_nccl;

/* Opens NCCL from path (NULL: "libnccl.so.2", found through the loader's
 * search path, e.g. LD_LIBRARY_PATH) and resolves the entry points above.
 * RB_E_UNSUPPORTED with dlerror's reason when the library cannot be loaded,
 * RB_E_FORMAT when it lacks an entry point or reports no version. */
rb_status rb_nccl_open(const char *path, rb_nccl *out, rb_error *err);
void rb_nccl_close(rb_nccl *n);

#endif

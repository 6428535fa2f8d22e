/* Loading NCCL at run time (nccl.h): dlopen, one dlsym per entry point, and
 * the version check, with errors that name what is missing. Several devices
 * in one worker need it; one device never loads it. */
#include "backends/nccl.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static void *sym(void *lib, const char *name, const char *path, rb_status *s, rb_error *err) {
    if (*s != RB_OK) return NULL;
    void *p = dlsym(lib, name);
    if (!p) *s = rb_error_set(err, RB_E_FORMAT, "%s has no %s: not an NCCL library", path, name);
    return p;
}

rb_status rb_nccl_open(const char *path, rb_nccl *out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "nccl: out is NULL");
    memset(out, 0, sizeof *out);
    const char *p = path && *path ? path : "libnccl.so.2";
    /* NVLink multicast (NVLS) off unless the user set it: the lent multi-GPU
     * machines fail with it on, and small all-reduces gain nothing from it */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    void *lib = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        return rb_error_set(err, RB_E_UNSUPPORTED, "several devices need NCCL, which cannot be loaded (%s): %s", p,
                            why ? why : "unknown reason");
    }
    rb_status s = RB_OK;
    /* dlsym returns object pointers; POSIX guarantees they convert to function pointers */
    *(void **)&out->get_version = sym(lib, "ncclGetVersion", p, &s, err);
    *(void **)&out->comm_init_all = sym(lib, "ncclCommInitAll", p, &s, err);
    *(void **)&out->comm_destroy = sym(lib, "ncclCommDestroy", p, &s, err);
    *(void **)&out->all_reduce = sym(lib, "ncclAllReduce", p, &s, err);
    *(void **)&out->group_start = sym(lib, "ncclGroupStart", p, &s, err);
    *(void **)&out->group_end = sym(lib, "ncclGroupEnd", p, &s, err);
    *(void **)&out->error_string = sym(lib, "ncclGetErrorString", p, &s, err);
    if (s == RB_OK && (out->get_version(&out->version) != 0 || out->version < 20000))
        s = rb_error_set(err, RB_E_FORMAT, "%s: NCCL reports version %d (2.x needed)", p, out->version);
    if (s != RB_OK) {
        dlclose(lib);
        memset(out, 0, sizeof *out);
        return s;
    }
    out->lib = lib;
    return RB_OK;
}

void rb_nccl_close(rb_nccl *n) {
    if (!n) return;
    if (n->lib) dlclose(n->lib);
    memset(n, 0, sizeof *n);
}

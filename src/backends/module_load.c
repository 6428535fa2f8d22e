/* Finding and loading a GPU backend module (backend_module.h) for
 * rb_backend_create, rb_devices_list and rb_backend_module_probe. The module
 * of kind K is librbee-K.so, looked for in order:
 *   1. the directory named by RBEE_BACKEND_PATH, if set (docs/ENVIRONMENT.md);
 *   2. the installed module folder relative to the executable
 *      (RBEE_MODULE_FROM_BIN, bindir -> libdir/rbee), so an installed tree
 *      can move;
 *   3. this build's module folder (RBEE_MODULE_BUILD_DIR), for programs run
 *      where they were built;
 *   4. the install's module folder (RBEE_MODULE_INSTALL_DIR), for other
 *      programs linked with librbee.a.
 * It is loaded with RTLD_NODELETE: once loaded it stays for the life of the
 * process (GPU runtimes do not survive being unloaded), so the table it
 * returns stays valid without a handle to keep. */
#include "backends/backend_module.h"
#include "backends/module_load.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef RBEE_MODULE_FROM_BIN
#define RBEE_MODULE_FROM_BIN "../lib/rbee"
#endif
#ifndef RBEE_MODULE_BUILD_DIR
#define RBEE_MODULE_BUILD_DIR ""
#endif
#ifndef RBEE_MODULE_INSTALL_DIR
#define RBEE_MODULE_INSTALL_DIR ""
#endif

static const char *kind_label(rb_device_kind k) { return k == RB_DEVICE_CUDA ? "CUDA" : "ROCm"; }

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The directory of the running executable (symlinked names resolve). */
static bool exe_dir(char *buf, size_t len) {
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n <= 0) return false;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash) return false;
    *slash = '\0';
    return true;
}

/* The module file for kind in the first folder that has one; false with the
 * folders tried in `tried` when none does. */
static bool find_module(rb_device_kind kind, char *path, size_t len, char *tried, size_t tlen) {
    const char *file = kind == RB_DEVICE_CUDA ? "librbee-cuda.so" : "librbee-rocm.so";
    char dirs[4][4096];
    int nd = 0;
    const char *env = getenv("RBEE_BACKEND_PATH");
    if (env && *env) snprintf(dirs[nd++], sizeof dirs[0], "%s", env);
    char exe[4096];
    if (exe_dir(exe, sizeof exe)) snprintf(dirs[nd++], sizeof dirs[0], "%.3000s/%s", exe, RBEE_MODULE_FROM_BIN);
    if (RBEE_MODULE_BUILD_DIR[0]) snprintf(dirs[nd++], sizeof dirs[0], "%s", RBEE_MODULE_BUILD_DIR);
    if (RBEE_MODULE_INSTALL_DIR[0]) snprintf(dirs[nd++], sizeof dirs[0], "%s", RBEE_MODULE_INSTALL_DIR);
    tried[0] = '\0';
    for (int i = 0; i < nd; i++) {
        int w = snprintf(path, len, "%s/%s", dirs[i], file);
        if (w > 0 && (size_t)w < len && is_file(path)) return true;
        size_t used = strlen(tried);
        snprintf(tried + used, tlen - used, "%s%s", used ? ", " : "", dirs[i]);
    }
    return false;
}

static bool same_stamp(const rb_backend_module_stamp *a, const rb_backend_module_stamp *b) {
    return a->abi == b->abi && strncmp(a->version, b->version, sizeof a->version) == 0 &&
           a->backend_size == b->backend_size && a->tensor_size == b->tensor_size &&
           a->buffer_size == b->buffer_size && a->config_size == b->config_size &&
           a->vtable_size == b->vtable_size && a->error_size == b->error_size;
}

rb_status rb_backend_module_load(rb_device_kind kind, const rb_backend_module **out, char *path, size_t len,
                                 rb_error *err) {
    *out = NULL;
    if (kind != RB_DEVICE_CUDA && kind != RB_DEVICE_ROCM)
        return rb_error_set(err, RB_E_INVALID, "no backend module for this device kind");
    char tried[4 * 4096 + 8];
    if (!find_module(kind, path, len, tried, sizeof tried))
        return rb_error_set(err, RB_E_UNSUPPORTED,
                            "the %s backend is not installed: no %s in %s (set RBEE_BACKEND_PATH to the folder "
                            "that has it)",
                            kind_label(kind), kind == RB_DEVICE_CUDA ? "librbee-cuda.so" : "librbee-rocm.so",
                            tried[0] ? tried : "(no folder to look in)");
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *why = dlerror();
        return rb_error_set(err, RB_E_UNSUPPORTED, "the %s backend %s cannot be loaded: %s", kind_label(kind), path,
                            why ? why : "unknown error");
    }
    const rb_backend_module *m = (const rb_backend_module *)dlsym(h, RB_BACKEND_MODULE_SYMBOL);
    rb_status s = RB_OK;
    const rb_backend_module_stamp want = RB_BACKEND_MODULE_STAMP;
    if (!m) {
        s = rb_error_set(err, RB_E_FORMAT, "%s is not an rbee backend module (no %s)", path, RB_BACKEND_MODULE_SYMBOL);
    } else if (!same_stamp(&m->stamp, &want)) {
        char v[sizeof m->stamp.version + 1];
        memcpy(v, m->stamp.version, sizeof m->stamp.version);
        v[sizeof m->stamp.version] = '\0';
        s = rb_error_set(err, RB_E_FORMAT, "%s was built for rbee %s (interface %d), this program is rbee %s "
                         "(interface %d) or differs in layout: install the module of the same build", path, v,
                         m->stamp.abi, RBEE_VERSION, RB_BACKEND_MODULE_ABI);
    } else if (m->kind != kind || !m->create || !m->list) {
        s = rb_error_set(err, RB_E_FORMAT, "%s does not provide the %s backend", path, kind_label(kind));
    }
    dlclose(h); /* RTLD_NODELETE: stays loaded, m stays valid */
    if (s == RB_OK) *out = m;
    return s;
}

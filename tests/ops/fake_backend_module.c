/* A stand-in GPU backend module for test_backend_modules: the registry's
 * module loading, checking and dispatch without a GPU. Built several times
 * (tests/ops/CMakeLists.txt): FAKE_KIND picks the kind it claims, and
 * RBEE_VERSION the build it says it comes from. create makes a minimal
 * backend named "fake:N" (only destroy works), or refuses index 7 with a
 * message; list reports one device; tune records that it was called. */
#include "backends/backend_module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void destroy(rb_backend *be) { free(be); }
static const rb_backend_vtable k_vt = {.destroy = destroy};

static rb_status create(int index, const rb_backend_config *cfg, rb_backend **out, rb_error *err) {
    (void)cfg;
    if (index == 7) return rb_error_set(err, RB_E_NOT_FOUND, "fake module: no device 7");
    rb_backend *be = calloc(1, sizeof *be);
    if (!be) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    be->vt = &k_vt;
    be->kind = FAKE_KIND;
    be->index = index;
    snprintf(be->name, sizeof be->name, "fake:%d", index);
    *out = be;
    return RB_OK;
}

static rb_status list(rb_device_info *infos, int max, int *n, rb_error *err) {
    (void)err;
    if (max > 0) {
        memset(&infos[0], 0, sizeof infos[0]);
        infos[0].kind = FAKE_KIND;
        snprintf(infos[0].name, sizeof infos[0].name, "fake device");
    }
    *n = 1;
    return RB_OK;
}

static rb_status tune(rb_backend *be, const rb_gpu_tuning *t) {
    snprintf(be->last_error, sizeof be->last_error, "tuned: tiled_gemm=%d", t->tiled_gemm);
    return RB_OK;
}

__attribute__((visibility("default"))) extern const rb_backend_module rb_backend_module_v1;
const rb_backend_module rb_backend_module_v1 = {
    .stamp = RB_BACKEND_MODULE_STAMP,
    .kind = FAKE_KIND,
    .create = create,
    .list = list,
    .tune = tune,
};

/* Backend registry: turns a spec string ("cpu", "cuda:1", "rocm") into a
 * backend: the CPU backend is built in, each GPU kind comes from its module
 * (librbee-cuda.so, librbee-rocm.so; module_load.c), loaded the first time a
 * program asks for that kind, so one build of the programs runs wherever
 * the machine has a GPU runtime or not. Also: the kinds this build made,
 * every device of every loadable kind, and a test's GPU tuning
 * (backends/gpu/gpu_tuning.h) and convolution counters, passed to the
 * backend's module. RBEE_BUILT_CUDA / RBEE_BUILT_ROCM mark the modules this
 * build produced. */
#include "backends/backend_module.h"
#include "backends/module_load.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(RBEE_BUILT_CUDA)
#define RB_BUILT_CUDA ",cuda"
#else
#define RB_BUILT_CUDA ""
#endif
#if defined(RBEE_BUILT_ROCM)
#define RB_BUILT_ROCM ",rocm"
#else
#define RB_BUILT_ROCM ""
#endif

const char *rb_backends_compiled(void) { return "cpu" RB_BUILT_CUDA RB_BUILT_ROCM; }

/* Parses "<kind>" or "<kind>:<N>" with kind one of cpu/cuda/rocm. */
static rb_status parse_spec(const char *spec, rb_device_kind *kind, int *index, rb_error *err) {
    static const struct {
        const char *name;
        rb_device_kind kind;
    } kinds[] = {{"cpu", RB_DEVICE_CPU}, {"cuda", RB_DEVICE_CUDA}, {"rocm", RB_DEVICE_ROCM}, {"hip", RB_DEVICE_ROCM}};
    if (!spec) return rb_error_set(err, RB_E_INVALID, "backend spec is NULL");
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strlen(kinds[i].name) != len || strncmp(spec, kinds[i].name, len) != 0) continue;
        *kind = kinds[i].kind;
        *index = 0;
        if (!colon) return RB_OK;
        const char *num = colon + 1;
        if (*num < '0' || *num > '9')
            return rb_error_set(err, RB_E_INVALID, "bad device index in backend spec '%s' (expected %s:N)", spec,
                                kinds[i].name);
        errno = 0;
        char *end = NULL;
        long v = strtol(num, &end, 10);
        if (errno || *end != '\0' || v < 0 || v > 1024)
            return rb_error_set(err, RB_E_INVALID, "bad device index in backend spec '%s' (expected %s:N)", spec,
                                kinds[i].name);
        if (*kind == RB_DEVICE_CPU && v != 0)
            return rb_error_set(err, RB_E_NOT_FOUND, "no CPU device %ld: the CPU backend has only cpu:0", v);
        *index = (int)v;
        return RB_OK;
    }
    return rb_error_set(err, RB_E_NOT_FOUND, "unknown backend '%s' (expected cpu, cuda[:N] or rocm[:N])", spec);
}

rb_status rb_backend_create(const char *spec, const rb_backend_config *cfg, rb_backend **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "rb_backend_create: out is NULL");
    *out = NULL;
    rb_device_kind kind = RB_DEVICE_CPU;
    int index = 0;
    rb_status s = parse_spec(spec, &kind, &index, err);
    if (s != RB_OK) return s;
    const rb_backend_module *mod = NULL;
    if (kind == RB_DEVICE_CPU) {
        s = rb_cpu_backend_create(cfg, out, err);
    } else {
        char path[4096];
        s = rb_backend_module_load(kind, &mod, path, sizeof path, err);
        if (s == RB_OK) s = mod->create(index, cfg, out, err);
    }
    if (s == RB_OK) {
        (*out)->batch_invariant = cfg && cfg->batch_invariant;
        (*out)->module = mod;
    }
    return s;
}

rb_status rb_backend_module_probe(rb_device_kind kind, char *path, size_t len, rb_error *err) {
    if (!path || len == 0) return rb_error_set(err, RB_E_INVALID, "rb_backend_module_probe: no buffer");
    path[0] = '\0';
    if (kind == RB_DEVICE_CPU) {
        snprintf(path, len, "(built in)");
        return RB_OK;
    }
    const rb_backend_module *mod = NULL;
    return rb_backend_module_load(kind, &mod, path, len, err);
}

rb_status rb_devices_list(rb_device_info *infos, int max, int *n, rb_error *err) {
    if (!n || max < 0 || (max > 0 && !infos))
        return rb_error_set(err, RB_E_INVALID, "rb_devices_list: bad arguments (infos %p, max %d, n %p)",
                            (void *)infos, max, (void *)n);
    int total = 0, got = 0;
    rb_status s = rb_cpu_devices_list(infos, max, &got, err);
    if (s != RB_OK) return s;
    total += got;
    const rb_device_kind gpus[] = {RB_DEVICE_CUDA, RB_DEVICE_ROCM};
    for (size_t i = 0; i < sizeof gpus / sizeof gpus[0]; i++) {
        const rb_backend_module *mod = NULL;
        char path[4096];
        if (rb_backend_module_load(gpus[i], &mod, path, sizeof path, NULL) != RB_OK) continue; /* not here */
        int room = max > total ? max - total : 0;
        got = 0;
        s = mod->list(room ? infos + total : NULL, room, &got, err);
        if (s != RB_OK) return s;
        total += got;
    }
    *n = total;
    return RB_OK;
}

rb_status rb_gpu_backend_tune(rb_backend *be, const rb_gpu_tuning *t) {
    if (!be || !t || !be->module) return RB_E_UNSUPPORTED;
    const rb_backend_module *m = be->module;
    return m->tune ? m->tune(be, t) : RB_E_UNSUPPORTED;
}

rb_status rb_gpu_backend_conv_stats(rb_backend *be, rb_gpu_conv_stats *out) {
    if (!be || !out || !be->module) return RB_E_UNSUPPORTED;
    const rb_backend_module *m = be->module;
    return m->conv_stats ? m->conv_stats(be, out) : RB_E_UNSUPPORTED;
}

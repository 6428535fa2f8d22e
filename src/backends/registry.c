/* Backend registry: turns a spec string ("cpu", "cuda:1", "rocm") into a
 * backend of a kind compiled into this binary, lists the compiled kinds, and
 * enumerates devices of every compiled kind, and passes a test's GPU
 * tuning (backends/gpu/gpu_tuning.h) to the kind it is for (and reads its
 * convolution counters back). RBEE_HAVE_CUDA / RBEE_HAVE_HIP mark the
 * optional GPU kinds. */
#include "backends/gpu/gpu_tuning.h"
#include "core/backend_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#if defined(RBEE_HAVE_CUDA)
rb_status rb_cuda_backend_create(int index, const rb_backend_config *cfg, rb_backend **out, rb_error *err);
rb_status rb_cuda_devices_list(rb_device_info *infos, int max, int *n, rb_error *err);
#define RB_COMPILED_CUDA ",cuda"
#else
#define RB_COMPILED_CUDA ""
#endif
#if defined(RBEE_HAVE_HIP)
rb_status rb_rocm_backend_create(int index, const rb_backend_config *cfg, rb_backend **out, rb_error *err);
rb_status rb_rocm_devices_list(rb_device_info *infos, int max, int *n, rb_error *err);
#define RB_COMPILED_ROCM ",rocm"
#else
#define RB_COMPILED_ROCM ""
#endif

const char *rb_backends_compiled(void) { return "cpu" RB_COMPILED_CUDA RB_COMPILED_ROCM; }

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
    switch (kind) {
    case RB_DEVICE_CPU:
        s = rb_cpu_backend_create(cfg, out, err);
        break;
    case RB_DEVICE_CUDA:
#if defined(RBEE_HAVE_CUDA)
        s = rb_cuda_backend_create(index, cfg, out, err);
        break;
#else
        return rb_error_set(err, RB_E_UNSUPPORTED,
                            "'%s': this binary was built without the CUDA backend (built with: %s)", spec,
                            rb_backends_compiled());
#endif
    case RB_DEVICE_ROCM:
#if defined(RBEE_HAVE_HIP)
        s = rb_rocm_backend_create(index, cfg, out, err);
        break;
#else
        return rb_error_set(err, RB_E_UNSUPPORTED,
                            "'%s': this binary was built without the ROCm backend (built with: %s)", spec,
                            rb_backends_compiled());
#endif
    default:
        (void)index;
        return rb_error_set(err, RB_E_INVALID, "unknown device kind");
    }
    if (s == RB_OK) (*out)->batch_invariant = cfg && cfg->batch_invariant;
    return s;
}

typedef rb_status (*list_fn)(rb_device_info *infos, int max, int *n, rb_error *err);

rb_status rb_devices_list(rb_device_info *infos, int max, int *n, rb_error *err) {
    if (!n || max < 0 || (max > 0 && !infos))
        return rb_error_set(err, RB_E_INVALID, "rb_devices_list: bad arguments (infos %p, max %d, n %p)",
                            (void *)infos, max, (void *)n);
    const list_fn fns[] = {
        rb_cpu_devices_list,
#if defined(RBEE_HAVE_CUDA)
        rb_cuda_devices_list,
#endif
#if defined(RBEE_HAVE_HIP)
        rb_rocm_devices_list,
#endif
    };
    int total = 0;
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        int room = max > total ? max - total : 0, got = 0;
        rb_status s = fns[i](room ? infos + total : NULL, room, &got, err);
        if (s != RB_OK) return s;
        total += got;
    }
    *n = total;
    return RB_OK;
}

rb_status rb_gpu_backend_tune(rb_backend *be, const rb_gpu_tuning *t) {
    if (!be || !t) return RB_E_UNSUPPORTED;
#if defined(RBEE_HAVE_CUDA)
    if (be->kind == RB_DEVICE_CUDA) return rb_cuda_backend_tune(be, t);
#endif
#if defined(RBEE_HAVE_HIP)
    if (be->kind == RB_DEVICE_ROCM) return rb_rocm_backend_tune(be, t);
#endif
    return RB_E_UNSUPPORTED;
}

rb_status rb_gpu_backend_conv_stats(rb_backend *be, rb_gpu_conv_stats *out) {
    if (!be || !out) return RB_E_UNSUPPORTED;
#if defined(RBEE_HAVE_CUDA)
    if (be->kind == RB_DEVICE_CUDA) return rb_cuda_backend_conv_stats(be, out);
#endif
#if defined(RBEE_HAVE_HIP)
    if (be->kind == RB_DEVICE_ROCM) return rb_rocm_backend_conv_stats(be, out);
#endif
    return RB_E_UNSUPPORTED;
}

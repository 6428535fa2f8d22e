/* Helpers shared by the CPU op kernels (see ops_common.h): strided row
 * conversion to and from f32, the size threshold that decides whether an op
 * wakes the thread pool, and per-thread scratch slices. */
#include "backends/cpu/ops_common.h"

#include "backends/cpu/cpu_kernels.h"

/* Below this many scalar operations an op runs on the calling thread alone:
 * waking the workers costs a few microseconds. */
#define RB_CPU_PAR_MIN_WORK 32768

void rb_cpu_row_to_f32(const rb_cpu_backend *cb, rb_dtype t, const char *src, size_t stride, float *dst, int64_t n) {
    if (t == RB_F32 && stride == sizeof(float)) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (t == RB_F16 && stride == 2) {
        cb->kern->f16_to_f32((const rb_f16 *)(const void *)src, dst, n);
    } else if (t == RB_BF16 && stride == 2) {
        cb->kern->bf16_to_f32((const rb_bf16 *)(const void *)src, dst, n);
    } else {
        for (int64_t i = 0; i < n; i++) dst[i] = rb_cpu_load_f(t, src + (size_t)i * stride);
    }
}

void rb_cpu_row_from_f32(const rb_cpu_backend *cb, rb_dtype t, const float *src, char *dst, size_t stride, int64_t n) {
    if (t == RB_F32 && stride == sizeof(float)) {
        memmove(dst, src, (size_t)n * sizeof(float));
    } else if (t == RB_F16 && stride == 2) {
        cb->kern->f32_to_f16(src, (rb_f16 *)(void *)dst, n);
    } else {
        for (int64_t i = 0; i < n; i++) rb_cpu_store_f(t, dst + (size_t)i * stride, src[i]);
    }
}

int rb_cpu_threads_for(const rb_cpu_backend *cb, int64_t work) {
    if (cb->n_threads <= 1 || work < RB_CPU_PAR_MIN_WORK) return 1;
    return cb->n_threads;
}

void rb_cpu_parallel(rb_cpu_backend *cb, int nth, rb_task_fn fn, void *ctx) {
    if (nth <= 1)
        fn(ctx, 0, 1);
    else
        rb_threadpool_run(cb->pool, fn, ctx);
}

void *rb_cpu_scratch_threads(rb_cpu_backend *cb, int nth, size_t per_thread, size_t *stride) {
    size_t s = (per_thread + 63) & ~(size_t)63;
    if (s < per_thread || (nth > 0 && s > SIZE_MAX / (size_t)nth)) {
        rb_backend_fail(&cb->base, RB_E_NOMEM, "scratch request overflows (%zu bytes x %d threads)", per_thread, nth);
        return NULL;
    }
    void *p = rb_cpu_scratch(cb, s * (size_t)(nth > 0 ? nth : 1));
    if (!p) {
        rb_backend_fail(&cb->base, RB_E_NOMEM, "out of memory for %zu bytes of scratch", s * (size_t)nth);
        return NULL;
    }
    *stride = s;
    return p;
}

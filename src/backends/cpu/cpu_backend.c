/* The CPU backend object: creation (thread pool, ISA and kernel table),
 * device description from /proc, host buffers (64-byte aligned; from_host
 * wraps caller memory without copying), scratch memory, and the vtable that
 * wires the op kernels of ops_*.c and matmul.c. */
#include "backends/cpu/cpu_internal.h"

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/ops_common.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RB_CPU_ALIGN 64

static int cores_available(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    return 1;
}

/* "model name" from /proc/cpuinfo, or a generic name. */
static void cpu_model_name(char *out, size_t len) {
    snprintf(out, len, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t n = strcspn(v, "\n");
        if (n >= len) n = len - 1;
        memcpy(out, v, n);
        out[n] = '\0';
        break;
    }
    fclose(f);
}

/* MemTotal / MemAvailable from /proc/meminfo, in bytes (0 if unknown). */
static void mem_info(size_t *total, size_t *avail) {
    *total = 0;
    *avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total = (size_t)kb * 1024u;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = (size_t)kb * 1024u;
    }
    fclose(f);
}

/* Space-separated ISA extensions the running CPU supports. */
static void cpu_features(char *out, size_t len) {
    out[0] = '\0';
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    static const char *const names[] = {"sse3",    "ssse3",    "sse4.2",   "avx",      "avx2",       "fma",
                                        "avx512f", "avx512bw", "avx512vl", "avx512vnni"};
    const int has[] = {__builtin_cpu_supports("sse3"),    __builtin_cpu_supports("ssse3"),
                       __builtin_cpu_supports("sse4.2"),  __builtin_cpu_supports("avx"),
                       __builtin_cpu_supports("avx2"),    __builtin_cpu_supports("fma"),
                       __builtin_cpu_supports("avx512f"), __builtin_cpu_supports("avx512bw"),
                       __builtin_cpu_supports("avx512vl"), __builtin_cpu_supports("avx512vnni")};
    size_t used = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!has[i]) continue;
        int w = snprintf(out + used, len - used, "%s%s", used ? " " : "", names[i]);
        if (w < 0 || (size_t)w >= len - used) break;
        used += (size_t)w;
    }
#else
    snprintf(out, len, "generic");
#endif
}

static void fill_info(rb_device_info *info, int n_threads, rb_cpu_isa isa) {
    memset(info, 0, sizeof *info);
    info->kind = RB_DEVICE_CPU;
    info->index = 0;
    char model[96];
    cpu_model_name(model, sizeof model);
    snprintf(info->name, sizeof info->name, "%s (%s)", model, rb_cpu_isa_name(isa));
    cpu_features(info->features, sizeof info->features);
    mem_info(&info->mem_total, &info->mem_free);
    info->compute_units = n_threads;
}

rb_status rb_cpu_devices_list(rb_device_info *infos, int max, int *n, rb_error *err) {
    (void)err;
    if (max >= 1 && infos) fill_info(&infos[0], cores_available(), rb_cpu_isa_detect());
    *n = 1;
    return RB_OK;
}

/* ---- vtable: lifecycle ---- */

static void cpu_destroy(rb_backend *be) {
    rb_cpu_backend *cb = rb_cpu(be);
    rb_threadpool_destroy(cb->pool);
    free(cb->scratch);
    free(cb);
}

static rb_status cpu_device_info(rb_backend *be, rb_device_info *info) {
    rb_cpu_backend *cb = rb_cpu(be);
    fill_info(info, cb->n_threads, cb->isa);
    return RB_OK;
}

static rb_status cpu_sync(rb_backend *be) {
    (void)be; /* ops run synchronously on the CPU */
    return RB_OK;
}

/* ---- vtable: memory ---- */

static rb_status cpu_buffer_alloc(rb_backend *be, rb_buffer *buf, size_t size) {
    size_t rounded = (size + RB_CPU_ALIGN - 1) & ~(size_t)(RB_CPU_ALIGN - 1);
    if (rounded < size) return rb_backend_fail(be, RB_E_NOMEM, "buffer of %zu bytes is too large", size);
    if (rounded == 0) rounded = RB_CPU_ALIGN;
    void *p = aligned_alloc(RB_CPU_ALIGN, rounded);
    if (!p) return rb_backend_fail(be, RB_E_NOMEM, "out of host memory allocating %zu bytes", size);
    buf->host_ptr = p;
    buf->impl = NULL;
    buf->owned = true;
    return RB_OK;
}

static rb_status cpu_buffer_from_host(rb_backend *be, rb_buffer *buf, void *ptr, size_t size) {
    (void)be;
    (void)size;
    buf->host_ptr = ptr;
    buf->impl = NULL;
    buf->owned = false;
    return RB_OK;
}

static void cpu_buffer_free(rb_backend *be, rb_buffer *buf) {
    (void)be;
    if (buf->owned) free(buf->host_ptr);
    buf->host_ptr = NULL;
}

static rb_status cpu_buffer_set(rb_backend *be, rb_buffer *buf, size_t offs, const void *src, size_t n) {
    (void)be;
    memmove((char *)buf->host_ptr + offs, src, n);
    return RB_OK;
}

static rb_status cpu_buffer_get(rb_backend *be, const rb_buffer *buf, size_t offs, void *dst, size_t n) {
    (void)be;
    memmove(dst, (const char *)buf->host_ptr + offs, n);
    return RB_OK;
}

static rb_status cpu_buffer_copy(rb_backend *be, rb_buffer *dst, size_t dst_offs, const rb_buffer *src,
                                 size_t src_offs, size_t n) {
    (void)be;
    memmove((char *)dst->host_ptr + dst_offs, (const char *)src->host_ptr + src_offs, n);
    return RB_OK;
}

void *rb_cpu_scratch(rb_cpu_backend *cb, size_t bytes) {
    if (bytes <= cb->scratch_cap && cb->scratch) return cb->scratch;
    size_t cap = cb->scratch_cap ? cb->scratch_cap : 4096;
    while (cap < bytes) {
        if (cap > SIZE_MAX / 2) return NULL;
        cap *= 2;
    }
    void *p = aligned_alloc(RB_CPU_ALIGN, cap);
    if (!p) return NULL;
    free(cb->scratch);
    cb->scratch = p;
    cb->scratch_cap = cap;
    return p;
}

static const rb_backend_vtable k_cpu_vtable = {
    .destroy = cpu_destroy,
    .device_info = cpu_device_info,
    .sync = cpu_sync,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_from_host = cpu_buffer_from_host,
    .buffer_wrap_host = cpu_buffer_from_host, /* plain memory: wrapped in place either way */
    .matmul_id = rb_cpu_matmul_id,
    .swiglu_clamp = rb_cpu_swiglu_clamp,
    .buffer_free = cpu_buffer_free,
    .buffer_set = cpu_buffer_set,
    .buffer_get = cpu_buffer_get,
    .buffer_copy = cpu_buffer_copy,
    .fill = rb_cpu_fill,
    .affine = rb_cpu_affine,
    .unary = rb_cpu_unary,
    .binary = rb_cpu_binary,
    .where = rb_cpu_where,
    .glu = rb_cpu_glu,
    .cast = rb_cpu_cast,
    .reduce = rb_cpu_reduce,
    .softmax = rb_cpu_softmax,
    .rms_norm = rb_cpu_rms_norm,
    .add_rms_norm = rb_cpu_add_rms_norm,
    .layer_norm = rb_cpu_layer_norm,
    .group_norm = rb_cpu_group_norm,
    .get_rows = rb_cpu_get_rows,
    .index_select = rb_cpu_index_select,
    .set_rows = rb_cpu_set_rows,
    .argsort = rb_cpu_argsort,
    .topk = rb_cpu_topk,
    .matmul = rb_cpu_matmul,
    .rope = rb_cpu_rope,
    .attention = rb_cpu_attention,
    .conv1d = rb_cpu_conv1d,
    .conv2d = rb_cpu_conv2d,
    .upsample = rb_cpu_upsample,
    .group_norm_act = rb_cpu_group_norm_act,
    .layer_norm_mod = rb_cpu_layer_norm_mod,
    .linear = rb_cpu_linear,
};

rb_status rb_cpu_backend_create(const rb_backend_config *cfg, rb_backend **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "rb_cpu_backend_create: out is NULL");
    *out = NULL;
    int n_threads = cfg && cfg->n_threads > 0 ? cfg->n_threads : cores_available();
    if (n_threads > 1024)
        return rb_error_set(err, RB_E_INVALID, "n_threads %d is too large (at most 1024)", n_threads);
    rb_cpu_isa isa;
    const char *isa_s = cfg ? cfg->cpu_isa : NULL;
    if (!rb_cpu_isa_parse(isa_s, &isa))
        return rb_error_set(err, RB_E_UNSUPPORTED,
                            "cpu_isa '%s' is unknown or not supported here (choose auto, scalar, avx2 or avx512; "
                            "best on this CPU: %s)",
                            isa_s ? isa_s : "(null)", rb_cpu_isa_name(rb_cpu_isa_detect()));
    rb_cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return rb_error_set(err, RB_E_NOMEM, "out of memory creating the CPU backend");
    cb->base.vt = &k_cpu_vtable;
    cb->base.kind = RB_DEVICE_CPU;
    cb->base.index = 0;
    snprintf(cb->base.name, sizeof cb->base.name, "cpu");
    cb->n_threads = n_threads;
    cb->isa = isa;
    cb->kern = rb_cpu_kernels_get(isa);
    cb->llamacpp_numerics = cfg && cfg->llamacpp_numerics;
    cb->batch_invariant = cfg && cfg->batch_invariant;
    cb->base.row_exact = cb->batch_invariant;
    rb_status s = rb_threadpool_create(n_threads, &cb->pool);
    if (s != RB_OK) {
        free(cb);
        return rb_error_set(err, s, "cannot start %d CPU threads", n_threads);
    }
    *out = &cb->base;
    return RB_OK;
}

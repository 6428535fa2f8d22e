/* Tests of the backend registry, the CPU backend object (device info, ISA
 * selection, buffers, host memory, tensors) and the thread pool. */
#include "ref_ops.h"

#include "backends/cpu/cpu_internal.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void test_specs(void **state) {
    (void)state;
    rb_backend *be = NULL;
    rb_error err;
    /* "cpu" first, then the GPU kinds this build has (CI's test build: none) */
    const char *compiled = rb_backends_compiled();
    assert_memory_equal(compiled, "cpu", 3);
    const bool has_cuda = strstr(compiled, "cuda") != NULL, has_rocm = strstr(compiled, "rocm") != NULL;
    if (!has_cuda && !has_rocm) assert_string_equal(compiled, "cpu");
    TU_OK(rb_backend_create("cpu", NULL, &be, &err));
    assert_string_equal(rb_backend_name(be), "cpu");
    assert_int_equal(rb_backend_kind(be), RB_DEVICE_CPU);
    assert_string_equal(rb_backend_last_error(be), "");
    TU_OK(rb_backend_sync(be));
    rb_backend_destroy(be);
    TU_OK(rb_backend_create("cpu:0", NULL, &be, &err));
    rb_backend_destroy(be);

    if (!has_cuda) {
        be = (rb_backend *)1;
        assert_int_equal(rb_backend_create("cuda:0", NULL, &be, &err), RB_E_UNSUPPORTED);
        assert_null(be);
        assert_non_null(strstr(err.msg, "the CUDA backend is not installed: no librbee-cuda.so in "));
        assert_int_equal(rb_backend_create("cuda", NULL, &be, &err), RB_E_UNSUPPORTED);
    }
    if (!has_rocm) {
        assert_int_equal(rb_backend_create("rocm:1", NULL, &be, &err), RB_E_UNSUPPORTED);
        assert_non_null(strstr(err.msg, "the ROCm backend is not installed: no librbee-rocm.so in "));
    }
    assert_int_equal(rb_backend_create("vulkan", NULL, &be, &err), RB_E_NOT_FOUND);
    assert_non_null(strstr(err.msg, "vulkan"));
    assert_int_equal(rb_backend_create("cpux", NULL, &be, &err), RB_E_NOT_FOUND);
    assert_int_equal(rb_backend_create("", NULL, &be, &err), RB_E_NOT_FOUND);
    assert_int_equal(rb_backend_create("cuda:x", NULL, &be, &err), RB_E_INVALID);
    assert_int_equal(rb_backend_create("cuda:1junk", NULL, &be, &err), RB_E_INVALID);
    assert_int_equal(rb_backend_create("cuda:-1", NULL, &be, &err), RB_E_INVALID);
    assert_int_equal(rb_backend_create("cpu:1", NULL, &be, &err), RB_E_NOT_FOUND);
    assert_int_equal(rb_backend_create(NULL, NULL, &be, &err), RB_E_INVALID);
    assert_int_equal(rb_backend_create("cpu", NULL, NULL, &err), RB_E_INVALID);
    assert_null(be);
}

static void test_isa_and_threads(void **state) {
    (void)state;
    rb_backend *be = NULL;
    rb_error err;
    rb_backend_config cfg = {.n_threads = 3, .cpu_isa = "scalar"};
    TU_OK(rb_backend_create("cpu", &cfg, &be, &err));
    assert_int_equal(rb_cpu(be)->isa, RB_CPU_ISA_SCALAR);
    assert_int_equal(rb_threadpool_size(rb_cpu(be)->pool), 3);
    rb_device_info info;
    TU_OK(rb_backend_device_info(be, &info));
    assert_int_equal(info.compute_units, 3);
    assert_non_null(strstr(info.name, "(scalar)"));
    rb_backend_destroy(be);

    cfg.cpu_isa = "sse9";
    assert_int_equal(rb_backend_create("cpu", &cfg, &be, &err), RB_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "sse9"));

    cfg = (rb_backend_config){0};
    TU_OK(rb_backend_create("cpu", &cfg, &be, &err));
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    assert_int_equal(rb_cpu(be)->n_threads, CPU_COUNT(&set));
    assert_int_equal(rb_cpu(be)->isa, rb_cpu_isa_detect());
    rb_backend_destroy(be);
}

static void test_devices(void **state) {
    (void)state;
    rb_device_info infos[4];
    int n = -1;
    rb_error err;
    TU_OK(rb_devices_list(infos, 4, &n, &err));
    assert_int_equal(n, 1);
    assert_int_equal(infos[0].kind, RB_DEVICE_CPU);
    assert_true(strlen(infos[0].name) > 3);
    assert_true(infos[0].mem_total > ((size_t)64 << 20));
    assert_true(infos[0].mem_free > 0 && infos[0].mem_free <= infos[0].mem_total);
    assert_true(infos[0].compute_units >= 1);
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) assert_non_null(strstr(infos[0].features, "avx2"));
#endif
    n = -1; /* counting only */
    TU_OK(rb_devices_list(NULL, 0, &n, &err));
    assert_int_equal(n, 1);
    assert_int_equal(rb_devices_list(NULL, 2, &n, &err), RB_E_INVALID);
}

static void test_buffers(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[0]);
    rb_buffer *b = NULL;
    TU_OK(rb_buffer_alloc(be, 1000, &b));
    assert_int_equal(rb_buffer_size(b), 1000);
    assert_ptr_equal(rb_buffer_backend(b), be);
    assert_non_null(rb_buffer_host_ptr(b));
    assert_int_equal((uintptr_t)rb_buffer_host_ptr(b) % 64, 0);
    unsigned char src[1000], dst[1000];
    for (int i = 0; i < 1000; i++) src[i] = (unsigned char)(i * 7 + 3);
    TU_OK(rb_buffer_set(b, 0, src, 1000));
    TU_OK(rb_buffer_get(b, 10, dst, 990));
    assert_memory_equal(dst, src + 10, 990);
    assert_int_equal(rb_buffer_set(b, 999, src, 2), RB_E_RANGE);
    assert_non_null(strstr(rb_backend_last_error(be), "outside buffer"));
    assert_int_equal(rb_buffer_get(b, SIZE_MAX, dst, 2), RB_E_RANGE);
    assert_int_equal(rb_buffer_set(b, 0, NULL, 4), RB_E_INVALID);

    /* from_host wraps without copying */
    float host[37];
    for (int i = 0; i < 37; i++) host[i] = (float)i * 0.5f;
    rb_buffer *w = NULL;
    TU_OK(rb_buffer_from_host(be, host, sizeof host, &w));
    assert_ptr_equal(rb_buffer_host_ptr(w), host);
    TU_OK(rb_buffer_copy(b, 4, w, 8, 100));
    TU_OK(rb_buffer_get(b, 4, dst, 100));
    assert_memory_equal(dst, (char *)host + 8, 100);
    assert_int_equal(rb_buffer_copy(w, 100, b, 0, 100), RB_E_RANGE);
    rb_buffer_free(w);
    assert_float_equal(host[36], 18.0f, 0); /* caller memory untouched by free */

    /* copy between two backends goes through host memory */
    rb_backend *be2 = tf_backend(&tf_cfgs[1]);
    rb_buffer *b2 = NULL;
    TU_OK(rb_buffer_alloc(be2, 64, &b2));
    TU_OK(rb_buffer_copy(b2, 0, b, 0, 64));
    TU_OK(rb_buffer_get(b2, 0, dst, 64));
    TU_OK(rb_buffer_get(b, 0, src, 64));
    assert_memory_equal(dst, src, 64);
    rb_buffer_free(b2);
    rb_backend_destroy(be2);

    /* host memory for per-step copies: plain aligned memory on the CPU,
     * NULL (not a crash) for sizes that cannot be allocated */
    unsigned char *hm = rb_backend_host_alloc(be, 1000);
    assert_non_null(hm);
    assert_int_equal((uintptr_t)hm % 64, 0);
    TU_OK(rb_buffer_get(b, 0, hm, 1000));
    TU_OK(rb_buffer_get(b, 0, dst, 1000));
    assert_memory_equal(hm, dst, 1000);
    /* a queued copy from it: on the CPU it runs at once */
    for (int i = 0; i < 1000; i++) hm[i] = (unsigned char)(i * 7 + 3);
    TU_OK(rb_buffer_set_queued(b, 24, hm + 10, 500));
    TU_OK(rb_buffer_get(b, 24, dst, 500));
    assert_memory_equal(dst, hm + 10, 500);
    assert_int_equal(rb_buffer_set_queued(b, 1000, hm, 1000), RB_E_RANGE);
    assert_int_equal(rb_buffer_set_queued(b, 0, NULL, 4), RB_E_INVALID);
    TU_OK(rb_buffer_set_queued(b, 0, NULL, 0));
    assert_int_equal(rb_buffer_set_queued(NULL, 0, hm, 4), RB_E_INVALID);
    rb_buffer *wb = NULL; /* wrapped in place: ops write the caller's memory */
    TU_OK(rb_buffer_wrap_host(be, hm + 64, 256, &wb));
    TU_OK(rb_buffer_copy(wb, 0, b, 24, 256));
    assert_memory_equal(hm + 64, dst, 256);
    rb_buffer_free(wb);
    assert_int_equal(rb_buffer_wrap_host(be, NULL, 4, &wb), RB_E_INVALID);
    assert_int_equal(rb_buffer_wrap_host(be, hm, 4, NULL), RB_E_INVALID);
    rb_buffer *cb = NULL;
    TU_OK(rb_buffer_alloc(be, 64, &cb));
    TU_OK(rb_buffer_set_constant(cb));
    assert_int_equal(rb_buffer_set_queued(cb, 0, hm, 4), RB_E_INVALID); /* weights stay as uploaded */
    rb_buffer_free(cb);
    rb_backend_host_free(be, hm);
    unsigned char *one = rb_backend_host_alloc(be, 0); /* an empty request still gives a freeable block */
    assert_non_null(one);
    rb_backend_host_free(be, one);
    assert_null(rb_backend_host_alloc(be, SIZE_MAX));
    assert_null(rb_backend_host_alloc(be, SIZE_MAX - 100));
    assert_null(rb_backend_host_alloc(NULL, 64));
    rb_backend_host_free(be, NULL);

    rb_buffer_free(b);
    rb_buffer_free(NULL);
    rb_backend_destroy(be);
}

static void test_tensors(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[1]);
    rb_tensor t;
    const int64_t ne[3] = {7, 13, 3};
    TU_OK(rb_tensor_alloc(be, RB_F16, 3, ne, &t));
    assert_int_equal(rb_buffer_size(t.buf), 7 * 13 * 3 * 2);
    rb_f16 in[273], out[273];
    for (int i = 0; i < 273; i++) in[i] = rb_f32_to_f16((float)i - 100.25f);
    TU_OK(rb_tensor_set(&t, in, sizeof in));
    TU_OK(rb_tensor_get(&t, out, sizeof out));
    assert_memory_equal(in, out, sizeof in);
    assert_int_equal(rb_tensor_set(&t, in, sizeof in - 2), RB_E_INVALID);
    assert_non_null(strstr(rb_backend_last_error(be), "holds 546"));
    rb_tensor tr;
    TU_OK(rb_tensor_transpose(&t, &tr));
    assert_int_equal(rb_tensor_get(&tr, out, sizeof out), RB_E_INVALID); /* not contiguous */
    rb_tensor sl = t;
    sl.offs = 2; /* pushed past the end of its buffer */
    assert_int_equal(rb_tensor_get(&sl, out, sizeof out), RB_E_RANGE);
    const int64_t bad[2] = {31, 2};
    assert_int_equal(rb_tensor_alloc(be, RB_Q4_0, 2, bad, &sl), RB_E_INVALID);
    rb_tensor_free(&t);
    assert_null(t.buf);
    rb_backend_destroy(be);
}

/* The pool runs every index exactly once per run, many runs in a row. */
typedef struct pool_ctx {
    atomic_int hits[8];
    atomic_long sum;
} pool_ctx;

static void pool_fn(void *p, int ith, int nth) {
    pool_ctx *c = p;
    atomic_fetch_add(&c->hits[ith], 1);
    atomic_fetch_add(&c->sum, (long)(ith + 1) * nth);
}

static void test_threadpool(void **state) {
    (void)state;
    for (int n = 1; n <= 5; n += 2) {
        rb_threadpool *tp = NULL;
        TU_OK(rb_threadpool_create(n, &tp));
        assert_int_equal(rb_threadpool_size(tp), n);
        pool_ctx c;
        memset(&c, 0, sizeof c);
        const int runs = 3000;
        for (int r = 0; r < runs; r++) {
            rb_threadpool_run(tp, pool_fn, &c);
            if (r == 1000) {
                struct timespec ts = {0, 2000000}; /* let workers fall asleep once */
                nanosleep(&ts, NULL);
            }
        }
        for (int i = 0; i < n; i++) assert_int_equal(atomic_load(&c.hits[i]), runs);
        for (int i = n; i < 8; i++) assert_int_equal(atomic_load(&c.hits[i]), 0);
        assert_int_equal(atomic_load(&c.sum), (long)runs * n * (n * (n + 1) / 2));
        rb_threadpool_destroy(tp);
    }
    rb_threadpool *tp = NULL;
    assert_int_equal(rb_threadpool_create(0, &tp), RB_E_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_specs),   cmocka_unit_test(test_isa_and_threads), cmocka_unit_test(test_devices),
        cmocka_unit_test(test_buffers), cmocka_unit_test(test_tensors),         cmocka_unit_test(test_threadpool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

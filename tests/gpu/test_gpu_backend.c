/* GPU backend object: device listing (real memory figures), creation errors,
 * buffer upload/download/copy exactness for small and staged (> 16 MiB)
 * transfers (also into and from rb_backend_host_alloc's page-locked
 * memory: read-backs of whole 16-byte units there by a kernel, nothing
 * outside them written; queued uploads read when they run; that memory
 * wrapped as a buffer written in place, memory past the block or plain
 * memory refused), rb_buffer_from_host, an out-of-memory allocation that fails with
 * RB_E_NOMEM and a message while the backend keeps working, ops without
 * a GPU kernel refusing with RB_E_UNSUPPORTED, the tests' GPU tuning (taken
 * by a GPU backend, refused by the CPU backend), and the RBEE_GPU_TRACE
 * diagnostic (gpu_trace.h) writing every block's readings in order. Skips
 * without a GPU. */
#include "gpu_pair.h"

#include "backends/gpu/gpu_tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_devices(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_device_info infos[16];
    int n = 0;
    TU_OK(rb_devices_list(infos, 16, &n, NULL));
    int gpus = 0;
    for (int i = 0; i < n && i < 16; i++) {
        print_message("device %d: kind %d index %d '%s' [%s] %.1f/%.1f GiB free, %d units\n", i, (int)infos[i].kind,
                      infos[i].index, infos[i].name, infos[i].features, (double)infos[i].mem_free / (1 << 30),
                      (double)infos[i].mem_total / (1 << 30), infos[i].compute_units);
        if (infos[i].kind == rb_backend_kind(g)) {
            gpus++;
            assert_true(infos[i].mem_total > ((size_t)1 << 30));
            assert_true(infos[i].mem_free > 0 && infos[i].mem_free <= infos[i].mem_total);
            assert_true(infos[i].compute_units > 0);
            assert_true(strlen(infos[i].name) > 0);
        }
    }
    assert_true(gpus >= 1);
    rb_device_info di;
    TU_OK(rb_backend_device_info(g, &di));
    assert_int_equal(di.kind, rb_backend_kind(g));
    assert_true(strstr(rb_backends_compiled(), rb_backend_kind(g) == RB_DEVICE_CUDA ? "cuda" : "rocm") != NULL);
    /* a device index that does not exist */
    rb_backend *none = NULL;
    rb_error err;
    rb_error_clear(&err);
    const char *bad = rb_backend_kind(g) == RB_DEVICE_CUDA ? "cuda:999" : "rocm:999";
    assert_int_equal(rb_backend_create(bad, NULL, &none, &err), RB_E_NOT_FOUND);
    assert_null(none);
    assert_true(strlen(err.msg) > 0);
    rb_backend_destroy(g);
}

static void test_buffers(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    tu_rng rng;
    tu_rng_seed(&rng, 77);
    const size_t sizes[] = {1, 13, 4097, ((size_t)40 << 20) + 12345};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const size_t n = sizes[si];
        unsigned char *src = malloc(n), *back = malloc(n);
        assert_non_null(src);
        assert_non_null(back);
        for (size_t i = 0; i < n; i++) src[i] = (unsigned char)tu_rng_u64(&rng);
        rb_buffer *a = NULL, *b = NULL, *h = NULL;
        TU_OK(rb_buffer_alloc(g, n + 7, &a));
        TU_OK(rb_buffer_alloc(g, n + 3, &b));
        assert_null(rb_buffer_host_ptr(a));
        TU_OK(rb_buffer_set(a, 5, src, n));
        memset(back, 0, n);
        TU_OK(rb_buffer_get(a, 5, back, n));
        assert_memory_equal(src, back, n);
        TU_OK(rb_buffer_copy(b, 2, a, 5, n));
        memset(back, 0, n);
        TU_OK(rb_buffer_get(b, 2, back, n));
        assert_memory_equal(src, back, n);
        TU_OK(rb_buffer_from_host(g, src, n, &h));
        memset(src, 0xAB, n); /* the device copy must not depend on the host memory any more */
        memset(back, 0, n);
        TU_OK(rb_buffer_get(h, 0, back, n));
        TU_OK(rb_buffer_get(b, 2, src, n));
        assert_memory_equal(src, back, n);
        assert_int_equal(rb_buffer_get(a, n, back, 8), RB_E_RANGE);
        /* through the backend's page-locked host memory (rb_backend_host_alloc):
         * the same bytes both ways, at any offset */
        unsigned char *pin = rb_backend_host_alloc(g, n + 64);
        assert_non_null(pin);
        assert_int_equal((uintptr_t)pin % 64, 0);
        memset(pin, 0, n + 64);
        TU_OK(rb_buffer_get(b, 2, pin + 3, n));
        assert_memory_equal(pin + 3, back, n);
        for (size_t i = 0; i < n; i++) pin[i + 3] ^= 0x5A;
        TU_OK(rb_buffer_set(a, 1, pin + 3, n));
        memset(pin, 0, n + 64);
        TU_OK(rb_buffer_get(a, 1, pin, n));
        for (size_t i = 0; i < n; i++)
            if (pin[i] != (unsigned char)(back[i] ^ 0x5A)) fail_msg("host_alloc round trip: byte %zu of %zu", i, n);
        /* whole 16-byte units into 16-byte aligned page-locked memory: a
         * kernel writes it (not the copy engine); the same bytes */
        const size_t n16 = n & ~(size_t)15;
        for (size_t at = 0; n16 && at <= 48; at += 48) {
            memset(pin, 0xEE, n + 64);
            TU_OK(rb_buffer_get(b, 2, pin + at, n16));
            assert_memory_equal(pin + at, back, n16);
            for (size_t i = 0; i < at; i++) assert_int_equal(pin[i], 0xEE); /* nothing outside it written */
            for (size_t i = at + n16; i < n + 64; i++) assert_int_equal(pin[i], 0xEE);
        }
        /* queued uploads: from page-locked memory (a kernel reads it when it
         * runs; by DMA where not 4-byte aligned) and from plain memory (at once) */
        for (size_t i = 0; i < n + 64; i++) pin[i] = (unsigned char)(i * 13 + 1);
        for (size_t at = 0; at < 8; at += 3) { /* 0: kernel; 3, 6: DMA */
            TU_OK(rb_buffer_set_queued(a, 4, pin + at, n));
            memset(back, 0, n);
            TU_OK(rb_buffer_get(a, 4, back, n));
            assert_memory_equal(back, pin + at, n);
        }
        for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 5 + 2);
        /* page-locked memory wrapped as a buffer: copies and ops write it in place */
        rb_buffer *wb = NULL;
        TU_OK(rb_buffer_wrap_host(g, pin + 8, n, &wb));
        assert_int_equal(rb_buffer_size(wb), n);
        TU_OK(rb_buffer_copy(wb, 0, b, 2, n));
        TU_OK(rb_buffer_get(b, 2, back, n)); /* (synchronizes) */
        assert_memory_equal(pin + 8, back, n);
        memset(back, 0, n);
        TU_OK(rb_buffer_get(wb, 0, back, n)); /* and read through it */
        assert_memory_equal(back, pin + 8, n);
        rb_buffer_free(wb);
        assert_int_equal(rb_buffer_wrap_host(g, pin + 8, n + 1024, &wb), RB_E_UNSUPPORTED); /* past the block */
        assert_null(wb);
        assert_int_equal(rb_buffer_wrap_host(g, src, n, &wb), RB_E_UNSUPPORTED); /* plain memory */
        assert_int_equal(rb_buffer_wrap_host(g, NULL, n, &wb), RB_E_INVALID);
        TU_OK(rb_buffer_set_queued(a, 0, src, n));
        memset(src, 0x11, n); /* plain memory was copied at the call */
        TU_OK(rb_buffer_get(a, 0, back, n));
        for (size_t i = 0; i < n; i++)
            if (back[i] != (unsigned char)(i * 5 + 2)) fail_msg("queued upload from plain memory: byte %zu", i);
        rb_backend_host_free(g, pin);
        rb_buffer_free(a);
        rb_buffer_free(b);
        rb_buffer_free(h);
        free(src);
        free(back);
    }
    rb_backend_destroy(g);
}

static void test_out_of_memory(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_buffer *huge = NULL;
    rb_status s = rb_buffer_alloc(g, (size_t)1 << 50, &huge); /* 1 PiB */
    assert_int_equal(s, RB_E_NOMEM);
    assert_null(huge);
    print_message("OOM message: %s\n", rb_backend_last_error(g));
    assert_non_null(strstr(rb_backend_last_error(g), "out of device memory"));
    /* still serving: a small op works afterwards */
    const int64_t ne[4] = {37, 5, 1, 1};
    rb_tensor t;
    TU_OK(rb_tensor_alloc(g, RB_F32, 2, ne, &t));
    TU_OK(rb_fill(g, &t, 2.5f));
    float v[185];
    TU_OK(rb_tensor_get(&t, v, sizeof v));
    for (int i = 0; i < 185; i++) assert_true(v[i] == 2.5f);
    rb_tensor_free(&t);
    rb_backend_destroy(g);
}

/* The tests' GPU tuning (gpu_tuning.h) is refused for the CPU backend and
 * NULL arguments, taken by a GPU backend. */
static void test_tuning(void **state) {
    (void)state;
    rb_backend *c = gp_cpu();
    const rb_gpu_tuning t = {.tiled_gemm = true};
    assert_int_equal(rb_gpu_backend_tune(c, &t), RB_E_UNSUPPORTED);
    assert_int_equal(rb_gpu_backend_tune(NULL, &t), RB_E_UNSUPPORTED);
    assert_int_equal(rb_gpu_backend_tune(c, NULL), RB_E_UNSUPPORTED);
    rb_backend_destroy(c);
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    assert_int_equal(rb_gpu_backend_tune(g, &t), RB_OK);
    const rb_gpu_tuning dflt = {0};
    assert_int_equal(rb_gpu_backend_tune(g, &dflt), RB_OK);
    rb_backend_destroy(g);
}

static void test_unsupported(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    /* an op without a GPU kernel (index_select: the models gather with get_rows) */
    const int64_t ne[4] = {64, 3, 1, 1}, ine[4] = {2, 1, 1, 1}, sne[4] = {64, 2, 1, 1};
    rb_tensor src, idx, sel, w, d;
    TU_OK(rb_tensor_alloc(g, RB_F32, 2, ne, &src));
    TU_OK(rb_tensor_alloc(g, RB_I32, 1, ine, &idx));
    TU_OK(rb_tensor_alloc(g, RB_F32, 2, sne, &sel));
    TU_OK(rb_fill(g, &src, 1.0f));
    assert_int_equal(rb_index_select(g, &sel, &src, &idx, 1), RB_E_UNSUPPORTED);
    assert_true(strlen(rb_backend_last_error(g)) > 0);
    /* a weight format without a GPU kernel: refused, never a wrong result */
    const int64_t wne[4] = {256, 4, 1, 1}, dne[4] = {4, 3, 1, 1};
    TU_OK(rb_tensor_alloc(g, RB_Q2_K, 2, wne, &w));
    const int64_t bne[4] = {256, 3, 1, 1};
    rb_tensor b;
    TU_OK(rb_tensor_alloc(g, RB_F32, 2, bne, &b));
    TU_OK(rb_fill(g, &b, 0.5f));
    TU_OK(rb_tensor_alloc(g, RB_F32, 2, dne, &d));
    assert_int_equal(rb_matmul(g, &d, &w, &b), RB_E_UNSUPPORTED);
    print_message("unsupported: %s\n", rb_backend_last_error(g));
    rb_tensor_free(&src);
    rb_tensor_free(&idx);
    rb_tensor_free(&sel);
    rb_tensor_free(&w);
    rb_tensor_free(&b);
    rb_tensor_free(&d);
    rb_backend_destroy(g);
}

/* RBEE_GPU_TRACE: a decode product (q4_0, M = 1: the direct kernel) traced
 * into the file named when the backend is created; destroying the backend
 * writes it: one launch line that says what ran, and a line per block whose
 * readings are all set and in order (start <= past the wait <= activations
 * quantized <= end, within a second), then the block's multiprocessor + 1.
 * Without the variable no file. */
static void test_trace(void **state) {
    (void)state;
    char dir[512], path[600];
    assert_int_equal(tu_tmpdir_make(dir, sizeof dir, "rbee-trace"), 0);
    snprintf(path, sizeof path, "%s/trace.txt", dir);
    assert_int_equal(setenv("RBEE_GPU_TRACE", path, 1), 0);
    rb_backend *g = gp_gpu();
    unsetenv("RBEE_GPU_TRACE");
    if (!g) assert_int_equal(tu_tmpdir_remove(dir), 0);
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 5);
    const int64_t K = 512, N = 384, wne[4] = {K, N, 1, 1}, bne[4] = {K, 1, 1, 1}, dne[4] = {N, 1, 1, 1};
    gp w = gp_make(c, g, &rng, RB_Q4_0, wne, GP_CONTIG, -1.0f, 1.0f);
    gp b = gp_make(c, g, &rng, RB_F32, bne, GP_CONTIG, -1.0f, 1.0f);
    gp d = gp_make(c, g, &rng, RB_F32, dne, GP_CONTIG, 0.0f, 1.0f);
    TU_OK(rb_matmul(g, &d.g, &w.g, &b.g));
    TU_OK(rb_backend_sync(g));
    gp_free(&w);
    gp_free(&b);
    gp_free(&d);
    rb_backend_destroy(g);
    rb_backend_destroy(c);

    size_t size = 0;
    char *text = tu_read_file(path, &size);
    assert_non_null(text);
    unsigned seq = 99, blocks = 0;
    int kind = 0, dt = -1, flags = -1, used = 0;
    long long n = 0, k = 0;
    assert_int_equal(sscanf(text, "launch %u kind %d dt %d flags %d n %lld k %lld blocks %u%n", &seq, &kind, &dt, &flags,
                            &n, &k, &blocks, &used),
                     7);
    assert_int_equal(seq, 0);
    assert_int_equal(kind, 1); /* GPU_TRACE_PRODUCT */
    assert_int_equal(dt, (int)RB_Q4_0);
    assert_int_equal(flags, 0);
    assert_int_equal(n, N);
    assert_int_equal(k, K);
    assert_true(blocks >= 1 && blocks <= 4096);
    const char *q = text + used;
    for (unsigned i = 0; i < blocks; i++) {
        unsigned long long t[7];
        int u = 0;
        assert_int_equal(
            sscanf(q, "%llu %llu %llu %llu %llu %llu %llu%n", &t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &u), 7);
        q += u;
        assert_true(t[0] > 0);
        assert_true(t[0] <= t[1] && t[1] <= t[2] && t[2] <= t[3]);
        assert_true(t[4] == 0);                  /* a staged norm weight: none here */
        assert_true(t[0] <= t[5] && t[5] <= t[1]); /* at the dependency wait */
        assert_true(t[3] - t[0] < 1000000000ull);
        assert_true(t[6] >= 1 && t[6] <= 4096); /* the multiprocessor + 1 (an id below 4096) */
    }
    while (*q == '\n') q++;
    assert_int_equal(*q, '\0'); /* one launch, nothing after its blocks */
    free(text);
    assert_int_equal(unlink(path), 0);

    /* not set: nothing written */
    g = gp_gpu();
    assert_non_null(g);
    rb_backend_destroy(g);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(tu_tmpdir_remove(dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_buffers),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_tuning),
        cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

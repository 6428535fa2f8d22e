/* GPU backends as modules loaded at run time (src/backends/module_load.c),
 * with stand-in modules (fake_backend_module.c) in folders named by
 * RBEE_BACKEND_PATH: a good module is found, creates backends (a refusal
 * keeps its message), lists its device, takes a test's tuning and is
 * reported by rb_backend_module_probe; a module of another build, one that
 * claims another kind and a file that is no shared object are refused with
 * messages that say which and why; with no module anywhere the message
 * names the folders looked in. */
#include "testutil.h"

#include "backends/gpu/gpu_tuning.h"
#include "rbee/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef FAKE_MODULES_DIR
#error "FAKE_MODULES_DIR must be defined"
#endif

static void use_dir(const char *sub) {
    char d[1024];
    snprintf(d, sizeof d, "%s/%s", FAKE_MODULES_DIR, sub);
    assert_int_equal(setenv("RBEE_BACKEND_PATH", d, 1), 0);
}

static void test_good_module(void **state) {
    (void)state;
    use_dir("good");
    rb_error err;
    rb_error_clear(&err);
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cuda:3", NULL, &be, &err));
    assert_string_equal(rb_backend_name(be), "fake:3");
    assert_int_equal(rb_backend_kind(be), RB_DEVICE_CUDA);
    rb_gpu_tuning t = {.tiled_gemm = true};
    TU_OK(rb_gpu_backend_tune(be, &t)); /* through the module's table */
    assert_string_equal(rb_backend_last_error(be), "tuned: tiled_gemm=1");
    rb_gpu_conv_stats cs;
    assert_int_equal(rb_gpu_backend_conv_stats(be, &cs), RB_E_UNSUPPORTED); /* the module has none */
    rb_backend_destroy(be);

    assert_int_equal(rb_backend_create("cuda:7", NULL, &be, &err), RB_E_NOT_FOUND);
    assert_string_equal(err.msg, "fake module: no device 7");

    char path[4096];
    TU_OK(rb_backend_module_probe(RB_DEVICE_CUDA, path, sizeof path, &err));
    assert_non_null(strstr(path, "/good/librbee-cuda.so"));
    TU_OK(rb_backend_module_probe(RB_DEVICE_CPU, path, sizeof path, &err));
    assert_string_equal(path, "(built in)");

    rb_device_info infos[8];
    int n = 0;
    TU_OK(rb_devices_list(infos, 8, &n, &err));
    assert_int_equal(n, 2); /* the CPU, then the fake device; no ROCm module there */
    assert_int_equal(infos[0].kind, RB_DEVICE_CPU);
    assert_int_equal(infos[1].kind, RB_DEVICE_CUDA);
    assert_string_equal(infos[1].name, "fake device");
    /* a CPU backend has no module to tune */
    TU_OK(rb_backend_create("cpu", NULL, &be, &err));
    assert_int_equal(rb_gpu_backend_tune(be, &t), RB_E_UNSUPPORTED);
    rb_backend_destroy(be);
}

static void test_refused_modules(void **state) {
    (void)state;
    rb_error err;
    rb_backend *be = (rb_backend *)1;
    use_dir("stale");
    assert_int_equal(rb_backend_create("cuda", NULL, &be, &err), RB_E_FORMAT);
    assert_null(be);
    assert_non_null(strstr(err.msg, "was built for rbee 0.0.0-stale"));
    assert_non_null(strstr(err.msg, "install the module of the same build"));

    use_dir("wrongkind"); /* a ROCm module under the CUDA module's name */
    assert_int_equal(rb_backend_create("cuda", NULL, &be, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "does not provide the CUDA backend"));

    char dir[] = "/tmp/rbee-modules-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char file[1100];
    snprintf(file, sizeof file, "%s/librbee-rocm.so", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("not a shared object\n", f);
    fclose(f);
    assert_int_equal(setenv("RBEE_BACKEND_PATH", dir, 1), 0);
    assert_int_equal(rb_backend_create("rocm:0", NULL, &be, &err), RB_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "the ROCm backend"));
    assert_non_null(strstr(err.msg, "cannot be loaded: "));
    assert_non_null(strstr(err.msg, file));
    char path[4096];
    assert_int_equal(rb_backend_module_probe(RB_DEVICE_ROCM, path, sizeof path, &err), RB_E_UNSUPPORTED);
    int n = 0;
    rb_device_info infos[4];
    TU_OK(rb_devices_list(infos, 4, &n, &err)); /* an unloadable module lists nothing */
    assert_int_equal(n, 1);
    unlink(file);
    rmdir(dir);
}

static void test_no_module(void **state) {
    (void)state;
    use_dir("empty");
    rb_error err;
    rb_backend *be = NULL;
    const bool built = strstr(rb_backends_compiled(), "rocm") != NULL;
    if (built) skip(); /* this build's own module would be found after the empty folder */
    assert_int_equal(rb_backend_create("rocm:1", NULL, &be, &err), RB_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "the ROCm backend is not installed: no librbee-rocm.so in "));
    assert_non_null(strstr(err.msg, FAKE_MODULES_DIR "/empty, "));
    assert_non_null(strstr(err.msg, "RBEE_BACKEND_PATH"));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_good_module), cmocka_unit_test(test_refused_modules),
                                       cmocka_unit_test(test_no_module)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* NCCL loaded at run time (src/backends/nccl.h): a missing library and a
 * library that is not NCCL give errors that say so; where NCCL loads (the
 * CUDA toolkit's copy, or PyTorch's on LD_LIBRARY_PATH) its version is 2.x,
 * and where a CUDA device exists too a communicator over device 0 opens and
 * closes. RBEE_TEST_NCCL=1 requires that
 * NCCL loads (set on the GPU machine); without it a missing NCCL is the
 * expected state (CI, the development machine). */
#include "testutil.h"

#include "backends/nccl.h"
#include "rbee/backend.h"

#include <stdlib.h>
#include <string.h>

static void test_missing(void **state) {
    (void)state;
    rb_nccl n;
    rb_error err;
    assert_int_equal(rb_nccl_open("/nonexistent/libnccl.so.2", &n, &err), RB_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "NCCL"));
    assert_non_null(strstr(err.msg, "/nonexistent/libnccl.so.2"));
    assert_null(n.lib);
    assert_int_equal(rb_nccl_open("libm.so.6", &n, &err), RB_E_FORMAT); /* loads, but is not NCCL */
    assert_non_null(strstr(err.msg, "ncclGetVersion"));
    assert_null(n.lib);
    assert_int_equal(rb_nccl_open(NULL, NULL, &err), RB_E_INVALID);
    rb_nccl_close(NULL);
}

static void test_present(void **state) {
    (void)state;
    const char *want = getenv("RBEE_TEST_NCCL");
    rb_nccl n;
    rb_error err;
    rb_error_clear(&err);
    const rb_status s = rb_nccl_open(NULL, &n, &err);
    if (s != RB_OK) {
        if (want && !strcmp(want, "1")) fail_msg("NCCL expected: %s", err.msg);
        assert_int_equal(s, RB_E_UNSUPPORTED);
        print_message("no NCCL here: %s\n", err.msg);
        return;
    }
    print_message("NCCL %d\n", n.version);
    assert_true(n.version >= 20000);
    rb_backend *be = NULL;
    if (rb_backend_create("cuda:0", NULL, &be, NULL) != RB_OK) {
        print_message("no CUDA device: no communicator\n");
        rb_nccl_close(&n);
        return;
    }
    rb_backend_destroy(be);
    rb_nccl_comm comm = NULL;
    const int dev = 0;
    const rb_nccl_result r = n.comm_init_all(&comm, 1, &dev);
    if (r != 0) fail_msg("ncclCommInitAll on device 0: %s", n.error_string(r));
    assert_non_null(comm);
    assert_int_equal(n.comm_destroy(comm), 0);
    rb_nccl_close(&n);
    assert_null(n.lib);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing),
        cmocka_unit_test(test_present),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

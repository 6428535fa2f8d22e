/* The program test_fixture_skip.sh drives to check tu_fixture's skip rule:
 * one case that needs the fixture tu_fixture_probe/present.txt (and reads
 * "probe" from it), one that needs none (and fails on purpose when
 * TU_PROBE_FAIL=1, to show that a failure is never reported as a skip);
 * with TU_PROBE_PROGRAM=1 the whole program first needs the fixture folder
 * (tu_program_needs_fixture). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static void test_needs_fixture(void **state) {
    (void)state;
    char path[4096];
    size_t n = 0;
    char *text = tu_read_file(tu_fixture(path, sizeof path, "tu_fixture_probe/present.txt"), &n);
    assert_int_equal(n, 6);
    assert_string_equal(text, "probe\n");
    free(text);
}

static void test_plain(void **state) {
    (void)state;
    tu_rng a, b;
    tu_rng_seed(&a, 7);
    tu_rng_seed(&b, 7);
    assert_true(tu_rng_u64(&a) == tu_rng_u64(&b));
    const char *f = getenv("TU_PROBE_FAIL");
    if (f && strcmp(f, "1") == 0) fail_msg("failing on purpose (TU_PROBE_FAIL=1)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_needs_fixture),
        cmocka_unit_test(test_plain),
    };
    const char *prog = getenv("TU_PROBE_PROGRAM");
    if (prog && strcmp(prog, "1") == 0) {
        int rc = tu_program_needs_fixture("tu_fixture_probe");
        if (rc != 0) return rc;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The program test_fixture_skip.sh drives to check tu_fixture's skip rule:
 * one case that needs the fixture tu_fixture_probe/present.txt (and reads
 * "probe" from it), one that needs none (and fails on purpose when
 * TU_PROBE_FAIL=1, to show that a failure is never reported as a skip);
 * with TU_PROBE_GROUP=1 a group setup needs the fixture folder too. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static void test_needs_fixture(void **state) {
    (void)state;
    /* allocated before the fixture is looked up, as many tests do: a skip
     * leaves it unreachable, which must not fail a sanitizer build */
    char *early = malloc(64);
    assert_non_null(early);
    char path[4096];
    size_t n = 0;
    char *text = tu_read_file(tu_fixture(path, sizeof path, "tu_fixture_probe/present.txt"), &n);
    assert_int_equal(n, 6);
    assert_string_equal(text, "probe\n");
    free(text);
    free(early);
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

/* A group setup that allocates, then needs the fixture folder. */
static int group_setup(void **state) {
    *state = malloc(16);
    assert_non_null(*state);
    char path[4096];
    tu_fixture(path, sizeof path, "tu_fixture_probe");
    return 0;
}

static int group_teardown(void **state) {
    free(*state);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_needs_fixture),
        cmocka_unit_test(test_plain),
    };
    const char *group = getenv("TU_PROBE_GROUP");
    if (group && strcmp(group, "1") == 0) return cmocka_run_group_tests(tests, group_setup, group_teardown);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

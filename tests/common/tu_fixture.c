/* tu_fixture and tu_run_group (testutil.h): reference fixtures that may be
 * absent. A clone outside this workplace has no ../shared/fixtures; its
 * tests that need one are skipped with the missing path named, and the
 * rest of each program still runs, while CI (CI=true) keeps every fixture
 * required. The count of fixture skips is the test process's only state
 * here: tu_run_group reads it when the group ends. */
#include "testutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int g_fixture_skips;

static bool under_ci(void) {
    const char *ci = getenv("CI");
    return ci && (strcmp(ci, "true") == 0 || strcmp(ci, "1") == 0);
}

/* Writes the fixture's path into buf; true when it exists. */
static bool fixture_path(char *buf, size_t len, const char *relpath) {
    const char *dir = getenv("RBEE_FIXTURES_DIR");
    if (!dir || !*dir) dir = RBEE_FIXTURES_DIR;
    snprintf(buf, len, "%s/%s", dir, relpath);
    struct stat st;
    return stat(buf, &st) == 0;
}

const char *tu_fixture(char *buf, size_t len, const char *relpath) {
    if (fixture_path(buf, len, relpath)) return buf;
    if (under_ci()) fail_msg("fixture missing: %s (CI=true: every fixture is required)", buf);
    printf("skipped: fixture missing: %s\n", buf);
    fflush(stdout);
    g_fixture_skips++;
    skip();
    return buf; /* not reached: skip() leaves the test case */
}

int tu_program_needs_fixture(const char *relpath) {
    char buf[4096];
    if (fixture_path(buf, sizeof buf, relpath)) return 0;
    if (under_ci()) {
        printf("fixture missing: %s (CI=true: every fixture is required)\n", buf);
        return 1;
    }
    printf("skipped: fixture missing: %s\n", buf);
    return 77;
}

int tu_run_group(const char *name, const struct CMUnitTest *tests, size_t n, CMFixtureFunction setup,
                 CMFixtureFunction teardown) {
    int failed = _cmocka_run_group_tests(name, tests, n, setup, teardown);
    if (failed) return 1;
    return g_fixture_skips > 0 ? 77 : 0;
}

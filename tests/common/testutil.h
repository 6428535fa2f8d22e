/* Shared helpers for the cmocka test programs: a seeded RNG, fixture paths,
 * error norms, and loading whole files. */
#ifndef RBEE_TESTUTIL_H
#define RBEE_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rbee/status.h"

/* xoshiro256** generator; deterministic for a given seed. */
typedef struct tu_rng { uint64_t s[4]; } tu_rng;
void tu_rng_seed(tu_rng *r, uint64_t seed);
uint64_t tu_rng_u64(tu_rng *r);
double tu_rng_uniform(tu_rng *r);                 /* [0, 1) */
float tu_rng_range(tu_rng *r, float lo, float hi); /* [lo, hi) */
float tu_rng_normal(tu_rng *r);                   /* N(0, 1) */
void tu_fill_uniform(tu_rng *r, float *x, size_t n, float lo, float hi);

/* Absolute path of a file or folder under the fixtures folder
 * (RBEE_FIXTURES_DIR, may be overridden by the environment variable of the
 * same name), in a static per-call buffer of the caller: writes into buf
 * and returns it. When it does not exist (a clone without ../shared/fixtures):
 *   - under CI (the environment variable CI is "true" or "1") the test fails:
 *     CI needs every fixture;
 *   - otherwise the calling test case is skipped, printing
 *     "skipped: fixture missing: <path>", and the program exits 77 when no
 *     case failed, which ctest reports as skipped (rb_test sets
 *     SKIP_RETURN_CODE 77): the program's other cases still run. Called
 *     from a group setup, it ends the program there with 77 (no case ran).
 * A skipped case does not return. */
const char *tu_fixture(char *buf, size_t len, const char *relpath);

/* Runs a cmocka group; returns 1 if a case failed, else 0 when no case was
 * skipped for a missing fixture (tu_fixture); else it ends the program
 * with status 77 (skipped) without the exit-time leak check, which would
 * report what the skipped cases had allocated. testutil.h maps
 * cmocka_run_group_tests onto it, so every test program's
 * `return cmocka_run_group_tests(...)` reports fixture skips to ctest. */
int tu_run_group(const char *name, const struct CMUnitTest *tests, size_t n, CMFixtureFunction setup,
                 CMFixtureFunction teardown);
#undef cmocka_run_group_tests
#define cmocka_run_group_tests(group_tests, group_setup, group_teardown)                                               \
    tu_run_group(#group_tests, group_tests, sizeof(group_tests) / sizeof((group_tests)[0]), group_setup, group_teardown)

/* Same for a file under the repository's tests/data folder. */
const char *tu_data(char *buf, size_t len, const char *relpath);

/* Names of the reference model folders under tests/data/models (at most
 * max, each strdup'ed, sorted); returns how many. */
int tu_model_names(char **names, int max);

/* A fresh directory /tmp/<prefix>XXXXXX, its path written to buf (len >= 64);
 * returns 0, or -1 on failure (cmocka group setup style). */
int tu_tmpdir_make(char *buf, size_t len, const char *prefix);
/* Removes dir and everything below it; returns 0, or -1 on failure. */
int tu_tmpdir_remove(const char *dir);

/* Reads a whole file into a malloc'ed buffer, NUL-terminated (one byte past
 * *size); fails the test on error. */
void *tu_read_file(const char *path, size_t *size);

/* ||a - b||_2 / ||b||_2 (b = reference), computed in double. */
double tu_rel_l2(const float *a, const double *ref, size_t n);
double tu_rel_l2_f(const float *a, const float *ref, size_t n);
/* max_i |a - b| / max(|b|, floor) */
double tu_max_rel(const float *a, const double *ref, size_t n, double floor);

/* Asserts a status is RB_OK, printing the error message if not. */
#define TU_OK(expr)                                                                  \
    do {                                                                             \
        rb_status tu_s_ = (expr);                                                    \
        if (tu_s_ != RB_OK) fail_msg("%s -> %s", #expr, rb_status_str(tu_s_));       \
    } while (0)

#endif

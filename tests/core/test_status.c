/* Error reporting: rb_error_set / rb_error_prefix formatting and truncation. */
#include "testutil.h"

#include <string.h>

static void test_set_and_prefix(void **state) {
    (void)state;
    rb_error e;
    rb_error_clear(&e);
    assert_int_equal(rb_error_set(&e, RB_E_FORMAT, "tensor '%s' bad", "w"), RB_E_FORMAT);
    assert_int_equal(e.code, RB_E_FORMAT);
    assert_string_equal(e.msg, "tensor 'w' bad");
    rb_error_prefix(&e, "%s: ", "model.gguf");
    assert_string_equal(e.msg, "model.gguf: tensor 'w' bad");
    assert_int_equal(rb_error_set(NULL, RB_E_IO, "x"), RB_E_IO); /* NULL err allowed */
}

static void test_truncation(void **state) {
    (void)state;
    rb_error e;
    char big[2000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    rb_error_set(&e, RB_E_INVALID, "%s", big);
    assert_int_equal(strlen(e.msg), RB_ERROR_MSG_MAX - 1);
    rb_error_prefix(&e, "p:");
    assert_int_equal(strlen(e.msg), RB_ERROR_MSG_MAX - 1);
    assert_memory_equal(e.msg, "p:aaa", 5);
}

static void test_names(void **state) {
    (void)state;
    for (int s = 0; s < RB_STATUS_COUNT_; s++) assert_string_not_equal(rb_status_str((rb_status)s), "unknown error");
    assert_string_equal(rb_status_str((rb_status)999), "unknown error");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_and_prefix),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

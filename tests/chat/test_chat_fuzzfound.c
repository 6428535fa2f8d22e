/* Regressions found by fuzz_chat_template (tests/fuzz): each hostile
 * template or conversation that broke the interpreter, and the answer it
 * must get now. Memory errors among them show under the ASan/UBSan build. */
#include "chat_testutil.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A number literal of 127 digits and a fraction wrote one byte past the
 * lexer's 128-byte buffer (its '.' was stored without a bound check). It is
 * refused as too long; a float literal of ordinary length still renders. */
static void test_long_float_literal(void **state) {
    (void)state;
    char tpl[256] = "{{ ";
    memset(tpl + 3, '8', 127);
    strcpy(tpl + 130, ".5 }}");
    ct_result r = ct_render(tpl, "{}", NULL);
    assert_int_equal(r.st, RB_E_FORMAT);
    assert_non_null(strstr(r.err.msg, "numeric literal too long"));
    ct_result_free(&r);
    r = ct_render("{{ 12345678901234567.5 }}|{{ 1_000.25 }}", "{}", NULL);
    assert_int_equal(r.st, RB_OK);
    assert_string_equal(r.out, "1.2345678901234568e+16|1000.25");
    ct_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_float_literal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

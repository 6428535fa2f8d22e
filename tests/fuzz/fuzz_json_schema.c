/* libFuzzer target: a JSON schema from a request (response_format,
 * guided_json) through the schema compiler. A schema that compiles must give
 * GBNF text the parser accepts (anything else is a compiler bug and traps);
 * the grammar then runs on a byte matcher over sample JSON documents. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rbee/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = NULL;
    size_t len = 0;
    rb_error err;
    if (rb_json_schema_text_to_gbnf((const char *)data, size, "root", &text, &len, &err) != RB_OK) return 0;
    rb_grammar *g = NULL;
    rb_status st = rb_grammar_parse(text, len, "root", &g, &err);
    free(text);
    if (st == RB_E_NOMEM || st == RB_E_RANGE) return 0;
    /* a schema that refers to itself before any character (`{"$ref":"#"}`) is refused as left recursion */
    if (st == RB_E_INVALID && strstr(err.msg, "left")) return 0;
    if (st != RB_OK) __builtin_trap(); /* the compiler wrote a grammar the parser refuses */
    static const char *const docs[] = {"{}", "[]", "\"\"", "0", "-1.5e3", "true", "null", "{\"a\":[1,\"x\",{\"b\":null}]}",
                                       "\"2024-02-29\"", "[\"a\",\"b\",\"c\",\"d\"]", "{\"foo\":1,\"bar\":\"baz\"}"};
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        rb_grammar_matcher *m = NULL;
        if (rb_grammar_matcher_create(g, NULL, &m, NULL) != RB_OK) break;
        (void)rb_grammar_matcher_accept_bytes(m, docs[i], strlen(docs[i]), NULL);
        (void)rb_grammar_matcher_is_complete(m);
        rb_grammar_matcher_free(m);
    }
    rb_grammar_free(g);
    return 0;
}

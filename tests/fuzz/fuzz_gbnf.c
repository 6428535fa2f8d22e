/* libFuzzer target: GBNF text from a request (llama-server's `grammar`,
 * vLLM's guided_grammar) through the parser; a grammar that compiles is then
 * run on a byte matcher over the input itself and a few fixed strings, so
 * the matcher meets whatever rule shapes the parser lets through. */
#include <stdint.h>
#include <string.h>

#include "rbee/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void feed(const rb_grammar *g, const char *s, size_t n) {
    rb_grammar_matcher *m = NULL;
    if (rb_grammar_matcher_create(g, NULL, &m, NULL) != RB_OK) return;
    for (size_t i = 0; i < n && i < 512; i++)
        if (rb_grammar_matcher_accept_bytes(m, s + i, 1, NULL) != RB_OK) break;
    (void)rb_grammar_matcher_is_complete(m);
    (void)rb_grammar_matcher_is_finished(m);
    rb_grammar_matcher_reset(m);
    (void)rb_grammar_matcher_accept_bytes(m, s, n < 64 ? n : 64, NULL);
    rb_grammar_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rb_grammar *g = NULL;
    rb_error err;
    if (rb_grammar_parse((const char *)data, size, NULL, &g, &err) != RB_OK) {
        if (strnlen(err.msg, sizeof err.msg) == sizeof err.msg) __builtin_trap(); /* unterminated message */
        return 0;
    }
    static const char *const samples[] = {"", "a", "yes", "{\"a\":1}", "0123456789", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
                                          "(((())))", "  \n\t"};
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) feed(g, samples[i], strlen(samples[i]));
    feed(g, (const char *)data, size);
    rb_grammar_free(g);
    return 0;
}

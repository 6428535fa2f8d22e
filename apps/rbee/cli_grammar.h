/* `--grammar FILE` / `--json-schema FILE` of the rbee commands that sample
 * (generate, bench): reads the file and compiles it. */
#ifndef RBEE_APP_CLI_GRAMMAR_H
#define RBEE_APP_CLI_GRAMMAR_H

#include "rbee/grammar.h"

#include <stdbool.h>

/* At most one of gbnf_path / schema_path (both NULL: *out = NULL, true).
 * Prints errors to stderr naming the file. */
bool cli_load_grammar(const char *gbnf_path, const char *schema_path, rb_grammar **out);

#endif

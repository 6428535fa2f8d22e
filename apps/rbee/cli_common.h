/* Shared plumbing of the rbee sub-commands: backend + model + tokenizer
 * opening from common flags, and small parsing helpers. */
#ifndef RBEE_APP_CLI_COMMON_H
#define RBEE_APP_CLI_COMMON_H

#include "rbee/backend.h"
#include "rbee/model.h"
#include "rbee/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct cli_model {
    rb_backend *be;
    rb_model *model;
    rb_tokenizer *tok; /* NULL when the model has no tokenizer */
} cli_model;

/* backend_spec: "cpu", "cuda:0", ... (NULL = "cpu"); threads <= 0: all cores.
 * need_tokenizer: fail if the model has none. Prints errors to stderr. The
 * CPU backend is created batch-invariant, as llm-worker-rbee's default
 * there (--deterministic auto), so both compute a prompt the same way. */
bool cli_open_model(const char *path, const char *backend_spec, int threads, bool need_tokenizer, cli_model *out);
/* The same with a whole backend configuration (cfg may be NULL). */
bool cli_open_model_cfg(const char *path, const char *backend_spec, const rb_backend_config *cfg, bool need_tokenizer,
                        cli_model *out);
void cli_close_model(cli_model *cm);

/* Loads just a tokenizer from a GGUF file, an HF folder, or a folder holding
 * tokenizer.json (+ tokenizer_config.json). */
bool cli_open_tokenizer(const char *path, rb_tokenizer **out);

/* Strict number parsing: whole string, in range; prints an error naming flag. */
bool cli_parse_int(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out);
/* Reads all of stdin into a malloc'ed NUL-terminated buffer. */
char *cli_read_stdin(size_t *len);

#endif

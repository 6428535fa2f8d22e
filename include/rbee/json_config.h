/* Reading JSON configuration files (config.json, tokenizer_config.json) into
 * a small typed accessor API, with size and nesting limits, so model code does
 * not depend on the JSON library directly. */
#ifndef RBEE_JSON_CONFIG_H
#define RBEE_JSON_CONFIG_H

#include "rbee/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rb_json_config rb_json_config;

/* Loads a JSON object from a file (at most 64 MiB) or a buffer. */
rb_status rb_json_config_load(const char *path, rb_json_config **out, rb_error *err);
rb_status rb_json_config_parse(const char *data, size_t len, rb_json_config **out, rb_error *err);
void rb_json_config_free(rb_json_config *c);

/* Top-level (or dotted path "rope_scaling.factor") lookups. RB_E_NOT_FOUND if
 * absent or null, RB_E_FORMAT if of another type. Integers read as double too. */
rb_status rb_json_config_int(const rb_json_config *c, const char *path, int64_t *out);
rb_status rb_json_config_num(const rb_json_config *c, const char *path, double *out);
rb_status rb_json_config_bool(const rb_json_config *c, const char *path, bool *out);
/* Pointer owned by the config object. */
rb_status rb_json_config_str(const rb_json_config *c, const char *path, const char **out);
/* Array length / element i of an array of numbers or strings. */
rb_status rb_json_config_arr_len(const rb_json_config *c, const char *path, size_t *out);
rb_status rb_json_config_arr_int(const rb_json_config *c, const char *path, size_t i, int64_t *out);
rb_status rb_json_config_arr_num(const rb_json_config *c, const char *path, size_t i, double *out);
rb_status rb_json_config_arr_str(const rb_json_config *c, const char *path, size_t i, const char **out);
/* The underlying jansson object (json_t *), for layers that need more. */
void *rb_json_config_root(const rb_json_config *c);

#ifdef __cplusplus
}
#endif
#endif

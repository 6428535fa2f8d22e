/* JSON as diffusers writes it: Python's json module emits the bare tokens
 * NaN, Infinity and -Infinity (e.g. lambda_min_clipped), which strict parsers
 * (jansson) reject. These helpers parse such text after turning those tokens
 * into the strings "NaN", "Infinity", "-Infinity", and read numbers back
 * from either form. Used by the scheduler-config reader and its tests. */
#ifndef RBEE_SCHED_JSON_H
#define RBEE_SCHED_JSON_H

#include "rbee/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define RB_SCHED_JSON_MAX_BYTES (64u << 20)

/* Parses text (len bytes, at most RB_SCHED_JSON_MAX_BYTES); NULL and an
 * RB_E_FORMAT / RB_E_NOMEM error on failure. The caller json_decref's it. */
json_t *rb_sched_json_parse(const char *text, size_t len, rb_error *err);
/* Reads and parses a file (RB_E_IO if unreadable). */
json_t *rb_sched_json_load(const char *path, rb_error *err);
/* An integer, real, or one of the three non-finite strings -> *out. */
bool rb_sched_json_number(const json_t *v, double *out);

#endif

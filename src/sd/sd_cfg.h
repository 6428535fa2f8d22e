/* Typed reads of a diffusers / transformers model config.json for the
 * network loaders (CLIP, UNet, VAE): absent or null fields take a default, a
 * wrong type is RB_E_FORMAT naming the field, and "int or per-level list"
 * fields (heads, transformer depth) are expanded to one value per level. */
#ifndef RBEE_SD_CFG_H
#define RBEE_SD_CFG_H

#include "rbee/json_config.h"

#include <jansson.h>

#define SD_TRY_J(expr)                                                                                         \
    do {                                                                                                       \
        rb_status sd_j_ = (expr);                                                                              \
        if (sd_j_ != RB_OK) return sd_j_;                                                                      \
    } while (0)

typedef struct sd_cfg {
    rb_json_config *cfg;
    json_t *root;
    const char *path; /* for messages */
    rb_error *err;
} sd_cfg;

rb_status sd_cfg_open(sd_cfg *j, const char *path, rb_error *err);
void sd_cfg_close(sd_cfg *j);

/* true when the field is present and not null */
bool sd_cfg_has(const sd_cfg *j, const char *key);
rb_status sd_cfg_int(const sd_cfg *j, const char *key, int64_t def, int64_t *out);
rb_status sd_cfg_num(const sd_cfg *j, const char *key, double def, double *out);
rb_status sd_cfg_bool(const sd_cfg *j, const char *key, bool def, bool *out);
/* *out = NULL when absent or null */
rb_status sd_cfg_str(const sd_cfg *j, const char *key, const char **out);
/* A list of n integers, or one integer repeated n times. */
rb_status sd_cfg_int_levels(const sd_cfg *j, const char *key, int n, int64_t *out);
/* A list of 1..max integers; *n its length. */
rb_status sd_cfg_int_list(const sd_cfg *j, const char *key, int max, int64_t *out, int *n);
/* A list of exactly n strings. */
rb_status sd_cfg_str_list(const sd_cfg *j, const char *key, int n, const char **out);
/* RB_E_UNSUPPORTED "<path>: <key> = <value> is not supported (<why>)". */
rb_status sd_cfg_unsupported(const sd_cfg *j, const char *key, const char *why);

#endif

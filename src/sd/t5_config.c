/* config.json of a T5 encoder (transformers' T5Config, whose defaults fill
 * absent fields) into rb_t5_config: the v1.1 "gated-gelu" feed-forward
 * (SD3's T5-XXL) or the v1.0 "relu" one. */
#include "rbee/sd_t5.h"
#include "sd/sd_cfg.h"

#include <string.h>

static rb_status parse(const sd_cfg *j, rb_t5_config *c) {
    memset(c, 0, sizeof *c);
    const char *s = NULL;
    SD_TRY_J(sd_cfg_str(j, "model_type", &s));
    if (s && strcmp(s, "t5") != 0) return sd_cfg_unsupported(j, "model_type", "a T5 config (model_type \"t5\")");
    SD_TRY_J(sd_cfg_int(j, "vocab_size", 32128, &c->vocab_size));
    SD_TRY_J(sd_cfg_int(j, "d_model", 512, &c->d_model));
    SD_TRY_J(sd_cfg_int(j, "d_kv", 64, &c->d_kv));
    SD_TRY_J(sd_cfg_int(j, "d_ff", 2048, &c->d_ff));
    SD_TRY_J(sd_cfg_int(j, "num_layers", 6, &c->n_layers));
    SD_TRY_J(sd_cfg_int(j, "num_heads", 8, &c->n_heads));
    SD_TRY_J(sd_cfg_int(j, "relative_attention_num_buckets", 32, &c->rel_buckets));
    SD_TRY_J(sd_cfg_int(j, "relative_attention_max_distance", 128, &c->rel_max_distance));
    double eps;
    SD_TRY_J(sd_cfg_num(j, "layer_norm_epsilon", 1e-6, &eps));
    c->eps = (float)eps;
    SD_TRY_J(sd_cfg_str(j, "feed_forward_proj", &s));
    if (!s || strcmp(s, "relu") == 0)
        c->gated = false;
    else if (strcmp(s, "gated-gelu") == 0)
        c->gated = true;
    else
        return sd_cfg_unsupported(j, "feed_forward_proj", "\"gated-gelu\" or \"relu\"");
    const struct { const char *key; int64_t v, max; } dims[] = {
        {"vocab_size", c->vocab_size, (int64_t)1 << 24}, {"d_model", c->d_model, 1 << 16},
        {"d_kv", c->d_kv, 1 << 12},                      {"d_ff", c->d_ff, 1 << 18},
        {"num_layers", c->n_layers, 1024},               {"num_heads", c->n_heads, 1024},
        {"relative_attention_num_buckets", c->rel_buckets, 1 << 12},
        {"relative_attention_max_distance", c->rel_max_distance, 1 << 20},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v < 1 || dims[i].v > dims[i].max)
            return rb_error_set(j->err, RB_E_FORMAT, "%s: field '%s' = %lld is out of range [1, %lld]", j->path,
                                dims[i].key, (long long)dims[i].v, (long long)dims[i].max);
    if (c->rel_buckets < 4)
        return rb_error_set(j->err, RB_E_FORMAT, "%s: relative_attention_num_buckets %lld must be >= 4", j->path,
                            (long long)c->rel_buckets);
    if (!(c->eps > 0.0f)) return rb_error_set(j->err, RB_E_FORMAT, "%s: layer_norm_epsilon must be > 0", j->path);
    return RB_OK;
}

rb_status rb_t5_config_load(const char *path, rb_t5_config *cfg, rb_error *err) {
    if (!path || !cfg) return rb_error_set(err, RB_E_INVALID, "t5 config: NULL argument");
    sd_cfg j;
    rb_status s = sd_cfg_open(&j, path, err);
    if (s != RB_OK) return s;
    s = parse(&j, cfg);
    sd_cfg_close(&j);
    return s;
}

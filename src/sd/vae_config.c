/* config.json of a diffusers AutoencoderKL into rb_vae_config, with diffusers'
 * defaults for absent fields; other block types or activations are
 * RB_E_UNSUPPORTED naming the field. */
#include "rbee/sd_model.h"
#include "sd/sd_cfg.h"

#include <string.h>

static rb_status all_equal(const sd_cfg *j, const char *key, int n, const char *want) {
    const char *t[RB_SD_MAX_LEVELS];
    SD_TRY_J(sd_cfg_str_list(j, key, n, t));
    for (int i = 0; i < n; i++)
        if (strcmp(t[i], want) != 0) return sd_cfg_unsupported(j, key, want);
    return RB_OK;
}

static rb_status parse(const sd_cfg *j, rb_vae_config *c) {
    memset(c, 0, sizeof *c);
    const char *s;
    SD_TRY_J(sd_cfg_str(j, "_class_name", &s));
    if (s && strcmp(s, "AutoencoderKL") != 0) return sd_cfg_unsupported(j, "_class_name", "AutoencoderKL");
    SD_TRY_J(sd_cfg_int(j, "in_channels", 3, &c->in_channels));
    SD_TRY_J(sd_cfg_int(j, "out_channels", 3, &c->out_channels));
    SD_TRY_J(sd_cfg_int(j, "latent_channels", 4, &c->latent_channels));
    if (sd_cfg_has(j, "block_out_channels")) {
        SD_TRY_J(sd_cfg_int_list(j, "block_out_channels", RB_SD_MAX_LEVELS, c->block_out_channels, &c->n_levels));
    } else {
        c->n_levels = 1;
        c->block_out_channels[0] = 64;
    }
    if (sd_cfg_has(j, "down_block_types")) SD_TRY_J(all_equal(j, "down_block_types", c->n_levels, "DownEncoderBlock2D"));
    if (sd_cfg_has(j, "up_block_types")) SD_TRY_J(all_equal(j, "up_block_types", c->n_levels, "UpDecoderBlock2D"));
    int64_t v;
    SD_TRY_J(sd_cfg_int(j, "layers_per_block", 1, &v));
    if (v < 1 || v > 8) return sd_cfg_unsupported(j, "layers_per_block", "1 to 8");
    c->layers_per_block = (int)v;
    SD_TRY_J(sd_cfg_int(j, "norm_num_groups", 32, &v));
    if (v < 1 || v > 4096) return sd_cfg_unsupported(j, "norm_num_groups", "1 to 4096");
    c->norm_num_groups = (int)v;
    SD_TRY_J(sd_cfg_str(j, "act_fn", &s));
    if (s && strcmp(s, "silu") != 0) return sd_cfg_unsupported(j, "act_fn", "silu");
    double d;
    SD_TRY_J(sd_cfg_num(j, "scaling_factor", 0.18215, &d));
    c->scaling_factor = (float)d;
    c->has_shift_factor = sd_cfg_has(j, "shift_factor");
    SD_TRY_J(sd_cfg_num(j, "shift_factor", 0.0, &d));
    c->shift_factor = (float)d;
    SD_TRY_J(sd_cfg_bool(j, "force_upcast", true, &c->force_upcast));
    SD_TRY_J(sd_cfg_bool(j, "mid_block_add_attention", true, &c->mid_block_attention));
    SD_TRY_J(sd_cfg_bool(j, "use_quant_conv", true, &c->use_quant_conv));
    SD_TRY_J(sd_cfg_bool(j, "use_post_quant_conv", true, &c->use_post_quant_conv));
    const struct { const char *key; int64_t v; } dims[] = {
        {"in_channels", c->in_channels}, {"out_channels", c->out_channels}, {"latent_channels", c->latent_channels}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v < 1 || dims[i].v > 4096)
            return rb_error_set(j->err, RB_E_FORMAT, "%s: field '%s' = %lld is out of range", j->path, dims[i].key,
                                (long long)dims[i].v);
    for (int i = 0; i < c->n_levels; i++) {
        const int64_t ch = c->block_out_channels[i];
        if (ch < 1 || ch > (1 << 16))
            return rb_error_set(j->err, RB_E_FORMAT, "%s: block_out_channels[%d] = %lld is out of range", j->path, i,
                                (long long)ch);
        if (ch % c->norm_num_groups)
            return rb_error_set(j->err, RB_E_UNSUPPORTED, "%s: norm_num_groups %d does not divide block_out_channels[%d] "
                                "= %lld", j->path, c->norm_num_groups, i, (long long)ch);
    }
    if (!(c->scaling_factor != 0.0f))
        return rb_error_set(j->err, RB_E_FORMAT, "%s: scaling_factor must not be 0", j->path);
    return RB_OK;
}

rb_status rb_vae_config_load(const char *path, rb_vae_config *cfg, rb_error *err) {
    if (!path || !cfg) return rb_error_set(err, RB_E_INVALID, "vae config: NULL argument");
    sd_cfg j;
    rb_status s = sd_cfg_open(&j, path, err);
    if (s != RB_OK) return s;
    s = parse(&j, cfg);
    sd_cfg_close(&j);
    return s;
}

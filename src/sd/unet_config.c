/* config.json of a diffusers UNet2DConditionModel into rb_unet_config, with
 * diffusers' defaults for absent fields. Everything the SD 1.x / 2.x / XL
 * (and inpainting) UNets use is read; any other value of a field that changes
 * the network is RB_E_UNSUPPORTED naming the field and its value. Note the
 * historical naming: attention_head_dim is the NUMBER of heads unless
 * num_attention_heads is given. */
#include "rbee/sd_model.h"
#include "sd/sd_cfg.h"

#include <stdio.h>
#include <string.h>

/* The field must be absent, null, or equal to one of the allowed strings. */
static rb_status want_str(const sd_cfg *j, const char *key, const char *a, const char *b, const char **out) {
    const char *s = NULL;
    SD_TRY_J(sd_cfg_str(j, key, &s));
    if (out) *out = s;
    if (!s || (a && strcmp(s, a) == 0) || (b && strcmp(s, b) == 0)) return RB_OK;
    char why[128];
    snprintf(why, sizeof why, "%s%s%s%s", a ? a : "null", b ? " or " : "", b ? b : "", a ? " or null" : "");
    return sd_cfg_unsupported(j, key, why);
}

static rb_status want_null(const sd_cfg *j, const char *key) {
    return sd_cfg_has(j, key) ? sd_cfg_unsupported(j, key, "only null") : RB_OK;
}

static rb_status want_false(const sd_cfg *j, const char *key) {
    json_t *v = json_object_get(j->root, key);
    if (!v || json_is_null(v) || json_is_false(v)) return RB_OK;
    if (json_is_array(v)) { /* per-block flags: all false */
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) if (!json_is_false(e)) return sd_cfg_unsupported(j, key, "only false");
        return RB_OK;
    }
    return sd_cfg_unsupported(j, key, "only false");
}

static rb_status parse(const sd_cfg *j, rb_unet_config *c) {
    memset(c, 0, sizeof *c);
    const char *s;
    SD_TRY_J(want_str(j, "_class_name", "UNet2DConditionModel", NULL, NULL));
    int64_t v, lv[RB_SD_MAX_LEVELS];
    SD_TRY_J(sd_cfg_int(j, "in_channels", 4, &c->in_channels));
    SD_TRY_J(sd_cfg_int(j, "out_channels", 4, &c->out_channels));
    SD_TRY_J(sd_cfg_int_list(j, "block_out_channels", RB_SD_MAX_LEVELS, c->block_out_channels, &c->n_levels));
    const int n = c->n_levels;
    const char *types[RB_SD_MAX_LEVELS];
    SD_TRY_J(sd_cfg_str_list(j, "down_block_types", n, types));
    for (int i = 0; i < n; i++) {
        if (strcmp(types[i], "CrossAttnDownBlock2D") == 0)
            c->down_cross_attn[i] = true;
        else if (strcmp(types[i], "DownBlock2D") != 0)
            return sd_cfg_unsupported(j, "down_block_types", "CrossAttnDownBlock2D or DownBlock2D");
    }
    SD_TRY_J(sd_cfg_str_list(j, "up_block_types", n, types));
    for (int i = 0; i < n; i++) { /* listed deepest first */
        if (strcmp(types[i], "CrossAttnUpBlock2D") == 0)
            c->up_cross_attn[n - 1 - i] = true;
        else if (strcmp(types[i], "UpBlock2D") != 0)
            return sd_cfg_unsupported(j, "up_block_types", "CrossAttnUpBlock2D or UpBlock2D");
    }
    json_t *mid = json_object_get(j->root, "mid_block_type");
    c->mid_block = !mid || !json_is_null(mid);
    SD_TRY_J(want_str(j, "mid_block_type", "UNetMidBlock2DCrossAttn", NULL, NULL));
    if (sd_cfg_has(j, "layers_per_block")) {
        SD_TRY_J(sd_cfg_int_levels(j, "layers_per_block", n, lv));
    } else {
        for (int i = 0; i < n; i++) lv[i] = 2;
    }
    for (int i = 0; i < n; i++) {
        if (lv[i] < 1 || lv[i] > 8) return sd_cfg_unsupported(j, "layers_per_block", "1 to 8");
        c->layers_per_block[i] = (int)lv[i];
    }
    const char *heads_key = sd_cfg_has(j, "num_attention_heads") ? "num_attention_heads" : "attention_head_dim";
    if (sd_cfg_has(j, heads_key)) {
        SD_TRY_J(sd_cfg_int_levels(j, heads_key, n, lv));
    } else {
        for (int i = 0; i < n; i++) lv[i] = 8;
    }
    for (int i = 0; i < n; i++) {
        if (lv[i] < 1 || lv[i] > 4096) return sd_cfg_unsupported(j, heads_key, "1 to 4096 heads");
        c->n_heads[i] = (int)lv[i];
    }
    if (sd_cfg_has(j, "transformer_layers_per_block")) {
        SD_TRY_J(sd_cfg_int_levels(j, "transformer_layers_per_block", n, lv));
    } else {
        for (int i = 0; i < n; i++) lv[i] = 1;
    }
    for (int i = 0; i < n; i++) {
        if (lv[i] < 1 || lv[i] > 64) return sd_cfg_unsupported(j, "transformer_layers_per_block", "1 to 64");
        c->transformer_layers[i] = (int)lv[i];
    }
    SD_TRY_J(want_null(j, "reverse_transformer_layers_per_block"));
    json_t *cad = json_object_get(j->root, "cross_attention_dim");
    if (json_is_array(cad)) return sd_cfg_unsupported(j, "cross_attention_dim", "one integer for every block");
    SD_TRY_J(sd_cfg_int(j, "cross_attention_dim", 1280, &c->cross_attention_dim));
    SD_TRY_J(sd_cfg_bool(j, "use_linear_projection", false, &c->use_linear_projection));
    SD_TRY_J(sd_cfg_bool(j, "upcast_attention", false, &c->upcast_attention));
    SD_TRY_J(want_false(j, "only_cross_attention"));
    SD_TRY_J(want_false(j, "dual_cross_attention"));
    SD_TRY_J(want_false(j, "class_embeddings_concat"));
    SD_TRY_J(want_false(j, "resnet_skip_time_act"));
    if (sd_cfg_has(j, "norm_num_groups")) {
        SD_TRY_J(sd_cfg_int(j, "norm_num_groups", 32, &v));
    } else if (json_object_get(j->root, "norm_num_groups")) {
        return sd_cfg_unsupported(j, "norm_num_groups", "group norms (an integer)");
    } else {
        v = 32;
    }
    if (v < 1 || v > 4096) return sd_cfg_unsupported(j, "norm_num_groups", "1 to 4096");
    c->norm_num_groups = (int)v;
    double d;
    SD_TRY_J(sd_cfg_num(j, "norm_eps", 1e-5, &d));
    c->norm_eps = (float)d;
    SD_TRY_J(sd_cfg_bool(j, "flip_sin_to_cos", true, &c->flip_sin_to_cos));
    SD_TRY_J(sd_cfg_num(j, "freq_shift", 0.0, &d));
    c->freq_shift = (float)d;
    SD_TRY_J(sd_cfg_bool(j, "center_input_sample", false, &c->center_input_sample));
    SD_TRY_J(want_str(j, "act_fn", "silu", NULL, NULL));
    SD_TRY_J(want_str(j, "time_embedding_type", "positional", NULL, NULL));
    SD_TRY_J(sd_cfg_int(j, "time_embedding_dim", 4 * c->block_out_channels[0], &c->time_embed_dim));
    SD_TRY_J(want_str(j, "time_embedding_act_fn", "silu", NULL, &s));
    c->time_embedding_act = s != NULL;
    SD_TRY_J(want_str(j, "timestep_post_act", "silu", NULL, &s));
    c->timestep_post_act = s != NULL;
    SD_TRY_J(want_null(j, "time_cond_proj_dim"));
    SD_TRY_J(sd_cfg_int(j, "conv_in_kernel", 3, &v));
    if (v < 1 || v > 7 || v % 2 == 0) return sd_cfg_unsupported(j, "conv_in_kernel", "an odd size 1 to 7");
    c->conv_in_kernel = (int)v;
    SD_TRY_J(sd_cfg_int(j, "conv_out_kernel", 3, &v));
    if (v < 1 || v > 7 || v % 2 == 0) return sd_cfg_unsupported(j, "conv_out_kernel", "an odd size 1 to 7");
    c->conv_out_kernel = (int)v;
    SD_TRY_J(sd_cfg_int(j, "downsample_padding", 1, &v));
    if (v != 0 && v != 1) return sd_cfg_unsupported(j, "downsample_padding", "0 or 1");
    c->downsample_padding = (int)v;
    SD_TRY_J(sd_cfg_num(j, "mid_block_scale_factor", 1.0, &d));
    c->mid_block_scale_factor = (float)d;
    SD_TRY_J(sd_cfg_num(j, "resnet_out_scale_factor", 1.0, &d));
    c->resnet_out_scale_factor = (float)d;
    if (!(c->mid_block_scale_factor > 0.0f) || !(c->resnet_out_scale_factor > 0.0f))
        return rb_error_set(j->err, RB_E_FORMAT, "%s: the output scale factors must be > 0", j->path);
    SD_TRY_J(want_str(j, "resnet_time_scale_shift", "default", NULL, NULL));
    SD_TRY_J(want_null(j, "class_embed_type"));
    SD_TRY_J(want_null(j, "num_class_embeds"));
    SD_TRY_J(want_null(j, "encoder_hid_dim"));
    SD_TRY_J(want_null(j, "encoder_hid_dim_type"));
    SD_TRY_J(want_null(j, "cross_attention_norm"));
    SD_TRY_J(want_str(j, "attention_type", "default", NULL, NULL));
    SD_TRY_J(want_str(j, "addition_embed_type", "text_time", NULL, &s));
    c->add_text_time = s != NULL;
    if (c->add_text_time) {
        if (!sd_cfg_has(j, "addition_time_embed_dim") || !sd_cfg_has(j, "projection_class_embeddings_input_dim"))
            return rb_error_set(j->err, RB_E_FORMAT, "%s: addition_embed_type text_time needs addition_time_embed_dim "
                                "and projection_class_embeddings_input_dim", j->path);
        SD_TRY_J(sd_cfg_int(j, "addition_time_embed_dim", 0, &c->addition_time_embed_dim));
        SD_TRY_J(sd_cfg_int(j, "projection_class_embeddings_input_dim", 0, &c->projection_class_embeddings_input_dim));
        if (c->addition_time_embed_dim < 1 || c->addition_time_embed_dim > 65536 ||
            c->projection_class_embeddings_input_dim <= c->addition_time_embed_dim ||
            c->projection_class_embeddings_input_dim > (1 << 20))
            return rb_error_set(j->err, RB_E_FORMAT, "%s: addition_time_embed_dim %lld / "
                                "projection_class_embeddings_input_dim %lld out of range", j->path,
                                (long long)c->addition_time_embed_dim,
                                (long long)c->projection_class_embeddings_input_dim);
    }
    /* sizes */
    const struct { const char *key; int64_t v; } dims[] = {
        {"in_channels", c->in_channels}, {"out_channels", c->out_channels},
        {"cross_attention_dim", c->cross_attention_dim}, {"time_embedding_dim", c->time_embed_dim},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v < 1 || dims[i].v > (1 << 16))
            return rb_error_set(j->err, RB_E_FORMAT, "%s: field '%s' = %lld is out of range", j->path, dims[i].key,
                                (long long)dims[i].v);
    for (int i = 0; i < n; i++) {
        const int64_t ch = c->block_out_channels[i];
        if (ch < 1 || ch > (1 << 16))
            return rb_error_set(j->err, RB_E_FORMAT, "%s: block_out_channels[%d] = %lld is out of range", j->path, i,
                                (long long)ch);
        if (ch % c->norm_num_groups)
            return rb_error_set(j->err, RB_E_UNSUPPORTED, "%s: norm_num_groups %d does not divide block_out_channels[%d] "
                                "= %lld", j->path, c->norm_num_groups, i, (long long)ch);
        if ((c->down_cross_attn[i] || c->up_cross_attn[i] || (i == n - 1 && c->mid_block)) && ch % c->n_heads[i])
            return rb_error_set(j->err, RB_E_UNSUPPORTED, "%s: %s[%d] = %d heads do not divide %lld channels", j->path,
                                heads_key, i, c->n_heads[i], (long long)ch);
    }
    return RB_OK;
}

rb_status rb_unet_config_load(const char *path, rb_unet_config *cfg, rb_error *err) {
    if (!path || !cfg) return rb_error_set(err, RB_E_INVALID, "unet config: NULL argument");
    sd_cfg j;
    rb_status s = sd_cfg_open(&j, path, err);
    if (s != RB_OK) return s;
    s = parse(&j, cfg);
    sd_cfg_close(&j);
    return s;
}

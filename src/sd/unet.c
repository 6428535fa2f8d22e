/* Loading a diffusers UNet2DConditionModel folder: the config, then every
 * weight bound by its diffusers name with the shape the config implies. The
 * channel counts of the up path follow the skip connections exactly as the
 * forward pass pops them (a stack of the down path's outputs), so the shapes
 * checked here are the ones the forward pass will use. */
#include "sd/sd_nets.h"
#include "sd/unet_internal.h"

#include <stdlib.h>
#include <string.h>

#define NAMEF(buf, ...)                                                                                        \
    do {                                                                                                       \
        if (!sd_name(buf, sizeof buf, __VA_ARGS__)) return rb_error_set(err, RB_E_INVALID, "name too long");   \
    } while (0)

#define MAX_SKIPS (1 + RB_SD_MAX_LEVELS * 9)

static rb_status bind_time(rb_unet *u, rb_error *err) {
    const rb_unet_config *c = &u->cfg;
    const int64_t T = c->time_embed_dim;
    SD_TRY(sd_bind_linear(&u->ws, "time_embedding.linear_1", c->block_out_channels[0], T, true, &u->time_1, err));
    SD_TRY(sd_bind_linear(&u->ws, "time_embedding.linear_2", T, T, true, &u->time_2, err));
    if (c->add_text_time) {
        SD_TRY(sd_bind_linear(&u->ws, "add_embedding.linear_1", c->projection_class_embeddings_input_dim, T, true,
                              &u->add_1, err));
        SD_TRY(sd_bind_linear(&u->ws, "add_embedding.linear_2", T, T, true, &u->add_2, err));
    }
    return RB_OK;
}

static rb_status bind_all(rb_unet *u, rb_error *err) {
    const rb_unet_config *c = &u->cfg;
    sd_weights *ws = &u->ws;
    const int n = c->n_levels, G = c->norm_num_groups;
    const int64_t T = c->time_embed_dim, X = c->cross_attention_dim;
    const float eps = c->norm_eps, rs = c->resnet_out_scale_factor;
    char p[SD_NAME_MAX];
    int64_t skips[MAX_SKIPS];
    int ns = 0;
    SD_TRY(bind_time(u, err));
    SD_TRY(sd_bind_conv(ws, "conv_in", c->in_channels, c->block_out_channels[0], c->conv_in_kernel, &u->conv_in, err));
    int64_t ch = c->block_out_channels[0];
    skips[ns++] = ch;
    for (int l = 0; l < n; l++) {
        unet_level *L = &u->lv[l];
        const int nl = c->layers_per_block[l];
        const int64_t out = c->block_out_channels[l];
        L->down_res = calloc((size_t)nl, sizeof *L->down_res);
        L->up_res = calloc((size_t)nl + 1, sizeof *L->up_res);
        L->down_attn = calloc((size_t)nl, sizeof *L->down_attn);
        L->up_attn = calloc((size_t)nl + 1, sizeof *L->up_attn);
        if (!L->down_res || !L->up_res || !L->down_attn || !L->up_attn)
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        for (int j = 0; j < nl; j++) {
            NAMEF(p, "down_blocks.%d.resnets.%d", l, j);
            SD_TRY(sd_bind_resnet(ws, p, ch, out, T, G, eps, rs, &L->down_res[j], err));
            if (c->down_cross_attn[l]) {
                NAMEF(p, "down_blocks.%d.attentions.%d", l, j);
                SD_TRY(sd_bind_t2d(ws, p, out, X, c->n_heads[l], c->transformer_layers[l], G, &L->down_attn[j], err));
            }
            ch = out;
            skips[ns++] = ch;
        }
        if (l < n - 1) {
            NAMEF(p, "down_blocks.%d.downsamplers.0.conv", l);
            SD_TRY(sd_bind_conv(ws, p, out, out, 3, &L->down, err));
            skips[ns++] = ch;
        }
    }
    if (c->mid_block) {
        const int top = n - 1;
        SD_TRY(sd_bind_resnet(ws, "mid_block.resnets.0", ch, ch, T, G, eps, c->mid_block_scale_factor, &u->mid_res[0],
                              err));
        SD_TRY(sd_bind_t2d(ws, "mid_block.attentions.0", ch, X, c->n_heads[top], c->transformer_layers[top], G,
                           &u->mid_attn, err));
        SD_TRY(sd_bind_resnet(ws, "mid_block.resnets.1", ch, ch, T, G, eps, c->mid_block_scale_factor, &u->mid_res[1],
                              err));
    }
    for (int l = n - 1; l >= 0; l--) {
        unet_level *L = &u->lv[l];
        const int i = n - 1 - l; /* diffusers' up block index */
        const int64_t out = c->block_out_channels[l];
        for (int j = 0; j <= c->layers_per_block[l]; j++) {
            if (ns == 0) return rb_error_set(err, RB_E_UNSUPPORTED, "unet: the up blocks need more skip connections "
                                             "than the down blocks make");
            const int64_t skip = skips[--ns];
            NAMEF(p, "up_blocks.%d.resnets.%d", i, j);
            SD_TRY(sd_bind_resnet(ws, p, ch + skip, out, T, G, eps, rs, &L->up_res[j], err));
            if (c->up_cross_attn[l]) {
                NAMEF(p, "up_blocks.%d.attentions.%d", i, j);
                SD_TRY(sd_bind_t2d(ws, p, out, X, c->n_heads[l], c->transformer_layers[l], G, &L->up_attn[j], err));
            }
            ch = out;
        }
        if (l > 0) {
            NAMEF(p, "up_blocks.%d.upsamplers.0.conv", i);
            SD_TRY(sd_bind_conv(ws, p, out, out, 3, &L->up, err));
        }
    }
    if (ns != 0)
        return rb_error_set(err, RB_E_UNSUPPORTED, "unet: %d skip connections of the down blocks are never used", ns);
    SD_TRY(sd_bind_norm(ws, "conv_norm_out", ch, &u->norm_out, err));
    return sd_bind_conv(ws, "conv_out", ch, c->out_channels, c->conv_out_kernel, &u->conv_out, err);
}

/* The ranges the parser enforces, for configs filled by other loaders. */
static bool config_ok(const rb_unet_config *c) {
    if (c->n_levels < 1 || c->n_levels > RB_SD_MAX_LEVELS || c->in_channels < 1 || c->out_channels < 1 ||
        c->cross_attention_dim < 1 || c->time_embed_dim < 1 || c->norm_num_groups < 1 || c->conv_in_kernel % 2 == 0 ||
        c->conv_out_kernel % 2 == 0 || c->conv_in_kernel < 1 || c->conv_out_kernel < 1 ||
        (c->downsample_padding != 0 && c->downsample_padding != 1) || !(c->mid_block_scale_factor > 0.0f) ||
        !(c->resnet_out_scale_factor > 0.0f) ||
        (c->add_text_time && (c->addition_time_embed_dim < 1 ||
                              c->projection_class_embeddings_input_dim <= c->addition_time_embed_dim)))
        return false;
    for (int l = 0; l < c->n_levels; l++)
        if (c->block_out_channels[l] < 1 || c->layers_per_block[l] < 1 || c->layers_per_block[l] > 8 ||
            c->n_heads[l] < 1 || c->transformer_layers[l] < 1)
            return false;
    return true;
}

rb_status sd_unet_create(const rb_unet_config *cfg, sd_weights *ws, rb_unet **out, rb_error *err) {
    *out = NULL;
    if (!config_ok(cfg)) {
        sd_weights_close(ws);
        return rb_error_set(err, RB_E_INVALID, "unet: config values out of range");
    }
    rb_unet *u = calloc(1, sizeof *u);
    if (!u) {
        sd_weights_close(ws);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    u->cfg = *cfg;
    u->be = ws->be;
    u->ws = *ws;
    rb_status s = bind_all(u, err);
    if (s != RB_OK) {
        rb_unet_free(u);
        return s;
    }
    sd_weights_release_files(&u->ws);
    *out = u;
    return RB_OK;
}

rb_status rb_unet_load(const char *dir, rb_backend *be, const rb_sd_load_opts *opts, rb_unet **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "unet: out is NULL");
    *out = NULL;
    if (!dir || !be) return rb_error_set(err, RB_E_INVALID, "unet: NULL argument");
    char path[1024];
    if (!sd_name(path, sizeof path, "%s/config.json", dir)) return rb_error_set(err, RB_E_INVALID, "path too long: %s", dir);
    rb_unet_config cfg;
    if (opts) SD_TRY(sd_act_check(opts->act_dtype, "unet", err));
    SD_TRY(rb_unet_config_load(path, &cfg, err));
    sd_weights ws;
    SD_TRY(sd_weights_open(&ws, dir, "diffusion_pytorch_model", be, opts, err));
    SD_TRY(sd_unet_create(&cfg, &ws, out, err));
    if (opts) (*out)->scratch.act = opts->act_dtype;
    return RB_OK;
}

rb_status rb_unet_set_act_dtype(rb_unet *u, rb_dtype dt, rb_error *err) {
    if (!u) return rb_error_set(err, RB_E_INVALID, "unet: NULL model");
    SD_TRY(sd_act_check(dt, "unet", err));
    u->scratch.act = dt;
    return RB_OK;
}

rb_dtype rb_unet_act_dtype(const rb_unet *u) { return u ? u->scratch.act : RB_F32; }

void rb_unet_free(rb_unet *u) {
    if (!u) return;
    for (int l = 0; l < RB_SD_MAX_LEVELS; l++) {
        unet_level *L = &u->lv[l];
        for (int j = 0; L->down_attn && j < u->cfg.layers_per_block[l]; j++) sd_t2d_free(&L->down_attn[j]);
        for (int j = 0; L->up_attn && j <= u->cfg.layers_per_block[l]; j++) sd_t2d_free(&L->up_attn[j]);
        free(L->down_res);
        free(L->up_res);
        free(L->down_attn);
        free(L->up_attn);
    }
    sd_t2d_free(&u->mid_attn);
    sd_scratch_free(&u->scratch);
    sd_weights_close(&u->ws);
    free(u);
}

const rb_unet_config *rb_unet_get_config(const rb_unet *u) { return u ? &u->cfg : NULL; }
size_t rb_unet_weight_bytes(const rb_unet *u) { return u ? u->ws.bytes : 0; }

/* Loading a diffusers AutoencoderKL folder: the config, then the encoder's
 * and the decoder's weights bound by their diffusers names with the shapes
 * the config implies (the mid-block attention also under its pre-0.14 names
 * query/key/value/proj_attn, see sd_weights_find). */
#include "sd/sd_nets.h"
#include "sd/vae_internal.h"

#include <stdlib.h>
#include <string.h>

#define NAMEF(buf, ...)                                                                                        \
    do {                                                                                                       \
        if (!sd_name(buf, sizeof buf, __VA_ARGS__)) return rb_error_set(err, RB_E_INVALID, "name too long");   \
    } while (0)

static rb_status bind_mid(sd_weights *ws, const char *part, const rb_vae_config *c, int64_t ch, vae_mid *m,
                          rb_error *err) {
    char p[SD_NAME_MAX];
    const int G = c->norm_num_groups;
    NAMEF(p, "%s.mid_block.resnets.0", part);
    SD_TRY(sd_bind_resnet(ws, p, ch, ch, 0, G, VAE_EPS, 1.0f, &m->res[0], err));
    if (c->mid_block_attention) {
        NAMEF(p, "%s.mid_block.attentions.0", part);
        SD_TRY(sd_bind_vae_attn(ws, p, ch, G, VAE_EPS, &m->attn, err));
    }
    NAMEF(p, "%s.mid_block.resnets.1", part);
    return sd_bind_resnet(ws, p, ch, ch, 0, G, VAE_EPS, 1.0f, &m->res[1], err);
}

static rb_status bind_encoder(rb_vae *v, rb_error *err) {
    const rb_vae_config *c = &v->cfg;
    sd_weights *ws = &v->ws;
    const int n = c->n_levels, G = c->norm_num_groups, nl = c->layers_per_block;
    const int64_t L2 = 2 * c->latent_channels;
    char p[SD_NAME_MAX];
    SD_TRY(sd_bind_conv(ws, "encoder.conv_in", c->in_channels, c->block_out_channels[0], 3, &v->enc_in, err));
    int64_t ch = c->block_out_channels[0];
    for (int i = 0; i < n; i++) {
        const int64_t out = c->block_out_channels[i];
        vae_level *lv = &v->enc[i];
        lv->res = calloc((size_t)nl, sizeof *lv->res);
        if (!lv->res) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        for (int j = 0; j < nl; j++) {
            NAMEF(p, "encoder.down_blocks.%d.resnets.%d", i, j);
            SD_TRY(sd_bind_resnet(ws, p, ch, out, 0, G, VAE_EPS, 1.0f, &lv->res[j], err));
            ch = out;
        }
        if (i < n - 1) {
            NAMEF(p, "encoder.down_blocks.%d.downsamplers.0.conv", i);
            SD_TRY(sd_bind_conv(ws, p, out, out, 3, &lv->sample, err));
        }
    }
    SD_TRY(bind_mid(ws, "encoder", c, ch, &v->enc_mid, err));
    SD_TRY(sd_bind_norm(ws, "encoder.conv_norm_out", ch, &v->enc_norm, err));
    SD_TRY(sd_bind_conv(ws, "encoder.conv_out", ch, L2, 3, &v->enc_out, err));
    if (c->use_quant_conv) SD_TRY(sd_bind_conv(ws, "quant_conv", L2, L2, 1, &v->quant, err));
    return RB_OK;
}

static rb_status bind_decoder(rb_vae *v, rb_error *err) {
    const rb_vae_config *c = &v->cfg;
    sd_weights *ws = &v->ws;
    const int n = c->n_levels, G = c->norm_num_groups, nl = c->layers_per_block + 1;
    const int64_t L = c->latent_channels;
    char p[SD_NAME_MAX];
    if (c->use_post_quant_conv) SD_TRY(sd_bind_conv(ws, "post_quant_conv", L, L, 1, &v->post_quant, err));
    int64_t ch = c->block_out_channels[n - 1];
    SD_TRY(sd_bind_conv(ws, "decoder.conv_in", L, ch, 3, &v->dec_in, err));
    SD_TRY(bind_mid(ws, "decoder", c, ch, &v->dec_mid, err));
    for (int i = 0; i < n; i++) {
        const int64_t out = c->block_out_channels[n - 1 - i];
        vae_level *lv = &v->dec[i];
        lv->res = calloc((size_t)nl, sizeof *lv->res);
        if (!lv->res) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        for (int j = 0; j < nl; j++) {
            NAMEF(p, "decoder.up_blocks.%d.resnets.%d", i, j);
            SD_TRY(sd_bind_resnet(ws, p, ch, out, 0, G, VAE_EPS, 1.0f, &lv->res[j], err));
            ch = out;
        }
        if (i < n - 1) {
            NAMEF(p, "decoder.up_blocks.%d.upsamplers.0.conv", i);
            SD_TRY(sd_bind_conv(ws, p, out, out, 3, &lv->sample, err));
        }
    }
    SD_TRY(sd_bind_norm(ws, "decoder.conv_norm_out", ch, &v->dec_norm, err));
    return sd_bind_conv(ws, "decoder.conv_out", ch, c->out_channels, 3, &v->dec_out, err);
}

/* The ranges the parser enforces, for configs filled by other loaders. */
static bool config_ok(const rb_vae_config *c) {
    if (c->n_levels < 1 || c->n_levels > RB_SD_MAX_LEVELS || c->in_channels < 1 || c->out_channels < 1 ||
        c->latent_channels < 1 || c->layers_per_block < 1 || c->layers_per_block > 8 || c->norm_num_groups < 1)
        return false;
    for (int l = 0; l < c->n_levels; l++)
        if (c->block_out_channels[l] < 1) return false;
    return true;
}

rb_status sd_vae_create(const rb_vae_config *cfg, sd_weights *ws, rb_vae **out, rb_error *err) {
    *out = NULL;
    if (!config_ok(cfg)) {
        sd_weights_close(ws);
        return rb_error_set(err, RB_E_INVALID, "vae: config values out of range");
    }
    rb_vae *v = calloc(1, sizeof *v);
    if (!v) {
        sd_weights_close(ws);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    v->cfg = *cfg;
    v->be = ws->be;
    v->ws = *ws;
    rb_status s = cfg->decoder_only ? RB_OK : bind_encoder(v, err);
    if (s == RB_OK) s = bind_decoder(v, err);
    if (s != RB_OK) {
        rb_vae_free(v);
        return s;
    }
    sd_weights_release_files(&v->ws);
    *out = v;
    return RB_OK;
}

rb_status rb_vae_load(const char *dir, rb_backend *be, const rb_sd_load_opts *opts, rb_vae **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "vae: out is NULL");
    *out = NULL;
    if (!dir || !be) return rb_error_set(err, RB_E_INVALID, "vae: NULL argument");
    char path[1024];
    if (!sd_name(path, sizeof path, "%s/config.json", dir)) return rb_error_set(err, RB_E_INVALID, "path too long: %s", dir);
    rb_vae_config cfg;
    if (opts) SD_TRY(sd_act_check(opts->act_dtype, "vae", err));
    SD_TRY(rb_vae_config_load(path, &cfg, err));
    sd_weights ws;
    SD_TRY(sd_weights_open(&ws, dir, "diffusion_pytorch_model", be, opts, err));
    SD_TRY(sd_vae_create(&cfg, &ws, out, err));
    return opts ? rb_vae_set_act_dtype(*out, opts->act_dtype, err) : RB_OK;
}

rb_status rb_vae_set_act_dtype(rb_vae *v, rb_dtype dt, rb_error *err) {
    if (!v) return rb_error_set(err, RB_E_INVALID, "vae: NULL model");
    SD_TRY(sd_act_check(dt, "vae", err));
    v->scratch.act = dt;
    return RB_OK;
}

rb_dtype rb_vae_act_dtype(const rb_vae *v) { return v ? v->scratch.act : RB_F32; }

void rb_vae_free(rb_vae *v) {
    if (!v) return;
    for (int i = 0; i < RB_SD_MAX_LEVELS; i++) {
        free(v->enc[i].res);
        free(v->dec[i].res);
    }
    sd_scratch_free(&v->scratch);
    sd_weights_close(&v->ws);
    free(v);
}

const rb_vae_config *rb_vae_get_config(const rb_vae *v) { return v ? &v->cfg : NULL; }
size_t rb_vae_weight_bytes(const rb_vae *v) { return v ? v->ws.bytes : 0; }
int rb_vae_scale(const rb_vae *v) { return v ? 1 << (v->cfg.n_levels - 1) : 0; }

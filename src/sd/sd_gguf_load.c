/* The networks of an SD GGUF file (see sd_gguf.h): each component's
 * weights are bound through its diffusers-name map with the file's configs
 * (sd_nets.h), on weights that hold a reference on the open file, so the
 * networks can be freed in any order and the mapping goes away with the
 * last network that still points into it. */
#include "sd/sd_convert.h"
#include "sd/sd_gguf.h"
#include "sd/sd_nets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const rb_st_tensor *map_lookup(const sd_weights *w, const char *name) {
    return sd_name_map_find((const sd_name_map *)w->lookup_ctx, name);
}

void sd_gguf_model_free(sd_gguf_model *m) {
    if (!m) return;
    rb_clip_text_free(m->text);
    rb_clip_text_free(m->text_2);
    rb_unet_free(m->unet);
    rb_vae_free(m->vae);
    sd_gguf_configs_free(&m->cfg);
    memset(m, 0, sizeof *m);
}

static const char *component_name(unsigned c) {
    switch (c) {
    case SD_GGUF_TEXT: return "text_encoder";
    case SD_GGUF_TEXT_2: return "text_encoder_2";
    case SD_GGUF_UNET: return "unet";
    default: return "vae";
    }
}

/* Weights of component c over the file's map. */
static rb_status weights(sd_gguf *f, unsigned c, rb_backend *be, const rb_sd_load_opts *opts, sd_weights *ws,
                         rb_error *err) {
    char label[sizeof f->label + 32];
    snprintf(label, sizeof label, "%s [%s]", f->label, component_name(c));
    const sd_name_map *m = sd_gguf_component_map(&f->ldm, f->cfg.family, c);
    rb_status s = sd_weights_init_source(ws, &f->src, map_lookup, (void *)m, label, be, opts, err);
    if (s != RB_OK) sd_weights_close(ws);
    return s;
}

static rb_status load(sd_gguf *f, rb_backend *be, const rb_sd_load_opts *opts, unsigned components,
                      sd_gguf_model *out, rb_error *err) {
    static const unsigned all =
        SD_GGUF_TEXT | SD_GGUF_TEXT_2 | SD_GGUF_UNET | SD_GGUF_VAE | SD_GGUF_VAE_DECODER | SD_GGUF_IF_PRESENT;
    if (components & ~all) return rb_error_set(err, RB_E_INVALID, "sd gguf: unknown component bits 0x%x", components);
    if (f->cfg_status != RB_OK)
        return rb_error_set(err, f->cfg_status, "%s: %s (the file carries no configs: give them, e.g. a diffusers "
                            "folder's)", f->label, f->cfg_msg);
    const sd_gguf_configs *c = &f->cfg;
    const unsigned bits[4] = {SD_GGUF_TEXT, SD_GGUF_TEXT_2, SD_GGUF_UNET, SD_GGUF_VAE};
    const bool cfg[4] = {c->has_text, c->has_text_2, c->has_unet, c->has_vae};
    unsigned have = 0;
    for (int i = 0; i < 4; i++)
        if (cfg[i] && sd_gguf_component_map(&f->ldm, c->family, bits[i])) have |= bits[i];
    unsigned want = components ? components : have;
    const bool decoder_only = (want & SD_GGUF_VAE_DECODER) && !(want & SD_GGUF_VAE);
    if (decoder_only) want = (want & ~(unsigned)SD_GGUF_VAE_DECODER) | SD_GGUF_VAE;
    if (want & SD_GGUF_IF_PRESENT) want &= have;
    for (int i = 0; i < 4; i++)
        if ((want & bits[i]) && !(have & bits[i]))
            return rb_error_set(err, RB_E_NOT_FOUND, "%s: the file has no %s (family %s)", f->label,
                                component_name(bits[i]), sd_family_name(c->family));
    rb_status s = sd_gguf_configs_copy(c, &out->cfg, err);
    if (s != RB_OK) return s;
    out->cfg.has_text = want & SD_GGUF_TEXT;
    out->cfg.has_text_2 = want & SD_GGUF_TEXT_2;
    out->cfg.has_unet = want & SD_GGUF_UNET;
    out->cfg.has_vae = want & SD_GGUF_VAE;
    out->cfg.vae.decoder_only = decoder_only;
    const rb_dtype act = opts ? opts->act_dtype : RB_F32;
    sd_weights ws;
    if ((want & SD_GGUF_TEXT) && (s = weights(f, SD_GGUF_TEXT, be, opts, &ws, err)) == RB_OK &&
        (s = sd_clip_text_create(&out->cfg.text, &ws, &out->text, err)) == RB_OK)
        s = rb_clip_text_set_act_dtype(out->text, act, err);
    if (s == RB_OK && (want & SD_GGUF_TEXT_2) && (s = weights(f, SD_GGUF_TEXT_2, be, opts, &ws, err)) == RB_OK &&
        (s = sd_clip_text_create(&out->cfg.text_2, &ws, &out->text_2, err)) == RB_OK)
        s = rb_clip_text_set_act_dtype(out->text_2, act, err);
    if (s == RB_OK && (want & SD_GGUF_UNET) && (s = weights(f, SD_GGUF_UNET, be, opts, &ws, err)) == RB_OK &&
        (s = sd_unet_create(&out->cfg.unet, &ws, &out->unet, err)) == RB_OK)
        s = rb_unet_set_act_dtype(out->unet, act, err);
    if (s == RB_OK && (want & SD_GGUF_VAE) && (s = weights(f, SD_GGUF_VAE, be, opts, &ws, err)) == RB_OK &&
        (s = sd_vae_create(&out->cfg.vae, &ws, &out->vae, err)) == RB_OK)
        s = rb_vae_set_act_dtype(out->vae, act, err);
    return s;
}

rb_status sd_gguf_load_from(sd_gguf *f, rb_backend *be, const rb_sd_load_opts *opts, unsigned components,
                            sd_gguf_model *out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "sd gguf: out is NULL");
    memset(out, 0, sizeof *out);
    if (!f || !be) return rb_error_set(err, RB_E_INVALID, "sd gguf: NULL argument");
    rb_status s = load(f, be, opts, components, out, err);
    if (s != RB_OK) {
        if (f->cfg_status == RB_OK && !f->cfg.exact && out->cfg.family)
            rb_error_prefix(err, "%s: with the %s family's published configs (the file carries none): ", f->label,
                            sd_family_name(f->cfg.family));
        sd_gguf_model_free(out);
    }
    return s;
}

rb_status sd_gguf_load(const char *path, const char *config_dir, rb_backend *be, const rb_sd_load_opts *opts,
                       unsigned components, sd_gguf_model *out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "sd gguf: out is NULL");
    memset(out, 0, sizeof *out);
    sd_gguf *f = NULL;
    rb_status s = sd_gguf_open(path, &f, err);
    if (s != RB_OK) return s;
    if (config_dir) {
        sd_gguf_configs c;
        if ((s = sd_convert_folder_configs(config_dir, &c, err)) == RB_OK) s = sd_gguf_use_configs(f, &c, err);
        else rb_error_prefix(err, "config folder %s: ", config_dir);
        sd_gguf_configs_free(&c);
    }
    if (s == RB_OK) s = sd_gguf_load_from(f, be, opts, components, out, err);
    sd_gguf_unref(f);
    return s;
}

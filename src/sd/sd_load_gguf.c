/* GGUF files as a model source of rb_sd_model_load: the file's networks
 * (sd_gguf_load, which reads every layout sd_gguf.h lists) become the
 * model's, in the pipeline's text-encoder order; the configs are the file's
 * rbee.sd.* keys, or its family's published ones fitted to the tensors, or
 * (o->config_dir) a diffusers folder's; the scheduler config is the file's
 * (or the folder's), else its family's; the tokenizers are the shipped
 * OpenAI vocabulary with the file's pad tokens. A file without text
 * encoders (a UNet alone, as ComfyUI-GGUF publishes them) cannot make a
 * pipeline by itself and is refused with a message saying so. */
#include "sd/sd_convert.h"
#include "sd/sd_gguf.h"
#include "sd/sd_sd3_gguf.h"
#include "sd/sd_pipeline_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rb_sd_arch arch_of(sd_family f) {
    switch (f) {
    case SD_FAMILY_SD1: return RB_SD_ARCH_SD1;
    case SD_FAMILY_SD2: return RB_SD_ARCH_SD2;
    case SD_FAMILY_SDXL: return RB_SD_ARCH_SDXL;
    default: return RB_SD_ARCH_SDXL_REFINER;
    }
}

static rb_sd_family sched_family(rb_sd_arch a) {
    switch (a) {
    case RB_SD_ARCH_SD1: return RB_SD_FAMILY_SD1;
    case RB_SD_ARCH_SD2: return RB_SD_FAMILY_SD2;
    default: return RB_SD_FAMILY_SDXL;
    }
}

/* Text slot i of the arch: which of the file's encoders (SD_GGUF_TEXT or
 * SD_GGUF_TEXT_2) and whether it is an OpenCLIP one. */
static unsigned slot_bit(rb_sd_arch a, int i) {
    if (a == RB_SD_ARCH_SDXL_REFINER || (a == RB_SD_ARCH_SDXL && i == 1)) return SD_GGUF_TEXT_2;
    return SD_GGUF_TEXT;
}

/* The file's pad tokens in slot order (tokenizer / tokenizer_2). */
static void slot_pads(const rb_sd_model *m, const sd_gguf_configs *c, const char *pads[SD_MAX_ENC]) {
    for (int i = 0; i < SD_MAX_ENC; i++)
        pads[i] = i < m->n_enc ? c->pad_token[slot_bit(m->arch, i) == SD_GGUF_TEXT_2 ? 1 : 0] : NULL;
}

/* The model's configs, text slots and scheduler from the file's configs. */
static rb_status describe(rb_sd_model *m, const sd_gguf *f, const rb_sd_model_opts *o, rb_error *err) {
    const sd_gguf_configs *c = &f->cfg;
    m->arch = arch_of(c->family);
    m->n_enc = m->arch == RB_SD_ARCH_SDXL ? 2 : 1;
    for (int i = 0; i < m->n_enc; i++) {
        sd_text_slot *t = &m->enc[i];
        const bool second = slot_bit(m->arch, i) == SD_GGUF_TEXT_2;
        if (second ? !c->has_text_2 : !c->has_text)
            return rb_error_set(err, RB_E_UNSUPPORTED, "%s: the file has no %s (a %s file without its text encoders, "
                                "as UNet-only GGUF files are, needs them from elsewhere, which rbee does not combine: "
                                "convert the whole pipeline with `rbee convert`)",
                                f->label, second ? "text_encoder_2" : "text_encoder", rb_sd_arch_name(m->arch));
        t->cfg = second ? c->text_2 : c->text;
        t->open_clip = !(m->arch == RB_SD_ARCH_SD1 || (m->arch == RB_SD_ARCH_SDXL && i == 0));
        snprintf(t->comp, sizeof t->comp, "%s", second ? "text_encoder_2" : "text_encoder");
    }
    m->has_unet_cfg = c->has_unet;
    if (c->has_unet) m->unet_cfg = c->unet;
    m->has_vae_cfg = c->has_vae;
    if (c->has_vae) m->vae_cfg = c->vae;
    if (c->scheduler_json) {
        rb_status s = rb_sd_sched_config_parse(&m->sched, c->scheduler_json, strlen(c->scheduler_json), err);
        if (s != RB_OK) {
            rb_error_prefix(err, "%s: scheduler config: ", f->label);
            return s;
        }
    } else {
        SDP_TRY(rb_sd_sched_config_family(&m->sched, sched_family(m->arch), err));
        m->sched.prediction_type =
            sd_single_prediction(m->arch, false, o ? o->prediction : RB_SD_PREDICT_AUTO, m->sched.prediction_type);
        m->sched.set |= RB_SD_CFG_PREDICTION_TYPE;
    }
    m->default_w = m->default_h = sd_default_size(m->arch, m->sched.prediction_type);
    if (c->sample_size[0] > 0 && c->has_vae) { /* as a diffusers folder: the UNet's sample size x the VAE's scale */
        const int scale = 1 << (c->vae.n_levels - 1);
        m->default_h = c->sample_size[0] * scale;
        m->default_w = c->sample_size[1] * scale;
    }
    m->force_zeros = m->arch == RB_SD_ARCH_SDXL || m->arch == RB_SD_ARCH_SDXL_REFINER;
    const char *pads[SD_MAX_ENC];
    slot_pads(m, c, pads);
    return sd_model_default_tokenizers(m, o ? o->vocab_path : NULL, pads, true, err);
}

/* The SD_GGUF_* bits of the RB_SD_LOAD_* components asked for. */
static unsigned gguf_bits(const rb_sd_model *m, const sd_gguf *f, unsigned comp) {
    unsigned b = 0;
    if (comp & RB_SD_LOAD_TEXT)
        for (int i = 0; i < m->n_enc; i++) b |= slot_bit(m->arch, i);
    if (comp & RB_SD_LOAD_UNET) b |= SD_GGUF_UNET;
    if ((comp & RB_SD_LOAD_VAE_ENCODER) && f->ldm.vae_shape.has_encoder)
        b |= SD_GGUF_VAE;
    else if (comp & (RB_SD_LOAD_VAE_DECODER | RB_SD_LOAD_VAE_ENCODER))
        b |= SD_GGUF_VAE_DECODER;
    return b;
}

rb_status sd_load_gguf(const char *path, rb_backend *be, const rb_sd_model_opts *o, rb_sd_model **out,
                       rb_error *err) {
    rb_sd_model *m = NULL;
    sd_gguf *f = NULL;
    sd_gguf_model gm;
    memset(&gm, 0, sizeof gm);
    rb_status s = sd_model_new(be, "gguf", path, &m, err);
    if (s != RB_OK) return s;
    rb_gguf *g = NULL;
    bool sd3 = false;
    if (rb_gguf_open(path, &g, NULL) == RB_OK) { /* SD3 files (general.architecture sd3) have their own reader */
        sd3 = sd_sd3_gguf_is(g);
        rb_gguf_close(g);
    }
    if (sd3) {
        if ((s = sd_load_sd3_gguf(m, path, o, err)) == RB_OK && (s = sd_model_finish(m, o, err)) == RB_OK) {
            *out = m;
            return RB_OK;
        }
        rb_sd_model_free(m);
        return s;
    }
    if ((s = sd_gguf_open(path, &f, err)) != RB_OK) goto done;
    if (o && o->config_dir) {
        sd_gguf_configs c;
        if ((s = sd_convert_folder_configs(o->config_dir, &c, err)) == RB_OK) s = sd_gguf_use_configs(f, &c, err);
        else rb_error_prefix(err, "config_dir %s: ", o->config_dir);
        sd_gguf_configs_free(&c);
        if (s != RB_OK) goto done;
    }
    if (f->cfg_status != RB_OK) {
        s = rb_error_set(err, f->cfg_status, "%s: %s (give the configs: config_dir, a diffusers folder)", path,
                         f->cfg_msg);
        goto done;
    }
    if ((s = describe(m, f, o, err)) != RB_OK) goto done;
    unsigned comp = sd_opts_components(o);
    if (!f->ldm.vae_shape.has_encoder) comp &= ~(unsigned)RB_SD_LOAD_VAE_ENCODER;
    rb_sd_load_opts lo;
    sd_net_opts(o, &lo);
    if ((s = sd_gguf_load_from(f, be, &lo, gguf_bits(m, f, comp), &gm, err)) != RB_OK) goto done;
    for (int i = 0; i < m->n_enc; i++) {
        rb_clip_text **src = slot_bit(m->arch, i) == SD_GGUF_TEXT_2 ? &gm.text_2 : &gm.text;
        m->enc[i].enc = *src;
        *src = NULL;
    }
    m->unet = gm.unet;
    m->vae = gm.vae;
    gm.unet = NULL;
    gm.vae = NULL;
    if (m->vae) m->vae_cfg.decoder_only = gm.cfg.vae.decoder_only;
    m->components = comp;
    s = sd_model_finish(m, o, err);
done:
    sd_gguf_model_free(&gm);
    sd_gguf_unref(f); /* the networks hold their own references on the mapping */
    if (s != RB_OK) {
        rb_sd_model_free(m);
        return s;
    }
    *out = m;
    return RB_OK;
}

/* Single-file checkpoints (original LDM / SGM names, as AUTOMATIC1111 and
 * ComfyUI users keep them): the tensors are seen through diffusers' names
 * (sd_ldm), the family and the structure come from them, and the configs
 * are the family's published ones with every width, depth and channel
 * count replaced by what the tensors show, or, with config_dir, a diffusers
 * folder's. The networks bind their weights through the name tables, so
 * the file's bytes are used in place where the backend can (CPU, same
 * dtype). sd_load_ldm_tensors takes a list of tensors from any container,
 * so other file formats (GGUF) reuse everything after reading. SD3 / SD3.5
 * single files (joint_blocks) go to sd_load_sd3_single. */
#include "sd/sd_pipeline_internal.h"

#include "sd/sd_nets.h"
#include "sd/sd_sd3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const rb_st_tensor *ldm_lookup(const sd_weights *w, const char *name) {
    return sd_name_map_find((const sd_name_map *)w->lookup_ctx, name);
}

static rb_sd_arch arch_of(sd_family f) {
    switch (f) {
    case SD_FAMILY_SD1: return RB_SD_ARCH_SD1;
    case SD_FAMILY_SD2: return RB_SD_ARCH_SD2;
    case SD_FAMILY_SDXL: return RB_SD_ARCH_SDXL;
    default: return RB_SD_ARCH_SDXL_REFINER;
    }
}

/* Name table of text slot i for the arch: CLIP ViT-L is text1, OpenCLIP text2. */
static sd_name_map *slot_map(sd_ldm *l, rb_sd_arch a, int i) {
    if (a == RB_SD_ARCH_SD1 || (a == RB_SD_ARCH_SDXL && i == 0)) return &l->text1;
    return &l->text2;
}

static const sd_ldm_text_shape *slot_shape(const sd_ldm *l, rb_sd_arch a, int i) {
    if (a == RB_SD_ARCH_SD1 || (a == RB_SD_ARCH_SDXL && i == 0)) return &l->text1_shape;
    return &l->text2_shape;
}

static void clip_from_shape(rb_sd_arch a, int slot, const sd_ldm_text_shape *s, rb_clip_text_config *c) {
    const bool open_clip = !(a == RB_SD_ARCH_SD1 || (a == RB_SD_ARCH_SDXL && slot == 0));
    if (!open_clip)
        sd_default_clip_l(c);
    else if (a == RB_SD_ARCH_SD2)
        sd_default_clip_h(c);
    else
        sd_default_clip_g(c);
    c->hidden_size = s->hidden;
    c->intermediate_size = s->intermediate;
    c->n_layers = s->n_layers;
    c->vocab_size = s->vocab;
    c->max_positions = s->positions;
    if (s->hidden % 64 == 0) c->n_heads = s->hidden / 64; /* every published CLIP text tower: head size 64 */
    if (c->with_projection) c->projection_dim = s->projection;
}

rb_status sd_unet_config_from_ldm(rb_sd_arch arch, const sd_ldm_unet_shape *sh, int64_t pooled_dim, rb_unet_config *u,
                                  rb_error *err) {
    sd_default_unet(arch, u);
    const int n = sh->n_levels;
    if (n < 1 || n > RB_SD_MAX_LEVELS) return rb_error_set(err, RB_E_FORMAT, "UNet with %d levels", n);
    u->n_levels = n;
    for (int l = 0; l < n; l++) {
        u->block_out_channels[l] = sh->channels[l];
        u->down_cross_attn[l] = u->up_cross_attn[l] = sh->attention[l];
        u->layers_per_block[l] = sh->layers_per_block;
        u->n_heads[l] = sd_default_heads(arch, sh->channels[l]);
        u->transformer_layers[l] = sh->attention[l] ? sh->depth[l] : 1;
    }
    u->mid_block = sh->mid_depth > 0;
    if (u->mid_block) {
        if (sh->attention[n - 1] && sh->depth[n - 1] != sh->mid_depth)
            return rb_error_set(err, RB_E_UNSUPPORTED, "UNet: the middle block's %d transformer layers differ from the "
                                "deepest level's %d", sh->mid_depth, sh->depth[n - 1]);
        u->transformer_layers[n - 1] = sh->mid_depth;
    }
    u->in_channels = sh->in_channels;
    u->out_channels = sh->out_channels;
    u->cross_attention_dim = sh->context_dim;
    u->use_linear_projection = sh->linear_projection;
    u->time_embed_dim = 4 * sh->channels[0];
    const bool xl = arch == RB_SD_ARCH_SDXL || arch == RB_SD_ARCH_SDXL_REFINER;
    if (xl != (sh->adm_in_channels > 0))
        return rb_error_set(err, RB_E_FORMAT, "UNet: %s label_emb for an %s checkpoint", xl ? "no" : "a",
                            rb_sd_arch_name(arch));
    u->add_text_time = xl;
    if (xl) {
        /* label_emb input = pooled text embedding + n_ids sinusoidal embeddings of the time ids */
        const int n_ids = arch == RB_SD_ARCH_SDXL ? 6 : 5;
        const int64_t rest = sh->adm_in_channels - pooled_dim;
        if (rest <= 0 || rest % n_ids)
            return rb_error_set(err, RB_E_FORMAT, "UNet: label_emb input %lld is not the pooled width %lld + %d time "
                                "ids", (long long)sh->adm_in_channels, (long long)pooled_dim, n_ids);
        u->projection_class_embeddings_input_dim = sh->adm_in_channels;
        u->addition_time_embed_dim = rest / n_ids;
    }
    return RB_OK;
}

static void vae_from_shape(rb_sd_model *m, const sd_ldm_vae_shape *sh) {
    rb_vae_config *v = &m->vae_cfg;
    sd_default_vae(m->arch, v);
    v->n_levels = sh->n_levels;
    for (int l = 0; l < sh->n_levels && l < RB_SD_MAX_LEVELS; l++) v->block_out_channels[l] = sh->channels[l];
    v->layers_per_block = sh->layers_per_block;
    v->latent_channels = sh->latent_channels;
    m->has_vae_cfg = true;
}

static rb_status configs_from_shapes(rb_sd_model *m, const sd_ldm *l, const char *vocab_path, rb_error *err) {
    static const rb_sd_family fam[] = {RB_SD_FAMILY_SD1, RB_SD_FAMILY_SD2, RB_SD_FAMILY_SDXL, RB_SD_FAMILY_SDXL};
    SDP_TRY(rb_sd_sched_config_family(&m->sched, fam[m->arch], err));
    m->n_enc = m->arch == RB_SD_ARCH_SDXL ? 2 : 1;
    for (int i = 0; i < m->n_enc; i++) {
        sd_text_slot *t = &m->enc[i];
        t->open_clip = !(m->arch == RB_SD_ARCH_SD1 || (m->arch == RB_SD_ARCH_SDXL && i == 0));
        snprintf(t->comp, sizeof t->comp, "%s",
                 m->arch == RB_SD_ARCH_SDXL_REFINER || (m->arch == RB_SD_ARCH_SDXL && i == 1) ? "text_encoder_2"
                                                                                             : "text_encoder");
    }
    SDP_TRY(sd_model_default_tokenizers(m, vocab_path, NULL, true, err));
    for (int i = 0; i < m->n_enc; i++) {
        sd_text_slot *t = &m->enc[i];
        const sd_ldm_text_shape *s = slot_shape(l, m->arch, i);
        if (!s->present) return rb_error_set(err, RB_E_FORMAT, "no text encoder %d", i + 1);
        clip_from_shape(m->arch, i, s, &t->cfg);
        if (t->cfg.hidden_size % 64)
            return rb_error_set(err, RB_E_UNSUPPORTED, "text encoder %d is %lld wide, not a multiple of the published "
                                "models' head size 64: its heads cannot be inferred (give config_dir)", i + 1,
                                (long long)t->cfg.hidden_size);
    }
    SDP_TRY(sd_unet_config_from_ldm(m->arch, &l->unet_shape, m->enc[m->n_enc - 1].cfg.projection_dim, &m->unet_cfg,
                                    err));
    m->has_unet_cfg = true;
    vae_from_shape(m, &l->vae_shape);
    m->force_zeros = m->arch == RB_SD_ARCH_SDXL || m->arch == RB_SD_ARCH_SDXL_REFINER;
    return RB_OK;
}

rb_sd_prediction sd_single_prediction(rb_sd_arch arch, bool has_v_pred, rb_sd_predict_opt opt,
                                     rb_sd_prediction family_default) {
    switch (opt) {
    case RB_SD_PREDICT_EPSILON: return RB_SD_PRED_EPSILON;
    case RB_SD_PREDICT_V: return RB_SD_PRED_V;
    case RB_SD_PREDICT_SAMPLE: return RB_SD_PRED_SAMPLE;
    default: break;
    }
    /* SD 2.x: v_prediction, as diffusers' from_single_file (stable-diffusion-2-1) */
    if (has_v_pred || arch == RB_SD_ARCH_SD2) return RB_SD_PRED_V;
    return family_default;
}

rb_status sd_load_ldm_tensors(rb_sd_model *m, const sd_tensor_list *tl, const char *label, bool has_v_pred,
                              const rb_sd_model_opts *o, rb_error *err) {
    m->ldm = calloc(1, sizeof *m->ldm);
    if (!m->ldm) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    rb_status s = sd_ldm_build(tl, m->ldm, err);
    if (s != RB_OK) {
        free(m->ldm);
        m->ldm = NULL;
        rb_error_prefix(err, "%s: ", label);
        return s;
    }
    const rb_sd_arch arch = arch_of(m->ldm->family);
    if (o && o->config_dir) {
        if ((s = sd_read_folder(m, o->config_dir, err)) != RB_OK) {
            rb_error_prefix(err, "config_dir: ");
            return s;
        }
        if (m->arch != arch)
            return rb_error_set(err, RB_E_FORMAT, "%s is an %s checkpoint but config_dir %s is an %s pipeline", label,
                                rb_sd_arch_name(arch), o->config_dir, rb_sd_arch_name(m->arch));
        if (has_v_pred) {
            m->sched.prediction_type = RB_SD_PRED_V;
            m->sched.set |= RB_SD_CFG_PREDICTION_TYPE;
        }
    } else {
        m->arch = arch;
        if ((s = configs_from_shapes(m, m->ldm, o ? o->vocab_path : NULL, err)) != RB_OK) {
            rb_error_prefix(err, "%s: ", label);
            return s;
        }
        m->sched.prediction_type =
            sd_single_prediction(arch, has_v_pred, o ? o->prediction : RB_SD_PREDICT_AUTO, m->sched.prediction_type);
        m->sched.set |= RB_SD_CFG_PREDICTION_TYPE;
        m->default_w = m->default_h = sd_default_size(arch, m->sched.prediction_type);
    }
    unsigned comp = sd_opts_components(o);
    if (!m->ldm->vae_shape.has_encoder) comp &= ~(unsigned)RB_SD_LOAD_VAE_ENCODER;
    rb_sd_load_opts lo;
    sd_net_opts(o, &lo);
    sd_weights ws;
    char lab[600];
    if (comp & RB_SD_LOAD_TEXT) {
        for (int i = 0; i < m->n_enc; i++) {
            snprintf(lab, sizeof lab, "%s (%s)", label, m->enc[i].comp);
            if ((s = sd_weights_init(&ws, NULL, false, ldm_lookup, slot_map(m->ldm, m->arch, i), lab, m->be, &lo,
                                     err)) != RB_OK ||
                (s = sd_clip_text_create(&m->enc[i].cfg, &ws, &m->enc[i].enc, err)) != RB_OK)
                return s;
        }
    }
    if (comp & RB_SD_LOAD_UNET) {
        snprintf(lab, sizeof lab, "%s (unet)", label);
        if ((s = sd_weights_init(&ws, NULL, false, ldm_lookup, &m->ldm->unet, lab, m->be, &lo, err)) != RB_OK ||
            (s = sd_unet_create(&m->unet_cfg, &ws, &m->unet, err)) != RB_OK)
            return s;
    }
    if (comp & (RB_SD_LOAD_VAE_DECODER | RB_SD_LOAD_VAE_ENCODER)) {
        m->vae_cfg.decoder_only = !(comp & RB_SD_LOAD_VAE_ENCODER);
        snprintf(lab, sizeof lab, "%s (vae)", label);
        if ((s = sd_weights_init(&ws, NULL, false, ldm_lookup, &m->ldm->vae, lab, m->be, &lo, err)) != RB_OK ||
            (s = sd_vae_create(&m->vae_cfg, &ws, &m->vae, err)) != RB_OK)
            return s;
    }
    m->components = comp;
    return RB_OK;
}

rb_status sd_load_single_file(const char *path, rb_backend *be, const rb_sd_model_opts *o, rb_sd_model **out,
                              rb_error *err) {
    rb_sd_model *m = NULL;
    rb_status s = sd_model_new(be, "single-file", path, &m, err);
    if (s != RB_OK) return s;
    if ((s = rb_st_open(path, &m->ckpt, err)) != RB_OK) goto fail;
    const bool v_pred = rb_st_find(m->ckpt, "v_pred") != NULL;
    sd_tensor_list tl;
    if ((s = sd_tensor_list_st(m->ckpt, &tl, err)) != RB_OK) goto fail;
    if (sd_sd3_detect(&tl)) /* SD3 / SD3.5: the MMDiT's joint_blocks */
        s = sd_load_sd3_single(m, &tl, path, o, err);
    else
        s = sd_load_ldm_tensors(m, &tl, path, v_pred, o, err);
    sd_tensor_list_free(&tl); /* the name tables hold copies of the entries; the data stays in m->ckpt */
    if (s != RB_OK) goto fail;
    if ((s = sd_model_finish(m, o, err)) != RB_OK) goto fail;
    *out = m;
    return RB_OK;
fail:
    rb_sd_model_free(m);
    return s;
}

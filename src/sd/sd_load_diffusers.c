/* Loading a diffusers pipeline folder: model_index.json says which pipeline
 * class and which components (["library", "Class"] or [null, null]); each
 * named component must be a folder with its config (and, for networks, its
 * weights, or their fp16 variant). SD 1.x / 2.x pipelines have one text
 * encoder, SDXL two (CLIPTextModel + CLIPTextModelWithProjection), the SDXL
 * refiner only the second. sd_read_folder is also how a single-file
 * checkpoint takes its configs from a folder (config_dir). */
#include "sd/sd_pipeline_internal.h"

#include "sd/sd_cfg.h"
#include "sd/sd_nets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool dir_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static rb_status path_join(char *out, size_t cap, const char *dir, const char *a, const char *b, rb_error *err) {
    int n = snprintf(out, cap, "%s/%s%s%s", dir, a, b ? "/" : "", b ? b : "");
    if (n < 0 || (size_t)n >= cap) return rb_error_set(err, RB_E_INVALID, "path too long: %s/%s", dir, a);
    return RB_OK;
}

/* model_index.json entry of a component: its class name, or NULL when the
 * entry is absent or [null, null]. */
static rb_status component_class(const sd_cfg *j, const char *key, const char **cls) {
    *cls = NULL;
    json_t *v = json_object_get(j->root, key);
    if (!v || json_is_null(v)) return RB_OK;
    if (!json_is_array(v) || json_array_size(v) != 2)
        return rb_error_set(j->err, RB_E_FORMAT, "%s: '%s' must be [library, class]", j->path, key);
    json_t *c = json_array_get(v, 1);
    if (json_is_null(c)) return RB_OK;
    if (!json_is_string(c)) return rb_error_set(j->err, RB_E_FORMAT, "%s: '%s' class must be a string", j->path, key);
    *cls = json_string_value(c);
    return RB_OK;
}

static rb_status want_class(const sd_cfg *j, const char *key, const char *cls, const char *a, const char *b) {
    if (strcmp(cls, a) == 0 || (b && strcmp(cls, b) == 0)) return RB_OK;
    return rb_error_set(j->err, RB_E_UNSUPPORTED, "%s: component %s is a %s (%s%s%s expected)", j->path, key, cls, a,
                        b ? " or " : "", b ? b : "");
}

/* The component folder must exist. */
static rb_status need_dir(const char *dir, const char *comp, char *out, size_t cap, rb_error *err) {
    SD_TRY_J(path_join(out, cap, dir, comp, NULL, err));
    if (!dir_exists(out))
        return rb_error_set(err, RB_E_NOT_FOUND, "%s: model_index.json names the component '%s' but the folder is missing",
                            dir, comp);
    return RB_OK;
}

/* unet/config.json sample_size (an integer or [h, w]); 0 when absent. */
static void sample_size(const char *unet_cfg, int *h, int *w) {
    *h = *w = 0;
    sd_cfg j;
    if (sd_cfg_open(&j, unet_cfg, NULL) != RB_OK) return;
    json_t *v = json_object_get(j.root, "sample_size");
    if (json_is_integer(v)) {
        *h = *w = (int)json_integer_value(v);
    } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_integer(json_array_get(v, 0)) &&
               json_is_integer(json_array_get(v, 1))) {
        *h = (int)json_integer_value(json_array_get(v, 0));
        *w = (int)json_integer_value(json_array_get(v, 1));
    }
    sd_cfg_close(&j);
    if (*h < 1 || *h > 4096 || *w < 1 || *w > 4096) *h = *w = 0;
}

static rb_status read_index(rb_sd_model *m, const sd_cfg *j, const char *dir) {
    rb_error *err = j->err;
    const char *pipe = NULL;
    SD_TRY_J(sd_cfg_str(j, "_class_name", &pipe));
    static const char *const known[] = {
        "StableDiffusionPipeline",   "StableDiffusionImg2ImgPipeline",   "StableDiffusionInpaintPipeline",
        "StableDiffusionXLPipeline", "StableDiffusionXLImg2ImgPipeline", "StableDiffusionXLInpaintPipeline",
    };
    bool ok = false;
    for (size_t i = 0; pipe && i < sizeof known / sizeof known[0]; i++) ok |= strcmp(pipe, known[i]) == 0;
    if (!ok)
        return rb_error_set(err, RB_E_UNSUPPORTED, "%s: pipeline class %s is not supported (Stable Diffusion 1.x, 2.x "
                            "and XL pipelines)", j->path, pipe ? pipe : "(none)");
    bool fz = strstr(pipe, "XL") != NULL; /* diffusers' default: True for the SDXL pipelines */
    SD_TRY_J(sd_cfg_bool(j, "force_zeros_for_empty_prompt", fz, &fz));
    m->force_zeros = fz;
    const char *cls;
    char p[1024];
    static const struct { const char *key, *a, *b; } nets[] = {
        {"unet", "UNet2DConditionModel", NULL},
        {"vae", "AutoencoderKL", NULL},
        {"scheduler", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++) {
        SD_TRY_J(component_class(j, nets[i].key, &cls));
        if (!cls) return rb_error_set(err, RB_E_FORMAT, "%s: no '%s' component", j->path, nets[i].key);
        if (nets[i].a) SD_TRY_J(want_class(j, nets[i].key, cls, nets[i].a, nets[i].b));
        SD_TRY_J(need_dir(dir, nets[i].key, p, sizeof p, err));
    }
    static const struct { const char *enc, *tok, *cls; } encs[] = {
        {"text_encoder", "tokenizer", "CLIPTextModel"},
        {"text_encoder_2", "tokenizer_2", "CLIPTextModelWithProjection"},
    };
    m->n_enc = 0;
    for (int i = 0; i < 2; i++) {
        SD_TRY_J(component_class(j, encs[i].enc, &cls));
        if (!cls) continue;
        SD_TRY_J(want_class(j, encs[i].enc, cls, encs[i].cls, i == 1 ? NULL : "CLIPTextModelWithProjection"));
        const char *tcls;
        SD_TRY_J(component_class(j, encs[i].tok, &tcls));
        if (!tcls) return rb_error_set(err, RB_E_FORMAT, "%s: %s has no %s", j->path, encs[i].enc, encs[i].tok);
        SD_TRY_J(want_class(j, encs[i].tok, tcls, "CLIPTokenizer", "CLIPTokenizerFast"));
        SD_TRY_J(need_dir(dir, encs[i].enc, p, sizeof p, err));
        SD_TRY_J(need_dir(dir, encs[i].tok, p, sizeof p, err));
        sd_text_slot *t = &m->enc[m->n_enc++];
        snprintf(t->comp, sizeof t->comp, "%s", encs[i].enc);
        char cfg[1024];
        SD_TRY_J(path_join(cfg, sizeof cfg, dir, encs[i].enc, "config.json", err));
        SD_TRY_J(rb_clip_text_config_load(cfg, &t->cfg, err));
        rb_status s = rb_clip_tokenizer_load_dir(p, &t->tok, err);
        if (s != RB_OK) {
            rb_error_prefix(err, "%s: ", encs[i].tok);
            return s;
        }
        t->open_clip = rb_clip_pad_id(t->tok) != rb_clip_eos_id(t->tok);
    }
    if (m->n_enc == 0) return rb_error_set(err, RB_E_FORMAT, "%s: no text encoder", j->path);
    return RB_OK;
}

rb_status sd_read_folder(rb_sd_model *m, const char *dir, rb_error *err) {
    char p[1024];
    SD_TRY_J(path_join(p, sizeof p, dir, "model_index.json", NULL, err));
    struct stat st;
    if (stat(p, &st) != 0)
        return rb_error_set(err, RB_E_NOT_FOUND, "%s: not a diffusers pipeline folder (no model_index.json)", dir);
    sd_cfg j;
    SD_TRY_J(sd_cfg_open(&j, p, err));
    if (sd_folder_is_sd3(p)) {
        rb_status s3 = sd_read_sd3_folder(m, &j, dir, err);
        sd_cfg_close(&j);
        return s3;
    }
    rb_status s = read_index(m, &j, dir);
    sd_cfg_close(&j);
    SD_TRY_J(s);
    SD_TRY_J(path_join(p, sizeof p, dir, "unet", "config.json", err));
    SD_TRY_J(rb_unet_config_load(p, &m->unet_cfg, err));
    m->has_unet_cfg = true;
    int sh, sw;
    sample_size(p, &sh, &sw);
    SD_TRY_J(path_join(p, sizeof p, dir, "vae", "config.json", err));
    SD_TRY_J(rb_vae_config_load(p, &m->vae_cfg, err));
    m->has_vae_cfg = true;
    const int scale = 1 << (m->vae_cfg.n_levels - 1);
    m->default_h = sh * scale;
    m->default_w = sw * scale;
    SD_TRY_J(path_join(p, sizeof p, dir, "scheduler", "scheduler_config.json", err));
    SD_TRY_J(rb_sd_sched_config_load(&m->sched, p, err));
    if (m->unet_cfg.add_text_time) {
        if (m->n_enc == 2)
            m->arch = RB_SD_ARCH_SDXL;
        else if (strcmp(m->enc[0].comp, "text_encoder_2") == 0)
            m->arch = RB_SD_ARCH_SDXL_REFINER;
        else
            return rb_error_set(err, RB_E_FORMAT, "%s: an SDXL UNet needs text_encoder_2 (and text_encoder for the base "
                                "model)", dir);
    } else {
        if (m->n_enc != 1 || strcmp(m->enc[0].comp, "text_encoder") != 0)
            return rb_error_set(err, RB_E_FORMAT, "%s: an SD 1.x / 2.x UNet takes one text encoder (text_encoder)", dir);
        m->arch = sd_arch_of_encoder(&m->enc[0].cfg);
    }
    return RB_OK;
}

rb_status sd_load_diffusers(const char *dir, rb_backend *be, const rb_sd_model_opts *o, rb_sd_model **out,
                            rb_error *err) {
    rb_sd_model *m = NULL;
    rb_status s = sd_model_new(be, "diffusers", dir, &m, err);
    if (s != RB_OK) return s;
    if ((s = sd_read_folder(m, dir, err)) != RB_OK) goto fail;

    const unsigned comp = sd_opts_components(o);
    rb_sd_load_opts lo;
    sd_net_opts(o, &lo);
    char p[1024];
    sd_weights ws;
    if (comp & RB_SD_LOAD_TEXT) {
        for (int i = 0; i < m->n_enc; i++) {
            if ((s = path_join(p, sizeof p, dir, m->enc[i].comp, NULL, err)) != RB_OK ||
                (s = sd_weights_open(&ws, p, "model", be, &lo, err)) != RB_OK ||
                (s = sd_clip_text_create(&m->enc[i].cfg, &ws, &m->enc[i].enc, err)) != RB_OK)
                goto fail;
        }
    }
    if ((comp & RB_SD_LOAD_TEXT) && m->arch == RB_SD_ARCH_SD3 && m->sd3_has_t5 && !(o && o->no_t5)) {
        if ((s = sd_load_sd3_t5(m, dir, &lo, err)) != RB_OK) goto fail;
    }
    if ((comp & RB_SD_LOAD_UNET) && m->arch == RB_SD_ARCH_SD3) {
        if ((s = sd_load_sd3_transformer(m, dir, &lo, err)) != RB_OK) goto fail;
    } else if (comp & RB_SD_LOAD_UNET) {
        if ((s = path_join(p, sizeof p, dir, "unet", NULL, err)) != RB_OK ||
            (s = sd_weights_open(&ws, p, "diffusion_pytorch_model", be, &lo, err)) != RB_OK ||
            (s = sd_unet_create(&m->unet_cfg, &ws, &m->unet, err)) != RB_OK)
            goto fail;
    }
    if (comp & (RB_SD_LOAD_VAE_DECODER | RB_SD_LOAD_VAE_ENCODER)) {
        m->vae_cfg.decoder_only = !(comp & RB_SD_LOAD_VAE_ENCODER);
        if ((s = path_join(p, sizeof p, dir, "vae", NULL, err)) != RB_OK ||
            (s = sd_weights_open(&ws, p, "diffusion_pytorch_model", be, &lo, err)) != RB_OK ||
            (s = sd_vae_create(&m->vae_cfg, &ws, &m->vae, err)) != RB_OK)
            goto fail;
    }
    m->components = comp;
    if ((s = sd_model_finish(m, o, err)) != RB_OK) goto fail;
    *out = m;
    return RB_OK;
fail:
    rb_sd_model_free(m);
    return s;
}

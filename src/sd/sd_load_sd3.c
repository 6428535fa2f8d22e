/* Loading a diffusers StableDiffusion3Pipeline folder: two CLIP text
 * encoders with projection (text_encoder: CLIP-L, text_encoder_2: CLIP-G)
 * and their CLIP tokenizers, the T5 encoder (text_encoder_3, optional: a
 * model loaded without it uses zeros for its part of the context, as
 * diffusers does with text_encoder_3=None), the SD3Transformer2DModel,
 * the 16-channel AutoencoderKL and the FlowMatchEulerDiscreteScheduler. */
#include "sd/sd_pipeline_internal.h"

#include "sd/sd_cfg.h"
#include "sd/sd_nets.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static rb_status join(char *out, size_t cap, const char *dir, const char *a, const char *b, rb_error *err) {
    int n = snprintf(out, cap, "%s/%s%s%s", dir, a, b ? "/" : "", b ? b : "");
    if (n < 0 || (size_t)n >= cap) return rb_error_set(err, RB_E_INVALID, "path too long: %s/%s", dir, a);
    return RB_OK;
}

/* The class of a model_index.json component, NULL when absent or [null, null]. */
static const char *comp_class(const sd_cfg *j, const char *key) {
    json_t *v = json_object_get(j->root, key);
    if (!json_is_array(v) || json_array_size(v) != 2) return NULL;
    return json_string_value(json_array_get(v, 1));
}

static rb_status need(const sd_cfg *j, const char *dir, const char *key, const char *cls, rb_error *err) {
    const char *c = comp_class(j, key);
    if (!c) return rb_error_set(err, RB_E_FORMAT, "%s: no '%s' component", j->path, key);
    if (cls && strcmp(c, cls) != 0)
        return rb_error_set(err, RB_E_UNSUPPORTED, "%s: component %s is a %s (%s expected)", j->path, key, c, cls);
    char p[1024];
    struct stat st;
    SD_TRY_J(join(p, sizeof p, dir, key, NULL, err));
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
        return rb_error_set(err, RB_E_NOT_FOUND, "%s: model_index.json names the component '%s' but the folder is missing",
                            dir, key);
    return RB_OK;
}

bool sd_folder_is_sd3(const char *index_path) {
    sd_cfg j;
    if (sd_cfg_open(&j, index_path, NULL) != RB_OK) return false;
    const char *pipe = NULL;
    const bool yes = sd_cfg_str(&j, "_class_name", &pipe) == RB_OK && pipe &&
                     (strcmp(pipe, "StableDiffusion3Pipeline") == 0 || strcmp(pipe, "StableDiffusion3Img2ImgPipeline") == 0);
    sd_cfg_close(&j);
    return yes;
}

rb_status sd_read_sd3_folder(rb_sd_model *m, const sd_cfg *j, const char *dir, rb_error *err) {
    char p[1024], t[1024];
    m->arch = RB_SD_ARCH_SD3;
    m->force_zeros = false; /* SD3 encodes an absent negative prompt as "" */
    SD_TRY_J(need(j, dir, "transformer", "SD3Transformer2DModel", err));
    SD_TRY_J(need(j, dir, "vae", "AutoencoderKL", err));
    SD_TRY_J(need(j, dir, "scheduler", NULL, err));
    static const char *const enc[2] = {"text_encoder", "text_encoder_2"}, *const tok[2] = {"tokenizer", "tokenizer_2"};
    m->n_enc = 0;
    for (int i = 0; i < 2; i++) {
        SD_TRY_J(need(j, dir, enc[i], "CLIPTextModelWithProjection", err));
        SD_TRY_J(need(j, dir, tok[i], NULL, err));
        sd_text_slot *s = &m->enc[m->n_enc++];
        snprintf(s->comp, sizeof s->comp, "%s", enc[i]);
        SD_TRY_J(join(p, sizeof p, dir, enc[i], "config.json", err));
        SD_TRY_J(rb_clip_text_config_load(p, &s->cfg, err));
        if (!s->cfg.with_projection)
            return rb_error_set(err, RB_E_FORMAT, "%s: SD3's %s must have a text projection", dir, enc[i]);
        SD_TRY_J(join(t, sizeof t, dir, tok[i], NULL, err));
        rb_status st = rb_clip_tokenizer_load_dir(t, &s->tok, err);
        if (st != RB_OK) {
            rb_error_prefix(err, "%s: ", tok[i]);
            return st;
        }
        s->open_clip = rb_clip_pad_id(s->tok) != rb_clip_eos_id(s->tok);
    }
    m->sd3_has_t5 = comp_class(j, "text_encoder_3") != NULL;
    SD_TRY_J(join(p, sizeof p, dir, "transformer", "config.json", err));
    SD_TRY_J(rb_mmdit_config_load(p, &m->mmdit_cfg, err));
    m->has_mmdit_cfg = true;
    SD_TRY_J(join(p, sizeof p, dir, "vae", "config.json", err));
    SD_TRY_J(rb_vae_config_load(p, &m->vae_cfg, err));
    m->has_vae_cfg = true;
    SD_TRY_J(join(p, sizeof p, dir, "scheduler", "scheduler_config.json", err));
    SD_TRY_J(rb_sd_sched_config_load(&m->sched, p, err));
    const int scale = 1 << (m->vae_cfg.n_levels - 1);
    m->default_w = m->default_h = (int)m->mmdit_cfg.sample_size * scale;
    return RB_OK;
}

rb_status sd_load_sd3_transformer(rb_sd_model *m, const char *dir, const rb_sd_load_opts *lo, rb_error *err) {
    char p[1024];
    sd_weights ws;
    SD_TRY_J(join(p, sizeof p, dir, "transformer", NULL, err));
    SD_TRY_J(sd_weights_open(&ws, p, "diffusion_pytorch_model", m->be, lo, err));
    return sd_mmdit_create(&m->mmdit_cfg, &ws, &m->mmdit, err);
}

rb_status sd_load_sd3_t5(rb_sd_model *m, const char *dir, const rb_sd_load_opts *lo, rb_error *err) {
    char e[1024], t[1024];
    SD_TRY_J(join(e, sizeof e, dir, "text_encoder_3", NULL, err));
    SD_TRY_J(join(t, sizeof t, dir, "tokenizer_3", NULL, err));
    rb_status s = rb_t5_text_load(e, t, m->be, lo, &m->t5, err);
    if (s != RB_OK) rb_error_prefix(err, "%s: ", dir);
    return s;
}

rb_status sd_sd3_finish(rb_sd_model *m, rb_error *err) {
    const char *nm = m->name;
    if (m->n_enc != 2 || !m->has_mmdit_cfg)
        return rb_error_set(err, RB_E_FORMAT, "%s: SD3 needs two CLIP text encoders and the transformer", nm);
    const rb_mmdit_config *c = &m->mmdit_cfg;
    const int64_t clip_w = m->enc[0].cfg.hidden_size + m->enc[1].cfg.hidden_size;
    const int64_t pooled = m->enc[0].cfg.projection_dim + m->enc[1].cfg.projection_dim;
    if (clip_w > c->joint_attention_dim)
        return rb_error_set(err, RB_E_FORMAT, "%s: the CLIP encoders' widths %lld exceed the transformer's "
                            "joint_attention_dim %lld", nm, (long long)clip_w, (long long)c->joint_attention_dim);
    if (m->t5.enc && rb_t5_get_config(m->t5.enc)->d_model != c->joint_attention_dim)
        return rb_error_set(err, RB_E_FORMAT, "%s: the T5 encoder's width %lld differs from the transformer's "
                            "joint_attention_dim %lld", nm, (long long)rb_t5_get_config(m->t5.enc)->d_model,
                            (long long)c->joint_attention_dim);
    if (pooled != c->pooled_projection_dim)
        return rb_error_set(err, RB_E_FORMAT, "%s: the CLIP projections %lld + %lld differ from the transformer's "
                            "pooled_projection_dim %lld", nm, (long long)m->enc[0].cfg.projection_dim,
                            (long long)m->enc[1].cfg.projection_dim, (long long)c->pooled_projection_dim);
    if (m->has_vae_cfg && (c->in_channels != m->vae_cfg.latent_channels || c->out_channels != m->vae_cfg.latent_channels))
        return rb_error_set(err, RB_E_FORMAT, "%s: transformer channels in %lld / out %lld do not fit the VAE's %lld "
                            "latent channels", nm, (long long)c->in_channels, (long long)c->out_channels,
                            (long long)m->vae_cfg.latent_channels);
    return RB_OK;
}

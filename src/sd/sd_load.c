/* rb_sd_model_load: which loader a path goes to (a table of sources:
 * diffusers folder, GGUF file, single-file safetensors checkpoint; a new
 * container plugs in as one more row), the model object shared by all of
 * them, and the checks every loaded model passes (the components fit each
 * other: text widths = the UNet's cross-attention width, SDXL's pooled
 * width + time ids = the UNet's added-embedding input, latent channels). */
#include "sd/sd_pipeline_internal.h"
#include "sd/sd_sd3.h"
#include "rbee/data_path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *rb_sd_arch_name(rb_sd_arch a) {
    switch (a) {
    case RB_SD_ARCH_SD1: return "sd1";
    case RB_SD_ARCH_SD2: return "sd2";
    case RB_SD_ARCH_SDXL: return "sdxl";
    case RB_SD_ARCH_SDXL_REFINER: return "sdxl-refiner";
    case RB_SD_ARCH_SD3: return "sd3";
    default: return "unknown";
    }
}

rb_status rb_sd_predict_parse(const char *name, rb_sd_predict_opt *out, rb_error *err) {
    static const struct { const char *name; rb_sd_predict_opt v; } k[] = {
        {"auto", RB_SD_PREDICT_AUTO}, {"epsilon", RB_SD_PREDICT_EPSILON}, {"eps", RB_SD_PREDICT_EPSILON},
        {"v", RB_SD_PREDICT_V},       {"v_prediction", RB_SD_PREDICT_V},  {"sample", RB_SD_PREDICT_SAMPLE},
    };
    for (size_t i = 0; name && i < sizeof k / sizeof k[0]; i++)
        if (strcmp(name, k[i].name) == 0) {
            *out = k[i].v;
            return RB_OK;
        }
    return rb_error_set(err, RB_E_INVALID, "unknown prediction type '%s' (auto, epsilon, v, sample)",
                        name ? name : "(null)");
}

void rb_sd_model_opts_init(rb_sd_model_opts *o) {
    if (o) memset(o, 0, sizeof *o);
}

unsigned sd_opts_components(const rb_sd_model_opts *o) {
    unsigned c = o ? o->components & RB_SD_LOAD_ALL : 0;
    return c ? c : RB_SD_LOAD_ALL;
}

void sd_net_opts(const rb_sd_model_opts *o, rb_sd_load_opts *lo) {
    memset(lo, 0, sizeof *lo);
    if (!o) return;
    lo->weight_dtype = o->weight_dtype;
    lo->variant = o->variant;
}

rb_sd_arch sd_arch_of_encoder(const rb_clip_text_config *c) {
    return c->act == RB_CLIP_ACT_QUICK_GELU ? RB_SD_ARCH_SD1 : RB_SD_ARCH_SD2;
}

int sd_unet_time_ids(const rb_unet_config *u, int64_t pooled_dim) {
    if (!u->add_text_time) return 0;
    const int64_t rest = u->projection_class_embeddings_input_dim - pooled_dim;
    if (rest <= 0 || u->addition_time_embed_dim < 1 || rest % u->addition_time_embed_dim) return -1;
    const int64_t n = rest / u->addition_time_embed_dim;
    return n > 8 ? -1 : (int)n;
}

/* The file name without folders and extension (a folder's own name). */
static void model_name(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    size_t e = n;
    for (size_t i = n; i > b; i--)
        if (path[i - 1] == '.') {
            e = i - 1;
            break;
        }
    if (e == b) e = n;
    snprintf(out, cap, "%.*s", (int)(e - b), path + b);
}

rb_status sd_model_new(rb_backend *be, const char *source, const char *path, rb_sd_model **out, rb_error *err) {
    rb_sd_model *m = calloc(1, sizeof *m);
    if (!m) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    m->be = be;
    m->source = source;
    model_name(path, m->name, sizeof m->name);
    m->default_sampler = RB_SD_SAMPLER_EULER;
    m->default_schedule = RB_SD_SCHEDULE_DEFAULT;
    *out = m;
    return RB_OK;
}

rb_status sd_model_keep(rb_sd_model *m, void *p, rb_error *err) {
    void **nb = realloc(m->blobs, (m->n_blobs + 1) * sizeof *nb);
    if (!nb) {
        free(p);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    m->blobs = nb;
    m->blobs[m->n_blobs++] = p;
    return RB_OK;
}

void rb_sd_model_free(rb_sd_model *m) {
    if (!m) return;
    for (int i = 0; i < SD_MAX_ENC; i++) {
        rb_clip_text_free(m->enc[i].enc);
        rb_clip_tokenizer_free(m->enc[i].tok);
    }
    rb_unet_free(m->unet);
    rb_mmdit_free(m->mmdit);
    rb_t5_text_free(&m->t5);
    rb_vae_free(m->vae);
    /* after the networks, which may point into these */
    if (m->ldm) {
        sd_ldm_free(m->ldm);
        free(m->ldm);
    }
    if (m->sd3) {
        sd_sd3_free(m->sd3);
        free(m->sd3);
    }
    rb_st_close(m->ckpt);
    for (size_t i = 0; i < m->n_blobs; i++) free(m->blobs[i]);
    free(m->blobs);
    free(m);
}

rb_status sd_model_default_tokenizers(rb_sd_model *m, const char *vocab_path, const char *const *pads, bool required,
                                      rb_error *err) {
    char shipped[4096];
    const char *path = vocab_path;
    if (!path) { /* the copy shipped in models/clip (installed share/rbee, or the source tree) */
        rb_status s = rb_data_path("models/clip/bpe_simple_vocab_16e6.txt.gz", shipped, sizeof shipped, err);
        if (s != RB_OK) {
            if (!required) return RB_OK;
            rb_error_prefix(err, "CLIP vocabulary (pass its path: bpe_simple_vocab_16e6.txt.gz): ");
            return s;
        }
        path = shipped;
    }
    struct stat st;
    if (stat(path, &st) != 0)
        return rb_error_set(err, RB_E_NOT_FOUND, "CLIP vocabulary %s not found (pass its path: bpe_simple_vocab_16e6.txt.gz)",
                            path);
    for (int i = 0; i < m->n_enc; i++) {
        rb_clip_special_tokens sp = {0};
        if (pads && pads[i])
            sp.pad = pads[i];
        else if (m->enc[i].open_clip)
            sp.pad = "!";
        rb_status s = rb_clip_tokenizer_load_bpe_gz(path, &sp, &m->enc[i].tok, err);
        if (s != RB_OK) {
            rb_error_prefix(err, "tokenizer %d: ", i + 1);
            return s;
        }
    }
    return RB_OK;
}

/* Sum of the encoders' widths (the context width the UNet must take). */
static int64_t context_width(const rb_sd_model *m) {
    int64_t w = 0;
    for (int i = 0; i < m->n_enc; i++) w += m->enc[i].cfg.hidden_size;
    return w;
}

rb_status sd_model_finish(rb_sd_model *m, const rb_sd_model_opts *o, rb_error *err) {
    const char *nm = m->name;
    if (m->n_enc < 1) return rb_error_set(err, RB_E_FORMAT, "%s: no text encoder", nm);
    const bool xl = m->arch == RB_SD_ARCH_SDXL || m->arch == RB_SD_ARCH_SDXL_REFINER;
    for (int i = 0; i < m->n_enc; i++) {
        const sd_text_slot *t = &m->enc[i];
        if (t->tok && rb_clip_n_vocab(t->tok) > t->cfg.vocab_size)
            return rb_error_set(err, RB_E_FORMAT, "%s: tokenizer %d has %d ids but text encoder %d only %lld", nm, i + 1,
                                (int)rb_clip_n_vocab(t->tok), i + 1, (long long)t->cfg.vocab_size);
        if (t->cfg.max_positions < RB_CLIP_CONTEXT)
            return rb_error_set(err, RB_E_FORMAT, "%s: text encoder %d has %lld positions (77 needed)", nm, i + 1,
                                (long long)t->cfg.max_positions);
    }
    if (m->arch == RB_SD_ARCH_SD3) SDP_TRY(sd_sd3_finish(m, err));
    if (xl && !m->enc[m->n_enc - 1].cfg.with_projection)
        return rb_error_set(err, RB_E_FORMAT, "%s: SDXL's last text encoder must have a text projection "
                            "(CLIPTextModelWithProjection)", nm);
    if (m->has_unet_cfg) {
        const rb_unet_config *u = &m->unet_cfg;
        if (u->cross_attention_dim != context_width(m))
            return rb_error_set(err, RB_E_FORMAT, "%s: the UNet's cross_attention_dim %lld differs from the text "
                                "encoders' width %lld: mismatched components", nm, (long long)u->cross_attention_dim,
                                (long long)context_width(m));
        if (u->add_text_time != xl)
            return rb_error_set(err, RB_E_FORMAT, "%s: %s UNet for a %s model", nm,
                                u->add_text_time ? "an SDXL (text_time)" : "a non-SDXL", rb_sd_arch_name(m->arch));
        if (xl) {
            const int want = m->arch == RB_SD_ARCH_SDXL ? 6 : 5;
            const int got = sd_unet_time_ids(u, m->enc[m->n_enc - 1].cfg.projection_dim);
            if (got != want)
                return rb_error_set(err, RB_E_FORMAT, "%s: the UNet's added-embedding input %lld is not the pooled "
                                    "width %lld + %d time ids x %lld", nm,
                                    (long long)u->projection_class_embeddings_input_dim,
                                    (long long)m->enc[m->n_enc - 1].cfg.projection_dim, want,
                                    (long long)u->addition_time_embed_dim);
        }
        if (m->has_vae_cfg) {
            const int64_t L = m->vae_cfg.latent_channels;
            if (u->out_channels != L || (u->in_channels != L && u->in_channels != 2 * L + 1))
                return rb_error_set(err, RB_E_FORMAT, "%s: UNet channels in %lld / out %lld do not fit the VAE's %lld "
                                    "latent channels", nm, (long long)u->in_channels, (long long)u->out_channels,
                                    (long long)L);
        }
    }
    if (o && o->act_dtype != RB_F32) {
        rb_status s = RB_OK;
        for (int i = 0; i < m->n_enc && s == RB_OK; i++)
            if (m->enc[i].enc) s = rb_clip_text_set_act_dtype(m->enc[i].enc, o->act_dtype, err);
        if (s == RB_OK && m->unet) s = rb_unet_set_act_dtype(m->unet, o->act_dtype, err);
        if (s == RB_OK && m->mmdit) s = rb_mmdit_set_act_dtype(m->mmdit, o->act_dtype, err);
        if (s == RB_OK && m->t5.enc) s = rb_t5_set_act_dtype(m->t5.enc, o->act_dtype, err);
        /* diffusers' SDXL pipelines decode (and encode) a force_upcast VAE in
         * f32 when it would run in f16; its SD 1.x / 2.x pipelines do not */
        const bool upcast = xl && o->act_dtype == RB_F16 && m->has_vae_cfg && m->vae_cfg.force_upcast;
        if (s == RB_OK && m->vae) s = rb_vae_set_act_dtype(m->vae, upcast ? RB_F32 : o->act_dtype, err);
        if (s != RB_OK) return s;
    }
    if (o && o->prediction != RB_SD_PREDICT_AUTO) {
        m->sched.prediction_type = o->prediction == RB_SD_PREDICT_V         ? RB_SD_PRED_V
                                   : o->prediction == RB_SD_PREDICT_SAMPLE ? RB_SD_PRED_SAMPLE
                                                                           : RB_SD_PRED_EPSILON;
        m->sched.set |= RB_SD_CFG_PREDICTION_TYPE;
    }
    rb_sd_sampler_kind k;
    rb_sd_schedule sc;
    if (rb_sd_sampler_for_config(&m->sched, &k, &sc, NULL) == RB_OK) {
        m->default_sampler = k;
        m->default_schedule = sc;
    } else {
        m->default_sampler = RB_SD_SAMPLER_EULER;
        m->default_schedule = RB_SD_SCHEDULE_DEFAULT;
    }
    if (m->default_w < 8 || m->default_h < 8) m->default_w = m->default_h = 512;
    return RB_OK;
}

/* ---------------------------------------------------------------- sources */

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The first n bytes of a regular file; false if shorter or unreadable. */
static bool file_head(const char *path, unsigned char *buf, size_t n) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    bool ok = fread(buf, 1, n, f) == n;
    fclose(f);
    return ok;
}

static bool is_gguf(const char *path) {
    unsigned char h[4];
    return file_head(path, h, 4) && memcmp(h, "GGUF", 4) == 0;
}

/* 8-byte little-endian header length, then the JSON header's '{'. */
static bool is_safetensors(const char *path) {
    unsigned char h[9];
    if (!file_head(path, h, 9)) return false;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | h[i];
    return n >= 2 && n < ((uint64_t)1 << 32) && h[8] == '{';
}

typedef struct sd_source {
    const char *what;
    bool (*probe)(const char *path);
    rb_status (*load)(const char *path, rb_backend *be, const rb_sd_model_opts *o, rb_sd_model **out, rb_error *err);
} sd_source;

/* The containers a model can come in; a new one is one more row. */
static const sd_source k_sources[] = {
    {"diffusers folder", is_dir, sd_load_diffusers},
    {"GGUF file", is_gguf, sd_load_gguf},
    {"single-file safetensors checkpoint", is_safetensors, sd_load_single_file},
};

rb_status rb_sd_model_load(const char *path, rb_backend *be, const rb_sd_model_opts *opts, rb_sd_model **out,
                           rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "sd model: out is NULL");
    *out = NULL;
    if (!path || !be) return rb_error_set(err, RB_E_INVALID, "sd model: NULL argument");
    if (opts && (opts->components & ~(unsigned)RB_SD_LOAD_ALL))
        return rb_error_set(err, RB_E_INVALID, "sd model: unknown component bits 0x%x", opts->components);
    if (opts && (opts->prediction < RB_SD_PREDICT_AUTO || opts->prediction > RB_SD_PREDICT_SAMPLE))
        return rb_error_set(err, RB_E_INVALID, "sd model: unknown prediction option %d", (int)opts->prediction);
    struct stat st;
    if (stat(path, &st) != 0) return rb_error_set(err, RB_E_NOT_FOUND, "%s: no such file or folder", path);
    for (size_t i = 0; i < sizeof k_sources / sizeof k_sources[0]; i++) {
        if (!k_sources[i].probe(path)) continue;
        if (!k_sources[i].load)
            return rb_error_set(err, RB_E_UNSUPPORTED, "%s: Stable Diffusion models in a %s are not supported yet", path,
                                k_sources[i].what);
        return k_sources[i].load(path, be, opts, out, err);
    }
    return rb_error_set(err, RB_E_UNSUPPORTED,
                        "%s: not a Stable Diffusion model (a diffusers folder with model_index.json, a .safetensors "
                        "single-file checkpoint or a GGUF file; .ckpt pickles must be converted to safetensors first)",
                        path);
}

/* ---------------------------------------------------------------- accessors */

void rb_sd_model_get_info(const rb_sd_model *m, rb_sd_model_info *info) {
    if (!info) return;
    memset(info, 0, sizeof *info);
    if (!m) return;
    info->arch = m->arch;
    info->source = m->source;
    info->name = m->name;
    info->prediction = m->sched.prediction_type;
    info->default_width = m->default_w;
    info->default_height = m->default_h;
    info->unet_in_channels = m->has_unet_cfg ? m->unet_cfg.in_channels : m->has_mmdit_cfg ? m->mmdit_cfg.in_channels : 0;
    info->cross_attention_dim = m->has_unet_cfg    ? m->unet_cfg.cross_attention_dim
                                : m->has_mmdit_cfg ? m->mmdit_cfg.joint_attention_dim
                                                   : context_width(m);
    info->n_text_encoders = m->n_enc;
    info->latent_channels = m->has_vae_cfg ? (int)m->vae_cfg.latent_channels : 4;
    info->vae_scale = m->has_vae_cfg ? 1 << (m->vae_cfg.n_levels - 1) : 8;
    info->vae_scaling_factor = m->has_vae_cfg ? m->vae_cfg.scaling_factor : 0.0f;
    info->vae_shift_factor = m->has_vae_cfg ? m->vae_cfg.shift_factor : 0.0f;
    info->force_zeros_for_empty_prompt = m->force_zeros;
    info->components = m->components;
    info->default_sampler = m->default_sampler;
    info->default_schedule = m->default_schedule;
    size_t b = rb_unet_weight_bytes(m->unet) + rb_mmdit_weight_bytes(m->mmdit) + rb_t5_weight_bytes(m->t5.enc) +
               rb_vae_weight_bytes(m->vae);
    for (int i = 0; i < m->n_enc; i++) b += rb_clip_text_weight_bytes(m->enc[i].enc);
    info->weight_bytes = b;
}

const rb_sd_sched_config *rb_sd_model_sched_config(const rb_sd_model *m) { return m ? &m->sched : NULL; }

rb_status rb_sd_model_set_sched_config(rb_sd_model *m, const rb_sd_sched_config *c, rb_error *err) {
    if (!m || !c) return rb_error_set(err, RB_E_INVALID, "sd model: NULL argument");
    if (c->num_train_timesteps < 2)
        return rb_error_set(err, RB_E_INVALID, "scheduler config: %d training timesteps", c->num_train_timesteps);
    m->sched = *c;
    rb_sd_sampler_kind k;
    rb_sd_schedule sc;
    if (rb_sd_sampler_for_config(&m->sched, &k, &sc, NULL) == RB_OK) {
        m->default_sampler = k;
        m->default_schedule = sc;
    } else {
        m->default_sampler = RB_SD_SAMPLER_EULER;
        m->default_schedule = RB_SD_SCHEDULE_DEFAULT;
    }
    return RB_OK;
}

rb_status rb_sd_model_set_vae(rb_sd_model *m, const char *dir, const rb_sd_model_opts *opts, rb_error *err) {
    if (!m || !dir) return rb_error_set(err, RB_E_INVALID, "sd model: NULL argument");
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return rb_error_set(err, RB_E_NOT_FOUND, "VAE %s: not a folder (a diffusers vae/ folder with config.json "
                            "and diffusion_pytorch_model.safetensors is expected)", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    rb_vae_config cfg;
    rb_status s = rb_vae_config_load(path, &cfg, err);
    if (s != RB_OK) {
        rb_error_prefix(err, "VAE %s: ", dir);
        return s;
    }
    if (m->has_mmdit_cfg && cfg.latent_channels != m->mmdit_cfg.out_channels)
        return rb_error_set(err, RB_E_FORMAT, "VAE %s has %lld latent channels but the transformer makes %lld", dir,
                            (long long)cfg.latent_channels, (long long)m->mmdit_cfg.out_channels);
    if (m->has_unet_cfg && cfg.latent_channels != m->unet_cfg.out_channels)
        return rb_error_set(err, RB_E_FORMAT, "VAE %s has %lld latent channels but the UNet makes %lld", dir,
                            (long long)cfg.latent_channels, (long long)m->unet_cfg.out_channels);
    if (m->has_vae_cfg && cfg.n_levels != m->vae_cfg.n_levels)
        return rb_error_set(err, RB_E_FORMAT, "VAE %s scales by %d, the model's VAE by %d", dir, 1 << (cfg.n_levels - 1),
                            1 << (m->vae_cfg.n_levels - 1));
    rb_sd_load_opts lo;
    sd_net_opts(opts, &lo);
    rb_vae *v = NULL;
    if ((s = rb_vae_load(dir, m->be, &lo, &v, err)) != RB_OK) return s;
    const rb_dtype act = opts ? opts->act_dtype : RB_F32;
    if (act != RB_F32) {
        const bool xl = m->arch == RB_SD_ARCH_SDXL || m->arch == RB_SD_ARCH_SDXL_REFINER;
        const bool upcast = xl && act == RB_F16 && rb_vae_get_config(v)->force_upcast; /* as sd_model_finish */
        if ((s = rb_vae_set_act_dtype(v, upcast ? RB_F32 : act, err)) != RB_OK) {
            rb_vae_free(v);
            return s;
        }
    }
    rb_vae_free(m->vae);
    m->vae = v;
    m->vae_cfg = *rb_vae_get_config(v);
    m->has_vae_cfg = true;
    m->components |= RB_SD_LOAD_VAE_DECODER;
    if (!m->vae_cfg.decoder_only) m->components |= RB_SD_LOAD_VAE_ENCODER;
    return RB_OK;
}
rb_unet *rb_sd_model_unet(rb_sd_model *m) { return m ? m->unet : NULL; }
rb_mmdit *rb_sd_model_mmdit(rb_sd_model *m) { return m ? m->mmdit : NULL; }
rb_t5 *rb_sd_model_t5(rb_sd_model *m) { return m ? m->t5.enc : NULL; }
rb_vae *rb_sd_model_vae(rb_sd_model *m) { return m ? m->vae : NULL; }
rb_backend *rb_sd_model_backend(rb_sd_model *m) { return m ? m->be : NULL; }

rb_clip_text *rb_sd_model_text_encoder(rb_sd_model *m, int i) {
    return m && i >= 0 && i < m->n_enc ? m->enc[i].enc : NULL;
}

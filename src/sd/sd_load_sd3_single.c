/* Loading an SD3 / SD3.5 single file or SD3 GGUF file into the pipeline:
 * the tensors seen through diffusers' names (a single file's tables kept in
 * m->sd3, since the networks may point into their copies; a GGUF file's
 * kept alive by the weights' references), the configs, tokenizers (CLIP's
 * and the T5's spiece.model, which these files do not carry) and scheduler
 * of config_dir (a diffusers SD3 folder, read as the folder loader reads
 * it), checked against what the tensors show; each network bound from the
 * file, or from config_dir's folder when the file lacks it (sd3_medium.
 * safetensors has no text encoders; an SD3.5 file may hold the MMDiT
 * alone). */
#include "sd/sd_pipeline_internal.h"

#include "sd/sd_nets.h"
#include "sd/sd_sd3_gguf.h"
#include "sd/sd_sd3_nets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The file's MMDiT against config_dir's transformer config. */
static rb_status check_mmdit(const rb_sd_model *m, const sd_sd3 *s, const char *path, rb_error *err) {
    const rb_mmdit_config *c = &m->mmdit_cfg;
    const sd_sd3_mmdit_shape *h = &s->mmdit_shape;
    bool dual_ok = true;
    for (int i = 0, k = 0; i < h->num_layers && i < RB_MMDIT_MAX_LAYERS; i++) {
        const bool d = k < h->n_dual && h->dual_attention_layers[k] == i;
        if (d) k++;
        dual_ok &= d == c->dual_attention[i];
    }
    if (c->num_layers != h->num_layers || (int64_t)c->heads * c->head_dim != h->width || c->patch_size != h->patch_size ||
        c->in_channels != h->in_channels || c->out_channels != h->out_channels ||
        c->joint_attention_dim != h->joint_attention_dim || c->pooled_projection_dim != h->pooled_projection_dim ||
        c->pos_embed_max_size != h->pos_embed_max_size || c->qk_norm != h->qk_norm || !dual_ok)
        return rb_error_set(err, RB_E_FORMAT, "%s: its MMDiT (%d blocks %lld wide, context %lld, pooled %lld%s) is not "
                            "the one the configs folder describes (%d blocks %lld wide, context %lld, pooled %lld%s)",
                            path, h->num_layers, (long long)h->width, (long long)h->joint_attention_dim,
                            (long long)h->pooled_projection_dim, h->qk_norm ? ", qk-norm" : "", c->num_layers,
                            (long long)c->heads * c->head_dim, (long long)c->joint_attention_dim,
                            (long long)c->pooled_projection_dim, c->qk_norm ? ", qk-norm" : "");
    return RB_OK;
}

/* Where a part's weights come from: the single file's map, or an open SD3
 * GGUF file. */
typedef struct sd3_source {
    const char *path;
    sd_sd3_gguf *gguf; /* NULL: a single file (m->sd3) */
} sd3_source;

static rb_status file_weights(rb_sd_model *m, const sd3_source *src, sd_sd3_part part, const char *what,
                              const rb_sd_load_opts *lo, sd_weights *ws, rb_error *err) {
    if (src->gguf) return sd_sd3_gguf_weights(src->gguf, part, m->be, lo, ws, err);
    char label[600];
    snprintf(label, sizeof label, "%s (%s)", src->path, what);
    return sd_weights_init(ws, NULL, false, sd_sd3_lookup, (void *)sd_sd3_part_map(m->sd3, part), label, m->be, lo,
                           err);
}

static rb_status folder_weights(rb_sd_model *m, const char *dir, const char *comp, const char *base,
                                const rb_sd_load_opts *lo, sd_weights *ws, rb_error *err) {
    char p[1024];
    if (snprintf(p, sizeof p, "%s/%s", dir, comp) >= (int)sizeof p)
        return rb_error_set(err, RB_E_INVALID, "path too long: %s", dir);
    return sd_weights_open(ws, p, base, m->be, lo, err);
}

static rb_status need_dir(const char *path, const char *dir, rb_error *err) {
    if (dir) return RB_OK;
    return rb_error_set(err, RB_E_UNSUPPORTED, "%s is an SD3 / SD3.5 model file: give a diffusers SD3 folder as its "
                        "configs folder (config_dir, --config-dir) for the configs, the tokenizers (T5's "
                        "spiece.model) and the scheduler, and the text encoders the file lacks", path);
}

/* The networks of s (the file's tables) with dir's configs and tokenizers. */
static rb_status load_parts(rb_sd_model *m, const sd_sd3 *s3, const sd3_source *src, const char *dir,
                            const rb_sd_model_opts *o, rb_error *err) {
    const char *path = src->path;
    rb_status s = sd_read_folder(m, dir, err);
    if (s != RB_OK) {
        rb_error_prefix(err, "config_dir: ");
        return s;
    }
    if (m->arch != RB_SD_ARCH_SD3)
        return rb_error_set(err, RB_E_FORMAT, "%s is an SD3 model but config_dir %s is an %s pipeline", path, dir,
                            rb_sd_arch_name(m->arch));
    SDP_TRY(check_mmdit(m, s3, path, err));
    const unsigned comp = sd_opts_components(o);
    const unsigned have = s3->present;
    rb_sd_load_opts lo;
    sd_net_opts(o, &lo);
    sd_weights ws;
    if (comp & RB_SD_LOAD_TEXT) {
        static const sd_sd3_part part[2] = {SD_SD3_CLIP_L, SD_SD3_CLIP_G};
        for (int i = 0; i < m->n_enc && i < 2; i++) {
            s = (have & part[i]) ? file_weights(m, src, part[i], m->enc[i].comp, &lo, &ws, err)
                                 : folder_weights(m, dir, m->enc[i].comp, "model", &lo, &ws, err);
            if (s != RB_OK || (s = sd_clip_text_create(&m->enc[i].cfg, &ws, &m->enc[i].enc, err)) != RB_OK) return s;
        }
        if ((have & SD_SD3_T5) && !o->no_t5) {
            /* the file's encoder with the folder's tokenizer (and its config) */
            char tok[1024], cfg[1024];
            rb_t5_config tc;
            if (snprintf(tok, sizeof tok, "%s/tokenizer_3", dir) >= (int)sizeof tok ||
                snprintf(cfg, sizeof cfg, "%s/text_encoder_3/config.json", dir) >= (int)sizeof cfg)
                return rb_error_set(err, RB_E_INVALID, "path too long: %s", dir);
            SDP_TRY(rb_t5_config_load(cfg, &tc, err));
            rb_t5_config fc;
            SDP_TRY(sd_sd3_t5_config(s3, NULL, &fc, err));
            if (fc.d_model != tc.d_model || fc.n_layers != tc.n_layers || fc.n_heads != tc.n_heads ||
                fc.d_ff != tc.d_ff || fc.vocab_size != tc.vocab_size || fc.rel_buckets != tc.rel_buckets)
                return rb_error_set(err, RB_E_FORMAT, "%s: its T5 encoder is not the one %s describes", path, cfg);
            SDP_TRY(rb_unigram_load_dir(tok, &m->t5.tok, err));
            SDP_TRY(file_weights(m, src, SD_SD3_T5, "text_encoder_3", &lo, &ws, err));
            SDP_TRY(sd_t5_create(&tc, &ws, &m->t5.enc, err));
            if (rb_unigram_n_vocab(m->t5.tok) > tc.vocab_size)
                return rb_error_set(err, RB_E_FORMAT, "%s: tokenizer_3 has %d pieces, the T5 encoder %lld", dir,
                                    (int)rb_unigram_n_vocab(m->t5.tok), (long long)tc.vocab_size);
            m->sd3_has_t5 = true;
        } else if (m->sd3_has_t5 && !o->no_t5) {
            SDP_TRY(sd_load_sd3_t5(m, dir, &lo, err));
        }
    }
    if (comp & RB_SD_LOAD_UNET) {
        SDP_TRY(file_weights(m, src, SD_SD3_MMDIT, "transformer", &lo, &ws, err));
        SDP_TRY(sd_mmdit_create(&m->mmdit_cfg, &ws, &m->mmdit, err));
    }
    if (comp & (RB_SD_LOAD_VAE_DECODER | RB_SD_LOAD_VAE_ENCODER)) {
        m->vae_cfg.decoder_only = !(comp & RB_SD_LOAD_VAE_ENCODER);
        s = (have & SD_SD3_VAE) ? file_weights(m, src, SD_SD3_VAE, "vae", &lo, &ws, err)
                                : folder_weights(m, dir, "vae", "diffusion_pytorch_model", &lo, &ws, err);
        if (s != RB_OK || (s = sd_vae_create(&m->vae_cfg, &ws, &m->vae, err)) != RB_OK) return s;
    }
    m->components = comp;
    return RB_OK;
}

rb_status sd_load_sd3_single(rb_sd_model *m, const sd_tensor_list *tl, const char *path, const rb_sd_model_opts *o,
                             rb_error *err) {
    const char *dir = o ? o->config_dir : NULL;
    SDP_TRY(need_dir(path, dir, err));
    if (!(m->sd3 = calloc(1, sizeof *m->sd3))) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    rb_status s = sd_sd3_build(tl, m->sd3, err);
    if (s != RB_OK) {
        free(m->sd3);
        m->sd3 = NULL;
        rb_error_prefix(err, "%s: ", path);
        return s;
    }
    const sd3_source src = {.path = path};
    return load_parts(m, m->sd3, &src, dir, o, err);
}

rb_status sd_load_sd3_gguf(rb_sd_model *m, const char *path, const rb_sd_model_opts *o, rb_error *err) {
    const char *dir = o ? o->config_dir : NULL;
    SDP_TRY(need_dir(path, dir, err));
    sd_sd3_gguf *f = NULL;
    SDP_TRY(sd_sd3_gguf_open(path, &f, err));
    const sd3_source src = {.path = path, .gguf = f};
    rb_status s = load_parts(m, &f->sd3, &src, dir, o, err);
    sd_sd3_gguf_unref(f); /* the networks' weights hold their own references */
    return s;
}

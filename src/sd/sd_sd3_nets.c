/* The MMDiT, T5 and CLIP encoders of an SD3 single file or SD3 GGUF file:
 * their configs from the tensors (sd_sd3_mmdit_shape, sd_t5_shape,
 * sd_ldm_text_shape) and the values they cannot show (sd_sd3_meta), the
 * rest the published models' (CLIP-L's quick_gelu, CLIP-G's gelu), and the
 * networks built over the diffusers-name maps with the engine's
 * constructors; and the weights of an SD3 GGUF file's parts. */
#include "sd/sd_sd3_gguf.h"
#include "sd/sd_pipeline_internal.h"
#include "sd/sd_sd3_nets.h"

#include <stdio.h>
#include <string.h>

rb_status sd_sd3_mmdit_config(const sd_sd3 *s, const sd_sd3_meta *m, rb_mmdit_config *c, rb_error *err) {
    memset(c, 0, sizeof *c);
    if (!(s->present & SD_SD3_MMDIT)) return rb_error_set(err, RB_E_NOT_FOUND, "the checkpoint has no MMDiT");
    const sd_sd3_mmdit_shape *sh = &s->mmdit_shape;
    const int64_t heads = m ? m->mmdit_heads : sh->num_attention_heads;
    const int64_t hd = m ? m->mmdit_head_dim : sh->attention_head_dim;
    if (heads <= 0 || hd <= 0 || heads * hd != sh->width)
        return rb_error_set(err, RB_E_UNSUPPORTED, "the MMDiT's heads are not known for its width %lld: give its "
                            "configs (a diffusers folder)", (long long)sh->width);
    if (sh->num_layers > RB_MMDIT_MAX_LAYERS)
        return rb_error_set(err, RB_E_UNSUPPORTED, "an MMDiT of %d blocks (at most %d)", sh->num_layers,
                            RB_MMDIT_MAX_LAYERS);
    c->in_channels = sh->in_channels;
    c->out_channels = sh->out_channels;
    c->patch_size = sh->patch_size;
    c->sample_size = m ? m->sample_size : 128;
    c->pos_embed_max_size = sh->pos_embed_max_size;
    c->num_layers = sh->num_layers;
    c->heads = (int)heads;
    c->head_dim = hd;
    c->joint_attention_dim = sh->joint_attention_dim;
    c->caption_projection_dim = sh->caption_projection_dim;
    c->pooled_projection_dim = sh->pooled_projection_dim;
    c->qk_norm = sh->qk_norm;
    for (int i = 0; i < sh->n_dual; i++) c->dual_attention[sh->dual_attention_layers[i]] = true;
    return RB_OK;
}

rb_status sd_sd3_mmdit_create(const sd_sd3 *s, const sd_sd3_meta *m, sd_weights *ws, rb_mmdit **out, rb_error *err) {
    *out = NULL;
    rb_mmdit_config c;
    rb_status st = sd_sd3_mmdit_config(s, m, &c, err);
    if (st != RB_OK) {
        sd_weights_close(ws);
        return st;
    }
    return sd_mmdit_create(&c, ws, out, err);
}

rb_status sd_sd3_t5_config(const sd_sd3 *s, const sd_sd3_meta *m, rb_t5_config *c, rb_error *err) {
    memset(c, 0, sizeof *c);
    if (!(s->present & SD_SD3_T5)) return rb_error_set(err, RB_E_NOT_FOUND, "the checkpoint has no T5 text encoder");
    const sd_t5_shape *t = &s->t5_shape;
    c->vocab_size = t->vocab;
    c->d_model = t->d_model;
    c->d_kv = t->d_kv;
    c->d_ff = t->d_ff;
    c->n_layers = t->n_layers;
    c->n_heads = t->n_heads;
    c->rel_buckets = t->n_buckets;
    c->rel_max_distance = m ? m->t5_max_distance : t->max_distance;
    c->gated = t->gated;
    c->eps = 1e-6f; /* T5 v1.1's layer_norm_epsilon */
    return RB_OK;
}

rb_status sd_sd3_t5_create(const sd_sd3 *s, const sd_sd3_meta *m, sd_weights *ws, rb_t5 **out, rb_error *err) {
    *out = NULL;
    rb_t5_config c;
    rb_status st = sd_sd3_t5_config(s, m, &c, err);
    if (st != RB_OK) {
        sd_weights_close(ws);
        return st;
    }
    return sd_t5_create(&c, ws, out, err);
}

rb_status sd_sd3_clip_config(const sd_sd3 *s, const sd_sd3_meta *m, sd_sd3_part part, rb_clip_text_config *c,
                             rb_error *err) {
    memset(c, 0, sizeof *c);
    const bool g = part == SD_SD3_CLIP_G;
    if ((part != SD_SD3_CLIP_L && !g) || !(s->present & part))
        return rb_error_set(err, RB_E_NOT_FOUND, "the checkpoint has no %s text encoder", g ? "CLIP-G" : "CLIP-L");
    const sd_ldm_text_shape *t = g ? &s->ldm.text2_shape : &s->ldm.text1_shape;
    if (g)
        sd_default_clip_g(c);
    else
        sd_default_clip_l(c);
    c->hidden_size = t->hidden;
    c->intermediate_size = t->intermediate;
    c->n_layers = t->n_layers;
    c->vocab_size = t->vocab;
    c->max_positions = t->positions;
    c->with_projection = true; /* SD3 uses both encoders' projected pooled outputs */
    c->projection_dim = t->projection;
    const int64_t heads = m ? m->clip_heads[g ? 1 : 0] : t->hidden % 64 == 0 ? t->hidden / 64 : 0;
    if (heads <= 0 || t->hidden % heads != 0)
        return rb_error_set(err, RB_E_UNSUPPORTED, "the %s text encoder's heads are not known for its width %lld: "
                            "give its configs (a diffusers folder)", g ? "CLIP-G" : "CLIP-L", (long long)t->hidden);
    c->n_heads = heads;
    return RB_OK;
}

rb_status sd_sd3_clip_create(const sd_sd3 *s, const sd_sd3_meta *m, sd_sd3_part part, sd_weights *ws,
                             rb_clip_text **out, rb_error *err) {
    *out = NULL;
    rb_clip_text_config c;
    rb_status st = sd_sd3_clip_config(s, m, part, &c, err);
    if (st != RB_OK) {
        sd_weights_close(ws);
        return st;
    }
    return sd_clip_text_create(&c, ws, out, err);
}

const rb_st_tensor *sd_sd3_lookup(const sd_weights *w, const char *name) {
    return sd_name_map_find((const sd_name_map *)w->lookup_ctx, name);
}

rb_status sd_sd3_gguf_weights(sd_sd3_gguf *f, sd_sd3_part part, rb_backend *be, const rb_sd_load_opts *opts,
                              sd_weights *ws, rb_error *err) {
    static const char *const what[] = {"transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3"};
    const sd_name_map *m = sd_sd3_part_map(&f->sd3, part);
    int k = 0;
    while (k < 4 && (1u << k) != (unsigned)part) k++;
    if (!m) {
        memset(ws, 0, sizeof *ws);
        return rb_error_set(err, RB_E_NOT_FOUND, "%s: the file has no %s", f->label, what[k]);
    }
    char label[sizeof f->label + 32];
    snprintf(label, sizeof label, "%s [%s]", f->label, what[k]);
    rb_status s = sd_weights_init_source(ws, &f->src, sd_sd3_lookup, (void *)m, label, be, opts, err);
    if (s != RB_OK) sd_weights_close(ws);
    return s;
}

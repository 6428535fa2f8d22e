/* The rbee.sd3.* keys of an SD3 GGUF file (sd_sd3_gguf.h): the configs of
 * the MMDiT (SD3Transformer2DModel's config.json fields) and of the T5
 * encoder (T5Config's), the CLIP encoders' head counts, made from the
 * tensors and, for what they cannot show, a diffusers folder's configs or
 * the published models' values; read back and checked against the tensors. */
#include "sd/sd_sd3_gguf.h"

#include "rbee/json_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An integer field of <dir>/<comp>/config.json into *v (untouched when the
 * file or the field is absent). */
static rb_status cfg_int(const char *dir, const char *comp, const char *key, int64_t *v, rb_error *err) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s/%s/config.json", dir, comp) >= (int)sizeof p)
        return rb_error_set(err, RB_E_INVALID, "config folder path too long");
    FILE *f = fopen(p, "rb");
    if (!f) return RB_OK;
    fclose(f);
    rb_json_config *j = NULL;
    rb_status s = rb_json_config_load(p, &j, err);
    if (s != RB_OK) return s;
    int64_t x = 0;
    if (rb_json_config_int(j, key, &x) == RB_OK) *v = x;
    rb_json_config_free(j);
    return RB_OK;
}

rb_status sd_sd3_meta_make(const sd_sd3 *s, const char *config_dir, sd_sd3_meta *m, rb_error *err) {
    memset(m, 0, sizeof *m);
    const sd_sd3_mmdit_shape *sh = &s->mmdit_shape;
    int64_t heads = sh->num_attention_heads, hd = sh->attention_head_dim;
    int64_t ch[2] = {0, 0};
    const sd_ldm_text_shape *ts[2] = {&s->ldm.text1_shape, &s->ldm.text2_shape};
    const unsigned tp[2] = {SD_SD3_CLIP_L, SD_SD3_CLIP_G};
    for (int i = 0; i < 2; i++)
        if ((s->present & tp[i]) && ts[i]->hidden % 64 == 0) ch[i] = ts[i]->hidden / 64;
    m->sample_size = 128;
    m->t5_max_distance = 128;
    rb_status st = RB_OK;
    if (config_dir) {
        static const char *const clip_dir[2] = {"text_encoder", "text_encoder_2"};
        int64_t layers = sh->num_layers;
        if ((st = cfg_int(config_dir, "transformer", "num_attention_heads", &heads, err)) ||
            (st = cfg_int(config_dir, "transformer", "attention_head_dim", &hd, err)) ||
            (st = cfg_int(config_dir, "transformer", "sample_size", &m->sample_size, err)) ||
            (st = cfg_int(config_dir, "transformer", "num_layers", &layers, err)) ||
            (st = cfg_int(config_dir, "text_encoder_3", "relative_attention_max_distance", &m->t5_max_distance, err)))
            return st;
        for (int i = 0; i < 2; i++)
            if ((s->present & tp[i]) && (st = cfg_int(config_dir, clip_dir[i], "num_attention_heads", &ch[i], err)))
                return st;
        if (layers != sh->num_layers)
            return rb_error_set(err, RB_E_FORMAT, "%s/transformer/config.json: num_layers %lld, the checkpoint has %d",
                                config_dir, (long long)layers, sh->num_layers);
    }
    if (heads <= 0 || hd <= 0 || heads * hd != sh->width || heads > 4096)
        return rb_error_set(err, RB_E_UNSUPPORTED, "the MMDiT's heads are not known (%lld of %lld for a width of "
                            "%lld): give a diffusers folder's configs", (long long)heads, (long long)hd,
                            (long long)sh->width);
    m->mmdit_heads = (int)heads;
    m->mmdit_head_dim = hd;
    for (int i = 0; i < 2; i++) {
        if (!(s->present & tp[i])) continue;
        if (ch[i] <= 0 || ts[i]->hidden % ch[i] != 0 || ch[i] > 4096)
            return rb_error_set(err, RB_E_UNSUPPORTED, "the %s text encoder's heads are not known (it is %lld wide, "
                                "no multiple of 64): give a diffusers folder's configs", i ? "CLIP-G" : "CLIP-L",
                                (long long)ts[i]->hidden);
        m->clip_heads[i] = (int)ch[i];
    }
    if (m->sample_size < 1 || m->sample_size > 4096 || m->t5_max_distance < 1 || m->t5_max_distance > (1 << 20))
        return rb_error_set(err, RB_E_FORMAT, "sample_size %lld or relative_attention_max_distance %lld out of range",
                            (long long)m->sample_size, (long long)m->t5_max_distance);
    return RB_OK;
}

/* The integer keys: name and value (for the parts present). */
typedef struct ikey {
    const char *key;
    int64_t v;
} ikey;

static size_t int_keys(const sd_sd3 *s, const sd_sd3_meta *m, ikey *k) {
    size_t n = 0;
    const sd_sd3_mmdit_shape *sh = &s->mmdit_shape;
    const sd_t5_shape *t = &s->t5_shape;
#define K(name, val) (k[n++] = (ikey){name, (int64_t)(val)})
    K("rbee.sd3.transformer.num_layers", sh->num_layers);
    K("rbee.sd3.transformer.num_attention_heads", m->mmdit_heads);
    K("rbee.sd3.transformer.attention_head_dim", m->mmdit_head_dim);
    K("rbee.sd3.transformer.caption_projection_dim", sh->caption_projection_dim);
    K("rbee.sd3.transformer.joint_attention_dim", sh->joint_attention_dim);
    K("rbee.sd3.transformer.pooled_projection_dim", sh->pooled_projection_dim);
    K("rbee.sd3.transformer.pos_embed_max_size", sh->pos_embed_max_size);
    K("rbee.sd3.transformer.patch_size", sh->patch_size);
    K("rbee.sd3.transformer.in_channels", sh->in_channels);
    K("rbee.sd3.transformer.out_channels", sh->out_channels);
    K("rbee.sd3.transformer.sample_size", m->sample_size);
    if (s->present & SD_SD3_T5) {
        K("rbee.sd3.text_encoder_3.num_layers", t->n_layers);
        K("rbee.sd3.text_encoder_3.d_model", t->d_model);
        K("rbee.sd3.text_encoder_3.d_ff", t->d_ff);
        K("rbee.sd3.text_encoder_3.d_kv", t->d_kv);
        K("rbee.sd3.text_encoder_3.num_heads", t->n_heads);
        K("rbee.sd3.text_encoder_3.vocab_size", t->vocab);
        K("rbee.sd3.text_encoder_3.relative_attention_num_buckets", t->n_buckets);
        K("rbee.sd3.text_encoder_3.relative_attention_max_distance", m->t5_max_distance);
    }
    if (s->present & SD_SD3_CLIP_L) K("rbee.sd3.text_encoder.num_attention_heads", m->clip_heads[0]);
    if (s->present & SD_SD3_CLIP_G) K("rbee.sd3.text_encoder_2.num_attention_heads", m->clip_heads[1]);
#undef K
    return n;
}

#define MAX_KEYS 32

rb_status sd_sd3_meta_write(rb_gguf_writer *w, const sd_sd3 *s, const sd_sd3_meta *m, rb_error *err) {
    ikey k[MAX_KEYS];
    const size_t n = int_keys(s, m, k);
    bool ok = true;
    for (size_t i = 0; i < n; i++) ok &= rb_gguf_writer_set_i64(w, k[i].key, k[i].v) == RB_OK;
    const sd_sd3_mmdit_shape *sh = &s->mmdit_shape;
    ok &= rb_gguf_writer_set_str(w, "rbee.sd3.transformer.qk_norm", sh->qk_norm ? "rms_norm" : "") == RB_OK;
    int32_t dual[SD_SD3_MAX_LAYERS];
    for (int i = 0; i < sh->n_dual; i++) dual[i] = sh->dual_attention_layers[i];
    ok &= rb_gguf_writer_set_arr(w, "rbee.sd3.transformer.dual_attention_layers", RB_GGUF_INT32, dual,
                                 (uint64_t)sh->n_dual) == RB_OK;
    if (s->present & SD_SD3_T5)
        ok &= rb_gguf_writer_set_str(w, "rbee.sd3.text_encoder_3.feed_forward_proj",
                                     s->t5_shape.gated ? "gated-gelu" : "relu") == RB_OK;
    return ok ? RB_OK : rb_error_set(err, RB_E_NOMEM, "cannot write the rbee.sd3.* metadata");
}

rb_status sd_sd3_meta_read(const rb_gguf *g, const sd_sd3 *s, sd_sd3_meta *m, rb_error *err) {
    memset(m, 0, sizeof *m);
    /* the values the file states for what the tensors cannot show */
    static const char *const own[] = {
        "rbee.sd3.transformer.num_attention_heads", "rbee.sd3.transformer.attention_head_dim",
        "rbee.sd3.transformer.sample_size", "rbee.sd3.text_encoder_3.relative_attention_max_distance",
        "rbee.sd3.text_encoder.num_attention_heads", "rbee.sd3.text_encoder_2.num_attention_heads"};
    int64_t v[6] = {0, 0, 0, 0, 0, 0};
    const bool need[6] = {true, true, true, (s->present & SD_SD3_T5) != 0, (s->present & SD_SD3_CLIP_L) != 0,
                          (s->present & SD_SD3_CLIP_G) != 0};
    for (int i = 0; i < 6; i++) {
        if (!need[i]) continue;
        if (rb_gguf_get_i64(g, own[i], &v[i]) != RB_OK || v[i] < 1 || v[i] > (1 << 20))
            return rb_error_set(err, RB_E_FORMAT, "%s is missing, not an integer or out of range", own[i]);
    }
    m->mmdit_heads = (int)v[0];
    m->mmdit_head_dim = v[1];
    m->sample_size = v[2];
    m->t5_max_distance = v[3];
    m->clip_heads[0] = (int)v[4];
    m->clip_heads[1] = (int)v[5];
    if ((int64_t)m->mmdit_heads * m->mmdit_head_dim != s->mmdit_shape.width ||
        (s->mmdit_shape.qk_norm && m->mmdit_head_dim != s->mmdit_shape.attention_head_dim))
        return rb_error_set(err, RB_E_FORMAT, "rbee.sd3.transformer: %d heads of %lld do not fit the tensors' width "
                            "%lld", m->mmdit_heads, (long long)m->mmdit_head_dim, (long long)s->mmdit_shape.width);
    const sd_ldm_text_shape *ts[2] = {&s->ldm.text1_shape, &s->ldm.text2_shape};
    for (int i = 0; i < 2; i++)
        if (need[4 + i] && ts[i]->hidden % m->clip_heads[i] != 0)
            return rb_error_set(err, RB_E_FORMAT, "%s: %d heads do not divide the width %lld", own[4 + i],
                                m->clip_heads[i], (long long)ts[i]->hidden);
    /* every other key must state what the tensors show */
    ikey k[MAX_KEYS];
    const size_t n = int_keys(s, m, k);
    for (size_t i = 0; i < n; i++) {
        int64_t x = 0;
        if (rb_gguf_get_i64(g, k[i].key, &x) != RB_OK)
            return rb_error_set(err, RB_E_FORMAT, "%s is missing or not an integer", k[i].key);
        if (x != k[i].v)
            return rb_error_set(err, RB_E_FORMAT, "%s is %lld but the tensors show %lld", k[i].key, (long long)x,
                                (long long)k[i].v);
    }
    char *qk = NULL;
    if (rb_gguf_get_str(g, "rbee.sd3.transformer.qk_norm", &qk) != RB_OK)
        return rb_error_set(err, RB_E_FORMAT, "rbee.sd3.transformer.qk_norm is missing or not a string");
    const bool qk_ok = !strcmp(qk, s->mmdit_shape.qk_norm ? "rms_norm" : "");
    rb_status st = qk_ok ? RB_OK
                         : rb_error_set(err, RB_E_FORMAT, "rbee.sd3.transformer.qk_norm \"%s\" disagrees with the "
                                        "tensors (%s)", qk, s->mmdit_shape.qk_norm ? "ln_q present" : "no ln_q");
    free(qk);
    if (st != RB_OK) return st;
    const rb_gguf_kv *kv = rb_gguf_find_kv(g, "rbee.sd3.transformer.dual_attention_layers");
    bool dual_ok = kv && kv->type == RB_GGUF_ARRAY && kv->arr_type == RB_GGUF_INT32 &&
                   kv->arr_len == (uint64_t)s->mmdit_shape.n_dual;
    for (int i = 0; dual_ok && i < s->mmdit_shape.n_dual; i++)
        dual_ok = rb_gguf_arr_int(kv, (uint64_t)i) == s->mmdit_shape.dual_attention_layers[i];
    if (!dual_ok)
        return rb_error_set(err, RB_E_FORMAT, "rbee.sd3.transformer.dual_attention_layers is missing or disagrees "
                            "with the tensors' attn2 blocks");
    return RB_OK;
}

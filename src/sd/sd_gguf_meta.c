/* The rbee.sd.* metadata of the GGUF files `rbee convert` writes: every
 * field of the networks' config structs (rb_unet_config, rb_vae_config,
 * rb_clip_text_config) under rbee.sd.unet., rbee.sd.vae.,
 * rbee.sd.text_encoder. and rbee.sd.text_encoder_2., so a file rebuilds the
 * networks exactly as the diffusers folder it came from (the tiny fixtures'
 * widths, heads and norm groups included), plus rbee.sd.family, the
 * scheduler_config.json text and the tokenizers' pad tokens. One table per
 * struct drives both the writer and the reader; the reader range-checks
 * every value as the config.json parsers do, since the file is input. */
#include "sd/sd_gguf.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PFX "rbee.sd."

typedef enum ftype {
    F_I64,     /* int64_t */
    F_INT,     /* int */
    F_I32,     /* int32_t */
    F_BOOL,    /* bool */
    F_F32,     /* float */
    F_LV_I64,  /* int64_t[n_levels] */
    F_LV_INT,  /* int[n_levels] */
    F_LV_BOOL, /* bool[n_levels] */
} ftype;

typedef struct field {
    const char *key;
    ftype t;
    size_t off;
    double lo, hi; /* accepted range (numbers and every list entry) */
} field;

#define BIG 65536.0

static const field k_unet[] = {
    {"block_out_channels", F_LV_I64, offsetof(rb_unet_config, block_out_channels), 1, BIG},
    {"in_channels", F_I64, offsetof(rb_unet_config, in_channels), 1, BIG},
    {"out_channels", F_I64, offsetof(rb_unet_config, out_channels), 1, BIG},
    {"down_cross_attn", F_LV_BOOL, offsetof(rb_unet_config, down_cross_attn), 0, 1},
    {"up_cross_attn", F_LV_BOOL, offsetof(rb_unet_config, up_cross_attn), 0, 1},
    {"num_heads", F_LV_INT, offsetof(rb_unet_config, n_heads), 1, 4096},
    {"transformer_layers", F_LV_INT, offsetof(rb_unet_config, transformer_layers), 1, 64},
    {"layers_per_block", F_LV_INT, offsetof(rb_unet_config, layers_per_block), 1, 8},
    {"mid_block", F_BOOL, offsetof(rb_unet_config, mid_block), 0, 1},
    {"cross_attention_dim", F_I64, offsetof(rb_unet_config, cross_attention_dim), 1, BIG},
    {"use_linear_projection", F_BOOL, offsetof(rb_unet_config, use_linear_projection), 0, 1},
    {"upcast_attention", F_BOOL, offsetof(rb_unet_config, upcast_attention), 0, 1},
    {"norm_num_groups", F_INT, offsetof(rb_unet_config, norm_num_groups), 1, 4096},
    {"norm_eps", F_F32, offsetof(rb_unet_config, norm_eps), 1e-12, 1},
    {"flip_sin_to_cos", F_BOOL, offsetof(rb_unet_config, flip_sin_to_cos), 0, 1},
    {"freq_shift", F_F32, offsetof(rb_unet_config, freq_shift), -BIG, BIG},
    {"center_input_sample", F_BOOL, offsetof(rb_unet_config, center_input_sample), 0, 1},
    {"time_embed_dim", F_I64, offsetof(rb_unet_config, time_embed_dim), 1, BIG},
    {"time_embedding_act", F_BOOL, offsetof(rb_unet_config, time_embedding_act), 0, 1},
    {"timestep_post_act", F_BOOL, offsetof(rb_unet_config, timestep_post_act), 0, 1},
    {"conv_in_kernel", F_INT, offsetof(rb_unet_config, conv_in_kernel), 1, 7},
    {"conv_out_kernel", F_INT, offsetof(rb_unet_config, conv_out_kernel), 1, 7},
    {"downsample_padding", F_INT, offsetof(rb_unet_config, downsample_padding), 0, 1},
    {"mid_block_scale_factor", F_F32, offsetof(rb_unet_config, mid_block_scale_factor), 1e-6, BIG},
    {"resnet_out_scale_factor", F_F32, offsetof(rb_unet_config, resnet_out_scale_factor), 1e-6, BIG},
    {"add_text_time", F_BOOL, offsetof(rb_unet_config, add_text_time), 0, 1},
    {"addition_time_embed_dim", F_I64, offsetof(rb_unet_config, addition_time_embed_dim), 0, BIG},
    {"projection_class_embeddings_input_dim", F_I64, offsetof(rb_unet_config, projection_class_embeddings_input_dim),
     0, 1 << 20},
};

static const field k_vae[] = {
    {"block_out_channels", F_LV_I64, offsetof(rb_vae_config, block_out_channels), 1, BIG},
    {"in_channels", F_I64, offsetof(rb_vae_config, in_channels), 1, 4096},
    {"out_channels", F_I64, offsetof(rb_vae_config, out_channels), 1, 4096},
    {"latent_channels", F_I64, offsetof(rb_vae_config, latent_channels), 1, 4096},
    {"layers_per_block", F_INT, offsetof(rb_vae_config, layers_per_block), 1, 8},
    {"norm_num_groups", F_INT, offsetof(rb_vae_config, norm_num_groups), 1, 4096},
    {"scaling_factor", F_F32, offsetof(rb_vae_config, scaling_factor), -BIG, BIG},
    {"has_shift_factor", F_BOOL, offsetof(rb_vae_config, has_shift_factor), 0, 1},
    {"shift_factor", F_F32, offsetof(rb_vae_config, shift_factor), -BIG, BIG},
    {"force_upcast", F_BOOL, offsetof(rb_vae_config, force_upcast), 0, 1},
    {"mid_block_attention", F_BOOL, offsetof(rb_vae_config, mid_block_attention), 0, 1},
    {"use_quant_conv", F_BOOL, offsetof(rb_vae_config, use_quant_conv), 0, 1},
    {"use_post_quant_conv", F_BOOL, offsetof(rb_vae_config, use_post_quant_conv), 0, 1},
};

static const field k_text[] = {
    {"vocab_size", F_I64, offsetof(rb_clip_text_config, vocab_size), 1, 2147483647.0},
    {"hidden_size", F_I64, offsetof(rb_clip_text_config, hidden_size), 1, BIG},
    {"intermediate_size", F_I64, offsetof(rb_clip_text_config, intermediate_size), 1, 1 << 18},
    {"num_hidden_layers", F_I64, offsetof(rb_clip_text_config, n_layers), 1, 1024},
    {"num_attention_heads", F_I64, offsetof(rb_clip_text_config, n_heads), 1, 1024},
    {"max_position_embeddings", F_I64, offsetof(rb_clip_text_config, max_positions), 1, BIG},
    {"projection_dim", F_I64, offsetof(rb_clip_text_config, projection_dim), 1, BIG},
    {"with_projection", F_BOOL, offsetof(rb_clip_text_config, with_projection), 0, 1},
    {"layer_norm_eps", F_F32, offsetof(rb_clip_text_config, eps), 1e-12, 1},
    {"bos_token_id", F_I32, offsetof(rb_clip_text_config, bos_id), 0, 2147483647.0},
    {"eos_token_id", F_I32, offsetof(rb_clip_text_config, eos_id), 0, 2147483647.0},
};

static const char *const k_acts[] = {"quick_gelu", "gelu", "gelu_tanh"}; /* rb_clip_act order */

static const char *const k_families[] = {"sd1", "sd2", "sdxl", "sdxl-refiner"}; /* sd_family - 1 */

const char *sd_gguf_arch_name(sd_family f) {
    return f == SD_FAMILY_SDXL || f == SD_FAMILY_SDXL_REFINER ? "sdxl" : "sd1";
}

/* ---- writing ---- */

static rb_status wr(rb_status s, const char *key, rb_error *err) {
    return s == RB_OK ? RB_OK : rb_error_set(err, s, "cannot write metadata key %s", key);
}

static rb_status write_fields(rb_gguf_writer *w, const char *prefix, const field *fs, size_t nf, const void *base,
                              int n_levels, rb_error *err) {
    for (size_t i = 0; i < nf; i++) {
        const field *f = &fs[i];
        const char *p = (const char *)base + f->off;
        char key[160];
        snprintf(key, sizeof key, PFX "%s%s", prefix, f->key);
        rb_status s = RB_OK;
        int64_t lv[RB_SD_MAX_LEVELS];
        uint8_t bv[RB_SD_MAX_LEVELS];
        switch (f->t) {
        case F_I64: s = rb_gguf_writer_set_i64(w, key, *(const int64_t *)p); break;
        case F_INT: s = rb_gguf_writer_set_i32(w, key, (int32_t) * (const int *)p); break;
        case F_I32: s = rb_gguf_writer_set_i32(w, key, *(const int32_t *)p); break;
        case F_BOOL: s = rb_gguf_writer_set_bool(w, key, *(const bool *)p); break;
        case F_F32: s = rb_gguf_writer_set_f32(w, key, *(const float *)p); break;
        case F_LV_I64: s = rb_gguf_writer_set_arr(w, key, RB_GGUF_INT64, p, (uint64_t)n_levels); break;
        case F_LV_INT:
            for (int l = 0; l < n_levels; l++) lv[l] = ((const int *)p)[l];
            s = rb_gguf_writer_set_arr(w, key, RB_GGUF_INT64, lv, (uint64_t)n_levels);
            break;
        case F_LV_BOOL:
            for (int l = 0; l < n_levels; l++) bv[l] = ((const bool *)p)[l];
            s = rb_gguf_writer_set_arr(w, key, RB_GGUF_BOOL, bv, (uint64_t)n_levels);
            break;
        }
        if ((s = wr(s, key, err)) != RB_OK) return s;
    }
    return RB_OK;
}

static rb_status write_text(rb_gguf_writer *w, const char *prefix, const rb_clip_text_config *c, rb_error *err) {
    rb_status s = write_fields(w, prefix, k_text, sizeof k_text / sizeof k_text[0], c, 0, err);
    if (s != RB_OK) return s;
    char key[96];
    snprintf(key, sizeof key, PFX "%shidden_act", prefix);
    if ((unsigned)c->act >= 3) return rb_error_set(err, RB_E_INVALID, "unknown CLIP activation %d", (int)c->act);
    return wr(rb_gguf_writer_set_str(w, key, k_acts[c->act]), key, err);
}

rb_status sd_gguf_write_configs(rb_gguf_writer *w, const sd_gguf_configs *c, rb_error *err) {
    if (c->family < SD_FAMILY_SD1 || c->family > SD_FAMILY_SDXL_REFINER)
        return rb_error_set(err, RB_E_INVALID, "unknown SD family %d", (int)c->family);
    rb_status s = wr(rb_gguf_writer_set_str(w, PFX "family", k_families[c->family - 1]), PFX "family", err);
    if (s == RB_OK && c->has_unet)
        s = write_fields(w, "unet.", k_unet, sizeof k_unet / sizeof k_unet[0], &c->unet, c->unet.n_levels, err);
    if (s == RB_OK && c->has_vae)
        s = write_fields(w, "vae.", k_vae, sizeof k_vae / sizeof k_vae[0], &c->vae, c->vae.n_levels, err);
    if (s == RB_OK && c->has_text) s = write_text(w, "text_encoder.", &c->text, err);
    if (s == RB_OK && c->has_text_2) s = write_text(w, "text_encoder_2.", &c->text_2, err);
    if (s == RB_OK && c->has_unet && c->sample_size[0] > 0) {
        const int64_t hw[2] = {c->sample_size[0], c->sample_size[1]};
        s = wr(rb_gguf_writer_set_arr(w, PFX "unet.sample_size", RB_GGUF_INT64, hw, 2), PFX "unet.sample_size", err);
    }
    if (s == RB_OK && c->scheduler_json)
        s = wr(rb_gguf_writer_set_str(w, PFX "scheduler.config", c->scheduler_json), PFX "scheduler.config", err);
    static const char *const pad[2] = {PFX "tokenizer.pad_token", PFX "tokenizer_2.pad_token"};
    for (int i = 0; i < 2 && s == RB_OK; i++)
        if (c->pad_token[i]) s = wr(rb_gguf_writer_set_str(w, pad[i], c->pad_token[i]), pad[i], err);
    return s;
}

/* ---- reading ---- */

static rb_status bad(rb_error *err, const char *key, const char *what) {
    return rb_error_set(err, RB_E_FORMAT, "metadata %s must be %s", key, what);
}

static bool int_array(const rb_gguf_kv *kv) {
    const rb_gguf_type t = kv->arr_type;
    return kv->type == RB_GGUF_ARRAY && t != RB_GGUF_STRING && t != RB_GGUF_ARRAY && t != RB_GGUF_FLOAT32 &&
           t != RB_GGUF_FLOAT64;
}

static rb_status read_num(const rb_gguf *g, const char *key, const field *f, double *v, rb_error *err) {
    int64_t i;
    rb_status s = f->t == F_F32 ? rb_gguf_get_f64(g, key, v) : rb_gguf_get_i64(g, key, &i);
    if (s == RB_E_NOT_FOUND) return rb_error_set(err, RB_E_FORMAT, "metadata %s is missing", key);
    if (s != RB_OK) return bad(err, key, f->t == F_F32 ? "a number" : "an integer");
    if (f->t != F_F32) *v = (double)i;
    if (!(*v >= f->lo && *v <= f->hi)) {
        char what[96];
        snprintf(what, sizeof what, "in [%g, %g] (is %g)", f->lo, f->hi, *v);
        return bad(err, key, what);
    }
    return RB_OK;
}

static rb_status read_fields(const rb_gguf *g, const char *prefix, const field *fs, size_t nf, void *base,
                             int *n_levels, rb_error *err) {
    for (size_t i = 0; i < nf; i++) {
        const field *f = &fs[i];
        char *p = (char *)base + f->off;
        char key[160];
        snprintf(key, sizeof key, PFX "%s%s", prefix, f->key);
        if (f->t == F_BOOL) {
            rb_status s = rb_gguf_get_bool(g, key, (bool *)p);
            if (s == RB_E_NOT_FOUND) return rb_error_set(err, RB_E_FORMAT, "metadata %s is missing", key);
            if (s != RB_OK) return bad(err, key, "a bool");
            continue;
        }
        if (f->t != F_LV_I64 && f->t != F_LV_INT && f->t != F_LV_BOOL) {
            double v;
            rb_status s = read_num(g, key, f, &v, err);
            if (s != RB_OK) return s;
            if (f->t == F_I64) *(int64_t *)p = (int64_t)v;
            else if (f->t == F_INT) *(int *)p = (int)v;
            else if (f->t == F_I32) *(int32_t *)p = (int32_t)v;
            else *(float *)p = (float)v;
            continue;
        }
        const rb_gguf_kv *kv = rb_gguf_find_kv(g, key);
        if (!kv) return rb_error_set(err, RB_E_FORMAT, "metadata %s is missing", key);
        if (!int_array(kv)) return bad(err, key, "an array of integers");
        if (*n_levels == 0) { /* the first list (block_out_channels) gives the levels */
            if (kv->arr_len < 1 || kv->arr_len > RB_SD_MAX_LEVELS) return bad(err, key, "a list of 1 to 8 levels");
            *n_levels = (int)kv->arr_len;
        }
        if (kv->arr_len != (uint64_t)*n_levels) return bad(err, key, "a list with one entry per level");
        for (int l = 0; l < *n_levels; l++) {
            const int64_t v = rb_gguf_arr_int(kv, (uint64_t)l);
            if (!((double)v >= f->lo && (double)v <= f->hi)) return bad(err, key, "a list of values in range");
            if (f->t == F_LV_I64) ((int64_t *)p)[l] = v;
            else if (f->t == F_LV_INT) ((int *)p)[l] = (int)v;
            else ((bool *)p)[l] = v != 0;
        }
    }
    return RB_OK;
}

static rb_status read_str(const rb_gguf *g, const char *key, char **out, rb_error *err) {
    rb_status s = rb_gguf_get_str(g, key, out);
    if (s == RB_E_NOT_FOUND) {
        *out = NULL;
        return RB_OK;
    }
    if (s == RB_E_NOMEM) return rb_error_set(err, s, "out of memory");
    return s == RB_OK ? RB_OK : bad(err, key, "a string");
}

/* The checks the config.json parsers and the networks make across fields. */
static rb_status check_unet(const rb_unet_config *c, rb_error *err) {
    for (int i = 0; i < c->n_levels; i++) {
        const int64_t ch = c->block_out_channels[i];
        if (ch % c->norm_num_groups)
            return rb_error_set(err, RB_E_FORMAT, PFX "unet: norm_num_groups %d does not divide %lld channels",
                                c->norm_num_groups, (long long)ch);
        if ((c->down_cross_attn[i] || c->up_cross_attn[i] || (i == c->n_levels - 1 && c->mid_block)) &&
            ch % c->n_heads[i])
            return rb_error_set(err, RB_E_FORMAT, PFX "unet: %d heads do not divide %lld channels", c->n_heads[i],
                                (long long)ch);
    }
    if (c->conv_in_kernel % 2 == 0 || c->conv_out_kernel % 2 == 0)
        return rb_error_set(err, RB_E_FORMAT, PFX "unet: convolution kernels must have odd sizes");
    if (c->add_text_time && (c->addition_time_embed_dim < 1 ||
                             c->projection_class_embeddings_input_dim <= c->addition_time_embed_dim))
        return rb_error_set(err, RB_E_FORMAT, PFX "unet: text_time embedding widths out of range");
    return RB_OK;
}

static rb_status check_vae(const rb_vae_config *c, rb_error *err) {
    for (int i = 0; i < c->n_levels; i++)
        if (c->block_out_channels[i] % c->norm_num_groups)
            return rb_error_set(err, RB_E_FORMAT, PFX "vae: norm_num_groups %d does not divide %lld channels",
                                c->norm_num_groups, (long long)c->block_out_channels[i]);
    if (c->scaling_factor == 0.0f) return rb_error_set(err, RB_E_FORMAT, PFX "vae.scaling_factor must not be 0");
    return RB_OK;
}

static rb_status read_text(const rb_gguf *g, const char *prefix, rb_clip_text_config *c, rb_error *err) {
    int nl = -1; /* no level lists */
    rb_status s = read_fields(g, prefix, k_text, sizeof k_text / sizeof k_text[0], c, &nl, err);
    if (s != RB_OK) return s;
    char key[96], *act = NULL;
    snprintf(key, sizeof key, PFX "%shidden_act", prefix);
    if ((s = read_str(g, key, &act, err)) != RB_OK) return s;
    int a = -1;
    for (int i = 0; act && i < 3; i++)
        if (!strcmp(act, k_acts[i])) a = i;
    free(act);
    if (a < 0) return bad(err, key, "quick_gelu, gelu or gelu_tanh");
    c->act = (rb_clip_act)a;
    if (c->hidden_size % c->n_heads)
        return rb_error_set(err, RB_E_FORMAT, PFX "%s: %lld heads do not divide hidden_size %lld", prefix,
                            (long long)c->n_heads, (long long)c->hidden_size);
    return RB_OK;
}

static bool has_group(const rb_gguf *g, const char *group) {
    const size_t n = strlen(group);
    for (int64_t i = 0; i < rb_gguf_n_kv(g); i++) {
        const rb_gguf_kv *kv = rb_gguf_kv_at(g, i);
        if (kv->key.len > n && memcmp(kv->key.ptr, group, n) == 0) return true;
    }
    return false;
}

static rb_status read_all(const rb_gguf *g, sd_gguf_configs *c, rb_error *err) {
    char *fam = NULL;
    rb_status s = read_str(g, PFX "family", &fam, err);
    if (s != RB_OK) return s;
    if (!fam) return rb_error_set(err, RB_E_NOT_FOUND, "no " PFX "family");
    for (int i = 0; i < 4; i++)
        if (!strcmp(fam, k_families[i])) c->family = (sd_family)(i + 1);
    free(fam);
    if (!c->family) return bad(err, PFX "family", "sd1, sd2, sdxl or sdxl-refiner");
    c->exact = true;
    if ((c->has_unet = has_group(g, PFX "unet."))) {
        if ((s = read_fields(g, "unet.", k_unet, sizeof k_unet / sizeof k_unet[0], &c->unet, &c->unet.n_levels,
                             err)) != RB_OK ||
            (s = check_unet(&c->unet, err)) != RB_OK)
            return s;
        const rb_gguf_kv *kv = rb_gguf_find_kv(g, PFX "unet.sample_size"); /* optional */
        if (kv) {
            if (!int_array(kv) || kv->arr_len != 2) return bad(err, PFX "unet.sample_size", "[height, width]");
            for (int i = 0; i < 2; i++) {
                const int64_t v = rb_gguf_arr_int(kv, (uint64_t)i);
                if (v < 1 || v > 1024) return bad(err, PFX "unet.sample_size", "two sizes in [1, 1024]");
                c->sample_size[i] = (int)v;
            }
        }
    }
    if ((c->has_vae = has_group(g, PFX "vae."))) {
        if ((s = read_fields(g, "vae.", k_vae, sizeof k_vae / sizeof k_vae[0], &c->vae, &c->vae.n_levels, err)) !=
                RB_OK ||
            (s = check_vae(&c->vae, err)) != RB_OK)
            return s;
    }
    if ((c->has_text = has_group(g, PFX "text_encoder.")) && (s = read_text(g, "text_encoder.", &c->text, err)))
        return s;
    if ((c->has_text_2 = has_group(g, PFX "text_encoder_2.")) &&
        (s = read_text(g, "text_encoder_2.", &c->text_2, err)))
        return s;
    if ((s = read_str(g, PFX "scheduler.config", &c->scheduler_json, err)) != RB_OK) return s;
    if ((s = read_str(g, PFX "tokenizer.pad_token", &c->pad_token[0], err)) != RB_OK) return s;
    return read_str(g, PFX "tokenizer_2.pad_token", &c->pad_token[1], err);
}

rb_status sd_gguf_read_configs(const rb_gguf *g, sd_gguf_configs *c, rb_error *err) {
    memset(c, 0, sizeof *c);
    rb_status s = read_all(g, c, err);
    if (s != RB_OK) {
        sd_gguf_configs_free(c);
        memset(c, 0, sizeof *c);
    }
    return s;
}

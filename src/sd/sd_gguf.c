/* Opening an SD GGUF file (see sd_gguf.h): the tensor list with
 * NUL-terminated names (stable-diffusion.cpp's internal text-encoder names
 * turned back into the original ones, sd_gguf_names.c), logical shapes
 * (ComfyUI-GGUF's comfy.gguf.orig_shape.* applied), the component maps, and
 * the configs (the file's rbee.sd.* keys, else the family's). Which layout
 * a file has follows from its names:
 *   model.diffusion_model.*        the UNet of a full (or partial) checkpoint
 *   input_blocks.* / middle_block.* / output_blocks.* at the top level
 *                                  a ComfyUI-GGUF UNet (LDM names)
 *   conv_in.* / down_blocks.* ...  a UNet in diffusers' names
 *   first_stage_model.*            the VAE
 *   cond_stage_model.* / conditioner.embedders.*   the text encoders, whose
 *                                  prefixes also give the family (sd_ldm.c)
 * general.architecture, when present, must be a Stable Diffusion one. */
#include "sd/sd_gguf.h"

#include "rbee/quant.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rb_status sd_gguf_sdcpp_rename(sd_tensor_list *list, char **names, rb_error *err);

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool ends(const char *s, const char *e) {
    size_t n = strlen(s), m = strlen(e);
    return n >= m && strcmp(s + n - m, e) == 0;
}

void sd_gguf_configs_free(sd_gguf_configs *c) {
    if (!c) return;
    free(c->scheduler_json);
    free(c->pad_token[0]);
    free(c->pad_token[1]);
    c->scheduler_json = c->pad_token[0] = c->pad_token[1] = NULL;
}

rb_status sd_gguf_configs_copy(const sd_gguf_configs *from, sd_gguf_configs *to, rb_error *err) {
    *to = *from;
    to->scheduler_json = to->pad_token[0] = to->pad_token[1] = NULL;
    const char *src[3] = {from->scheduler_json, from->pad_token[0], from->pad_token[1]};
    char **dst[3] = {&to->scheduler_json, &to->pad_token[0], &to->pad_token[1]};
    for (int i = 0; i < 3; i++)
        if (src[i] && !(*dst[i] = strdup(src[i]))) {
            sd_gguf_configs_free(to);
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
    return RB_OK;
}

static void destroy(sd_tensor_owner *s) {
    sd_gguf *f = (sd_gguf *)s;
    sd_ldm_free(&f->ldm);
    for (int64_t i = 0; f->names && i < f->list.n; i++) free(f->names[i]);
    free(f->names);
    for (size_t i = 0; i < f->n_owned; i++) free(f->owned[i]);
    free(f->owned);
    sd_tensor_list_free(&f->list);
    sd_gguf_configs_free(&f->cfg);
    rb_gguf_close(f->g);
    free(f);
}

void sd_gguf_unref(sd_gguf *f) {
    if (f) sd_owner_unref(&f->src);
}

static rb_status keep(sd_gguf *f, void *p, rb_error *err) {
    if (f->n_owned == f->cap_owned) {
        size_t cap = f->cap_owned ? 2 * f->cap_owned : 8;
        void **q = realloc(f->owned, cap * sizeof *q);
        if (!q) {
            free(p);
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
        f->owned = q;
        f->cap_owned = cap;
    }
    f->owned[f->n_owned++] = p;
    return RB_OK;
}

/* ---- the tensor list ---- */

static int64_t elements(const rb_st_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= t->ne[d]; /* the reader bounds each tensor by the file */
    return n;
}

/* ComfyUI-GGUF's reshaped tensors: comfy.gguf.orig_shape.<name> = the torch
 * shape (an integer array) of a tensor stored as rows of 256. */
rb_status sd_gguf_orig_shape(const rb_gguf *g, const char *name, rb_st_tensor *t, rb_error *err) {
    static const char pfx[] = "comfy.gguf.orig_shape.";
    const size_t n = strlen(name);
    char *key = malloc(sizeof pfx + n);
    if (!key) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    memcpy(key, pfx, sizeof pfx - 1);
    memcpy(key + sizeof pfx - 1, name, n + 1);
    const rb_gguf_kv *kv = rb_gguf_find_kv(g, key);
    free(key);
    if (!kv) return RB_OK;
    const rb_gguf_type et = kv->arr_type;
    if (kv->type != RB_GGUF_ARRAY || et == RB_GGUF_STRING || et == RB_GGUF_ARRAY || et == RB_GGUF_BOOL ||
        et == RB_GGUF_FLOAT32 || et == RB_GGUF_FLOAT64 || kv->arr_len < 1 || kv->arr_len > RB_MAX_DIMS)
        return rb_error_set(err, RB_E_FORMAT, "%s%s must be an array of 1 to %d integers", pfx, name, RB_MAX_DIMS);
    int64_t ne[RB_MAX_DIMS] = {1, 1, 1, 1}, total = 1;
    const int nd = (int)kv->arr_len;
    for (int d = 0; d < nd; d++) {
        const int64_t v = rb_gguf_arr_int(kv, (uint64_t)d);
        if (v < 1 || v > ((int64_t)1 << 40) || total > INT64_MAX / v)
            return rb_error_set(err, RB_E_FORMAT, "%s%s: dimension %d is %lld", pfx, name, d, (long long)v);
        total *= v;
        ne[nd - 1 - d] = v; /* torch order -> ggml order */
    }
    if (total != elements(t))
        return rb_error_set(err, RB_E_FORMAT, "%s%s has %lld elements, the stored tensor %lld", pfx, name,
                            (long long)total, (long long)elements(t));
    t->n_dims = nd;
    memcpy(t->ne, ne, sizeof ne);
    return RB_OK;
}

static bool quantized(rb_dtype t) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t);
    return tr && tr->is_quant;
}

/* An f32 copy of a quantized tensor the LDM mapping must transpose (an
 * OpenCLIP text_projection) or split into rows that are not whole blocks
 * (a fused q/k/v projection stored flattened). */
static rb_status dequantize_if_needed(sd_gguf *f, rb_st_tensor *t, rb_error *err) {
    if (!quantized(t->dtype)) return RB_OK;
    const bool proj = ends(t->name, ".text_projection");
    const bool qkv = ends(t->name, ".in_proj_weight") || ends(t->name, ".in_proj.weight");
    if (!proj && !(qkv && t->ne[0] % rb_dtype_info((int)t->dtype)->block_size != 0)) return RB_OK;
    const int64_t n = elements(t);
    float *x = malloc((size_t)n * sizeof(float) + 1);
    if (!x) return rb_error_set(err, RB_E_NOMEM, "out of memory dequantizing '%s'", t->name);
    if (rb_dequantize_row(t->dtype, t->data, x, n) != RB_OK) {
        free(x);
        return rb_error_set(err, RB_E_FORMAT, "tensor '%s' (%s) cannot be dequantized", t->name,
                            rb_dtype_name(t->dtype));
    }
    rb_status s = keep(f, x, err);
    if (s != RB_OK) return s;
    t->dtype = RB_F32;
    t->data = x;
    t->nbytes = (size_t)n * sizeof(float);
    return RB_OK;
}

rb_status sd_gguf_tensor_entry(const rb_gguf *g, int64_t i, char **name, rb_st_tensor *t, rb_error *err) {
    *name = NULL;
    const rb_gguf_tensor_info *ti = rb_gguf_tensor_at(g, i);
    if (!ti) return rb_error_set(err, RB_E_RANGE, "tensor %lld does not exist", (long long)i);
    char *nm = malloc((size_t)ti->name.len + 1);
    if (!nm) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    memcpy(nm, ti->name.ptr, (size_t)ti->name.len);
    nm[ti->name.len] = '\0';
    if (strlen(nm) != ti->name.len) {
        free(nm);
        return rb_error_set(err, RB_E_FORMAT, "tensor %lld's name holds a NUL byte", (long long)i);
    }
    *name = nm;
    t->name = nm;
    t->dtype = ti->dtype;
    t->n_dims = ti->n_dims;
    memcpy(t->ne, ti->ne, sizeof t->ne);
    t->nbytes = ti->nbytes;
    t->data = ti->data;
    return sd_gguf_orig_shape(g, nm, t, err);
}

static rb_status build_list(sd_gguf *f, rb_error *err) {
    const int64_t n = rb_gguf_n_tensors(f->g);
    f->names = calloc(n > 0 ? (size_t)n : 1, sizeof *f->names);
    f->list.owned = calloc(n > 0 ? (size_t)n : 1, sizeof *f->list.owned);
    if (!f->names || !f->list.owned) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    f->list.t = f->list.owned;
    for (int64_t i = 0; i < n; i++) {
        rb_status s = sd_gguf_tensor_entry(f->g, i, &f->names[i], &f->list.owned[i], err);
        f->list.n = f->names[i] ? i + 1 : i;
        if (s != RB_OK) return s;
    }
    rb_status s = sd_gguf_sdcpp_rename(&f->list, f->names, err);
    for (int64_t i = 0; s == RB_OK && i < n; i++) s = dequantize_if_needed(f, &f->list.owned[i], err);
    return s;
}

/* ---- the component maps ---- */

static bool has_prefix(const sd_tensor_list *l, const char *prefix) {
    for (int64_t i = 0; i < l->n; i++)
        if (starts(l->t[i].name, prefix)) return true;
    return false;
}

/* A diffusers UNet name at the top level. */
static bool diffusers_unet_name(const char *n) {
    static const char *const p[] = {"conv_in.",     "time_embedding.", "add_embedding.", "down_blocks.",
                                    "mid_block.",   "up_blocks.",      "conv_norm_out.", "conv_out."};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (starts(n, p[i])) return true;
    return false;
}

static rb_status map_unet(sd_gguf *f, rb_error *err) {
    const sd_tensor_list *l = &f->list;
    if (has_prefix(l, "model.diffusion_model.")) return sd_ldm_map_unet(l, "model.diffusion_model.", &f->ldm, err);
    if (has_prefix(l, "input_blocks.") || has_prefix(l, "middle_block.") || has_prefix(l, "output_blocks.")) {
        f->unet_only = true;
        return sd_ldm_map_unet(l, "", &f->ldm, err);
    }
    if (has_prefix(l, "down_blocks.") && has_prefix(l, "conv_in.")) {
        f->unet_only = true;
        for (int64_t i = 0; i < l->n; i++)
            if (diffusers_unet_name(l->t[i].name)) {
                rb_status s = sd_name_map_add(&f->ldm.unet, l->t[i].name, &l->t[i], err);
                if (s != RB_OK) return s;
            }
    }
    return RB_OK;
}

/* Text encoders and the family they show (0: none). */
static rb_status map_text(sd_gguf *f, sd_family *family, rb_error *err) {
    const sd_tensor_list *l = &f->list;
    sd_ldm *m = &f->ldm;
    static const char sd1[] = "cond_stage_model.transformer.", sd2[] = "cond_stage_model.model.",
                      xl0hf[] = "conditioner.embedders.0.transformer.", xl0oc[] = "conditioner.embedders.0.model.",
                      xl1oc[] = "conditioner.embedders.1.model.";
    *family = 0;
    if (has_prefix(l, xl0hf) && has_prefix(l, xl1oc)) {
        *family = SD_FAMILY_SDXL;
        rb_status s = sd_ldm_map_clip_hf(l, xl0hf, &m->text1, &m->text1_shape, err);
        return s != RB_OK ? s : sd_ldm_map_open_clip(l, xl1oc, false, &m->text2, &m->text2_shape, err);
    }
    if (has_prefix(l, xl0oc)) {
        *family = SD_FAMILY_SDXL_REFINER;
        return sd_ldm_map_open_clip(l, xl0oc, false, &m->text2, &m->text2_shape, err);
    }
    if (has_prefix(l, sd2)) {
        *family = SD_FAMILY_SD2;
        return sd_ldm_map_open_clip(l, sd2, true, &m->text2, &m->text2_shape, err);
    }
    if (has_prefix(l, sd1)) {
        *family = SD_FAMILY_SD1;
        return sd_ldm_map_clip_hf(l, sd1, &m->text1, &m->text1_shape, err);
    }
    if (has_prefix(l, "conditioner.embedders."))
        return rb_error_set(err, RB_E_FORMAT, "conditioner.embedders.* holds no text encoders this loader knows (SDXL: "
                                              "0.transformer. and 1.model.; the refiner: 0.model.)");
    return RB_OK;
}

const sd_name_map *sd_gguf_component_map(const sd_ldm *l, sd_family f, unsigned component) {
    const sd_name_map *m = NULL;
    switch (component) {
    case SD_GGUF_TEXT: m = f == SD_FAMILY_SD2 ? &l->text2 : f == SD_FAMILY_SDXL_REFINER ? NULL : &l->text1; break;
    case SD_GGUF_TEXT_2: m = f == SD_FAMILY_SDXL || f == SD_FAMILY_SDXL_REFINER ? &l->text2 : NULL; break;
    case SD_GGUF_UNET: m = &l->unet; break;
    case SD_GGUF_VAE: m = &l->vae; break;
    default: break;
    }
    return m && m->n > 0 ? m : NULL;
}

static rb_status map_all(sd_gguf *f, sd_family *family, rb_error *err) {
    rb_status s = map_text(f, family, err);
    if (s == RB_OK) s = map_unet(f, err);
    if (s == RB_OK && has_prefix(&f->list, "first_stage_model."))
        s = sd_ldm_map_vae(&f->list, "first_stage_model.", &f->ldm, err);
    if (s != RB_OK) return s;
    const sd_ldm *l = &f->ldm;
    if (l->unet.n + l->vae.n + l->text1.n + l->text2.n == 0)
        return rb_error_set(err, RB_E_FORMAT,
                            "no Stable Diffusion tensors (model.diffusion_model.*, first_stage_model.*, "
                            "cond_stage_model.*, conditioner.embedders.*, or a UNet's input_blocks.* / down_blocks.*)");
    if (!*family) {
        if (l->unet.n) *family = sd_gguf_unet_family(&l->unet);
        else *family = strcmp(f->arch, "sdxl") == 0 ? SD_FAMILY_SDXL : SD_FAMILY_SD1;
    }
    f->ldm.family = *family;
    return RB_OK;
}

/* ---- the configs ---- */

static const struct {
    unsigned c;
    const char *what;
    size_t off;
} k_comp[] = {
    {SD_GGUF_TEXT, "text_encoder", offsetof(sd_gguf_configs, has_text)},
    {SD_GGUF_TEXT_2, "text_encoder_2", offsetof(sd_gguf_configs, has_text_2)},
    {SD_GGUF_UNET, "unet", offsetof(sd_gguf_configs, has_unet)},
    {SD_GGUF_VAE, "vae", offsetof(sd_gguf_configs, has_vae)},
};

static bool has_cfg(const sd_gguf_configs *c, size_t i) { return *(const bool *)((const char *)c + k_comp[i].off); }

static rb_status configs(sd_gguf *f, sd_family family, rb_error *err) {
    rb_status s = sd_gguf_read_configs(f->g, &f->cfg, err);
    if (s == RB_E_NOT_FOUND) {
        rb_error_clear(err);
        rb_error e;
        rb_error_clear(&e);
        s = sd_gguf_derive_configs(&f->ldm, family, &f->cfg, &e);
        if (s == RB_E_UNSUPPORTED) { /* the file opens; loading needs configs (sd_gguf_use_configs) */
            f->cfg_status = s;
            snprintf(f->cfg_msg, sizeof f->cfg_msg, "%s", e.msg);
            return RB_OK;
        }
        if (s != RB_OK) rb_error_set(err, s, "%s", e.msg);
        return s;
    }
    if (s != RB_OK) return s;
    /* the keys must describe the components the tensors hold, and no others */
    for (size_t i = 0; i < sizeof k_comp / sizeof k_comp[0]; i++) {
        const bool cfg = has_cfg(&f->cfg, i);
        const bool tensors = sd_gguf_component_map(&f->ldm, f->cfg.family, k_comp[i].c) != NULL;
        if (cfg != tensors)
            return rb_error_set(err, RB_E_FORMAT, "rbee.sd.%s.* config %s but %s tensors for it (family %s)",
                                k_comp[i].what, cfg ? "present" : "missing", tensors ? "the file has" : "no",
                                sd_family_name(f->cfg.family));
    }
    return RB_OK;
}

rb_status sd_gguf_use_configs(sd_gguf *f, const sd_gguf_configs *c, rb_error *err) {
    if (!f || !c) return rb_error_set(err, RB_E_INVALID, "sd gguf: NULL argument");
    const bool text = f->ldm.text1.n > 0 || f->ldm.text2.n > 0;
    if (text && c->family != f->ldm.family)
        return rb_error_set(err, RB_E_FORMAT, "%s: the configs describe an %s model, the file holds %s", f->label,
                            sd_family_name(c->family), sd_family_name(f->ldm.family));
    sd_gguf_configs n;
    rb_status s = sd_gguf_configs_copy(c, &n, err);
    if (s != RB_OK) return s;
    for (size_t i = 0; i < sizeof k_comp / sizeof k_comp[0]; i++) {
        const bool tensors = sd_gguf_component_map(&f->ldm, c->family, k_comp[i].c) != NULL;
        if (tensors && !has_cfg(c, i)) {
            sd_gguf_configs_free(&n);
            return rb_error_set(err, RB_E_FORMAT, "%s: the configs lack the %s the file holds", f->label,
                                k_comp[i].what);
        }
        *(bool *)((char *)&n + k_comp[i].off) = tensors;
    }
    bool oom = false;
    if (!n.sample_size[0]) memcpy(n.sample_size, f->cfg.sample_size, sizeof n.sample_size);
    if (!n.scheduler_json && f->cfg.scheduler_json) oom |= !(n.scheduler_json = strdup(f->cfg.scheduler_json));
    for (int i = 0; i < 2; i++)
        if (!n.pad_token[i] && f->cfg.pad_token[i]) oom |= !(n.pad_token[i] = strdup(f->cfg.pad_token[i]));
    if (oom) {
        sd_gguf_configs_free(&n);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    sd_gguf_configs_free(&f->cfg);
    f->cfg = n;
    f->ldm.family = n.family;
    f->cfg_status = RB_OK;
    f->cfg_msg[0] = '\0';
    return RB_OK;
}

static rb_status parse(sd_gguf *f, rb_error *err) {
    const rb_gguf_kv *kv = rb_gguf_find_kv(f->g, "general.architecture");
    if (kv) {
        if (kv->type != RB_GGUF_STRING) return rb_error_set(err, RB_E_FORMAT, "general.architecture is not a string");
        const rb_gguf_str *a = kv->data;
        snprintf(f->arch, sizeof f->arch, "%.*s", (int)(a->len < 31 ? a->len : 31), a->ptr);
        if (a->len > 31 || (strcmp(f->arch, "sd1") != 0 && strcmp(f->arch, "sdxl") != 0))
            return rb_error_set(err, RB_E_UNSUPPORTED,
                                "general.architecture '%s' is not a Stable Diffusion model this loader knows (sd1: "
                                "SD 1.x / 2.x, sdxl: SDXL)",
                                f->arch);
    }
    rb_status s = build_list(f, err);
    sd_family family = 0;
    if (s == RB_OK) s = map_all(f, &family, err);
    if (s == RB_OK) s = configs(f, family, err);
    return s;
}

static rb_status finish_open(rb_gguf *g, const char *label, sd_gguf **out, rb_error *err) {
    sd_gguf *f = calloc(1, sizeof *f);
    if (!f) {
        rb_gguf_close(g);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    snprintf(f->label, sizeof f->label, "%s", label);
    f->src.refs = 1;
    f->src.destroy = destroy;
    f->g = g;
    rb_status s = parse(f, err);
    if (s != RB_OK) {
        sd_gguf_unref(f);
        return s;
    }
    *out = f;
    return RB_OK;
}

rb_status sd_gguf_open(const char *path, sd_gguf **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "sd gguf: out is NULL");
    *out = NULL;
    if (!path) return rb_error_set(err, RB_E_INVALID, "sd gguf: path is NULL");
    rb_gguf *g = NULL;
    rb_status s = rb_gguf_open(path, &g, err); /* its messages name the file */
    if (s == RB_OK && (s = finish_open(g, path, out, err)) != RB_OK) rb_error_prefix(err, "%s: ", path);
    return s;
}

rb_status sd_gguf_open_memory(const void *data, size_t size, sd_gguf **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "sd gguf: out is NULL");
    *out = NULL;
    rb_gguf *g = NULL;
    rb_status s = rb_gguf_open_memory(data, size, &g, err);
    return s == RB_OK ? finish_open(g, "<memory>", out, err) : s;
}

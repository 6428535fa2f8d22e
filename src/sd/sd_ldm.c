/* sd_ldm.h: the name tables and the family detection of a single-file
 * checkpoint. The family follows from which prefixes are present:
 *   model.diffusion_model. + cond_stage_model.transformer.    SD 1.x
 *   model.diffusion_model. + cond_stage_model.model.          SD 2.x
 *   model.diffusion_model. + conditioner.embedders.0.transformer. + .1.model.  SDXL
 *   model.diffusion_model. + conditioner.embedders.0.model.   SDXL refiner
 * and the VAE is first_stage_model. in all of them. */
#include "sd/sd_ldm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sd_family_name(sd_family f) {
    switch (f) {
    case SD_FAMILY_SD1: return "sd1";
    case SD_FAMILY_SD2: return "sd2";
    case SD_FAMILY_SDXL: return "sdxl";
    case SD_FAMILY_SDXL_REFINER: return "sdxl-refiner";
    }
    return "unknown";
}

rb_status sd_tensor_list_st(const rb_st_set *s, sd_tensor_list *out, rb_error *err) {
    memset(out, 0, sizeof *out);
    int64_t n = rb_st_n_tensors(s);
    out->owned = calloc(n > 0 ? (size_t)n : 1, sizeof *out->owned);
    if (!out->owned) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) out->owned[i] = *rb_st_tensor_at(s, i);
    out->t = out->owned;
    out->n = n;
    return RB_OK;
}

void sd_tensor_list_free(sd_tensor_list *l) {
    free(l->owned);
    memset(l, 0, sizeof *l);
}

const rb_st_tensor *sd_name_map_find(const sd_name_map *m, const char *name) {
    int64_t i = rb_name_index_find(&m->index, name, strlen(name));
    return i < 0 ? NULL : &m->tensors[i];
}

rb_status sd_name_map_add(sd_name_map *m, const char *name, const rb_st_tensor *t, rb_error *err) {
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 256;
        char **nn = realloc(m->names, nc * sizeof *nn);
        if (!nn) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        m->names = nn;
        rb_st_tensor *nt = realloc(m->tensors, nc * sizeof *nt);
        if (!nt) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        m->tensors = nt;
        m->cap = nc;
    }
    char *copy = strdup(name);
    if (!copy) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    rb_status s = rb_name_index_insert(&m->index, copy, strlen(copy), (int64_t)m->n, NULL);
    if (s != RB_OK) {
        free(copy);
        if (s == RB_E_INVALID) return rb_error_set(err, RB_E_FORMAT, "two stored tensors map to %s", name);
        return rb_error_set(err, s, "out of memory");
    }
    m->names[m->n] = copy;
    m->tensors[m->n] = *t;
    m->tensors[m->n].name = copy;
    m->n++;
    return RB_OK;
}

rb_status sd_name_map_add_owned(sd_name_map *m, const char *name, const rb_st_tensor *t, void *data, rb_error *err) {
    if (m->n_owned == m->cap_owned) {
        size_t nc = m->cap_owned ? m->cap_owned * 2 : 4;
        void **no = realloc(m->owned, nc * sizeof *no);
        if (!no) {
            free(data);
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
        m->owned = no;
        m->cap_owned = nc;
    }
    m->owned[m->n_owned++] = data;
    rb_st_tensor d = *t;
    d.data = data;
    return sd_name_map_add(m, name, &d, err);
}

void sd_name_map_free(sd_name_map *m) {
    rb_name_index_free(&m->index); /* references the names: before they go */
    for (size_t i = 0; i < m->n; i++) free(m->names[i]);
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->names);
    free(m->tensors);
    free(m->owned);
    memset(m, 0, sizeof *m);
}

void sd_ldm_free(sd_ldm *l) {
    sd_name_map_free(&l->unet);
    sd_name_map_free(&l->vae);
    sd_name_map_free(&l->text1);
    sd_name_map_free(&l->text2);
    sd_name_map_free(&l->t5);
}

static bool has_prefix(const sd_tensor_list *ckpt, const char *prefix) {
    size_t n = strlen(prefix);
    for (int64_t i = 0; i < ckpt->n; i++)
        if (strncmp(ckpt->t[i].name, prefix, n) == 0) return true;
    return false;
}

rb_status sd_ldm_build(const sd_tensor_list *ckpt, sd_ldm *l, rb_error *err) {
    memset(l, 0, sizeof *l);
    static const char unet[] = "model.diffusion_model.", vae[] = "first_stage_model.";
    if (!has_prefix(ckpt, unet))
        return rb_error_set(err, RB_E_FORMAT,
                            "not a Stable Diffusion checkpoint: no tensor starts with \"%s\" (the UNet of an original "
                            "LDM/SGM single file)",
                            unet);
    const bool sd1 = has_prefix(ckpt, "cond_stage_model.transformer.");
    const bool sd2 = has_prefix(ckpt, "cond_stage_model.model.");
    const bool xl0hf = has_prefix(ckpt, "conditioner.embedders.0.transformer.");
    const bool xl0oc = has_prefix(ckpt, "conditioner.embedders.0.model.");
    const bool xl1oc = has_prefix(ckpt, "conditioner.embedders.1.model.");
    rb_status s = RB_OK;
    if (xl0hf && xl1oc) {
        l->family = SD_FAMILY_SDXL;
        if ((s = sd_ldm_map_clip_hf(ckpt, "conditioner.embedders.0.transformer.", &l->text1, &l->text1_shape, err)) ||
            (s = sd_ldm_map_open_clip(ckpt, "conditioner.embedders.1.model.", false, &l->text2, &l->text2_shape, err)))
            goto fail;
    } else if (xl0oc) {
        l->family = SD_FAMILY_SDXL_REFINER;
        if ((s = sd_ldm_map_open_clip(ckpt, "conditioner.embedders.0.model.", false, &l->text2, &l->text2_shape, err)))
            goto fail;
    } else if (sd2) {
        l->family = SD_FAMILY_SD2;
        if ((s = sd_ldm_map_open_clip(ckpt, "cond_stage_model.model.", true, &l->text2, &l->text2_shape, err)))
            goto fail;
    } else if (sd1) {
        l->family = SD_FAMILY_SD1;
        if ((s = sd_ldm_map_clip_hf(ckpt, "cond_stage_model.transformer.", &l->text1, &l->text1_shape, err))) goto fail;
    } else {
        s = rb_error_set(err, RB_E_FORMAT,
                         "the checkpoint has a UNet but no text encoder this loader knows (cond_stage_model.transformer. "
                         "(SD 1.x), cond_stage_model.model. (SD 2.x), conditioner.embedders. (SDXL))");
        goto fail;
    }
    if ((s = sd_ldm_map_unet(ckpt, unet, l, err)) != RB_OK) goto fail;
    if (!has_prefix(ckpt, vae)) {
        s = rb_error_set(err, RB_E_FORMAT, "the checkpoint has no VAE (no tensor starts with \"%s\")", vae);
        goto fail;
    }
    if ((s = sd_ldm_map_vae(ckpt, vae, l, err)) != RB_OK) goto fail;
    return RB_OK;
fail:
    rb_error_prefix(err, "single-file checkpoint: ");
    sd_ldm_free(l);
    return s;
}

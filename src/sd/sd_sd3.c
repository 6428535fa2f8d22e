/* sd_sd3.h: recognising an SD3 single file, building the tables of the
 * components it holds, adding text encoders from separate files, and the
 * checks that tie the components together (the MMDiT's pooled input is the
 * two CLIP projections side by side, its context input the T5 width, which
 * the two CLIP widths, concatenated and zero-padded, must not exceed). */
#include "sd/sd_sd3.h"

#include <stdio.h>
#include <string.h>

static const char k_mmdit[] = "model.diffusion_model.", k_vae[] = "first_stage_model.",
                  k_clip_l[] = "text_encoders.clip_l.transformer.", k_clip_g[] = "text_encoders.clip_g.transformer.",
                  k_t5[] = "text_encoders.t5xxl.transformer.";

static bool has_prefix(const sd_tensor_list *ckpt, const char *prefix) {
    const size_t n = strlen(prefix);
    for (int64_t i = 0; i < ckpt->n; i++)
        if (strncmp(ckpt->t[i].name, prefix, n) == 0) return true;
    return false;
}

bool sd_sd3_detect(const sd_tensor_list *ckpt) {
    return has_prefix(ckpt, "model.diffusion_model.joint_blocks.") || has_prefix(ckpt, "joint_blocks.");
}

rb_status sd_sd3_need(const sd_name_map *m, const char *what, const char *name, int nd, int64_t ne0, int64_t ne1,
                      int64_t ne2, rb_error *err) {
    const rb_st_tensor *t = sd_name_map_find(m, name);
    const int64_t ne[3] = {ne0, ne1, ne2};
    if (!t) return rb_error_set(err, RB_E_FORMAT, "%s: %s is missing", what, name);
    bool ok = t->n_dims == nd;
    for (int d = 0; ok && d < nd; d++) ok = t->ne[d] == ne[d];
    if (ok) return RB_OK;
    char got[128] = "", want[128] = "";
    size_t a = 0, b = 0;
    for (int d = t->n_dims - 1; d >= 0 && a < sizeof got - 24; d--)
        a += (size_t)snprintf(got + a, sizeof got - a, "%s%lld", d == t->n_dims - 1 ? "" : ", ", (long long)t->ne[d]);
    for (int d = nd - 1; d >= 0 && b < sizeof want - 24; d--)
        b += (size_t)snprintf(want + b, sizeof want - b, "%s%lld", d == nd - 1 ? "" : ", ", (long long)ne[d]);
    return rb_error_set(err, RB_E_FORMAT, "%s: %s has shape [%s], expected [%s]", what, name, got, want);
}

/* The widths the components must agree on (only among those present). */
static rb_status consistent(const sd_sd3 *s, rb_error *err) {
    const sd_sd3_mmdit_shape *m = &s->mmdit_shape;
    const sd_ldm_text_shape *l = &s->ldm.text1_shape, *g = &s->ldm.text2_shape;
    const bool has_m = s->present & SD_SD3_MMDIT, has_l = s->present & SD_SD3_CLIP_L,
               has_g = s->present & SD_SD3_CLIP_G, has_t = s->present & SD_SD3_T5;
    if (has_m && has_l && has_g && l->projection + g->projection != m->pooled_projection_dim)
        return rb_error_set(err, RB_E_FORMAT, "the MMDiT's pooled input is %lld wide, but the CLIP-L and CLIP-G "
                            "projections give %lld + %lld", (long long)m->pooled_projection_dim,
                            (long long)l->projection, (long long)g->projection);
    if (has_m && has_l && has_g && l->hidden + g->hidden > m->joint_attention_dim)
        return rb_error_set(err, RB_E_FORMAT, "the MMDiT's context input is %lld wide, narrower than the CLIP-L and "
                            "CLIP-G hidden states side by side (%lld + %lld)", (long long)m->joint_attention_dim,
                            (long long)l->hidden, (long long)g->hidden);
    if (has_m && has_t && s->t5_shape.d_model != m->joint_attention_dim)
        return rb_error_set(err, RB_E_FORMAT, "the MMDiT's context input is %lld wide but the T5 encoder's width is %lld",
                            (long long)m->joint_attention_dim, (long long)s->t5_shape.d_model);
    return RB_OK;
}

/* A CLIP text encoder with projection, HF layout (OpenCLIP's for CLIP-G
 * when the file has it) under prefix, into text1 (CLIP-L) or text2. */
static rb_status map_clip(const sd_tensor_list *t, const char *prefix, bool g, sd_sd3 *s, rb_error *err) {
    sd_name_map *m = g ? &s->ldm.text2 : &s->ldm.text1;
    sd_ldm_text_shape *sh = g ? &s->ldm.text2_shape : &s->ldm.text1_shape;
    char oc[160];
    snprintf(oc, sizeof oc, "%stransformer.resblocks.", prefix);
    rb_status st = g && has_prefix(t, oc) ? sd_ldm_map_open_clip(t, prefix, false, m, sh, err)
                                          : sd_ldm_map_clip_hf(t, prefix, m, sh, err);
    if (st != RB_OK) return st;
    if (sh->projection <= 0)
        return rb_error_set(err, RB_E_FORMAT, "%s text encoder: text_projection is missing (SD3 uses the projected "
                            "pooled output)", g ? "CLIP-G" : "CLIP-L");
    return sd_sd3_need(m, g ? "CLIP-G" : "CLIP-L", "text_projection.weight", 2, sh->hidden, sh->projection, 0, err);
}

rb_status sd_sd3_build(const sd_tensor_list *ckpt, sd_sd3 *s, rb_error *err) {
    memset(s, 0, sizeof *s);
    rb_status st = RB_OK;
    const char *mp = has_prefix(ckpt, "model.diffusion_model.joint_blocks.") ? k_mmdit
                     : has_prefix(ckpt, "joint_blocks.")                     ? ""
                                                                              : NULL;
    if (!mp) {
        st = rb_error_set(err, RB_E_FORMAT, "not an SD3 checkpoint: no tensor starts with \"%sjoint_blocks.\"",
                          k_mmdit);
        goto fail;
    }
    if ((st = sd_sd3_map_mmdit(ckpt, mp, &s->mmdit, &s->mmdit_shape, err)) != RB_OK) goto fail;
    s->present |= SD_SD3_MMDIT;
    if (has_prefix(ckpt, k_vae)) {
        if ((st = sd_ldm_map_vae(ckpt, k_vae, &s->ldm, err)) != RB_OK) goto fail;
        s->present |= SD_SD3_VAE;
    }
    if (has_prefix(ckpt, k_clip_l)) {
        if ((st = map_clip(ckpt, k_clip_l, false, s, err)) != RB_OK) goto fail;
        s->present |= SD_SD3_CLIP_L;
    }
    if (has_prefix(ckpt, k_clip_g)) {
        if ((st = map_clip(ckpt, k_clip_g, true, s, err)) != RB_OK) goto fail;
        s->present |= SD_SD3_CLIP_G;
    }
    if (has_prefix(ckpt, k_t5)) {
        if ((st = sd_sd3_map_t5(ckpt, k_t5, &s->t5, &s->t5_shape, err)) != RB_OK) goto fail;
        s->present |= SD_SD3_T5;
    }
    if ((st = consistent(s, err)) != RB_OK) goto fail;
    return RB_OK;
fail:
    rb_error_prefix(err, "SD3 single file: ");
    sd_sd3_free(s);
    return st;
}

void sd_sd3_free(sd_sd3 *s) {
    sd_name_map_free(&s->mmdit);
    sd_name_map_free(&s->t5);
    sd_ldm_free(&s->ldm);
    memset(s, 0, sizeof *s);
}

static const char *part_name(unsigned p) {
    switch (p) {
    case SD_SD3_MMDIT: return "MMDiT";
    case SD_SD3_VAE: return "VAE";
    case SD_SD3_CLIP_L: return "CLIP-L text encoder";
    case SD_SD3_CLIP_G: return "CLIP-G text encoder";
    default: return "T5 text encoder";
    }
}

static const char *part_prefix(unsigned p) {
    switch (p) {
    case SD_SD3_MMDIT: return k_mmdit;
    case SD_SD3_VAE: return k_vae;
    case SD_SD3_CLIP_L: return k_clip_l;
    case SD_SD3_CLIP_G: return k_clip_g;
    default: return k_t5;
    }
}

rb_status sd_sd3_add_text(sd_sd3 *s, sd_sd3_part part, const sd_tensor_list *file, const char *label, rb_error *err) {
    if (part != SD_SD3_CLIP_L && part != SD_SD3_CLIP_G && part != SD_SD3_T5)
        return rb_error_set(err, RB_E_INVALID, "%s: not a text encoder part", label);
    if (s->present & part)
        return rb_error_set(err, RB_E_INVALID, "%s: the checkpoint has a %s already", label, part_name(part));
    const char *pre = has_prefix(file, part_prefix(part)) ? part_prefix(part) : "";
    const bool g = part == SD_SD3_CLIP_G;
    rb_status st = part == SD_SD3_T5 ? sd_sd3_map_t5(file, pre, &s->t5, &s->t5_shape, err)
                                     : map_clip(file, pre, g, s, err);
    if (st == RB_OK) {
        s->present |= part;
        if ((st = consistent(s, err)) != RB_OK) s->present &= ~(unsigned)part;
    }
    if (st != RB_OK) { /* leave s as it was */
        if (part == SD_SD3_T5) {
            sd_name_map_free(&s->t5);
            memset(&s->t5_shape, 0, sizeof s->t5_shape);
        } else {
            sd_name_map_free(g ? &s->ldm.text2 : &s->ldm.text1);
            memset(g ? &s->ldm.text2_shape : &s->ldm.text1_shape, 0, sizeof s->ldm.text1_shape);
        }
        rb_error_prefix(err, "%s (%s): ", label, part_name(part));
    }
    return st;
}

rb_status sd_sd3_require(const sd_sd3 *s, unsigned need, const char *label, rb_error *err) {
    const unsigned missing = need & ~s->present;
    if (!missing) return RB_OK;
    char msg[RB_ERROR_MSG_MAX];
    size_t n = (size_t)snprintf(msg, sizeof msg, "%s has no", label);
    bool first = true;
    for (unsigned p = SD_SD3_MMDIT; p <= SD_SD3_T5 && n < sizeof msg; p <<= 1) {
        if (!(missing & p)) continue;
        n += (size_t)snprintf(msg + n, sizeof msg - n, "%s %s (%s*)", first ? "" : ",", part_name(p), part_prefix(p));
        first = false;
    }
    if (n < sizeof msg && (missing & (SD_SD3_CLIP_L | SD_SD3_CLIP_G | SD_SD3_T5)))
        snprintf(msg + n, sizeof msg - n, "; give the text encoders as separate files (clip_l.safetensors, "
                 "clip_g.safetensors, t5xxl_fp16.safetensors as ComfyUI distributes them) or use a diffusers folder");
    return rb_error_set(err, RB_E_NOT_FOUND, "%s", msg);
}

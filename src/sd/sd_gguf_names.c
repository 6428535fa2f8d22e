/* stable-diffusion.cpp's `sd convert --convert-name` writes the text
 * encoders in its internal names: CLIP ViT-L as transformers' CLIPTextModel
 * under cond_stage_model.transformer. (SD 1.x's original naming), SDXL's
 * OpenCLIP bigG under cond_stage_model.1.transformer., and every OpenCLIP
 * encoder (SD 2.x's ViT-H, SDXL's bigG, the refiner's) in transformers'
 * text_model.* names but with OpenCLIP's fused self_attn.in_proj.{weight,
 * bias} and its text_projection ([D, P], applied as x @ P) as
 * text_model.text_projection. Those names are turned back here into the
 * original ones (conditioner.embedders.* for SDXL and the refiner,
 * cond_stage_model.model.* for SD 2.x, OpenCLIP's transformer.resblocks.*
 * inside), which sd_ldm maps. The UNet and the VAE keep their original
 * names in that layout. */
#include "sd/sd_gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rb_status sd_gguf_sdcpp_rename(sd_tensor_list *list, char **names, rb_error *err);

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool any(const sd_tensor_list *l, const char *prefix, const char *part) {
    for (int64_t i = 0; i < l->n; i++)
        if (starts(l->t[i].name, prefix) && (!part || strstr(l->t[i].name, part))) return true;
    return false;
}

/* OpenCLIP's name (under prefix) of a transformers text_model.* name r
 * (after "text_model."); names it does not know keep their text_model. form.
 * false when it does not fit buf. */
static bool open_clip_name(const char *prefix, const char *r, char *buf, size_t cap) {
    static const struct { const char *from, *to; } whole[] = {
        {"embeddings.token_embedding.weight", "token_embedding.weight"},
        {"embeddings.position_embedding.weight", "positional_embedding"},
        {"text_projection", "text_projection"},
    };
    static const struct { const char *from, *to; } part[] = {
        {"self_attn.in_proj.weight", "attn.in_proj_weight"}, {"self_attn.in_proj.bias", "attn.in_proj_bias"},
        {"self_attn.out_proj.", "attn.out_proj."},           {"layer_norm1.", "ln_1."},
        {"layer_norm2.", "ln_2."},                           {"mlp.fc1.", "mlp.c_fc."},
        {"mlp.fc2.", "mlp.c_proj."},
    };
    int n = -1;
    for (size_t i = 0; i < sizeof whole / sizeof whole[0] && n < 0; i++)
        if (!strcmp(r, whole[i].from)) n = snprintf(buf, cap, "%s%s", prefix, whole[i].to);
    if (n < 0 && starts(r, "final_layer_norm.")) n = snprintf(buf, cap, "%sln_final.%s", prefix, r + 17);
    if (n < 0 && starts(r, "encoder.layers.")) {
        const char *p = r + 15, *dot = strchr(p, '.');
        if (dot && dot > p && dot - p < 8) {
            for (size_t i = 0; i < sizeof part / sizeof part[0] && n < 0; i++)
                if (starts(dot + 1, part[i].from))
                    n = snprintf(buf, cap, "%stransformer.resblocks.%.*s.%s%s", prefix, (int)(dot - p), p,
                                 part[i].to, dot + 1 + strlen(part[i].from));
        }
    }
    if (n < 0) n = snprintf(buf, cap, "%stext_model.%s", prefix, r);
    return n > 0 && (size_t)n < cap;
}

/* The original name of one tensor, or NULL to keep it (also when it would
 * not fit: such a name matches nothing later). */
static char *rename_one(const char *name, bool xl, const char *oc_prefix, bool *oom) {
    static const char l0[] = "cond_stage_model.transformer.", g1[] = "cond_stage_model.1.transformer.";
    char buf[512];
    const char *rest = NULL, *to = NULL;
    bool oc = false;
    if (xl && starts(name, g1)) {
        rest = name + sizeof g1 - 1;
        to = "conditioner.embedders.1.model.";
        oc = true;
    } else if (xl && starts(name, l0)) {
        rest = name + sizeof l0 - 1;
        to = "conditioner.embedders.0.transformer.";
    } else if (oc_prefix && starts(name, l0)) {
        rest = name + sizeof l0 - 1;
        to = oc_prefix;
        oc = true;
    } else {
        return NULL;
    }
    bool fits;
    if (oc && starts(rest, "text_model.")) {
        fits = open_clip_name(to, rest + 11, buf, sizeof buf);
    } else {
        int n = snprintf(buf, sizeof buf, "%s%s", to, rest);
        fits = n > 0 && (size_t)n < sizeof buf;
    }
    if (!fits) return NULL;
    char *out = strdup(buf);
    *oom = out == NULL;
    return out;
}

rb_status sd_gguf_sdcpp_rename(sd_tensor_list *list, char **names, rb_error *err) {
    const bool xl = any(list, "cond_stage_model.1.transformer.", NULL);
    const bool oc0 = any(list, "cond_stage_model.transformer.text_model.encoder.layers.", ".self_attn.in_proj.");
    if (!xl && !oc0) return RB_OK;
    /* an OpenCLIP encoder alone: SD 2.x's, or the refiner's (its UNet has the text_time embedding) */
    const char *oc_prefix = NULL;
    if (!xl && oc0)
        oc_prefix = any(list, "model.diffusion_model.label_emb.", NULL) ? "conditioner.embedders.0.model."
                                                                       : "cond_stage_model.model.";
    for (int64_t i = 0; i < list->n; i++) {
        bool oom = false;
        char *nn = rename_one(list->t[i].name, xl, oc_prefix, &oom);
        if (oom) return rb_error_set(err, RB_E_NOMEM, "out of memory renaming '%s'", list->t[i].name);
        if (!nn) continue;
        free(names[i]);
        names[i] = nn;
        list->owned[i].name = nn;
    }
    return RB_OK;
}

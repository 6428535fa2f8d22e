/* The naming and dtype rules of the SD converter (sd_convert.h): the LDM
 * name of each diffusers UNet and VAE tensor (the inverse of sd_ldm_unet.c
 * and sd_ldm_vae.c: numbered input/output blocks, in_layers / out_layers /
 * emb_layers / skip_connection for the resnets' parts, the decoder's levels
 * counted from the highest resolution, the VAE mid attention as 1x1
 * convolutions q / k / v / proj_out), and the class and dtype of a tensor
 * from its LDM name and rank. */
#include "sd/sd_convert.h"

#include <stdio.h>
#include <string.h>

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

sdc_class sdc_class_of(const char *name, int n_dims) {
    if (n_dims <= 1 || strstr(name, "positional_embedding") || strstr(name, "position_embedding")) return SDC_F32;
    if (strstr(name, "token_embedding")) return SDC_EMB;
    if (n_dims == 4) return SDC_CONV;
    if (n_dims == 2) return SDC_MAT;
    return SDC_F32;
}

rb_dtype sdc_dtype(sdc_class c, rb_dtype t, int64_t ne0, bool *fallback) {
    const bool fl = t == RB_F32 || t == RB_F16 || t == RB_BF16;
    *fallback = false;
    switch (c) {
    case SDC_F32: return RB_F32;
    case SDC_CONV: return t == RB_F32 || t == RB_BF16 ? t : RB_F16;
    case SDC_EMB: return fl ? t : RB_F16;
    case SDC_MAT: {
        const rb_dtype d = rb_convert_weight_dtype(t, ne0, false);
        *fallback = d != t;
        return d;
    }
    }
    return RB_F32;
}

/* Reads "<int>." at *p; advances. */
static bool index_at(const char **p, int *out, int limit) {
    const char *s = *p;
    int v = 0;
    if (*s < '0' || *s > '9') return false;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (*s++ - '0');
        if (v > limit) return false;
    }
    if (*s != '.') return false;
    *out = v;
    *p = s + 1;
    return true;
}

#define PUT(...) (snprintf(out, cap, __VA_ARGS__) < (int)cap)

/* A resnet part: diffusers -> LDM UNet names. */
static const char *unet_part(const char *p, const char **rest) {
    static const struct { const char *from, *to; } map[] = {
        {"norm1.", "in_layers.0."},  {"conv1.", "in_layers.2."},  {"time_emb_proj.", "emb_layers.1."},
        {"norm2.", "out_layers.0."}, {"conv2.", "out_layers.3."}, {"conv_shortcut.", "skip_connection."},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (starts(p, map[i].from)) {
            *rest = p + strlen(map[i].from);
            return map[i].to;
        }
    return NULL;
}

bool sdc_unet_name(const rb_unet_config *c, const char *name, char *out, size_t cap) {
    const int n = c->n_levels, lpb = c->layers_per_block[0], per = lpb + 1;
    const char *p = name, *rest = NULL, *part;
    int l = 0, j = 0;
    if (starts(p, "conv_in.")) return PUT("input_blocks.0.0.%s", p + 8);
    if (starts(p, "time_embedding.linear_1.")) return PUT("time_embed.0.%s", p + 24);
    if (starts(p, "time_embedding.linear_2.")) return PUT("time_embed.2.%s", p + 24);
    if (starts(p, "add_embedding.linear_1.")) return PUT("label_emb.0.0.%s", p + 23);
    if (starts(p, "add_embedding.linear_2.")) return PUT("label_emb.0.2.%s", p + 23);
    if (starts(p, "conv_norm_out.")) return PUT("out.0.%s", p + 14);
    if (starts(p, "conv_out.")) return PUT("out.2.%s", p + 9);
    if (starts(p, "down_blocks.")) {
        p += 12;
        if (!index_at(&p, &l, n - 1)) return false;
        if (starts(p, "downsamplers.0.conv."))
            return l < n - 1 && PUT("input_blocks.%d.0.op.%s", 1 + l * per + lpb, p + 20);
        const bool res = starts(p, "resnets."), att = starts(p, "attentions.");
        if (!res && !att) return false;
        p += res ? 8 : 11;
        if (!index_at(&p, &j, lpb - 1)) return false;
        if (att) return PUT("input_blocks.%d.1.%s", 1 + l * per + j, p);
        return (part = unet_part(p, &rest)) && PUT("input_blocks.%d.0.%s%s", 1 + l * per + j, part, rest);
    }
    if (starts(p, "mid_block.")) {
        p += 10;
        if (starts(p, "attentions.0.")) return PUT("middle_block.1.%s", p + 13);
        if (!starts(p, "resnets.")) return false;
        p += 8;
        if (!index_at(&p, &j, 1)) return false;
        return (part = unet_part(p, &rest)) && PUT("middle_block.%d.%s%s", 2 * j, part, rest);
    }
    if (starts(p, "up_blocks.")) {
        p += 10;
        if (!index_at(&p, &l, n - 1)) return false;
        if (starts(p, "upsamplers.0.conv."))
            return l < n - 1 && PUT("output_blocks.%d.%d.conv.%s", l * per + lpb, c->up_cross_attn[n - 1 - l] ? 2 : 1,
                                    p + 18);
        const bool res = starts(p, "resnets."), att = starts(p, "attentions.");
        if (!res && !att) return false;
        p += res ? 8 : 11;
        if (!index_at(&p, &j, lpb)) return false;
        if (att) return PUT("output_blocks.%d.1.%s", l * per + j, p);
        return (part = unet_part(p, &rest)) && PUT("output_blocks.%d.0.%s%s", l * per + j, part, rest);
    }
    return false;
}

/* A VAE resnet part: conv_shortcut is nin_shortcut, the rest keep their names. */
static bool vae_part(const char *p, char *buf, size_t cap) {
    static const char *const same[] = {"norm1.", "conv1.", "norm2.", "conv2."};
    for (size_t i = 0; i < 4; i++)
        if (starts(p, same[i])) return snprintf(buf, cap, "%s", p) < (int)cap;
    return starts(p, "conv_shortcut.") && snprintf(buf, cap, "nin_shortcut.%s", p + 14) < (int)cap;
}

static bool vae_mid(const char *p, char *buf, size_t cap, bool *to_conv) {
    char r[256];
    int j = 0;
    if (starts(p, "resnets.")) {
        p += 8;
        return index_at(&p, &j, 1) && vae_part(p, r, sizeof r) &&
               snprintf(buf, cap, "mid.block_%d.%s", j + 1, r) < (int)cap;
    }
    if (!starts(p, "attentions.0.")) return false;
    p += 13;
    static const struct { const char *from, *to; } attn[] = {
        {"group_norm.", "norm."}, {"to_q.", "q."},   {"to_k.", "k."},     {"to_v.", "v."},
        {"to_out.0.", "proj_out."}, {"query.", "q."}, {"key.", "k."},     {"value.", "v."},
        {"proj_attn.", "proj_out."},
    };
    for (size_t i = 0; i < sizeof attn / sizeof attn[0]; i++)
        if (starts(p, attn[i].from)) {
            const char *rest = p + strlen(attn[i].from);
            *to_conv = i > 0 && strcmp(rest, "weight") == 0;
            return snprintf(buf, cap, "mid.attn_1.%s%s", attn[i].to, rest) < (int)cap;
        }
    return false;
}

bool sdc_vae_name(const rb_vae_config *c, const char *name, char *out, size_t cap, bool *to_conv) {
    const int n = c->n_levels;
    const char *p = name;
    char r[320];
    int i = 0, j = 0;
    *to_conv = false;
    if (starts(p, "quant_conv.") || starts(p, "post_quant_conv.")) return PUT("%s", p);
    const bool enc = starts(p, "encoder."), dec = starts(p, "decoder.");
    if (!enc && !dec) return false;
    const char *side = enc ? "encoder" : "decoder";
    p += 8;
    if (starts(p, "conv_in.") || starts(p, "conv_out.")) return PUT("%s.%s", side, p);
    if (starts(p, "conv_norm_out.")) return PUT("%s.norm_out.%s", side, p + 14);
    if (starts(p, "mid_block.")) return vae_mid(p + 10, r, sizeof r, to_conv) && PUT("%s.%s", side, r);
    const char *blocks = enc ? "down_blocks." : "up_blocks.";
    if (!starts(p, blocks)) return false;
    p += strlen(blocks);
    if (!index_at(&p, &i, n - 1)) return false;
    const int lv = enc ? i : n - 1 - i; /* the decoder's levels count from the highest resolution in LDM */
    if (starts(p, enc ? "downsamplers.0.conv." : "upsamplers.0.conv."))
        return i < n - 1 && PUT("%s.%s.%d.%s.conv.%s", side, enc ? "down" : "up", lv, enc ? "downsample" : "upsample",
                                p + (enc ? 20 : 18));
    if (!starts(p, "resnets.")) return false;
    p += 8;
    if (!index_at(&p, &j, c->layers_per_block + (enc ? -1 : 0))) return false;
    return vae_part(p, r, sizeof r) && PUT("%s.%s.%d.block.%d.%s", side, enc ? "down" : "up", lv, j, r);
}

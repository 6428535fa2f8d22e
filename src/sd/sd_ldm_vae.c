/* The VAE of an LDM/SGM single file in diffusers' names: encoder.down.I and
 * decoder.up.I blocks (the decoder's numbered from the lowest resolution in
 * diffusers, from the highest in the original), block.J resnets with
 * nin_shortcut for conv_shortcut, mid.block_1/attn_1/block_2, norm_out for
 * conv_norm_out, and the mid attention's norm/q/k/v/proj_out for
 * group_norm/to_q/to_k/to_v/to_out.0 (stored as 1x1 convolutions, which the
 * weight loader accepts for linear weights). */
#include "sd/sd_ldm.h"

#include <stdio.h>
#include <string.h>

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool read_index(const char **p, int *out) {
    const char *s = *p;
    if (*s < '0' || *s > '9') return false;
    long v = 0;
    while (*s >= '0' && *s <= '9' && v < 100000) v = v * 10 + (*s++ - '0');
    if (*s != '.') return false;
    *out = (int)v;
    *p = s + 1;
    return true;
}

/* Resnet or mid-block part: writes the diffusers suffix. */
static bool part(const char *p, char *buf, size_t len) {
    static const struct { const char *from, *to; } map[] = {
        {"norm1.", "norm1."},           {"conv1.", "conv1."}, {"norm2.", "norm2."}, {"conv2.", "conv2."},
        {"nin_shortcut.", "conv_shortcut."},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (starts(p, map[i].from)) return snprintf(buf, len, "%s%s", map[i].to, p + strlen(map[i].from)) > 0;
    return false;
}

static bool mid(const char *p, char *buf, size_t len) {
    char r[200];
    if (starts(p, "block_1.") && part(p + 8, r, sizeof r)) return snprintf(buf, len, "mid_block.resnets.0.%s", r) > 0;
    if (starts(p, "block_2.") && part(p + 8, r, sizeof r)) return snprintf(buf, len, "mid_block.resnets.1.%s", r) > 0;
    static const struct { const char *from, *to; } attn[] = {
        {"attn_1.norm.", "group_norm."}, {"attn_1.q.", "to_q."}, {"attn_1.k.", "to_k."}, {"attn_1.v.", "to_v."},
        {"attn_1.proj_out.", "to_out.0."},
    };
    for (size_t i = 0; i < sizeof attn / sizeof attn[0]; i++)
        if (starts(p, attn[i].from))
            return snprintf(buf, len, "mid_block.attentions.0.%s%s", attn[i].to, p + strlen(attn[i].from)) > 0;
    return false;
}

/* rest: the name after the prefix; n_up: decoder levels. */
static int vae_name(const char *rest, int n_up, char *out, size_t len) {
    char r[220];
    const char *p = rest;
    int i = 0, j = 0;
    if (starts(p, "quant_conv.") || starts(p, "post_quant_conv.")) return snprintf(out, len, "%s", p) > 0;
    const bool enc = starts(p, "encoder."), dec = starts(p, "decoder.");
    if (!enc && !dec) return 0;
    const char *side = enc ? "encoder" : "decoder";
    p += 8;
    if (starts(p, "conv_in.") || starts(p, "conv_out.")) return snprintf(out, len, "%s.%s", side, p) > 0;
    if (starts(p, "norm_out.")) return snprintf(out, len, "%s.conv_norm_out.%s", side, p + 9) > 0;
    if (starts(p, "mid.")) return mid(p + 4, r, sizeof r) && snprintf(out, len, "%s.%s", side, r) > 0 ? 1 : -1;
    if (enc && starts(p, "down.")) {
        p += 5;
        if (!read_index(&p, &i)) return -1;
        if (starts(p, "downsample.conv."))
            return snprintf(out, len, "encoder.down_blocks.%d.downsamplers.0.conv.%s", i, p + 16) > 0;
        if (starts(p, "block.") && (p += 6, read_index(&p, &j)) && part(p, r, sizeof r))
            return snprintf(out, len, "encoder.down_blocks.%d.resnets.%d.%s", i, j, r) > 0;
        return -1;
    }
    if (dec && starts(p, "up.")) {
        p += 3;
        if (!read_index(&p, &i) || i >= n_up) return -1;
        const int u = n_up - 1 - i;
        if (starts(p, "upsample.conv."))
            return snprintf(out, len, "decoder.up_blocks.%d.upsamplers.0.conv.%s", u, p + 14) > 0;
        if (starts(p, "block.") && (p += 6, read_index(&p, &j)) && part(p, r, sizeof r))
            return snprintf(out, len, "decoder.up_blocks.%d.resnets.%d.%s", u, j, r) > 0;
        return -1;
    }
    return -1;
}

rb_status sd_ldm_map_vae(const sd_tensor_list *ckpt, const char *prefix, sd_ldm *l, rb_error *err) {
    const size_t pl = strlen(prefix);
    sd_ldm_vae_shape *sh = &l->vae_shape;
    int n_up = 0, n_down = 0, max_j = -1, max_jd = -1;
    for (int64_t k = 0; k < ckpt->n; k++) {
        const char *n = ckpt->t[k].name;
        if (strncmp(n, prefix, pl) != 0) continue;
        const char *p = n + pl;
        int i = 0, j = 0;
        if (starts(p, "decoder.up.") && (p += 11, read_index(&p, &i))) {
            if (i + 1 > n_up) n_up = i + 1;
            if (starts(p, "block.") && (p += 6, read_index(&p, &j)) && j > max_jd) max_jd = j;
        }
        p = n + pl;
        if (starts(p, "encoder.down.") && (p += 13, read_index(&p, &i))) {
            if (i + 1 > n_down) n_down = i + 1;
            if (starts(p, "block.") && (p += 6, read_index(&p, &j)) && j > max_j) max_j = j;
        }
    }
    if (n_up < 1 || n_up > RB_SD_MAX_LEVELS || (n_down != 0 && n_down != n_up))
        return rb_error_set(err, RB_E_FORMAT, "VAE: %d decoder and %d encoder levels", n_up, n_down);
    sh->n_levels = n_up;
    sh->has_encoder = n_down > 0;
    /* the decoder has one resnet more per level than the encoder */
    sh->layers_per_block = n_down > 0 ? max_j + 1 : max_jd;
    if (sh->layers_per_block < 1 || (n_down > 0 && max_jd != max_j + 1))
        return rb_error_set(err, RB_E_FORMAT, "VAE: %d encoder and %d decoder resnets per level", max_j + 1, max_jd + 1);
    for (int64_t k = 0; k < ckpt->n; k++) {
        const rb_st_tensor *t = &ckpt->t[k];
        if (strncmp(t->name, prefix, pl) != 0) continue;
        char name[320];
        int r = vae_name(t->name + pl, n_up, name, sizeof name);
        if (r < 0) return rb_error_set(err, RB_E_FORMAT, "VAE: unexpected tensor name \"%s\"", t->name + pl);
        if (r == 0) continue;
        rb_status s = sd_name_map_add(&l->vae, name, t, err);
        if (s != RB_OK) return s;
    }
    /* channels per level: the first resnet's output (decoder: its up block of that level) */
    char n[128];
    for (int lv = 0; lv < sh->n_levels; lv++) {
        snprintf(n, sizeof n, "decoder.up_blocks.%d.resnets.0.conv2.weight", sh->n_levels - 1 - lv);
        const rb_st_tensor *t = sd_name_map_find(&l->vae, n);
        if (!t || t->n_dims != 4) return rb_error_set(err, RB_E_FORMAT, "VAE: %s is missing", n);
        sh->channels[lv] = t->ne[3];
    }
    const rb_st_tensor *pq = sd_name_map_find(&l->vae, "post_quant_conv.weight");
    const rb_st_tensor *ci = sd_name_map_find(&l->vae, "decoder.conv_in.weight");
    sh->latent_channels = pq && pq->n_dims == 4 ? pq->ne[3] : ci && ci->n_dims == 4 ? ci->ne[2] : 0;
    if (sh->latent_channels <= 0) return rb_error_set(err, RB_E_FORMAT, "VAE: decoder.conv_in is missing");
    return RB_OK;
}

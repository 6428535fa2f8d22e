/* The UNet of an LDM/SGM single file in diffusers' names. The original
 * model numbers its blocks: input_blocks.0 is conv_in; then each level has
 * layers_per_block blocks (a ResBlock, with a SpatialTransformer at attention
 * levels) and, but for the last level, one downsampling block; middle_block
 * is ResBlock, SpatialTransformer, ResBlock; output_blocks go up from the
 * deepest level with layers_per_block + 1 blocks per level, the last one of
 * each level but the top carrying the upsampler. Inside a ResBlock
 * in_layers.0/2, emb_layers.1, out_layers.0/3 and skip_connection are
 * norm1/conv1, time_emb_proj, norm2/conv2 and conv_shortcut; transformer
 * internals keep their names. */
#include "sd/sd_ldm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "in_layers.0.weight" -> "norm1.weight" etc.; NULL when not a ResBlock part. */
static const char *resnet_part(const char *rest, char *buf, size_t len) {
    static const struct { const char *from, *to; } parts[] = {
        {"in_layers.0.", "norm1."},       {"in_layers.2.", "conv1."},   {"emb_layers.1.", "time_emb_proj."},
        {"out_layers.0.", "norm2."},      {"out_layers.3.", "conv2."},  {"skip_connection.", "conv_shortcut."},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        size_t n = strlen(parts[i].from);
        if (strncmp(rest, parts[i].from, n) == 0) {
            snprintf(buf, len, "%s%s", parts[i].to, rest + n);
            return buf;
        }
    }
    return NULL;
}

/* Reads "<int>." at *p; advances. */
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

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Layout facts gathered before the renaming: layers_per_block from the
 * first downsampler's block number, the number of levels from the count of
 * downsamplers. */
static rb_status scan(const sd_tensor_list *ckpt, const char *prefix, sd_ldm_unet_shape *sh, rb_error *err) {
    const size_t pl = strlen(prefix);
    int first_down = -1, n_down = 0, max_in = 0;
    for (int64_t i = 0; i < ckpt->n; i++) {
        const char *n = ckpt->t[i].name;
        if (strncmp(n, prefix, pl) != 0 || !starts(n + pl, "input_blocks.")) continue;
        const char *p = n + pl + strlen("input_blocks.");
        int b = 0;
        if (!read_index(&p, &b)) continue;
        if (b > max_in) max_in = b;
        if (starts(p, "0.op.weight")) {
            n_down++;
            if (first_down < 0 || b < first_down) first_down = b;
        }
    }
    if (max_in < 1) return rb_error_set(err, RB_E_FORMAT, "UNet: no input blocks");
    sh->layers_per_block = first_down > 0 ? first_down - 1 : max_in;
    sh->n_levels = n_down + 1;
    if (sh->layers_per_block < 1 || sh->n_levels > RB_SD_MAX_LEVELS ||
        max_in != sh->n_levels * (sh->layers_per_block + 1) - 1)
        return rb_error_set(err, RB_E_FORMAT, "UNet: input blocks 1..%d do not form levels of resnets and downsamplers",
                            max_in);
    return RB_OK;
}

/* The diffusers name of one UNet tensor (rest = the name after the prefix);
 * false when the name is not part of the UNet. */
static bool unet_name(const sd_ldm_unet_shape *sh, const char *rest, char *out, size_t len, rb_error *err, bool *bad) {
    char part[256];
    const int per = sh->layers_per_block + 1;
    const char *p = rest;
    int b = 0, k = 0;
    *bad = false;
    if (starts(p, "time_embed.0.")) return snprintf(out, len, "time_embedding.linear_1.%s", p + 13) > 0;
    if (starts(p, "time_embed.2.")) return snprintf(out, len, "time_embedding.linear_2.%s", p + 13) > 0;
    if (starts(p, "label_emb.0.0.")) return snprintf(out, len, "add_embedding.linear_1.%s", p + 14) > 0;
    if (starts(p, "label_emb.0.2.")) return snprintf(out, len, "add_embedding.linear_2.%s", p + 14) > 0;
    if (starts(p, "out.0.")) return snprintf(out, len, "conv_norm_out.%s", p + 6) > 0;
    if (starts(p, "out.2.")) return snprintf(out, len, "conv_out.%s", p + 6) > 0;
    if (starts(p, "input_blocks.")) {
        p += 13;
        if (!read_index(&p, &b) || !read_index(&p, &k)) goto bad;
        if (b == 0) return k == 0 && snprintf(out, len, "conv_in.%s", p) > 0;
        const int level = (b - 1) / per, j = (b - 1) % per;
        if (j == sh->layers_per_block) { /* the downsampler */
            if (k != 0 || !starts(p, "op.")) goto bad;
            return snprintf(out, len, "down_blocks.%d.downsamplers.0.conv.%s", level, p + 3) > 0;
        }
        if (k == 0 && resnet_part(p, part, sizeof part))
            return snprintf(out, len, "down_blocks.%d.resnets.%d.%s", level, j, part) > 0;
        if (k == 1) return snprintf(out, len, "down_blocks.%d.attentions.%d.%s", level, j, p) > 0;
        goto bad;
    }
    if (starts(p, "middle_block.")) {
        p += 13;
        if (!read_index(&p, &k)) goto bad;
        if ((k == 0 || k == 2) && resnet_part(p, part, sizeof part))
            return snprintf(out, len, "mid_block.resnets.%d.%s", k / 2, part) > 0;
        if (k == 1) return snprintf(out, len, "mid_block.attentions.0.%s", p) > 0;
        goto bad;
    }
    if (starts(p, "output_blocks.")) {
        p += 14;
        if (!read_index(&p, &b) || !read_index(&p, &k)) goto bad;
        const int up = b / per, j = b % per;
        if (k == 0 && resnet_part(p, part, sizeof part))
            return snprintf(out, len, "up_blocks.%d.resnets.%d.%s", up, j, part) > 0;
        if ((k == 1 || k == 2) && starts(p, "conv.") && j == sh->layers_per_block)
            return snprintf(out, len, "up_blocks.%d.upsamplers.0.conv.%s", up, p + 5) > 0;
        if (k == 1) return snprintf(out, len, "up_blocks.%d.attentions.%d.%s", up, j, p) > 0;
        goto bad;
    }
    return false;
bad:
    *bad = true;
    rb_error_set(err, RB_E_FORMAT, "UNet: unexpected tensor name \"%s\"", rest);
    return false;
}

/* ggml ne of a stored tensor, 0 when absent. */
static int64_t dim(const sd_name_map *m, const char *name, int d) {
    const rb_st_tensor *t = sd_name_map_find(m, name);
    return t && d < t->n_dims ? t->ne[d] : 0;
}

/* The structure the renamed tensors show (channels, attention levels,
 * depths, projections, widths of the conditioning). */
static rb_status shape(sd_ldm *l, rb_error *err) {
    sd_ldm_unet_shape *sh = &l->unet_shape;
    const sd_name_map *m = &l->unet;
    char n[256];
    for (int lv = 0; lv < sh->n_levels; lv++) {
        snprintf(n, sizeof n, "down_blocks.%d.resnets.0.conv2.weight", lv);
        sh->channels[lv] = dim(m, n, 3);
        if (sh->channels[lv] <= 0) return rb_error_set(err, RB_E_FORMAT, "UNet: %s is missing", n);
        snprintf(n, sizeof n, "down_blocks.%d.attentions.0.norm.weight", lv);
        sh->attention[lv] = sd_name_map_find(m, n) != NULL;
        int d = 0;
        for (;; d++) {
            snprintf(n, sizeof n, "down_blocks.%d.attentions.0.transformer_blocks.%d.attn1.to_q.weight", lv, d);
            if (!sd_name_map_find(m, n)) break;
        }
        sh->depth[lv] = d;
        if (sh->attention[lv] && d == 0)
            return rb_error_set(err, RB_E_FORMAT, "UNet: level %d has an attention without transformer blocks", lv);
        if (sh->attention[lv]) {
            snprintf(n, sizeof n, "down_blocks.%d.attentions.0.proj_in.weight", lv);
            const rb_st_tensor *t = sd_name_map_find(m, n);
            sh->linear_projection = t && t->n_dims == 2;
            snprintf(n, sizeof n, "down_blocks.%d.attentions.0.transformer_blocks.0.attn2.to_k.weight", lv);
            sh->context_dim = dim(m, n, 0);
        }
    }
    for (int d = 0;; d++) {
        snprintf(n, sizeof n, "mid_block.attentions.0.transformer_blocks.%d.attn1.to_q.weight", d);
        if (!sd_name_map_find(m, n)) break;
        sh->mid_depth = d + 1;
    }
    sh->in_channels = dim(m, "conv_in.weight", 2);
    sh->out_channels = dim(m, "conv_out.weight", 3);
    sh->adm_in_channels = dim(m, "add_embedding.linear_1.weight", 0);
    if (sh->in_channels <= 0 || sh->out_channels <= 0)
        return rb_error_set(err, RB_E_FORMAT, "UNet: conv_in or conv_out is missing");
    return RB_OK;
}

rb_status sd_ldm_map_unet(const sd_tensor_list *ckpt, const char *prefix, sd_ldm *l, rb_error *err) {
    rb_status s = scan(ckpt, prefix, &l->unet_shape, err);
    if (s != RB_OK) return s;
    const size_t pl = strlen(prefix);
    for (int64_t i = 0; i < ckpt->n; i++) {
        const rb_st_tensor *t = &ckpt->t[i];
        if (strncmp(t->name, prefix, pl) != 0) continue;
        char name[320];
        bool bad = false;
        if (!unet_name(&l->unet_shape, t->name + pl, name, sizeof name, err, &bad)) {
            if (bad) return RB_E_FORMAT;
            continue; /* not a weight diffusers has */
        }
        if ((s = sd_name_map_add(&l->unet, name, t, err)) != RB_OK) return s;
    }
    return shape(l, err);
}

/* The MMDiT of an SD3 single file in diffusers' SD3Transformer2DModel names.
 * The original names each joint block's two streams x_block (the image
 * tokens) and context_block (the text tokens):
 *   attn.qkv (q, k and v stacked)  -> attn.to_q/to_k/to_v, attn.add_{q,k,v}_proj
 *   attn.ln_q / ln_k               -> attn.norm_q/norm_k, attn.norm_added_q/k
 *   attn.proj                      -> attn.to_out.0, attn.to_add_out
 *   attn2.* (x_block, SD3.5)       -> attn2.to_q/k/v, norm_q/k, to_out.0
 *   adaLN_modulation.1             -> norm1.linear, norm1_context.linear
 *   mlp.fc1 / fc2                  -> ff(_context).net.0.proj / net.2
 * and outside the blocks pos_embed, x_embedder.proj (pos_embed.proj),
 * t_embedder / y_embedder mlp.0 / mlp.2 (time_text_embed's timestep_embedder
 * / text_embedder linear_1 / linear_2), context_embedder, final_layer.linear
 * (proj_out) and final_layer.adaLN_modulation.1 (norm_out.linear). The last
 * block's context stream only conditions the image (no output projection
 * or MLP) and its adaLN, like the final layer's, is split (shift, scale) in
 * the original but (scale, shift) in diffusers: those two are copied with
 * their halves swapped. Every expected tensor is then checked against the
 * widths the embedders show, so a file with a missing or misshapen tensor
 * fails here, naming it. */
#include "sd/sd_sd3.h"

#include <stdio.h>
#include <stdlib.h>
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

/* Rows r of 3 of a stacked projection (weight [3D, D] or bias [3D]). */
static rb_status add_third(sd_name_map *m, const char *name, const rb_st_tensor *t, int r, rb_error *err) {
    const int last = t->n_dims - 1;
    if (t->n_dims < 1 || t->n_dims > 2 || t->ne[last] % 3 != 0 || t->nbytes % 3 != 0)
        return rb_error_set(err, RB_E_FORMAT, "MMDiT: %s is not three stacked projections (%d dims, %lld rows)",
                            t->name, t->n_dims, t->n_dims > 0 ? (long long)t->ne[last] : 0LL);
    rb_st_tensor v = *t;
    v.ne[last] = t->ne[last] / 3;
    v.nbytes = t->nbytes / 3;
    v.data = (const char *)t->data + (size_t)r * v.nbytes;
    return sd_name_map_add(m, name, &v, err);
}

/* A modulation [2C, D] / [2C] with its two halves of rows swapped (a copy). */
static rb_status add_swapped(sd_name_map *m, const char *name, const rb_st_tensor *t, rb_error *err) {
    const int last = t->n_dims - 1;
    if (t->n_dims < 1 || t->n_dims > 2 || t->ne[last] % 2 != 0 || t->nbytes % 2 != 0)
        return rb_error_set(err, RB_E_FORMAT, "MMDiT: %s is not a (shift, scale) modulation (%d dims)", t->name,
                            t->n_dims);
    const size_t h = t->nbytes / 2;
    char *out = malloc(t->nbytes ? t->nbytes : 1);
    if (!out) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    memcpy(out, (const char *)t->data + h, h);
    memcpy(out + h, t->data, h);
    return sd_name_map_add_owned(m, name, t, out, err);
}

/* Blocks: 1 + the largest joint_blocks index, and whether each has attn2. */
static rb_status scan(const sd_tensor_list *ckpt, const char *prefix, sd_sd3_mmdit_shape *sh, rb_error *err) {
    const size_t pl = strlen(prefix);
    bool dual[SD_SD3_MAX_LAYERS] = {false}, seen[SD_SD3_MAX_LAYERS] = {false};
    int n = 0;
    for (int64_t i = 0; i < ckpt->n; i++) {
        const char *name = ckpt->t[i].name;
        if (strncmp(name, prefix, pl) != 0 || !starts(name + pl, "joint_blocks.")) continue;
        const char *p = name + pl + 13;
        int b = 0;
        if (!read_index(&p, &b) || b >= SD_SD3_MAX_LAYERS)
            return rb_error_set(err, RB_E_FORMAT, "MMDiT: unexpected block name \"%s\" (at most %d blocks)", name,
                                SD_SD3_MAX_LAYERS);
        seen[b] = true;
        if (b + 1 > n) n = b + 1;
        if (starts(p, "x_block.attn2.")) dual[b] = true;
    }
    if (n == 0) return rb_error_set(err, RB_E_FORMAT, "MMDiT: no joint_blocks");
    for (int b = 0; b < n; b++)
        if (!seen[b]) return rb_error_set(err, RB_E_FORMAT, "MMDiT: joint block %d of 0..%d is missing", b, n - 1);
    sh->num_layers = n;
    sh->n_dual = 0;
    for (int b = 0; b < n; b++)
        if (dual[b]) sh->dual_attention_layers[sh->n_dual++] = b;
    return RB_OK;
}

/* Maps one block tensor (p: after "joint_blocks.<b>."). */
static rb_status block_tensor(sd_name_map *m, int b, bool last, const char *p, const rb_st_tensor *t, rb_error *err) {
    static const char *const xq[3] = {"attn.to_q", "attn.to_k", "attn.to_v"};
    static const char *const cq[3] = {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"};
    static const char *const x2q[3] = {"attn2.to_q", "attn2.to_k", "attn2.to_v"};
    char name[320];
    const bool x = starts(p, "x_block.");
    if (!x && !starts(p, "context_block.")) goto bad;
    p += x ? 8 : 14;
    const char *const *qkv = NULL;
    const char *to = NULL;
    bool swap = false;
    if (starts(p, "attn.qkv.")) qkv = x ? xq : cq, p += 9;
    else if (x && starts(p, "attn2.qkv.")) qkv = x2q, p += 10;
    else if (starts(p, "attn.ln_q.")) to = x ? "attn.norm_q." : "attn.norm_added_q.", p += 10;
    else if (starts(p, "attn.ln_k.")) to = x ? "attn.norm_k." : "attn.norm_added_k.", p += 10;
    else if (x && starts(p, "attn2.ln_q.")) to = "attn2.norm_q.", p += 11;
    else if (x && starts(p, "attn2.ln_k.")) to = "attn2.norm_k.", p += 11;
    else if (starts(p, "attn.proj.")) to = x ? "attn.to_out.0." : "attn.to_add_out.", p += 10;
    else if (x && starts(p, "attn2.proj.")) to = "attn2.to_out.0.", p += 11;
    else if (starts(p, "adaLN_modulation.1.")) to = x ? "norm1.linear." : "norm1_context.linear.", swap = !x && last,
                                              p += 19;
    else if (starts(p, "mlp.fc1.")) to = x ? "ff.net.0.proj." : "ff_context.net.0.proj.", p += 8;
    else if (starts(p, "mlp.fc2.")) to = x ? "ff.net.2." : "ff_context.net.2.", p += 8;
    else goto bad;
    if (strcmp(p, "weight") != 0 && strcmp(p, "bias") != 0) goto bad;
    if (qkv) {
        for (int r = 0; r < 3; r++) {
            snprintf(name, sizeof name, "transformer_blocks.%d.%s.%s", b, qkv[r], p);
            rb_status s = add_third(m, name, t, r, err);
            if (s != RB_OK) return s;
        }
        return RB_OK;
    }
    snprintf(name, sizeof name, "transformer_blocks.%d.%s%s", b, to, p);
    return swap ? add_swapped(m, name, t, err) : sd_name_map_add(m, name, t, err);
bad:
    return rb_error_set(err, RB_E_FORMAT, "MMDiT: unexpected tensor name \"%s\"", t->name);
}

static rb_status top_tensor(sd_name_map *m, const char *p, const rb_st_tensor *t, rb_error *err) {
    static const struct { const char *from, *to; bool swap; } map[] = {
        {"x_embedder.proj.", "pos_embed.proj.", false},
        {"t_embedder.mlp.0.", "time_text_embed.timestep_embedder.linear_1.", false},
        {"t_embedder.mlp.2.", "time_text_embed.timestep_embedder.linear_2.", false},
        {"y_embedder.mlp.0.", "time_text_embed.text_embedder.linear_1.", false},
        {"y_embedder.mlp.2.", "time_text_embed.text_embedder.linear_2.", false},
        {"context_embedder.", "context_embedder.", false},
        {"final_layer.linear.", "proj_out.", false},
        {"final_layer.adaLN_modulation.1.", "norm_out.linear.", true},
    };
    char name[320];
    if (!strcmp(p, "pos_embed")) return sd_name_map_add(m, "pos_embed.pos_embed", t, err);
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        const size_t n = strlen(map[i].from);
        if (strncmp(p, map[i].from, n) != 0 || (strcmp(p + n, "weight") != 0 && strcmp(p + n, "bias") != 0)) continue;
        snprintf(name, sizeof name, "%s%s", map[i].to, p + n);
        return map[i].swap ? add_swapped(m, name, t, err) : sd_name_map_add(m, name, t, err);
    }
    return rb_error_set(err, RB_E_FORMAT, "MMDiT: unexpected tensor name \"%s\"", t->name);
}

/* A linear layer's weight [out, in] and bias [out]. */
static rb_status need_linear(const sd_name_map *m, const char *base, int64_t in, int64_t out, rb_error *err) {
    char n[320];
    snprintf(n, sizeof n, "%s.weight", base);
    rb_status s = sd_sd3_need(m, "MMDiT", n, 2, in, out, 0, err);
    if (s != RB_OK) return s;
    snprintf(n, sizeof n, "%s.bias", base);
    return sd_sd3_need(m, "MMDiT", n, 1, out, 0, 0, err);
}

static int64_t dim(const sd_name_map *m, const char *name, int nd, int d) {
    const rb_st_tensor *t = sd_name_map_find(m, name);
    return t && t->n_dims == nd ? t->ne[d] : 0;
}

/* The config the tensors show, then every tensor checked against it. */
static rb_status shape(const sd_name_map *m, sd_sd3_mmdit_shape *sh, rb_error *err) {
    const int64_t D = sh->width = dim(m, "pos_embed.proj.weight", 4, 3);
    sh->patch_size = (int)dim(m, "pos_embed.proj.weight", 4, 0);
    sh->in_channels = dim(m, "pos_embed.proj.weight", 4, 2);
    if (D <= 0 || sh->patch_size <= 0 || dim(m, "pos_embed.proj.weight", 4, 1) != sh->patch_size)
        return rb_error_set(err, RB_E_FORMAT, "MMDiT: x_embedder.proj.weight is missing or not a square patch kernel");
    const int64_t P = sh->patch_size;
    const int64_t pos = dim(m, "pos_embed.pos_embed", 3, 1);
    int64_t side = 0;
    while ((side + 1) * (side + 1) <= pos) side++;
    if (pos <= 0 || side * side != pos)
        return rb_error_set(err, RB_E_FORMAT, "MMDiT: pos_embed is missing or holds %lld positions, not a square",
                            (long long)pos);
    sh->pos_embed_max_size = side;
    sh->caption_projection_dim = dim(m, "context_embedder.weight", 2, 1);
    sh->joint_attention_dim = dim(m, "context_embedder.weight", 2, 0);
    sh->pooled_projection_dim = dim(m, "time_text_embed.text_embedder.linear_1.weight", 2, 0);
    sh->time_proj_dim = dim(m, "time_text_embed.timestep_embedder.linear_1.weight", 2, 0);
    sh->ff_inner = dim(m, "transformer_blocks.0.ff.net.0.proj.weight", 2, 1);
    const int64_t proj_rows = dim(m, "proj_out.weight", 2, 1);
    sh->out_channels = proj_rows % (P * P) == 0 ? proj_rows / (P * P) : 0;
    if (sh->caption_projection_dim != D)
        return rb_error_set(err, RB_E_FORMAT, "MMDiT: context_embedder's output %lld differs from the width %lld",
                            (long long)sh->caption_projection_dim, (long long)D);
    if (sh->joint_attention_dim <= 0 || sh->pooled_projection_dim <= 0 || sh->time_proj_dim <= 0 ||
        sh->ff_inner <= 0 || sh->out_channels <= 0)
        return rb_error_set(err, RB_E_FORMAT, "MMDiT: the context, pooled or time embedder, the first block's MLP or "
                            "the final layer is missing or misshapen");
    /* qk-norm: RMS norms over one head, whose size gives the heads; else
     * the published models' head size 64 */
    const int64_t hd = dim(m, "transformer_blocks.0.attn.norm_q.weight", 1, 0);
    sh->qk_norm = sd_name_map_find(m, "transformer_blocks.0.attn.norm_q.weight") != NULL;
    sh->attention_head_dim = sh->qk_norm ? hd : D % 64 == 0 ? 64 : 0;
    if (sh->qk_norm && (hd <= 0 || D % hd != 0))
        return rb_error_set(err, RB_E_FORMAT, "MMDiT: ln_q of %lld does not divide the width %lld", (long long)hd,
                            (long long)D);
    sh->num_attention_heads = sh->attention_head_dim ? (int)(D / sh->attention_head_dim) : 0;
    rb_status s;
    char n[320];
    if ((s = sd_sd3_need(m, "MMDiT", "pos_embed.proj.bias", 1, D, 0, 0, err)) ||
        (s = need_linear(m, "time_text_embed.timestep_embedder.linear_1", sh->time_proj_dim, D, err)) ||
        (s = need_linear(m, "time_text_embed.timestep_embedder.linear_2", D, D, err)) ||
        (s = need_linear(m, "time_text_embed.text_embedder.linear_1", sh->pooled_projection_dim, D, err)) ||
        (s = need_linear(m, "time_text_embed.text_embedder.linear_2", D, D, err)) ||
        (s = need_linear(m, "context_embedder", sh->joint_attention_dim, D, err)) ||
        (s = need_linear(m, "proj_out", D, P * P * sh->out_channels, err)) ||
        (s = need_linear(m, "norm_out.linear", D, 2 * D, err)))
        return s;
    int dual_i = 0;
    for (int b = 0; b < sh->num_layers; b++) {
        const bool last = b == sh->num_layers - 1;
        const bool dual = dual_i < sh->n_dual && sh->dual_attention_layers[dual_i] == b;
        if (dual) dual_i++;
        static const char *const lin_dd[] = {"attn.to_q", "attn.to_k", "attn.to_v", "attn.add_q_proj",
                                              "attn.add_k_proj", "attn.add_v_proj", "attn.to_out.0"};
        for (size_t k = 0; k < sizeof lin_dd / sizeof lin_dd[0]; k++) {
            snprintf(n, sizeof n, "transformer_blocks.%d.%s", b, lin_dd[k]);
            if ((s = need_linear(m, n, D, D, err)) != RB_OK) return s;
        }
        snprintf(n, sizeof n, "transformer_blocks.%d.norm1.linear", b);
        if ((s = need_linear(m, n, D, (dual ? 9 : 6) * D, err)) != RB_OK) return s;
        snprintf(n, sizeof n, "transformer_blocks.%d.norm1_context.linear", b);
        if ((s = need_linear(m, n, D, (last ? 2 : 6) * D, err)) != RB_OK) return s;
        snprintf(n, sizeof n, "transformer_blocks.%d.ff.net.0.proj", b);
        if ((s = need_linear(m, n, D, sh->ff_inner, err)) != RB_OK) return s;
        snprintf(n, sizeof n, "transformer_blocks.%d.ff.net.2", b);
        if ((s = need_linear(m, n, sh->ff_inner, D, err)) != RB_OK) return s;
        if (!last) {
            snprintf(n, sizeof n, "transformer_blocks.%d.attn.to_add_out", b);
            if ((s = need_linear(m, n, D, D, err)) != RB_OK) return s;
            snprintf(n, sizeof n, "transformer_blocks.%d.ff_context.net.0.proj", b);
            if ((s = need_linear(m, n, D, sh->ff_inner, err)) != RB_OK) return s;
            snprintf(n, sizeof n, "transformer_blocks.%d.ff_context.net.2", b);
            if ((s = need_linear(m, n, sh->ff_inner, D, err)) != RB_OK) return s;
        } else {
            snprintf(n, sizeof n, "transformer_blocks.%d.attn.to_add_out.weight", b);
            if (sd_name_map_find(m, n))
                return rb_error_set(err, RB_E_FORMAT, "MMDiT: the last block's context stream has an output "
                                    "projection (%s), which SD3's has not", n);
        }
        static const char *const norms[] = {"attn.norm_q", "attn.norm_k", "attn.norm_added_q", "attn.norm_added_k",
                                            "attn2.norm_q", "attn2.norm_k"};
        for (size_t k = 0; sh->qk_norm && k < (dual ? 6u : 4u); k++) {
            snprintf(n, sizeof n, "transformer_blocks.%d.%s.weight", b, norms[k]);
            if ((s = sd_sd3_need(m, "MMDiT", n, 1, sh->attention_head_dim, 0, 0, err)) != RB_OK) return s;
        }
        if (dual) {
            static const char *const lin2[] = {"attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0"};
            for (size_t k = 0; k < sizeof lin2 / sizeof lin2[0]; k++) {
                snprintf(n, sizeof n, "transformer_blocks.%d.%s", b, lin2[k]);
                if ((s = need_linear(m, n, D, D, err)) != RB_OK) return s;
            }
        }
    }
    return RB_OK;
}

rb_status sd_sd3_map_mmdit(const sd_tensor_list *ckpt, const char *prefix, sd_name_map *m, sd_sd3_mmdit_shape *sh,
                           rb_error *err) {
    memset(sh, 0, sizeof *sh);
    rb_status s = scan(ckpt, prefix, sh, err);
    if (s != RB_OK) return s;
    const size_t pl = strlen(prefix);
    for (int64_t i = 0; i < ckpt->n; i++) {
        const rb_st_tensor *t = &ckpt->t[i];
        if (strncmp(t->name, prefix, pl) != 0) continue;
        const char *p = t->name + pl;
        if (pl == 0 && (starts(p, "first_stage_model.") || starts(p, "text_encoders."))) continue;
        if (starts(p, "joint_blocks.")) {
            const char *q = p + 13;
            int b = 0;
            read_index(&q, &b); /* checked by scan */
            s = block_tensor(m, b, b == sh->num_layers - 1, q, t, err);
        } else {
            s = top_tensor(m, p, t, err);
        }
        if (s != RB_OK) return s;
    }
    return shape(m, sh, err);
}

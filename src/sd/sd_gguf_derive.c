/* Configs for SD files that carry none (stable-diffusion.cpp's and
 * ComfyUI-GGUF's GGUF files, single-file checkpoints): every size the
 * tensors show is read from them (through the diffusers names of the
 * component maps), the rest is what the family's published models use:
 *   UNet  SD 1.x: 8 heads per level; SD 2.x, SDXL, refiner: 64-wide heads.
 *         32 norm groups, eps 1e-5, flip_sin_to_cos, no extra activations,
 *         padding-1 downsamplers; SDXL's text_time embedding with 256-wide
 *         time-id embeddings (the refiner's too: 5 ids instead of 6).
 *   VAE   32 norm groups, scaling 0.18215 (SD 1.x / 2.x) or 0.13025 (SDXL),
 *         force_upcast (diffusers' default).
 *   CLIP  64-wide heads, eps 1e-5, ids 49406 / 49407; quick_gelu for
 *         OpenAI's ViT-L, gelu for OpenCLIP; SDXL's bigG with its projection.
 * A size the published layout cannot express (a mid-block deeper than the
 * last level's transformers, channels the heads do not divide) is
 * RB_E_UNSUPPORTED naming it; channels the 32 norm groups do not divide
 * fail when the networks bind (a model with other widths needs its config:
 * sd_gguf_use_configs). */
#include "sd/sd_gguf.h"

#include <stdio.h>
#include <string.h>

static int64_t dim(const sd_name_map *m, const char *name, int d) {
    const rb_st_tensor *t = sd_name_map_find(m, name);
    return t && d < t->n_dims ? t->ne[d] : 0;
}

static bool has(const sd_name_map *m, const char *name) { return sd_name_map_find(m, name) != NULL; }

/* out = how many of the names (formatted with out = 0, 1, ...) are present, at most max. */
#define COUNT(out, max, ...)                                                                                   \
    do {                                                                                                       \
        char cnt_[192];                                                                                        \
        for ((out) = 0; (out) < (max); (out)++) {                                                              \
            snprintf(cnt_, sizeof cnt_, __VA_ARGS__);                                                          \
            if (!has(m, cnt_)) break;                                                                          \
        }                                                                                                      \
    } while (0)

/* The context width: the first cross-attention's key projection input. */
static int64_t context_dim(const sd_name_map *m) {
    char n[192];
    for (int l = 0; l < RB_SD_MAX_LEVELS; l++) {
        snprintf(n, sizeof n, "down_blocks.%d.attentions.0.transformer_blocks.0.attn2.to_k.weight", l);
        if (has(m, n)) return dim(m, n, 0);
    }
    return dim(m, "mid_block.attentions.0.transformer_blocks.0.attn2.to_k.weight", 0);
}

sd_family sd_gguf_unet_family(const sd_name_map *unet) {
    const int64_t ctx = context_dim(unet);
    if (has(unet, "add_embedding.linear_1.weight")) return ctx == 1280 ? SD_FAMILY_SDXL_REFINER : SD_FAMILY_SDXL;
    char n[192];
    bool linear = false;
    for (int l = 0; l < RB_SD_MAX_LEVELS && !linear; l++) {
        snprintf(n, sizeof n, "down_blocks.%d.attentions.0.proj_in.weight", l);
        const rb_st_tensor *t = sd_name_map_find(unet, n);
        linear = t && t->n_dims == 2;
    }
    return linear || ctx == 1024 ? SD_FAMILY_SD2 : SD_FAMILY_SD1;
}

static rb_status unsupported(rb_error *err, const char *what, const char *detail) {
    return rb_error_set(err, RB_E_UNSUPPORTED, "%s: %s", what, detail);
}

static rb_status derive_unet(const sd_name_map *m, sd_family f, rb_unet_config *c, rb_error *err) {
    memset(c, 0, sizeof *c);
    char nm[192];
    int levels = 0;
    for (; levels <= RB_SD_MAX_LEVELS; levels++) {
        snprintf(nm, sizeof nm, "down_blocks.%d.resnets.0.conv1.weight", levels);
        if (!has(m, nm)) break;
    }
    if (levels < 1 || levels > RB_SD_MAX_LEVELS)
        return rb_error_set(err, RB_E_FORMAT, "UNet: %d levels of down blocks", levels);
    c->n_levels = levels;
    const int64_t ctx = context_dim(m);
    int mid_depth, k;
    COUNT(mid_depth, 65, "mid_block.attentions.0.transformer_blocks.%d.attn1.to_q.weight", mid_depth);
    for (int l = 0; l < levels; l++) {
        snprintf(nm, sizeof nm, "down_blocks.%d.resnets.0.conv1.weight", l);
        const int64_t ch = dim(m, nm, 3);
        c->block_out_channels[l] = ch;
        COUNT(k, 9, "down_blocks.%d.resnets.%d.conv1.weight", l, k);
        c->layers_per_block[l] = k;
        snprintf(nm, sizeof nm, "down_blocks.%d.attentions.0.proj_in.weight", l);
        c->down_cross_attn[l] = has(m, nm);
        snprintf(nm, sizeof nm, "up_blocks.%d.attentions.0.proj_in.weight", levels - 1 - l);
        c->up_cross_attn[l] = has(m, nm);
        int depth;
        COUNT(depth, 65, "down_blocks.%d.attentions.0.transformer_blocks.%d.attn1.to_q.weight", l, depth);
        if (!depth)
            COUNT(depth, 65, "up_blocks.%d.attentions.0.transformer_blocks.%d.attn1.to_q.weight", levels - 1 - l,
                  depth);
        if (l == levels - 1 && mid_depth) {
            if (depth && depth != mid_depth)
                return unsupported(err, "UNet", "the mid-block's transformer depth differs from the last level's");
            depth = mid_depth;
        }
        c->transformer_layers[l] = depth ? depth : 1;
        const int64_t heads = f == SD_FAMILY_SD1 ? 8 : ch / 64;
        if (ch < 1 || heads < 1 || ch % heads)
            return rb_error_set(err, RB_E_UNSUPPORTED,
                                "UNet: %lld channels at level %d do not split into the %s family's heads (%s); the "
                                "file needs its config",
                                (long long)ch, l, sd_family_name(f), f == SD_FAMILY_SD1 ? "8" : "64 wide");
        c->n_heads[l] = (int)heads;
    }
    c->mid_block = mid_depth > 0;
    if (!c->mid_block && has(m, "mid_block.resnets.0.conv1.weight"))
        return unsupported(err, "UNet", "a mid-block without attention (UNetMidBlock2D)");
    c->in_channels = dim(m, "conv_in.weight", 2);
    c->conv_in_kernel = (int)dim(m, "conv_in.weight", 0);
    c->out_channels = dim(m, "conv_out.weight", 3);
    c->conv_out_kernel = (int)dim(m, "conv_out.weight", 0);
    c->time_embed_dim = dim(m, "time_embedding.linear_1.weight", 1);
    c->cross_attention_dim = ctx > 0 ? ctx : 1;
    for (int l = 0; l < levels; l++) {
        snprintf(nm, sizeof nm, "down_blocks.%d.attentions.0.proj_in.weight", l);
        const rb_st_tensor *t = sd_name_map_find(m, nm);
        if (t) {
            c->use_linear_projection = t->n_dims == 2;
            break;
        }
    }
    c->upcast_attention = f == SD_FAMILY_SD2;
    c->norm_num_groups = 32;
    c->norm_eps = 1e-5f;
    c->flip_sin_to_cos = true;
    c->downsample_padding = 1;
    c->mid_block_scale_factor = c->resnet_out_scale_factor = 1.0f;
    if ((c->add_text_time = has(m, "add_embedding.linear_1.weight"))) {
        c->addition_time_embed_dim = 256;
        c->projection_class_embeddings_input_dim = dim(m, "add_embedding.linear_1.weight", 0);
        if (c->projection_class_embeddings_input_dim <= c->addition_time_embed_dim)
            return unsupported(err, "UNet", "add_embedding is narrower than SDXL's 256-wide time-id embeddings");
    }
    if (c->in_channels < 1 || c->out_channels < 1 || c->time_embed_dim < 1 || c->conv_in_kernel % 2 == 0 ||
        c->conv_out_kernel % 2 == 0)
        return rb_error_set(err, RB_E_FORMAT, "UNet: conv_in, conv_out or the time embedding is missing or odd");
    return RB_OK;
}

static rb_status derive_vae(const sd_name_map *m, sd_family f, rb_vae_config *c, rb_error *err) {
    memset(c, 0, sizeof *c);
    int levels = 0;
    char nm[192];
    for (; levels <= RB_SD_MAX_LEVELS; levels++) {
        snprintf(nm, sizeof nm, "decoder.up_blocks.%d.resnets.0.conv1.weight", levels);
        if (!has(m, nm)) break;
    }
    if (levels < 1 || levels > RB_SD_MAX_LEVELS)
        return rb_error_set(err, RB_E_FORMAT, "VAE: %d levels of decoder blocks", levels);
    c->n_levels = levels;
    for (int l = 0; l < levels; l++) {
        snprintf(nm, sizeof nm, "decoder.up_blocks.%d.resnets.0.conv2.weight", levels - 1 - l);
        c->block_out_channels[l] = dim(m, nm, 3);
        if (c->block_out_channels[l] < 1) return rb_error_set(err, RB_E_FORMAT, "VAE: %s is missing", nm);
    }
    int enc, dec;
    COUNT(enc, 9, "encoder.down_blocks.0.resnets.%d.conv1.weight", enc);
    COUNT(dec, 10, "decoder.up_blocks.0.resnets.%d.conv1.weight", dec);
    c->layers_per_block = enc ? enc : dec - 1;
    c->in_channels = has(m, "encoder.conv_in.weight") ? dim(m, "encoder.conv_in.weight", 2) : 3;
    c->out_channels = dim(m, "decoder.conv_out.weight", 3);
    c->latent_channels = dim(m, "decoder.conv_in.weight", 2);
    c->norm_num_groups = 32;
    c->scaling_factor = f == SD_FAMILY_SDXL || f == SD_FAMILY_SDXL_REFINER ? 0.13025f : 0.18215f;
    c->force_upcast = true;
    c->mid_block_attention = has(m, "decoder.mid_block.attentions.0.to_q.weight");
    c->use_quant_conv = has(m, "quant_conv.weight");
    c->use_post_quant_conv = has(m, "post_quant_conv.weight");
    if (c->layers_per_block < 1 || c->out_channels < 1 || c->latent_channels < 1)
        return rb_error_set(err, RB_E_FORMAT, "VAE: resnets, decoder.conv_in or decoder.conv_out are missing");
    return RB_OK;
}

static rb_status derive_text(const sd_name_map *m, bool open_clip, bool projection, rb_clip_text_config *c,
                             rb_error *err) {
    memset(c, 0, sizeof *c);
    static const char tok[] = "text_model.embeddings.token_embedding.weight";
    c->vocab_size = dim(m, tok, 1);
    c->hidden_size = dim(m, tok, 0);
    c->max_positions = dim(m, "text_model.embeddings.position_embedding.weight", 1);
    c->intermediate_size = dim(m, "text_model.encoder.layers.0.mlp.fc1.weight", 1);
    char nm[128];
    for (c->n_layers = 0; c->n_layers <= 1024; c->n_layers++) {
        snprintf(nm, sizeof nm, "text_model.encoder.layers.%lld.self_attn.q_proj.weight", (long long)c->n_layers);
        if (!has(m, nm)) break;
    }
    c->n_heads = c->hidden_size / 64;
    c->with_projection = projection;
    c->projection_dim = projection ? dim(m, "text_projection.weight", 1) : c->hidden_size;
    c->act = open_clip ? RB_CLIP_ACT_GELU : RB_CLIP_ACT_QUICK_GELU;
    c->eps = 1e-5f;
    c->bos_id = 49406;
    c->eos_id = 49407;
    if (c->vocab_size < 1 || c->max_positions < 1 || c->intermediate_size < 1 || c->n_layers < 1 ||
        c->n_layers > 1024 || c->projection_dim < 1)
        return rb_error_set(err, RB_E_FORMAT, "text encoder: embeddings, layers or the projection are missing");
    if (c->n_heads < 1 || c->hidden_size % 64)
        return rb_error_set(err, RB_E_UNSUPPORTED, "text encoder: hidden size %lld does not split into 64-wide heads; "
                            "the file needs its config", (long long)c->hidden_size);
    return RB_OK;
}

rb_status sd_gguf_derive_configs(const sd_ldm *l, sd_family f, sd_gguf_configs *c, rb_error *err) {
    memset(c, 0, sizeof *c);
    c->family = f;
    const sd_name_map *m;
    rb_status s = RB_OK;
    if ((m = sd_gguf_component_map(l, f, SD_GGUF_UNET)) && (c->has_unet = true))
        s = derive_unet(m, f, &c->unet, err);
    if (s == RB_OK && (m = sd_gguf_component_map(l, f, SD_GGUF_VAE)) && (c->has_vae = true))
        s = derive_vae(m, f, &c->vae, err);
    if (s == RB_OK && (m = sd_gguf_component_map(l, f, SD_GGUF_TEXT)) && (c->has_text = true))
        s = derive_text(m, f == SD_FAMILY_SD2, false, &c->text, err);
    if (s == RB_OK && (m = sd_gguf_component_map(l, f, SD_GGUF_TEXT_2)) && (c->has_text_2 = true))
        s = derive_text(m, true, true, &c->text_2, err);
    return s;
}

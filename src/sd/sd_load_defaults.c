/* The published configurations of the model families (the config.json
 * files of runwayml/stable-diffusion-v1-5, stabilityai/stable-diffusion-2-1,
 * stabilityai/stable-diffusion-xl-base-1.0 and -refiner-1.0), written out as
 * rb_*_config values: what a single-file checkpoint cannot show (group
 * counts, heads, activations, scaling factors) and, whole, the shapes of
 * the random-weight benchmark models. */
#include "sd/sd_pipeline_internal.h"

#include <string.h>

static void clip_common(rb_clip_text_config *c) {
    memset(c, 0, sizeof *c);
    c->vocab_size = 49408;
    c->max_positions = 77;
    c->eps = 1e-5f;
    /* the published configs say bos 0 / eos 2 (argmax pooling); the first
     * 49407 is the same position for every tokenized prompt */
    c->bos_id = 49406;
    c->eos_id = 49407;
}

void sd_default_clip_l(rb_clip_text_config *c) {
    clip_common(c);
    c->hidden_size = 768;
    c->intermediate_size = 3072;
    c->n_layers = 12;
    c->n_heads = 12;
    c->projection_dim = 768;
    c->act = RB_CLIP_ACT_QUICK_GELU;
}

void sd_default_clip_h(rb_clip_text_config *c) {
    clip_common(c);
    c->hidden_size = 1024;
    c->intermediate_size = 4096;
    c->n_layers = 23; /* OpenCLIP's 24 less the last, which SD 2.x does not use */
    c->n_heads = 16;
    c->projection_dim = 512;
    c->act = RB_CLIP_ACT_GELU;
}

void sd_default_clip_g(rb_clip_text_config *c) {
    clip_common(c);
    c->hidden_size = 1280;
    c->intermediate_size = 5120;
    c->n_layers = 32;
    c->n_heads = 20;
    c->projection_dim = 1280;
    c->with_projection = true;
    c->act = RB_CLIP_ACT_GELU;
}

int sd_default_heads(rb_sd_arch a, int64_t channels) {
    if (a == RB_SD_ARCH_SD1) return 8;
    return channels % 64 == 0 ? (int)(channels / 64) : 1;
}

int sd_default_size(rb_sd_arch a, rb_sd_prediction p) {
    switch (a) {
    case RB_SD_ARCH_SD1: return 512;
    case RB_SD_ARCH_SD2: return p == RB_SD_PRED_V ? 768 : 512;
    default: return 1024;
    }
}

void sd_default_unet(rb_sd_arch a, rb_unet_config *c) {
    memset(c, 0, sizeof *c);
    c->in_channels = c->out_channels = 4;
    c->mid_block = true;
    c->norm_num_groups = 32;
    c->norm_eps = 1e-5f;
    c->flip_sin_to_cos = true;
    c->conv_in_kernel = c->conv_out_kernel = 3;
    c->downsample_padding = 1;
    c->mid_block_scale_factor = c->resnet_out_scale_factor = 1.0f;
    static const int64_t sd[4] = {320, 640, 1280, 1280}, xl[3] = {320, 640, 1280}, rf[4] = {384, 768, 1536, 1536};
    const int64_t *ch = a == RB_SD_ARCH_SDXL ? xl : a == RB_SD_ARCH_SDXL_REFINER ? rf : sd;
    c->n_levels = a == RB_SD_ARCH_SDXL ? 3 : 4;
    for (int l = 0; l < c->n_levels; l++) {
        c->block_out_channels[l] = ch[l];
        c->layers_per_block[l] = 2;
        c->n_heads[l] = sd_default_heads(a, ch[l]);
        c->transformer_layers[l] = 1;
    }
    switch (a) {
    case RB_SD_ARCH_SD1:
    case RB_SD_ARCH_SD2:
        for (int l = 0; l < 3; l++) c->down_cross_attn[l] = c->up_cross_attn[l] = true;
        c->cross_attention_dim = a == RB_SD_ARCH_SD1 ? 768 : 1024;
        c->use_linear_projection = a == RB_SD_ARCH_SD2;
        c->upcast_attention = a == RB_SD_ARCH_SD2;
        break;
    case RB_SD_ARCH_SDXL:
        for (int l = 1; l < 3; l++) c->down_cross_attn[l] = c->up_cross_attn[l] = true;
        c->transformer_layers[1] = 2;
        c->transformer_layers[2] = 10;
        c->cross_attention_dim = 2048;
        c->use_linear_projection = true;
        c->add_text_time = true;
        c->addition_time_embed_dim = 256;
        c->projection_class_embeddings_input_dim = 2816; /* 1280 pooled + 6 x 256 */
        break;
    default: /* refiner */
        for (int l = 1; l < 3; l++) c->down_cross_attn[l] = c->up_cross_attn[l] = true;
        for (int l = 0; l < 4; l++) c->transformer_layers[l] = 4;
        c->cross_attention_dim = 1280;
        c->use_linear_projection = true;
        c->add_text_time = true;
        c->addition_time_embed_dim = 256;
        c->projection_class_embeddings_input_dim = 2560; /* 1280 pooled + 5 x 256 */
        break;
    }
    c->time_embed_dim = 4 * c->block_out_channels[0];
}

void sd_default_vae(rb_sd_arch a, rb_vae_config *c) {
    memset(c, 0, sizeof *c);
    c->in_channels = c->out_channels = 3;
    c->latent_channels = 4;
    c->n_levels = 4;
    static const int64_t ch[4] = {128, 256, 512, 512};
    for (int l = 0; l < 4; l++) c->block_out_channels[l] = ch[l];
    c->layers_per_block = 2;
    c->norm_num_groups = 32;
    c->scaling_factor = (a == RB_SD_ARCH_SDXL || a == RB_SD_ARCH_SDXL_REFINER) ? 0.13025f : 0.18215f;
    c->force_upcast = true;
    c->mid_block_attention = c->use_quant_conv = c->use_post_quant_conv = true;
}

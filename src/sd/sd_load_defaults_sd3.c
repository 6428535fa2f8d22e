/* The published configurations of Stable Diffusion 3 medium and 3.5 medium
 * (the config.json files of stabilityai/stable-diffusion-3-medium-diffusers
 * and stable-diffusion-3.5-medium), written out as rb_*_config values: the
 * shapes of the random-weight benchmark models `sd3m` and `sd35m`. */
#include "sd/sd_pipeline_internal.h"

#include <string.h>

void sd_default_mmdit(bool sd35, rb_mmdit_config *c) {
    memset(c, 0, sizeof *c);
    c->in_channels = c->out_channels = 16;
    c->patch_size = 2;
    c->sample_size = 128;
    c->num_layers = 24;
    c->heads = 24;
    c->head_dim = 64;
    c->joint_attention_dim = 4096;
    c->caption_projection_dim = 1536;
    c->pooled_projection_dim = 2048;
    c->pos_embed_max_size = sd35 ? 384 : 192;
    c->qk_norm = sd35;
    for (int i = 0; sd35 && i <= 12; i++) c->dual_attention[i] = true;
}

void sd_default_t5_xxl(rb_t5_config *c) {
    memset(c, 0, sizeof *c);
    c->vocab_size = 32128;
    c->d_model = 4096;
    c->d_kv = 64;
    c->d_ff = 10240;
    c->n_layers = 24;
    c->n_heads = 64;
    c->rel_buckets = 32;
    c->rel_max_distance = 128;
    c->gated = true;
    c->eps = 1e-6f;
}

void sd_default_vae_sd3(rb_vae_config *c) {
    sd_default_vae(RB_SD_ARCH_SD1, c);
    c->latent_channels = 16;
    c->scaling_factor = 1.5305f;
    c->shift_factor = 0.0609f;
    c->has_shift_factor = true;
    c->use_quant_conv = c->use_post_quant_conv = false;
}

void sd_default_clip_sd3(rb_clip_text_config *l, rb_clip_text_config *g) {
    sd_default_clip_l(l);
    l->with_projection = true; /* CLIPTextModelWithProjection, projection_dim 768 */
    sd_default_clip_g(g);
}

rb_status sd_default_sched_sd3(rb_sd_sched_config *c, rb_error *err) {
    static const char json[] = "{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", "
                               "\"num_train_timesteps\": 1000, \"shift\": 3.0}";
    rb_sd_sched_config_init(c);
    return rb_sd_sched_config_parse(c, json, sizeof json - 1, err);
}

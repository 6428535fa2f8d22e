/* Internal to the VAE: the loaded AutoencoderKL (encoder and decoder
 * weights) shared by its loader (vae.c) and its forward passes
 * (vae_forward.c). */
#ifndef RBEE_SD_VAE_INTERNAL_H
#define RBEE_SD_VAE_INTERNAL_H

#include "rbee/sd_model.h"
#include "sd/sd_blocks.h"

typedef struct vae_level {
    sd_resnet *res; /* encoder: layers_per_block; decoder: layers_per_block + 1 */
    sd_conv sample; /* encoder: downsampler (all but the last level); decoder: upsampler (likewise) */
} vae_level;

typedef struct vae_mid {
    sd_resnet res[2];
    sd_vae_attn attn; /* when mid_block_attention */
} vae_mid;

struct rb_vae {
    rb_vae_config cfg;
    rb_backend *be;
    sd_weights ws;
    /* encoder */
    sd_conv enc_in, enc_out, quant;
    vae_level enc[RB_SD_MAX_LEVELS];
    vae_mid enc_mid;
    sd_norm enc_norm;
    /* decoder; dec[i] is diffusers' up_blocks.i (deepest level first) */
    sd_conv post_quant, dec_in, dec_out;
    vae_level dec[RB_SD_MAX_LEVELS];
    vae_mid dec_mid;
    sd_norm dec_norm;
    sd_scratch scratch;
};

/* The VAE's GroupNorm epsilon (its resnets, attention and output norm). */
#define VAE_EPS 1e-6f

#endif

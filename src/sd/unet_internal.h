/* Internal to the UNet: the loaded model (weights per level, the time and
 * text-time embeddings) shared by its loader (unet.c) and forward pass
 * (unet_forward.c). */
#ifndef RBEE_SD_UNET_INTERNAL_H
#define RBEE_SD_UNET_INTERNAL_H

#include "rbee/sd_model.h"
#include "sd/sd_blocks.h"

typedef struct unet_level {
    sd_resnet *down_res; /* layers_per_block */
    sd_t2d *down_attn;   /* layers_per_block, when down_cross_attn */
    sd_conv down;        /* all levels but the deepest */
    sd_resnet *up_res;   /* layers_per_block + 1 */
    sd_t2d *up_attn;     /* layers_per_block + 1, when up_cross_attn */
    sd_conv up;          /* all levels but the first */
} unet_level;

struct rb_unet {
    rb_unet_config cfg;
    rb_backend *be;
    sd_weights ws;
    sd_linear time_1, time_2; /* time_embedding.linear_1/2 */
    sd_linear add_1, add_2;   /* add_embedding.linear_1/2 (text_time) */
    sd_conv conv_in, conv_out;
    sd_norm norm_out;
    unet_level lv[RB_SD_MAX_LEVELS];
    sd_resnet mid_res[2];
    sd_t2d mid_attn;
    sd_scratch scratch;
};

#endif

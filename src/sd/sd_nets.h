/* Building the three networks from a config struct and a weight source
 * instead of a diffusers folder: the folder loaders (rb_*_load) use these,
 * and so can a loader of other layouts (an original LDM single-file
 * checkpoint, GGUF) that fills the configs itself and maps the tensor names
 * with its own sd_weights lookup. Each takes over ws: on success it belongs
 * to the network, on failure it has been closed. */
#ifndef RBEE_SD_NETS_H
#define RBEE_SD_NETS_H

#include "rbee/sd_model.h"
#include "rbee/sd_mmdit.h"
#include "rbee/sd_t5.h"
#include "sd/sd_weights.h"

rb_status sd_clip_text_create(const rb_clip_text_config *cfg, sd_weights *ws, rb_clip_text **out, rb_error *err);
rb_status sd_unet_create(const rb_unet_config *cfg, sd_weights *ws, rb_unet **out, rb_error *err);
rb_status sd_t5_create(const rb_t5_config *cfg, sd_weights *ws, rb_t5 **out, rb_error *err);
rb_status sd_vae_create(const rb_vae_config *cfg, sd_weights *ws, rb_vae **out, rb_error *err);
rb_status sd_mmdit_create(const rb_mmdit_config *cfg, sd_weights *ws, rb_mmdit **out, rb_error *err);

#endif

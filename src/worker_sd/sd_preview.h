/* Cheap live previews of a running generation: the latents the step
 * predicts (rb_sd_step_info.denoised, not the noisy ones) mapped to RGB by
 * a fixed linear map per latent space (the 4x3 factors the SD community
 * fitted for SD 1.x/2.x and for SDXL latents, as
 * AUTOMATIC1111's "Approx cheap" and ComfyUI's latent previews use), at
 * latent resolution (1/8 of the image), the images of a batch side by side,
 * encoded as a fast PNG. No network runs: the engine has no TAESD decoder,
 * so this is the only preview there is. */
#ifndef RBEE_SD_PREVIEW_H
#define RBEE_SD_PREVIEW_H

#include "rbee/image.h"
#include "rbee/sd_pipeline.h"

#include <stdint.h>

/* latents: batch x channels x h x w (the sampler's layout). Fills img
 * (allocated: w x batch wide, h high, RGB). RB_E_UNSUPPORTED for latent
 * spaces other than 4 channels. */
rb_status sd_preview_image(rb_sd_arch arch, const float *latents, int batch, int channels, int h, int w,
                           rb_image *img, rb_error *err);

/* The same as a PNG (malloc'ed). */
rb_status sd_preview_png(rb_sd_arch arch, const float *latents, int batch, int channels, int h, int w, uint8_t **png,
                         size_t *len, rb_error *err);

#endif

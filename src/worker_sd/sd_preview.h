/* Cheap live previews of a running generation: the latents the step
 * predicts (rb_sd_step_info.denoised, not the noisy ones) mapped to RGB by
 * a fixed linear map per latent space (the 4x3 factors the SD community
 * fitted for SD 1.x/2.x and for SDXL latents, as
 * AUTOMATIC1111's "Approx cheap" and ComfyUI's latent previews use), at
 * latent resolution (1/8 of the image), the images of a batch side by side,
 * encoded as a fast PNG; or, with a TAESD decoder (--taesd), that small
 * network's full-size picture of the same latents. */
#ifndef RBEE_SD_PREVIEW_H
#define RBEE_SD_PREVIEW_H

#include "rbee/image.h"
#include "rbee/sd_model.h"
#include "rbee/sd_pipeline.h"

#include <stdint.h>

/* latents: batch x channels x h x w (the sampler's layout). Fills img
 * (allocated: w x batch wide, h high, RGB). RB_E_UNSUPPORTED for latent
 * spaces other than 4 channels. */
rb_status sd_preview_image(rb_sd_arch arch, const float *latents, int batch, int channels, int h, int w,
                           rb_image *img, rb_error *err);

/* The TAESD decoder's picture: (w x scale) x batch wide, h x scale high.
 * RB_E_UNSUPPORTED when channels is not what t decodes. */
rb_status sd_preview_taesd_image(rb_taesd *t, const float *latents, int batch, int channels, int h, int w,
                                 rb_image *img, rb_error *err);

/* Either one as a PNG (malloc'ed): TAESD when t is not NULL. */
rb_status sd_preview_png(rb_taesd *t, rb_sd_arch arch, const float *latents, int batch, int channels, int h, int w, uint8_t **png,
                         size_t *len, rb_error *err);

#endif

/* Networks of SD3 single files and SD3 GGUF files (sd_sd3.h, sd_sd3_gguf.h)
 * built with the engine's constructors (sd_nets.h): the MMDiT, the T5
 * encoder and the two CLIP encoders with projection. (The 16-channel VAE's
 * config, which the SD3 VAE work defines, comes from s->ldm.vae_shape:
 * levels, channels, resnets per level, latent channels; SD3's VAE has no
 * quant convs.) Entry points for the
 * SD3 pipeline's loader:
 *   single file: sd_sd3_build on the file's tensors, sd_sd3_meta_make (with a
 *     diffusers folder when the heads are not derivable), then weights over
 *     a part's map (sd_weights_init(ws, NULL, false, sd_sd3_lookup,
 *     (void *)sd_sd3_part_map(s, part), ...)) and the constructor;
 *   GGUF: sd_sd3_gguf_open, sd_sd3_gguf_weights, and f->sd3 / f->meta. */
#ifndef RBEE_SD_SD3_NETS_H
#define RBEE_SD_SD3_NETS_H

#include "sd/sd_nets.h"
#include "sd/sd_sd3_gguf.h"

/* The MMDiT's config: the tensors' values, with m's heads and sample_size
 * (m NULL: the heads the tensors show, sample_size 128). */
rb_status sd_sd3_mmdit_config(const sd_sd3 *s, const sd_sd3_meta *m, rb_mmdit_config *c, rb_error *err);
/* sd_mmdit_create with that config over ws (which it takes over: on failure
 * ws has been closed). */
rb_status sd_sd3_mmdit_create(const sd_sd3 *s, const sd_sd3_meta *m, sd_weights *ws, rb_mmdit **out, rb_error *err);

/* The T5 encoder's config: the tensors' values, m's
 * relative_attention_max_distance (m NULL: 128), epsilon 1e-6. */
rb_status sd_sd3_t5_config(const sd_sd3 *s, const sd_sd3_meta *m, rb_t5_config *c, rb_error *err);
/* sd_t5_create with that config over ws (taken over as above). */
rb_status sd_sd3_t5_create(const sd_sd3 *s, const sd_sd3_meta *m, sd_weights *ws, rb_t5 **out, rb_error *err);
/* CLIP-L (part SD_SD3_CLIP_L, text_encoder) or CLIP-G (SD_SD3_CLIP_G,
 * text_encoder_2) as CLIPTextModelWithProjection: the tensors' sizes, m's
 * heads (m NULL: width / 64), the published models' activation and eps. */
rb_status sd_sd3_clip_config(const sd_sd3 *s, const sd_sd3_meta *m, sd_sd3_part part, rb_clip_text_config *c,
                             rb_error *err);
rb_status sd_sd3_clip_create(const sd_sd3 *s, const sd_sd3_meta *m, sd_sd3_part part, sd_weights *ws,
                             rb_clip_text **out, rb_error *err);

#endif

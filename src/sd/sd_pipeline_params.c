/* rb_sd_params defaults and their check against a model: every field is
 * validated (clear RB_E_INVALID / RB_E_RANGE messages naming it) and
 * resolved into a run plan: output size (explicit, the init image's, or the
 * model's default), mode (txt2img, img2img, inpaint with a 9-channel UNet
 * or by latent blending), classifier-free guidance (diffusers: scale > 1),
 * the sampler and schedule, strength defaults, and SDXL's time ids
 * (original size, crop, target size; the refiner's aesthetic scores). */
#include "sd/sd_pipeline_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void rb_sd_params_init(rb_sd_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->prompt = "";
    p->steps = 20;
    p->guidance_scale = 7.5f;
    p->eta = -1.0;
    p->rng = RB_TORCH_RNG_CPU;
    p->batch = 1;
}

static rb_status check_image(const rb_image *img, const char *what, rb_error *err) {
    if (!img->data || img->width < 1 || img->height < 1 ||
        (img->channels != 1 && img->channels != 3 && img->channels != 4))
        return rb_error_set(err, RB_E_INVALID, "%s: not a valid image (%d x %d, %d channels)", what, (int)img->width,
                            (int)img->height, (int)img->channels);
    return RB_OK;
}

static rb_status check_size(const char *what, int v, int scale, rb_error *err) {
    if (v < scale || v > RB_SD_MAX_SIDE)
        return rb_error_set(err, RB_E_RANGE, "%s %d is outside %d..%d", what, v, scale, RB_SD_MAX_SIDE);
    if (v % scale) return rb_error_set(err, RB_E_INVALID, "%s %d is not a multiple of %d", what, v, scale);
    return RB_OK;
}

static rb_status resolve_sampler(const rb_sd_model *m, const rb_sd_params *p, sd_run_plan *plan, rb_error *err) {
    plan->kind = m->default_sampler;
    plan->schedule = m->default_schedule;
    if (p->sampler && p->sampler[0]) {
        rb_status s = rb_sd_sampler_spec_parse(p->sampler, &plan->kind, &plan->schedule, err);
        if (s != RB_OK) return s;
    }
    if (p->schedule && p->schedule[0]) return rb_sd_schedule_parse(p->schedule, &plan->schedule, err);
    return RB_OK;
}

static rb_status time_ids(const rb_sd_model *m, const rb_sd_params *p, sd_run_plan *plan, rb_error *err) {
    plan->n_time_ids = 0;
    if (!m->has_unet_cfg || !m->unet_cfg.add_text_time) return RB_OK;
    const int ids = sd_unet_time_ids(&m->unet_cfg, m->enc[m->n_enc - 1].cfg.projection_dim);
    const int vals[] = {p->original_width, p->original_height, p->target_width, p->target_height, p->crop_left,
                        p->crop_top};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        if (vals[i] < 0 || vals[i] > 65536)
            return rb_error_set(err, RB_E_RANGE, "SDXL size / crop conditioning value %d is outside 0..65536", vals[i]);
    if (!isfinite(p->aesthetic_score) || !isfinite(p->negative_aesthetic_score))
        return rb_error_set(err, RB_E_INVALID, "aesthetic scores must be finite");
    const float oh = (float)(p->original_height ? p->original_height : plan->height);
    const float ow = (float)(p->original_width ? p->original_width : plan->width);
    const float th = (float)(p->target_height ? p->target_height : plan->height);
    const float tw = (float)(p->target_width ? p->target_width : plan->width);
    const float ct = (float)p->crop_top, cl = (float)p->crop_left;
    for (int r = 0; r < 2; r++) {
        float *t = plan->time_ids[r];
        t[0] = oh;
        t[1] = ow;
        t[2] = ct;
        t[3] = cl;
        if (ids == 6) {
            t[4] = th;
            t[5] = tw;
        } else if (ids == 5) { /* refiner: the aesthetic score; the negative one for the uncond row */
            t[4] = r == 0 ? (p->negative_aesthetic_score != 0.0f ? p->negative_aesthetic_score : 2.5f)
                          : (p->aesthetic_score != 0.0f ? p->aesthetic_score : 6.0f);
        } else {
            return rb_error_set(err, RB_E_UNSUPPORTED, "a text_time UNet with %d time ids", ids);
        }
    }
    plan->n_time_ids = ids;
    return RB_OK;
}

rb_status sd_plan(const rb_sd_model *m, const rb_sd_params *p, bool gen, sd_run_plan *plan, rb_error *err) {
    memset(plan, 0, sizeof *plan);
    if (!m || !p) return rb_error_set(err, RB_E_INVALID, "sd: NULL model or parameters");
    if (!p->prompt) return rb_error_set(err, RB_E_INVALID, "prompt is NULL (use \"\" for an empty prompt)");
    if (p->batch < 1 || p->batch > RB_SD_MAX_BATCH)
        return rb_error_set(err, RB_E_RANGE, "batch %d is outside 1..%d", p->batch, RB_SD_MAX_BATCH);
    if (p->steps < 1 || p->steps > RB_SD_MAX_STEPS)
        return rb_error_set(err, RB_E_RANGE, "steps %d is outside 1..%d", p->steps, RB_SD_MAX_STEPS);
    if (!isfinite(p->guidance_scale) || p->guidance_scale < 0.0f || p->guidance_scale > RB_SD_MAX_GUIDANCE)
        return rb_error_set(err, RB_E_RANGE, "guidance scale %g is outside 0..%g", (double)p->guidance_scale,
                            (double)RB_SD_MAX_GUIDANCE);
    if (!isfinite(p->eta) || p->eta > 10.0) return rb_error_set(err, RB_E_INVALID, "eta %g is not < 10", p->eta);
    if ((int)p->rng < 0 || p->rng >= RB_TORCH_RNG_KIND_COUNT_)
        return rb_error_set(err, RB_E_INVALID, "unknown generator kind %d", (int)p->rng);
    if ((int)p->prompt_mode < 0 || p->prompt_mode > RB_SD_PROMPT_A1111)
        return rb_error_set(err, RB_E_INVALID, "unknown prompt mode %d", (int)p->prompt_mode);
    if ((int)p->vae_tiling < 0 || p->vae_tiling > RB_SD_TILING_OFF)
        return rb_error_set(err, RB_E_INVALID, "unknown tiling mode %d", (int)p->vae_tiling);
    if (p->vae_tile != 0 && (p->vae_tile < 8 || p->vae_tile > 1024))
        return rb_error_set(err, RB_E_RANGE, "VAE tile %d is outside 8..1024 latent pixels", p->vae_tile);
    if (p->clip_skip < 0) return rb_error_set(err, RB_E_INVALID, "clip skip %d is negative", p->clip_skip);
    for (int i = 0; i < m->n_enc; i++)
        if (p->clip_skip >= m->enc[i].cfg.n_layers)
            return rb_error_set(err, RB_E_RANGE, "clip skip %d leaves no layer of text encoder %d (%lld layers)",
                                p->clip_skip, i + 1, (long long)m->enc[i].cfg.n_layers);
    rb_status s = resolve_sampler(m, p, plan, err);
    if (s != RB_OK) return s;

    const int scale = m->has_vae_cfg ? 1 << (m->vae_cfg.n_levels - 1) : 8;
    plan->latent_ch = m->has_vae_cfg ? (int)m->vae_cfg.latent_channels : 4;
    plan->unet_in = m->has_unet_cfg ? (int)m->unet_cfg.in_channels : plan->latent_ch;
    if (m->has_mmdit_cfg) plan->unet_in = (int)m->mmdit_cfg.in_channels;
    plan->nine_channel = plan->unet_in == 2 * plan->latent_ch + 1;
    plan->batch = p->batch;
    plan->cfg = p->guidance_scale > 1.0f;
    if (p->mask && !p->init_image) return rb_error_set(err, RB_E_INVALID, "a mask needs an init image");
    plan->img2img = p->init_image && !p->mask;
    plan->inpaint = p->mask != NULL;
    if (plan->nine_channel && !plan->inpaint)
        return rb_error_set(err, RB_E_INVALID, "this is an inpainting model (9-channel UNet): give an init image and a "
                            "mask");
    int w = p->width, h = p->height;
    if (p->init_image) {
        SDP_TRY(check_image(p->init_image, "init image", err));
        const int iw = p->init_image->width, ih = p->init_image->height;
        if ((w && w != iw) || (h && h != ih))
            return rb_error_set(err, RB_E_INVALID, "the init image is %dx%d but the output is %dx%d: resize the image "
                                "to the output size first", iw, ih, w ? w : iw, h ? h : ih);
        w = iw;
        h = ih;
        if (p->mask) {
            SDP_TRY(check_image(p->mask, "mask", err));
            if (p->mask->width != iw || p->mask->height != ih)
                return rb_error_set(err, RB_E_INVALID, "the mask is %dx%d but the init image %dx%d", (int)p->mask->width,
                                    (int)p->mask->height, iw, ih);
        }
    }
    if (!w) w = m->default_w;
    if (!h) h = m->default_h;
    SDP_TRY(check_size("width", w, scale, err));
    SDP_TRY(check_size("height", h, scale, err));
    if ((int64_t)w * h > (int64_t)RB_SD_MAX_PIXELS)
        return rb_error_set(err, RB_E_RANGE, "%dx%d is more than %d pixels", w, h, RB_SD_MAX_PIXELS);
    plan->width = w;
    plan->height = h;
    plan->lw = w / scale;
    plan->lh = h / scale;
    if (p->strength != 0.0) {
        if (!p->init_image) return rb_error_set(err, RB_E_INVALID, "strength needs an init image (img2img, inpaint)");
        if (!(p->strength > 0.0 && p->strength <= 1.0))
            return rb_error_set(err, RB_E_RANGE, "strength %g is outside (0, 1]", p->strength);
        plan->strength = p->strength;
    } else {
        plan->strength = plan->inpaint ? 1.0 : plan->img2img ? 0.8 : 1.0;
    }
    SDP_TRY(time_ids(m, p, plan, err));
    for (int i = 0; i < m->n_enc; i++)
        if (!m->enc[i].enc || !m->enc[i].tok)
            return rb_error_set(err, RB_E_INVALID, "the model was loaded without %s %d",
                                m->enc[i].enc ? "a tokenizer for text encoder" : "text encoder", i + 1);
    if (!gen) return RB_OK;
    if (!m->unet && !m->mmdit)
        return rb_error_set(err, RB_E_INVALID, "the model was loaded without its %s",
                            m->arch == RB_SD_ARCH_SD3 ? "transformer" : "UNet");
    if (m->arch == RB_SD_ARCH_SD3 && plan->inpaint)
        return rb_error_set(err, RB_E_UNSUPPORTED, "SD3 inpainting is not supported (txt2img and img2img are)");
    if (m->arch == RB_SD_ARCH_SD3 && (p->max_sequence_length < 0 || p->max_sequence_length > 512))
        return rb_error_set(err, RB_E_RANGE, "max_sequence_length %d is outside 0..512", p->max_sequence_length);
    if (!p->skip_decode && !m->vae) return rb_error_set(err, RB_E_INVALID, "the model was loaded without its VAE");
    if (p->init_image && (!m->vae || m->vae_cfg.decoder_only))
        return rb_error_set(err, RB_E_INVALID, "img2img and inpainting need the VAE encoder, which was not loaded");
    return RB_OK;
}

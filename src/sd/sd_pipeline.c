/* rb_sd_generate: one generation, in diffusers' order. Prompt conditioning
 * (sd_pipeline_text.c); the run's generator; for img2img / inpainting the
 * init image's posterior sample (VAE encode, mean + std x noise, x scaling
 * factor); the sampler's start (its noise draw); for inpainting the mask at
 * latent size (nearest) and the masked image's posterior sample; then per
 * model evaluation: the UNet batch [uncond x N, cond x N] (9-channel UNets:
 * latents, mask, masked-image latents), guidance, the sampler's update (and
 * latent blending for 4-channel inpainting), callbacks; finally latents /
 * scaling factor through the VAE (tiled when large) and the output pixels. */
#include "sched_fp_contract.h"

#include "sd/sd_pipeline_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static bool cancelled(const rb_sd_callbacks *cb) { return cb && cb->cancel && *cb->cancel; }

/* Host buffers and device tensors of one run. */
typedef struct run {
    rb_sd_model *m;
    const rb_sd_params *p;
    const rb_sd_callbacks *cb;
    sd_run_plan plan;
    rb_sd_cond cond;
    rb_torch_rng *gen;
    rb_sd_sampler *smp;
    size_t plane, n; /* h * w; batch * channels * plane */
    int R;           /* UNet batch */
    float *image, *mask_full, *image_lat, *mask_lat, *masked_lat;
    float *model_in, *unet_in, *unet_out, *guided, *timesteps, *time_ids;
    float *x0; /* the denoised estimate of each evaluation, for the step callback */
    rb_tensor t_in, t_out, t_ctx, t_emb;
} run;

static void run_free(run *r) {
    rb_sd_cond_free(&r->cond);
    free(r->gen);
    rb_sd_sampler_free(r->smp);
    free(r->image);
    free(r->mask_full);
    free(r->image_lat);
    free(r->mask_lat);
    free(r->masked_lat);
    free(r->model_in);
    free(r->unet_in);
    free(r->unet_out);
    free(r->guided);
    free(r->x0);
    free(r->timesteps);
    free(r->time_ids);
    rb_tensor_free(&r->t_in);
    rb_tensor_free(&r->t_out);
    rb_tensor_free(&r->t_ctx);
    rb_tensor_free(&r->t_emb);
}

/* scaling x the posterior sample of a 3 x H x W image (one noise draw),
 * repeated for the batch into out (batch x C x plane). */
static rb_status posterior(run *r, const float *image, float *out, rb_error *err) {
    rb_sd_model *m = r->m;
    float *mean = NULL, *logvar = NULL;
    rb_status s = sd_vae_encode_host(m->be, m->vae, image, r->plan.height, r->plan.width, &mean, &logvar, err);
    if (s != RB_OK) return s;
    const size_t k = (size_t)r->plan.latent_ch * r->plane;
    float *noise = malloc(sizeof(float) * k);
    if (!noise) {
        s = rb_error_set(err, RB_E_NOMEM, "out of memory");
        goto done;
    }
    if ((s = rb_torch_randn(r->gen, noise, k)) != RB_OK) {
        rb_error_set(err, s, "the generator failed");
        goto done;
    }
    const rb_vae_config *vc = &m->vae_cfg;
    for (size_t i = 0; i < k; i++) {
        const float sd = expf(0.5f * logvar[i]);
        const float x = mean[i] + sd * noise[i];
        out[i] = vc->has_shift_factor ? (x - vc->shift_factor) * vc->scaling_factor : vc->scaling_factor * x;
    }
    for (int b = 1; b < r->plan.batch; b++) memcpy(out + (size_t)b * k, out, sizeof(float) * k);
done:
    free(noise);
    free(mean);
    free(logvar);
    return s;
}

static rb_status alloc_f(float **p, size_t n, rb_error *err) {
    *p = malloc(sizeof(float) * (n ? n : 1));
    return *p ? RB_OK : rb_error_set(err, RB_E_NOMEM, "out of memory (%zu floats)", n);
}

/* Image inputs up to the sampler's start (draw order: image sample, start
 * noise, masked image sample). */
static rb_status prepare_start(run *r, rb_error *err) {
    const sd_run_plan *pl = &r->plan;
    const rb_sd_params *p = r->p;
    const size_t HW = (size_t)pl->width * (size_t)pl->height;
    rb_status s;
    if (pl->img2img || pl->inpaint) {
        SDP_TRY(alloc_f(&r->image, 3 * HW, err));
        SDP_TRY(sd_image_to_tensor(p->init_image, r->image, err));
    }
    /* diffusers' inpaint: image latents for a 4-channel UNet, or to noise at strength < 1 without given latents */
    const bool need_image = pl->img2img || (pl->inpaint && (!pl->nine_channel || (!p->latents && pl->strength < 1.0)));
    if (need_image) {
        SDP_TRY(alloc_f(&r->image_lat, r->n, err));
        SDP_TRY(posterior(r, r->image, r->image_lat, err));
    }
    const bool from_noise = !pl->img2img && !(pl->inpaint && pl->strength < 1.0);
    if ((s = rb_sd_sampler_begin(r->smp, from_noise ? NULL : r->image_lat, p->latents, err)) != RB_OK) return s;
    if (!pl->inpaint) return RB_OK;
    SDP_TRY(alloc_f(&r->mask_full, HW, err));
    SDP_TRY(sd_mask_to_tensor(p->mask, r->mask_full, err));
    const int S = pl->width / pl->lw;
    SDP_TRY(alloc_f(&r->mask_lat, (size_t)pl->batch * r->plane, err));
    for (int y = 0; y < pl->lh; y++)
        for (int x = 0; x < pl->lw; x++)
            r->mask_lat[(size_t)y * (size_t)pl->lw + (size_t)x] =
                r->mask_full[(size_t)(y * S) * (size_t)pl->width + (size_t)(x * S)];
    for (int b = 1; b < pl->batch; b++) memcpy(r->mask_lat + (size_t)b * r->plane, r->mask_lat, sizeof(float) * r->plane);
    /* masked image = image x (mask < 0.5), then its posterior sample */
    float *masked = NULL;
    SDP_TRY(alloc_f(&masked, 3 * HW, err));
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < HW; i++)
            masked[(size_t)c * HW + i] = r->image[(size_t)c * HW + i] * (r->mask_full[i] < 0.5f ? 1.0f : 0.0f);
    s = alloc_f(&r->masked_lat, r->n, err);
    if (s == RB_OK) s = posterior(r, masked, r->masked_lat, err);
    free(masked);
    if (s != RB_OK) return s;
    if (!pl->nine_channel)
        return rb_sd_sampler_set_inpaint(r->smp, r->image_lat, r->mask_lat, (size_t)pl->batch, (size_t)pl->latent_ch, err);
    return RB_OK;
}

static rb_status dev_alloc(rb_backend *be, rb_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d, rb_error *err) {
    const int64_t ne[4] = {a, b, c, d};
    rb_status s = rb_tensor_alloc(be, RB_F32, 4, ne, t);
    return s == RB_OK ? RB_OK : rb_error_set(err, s, "cannot allocate a %lldx%lldx%lldx%lld tensor on %s", (long long)a,
                                             (long long)b, (long long)c, (long long)d, rb_backend_name(be));
}

/* Device inputs that stay for the whole run: the context [uncond x N,
 * cond x N], SDXL's pooled embeddings and time ids. */
static rb_status prepare_unet(run *r, rb_error *err) {
    const sd_run_plan *pl = &r->plan;
    const rb_sd_cond *c = &r->cond;
    const int N = pl->batch, rows = c->rows;
    r->R = rows * N;
    const size_t R = (size_t)r->R;
    rb_backend *be = r->m->be;
    SDP_TRY(dev_alloc(be, &r->t_in, pl->lw, pl->lh, pl->unet_in, r->R, err));
    SDP_TRY(dev_alloc(be, &r->t_out, pl->lw, pl->lh, pl->latent_ch, r->R, err));
    SDP_TRY(dev_alloc(be, &r->t_ctx, c->dim, c->tokens, r->R, 1, err));
    const size_t row = (size_t)c->tokens * (size_t)c->dim;
    float *ctx = NULL;
    SDP_TRY(alloc_f(&ctx, R * row, err));
    for (size_t k = 0; k < R; k++) memcpy(ctx + k * row, c->context + (k / (size_t)N) * row, sizeof(float) * row);
    rb_status s = rb_tensor_set(&r->t_ctx, ctx, sizeof(float) * R * row);
    free(ctx);
    if (s != RB_OK) return rb_error_set(err, s, "cannot upload the prompt embeddings");
    if (c->pooled_dim) {
        SDP_TRY(dev_alloc(be, &r->t_emb, c->pooled_dim, r->R, 1, 1, err));
        const size_t pd = (size_t)c->pooled_dim;
        float *emb = NULL;
        SDP_TRY(alloc_f(&emb, R * pd, err));
        for (size_t k = 0; k < R; k++) memcpy(emb + k * pd, c->pooled + (k / (size_t)N) * pd, sizeof(float) * pd);
        s = rb_tensor_set(&r->t_emb, emb, sizeof(float) * R * pd);
        free(emb);
        if (s != RB_OK) return rb_error_set(err, s, "cannot upload the pooled embeddings");
    }
    if (c->n_time_ids) {
        SDP_TRY(alloc_f(&r->time_ids, R * (size_t)c->n_time_ids, err));
        for (size_t k = 0; k < R; k++)
            memcpy(r->time_ids + k * (size_t)c->n_time_ids, c->time_ids[k / (size_t)N], sizeof(float) * (size_t)c->n_time_ids);
    }
    SDP_TRY(alloc_f(&r->model_in, r->n, err));
    SDP_TRY(alloc_f(&r->unet_in, R * (size_t)pl->unet_in * r->plane, err));
    SDP_TRY(alloc_f(&r->unet_out, R * (size_t)pl->latent_ch * r->plane, err));
    SDP_TRY(alloc_f(&r->guided, r->n, err));
    if (r->cb && r->cb->on_step) SDP_TRY(alloc_f(&r->x0, r->n, err));
    return alloc_f(&r->timesteps, R, err);
}

/* One model evaluation at timestep t on r->model_in; feeds the sampler. */
static rb_status evaluate(run *r, float t, rb_error *err) {
    const sd_run_plan *pl = &r->plan;
    const size_t C = (size_t)pl->latent_ch, Cin = (size_t)pl->unet_in, N = (size_t)pl->batch, P = r->plane;
    for (size_t k = 0; k < (size_t)r->R; k++) {
        const size_t b = k % N;
        float *dst = r->unet_in + k * Cin * P;
        memcpy(dst, r->model_in + b * C * P, sizeof(float) * C * P);
        if (pl->nine_channel) {
            memcpy(dst + C * P, r->mask_lat + b * P, sizeof(float) * P);
            memcpy(dst + (C + 1) * P, r->masked_lat + b * C * P, sizeof(float) * C * P);
        }
        r->timesteps[k] = t;
    }
    rb_status s = rb_tensor_set(&r->t_in, r->unet_in, sizeof(float) * (size_t)r->R * Cin * P);
    if (s != RB_OK) return rb_error_set(err, s, "cannot upload the UNet input");
    if (r->m->mmdit) { /* SD3 */
        rb_mmdit_inputs in = {.sample = &r->t_in, .context = &r->t_ctx, .pooled = &r->t_emb, .timesteps = r->timesteps};
        SDP_TRY(rb_mmdit_forward(r->m->mmdit, &in, &r->t_out, err));
    } else {
        rb_unet_inputs in = {.sample = &r->t_in, .timesteps = r->timesteps, .context = &r->t_ctx,
                             .text_embeds = r->cond.pooled_dim ? &r->t_emb : NULL, .time_ids = r->time_ids,
                             .n_time_ids = r->cond.n_time_ids};
        SDP_TRY(rb_unet_forward(r->m->unet, &in, &r->t_out, err));
    }
    if ((s = rb_tensor_get(&r->t_out, r->unet_out, sizeof(float) * (size_t)r->R * C * P)) != RB_OK)
        return rb_error_set(err, s, "cannot read the UNet output");
    if (pl->cfg)
        rb_sd_cfg_guidance(r->guided, r->unet_out, r->unet_out + N * C * P, N * C * P, r->p->guidance_scale);
    else
        memcpy(r->guided, r->unet_out, sizeof(float) * N * C * P);
    if (r->x0) SDP_TRY(rb_sd_sampler_x0(r->smp, r->guided, r->x0, err));
    return rb_sd_sampler_feed(r->smp, r->guided, err);
}

static rb_status denoise(run *r, rb_error *err) {
    const int total = rb_sd_sampler_n_evals(r->smp);
    int done = 0;
    float t;
    while (rb_sd_sampler_next(r->smp, r->model_in, &t)) {
        if (cancelled(r->cb)) return rb_error_set(err, RB_E_CANCELLED, "cancelled at evaluation %d of %d", done, total);
        SDP_TRY(evaluate(r, t, err));
        done++;
        if (r->cb && r->cb->progress) r->cb->progress(r->cb->user, done, total);
        if (r->cb && r->cb->on_step) {
            const rb_sd_step_info info = {
                .eval = done, .n_evals = total, .step = rb_sd_sampler_steps_done(r->smp),
                .n_steps = rb_sd_sampler_n_steps(r->smp), .timestep = t, .latents = rb_sd_sampler_latents(r->smp), .denoised = r->x0,
                .model_in = r->unet_in, .batch = r->plan.batch, .channels = r->plan.latent_ch,
                .latent_h = r->plan.lh, .latent_w = r->plan.lw, .model_rows = r->R, .model_channels = r->plan.unet_in};
            rb_status s = r->cb->on_step(r->cb->user, &info);
            if (s != RB_OK) return rb_error_set(err, s, "stopped by the step callback at evaluation %d", done);
        }
    }
    if (!rb_sd_sampler_finished(r->smp)) return rb_error_set(err, RB_E_INVALID, "the sampler stopped early");
    return RB_OK;
}

/* Decodes out->latents (count x latent_channels x latent_h x latent_w) into
 * out->pixels and out->images. */
static rb_status decode(rb_sd_model *m, const rb_sd_params *p, rb_sd_output *out, rb_error *err) {
    const int W = out->width, H = out->height, N = out->count, lh = out->latent_h, lw = out->latent_w;
    const size_t k = (size_t)out->latent_channels * (size_t)lh * (size_t)lw, HW = (size_t)W * (size_t)H;
    int tile = p->vae_tile ? p->vae_tile : m->default_h / (W / lw);
    if (tile < 8) tile = 8;
    const bool big = lh > tile || lw > tile;
    const bool tiled = p->vae_tiling == RB_SD_TILING_ON ? big
                       : p->vae_tiling == RB_SD_TILING_OFF
                           ? false
                           : big && (int64_t)W * H > 4 * (int64_t)m->default_w * m->default_h;
    out->pixels = malloc(sizeof(float) * (size_t)N * HW * 3);
    out->images = calloc((size_t)N, sizeof *out->images);
    float *z = malloc(sizeof(float) * k), *raw = malloc(sizeof(float) * 3 * HW);
    rb_status s = RB_OK;
    if (!out->pixels || !out->images || !z || !raw) {
        s = rb_error_set(err, RB_E_NOMEM, "out of memory for the output images");
        goto done;
    }
    const rb_vae_config *vc = &m->vae_cfg;
    for (int b = 0; b < N && s == RB_OK; b++) {
        const float *x = out->latents + (size_t)b * k;
        for (size_t i = 0; i < k; i++) {
            z[i] = x[i] / vc->scaling_factor;
            if (vc->has_shift_factor) z[i] = z[i] + vc->shift_factor;
        }
        s = tiled ? rb_sd_vae_decode_tiled(m->be, m->vae, z, lh, lw, tile, 0.25f, raw, err)
                  : sd_vae_decode_host(m->be, m->vae, z, lh, lw, raw, err);
        if (s == RB_OK) s = rb_image_alloc(&out->images[b], W, H, 3, err);
        if (s == RB_OK) sd_postprocess(raw, H, W, out->pixels + (size_t)b * HW * 3, out->images[b].data);
    }
done:
    free(z);
    free(raw);
    if (s != RB_OK) { /* the latents stay: the caller may decode again (tiled) */
        if (out->images)
            for (int b = 0; b < N; b++) rb_image_free(&out->images[b]);
        free(out->images);
        free(out->pixels);
        out->images = NULL;
        out->pixels = NULL;
    }
    return s;
}

static rb_status no_noise(void *user, float *out, size_t n) {
    (void)user;
    memset(out, 0, sizeof(float) * n);
    return RB_OK;
}

rb_status rb_sd_check_params(const rb_sd_model *m, const rb_sd_params *p, rb_error *err) {
    sd_run_plan plan;
    rb_status s = sd_plan(m, p, true, &plan, err);
    if (s != RB_OK) return s;
    rb_sd_sampler_opts so;
    rb_sd_sampler_opts_init(&so);
    so.kind = plan.kind;
    so.schedule = plan.schedule;
    so.steps = p->steps;
    so.strength = plan.strength;
    so.eta = p->eta;
    so.noise = no_noise;
    so.n = (size_t)plan.batch * (size_t)plan.latent_ch * (size_t)plan.lh * (size_t)plan.lw;
    so.raw_model_input = m->arch == RB_SD_ARCH_SD3;
    rb_sd_sampler *smp = NULL;
    s = rb_sd_sampler_create(&m->sched, &so, &smp, err);
    rb_sd_sampler_free(smp);
    return s;
}

rb_status rb_sd_decode(rb_sd_model *m, const rb_sd_params *p, rb_sd_output *out, rb_error *err) {
    if (!m || !p || !out) return rb_error_set(err, RB_E_INVALID, "sd decode: NULL argument");
    if (!out->latents || out->count < 1 || out->latent_h < 1 || out->latent_w < 1 || out->latent_channels < 1 ||
        out->width < out->latent_w || out->width % out->latent_w != 0 || out->height % out->latent_h != 0 ||
        out->width / out->latent_w != out->height / out->latent_h)
        return rb_error_set(err, RB_E_INVALID, "sd decode: the output holds no latents of a skip_decode run");
    if (out->images || out->pixels)
        return rb_error_set(err, RB_E_INVALID, "sd decode: the output is already decoded");
    if (!m->vae || !(m->components & RB_SD_LOAD_VAE_DECODER))
        return rb_error_set(err, RB_E_UNSUPPORTED, "sd decode: the model was loaded without its VAE decoder");
    if (out->latent_channels != (int)m->vae_cfg.latent_channels)
        return rb_error_set(err, RB_E_INVALID, "sd decode: %d latent channels, the VAE takes %lld", out->latent_channels,
                            (long long)m->vae_cfg.latent_channels);
    const double t0 = now_ms();
    rb_status s = decode(m, p, out, err);
    if (s == RB_OK) out->decode_ms = now_ms() - t0;
    return s;
}

rb_status rb_sd_generate(rb_sd_model *m, const rb_sd_params *p, const rb_sd_callbacks *cb, rb_sd_output *out,
                         rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "sd: out is NULL");
    memset(out, 0, sizeof *out);
    run r;
    memset(&r, 0, sizeof r);
    r.m = m;
    r.p = p;
    r.cb = cb;
    rb_status s = sd_plan(m, p, true, &r.plan, err);
    if (s != RB_OK) return s;
    const sd_run_plan *pl = &r.plan;
    r.plane = (size_t)pl->lw * (size_t)pl->lh;
    r.n = (size_t)pl->batch * (size_t)pl->latent_ch * r.plane;
    if (cancelled(cb)) return rb_error_set(err, RB_E_CANCELLED, "cancelled before the start");
    double t0 = now_ms();
    if ((s = sd_encode_cond(m, p, pl, &r.cond, err)) != RB_OK) goto fail;
    out->text_ms = now_ms() - t0;
    t0 = now_ms();
    r.gen = malloc(sizeof *r.gen);
    if (!r.gen) {
        s = rb_error_set(err, RB_E_NOMEM, "out of memory");
        goto fail;
    }
    if ((s = rb_torch_rng_init(r.gen, p->rng, p->seed)) != RB_OK) {
        rb_error_set(err, s, "cannot seed the generator");
        goto fail;
    }
    rb_sd_sampler_opts so;
    rb_sd_sampler_opts_init(&so);
    so.kind = pl->kind;
    so.schedule = pl->schedule;
    so.steps = p->steps;
    so.strength = pl->strength;
    so.eta = p->eta;
    so.noise = rb_torch_rng_noise;
    so.noise_user = r.gen;
    so.n = r.n;
    so.raw_model_input = m->arch == RB_SD_ARCH_SD3;
    if ((s = rb_sd_sampler_create(&m->sched, &so, &r.smp, err)) != RB_OK) goto fail;
    if ((s = prepare_start(&r, err)) != RB_OK || (s = prepare_unet(&r, err)) != RB_OK || (s = denoise(&r, err)) != RB_OK)
        goto fail;
    out->denoise_ms = now_ms() - t0;
    out->n_evals = rb_sd_sampler_n_evals(r.smp);
    out->latents = malloc(sizeof(float) * r.n);
    if (!out->latents) {
        s = rb_error_set(err, RB_E_NOMEM, "out of memory");
        goto fail;
    }
    memcpy(out->latents, rb_sd_sampler_latents(r.smp), sizeof(float) * r.n);
    out->count = pl->batch;
    out->width = pl->width;
    out->height = pl->height;
    out->latent_channels = pl->latent_ch;
    out->latent_h = pl->lh;
    out->latent_w = pl->lw;
    out->seed = p->seed;
    out->sampler = pl->kind;
    out->schedule = pl->schedule;
    out->steps = p->steps;
    out->guidance_scale = p->guidance_scale;
    out->strength = pl->img2img || pl->inpaint ? pl->strength : 0.0;
    out->img2img = pl->img2img;
    out->inpaint = pl->inpaint;
    out->clip_skip = p->clip_skip;
    out->rng = p->rng;
    if (!p->skip_decode) {
        if (cancelled(cb)) {
            s = rb_error_set(err, RB_E_CANCELLED, "cancelled before decoding");
            goto fail;
        }
        t0 = now_ms();
        if ((s = decode(m, p, out, err)) != RB_OK) goto fail;
        out->decode_ms = now_ms() - t0;
    }
    run_free(&r);
    return RB_OK;
fail:
    run_free(&r);
    rb_sd_output_free(out);
    return s;
}

void rb_sd_output_free(rb_sd_output *o) {
    if (!o) return;
    if (o->images)
        for (int i = 0; i < o->count; i++) rb_image_free(&o->images[i]);
    free(o->images);
    free(o->pixels);
    free(o->latents);
    memset(o, 0, sizeof *o);
}

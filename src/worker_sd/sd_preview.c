/* Implementation of sd_preview.h. Latent-to-RGB: rgb_k = sum_c latent_c x
 * F[c][k] + B[k] lands in about [-1, 1]; the pixel is round(clamp((rgb + 1)
 * / 2) x 255). TAESD: its decoder's output is about [0, 1] already. */
#include "worker_sd/sd_preview.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* SD 1.x / 2.x latent space (scaling factor 0.18215 applied, as the sampler holds it). */
static const float k_sd1[4][3] = {
    {0.3512f, 0.2297f, 0.3227f},
    {0.3250f, 0.4974f, 0.2350f},
    {-0.2829f, 0.1762f, 0.2721f},
    {-0.2120f, -0.2616f, -0.7177f},
};
static const float k_sd1_bias[3] = {0.0f, 0.0f, 0.0f};

/* SDXL latent space (scaling factor 0.13025). */
static const float k_sdxl[4][3] = {
    {0.3651f, 0.4232f, 0.4341f},
    {-0.2533f, -0.0042f, 0.1068f},
    {0.1076f, 0.1111f, -0.0362f},
    {-0.3165f, -0.2492f, -0.2188f},
};
static const float k_sdxl_bias[3] = {0.1084f, -0.0175f, -0.0011f};

rb_status sd_preview_image(rb_sd_arch arch, const float *latents, int batch, int channels, int h, int w,
                           rb_image *img, rb_error *err) {
    if (!latents || !img || batch < 1 || h < 1 || w < 1)
        return rb_error_set(err, RB_E_INVALID, "preview: bad arguments");
    if (channels != 4) return rb_error_set(err, RB_E_UNSUPPORTED, "preview: %d latent channels (4 expected)", channels);
    if ((int64_t)w * batch > 65535) return rb_error_set(err, RB_E_RANGE, "preview: too wide");
    const bool xl = arch == RB_SD_ARCH_SDXL || arch == RB_SD_ARCH_SDXL_REFINER;
    const float(*f)[3] = xl ? k_sdxl : k_sd1;
    const float *bias = xl ? k_sdxl_bias : k_sd1_bias;
    rb_status s = rb_image_alloc(img, w * batch, h, 3, err);
    if (s != RB_OK) return s;
    const size_t plane = (size_t)h * (size_t)w;
    for (int b = 0; b < batch; b++) {
        const float *x = latents + (size_t)b * 4 * plane;
        for (int y = 0; y < h; y++)
            for (int xx = 0; xx < w; xx++) {
                const size_t i = (size_t)y * (size_t)w + (size_t)xx;
                uint8_t *px = img->data + ((size_t)y * (size_t)img->width + (size_t)b * (size_t)w + (size_t)xx) * 3;
                for (int k = 0; k < 3; k++) {
                    float v = bias[k];
                    for (int c = 0; c < 4; c++) v += x[(size_t)c * plane + i] * f[c][k];
                    v = (v + 1.0f) * 0.5f;
                    if (!(v > 0.0f)) v = 0.0f; /* NaN too */
                    if (v > 1.0f) v = 1.0f;
                    px[k] = (uint8_t)lrintf(v * 255.0f);
                }
            }
    }
    return RB_OK;
}

rb_status sd_preview_taesd_image(rb_taesd *t, const float *latents, int batch, int channels, int h, int w,
                                 rb_image *img, rb_error *err) {
    if (!t || !latents || !img || batch < 1 || h < 1 || w < 1)
        return rb_error_set(err, RB_E_INVALID, "preview: bad arguments");
    if (channels != rb_taesd_latent_channels(t))
        return rb_error_set(err, RB_E_UNSUPPORTED, "preview: %d latent channels, the TAESD decodes %d", channels,
                            rb_taesd_latent_channels(t));
    const int s = rb_taesd_scale(t);
    const int64_t W = (int64_t)w * s, H = (int64_t)h * s;
    if (W * batch > 65535 || H > 65535) return rb_error_set(err, RB_E_RANGE, "preview: too large");
    const size_t plane = (size_t)(W * H);
    float *rgb = malloc(plane * 3 * (size_t)batch * sizeof(float));
    if (!rgb) return rb_error_set(err, RB_E_NOMEM, "preview: out of memory");
    rb_status st = rb_taesd_decode_host(t, latents, batch, h, w, rgb, err);
    if (st == RB_OK) st = rb_image_alloc(img, (int)(W * batch), (int)H, 3, err);
    if (st != RB_OK) {
        free(rgb);
        return st;
    }
    for (int b = 0; b < batch; b++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                uint8_t *px = img->data + ((size_t)y * (size_t)img->width + (size_t)(b * W + x)) * 3;
                for (int k = 0; k < 3; k++) {
                    float v = rgb[((size_t)b * 3 + (size_t)k) * plane + (size_t)(y * W + x)];
                    if (!(v > 0.0f)) v = 0.0f; /* NaN too */
                    if (v > 1.0f) v = 1.0f;
                    px[k] = (uint8_t)lrintf(v * 255.0f);
                }
            }
    free(rgb);
    return RB_OK;
}

rb_status sd_preview_png(rb_taesd *t, rb_sd_arch arch, const float *latents, int batch, int channels, int h, int w, uint8_t **png,
                         size_t *len, rb_error *err) {
    rb_image img = {0};
    rb_status s = t ? sd_preview_taesd_image(t, latents, batch, channels, h, w, &img, err)
                    : sd_preview_image(arch, latents, batch, channels, h, w, &img, err);
    if (s != RB_OK) return s;
    rb_png_encode_opts o = {.compression = 1, .texts = NULL, .n_texts = 0};
    s = rb_png_encode(&img, &o, png, len, err);
    rb_image_free(&img);
    return s;
}

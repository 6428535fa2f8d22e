/* Implementation of sd_preview.h. rgb_k = sum_c latent_c x F[c][k] + B[k]
 * lands in about [-1, 1]; the pixel is round(clamp((rgb + 1) / 2) x 255). */
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

rb_status sd_preview_png(rb_sd_arch arch, const float *latents, int batch, int channels, int h, int w, uint8_t **png,
                         size_t *len, rb_error *err) {
    rb_image img = {0};
    rb_status s = sd_preview_image(arch, latents, batch, channels, h, w, &img, err);
    if (s != RB_OK) return s;
    rb_png_encode_opts o = {.compression = 1, .texts = NULL, .n_texts = 0};
    s = rb_png_encode(&img, &o, png, len, err);
    rb_image_free(&img);
    return s;
}

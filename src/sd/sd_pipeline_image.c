/* Pixels in and out of the pipeline, as diffusers' VaeImageProcessor does
 * them: an 8-bit RGB image becomes float32 u / 255, then 2x - 1 (NCHW);
 * a mask becomes gray (PIL's convert("L") weights), u / 255, then 0 below
 * 0.5 and 1 from 0.5 (binarize); the VAE output becomes clamp(x * 0.5 +
 * 0.5, 0, 1) (output_type "np", HWC) and 8-bit round-half-even(v * 255)
 * (numpy_to_pil). Also the VAE encode of one host image. Each float
 * operation rounds on its own (no contraction), as torch's kernels do. */
#include "sched_fp_contract.h"

#include "sd/sd_pipeline_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

rb_status sd_image_to_tensor(const rb_image *img, float *out, rb_error *err) {
    const int W = img->width, H = img->height, C = img->channels;
    if (!img->data || (C != 1 && C != 3 && C != 4))
        return rb_error_set(err, RB_E_INVALID, "image: %d channels (1, 3 or 4)", C);
    const size_t plane = (size_t)W * (size_t)H;
    for (size_t i = 0; i < plane; i++) {
        const uint8_t *px = img->data + i * (size_t)C;
        for (int c = 0; c < 3; c++) {
            const float v = (float)px[C == 1 ? 0 : c] / 255.0f;
            out[(size_t)c * plane + i] = 2.0f * v - 1.0f;
        }
    }
    return RB_OK;
}

rb_status sd_mask_to_tensor(const rb_image *img, float *out, rb_error *err) {
    const int C = img->channels;
    if (!img->data || (C != 1 && C != 3 && C != 4))
        return rb_error_set(err, RB_E_INVALID, "mask: %d channels (1, 3 or 4)", C);
    const size_t plane = (size_t)img->width * (size_t)img->height;
    for (size_t i = 0; i < plane; i++) {
        const uint8_t *px = img->data + i * (size_t)C;
        /* PIL's RGB -> L: (R 19595 + G 38470 + B 7471 + 0x8000) >> 16 */
        uint32_t g = C == 1 ? px[0] : (px[0] * 19595u + px[1] * 38470u + px[2] * 7471u + 0x8000u) >> 16;
        const float v = (float)g / 255.0f;
        out[i] = v < 0.5f ? 0.0f : 1.0f;
    }
    return RB_OK;
}

rb_status sd_vae_encode_host(rb_backend *be, rb_vae *v, const float *image, int H, int W, float **mean,
                             float **logvar, rb_error *err) {
    *mean = *logvar = NULL;
    const rb_vae_config *c = rb_vae_get_config(v);
    const int s = rb_vae_scale(v);
    const int64_t h = H / s, w = W / s, L = c->latent_channels;
    const size_t n = (size_t)(w * h * L);
    const int64_t ine[4] = {W, H, c->in_channels, 1}, lne[4] = {w, h, L, 1};
    rb_tensor img, mt, lt;
    memset(&img, 0, sizeof img);
    memset(&mt, 0, sizeof mt);
    memset(&lt, 0, sizeof lt);
    rb_status st = RB_OK;
    float *mh = malloc(sizeof(float) * n), *lh = malloc(sizeof(float) * n);
    if (!mh || !lh) {
        st = rb_error_set(err, RB_E_NOMEM, "out of memory for the image latents");
        goto done;
    }
    if ((st = rb_tensor_alloc(be, RB_F32, 4, ine, &img)) != RB_OK ||
        (st = rb_tensor_alloc(be, RB_F32, 4, lne, &mt)) != RB_OK ||
        (st = rb_tensor_alloc(be, RB_F32, 4, lne, &lt)) != RB_OK) {
        rb_error_set(err, st, "cannot allocate the VAE encoder's tensors");
        goto done;
    }
    if ((st = rb_tensor_set(&img, image, sizeof(float) * (size_t)(W * H * c->in_channels))) != RB_OK) {
        rb_error_set(err, st, "cannot upload the image");
        goto done;
    }
    if ((st = rb_vae_encode(v, &img, &mt, &lt, err)) != RB_OK) goto done;
    if ((st = rb_tensor_get(&mt, mh, sizeof(float) * n)) != RB_OK ||
        (st = rb_tensor_get(&lt, lh, sizeof(float) * n)) != RB_OK) {
        rb_error_set(err, st, "cannot read the image latents");
        goto done;
    }
    *mean = mh;
    *logvar = lh;
    mh = lh = NULL;
done:
    free(mh);
    free(lh);
    if (img.buf) rb_tensor_free(&img);
    if (mt.buf) rb_tensor_free(&mt);
    if (lt.buf) rb_tensor_free(&lt);
    return st;
}

void sd_postprocess(const float *raw, int H, int W, float *pixels, uint8_t *rgb) {
    const size_t plane = (size_t)W * (size_t)H;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) {
            float v = raw[(size_t)c * plane + i] * 0.5f + 0.5f;
            v = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
            if (pixels) pixels[i * 3 + (size_t)c] = v;
            if (rgb) rgb[i * 3 + (size_t)c] = (uint8_t)rintf(v * 255.0f);
        }
}

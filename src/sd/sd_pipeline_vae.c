/* Decoding latents to pixels: the whole image in one VAE call, or in
 * overlapping tiles as diffusers' AutoencoderKL.tiled_decode does (tiles of
 * T x T latent pixels every T - floor(T x overlap) pixels, each decoded on
 * its own, its first rows / columns blended linearly into the tile above /
 * to the left, already blended tiles used as they are, each tile keeping
 * its first (T - floor(T x overlap)) x 8 rows and columns). Memory: one
 * tile's activations and one row of decoded tiles. */
#include "sched_fp_contract.h"

#include "sd/sd_pipeline_internal.h"

#include <stdlib.h>
#include <string.h>

rb_status sd_vae_decode_host(rb_backend *be, rb_vae *v, const float *latents, int64_t h, int64_t w, float *out,
                             rb_error *err) {
    const rb_vae_config *c = rb_vae_get_config(v);
    const int64_t s = rb_vae_scale(v), L = c->latent_channels, C = c->out_channels;
    const int64_t zne[4] = {w, h, L, 1}, ine[4] = {w * s, h * s, C, 1};
    rb_tensor z, img;
    memset(&z, 0, sizeof z);
    memset(&img, 0, sizeof img);
    rb_status st;
    if ((st = rb_tensor_alloc(be, RB_F32, 4, zne, &z)) != RB_OK ||
        (st = rb_tensor_alloc(be, RB_F32, 4, ine, &img)) != RB_OK) {
        rb_error_set(err, st, "cannot allocate the VAE decoder's tensors (%lldx%lld)", (long long)(w * s),
                     (long long)(h * s));
        goto done;
    }
    if ((st = rb_tensor_set(&z, latents, sizeof(float) * (size_t)(w * h * L))) != RB_OK) {
        rb_error_set(err, st, "cannot upload the latents");
        goto done;
    }
    if ((st = rb_vae_decode(v, &z, &img, err)) != RB_OK) goto done;
    if ((st = rb_tensor_get(&img, out, sizeof(float) * (size_t)(w * s * h * s * C))) != RB_OK)
        rb_error_set(err, st, "cannot read the decoded image");
done:
    rb_tensor_free(&z);
    rb_tensor_free(&img);
    return st;
}

typedef struct tile {
    float *px; /* C x th x tw */
    int64_t th, tw;
} tile;

/* b's first e rows = a's last e rows x (1 - y/e) + b's x y/e. */
static void blend_rows(const tile *a, tile *b, int64_t C, int64_t e) {
    for (int64_t y = 0; y < e; y++) {
        const float wb = (float)((double)y / (double)e), wa = (float)(1.0 - (double)y / (double)e);
        for (int64_t c = 0; c < C; c++) {
            const float *ra = a->px + ((size_t)c * (size_t)a->th + (size_t)(a->th - e + y)) * (size_t)a->tw;
            float *rb = b->px + ((size_t)c * (size_t)b->th + (size_t)y) * (size_t)b->tw;
            for (int64_t x = 0; x < b->tw; x++) rb[x] = ra[x] * wa + rb[x] * wb;
        }
    }
}

static void blend_cols(const tile *a, tile *b, int64_t C, int64_t e) {
    for (int64_t x = 0; x < e; x++) {
        const float wb = (float)((double)x / (double)e), wa = (float)(1.0 - (double)x / (double)e);
        for (int64_t c = 0; c < C; c++)
            for (int64_t y = 0; y < b->th; y++) {
                const float va = a->px[((size_t)c * (size_t)a->th + (size_t)y) * (size_t)a->tw + (size_t)(a->tw - e + x)];
                float *vb = &b->px[((size_t)c * (size_t)b->th + (size_t)y) * (size_t)b->tw + (size_t)x];
                *vb = va * wa + *vb * wb;
            }
    }
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

rb_status rb_sd_vae_decode_tiled(rb_backend *be, rb_vae *v, const float *latents, int64_t h, int64_t w, int tile_lat,
                                 float overlap, float *out, rb_error *err) {
    if (!be || !v || !latents || !out) return rb_error_set(err, RB_E_INVALID, "tiled decode: NULL argument");
    if (tile_lat < 4 || tile_lat > 4096 || !(overlap >= 0.0f && overlap <= 0.5f) || h < 1 || w < 1 || h > 65536 ||
        w > 65536)
        return rb_error_set(err, RB_E_INVALID, "tiled decode: tile %d, overlap %g, latents %lldx%lld", tile_lat,
                            (double)overlap, (long long)w, (long long)h);
    /* one tile covers it all: the plain decode (diffusers tiles only larger latents) */
    if (h <= tile_lat && w <= tile_lat) return sd_vae_decode_host(be, v, latents, h, w, out, err);
    const rb_vae_config *c = rb_vae_get_config(v);
    const int64_t S = rb_vae_scale(v), L = c->latent_channels, C = c->out_channels, T = tile_lat;
    const int64_t ov = (int64_t)((float)T * overlap), step = T - ov, blend = ov * S, keep = step * S;
    const int64_t H = h * S, W = w * S;
    const int64_t ncols = (w + step - 1) / step;
    tile *prev = calloc((size_t)ncols, sizeof *prev), *cur = calloc((size_t)ncols, sizeof *cur);
    float *z = malloc(sizeof(float) * (size_t)(L * T * T));
    rb_status st = RB_OK;
    if (!prev || !cur || !z) {
        st = rb_error_set(err, RB_E_NOMEM, "tiled decode: out of memory");
        goto done;
    }
    for (int64_t i = 0, ri = 0; i < h; i += step, ri++) {
        for (int64_t j = 0, cj = 0; j < w; j += step, cj++) {
            tile *b = &cur[cj];
            const int64_t th = min64(T, h - i), tw = min64(T, w - j);
            for (int64_t l = 0; l < L; l++)
                for (int64_t y = 0; y < th; y++)
                    memcpy(z + ((size_t)l * (size_t)th + (size_t)y) * (size_t)tw,
                           latents + ((size_t)l * (size_t)h + (size_t)(i + y)) * (size_t)w + (size_t)j,
                           sizeof(float) * (size_t)tw);
            free(b->px);
            b->th = th * S;
            b->tw = tw * S;
            b->px = malloc(sizeof(float) * (size_t)(C * b->th * b->tw));
            if (!b->px) {
                st = rb_error_set(err, RB_E_NOMEM, "tiled decode: out of memory");
                goto done;
            }
            if ((st = sd_vae_decode_host(be, v, z, th, tw, b->px, err)) != RB_OK) goto done;
            if (ri > 0) blend_rows(&prev[cj], b, C, min64(min64(prev[cj].th, b->th), blend));
            if (cj > 0) blend_cols(&cur[cj - 1], b, C, min64(min64(cur[cj - 1].tw, b->tw), blend));
            const int64_t kh = min64(keep, b->th), kw = min64(keep, b->tw), y0 = ri * keep, x0 = cj * keep;
            for (int64_t ch = 0; ch < C; ch++)
                for (int64_t y = 0; y < kh; y++)
                    memcpy(out + ((size_t)ch * (size_t)H + (size_t)(y0 + y)) * (size_t)W + (size_t)x0,
                           b->px + ((size_t)ch * (size_t)b->th + (size_t)y) * (size_t)b->tw, sizeof(float) * (size_t)kw);
        }
        tile *t = prev;
        prev = cur;
        cur = t;
    }
done:
    for (int64_t k = 0; k < ncols && prev && cur; k++) {
        free(prev[k].px);
        free(cur[k].px);
    }
    free(prev);
    free(cur);
    free(z);
    return st;
}

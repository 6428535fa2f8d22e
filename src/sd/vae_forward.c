/* The AutoencoderKL's passes on rbee's ops.
 *
 * decode: post_quant_conv, conv_in, mid block (resnet, single-head attention
 * over all latent pixels, resnet), up blocks (layers_per_block + 1 resnets,
 * then nearest 2x + conv), GroupNorm + SiLU + conv_out.
 * encode: conv_in, down blocks (resnets, then the downsampler: zero pad
 * right/bottom, conv stride 2), mid block, GroupNorm + SiLU + conv_out to
 * 2 x latent channels, quant_conv; mean = first half, logvar = second half
 * clamped to [-30, 20].
 *
 * The hidden state ping-pongs between slots 0 and 1; block temporaries are
 * released as each block returns. The decoder only reads its input through
 * the view it is given, so a tiled decode can pass overlapping tiles of a
 * large latent and blend the decoded tiles. */
#include "sd/vae_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct vae_ctx {
    rb_vae *v;
    const rb_tensor *in;
    rb_tensor *out, *mean, *logvar;
} vae_ctx;

/* Mid block from `slot` (h lives there) to the other slot; returns the slot now holding h. */
static rb_status mid_fwd(sd_run *r, const vae_mid *m, bool attn, rb_tensor *h, int *slot) {
    const int64_t W = h->ne[0], H = h->ne[1], C = h->ne[2], B = h->ne[3];
    rb_tensor a = sd_slot(r, *slot ^ 1, W, H, C, B), b = sd_slot(r, *slot, W, H, C, B);
    SD_TRY(sd_resnet_fwd(r, &m->res[0], &a, h, NULL));
    if (attn) SD_TRY(sd_vae_attn_fwd(r, &m->attn, &a));
    SD_TRY(sd_resnet_fwd(r, &m->res[1], &b, &a, NULL));
    *h = b;
    return RB_OK;
}

static rb_status decode_pass(sd_run *r, void *arg) {
    vae_ctx *e = arg;
    const rb_vae *v = e->v;
    const rb_vae_config *c = &v->cfg;
    const int n = c->n_levels;
    const rb_tensor *z = e->in;
    int64_t W = z->ne[0], H = z->ne[1];
    const int64_t B = z->ne[3];
    rb_tensor pq = *z;
    if (c->use_post_quant_conv) {
        pq = sd_stack(r, W, H, c->latent_channels, B);
        SD_TRY(sd_conv_fwd(r, &v->post_quant, &pq, z, 1, 0));
    }
    int slot = 0;
    rb_tensor h = sd_slot(r, slot, W, H, c->block_out_channels[n - 1], B);
    SD_TRY(sd_conv_fwd(r, &v->dec_in, &h, &pq, 1, 1));
    SD_TRY(mid_fwd(r, &v->dec_mid, c->mid_block_attention, &h, &slot));
    for (int i = 0; i < n; i++) {
        const vae_level *lv = &v->dec[i];
        const int64_t out = c->block_out_channels[n - 1 - i];
        for (int j = 0; j <= c->layers_per_block; j++) {
            slot ^= 1;
            rb_tensor y = sd_slot(r, slot, W, H, out, B);
            SD_TRY(sd_resnet_fwd(r, &lv->res[j], &y, &h, NULL));
            h = y;
        }
        if (i < n - 1) {
            W *= 2;
            H *= 2;
            slot ^= 1;
            rb_tensor y = sd_slot(r, slot, W, H, out, B);
            SD_TRY(sd_upsample_fwd(r, &lv->sample, &y, &h));
            h = y;
        }
    }
    rb_tensor t = sd_stack(r, W, H, h.ne[2], B);
    SD_TRY(sd_group_norm(r, &t, &h, &v->dec_norm, c->norm_num_groups, VAE_EPS, true));
    return sd_conv_fwd(r, &v->dec_out, e->out, &t, 1, 1);
}

static rb_status encode_pass(sd_run *r, void *arg) {
    vae_ctx *e = arg;
    const rb_vae *v = e->v;
    const rb_vae_config *c = &v->cfg;
    const int n = c->n_levels;
    const rb_tensor *x = e->in;
    int64_t W = x->ne[0], H = x->ne[1];
    const int64_t B = x->ne[3], L = c->latent_channels;
    int slot = 0;
    rb_tensor h = sd_slot(r, slot, W, H, c->block_out_channels[0], B);
    SD_TRY(sd_conv_fwd(r, &v->enc_in, &h, x, 1, 1));
    for (int i = 0; i < n; i++) {
        const vae_level *lv = &v->enc[i];
        const int64_t out = c->block_out_channels[i];
        for (int j = 0; j < c->layers_per_block; j++) {
            slot ^= 1;
            rb_tensor y = sd_slot(r, slot, W, H, out, B);
            SD_TRY(sd_resnet_fwd(r, &lv->res[j], &y, &h, NULL));
            h = y;
        }
        if (i < n - 1) {
            W = sd_down_size(W, 0);
            H = sd_down_size(H, 0);
            slot ^= 1;
            rb_tensor y = sd_slot(r, slot, W, H, out, B);
            SD_TRY(sd_downsample_fwd(r, &lv->sample, 0, &y, &h));
            h = y;
        }
    }
    SD_TRY(mid_fwd(r, &v->enc_mid, c->mid_block_attention, &h, &slot));
    rb_tensor t = sd_stack(r, W, H, h.ne[2], B), mo = sd_stack(r, W, H, 2 * L, B);
    SD_TRY(sd_group_norm(r, &t, &h, &v->enc_norm, c->norm_num_groups, VAE_EPS, true));
    SD_TRY(sd_conv_fwd(r, &v->enc_out, &mo, &t, 1, 1));
    if (c->use_quant_conv) {
        rb_tensor q = sd_stack(r, W, H, 2 * L, B);
        SD_TRY(sd_conv_fwd(r, &v->quant, &q, &mo, 1, 0));
        mo = q;
    }
    rb_tensor mean = sd_slice(&mo, 2, 0, L), logvar = sd_slice(&mo, 2, L, L);
    if (e->mean) SD_OP(r, rb_cast(r->be, e->mean, &mean));
    if (e->logvar) {
        static const float lim[2] = {-30.0f, 20.0f};
        rb_tensor k = sd_stack_f32(r, 2, 1, 1, 1);
        SD_TRY(sd_upload(r, &k, lim, sizeof lim));
        rb_tensor lo = sd_slice(&k, 0, 0, 1), hi = sd_slice(&k, 0, 1, 1);
        SD_OP(r, rb_binary(r->be, RB_BINARY_MAX, e->logvar, &logvar, &lo));
        SD_OP(r, rb_binary(r->be, RB_BINARY_MIN, e->logvar, e->logvar, &hi));
    }
    return RB_OK;
}

static bool shape_is(const rb_tensor *t, int64_t w, int64_t h, int64_t c, int64_t b) {
    return t && t->dtype == RB_F32 && t->ne[0] == w && t->ne[1] == h && t->ne[2] == c && t->ne[3] == b;
}

static rb_status bad_shape(rb_error *err, const char *what, const rb_tensor *t, int64_t w, int64_t h, int64_t c,
                           int64_t b) {
    char d[96];
    return rb_error_set(err, RB_E_INVALID, "vae: %s is %s, expected f32[%lld, %lld, %lld, %lld]", what,
                        t ? rb_tensor_describe(t, d, sizeof d) : "NULL", (long long)w, (long long)h, (long long)c,
                        (long long)b);
}

static rb_status decode(rb_vae *v, const rb_tensor *latents, rb_tensor *image, size_t *measure_only, rb_error *err) {
    if (!v || !latents) return rb_error_set(err, RB_E_INVALID, "vae: NULL argument");
    const rb_vae_config *c = &v->cfg;
    const int64_t w = latents->ne[0], h = latents->ne[1], B = latents->ne[3], s = rb_vae_scale(v);
    if (latents->dtype != RB_F32 || latents->ne[2] != c->latent_channels || w < 1 || h < 1 || B < 1 ||
        w > 65536 / s || h > 65536 / s)
        return bad_shape(err, "latents", latents, w, h, c->latent_channels, B);
    if (!measure_only && !shape_is(image, w * s, h * s, c->out_channels, B))
        return bad_shape(err, "image", image, w * s, h * s, c->out_channels, B);
    rb_tensor shape;
    if (measure_only) {
        shape = *latents;
        shape.ne[0] = w * s;
        shape.ne[1] = h * s;
        shape.ne[2] = c->out_channels;
        image = &shape;
    }
    vae_ctx e = {.v = v, .in = latents, .out = image};
    return measure_only ? sd_run_measure(v->be, &v->scratch, decode_pass, &e, measure_only, err)
                        : sd_run_passes(v->be, &v->scratch, decode_pass, &e, err);
}

rb_status rb_vae_decode(rb_vae *v, const rb_tensor *latents, rb_tensor *image, rb_error *err) {
    return decode(v, latents, image, NULL, err);
}

rb_status rb_vae_decode_scratch_bytes(rb_vae *v, int64_t w, int64_t h, int64_t B, size_t *bytes, rb_error *err) {
    if (!v || !bytes) return rb_error_set(err, RB_E_INVALID, "vae: NULL argument");
    rb_tensor z;
    if (rb_tensor_init4(&z, RB_F32, w, h, v->cfg.latent_channels, B, NULL, 0) != RB_OK)
        return rb_error_set(err, RB_E_INVALID, "vae: bad latent size %lld x %lld x %lld", (long long)w, (long long)h,
                            (long long)B);
    return decode(v, &z, NULL, bytes, err);
}

rb_status rb_vae_encode(rb_vae *v, const rb_tensor *image, rb_tensor *mean, rb_tensor *logvar, rb_error *err) {
    if (!v || !image) return rb_error_set(err, RB_E_INVALID, "vae: NULL argument");
    const rb_vae_config *c = &v->cfg;
    if (c->decoder_only) return rb_error_set(err, RB_E_UNSUPPORTED, "vae: loaded without its encoder");
    const int64_t W = image->ne[0], H = image->ne[1], B = image->ne[3];
    if (image->dtype != RB_F32 || image->ne[2] != c->in_channels || W < 2 || H < 2 || B < 1 || W > 65536 ||
        H > 65536)
        return bad_shape(err, "image", image, W, H, c->in_channels, B);
    int64_t w = W, h = H;
    for (int i = 0; i < c->n_levels - 1; i++) {
        if (w < 2 || h < 2) return bad_shape(err, "image (too small for the encoder)", image, W, H, c->in_channels, B);
        w = sd_down_size(w, 0);
        h = sd_down_size(h, 0);
    }
    if (mean && !shape_is(mean, w, h, c->latent_channels, B))
        return bad_shape(err, "mean", mean, w, h, c->latent_channels, B);
    if (logvar && !shape_is(logvar, w, h, c->latent_channels, B))
        return bad_shape(err, "logvar", logvar, w, h, c->latent_channels, B);
    vae_ctx e = {.v = v, .in = image, .mean = mean, .logvar = logvar};
    return sd_run_passes(v->be, &v->scratch, encode_pass, &e, err);
}

/* TAESD, the tiny autoencoder's decoder: latents straight from the sampler
 * (the UNet's scaled latent space) to an RGB image in about [0, 1], 8x
 * larger, at a small fraction of the AutoencoderKL decoder's cost. The SD
 * worker's live previews use it when --taesd names one.
 *
 * Structure (one channel width C, 64 in every published TAESD):
 *   tanh(z / 3) * 3, conv3x3 (latent -> C) + ReLU,
 *   per stage: n blocks, then (not the last) nearest 2x + conv3x3 without
 *   bias; the last stage ends in conv3x3 (C -> 3) with bias;
 *   block(x) = ReLU(conv(ReLU(conv(ReLU(conv(x))))) + x).
 * The published decoders have stages of 3, 3, 3 and 1 blocks.
 *
 * Files: the original taesd_decoder.safetensors (a torch Sequential whose
 * index 0 is the tanh clamp: "1.weight", "3.conv.0.weight", ...) or
 * diffusers' AutoencoderTiny (decoder.layers.K, the same layers one index
 * lower; its decode returns 2 x this - 1). The stage layout is read from the
 * tensors present. */
#include "rbee/sd_model.h"
#include "sd/sd_arena.h"
#include "sd/sd_blocks.h"
#include "sd/sd_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TAESD_MAX_STAGES 8
#define TAESD_MAX_LAYERS 64

typedef struct taesd_conv {
    rb_tensor w, b;
    bool has_b;
} taesd_conv;

typedef struct taesd_block {
    taesd_conv c[3];
} taesd_block;

struct rb_taesd {
    rb_backend *be;
    sd_weights ws;
    sd_scratch scratch;
    int64_t latent, ch;
    int n_stages, n_blocks[TAESD_MAX_STAGES];
    taesd_conv in, stage_out[TAESD_MAX_STAGES];
    taesd_block *blocks; /* all stages' blocks in order */
    char prefix[32];
    int offset; /* layer index of the first conv */
};

static bool lname(const rb_taesd *t, char *buf, size_t cap, int layer, const char *rest) {
    int n = snprintf(buf, cap, "%s%d.%s", t->prefix, layer + t->offset, rest);
    return n > 0 && (size_t)n < cap;
}

static bool has(const rb_taesd *t, int layer, const char *rest) {
    char n[SD_NAME_MAX];
    return lname(t, n, sizeof n, layer, rest) && sd_weights_find(&t->ws, n) != NULL;
}

static rb_status bind_conv(rb_taesd *t, int layer, const char *sub, int64_t cin, int64_t cout, bool bias,
                           taesd_conv *c, rb_error *err) {
    char n[SD_NAME_MAX], rest[64];
    const int64_t wne[4] = {3, 3, cin, cout}, bne[1] = {cout};
    snprintf(rest, sizeof rest, "%sweight", sub);
    if (!lname(t, n, sizeof n, layer, rest)) return rb_error_set(err, RB_E_INVALID, "taesd: name too long");
    SD_TRY(sd_weights_get(&t->ws, n, SD_W_CONV, 4, wne, true, &c->w, NULL, err));
    c->has_b = bias;
    if (!bias) return RB_OK;
    snprintf(rest, sizeof rest, "%sbias", sub);
    if (!lname(t, n, sizeof n, layer, rest)) return rb_error_set(err, RB_E_INVALID, "taesd: name too long");
    return sd_weights_get(&t->ws, n, SD_W_F32, 1, bne, true, &c->b, NULL, err);
}

/* Walks the layer indices: conv, ReLU, then per stage blocks ("K.conv.0"),
 * an upsample (no tensors) and a conv; the conv with a bias ends it. */
static rb_status bind_all(rb_taesd *t, rb_error *err) {
    char n[SD_NAME_MAX];
    if (!lname(t, n, sizeof n, 0, "weight")) return rb_error_set(err, RB_E_INVALID, "taesd: name too long");
    const rb_st_tensor *w0 = sd_weights_find(&t->ws, n);
    if (!w0 || w0->n_dims != 4)
        return rb_error_set(err, RB_E_FORMAT, "taesd: %s: no 4-D first convolution %s", t->ws.file, n);
    t->ch = w0->ne[3];
    t->latent = w0->ne[2];
    if (t->ch < 1 || t->ch > 4096 || t->latent < 1 || t->latent > 64)
        return rb_error_set(err, RB_E_FORMAT, "taesd: first convolution %s has an unexpected shape", n);
    SD_TRY(bind_conv(t, 0, "", t->latent, t->ch, true, &t->in, err));
    int layer = 2, total = 0;
    t->blocks = calloc(TAESD_MAX_LAYERS, sizeof *t->blocks);
    if (!t->blocks) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (;;) {
        if (t->n_stages == TAESD_MAX_STAGES) return rb_error_set(err, RB_E_FORMAT, "taesd: more than %d stages", TAESD_MAX_STAGES);
        int nb = 0;
        while (has(t, layer, "conv.0.weight")) {
            if (total == TAESD_MAX_LAYERS) return rb_error_set(err, RB_E_FORMAT, "taesd: too many blocks");
            taesd_block *b = &t->blocks[total++];
            SD_TRY(bind_conv(t, layer, "conv.0.", t->ch, t->ch, true, &b->c[0], err));
            SD_TRY(bind_conv(t, layer, "conv.2.", t->ch, t->ch, true, &b->c[1], err));
            SD_TRY(bind_conv(t, layer, "conv.4.", t->ch, t->ch, true, &b->c[2], err));
            if (has(t, layer, "skip.weight"))
                return rb_error_set(err, RB_E_UNSUPPORTED, "taesd: blocks that change the channel count are not supported");
            nb++;
            layer++;
        }
        const int s = t->n_stages;
        t->n_blocks[s] = nb;
        if (has(t, layer, "bias")) { /* the last stage's output convolution */
            SD_TRY(bind_conv(t, layer, "", t->ch, 3, true, &t->stage_out[s], err));
            t->n_stages++;
            return RB_OK;
        }
        if (!has(t, layer + 1, "weight"))
            return rb_error_set(err, RB_E_FORMAT, "taesd: %s: layer %d is neither a block nor an upsample + convolution",
                                t->ws.file, layer + t->offset);
        SD_TRY(bind_conv(t, layer + 1, "", t->ch, t->ch, false, &t->stage_out[s], err));
        t->n_stages++;
        layer += 2;
    }
}

void rb_taesd_free(rb_taesd *t) {
    if (!t) return;
    sd_scratch_free(&t->scratch);
    sd_weights_close(&t->ws);
    free(t->blocks);
    free(t);
}

rb_status rb_taesd_load(const char *path, rb_backend *be, const rb_sd_load_opts *opts, rb_taesd **out,
                        rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "taesd: out is NULL");
    *out = NULL;
    if (!path || !be) return rb_error_set(err, RB_E_INVALID, "taesd: NULL argument");
    char file[1024];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (!sd_name(file, sizeof file, "%s/diffusion_pytorch_model.safetensors", path))
            return rb_error_set(err, RB_E_INVALID, "taesd: path too long");
        if (stat(file, &sb) != 0 && !sd_name(file, sizeof file, "%s/taesd_decoder.safetensors", path))
            return rb_error_set(err, RB_E_INVALID, "taesd: path too long");
    } else if (!sd_name(file, sizeof file, "%s", path)) {
        return rb_error_set(err, RB_E_INVALID, "taesd: path too long");
    }
    rb_st_set *st = NULL;
    SD_TRY(rb_st_open(file, &st, err));
    rb_taesd *t = calloc(1, sizeof *t);
    if (!t) {
        rb_st_close(st);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    t->be = be;
    rb_status s = opts ? sd_act_check(opts->act_dtype, "taesd", err) : RB_OK;
    if (s != RB_OK) {
        rb_st_close(st);
        free(t);
        return s;
    }
    s = sd_weights_init(&t->ws, st, true, NULL, NULL, file, be, opts, err);
    if (s != RB_OK) {
        sd_weights_close(&t->ws);
        free(t);
        return s;
    }
    if (opts) t->scratch.act = opts->act_dtype;
    if (sd_weights_find(&t->ws, "decoder.layers.0.weight")) {
        snprintf(t->prefix, sizeof t->prefix, "decoder.layers.");
        t->offset = 0;
    } else {
        t->prefix[0] = '\0';
        t->offset = 1;
    }
    s = bind_all(t, err);
    if (s != RB_OK) {
        rb_taesd_free(t);
        return s;
    }
    sd_weights_release_files(&t->ws);
    *out = t;
    return RB_OK;
}

int rb_taesd_latent_channels(const rb_taesd *t) { return t ? (int)t->latent : 0; }
int rb_taesd_scale(const rb_taesd *t) { return t ? 1 << (t->n_stages - 1) : 0; }

static rb_status conv_fwd(sd_run *r, const taesd_conv *c, rb_tensor *dst, const rb_tensor *x) {
    const int st[2] = {1, 1}, pd[2] = {1, 1}, dl[2] = {1, 1};
    SD_OP(r, rb_conv2d(r->be, dst, x, &c->w, c->has_b ? &c->b : NULL, st, pd, dl, 1));
    return RB_OK;
}

typedef struct taesd_ctx {
    const rb_taesd *t;
    const rb_tensor *in;
    rb_tensor *out;
} taesd_ctx;

static rb_status decode_pass(sd_run *r, void *arg) {
    taesd_ctx *e = arg;
    const rb_taesd *t = e->t;
    int64_t W = e->in->ne[0], H = e->in->ne[1];
    const int64_t B = e->in->ne[3], C = t->ch;
    rb_tensor z = sd_stack(r, W, H, t->latent, B);
    SD_OP(r, rb_affine(r->be, &z, e->in, 1.0f / 3.0f, 0.0f));
    SD_OP(r, rb_unary(r->be, RB_UNARY_TANH, &z, &z));
    SD_OP(r, rb_affine(r->be, &z, &z, 3.0f, 0.0f));
    int slot = 0;
    rb_tensor h = sd_slot(r, slot, W, H, C, B);
    SD_TRY(conv_fwd(r, &t->in, &h, &z));
    SD_OP(r, rb_unary(r->be, RB_UNARY_RELU, &h, &h));
    const taesd_block *b = t->blocks;
    for (int s = 0; s < t->n_stages; s++) {
        for (int k = 0; k < t->n_blocks[s]; k++, b++) {
            rb_tensor a = sd_slot(r, slot ^ 1, W, H, C, B), c = sd_slot(r, 2, W, H, C, B);
            SD_TRY(conv_fwd(r, &b->c[0], &a, &h));
            SD_OP(r, rb_unary(r->be, RB_UNARY_RELU, &a, &a));
            SD_TRY(conv_fwd(r, &b->c[1], &c, &a));
            SD_OP(r, rb_unary(r->be, RB_UNARY_RELU, &c, &c));
            SD_TRY(conv_fwd(r, &b->c[2], &a, &c));
            SD_OP(r, rb_binary(r->be, RB_BINARY_ADD, &a, &a, &h));
            SD_OP(r, rb_unary(r->be, RB_UNARY_RELU, &a, &a));
            h = a;
            slot ^= 1;
        }
        if (s == t->n_stages - 1) return conv_fwd(r, &t->stage_out[s], e->out, &h);
        W *= 2;
        H *= 2;
        rb_tensor u = sd_slot(r, 2, W, H, C, B), y = sd_slot(r, slot ^ 1, W, H, C, B);
        SD_OP(r, rb_upsample(r->be, &u, &h, RB_UPSAMPLE_NEAREST));
        SD_TRY(conv_fwd(r, &t->stage_out[s], &y, &u));
        h = y;
        slot ^= 1;
    }
    return RB_OK;
}

rb_status rb_taesd_decode(rb_taesd *t, const rb_tensor *latents, rb_tensor *image, rb_error *err) {
    if (!t || !latents || !image) return rb_error_set(err, RB_E_INVALID, "taesd: NULL argument");
    const int64_t w = latents->ne[0], h = latents->ne[1], B = latents->ne[3], s = rb_taesd_scale(t);
    char d[96], d2[96];
    if (latents->dtype != RB_F32 || latents->ne[2] != t->latent || w < 1 || h < 1 || B < 1 || w > 65536 / s ||
        h > 65536 / s)
        return rb_error_set(err, RB_E_INVALID, "taesd: latents are %s, expected f32[w, h, %lld, B]",
                            rb_tensor_describe(latents, d, sizeof d), (long long)t->latent);
    if (image->dtype != RB_F32 || image->ne[0] != w * s || image->ne[1] != h * s || image->ne[2] != 3 ||
        image->ne[3] != B)
        return rb_error_set(err, RB_E_INVALID, "taesd: image is %s for latents %s, expected f32[%lld, %lld, 3, %lld]",
                            rb_tensor_describe(image, d, sizeof d), rb_tensor_describe(latents, d2, sizeof d2),
                            (long long)(w * s), (long long)(h * s), (long long)B);
    taesd_ctx e = {.t = t, .in = latents, .out = image};
    return sd_run_passes(t->be, &t->scratch, decode_pass, &e, err);
}

rb_status rb_taesd_decode_host(rb_taesd *t, const float *latents, int batch, int h, int w, float *image,
                               rb_error *err) {
    if (!t || !latents || !image || batch < 1 || h < 1 || w < 1)
        return rb_error_set(err, RB_E_INVALID, "taesd: bad arguments");
    const int64_t s = rb_taesd_scale(t);
    const int64_t zne[4] = {w, h, t->latent, batch}, ine[4] = {w * s, h * s, 3, batch};
    rb_tensor z, img;
    rb_status st = rb_tensor_alloc(t->be, RB_F32, 4, zne, &z);
    if (st != RB_OK) return rb_error_set(err, st, "taesd: no memory for the latents");
    if ((st = rb_tensor_alloc(t->be, RB_F32, 4, ine, &img)) != RB_OK) {
        rb_tensor_free(&z);
        return rb_error_set(err, st, "taesd: no memory for the image");
    }
    const size_t zn = (size_t)(w * h) * (size_t)t->latent * (size_t)batch, in = (size_t)(w * s * h * s) * 3 * (size_t)batch;
    if ((st = rb_tensor_set(&z, latents, zn * sizeof(float))) != RB_OK) rb_error_set(err, st, "taesd: upload failed");
    else if ((st = rb_taesd_decode(t, &z, &img, err)) == RB_OK && (st = rb_tensor_get(&img, image, in * sizeof(float))) != RB_OK)
        rb_error_set(err, st, "taesd: download failed");
    rb_tensor_free(&z);
    rb_tensor_free(&img);
    return st;
}

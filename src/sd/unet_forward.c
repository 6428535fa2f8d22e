/* The UNet2DConditionModel forward pass on rbee's ops: the sinusoidal
 * timestep embedding (computed on the host in float32 exactly as diffusers
 * does: frequencies exp(-ln(10000) i / (half - shift)), then sin and cos of
 * t * freq), the time MLP, SDXL's text_time embedding, conv_in, the down
 * blocks (each output pushed as a skip connection), the mid block, the up
 * blocks (each resnet fed [hidden | popped skip] along channels, nearest
 * resize to the next skip's size + conv), GroupNorm + SiLU + conv_out.
 *
 * Memory: the skips stay on the arena's stack; the up path's hidden state
 * ping-pongs between slots 0 and 1; every block releases its temporaries. */
#include "sd/unet_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SKIPS (1 + RB_SD_MAX_LEVELS * 9)

/* diffusers' get_timestep_embedding in float32: out [n][dim]. */
static void timestep_embedding(const float *t, int64_t n, int64_t dim, bool flip, float shift, float *out) {
    const int64_t half = dim / 2;
    const float k = (float)-9.210340371976184; /* -ln(10000), rounded as torch rounds the scalar */
    const float den = (float)((double)half - (double)shift);
    for (int64_t b = 0; b < n; b++) {
        float *o = out + b * dim;
        for (int64_t i = 0; i < half; i++) {
            const float e = expf(k * (float)i / den);
            const float arg = t[b] * e;
            const float s = (float)sin((double)arg), c = (float)cos((double)arg);
            o[flip ? half + i : i] = s;
            o[flip ? i : half + i] = c;
        }
        if (dim % 2) o[dim - 1] = 0.0f;
    }
}

typedef struct fwd_ctx {
    rb_unet *u;
    const rb_unet_inputs *in;
    rb_tensor *out;
    float *t_host;   /* [B][block_out_channels[0]] */
    float *add_host; /* [B][n_time_ids * addition_time_embed_dim] */
} fwd_ctx;

/* silu(emb) [time_embed_dim, B]: emb = time MLP (+ text_time MLP), then the
 * optional time_embedding_act; every resnet projects silu(emb). */
static rb_status time_embed(sd_run *r, const fwd_ctx *f, rb_tensor *temb) {
    const rb_unet *u = f->u;
    const rb_unet_config *c = &u->cfg;
    const int64_t B = f->in->sample->ne[3], T = c->time_embed_dim, C0 = c->block_out_channels[0];
    const size_t m = sd_mark(r);
    rb_tensor ts = sd_stack_f32(r, C0, B, 1, 1), h = sd_stack(r, T, B, 1, 1);
    SD_TRY(sd_upload(r, &ts, f->t_host, sizeof(float) * (size_t)(C0 * B)));
    const rb_linear_epilogue silu = sd_ep_act(RB_UNARY_SILU), add = sd_ep_res(temb);
    SD_TRY(sd_linear_fwd_ep(r, &u->time_1, &h, &ts, &silu));
    SD_TRY(sd_linear_fwd(r, &u->time_2, temb, &h));
    if (c->timestep_post_act) SD_OP(r, rb_unary(r->be, RB_UNARY_SILU, temb, temb));
    if (c->add_text_time) { /* add_embedding([text_embeds | embedded time_ids]) */
        const rb_tensor *te = f->in->text_embeds;
        const int64_t Dt = te->ne[0], P = c->projection_class_embeddings_input_dim;
        rb_tensor a = sd_stack(r, P, B, 1, 1), tt = sd_stack_f32(r, P - Dt, B, 1, 1);
        rb_tensor a_text = sd_slice(&a, 0, 0, Dt), a_time = sd_slice(&a, 0, Dt, P - Dt);
        SD_TRY(sd_upload(r, &tt, f->add_host, sizeof(float) * (size_t)((P - Dt) * B)));
        SD_OP(r, rb_cast(r->be, &a_text, te));
        SD_OP(r, rb_cast(r->be, &a_time, &tt));
        SD_TRY(sd_linear_fwd_ep(r, &u->add_1, &h, &a, &silu));
        SD_TRY(sd_linear_fwd_ep(r, &u->add_2, temb, &h, &add));
    }
    if (c->time_embedding_act) SD_OP(r, rb_unary(r->be, RB_UNARY_SILU, temb, temb));
    SD_OP(r, rb_unary(r->be, RB_UNARY_SILU, temb, temb));
    sd_release(r, m);
    return RB_OK;
}

static rb_status unet_pass(sd_run *r, void *arg) {
    fwd_ctx *f = arg;
    const rb_unet *u = f->u;
    const rb_unet_config *c = &u->cfg;
    const rb_unet_inputs *in = f->in;
    const rb_tensor *ctx = in->context;
    const int n = c->n_levels;
    const int64_t B = in->sample->ne[3];

    rb_tensor temb = sd_stack(r, c->time_embed_dim, B, 1, 1);
    SD_TRY(time_embed(r, f, &temb));

    /* conv_in */
    const rb_tensor *x = in->sample;
    int64_t W = x->ne[0], H = x->ne[1];
    rb_tensor skips[MAX_SKIPS];
    int ns = 0;
    rb_tensor h = sd_stack(r, W, H, c->block_out_channels[0], B);
    if (c->center_input_sample) {
        const size_t m = sd_mark(r);
        rb_tensor cx = sd_stack(r, W, H, c->in_channels, B);
        SD_OP(r, rb_affine(r->be, &cx, x, 2.0f, -1.0f));
        SD_TRY(sd_conv_fwd(r, &u->conv_in, &h, &cx, 1, u->conv_in.k / 2));
        sd_release(r, m); /* cx lies above h: releasing keeps h */
    } else {
        SD_TRY(sd_conv_fwd(r, &u->conv_in, &h, x, 1, u->conv_in.k / 2));
    }
    skips[ns++] = h;

    /* down blocks: every output is a skip and stays on the stack */
    for (int l = 0; l < n; l++) {
        const unet_level *L = &u->lv[l];
        for (int j = 0; j < c->layers_per_block[l]; j++) {
            rb_tensor y = sd_stack(r, W, H, c->block_out_channels[l], B);
            SD_TRY(sd_resnet_fwd(r, &L->down_res[j], &y, &h, &temb));
            if (c->down_cross_attn[l]) SD_TRY(sd_t2d_fwd(r, &L->down_attn[j], &y, ctx));
            skips[ns++] = h = y;
        }
        if (l < n - 1) {
            W = sd_down_size(W, c->downsample_padding);
            H = sd_down_size(H, c->downsample_padding);
            rb_tensor y = sd_stack(r, W, H, h.ne[2], B);
            SD_TRY(sd_downsample_fwd(r, &L->down, c->downsample_padding, &y, &h));
            skips[ns++] = h = y;
        }
    }

    /* mid block */
    int slot = 0;
    if (c->mid_block) {
        rb_tensor a = sd_slot(r, 0, W, H, h.ne[2], B), b = sd_slot(r, 1, W, H, h.ne[2], B);
        SD_TRY(sd_resnet_fwd(r, &u->mid_res[0], &a, &h, &temb));
        SD_TRY(sd_t2d_fwd(r, &u->mid_attn, &a, ctx));
        SD_TRY(sd_resnet_fwd(r, &u->mid_res[1], &b, &a, &temb));
        h = b;
        slot = 0; /* next output */
    }

    /* up blocks */
    for (int l = n - 1; l >= 0; l--) {
        const unet_level *L = &u->lv[l];
        const int64_t out = c->block_out_channels[l];
        for (int j = 0; j <= c->layers_per_block[l]; j++) {
            const rb_tensor *s = &skips[--ns];
            const size_t m = sd_mark(r);
            rb_tensor cat = sd_stack(r, W, H, h.ne[2] + s->ne[2], B);
            rb_tensor c0 = sd_slice(&cat, 2, 0, h.ne[2]), c1 = sd_slice(&cat, 2, h.ne[2], s->ne[2]);
            SD_OP(r, rb_cast(r->be, &c0, &h));
            SD_OP(r, rb_cast(r->be, &c1, s));
            rb_tensor y = sd_slot(r, slot, W, H, out, B);
            SD_TRY(sd_resnet_fwd(r, &L->up_res[j], &y, &cat, &temb));
            sd_release(r, m);
            if (c->up_cross_attn[l]) SD_TRY(sd_t2d_fwd(r, &L->up_attn[j], &y, ctx));
            h = y;
            slot ^= 1;
        }
        if (l > 0) { /* to the size of the next skip */
            W = skips[ns - 1].ne[0];
            H = skips[ns - 1].ne[1];
            rb_tensor y = sd_slot(r, slot, W, H, out, B);
            SD_TRY(sd_upsample_fwd(r, &L->up, &y, &h));
            h = y;
            slot ^= 1;
        }
    }

    /* out */
    rb_tensor t = sd_stack(r, W, H, h.ne[2], B);
    SD_TRY(sd_group_norm(r, &t, &h, &u->norm_out, c->norm_num_groups, c->norm_eps, true));
    return sd_conv_fwd(r, &u->conv_out, f->out, &t, 1, u->conv_out.k / 2);
}

static bool is_f32(const rb_tensor *t) { return t && t->dtype == RB_F32; }

static rb_status check_inputs(const rb_unet *u, const rb_unet_inputs *in, const rb_tensor *out, rb_error *err) {
    const rb_unet_config *c = &u->cfg;
    char d1[96], d2[96];
    if (!in || !in->sample || !in->timesteps) return rb_error_set(err, RB_E_INVALID, "unet: sample or timesteps is NULL");
    const rb_tensor *x = in->sample;
    const int64_t W = x->ne[0], H = x->ne[1], B = x->ne[3];
    if (!is_f32(x) || x->ne[2] != c->in_channels || W < 1 || H < 1 || B < 1 || W > 65536 || H > 65536)
        return rb_error_set(err, RB_E_INVALID, "unet: sample is %s, expected f32[W, H, %lld, B]",
                            rb_tensor_describe(x, d1, sizeof d1), (long long)c->in_channels);
    if (!is_f32(out) || out->ne[0] != W || out->ne[1] != H || out->ne[2] != c->out_channels || out->ne[3] != B)
        return rb_error_set(err, RB_E_INVALID, "unet: out is %s, expected f32[%lld, %lld, %lld, %lld]",
                            out ? rb_tensor_describe(out, d1, sizeof d1) : "NULL", (long long)W, (long long)H,
                            (long long)c->out_channels, (long long)B);
    const rb_tensor *k = in->context;
    if (!is_f32(k) || k->ne[0] != c->cross_attention_dim || k->ne[1] < 1 || k->ne[2] != B || k->ne[3] != 1)
        return rb_error_set(err, RB_E_INVALID, "unet: context is %s, expected f32[%lld, T, %lld]",
                            k ? rb_tensor_describe(k, d1, sizeof d1) : "NULL", (long long)c->cross_attention_dim,
                            (long long)B);
    for (int64_t b = 0; b < B; b++)
        if (!isfinite(in->timesteps[b])) return rb_error_set(err, RB_E_INVALID, "unet: timestep %lld is not finite",
                                                             (long long)b);
    if (!c->add_text_time) return RB_OK;
    const rb_tensor *te = in->text_embeds;
    const int64_t P = c->projection_class_embeddings_input_dim;
    if (!is_f32(te) || te->ne[1] != B || te->ne[2] != 1 || te->ne[3] != 1 || !in->time_ids || in->n_time_ids < 1 ||
        te->ne[0] + (int64_t)in->n_time_ids * c->addition_time_embed_dim != P)
        return rb_error_set(err, RB_E_INVALID, "unet: text_time conditioning needs text_embeds f32[D, %lld] and "
                            "n_time_ids time ids with D + n_time_ids x %lld = %lld (got text_embeds %s, %d time ids)",
                            (long long)B, (long long)c->addition_time_embed_dim, (long long)P,
                            te ? rb_tensor_describe(te, d2, sizeof d2) : "NULL", in->time_ids ? in->n_time_ids : 0);
    return RB_OK;
}

/* Host inputs of the pass (the sinusoidal embeddings). */
static rb_status prepare(fwd_ctx *f, rb_error *err) {
    const rb_unet_config *c = &f->u->cfg;
    const rb_unet_inputs *in = f->in;
    const int64_t B = in->sample->ne[3], C0 = c->block_out_channels[0];
    f->t_host = malloc(sizeof(float) * (size_t)(C0 * B));
    if (!f->t_host) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    timestep_embedding(in->timesteps, B, C0, c->flip_sin_to_cos, c->freq_shift, f->t_host);
    if (!c->add_text_time) return RB_OK;
    const int64_t A = c->addition_time_embed_dim, nt = in->n_time_ids;
    f->add_host = malloc(sizeof(float) * (size_t)(A * nt * B));
    if (!f->add_host) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    /* time_ids.flatten() through the embedding, then [B, n_time_ids * A] */
    timestep_embedding(in->time_ids, nt * B, A, c->flip_sin_to_cos, c->freq_shift, f->add_host);
    return RB_OK;
}

static rb_status run(rb_unet *u, const rb_unet_inputs *in, rb_tensor *out, size_t *measure_only, rb_error *err) {
    if (!u) return rb_error_set(err, RB_E_INVALID, "unet: NULL model");
    SD_TRY(check_inputs(u, in, out, err));
    fwd_ctx f = {.u = u, .in = in, .out = out};
    rb_status s = prepare(&f, err);
    if (s == RB_OK)
        s = measure_only ? sd_run_measure(u->be, &u->scratch, unet_pass, &f, measure_only, err)
                         : sd_run_passes(u->be, &u->scratch, unet_pass, &f, err);
    free(f.t_host);
    free(f.add_host);
    return s;
}

rb_status rb_unet_forward(rb_unet *u, const rb_unet_inputs *in, rb_tensor *out, rb_error *err) {
    return run(u, in, out, NULL, err);
}

rb_status rb_unet_scratch_bytes(rb_unet *u, const rb_unet_inputs *in, size_t *bytes, rb_error *err) {
    if (!bytes || !in || !in->sample) return rb_error_set(err, RB_E_INVALID, "unet: NULL argument");
    rb_tensor shape = *in->sample; /* out is only checked for its shape */
    shape.ne[2] = u ? u->cfg.out_channels : 0;
    return run(u, in, &shape, bytes, err);
}

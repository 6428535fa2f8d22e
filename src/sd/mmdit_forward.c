/* The MMDiT forward pass (diffusers' SD3Transformer2DModel.forward) on
 * rbee's ops:
 *   x = patch conv(latents) as tokens + the position table cropped at its
 *       centre to the patch grid (rows top.., columns left.., with
 *       top = (M - H/P) / 2, left = (M - W/P) / 2);
 *   e = SiLU(MLP(sinusoidal(t), 256 wide, cos first) + MLP(pooled)): the
 *       conditioning of every adaptive norm;
 *   c = context_embedder(text tokens);
 *   per block (adaLN-Zero, LayerNorm without affine, eps 1e-6):
 *       attention over [image tokens, text tokens] from both streams'
 *       modulated norms (per-head RMS norm of q and k with qk_norm), each
 *       stream's output projected and added through its gate; dual blocks
 *       add a second, image-only attention of the same norm with its own
 *       shift/scale/gate; then each stream's tanh-GELU feed-forward, gated.
 *       The last block's text stream stops after giving keys and values.
 *   out = unpatchify(proj_out(LN(x) * (1 + scale) + shift)).
 * Modulation chunks of norm1: shift, scale, gate (attention), shift, scale,
 * gate (feed-forward), then shift, scale, gate of attn2; the final norm and
 * the last block's context norm give scale, then shift. */
#include "sd/mmdit_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LN_EPS 1e-6f
#define QK_EPS 1e-6f
#define T_DIM 256

/* diffusers' Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)
 * in float32 as torch computes it: out [n][256] = cos(t f_i) | sin(t f_i). */
static void timestep_embedding(const float *t, int64_t n, float *out) {
    const int64_t half = T_DIM / 2;
    const float k = (float)-9.210340371976184; /* -ln(10000) rounded to float as torch does */
    for (int64_t b = 0; b < n; b++) {
        float *o = out + b * T_DIM;
        for (int64_t i = 0; i < half; i++) {
            const float arg = t[b] * expf(k * (float)i / (float)half);
            o[i] = (float)cos((double)arg);
            o[half + i] = (float)sin((double)arg);
        }
    }
}

typedef struct fwd_ctx {
    rb_mmdit *m;
    const rb_mmdit_inputs *in;
    rb_tensor *out;
    float *t_host; /* [B][256] */
} fwd_ctx;

/* Chunk i of a modulation [k*D, B] as a [D, 1, B] view broadcast over tokens. */
static rb_tensor chunk(const rb_tensor *mod, int i, int64_t D) {
    rb_tensor v = *mod;
    v.offs += (size_t)((int64_t)i * D) * mod->nb[0];
    v.ne[0] = D;
    v.ne[1] = 1;
    v.ne[2] = mod->ne[1];
    v.ne[3] = 1;
    v.nb[2] = mod->nb[1];
    v.nb[3] = mod->nb[1] * (size_t)mod->ne[1];
    return v;
}

/* dst = LN(x) * (1 + scale) + shift in one op (the adaLN modulation). */
static rb_status norm_mod(sd_run *r, rb_tensor *dst, const rb_tensor *x, const rb_tensor *mod, int ishift, int iscale,
                          int64_t D) {
    rb_tensor sc = chunk(mod, iscale, D), sh = chunk(mod, ishift, D);
    SD_OP(r, rb_layer_norm_mod(r->be, dst, x, &sh, &sc, LN_EPS));
    return RB_OK;
}

/* x += gate * (a W^T + b): the output projection with its gated residual. */
static rb_status gated_linear(sd_run *r, const sd_linear *l, rb_tensor *x, const rb_tensor *a, const rb_tensor *mod,
                              int igate, int64_t D) {
    rb_tensor g = chunk(mod, igate, D);
    const rb_linear_epilogue ep = {.gate = &g, .res = x};
    return sd_linear_fwd_ep(r, l, x, a, &ep);
}

/* q, k, v of one stream (n [D, T, B]) straight into the views q, k, v
 * [D, T, B] (parts of the joint sequence), RMS-normed per head there with
 * qk_norm. */
static rb_status project(sd_run *r, const rb_mmdit *m, const mmdit_attn *a, const rb_tensor *n, rb_tensor *q,
                         rb_tensor *k, rb_tensor *v) {
    const int64_t T = n->ne[1], B = n->ne[2], hd = m->cfg.head_dim;
    SD_TRY(sd_linear_fwd(r, &a->q, q, n));
    SD_TRY(sd_linear_fwd(r, &a->k, k, n));
    SD_TRY(sd_linear_fwd(r, &a->v, v, n));
    if (m->cfg.qk_norm) { /* [D, T, B] rows as [hd, heads, T, B] */
        rb_tensor qh = *q, kh = *k;
        for (int i = 0; i < 2; i++) {
            rb_tensor *t = i ? &kh : &qh;
            const rb_tensor *src = i ? k : q;
            t->ne[0] = hd;
            t->ne[1] = m->cfg.heads;
            t->ne[2] = T;
            t->ne[3] = B;
            t->nb[1] = src->nb[0] * (size_t)hd;
            t->nb[2] = src->nb[1];
            t->nb[3] = src->nb[2];
        }
        SD_OP(r, rb_rms_norm(r->be, &qh, &qh, &a->nq, QK_EPS));
        SD_OP(r, rb_rms_norm(r->be, &kh, &kh, &a->nk, QK_EPS));
    }
    return RB_OK;
}

/* h += gate * ff2(gelu_tanh(ff1(modulated LN(h)))). */
static rb_status ff_fwd(sd_run *r, const sd_linear *f1, const sd_linear *f2, rb_tensor *h, const rb_tensor *mod,
                        int64_t D) {
    const int64_t T = h->ne[1], B = h->ne[2];
    const size_t mk = sd_mark(r);
    rb_tensor n = sd_stack(r, D, T, B, 1), f = sd_stack(r, 4 * D, T, B, 1);
    SD_TRY(norm_mod(r, &n, h, mod, 3, 4, D));
    const rb_linear_epilogue gelu = sd_ep_act(RB_UNARY_GELU_TANH);
    SD_TRY(sd_linear_fwd_ep(r, f1, &f, &n, &gelu));
    SD_TRY(gated_linear(r, f2, h, &f, mod, 5, D));
    sd_release(r, mk);
    return RB_OK;
}

static rb_status block_fwd(sd_run *r, const rb_mmdit *m, const mmdit_block *b, rb_tensor *x, rb_tensor *c,
                           const rb_tensor *semb) {
    const int64_t D = m->dim, N = x->ne[1], Tc = c->ne[1], B = x->ne[2], Tt = N + Tc;
    const int H = m->cfg.heads;
    const size_t mk = sd_mark(r);
    rb_tensor mx = sd_stack(r, (b->dual ? 9 : 6) * D, B, 1, 1), mc = sd_stack(r, (b->pre_only ? 2 : 6) * D, B, 1, 1);
    SD_TRY(sd_linear_fwd(r, &b->mod_x, &mx, semb));
    SD_TRY(sd_linear_fwd(r, &b->mod_c, &mc, semb));
    rb_tensor nx = sd_stack(r, D, N, B, 1), nc = sd_stack(r, D, Tc, B, 1);
    SD_TRY(norm_mod(r, &nx, x, &mx, 0, 1, D));
    rb_tensor n2 = {0}; /* attn2's input: the same norm of x (before attn1's residual), its own shift and scale */
    if (b->dual) {
        n2 = sd_stack(r, D, N, B, 1);
        SD_TRY(norm_mod(r, &n2, x, &mx, 6, 7, D));
    }
    if (b->pre_only) SD_TRY(norm_mod(r, &nc, c, &mc, 1, 0, D));
    else SD_TRY(norm_mod(r, &nc, c, &mc, 0, 1, D));

    /* joint attention over [image tokens, text tokens] */
    rb_tensor q = sd_stack(r, D, Tt, B, 1), k = sd_stack(r, D, Tt, B, 1), v = sd_stack(r, D, Tt, B, 1);
    rb_tensor o = sd_stack(r, D, Tt, B, 1);
    rb_tensor qi = sd_slice(&q, 1, 0, N), ki = sd_slice(&k, 1, 0, N), vi = sd_slice(&v, 1, 0, N);
    rb_tensor qc = sd_slice(&q, 1, N, Tc), kc = sd_slice(&k, 1, N, Tc), vc = sd_slice(&v, 1, N, Tc);
    SD_TRY(project(r, m, &b->x, &nx, &qi, &ki, &vi));
    SD_TRY(project(r, m, &b->c, &nc, &qc, &kc, &vc));
    SD_TRY(sd_mha(r, &o, &q, &k, &v, H, false));
    rb_tensor oi = sd_slice(&o, 1, 0, N);
    SD_TRY(gated_linear(r, &b->x.o, x, &oi, &mx, 2, D));
    if (!b->pre_only) {
        rb_tensor oc = sd_slice(&o, 1, N, Tc);
        SD_TRY(gated_linear(r, &b->c.o, c, &oc, &mc, 2, D));
    }
    if (b->dual) { /* attn2: the image tokens alone */
        /* contiguous [D, N, B] tensors in the joint buffers' memory, free by now */
        rb_tensor q2 = sd_reshape(&q, D, N, B, 1), k2 = sd_reshape(&k, D, N, B, 1), v2 = sd_reshape(&v, D, N, B, 1);
        rb_tensor o2 = sd_reshape(&o, D, N, B, 1);
        SD_TRY(project(r, m, &b->x2, &n2, &q2, &k2, &v2));
        SD_TRY(sd_mha(r, &o2, &q2, &k2, &v2, H, false));
        SD_TRY(gated_linear(r, &b->x2.o, x, &o2, &mx, 8, D));
    }
    SD_TRY(ff_fwd(r, &b->ff1, &b->ff2, x, &mx, D));
    if (!b->pre_only) SD_TRY(ff_fwd(r, &b->cff1, &b->cff2, c, &mc, D));
    sd_release(r, mk);
    return RB_OK;
}

/* y [P*P*C, N, B] (features p, q, c with c innermost; tokens row-major over
 * the patch grid) -> out [W, H, C, B]: out[w*P + q, h*P + p, c, b]. */
static rb_status unpatchify(sd_run *r, const rb_mmdit *m, const rb_tensor *y, rb_tensor *out) {
    const int64_t P = m->cfg.patch_size, C = m->cfg.out_channels, Wp = out->ne[0] / P, Hp = out->ne[1] / P;
    const int64_t F = P * P * C, N = Wp * Hp;
    const size_t es = y->nb[0];
    for (int64_t b = 0; b < out->ne[3]; b++)
        for (int64_t p = 0; p < P; p++) {
            rb_tensor s = *y, d = *out;
            s.ne[0] = P, s.ne[1] = Wp, s.ne[2] = Hp, s.ne[3] = C;
            s.nb[0] = (size_t)C * es, s.nb[1] = (size_t)F * es, s.nb[2] = (size_t)(Wp * F) * es, s.nb[3] = es;
            s.offs = y->offs + (size_t)(b * N * F + p * P * C) * es;
            d.ne[0] = P, d.ne[1] = Wp, d.ne[2] = Hp, d.ne[3] = C;
            d.nb[0] = out->nb[0], d.nb[1] = out->nb[0] * (size_t)P, d.nb[2] = out->nb[1] * (size_t)P;
            d.nb[3] = out->nb[2];
            d.offs = out->offs + (size_t)p * out->nb[1] + (size_t)b * out->nb[3];
            SD_OP(r, rb_cast(r->be, &d, &s));
        }
    return RB_OK;
}

static rb_status pass(sd_run *r, void *arg) {
    fwd_ctx *f = arg;
    const rb_mmdit *m = f->m;
    const rb_mmdit_config *c = &m->cfg;
    const rb_mmdit_inputs *in = f->in;
    const int64_t W = in->sample->ne[0], H = in->sample->ne[1], B = in->sample->ne[3], P = c->patch_size;
    const int64_t Wp = W / P, Hp = H / P, N = Wp * Hp, Tc = in->context->ne[1], D = m->dim, M = c->pos_embed_max_size;

    /* conditioning: SiLU(time MLP + pooled-text MLP) */
    rb_tensor th = sd_stack_f32(r, T_DIM, B, 1, 1), semb = sd_stack(r, D, B, 1, 1);
    SD_TRY(sd_upload(r, &th, f->t_host, sizeof(float) * (size_t)(T_DIM * B)));
    const size_t mk = sd_mark(r);
    rb_tensor t = sd_stack(r, D, B, 1, 1);
    const rb_linear_epilogue silu = sd_ep_act(RB_UNARY_SILU), add = sd_ep_res(&semb);
    SD_TRY(sd_linear_fwd_ep(r, &m->t1, &t, &th, &silu));
    SD_TRY(sd_linear_fwd(r, &m->t2, &semb, &t));
    SD_TRY(sd_linear_fwd_ep(r, &m->p1, &t, in->pooled, &silu));
    SD_TRY(sd_linear_fwd_ep(r, &m->p2, &semb, &t, &add));
    SD_OP(r, rb_unary(r->be, RB_UNARY_SILU, &semb, &semb));
    sd_release(r, mk);

    /* image tokens: patch embedding + the centre crop of the position table */
    rb_tensor x = sd_stack(r, D, N, B, 1), ctx = sd_stack(r, D, Tc, B, 1);
    const size_t mk2 = sd_mark(r);
    rb_tensor pimg = sd_stack(r, Wp, Hp, D, B), tv = sd_img_as_tokens(&pimg);
    SD_TRY(sd_conv_fwd(r, &m->patch, &pimg, in->sample, (int)P, 0));
    SD_OP(r, rb_cast(r->be, &x, &tv));
    rb_tensor pos = m->pos;
    const int64_t top = (M - Hp) / 2, left = (M - Wp) / 2;
    pos.offs += (size_t)(top * M + left) * m->pos.nb[1];
    pos.ne[1] = Wp, pos.ne[2] = Hp, pos.ne[3] = 1;
    pos.nb[2] = m->pos.nb[1] * (size_t)M, pos.nb[3] = pos.nb[2] * (size_t)Hp;
    rb_tensor x4 = sd_reshape(&x, D, Wp, Hp, B);
    SD_OP(r, rb_binary(r->be, RB_BINARY_ADD, &x4, &x4, &pos));
    sd_release(r, mk2);
    SD_TRY(sd_linear_fwd(r, &m->ctx_emb, &ctx, in->context));

    for (int i = 0; i < c->num_layers; i++) SD_TRY(block_fwd(r, m, &m->blocks[i], &x, &ctx, &semb));

    rb_tensor mod = sd_stack(r, 2 * D, B, 1, 1), n = sd_stack(r, D, N, B, 1);
    rb_tensor y = sd_stack(r, P * P * c->out_channels, N, B, 1);
    SD_TRY(sd_linear_fwd(r, &m->norm_out, &mod, &semb));
    SD_TRY(norm_mod(r, &n, &x, &mod, 1, 0, D));
    SD_TRY(sd_linear_fwd(r, &m->proj_out, &y, &n));
    return unpatchify(r, m, &y, f->out);
}

static bool is_f32(const rb_tensor *t) { return t && t->dtype == RB_F32; }

static rb_status check_inputs(const rb_mmdit *m, const rb_mmdit_inputs *in, const rb_tensor *out, rb_error *err) {
    if (!in || !out || !in->sample || !in->context || !in->pooled || !in->timesteps)
        return rb_error_set(err, RB_E_INVALID, "mmdit: NULL input");
    const rb_mmdit_config *c = &m->cfg;
    const rb_tensor *s = in->sample;
    const int64_t P = c->patch_size, M = c->pos_embed_max_size, B = s->ne[3];
    char d[96], d2[96];
    if (!is_f32(s) || s->ne[2] != c->in_channels || B < 1 || s->ne[0] < P || s->ne[1] < P || s->ne[0] % P ||
        s->ne[1] % P)
        return rb_error_set(err, RB_E_INVALID, "mmdit: sample is %s, expected f32[W, H, %lld, B] with W and H "
                            "multiples of the patch size %lld", rb_tensor_describe(s, d, sizeof d),
                            (long long)c->in_channels, (long long)P);
    if (s->ne[0] / P > M || s->ne[1] / P > M)
        return rb_error_set(err, RB_E_INVALID, "mmdit: a %lldx%lld latent is %lldx%lld patches, more than the "
                            "position table's %lldx%lld", (long long)s->ne[0], (long long)s->ne[1],
                            (long long)(s->ne[0] / P), (long long)(s->ne[1] / P), (long long)M, (long long)M);
    const rb_tensor *t = in->context, *p = in->pooled;
    if (!is_f32(t) || t->ne[0] != c->joint_attention_dim || t->ne[1] < 1 || t->ne[2] != B || t->ne[3] != 1)
        return rb_error_set(err, RB_E_INVALID, "mmdit: context is %s, expected f32[%lld, T, %lld]",
                            rb_tensor_describe(t, d, sizeof d), (long long)c->joint_attention_dim, (long long)B);
    if (!is_f32(p) || p->ne[0] != c->pooled_projection_dim || p->ne[1] != B || p->ne[2] != 1 || p->ne[3] != 1)
        return rb_error_set(err, RB_E_INVALID, "mmdit: pooled is %s, expected f32[%lld, %lld]",
                            rb_tensor_describe(p, d, sizeof d), (long long)c->pooled_projection_dim, (long long)B);
    if (!is_f32(out) || out->ne[0] != s->ne[0] || out->ne[1] != s->ne[1] || out->ne[2] != c->out_channels ||
        out->ne[3] != B)
        return rb_error_set(err, RB_E_INVALID, "mmdit: out is %s for sample %s, expected f32[%lld, %lld, %lld, %lld]",
                            rb_tensor_describe(out, d, sizeof d), rb_tensor_describe(s, d2, sizeof d2),
                            (long long)s->ne[0], (long long)s->ne[1], (long long)c->out_channels, (long long)B);
    for (int64_t b = 0; b < B; b++)
        if (!isfinite(in->timesteps[b]))
            return rb_error_set(err, RB_E_INVALID, "mmdit: timestep %lld is not finite", (long long)b);
    return RB_OK;
}

rb_status rb_mmdit_forward(rb_mmdit *m, const rb_mmdit_inputs *in, rb_tensor *out, rb_error *err) {
    if (!m) return rb_error_set(err, RB_E_INVALID, "mmdit: NULL model");
    SD_TRY(check_inputs(m, in, out, err));
    const int64_t B = in->sample->ne[3];
    fwd_ctx f = {.m = m, .in = in, .out = out};
    f.t_host = malloc(sizeof(float) * (size_t)(T_DIM * B));
    if (!f.t_host) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    timestep_embedding(in->timesteps, B, f.t_host);
    rb_status s = sd_run_passes(m->be, &m->scratch, pass, &f, err);
    free(f.t_host);
    return s;
}

/* Building blocks shared by the CLIP text encoder, the UNet and the VAE, as
 * diffusers / transformers define them: linear and convolution layers,
 * group-norm + SiLU, ResnetBlock2D, multi-head attention (self or cross),
 * BasicTransformerBlock, Transformer2DModel, the VAE's single-head
 * mid-block attention, Downsample2D and Upsample2D. Each has a weight
 * struct, a bind function (names under a prefix, shapes checked) and a
 * forward function on an sd_run (temporaries on its stack, released on
 * return).
 *
 * Layouts: images [W, H, C, B]; token sequences [C, T, B]. */
#ifndef RBEE_SD_BLOCKS_H
#define RBEE_SD_BLOCKS_H

#include "sd/sd_arena.h"
#include "sd/sd_weights.h"

/* snprintf into a name buffer; false when it does not fit. */
bool sd_name(char *buf, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
#define SD_NAME_MAX 256

typedef struct sd_linear {
    rb_tensor w, b; /* w [in, out] (ggml order), b [out] */
    bool has_b;
    int64_t in, out;
} sd_linear;

typedef struct sd_conv {
    rb_tensor w, b; /* w [k, k, cin, cout], b [cout] */
    int64_t cin, cout;
    int k;
} sd_conv;

typedef struct sd_norm {
    rb_tensor w, b;
} sd_norm;

rb_status sd_bind_linear(sd_weights *ws, const char *prefix, int64_t in, int64_t out, bool bias, sd_linear *l,
                         rb_error *err);
rb_status sd_bind_conv(sd_weights *ws, const char *prefix, int64_t cin, int64_t cout, int k, sd_conv *c,
                       rb_error *err);
rb_status sd_bind_norm(sd_weights *ws, const char *prefix, int64_t n, sd_norm *nm, rb_error *err);

/* dst [out, T, B] = x [in, T, B] W^T + b, in one rb_linear (dst may be a
 * strided view: a slice of a larger buffer). */
rb_status sd_linear_fwd(sd_run *r, const sd_linear *l, rb_tensor *dst, const rb_tensor *x);
/* The same with an activation, a gate and a residual fused in (rb_linear's
 * epilogue; ep's bias is ignored: the layer's own is used):
 * dst = res + gate * act(x W^T + b). */
rb_status sd_linear_fwd_ep(sd_run *r, const sd_linear *l, rb_tensor *dst, const rb_tensor *x,
                           const rb_linear_epilogue *ep);
/* ep with an activation only / a residual only */
static inline rb_linear_epilogue sd_ep_act(rb_unary_op act) {
    rb_linear_epilogue e = {.has_act = true, .act = act};
    return e;
}
static inline rb_linear_epilogue sd_ep_res(const rb_tensor *res) {
    rb_linear_epilogue e = {.res = res};
    return e;
}
/* 2-D convolution with the given stride and symmetric padding. */
rb_status sd_conv_fwd(sd_run *r, const sd_conv *c, rb_tensor *dst, const rb_tensor *x, int stride, int pad);
/* dst = GroupNorm(x), then SiLU in place when silu. */
rb_status sd_group_norm(sd_run *r, rb_tensor *dst, const rb_tensor *x, const sd_norm *n, int groups, float eps,
                        bool silu);

/* ResnetBlock2D (time_embedding_norm "default", no up/down sampling):
 * y = (shortcut(x) + conv2(silu(gn2(conv1(silu(gn1(x))) + temb_proj)))) / out_scale */
typedef struct sd_resnet {
    sd_norm norm1, norm2;
    sd_conv conv1, conv2, shortcut;
    sd_linear temb;
    bool has_shortcut, has_temb;
    int64_t cin, cout;
    int groups;
    float eps, out_scale;
} sd_resnet;
/* temb_dim 0: no time embedding (the VAE). */
rb_status sd_bind_resnet(sd_weights *ws, const char *prefix, int64_t cin, int64_t cout, int64_t temb_dim, int groups,
                         float eps, float out_scale, sd_resnet *rn, rb_error *err);
/* y [W, H, cout, B] (must not overlap x); temb_act: silu(temb) [temb_dim, B], or NULL. */
rb_status sd_resnet_fwd(sd_run *r, const sd_resnet *rn, rb_tensor *y, const rb_tensor *x, const rb_tensor *temb_act);

/* Multi-head attention projections: to_q/to_k/to_v (bias optional), to_out.0. */
typedef struct sd_attn {
    sd_linear q, k, v, o;
    int heads;
} sd_attn;
rb_status sd_bind_attn(sd_weights *ws, const char *prefix, int64_t dim, int64_t ctx_dim, int heads, bool qkv_bias,
                       const char *out_name, sd_attn *a, rb_error *err);
/* res += out_proj(attention(q(x), k(ctx), v(ctx))): x [C, T, B]; ctx [Cc, Tc, B]
 * (NULL: self-attention over x); res [C, T, B], any strides (the output
 * projection adds into it directly). */
rb_status sd_attn_fwd(sd_run *r, const sd_attn *a, rb_tensor *res, const rb_tensor *x, const rb_tensor *ctx,
                      bool causal);
/* out [H*D, Tq, B] = softmax(q k^T / sqrt(D)) v per head; q, k, v [H*D, T, B] (rows contiguous). */
rb_status sd_mha(sd_run *r, rb_tensor *out, const rb_tensor *q, const rb_tensor *k, const rb_tensor *v, int heads,
                 bool causal);

/* BasicTransformerBlock (layer norms, self-attention, cross-attention, GEGLU feed-forward). */
typedef struct sd_tblock {
    sd_norm n1, n2, n3;
    sd_attn a1, a2;
    sd_linear ff1, ff2; /* ff.net.0.proj [C -> 2F] (first half value, second half gate), ff.net.2 [F -> C] */
    int64_t ff_inner;
} sd_tblock;

/* Transformer2DModel (continuous input): GroupNorm (eps 1e-6), proj_in,
 * blocks, proj_out, residual. proj_in/out are held as linear layers (a 1x1
 * convolution on the image equals a linear layer on its tokens). */
typedef struct sd_t2d {
    sd_norm norm;
    sd_linear proj_in, proj_out;
    sd_tblock *blocks;
    int n_blocks, groups;
} sd_t2d;
rb_status sd_bind_t2d(sd_weights *ws, const char *prefix, int64_t ch, int64_t ctx_dim, int heads, int n_blocks,
                      int groups, sd_t2d *t, rb_error *err);
void sd_t2d_free(sd_t2d *t);
/* x [W, H, C, B] updated in place; ctx [ctx_dim, Tc, B]. */
rb_status sd_t2d_fwd(sd_run *r, const sd_t2d *t, rb_tensor *x, const rb_tensor *ctx);

/* The VAE mid-block attention: GroupNorm, one head over all pixels, biases,
 * residual. */
typedef struct sd_vae_attn {
    sd_norm norm;
    sd_attn attn;
    int groups;
    float eps;
} sd_vae_attn;
rb_status sd_bind_vae_attn(sd_weights *ws, const char *prefix, int64_t ch, int groups, float eps, sd_vae_attn *a,
                           rb_error *err);
/* x [W, H, C, B] updated in place. */
rb_status sd_vae_attn_fwd(sd_run *r, const sd_vae_attn *a, rb_tensor *x);

/* Downsample2D with a convolution: stride 2, padding 1, or (pad 0) a zero
 * row/column appended right and bottom first, as diffusers does. */
rb_status sd_downsample_fwd(sd_run *r, const sd_conv *c, int pad, rb_tensor *y, const rb_tensor *x);
/* Output size of a downsample of n pixels. */
int64_t sd_down_size(int64_t n, int pad);
/* Upsample2D: nearest resize of x to y's width and height, then a 3x3 convolution. */
rb_status sd_upsample_fwd(sd_run *r, const sd_conv *c, rb_tensor *y, const rb_tensor *x);

/* RB_OK for an activation dtype the networks run in (f32, f16, bf16). */
rb_status sd_act_check(rb_dtype dt, const char *what, rb_error *err);

/* Images [W, H, C, B] as tokens: a [C, W*H, B] strided view. */
rb_tensor sd_img_as_tokens(const rb_tensor *img);

#endif

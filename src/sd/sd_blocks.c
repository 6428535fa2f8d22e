/* The shared blocks of the Stable Diffusion networks (see sd_blocks.h):
 * binding their weights by diffusers name and running them on rbee's ops. */
#include "sd/sd_blocks.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sd_name(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < cap;
}

#define NAME(buf, ...)                                                                                         \
    do {                                                                                                       \
        if (!sd_name(buf, sizeof buf, __VA_ARGS__))                                                            \
            return rb_error_set(err, RB_E_INVALID, "tensor name too long under '%s'", prefix);                 \
    } while (0)

rb_status sd_act_check(rb_dtype dt, const char *what, rb_error *err) {
    if (dt == RB_F32 || dt == RB_F16 || dt == RB_BF16) return RB_OK;
    return rb_error_set(err, RB_E_UNSUPPORTED, "%s: activation dtype %s is not supported (f32, f16 or bf16)", what,
                        rb_dtype_name(dt));
}

/* ---- binding ---- */

rb_status sd_bind_linear(sd_weights *ws, const char *prefix, int64_t in, int64_t out, bool bias, sd_linear *l,
                         rb_error *err) {
    char n[SD_NAME_MAX];
    memset(l, 0, sizeof *l);
    l->in = in;
    l->out = out;
    const int64_t wne[2] = {in, out}, bne[1] = {out};
    NAME(n, "%s.weight", prefix);
    SD_TRY(sd_weights_get(ws, n, SD_W_MAT, 2, wne, true, &l->w, NULL, err));
    if (!bias) return RB_OK;
    NAME(n, "%s.bias", prefix);
    l->has_b = true;
    return sd_weights_get(ws, n, SD_W_F32, 1, bne, true, &l->b, NULL, err);
}

rb_status sd_bind_conv(sd_weights *ws, const char *prefix, int64_t cin, int64_t cout, int k, sd_conv *c,
                       rb_error *err) {
    char n[SD_NAME_MAX];
    memset(c, 0, sizeof *c);
    c->cin = cin;
    c->cout = cout;
    c->k = k;
    const int64_t wne[4] = {k, k, cin, cout}, bne[1] = {cout};
    NAME(n, "%s.weight", prefix);
    SD_TRY(sd_weights_get(ws, n, SD_W_CONV, 4, wne, true, &c->w, NULL, err));
    NAME(n, "%s.bias", prefix);
    return sd_weights_get(ws, n, SD_W_F32, 1, bne, true, &c->b, NULL, err);
}

rb_status sd_bind_norm(sd_weights *ws, const char *prefix, int64_t ch, sd_norm *nm, rb_error *err) {
    char n[SD_NAME_MAX];
    const int64_t ne[1] = {ch};
    NAME(n, "%s.weight", prefix);
    SD_TRY(sd_weights_get(ws, n, SD_W_F32, 1, ne, true, &nm->w, NULL, err));
    NAME(n, "%s.bias", prefix);
    return sd_weights_get(ws, n, SD_W_F32, 1, ne, true, &nm->b, NULL, err);
}

rb_status sd_bind_resnet(sd_weights *ws, const char *prefix, int64_t cin, int64_t cout, int64_t temb_dim, int groups,
                         float eps, float out_scale, sd_resnet *rn, rb_error *err) {
    char n[SD_NAME_MAX];
    memset(rn, 0, sizeof *rn);
    rn->cin = cin;
    rn->cout = cout;
    rn->groups = groups;
    rn->eps = eps;
    rn->out_scale = out_scale;
    if (cin % groups || cout % groups)
        return rb_error_set(err, RB_E_UNSUPPORTED, "%s: norm_num_groups %d does not divide %lld or %lld channels",
                            prefix, groups, (long long)cin, (long long)cout);
    NAME(n, "%s.norm1", prefix);
    SD_TRY(sd_bind_norm(ws, n, cin, &rn->norm1, err));
    NAME(n, "%s.conv1", prefix);
    SD_TRY(sd_bind_conv(ws, n, cin, cout, 3, &rn->conv1, err));
    if (temb_dim > 0) {
        rn->has_temb = true;
        NAME(n, "%s.time_emb_proj", prefix);
        SD_TRY(sd_bind_linear(ws, n, temb_dim, cout, true, &rn->temb, err));
    }
    NAME(n, "%s.norm2", prefix);
    SD_TRY(sd_bind_norm(ws, n, cout, &rn->norm2, err));
    NAME(n, "%s.conv2", prefix);
    SD_TRY(sd_bind_conv(ws, n, cout, cout, 3, &rn->conv2, err));
    if (cin != cout) {
        rn->has_shortcut = true;
        NAME(n, "%s.conv_shortcut", prefix);
        SD_TRY(sd_bind_conv(ws, n, cin, cout, 1, &rn->shortcut, err));
    }
    return RB_OK;
}

rb_status sd_bind_attn(sd_weights *ws, const char *prefix, int64_t dim, int64_t ctx_dim, int heads, bool qkv_bias,
                       const char *out_name, sd_attn *a, rb_error *err) {
    char n[SD_NAME_MAX];
    memset(a, 0, sizeof *a);
    if (heads < 1 || dim % heads)
        return rb_error_set(err, RB_E_UNSUPPORTED, "%s: %d attention heads do not divide %lld channels", prefix, heads,
                            (long long)dim);
    a->heads = heads;
    NAME(n, "%s.to_q", prefix);
    SD_TRY(sd_bind_linear(ws, n, dim, dim, qkv_bias, &a->q, err));
    NAME(n, "%s.to_k", prefix);
    SD_TRY(sd_bind_linear(ws, n, ctx_dim, dim, qkv_bias, &a->k, err));
    NAME(n, "%s.to_v", prefix);
    SD_TRY(sd_bind_linear(ws, n, ctx_dim, dim, qkv_bias, &a->v, err));
    NAME(n, "%s.%s", prefix, out_name);
    return sd_bind_linear(ws, n, dim, dim, true, &a->o, err);
}

rb_status sd_bind_t2d(sd_weights *ws, const char *prefix, int64_t ch, int64_t ctx_dim, int heads, int n_blocks,
                      int groups, sd_t2d *t, rb_error *err) {
    char n[SD_NAME_MAX];
    memset(t, 0, sizeof *t);
    t->groups = groups;
    if (ch % groups)
        return rb_error_set(err, RB_E_UNSUPPORTED, "%s: norm_num_groups %d does not divide %lld channels", prefix,
                            groups, (long long)ch);
    NAME(n, "%s.norm", prefix);
    SD_TRY(sd_bind_norm(ws, n, ch, &t->norm, err));
    NAME(n, "%s.proj_in", prefix);
    SD_TRY(sd_bind_linear(ws, n, ch, ch, true, &t->proj_in, err));
    NAME(n, "%s.proj_out", prefix);
    SD_TRY(sd_bind_linear(ws, n, ch, ch, true, &t->proj_out, err));
    t->blocks = calloc((size_t)n_blocks, sizeof *t->blocks);
    if (!t->blocks && n_blocks) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    t->n_blocks = n_blocks;
    for (int i = 0; i < n_blocks; i++) {
        sd_tblock *b = &t->blocks[i];
        b->ff_inner = 4 * ch;
        NAME(n, "%s.transformer_blocks.%d.norm1", prefix, i);
        SD_TRY(sd_bind_norm(ws, n, ch, &b->n1, err));
        NAME(n, "%s.transformer_blocks.%d.norm2", prefix, i);
        SD_TRY(sd_bind_norm(ws, n, ch, &b->n2, err));
        NAME(n, "%s.transformer_blocks.%d.norm3", prefix, i);
        SD_TRY(sd_bind_norm(ws, n, ch, &b->n3, err));
        NAME(n, "%s.transformer_blocks.%d.attn1", prefix, i);
        SD_TRY(sd_bind_attn(ws, n, ch, ch, heads, false, "to_out.0", &b->a1, err));
        NAME(n, "%s.transformer_blocks.%d.attn2", prefix, i);
        SD_TRY(sd_bind_attn(ws, n, ch, ctx_dim, heads, false, "to_out.0", &b->a2, err));
        NAME(n, "%s.transformer_blocks.%d.ff.net.0.proj", prefix, i);
        SD_TRY(sd_bind_linear(ws, n, ch, 2 * b->ff_inner, true, &b->ff1, err));
        NAME(n, "%s.transformer_blocks.%d.ff.net.2", prefix, i);
        SD_TRY(sd_bind_linear(ws, n, b->ff_inner, ch, true, &b->ff2, err));
    }
    return RB_OK;
}

void sd_t2d_free(sd_t2d *t) {
    if (!t) return;
    free(t->blocks);
    t->blocks = NULL;
    t->n_blocks = 0;
}

rb_status sd_bind_vae_attn(sd_weights *ws, const char *prefix, int64_t ch, int groups, float eps, sd_vae_attn *a,
                           rb_error *err) {
    char n[SD_NAME_MAX];
    memset(a, 0, sizeof *a);
    a->groups = groups;
    a->eps = eps;
    if (ch % groups)
        return rb_error_set(err, RB_E_UNSUPPORTED, "%s: norm_num_groups %d does not divide %lld channels", prefix,
                            groups, (long long)ch);
    NAME(n, "%s.group_norm", prefix);
    SD_TRY(sd_bind_norm(ws, n, ch, &a->norm, err));
    return sd_bind_attn(ws, prefix, ch, ch, 1, true, "to_out.0", &a->attn, err);
}

/* ---- forward ---- */

rb_tensor sd_img_as_tokens(const rb_tensor *img) {
    rb_tensor v = *img; /* [W, H, C, B] -> [W*H, C, B] -> [C, W*H, B] */
    v.ne[0] = img->ne[0] * img->ne[1];
    v.ne[1] = img->ne[2];
    v.ne[2] = img->ne[3];
    v.ne[3] = 1;
    v.nb[1] = img->nb[2];
    v.nb[2] = img->nb[3];
    v.nb[3] = img->nb[3] * (size_t)img->ne[3];
    return sd_permute(&v, 1, 0, 2, 3);
}

rb_status sd_linear_fwd_ep(sd_run *r, const sd_linear *l, rb_tensor *dst, const rb_tensor *x,
                           const rb_linear_epilogue *ep) {
    rb_linear_epilogue e = {0};
    if (ep) e = *ep;
    e.bias = l->has_b ? &l->b : NULL;
    SD_OP(r, rb_linear(r->be, dst, &l->w, x, &e));
    return RB_OK;
}

rb_status sd_linear_fwd(sd_run *r, const sd_linear *l, rb_tensor *dst, const rb_tensor *x) {
    return sd_linear_fwd_ep(r, l, dst, x, NULL);
}

rb_status sd_conv_fwd(sd_run *r, const sd_conv *c, rb_tensor *dst, const rb_tensor *x, int stride, int pad) {
    const int st[2] = {stride, stride}, pd[2] = {pad, pad}, dl[2] = {1, 1};
    SD_OP(r, rb_conv2d(r->be, dst, x, &c->w, &c->b, st, pd, dl, 1));
    return RB_OK;
}

rb_status sd_group_norm(sd_run *r, rb_tensor *dst, const rb_tensor *x, const sd_norm *n, int groups, float eps,
                        bool silu) {
    if (silu) SD_OP(r, rb_group_norm_act(r->be, dst, x, groups, &n->w, &n->b, eps, RB_UNARY_SILU));
    else SD_OP(r, rb_group_norm(r->be, dst, x, groups, &n->w, &n->b, eps));
    return RB_OK;
}

rb_status sd_resnet_fwd(sd_run *r, const sd_resnet *rn, rb_tensor *y, const rb_tensor *x, const rb_tensor *temb_act) {
    const int64_t W = x->ne[0], H = x->ne[1], B = x->ne[3];
    const size_t m = sd_mark(r);
    rb_tensor t = sd_stack(r, W, H, rn->cin, B);
    SD_TRY(sd_group_norm(r, &t, x, &rn->norm1, rn->groups, rn->eps, true));
    SD_TRY(sd_conv_fwd(r, &rn->conv1, y, &t, 1, rn->conv1.k / 2));
    if (rn->has_temb && temb_act) {
        rb_tensor p = sd_stack(r, rn->cout, B, 1, 1);
        SD_TRY(sd_linear_fwd(r, &rn->temb, &p, temb_act));
        rb_tensor pv = sd_reshape(&p, 1, 1, rn->cout, B);
        SD_OP(r, rb_binary(r->be, RB_BINARY_ADD, y, y, &pv));
    }
    sd_release(r, m);
    t = sd_stack(r, W, H, rn->cout, B);
    SD_TRY(sd_group_norm(r, &t, y, &rn->norm2, rn->groups, rn->eps, true));
    SD_TRY(sd_conv_fwd(r, &rn->conv2, y, &t, 1, rn->conv2.k / 2));
    if (rn->has_shortcut) {
        SD_TRY(sd_conv_fwd(r, &rn->shortcut, &t, x, 1, 0));
        SD_OP(r, rb_binary(r->be, RB_BINARY_ADD, y, &t, y));
    } else {
        SD_OP(r, rb_binary(r->be, RB_BINARY_ADD, y, x, y));
    }
    if (rn->out_scale != 1.0f) SD_OP(r, rb_affine(r->be, y, y, 1.0f / rn->out_scale, 0.0f));
    sd_release(r, m);
    return RB_OK;
}

/* [H*D, T, B] with contiguous rows as the [D, T, H, B] view rb_attention takes. */
static rb_tensor heads_view(const rb_tensor *t, int heads) {
    rb_tensor v = *t;
    const int64_t D = t->ne[0] / heads;
    v.ne[0] = D;
    v.ne[1] = heads;
    v.ne[2] = t->ne[1];
    v.ne[3] = t->ne[2];
    v.nb[1] = t->nb[0] * (size_t)D;
    v.nb[2] = t->nb[1];
    v.nb[3] = t->nb[2];
    return sd_permute(&v, 0, 2, 1, 3);
}

rb_status sd_mha(sd_run *r, rb_tensor *out, const rb_tensor *q, const rb_tensor *k, const rb_tensor *v, int heads,
                 bool causal) {
    rb_tensor qv = heads_view(q, heads), kv = heads_view(k, heads), vv = heads_view(v, heads);
    const int64_t D = q->ne[0] / heads;
    rb_tensor ov = sd_reshape(out, D, heads, q->ne[1], q->ne[2]); /* [D, H, Tq, B] */
    rb_attn_params p;
    memset(&p, 0, sizeof p);
    p.scale = (float)(1.0 / sqrt((double)D));
    p.causal = causal;
    SD_OP(r, rb_attention(r->be, &ov, &qv, &kv, &vv, &p));
    return RB_OK;
}

rb_status sd_attn_fwd(sd_run *r, const sd_attn *a, rb_tensor *res, const rb_tensor *x, const rb_tensor *ctx,
                      bool causal) {
    const rb_tensor *src = ctx ? ctx : x;
    const int64_t C = a->q.out, Tq = x->ne[1], Tk = src->ne[1], B = x->ne[2];
    const size_t m = sd_mark(r);
    rb_tensor q = sd_stack(r, C, Tq, B, 1), k = sd_stack(r, C, Tk, B, 1), v = sd_stack(r, C, Tk, B, 1);
    rb_tensor o = sd_stack(r, C, Tq, B, 1);
    SD_TRY(sd_linear_fwd(r, &a->q, &q, x));
    SD_TRY(sd_linear_fwd(r, &a->k, &k, src));
    SD_TRY(sd_linear_fwd(r, &a->v, &v, src));
    SD_TRY(sd_mha(r, &o, &q, &k, &v, a->heads, causal));
    const rb_linear_epilogue ep = sd_ep_res(res); /* the output projection added into res */
    SD_TRY(sd_linear_fwd_ep(r, &a->o, res, &o, &ep));
    sd_release(r, m);
    return RB_OK;
}

static rb_status tblock_fwd(sd_run *r, const sd_tblock *tb, rb_tensor *h, const rb_tensor *ctx) {
    const int64_t C = h->ne[0], T = h->ne[1], B = h->ne[2], F = tb->ff_inner;
    const float eps = 1e-5f;
    const size_t m = sd_mark(r);
    rb_tensor n = sd_stack(r, C, T, B, 1);
    SD_OP(r, rb_layer_norm(r->be, &n, h, &tb->n1.w, &tb->n1.b, eps));
    SD_TRY(sd_attn_fwd(r, &tb->a1, h, &n, NULL, false));
    SD_OP(r, rb_layer_norm(r->be, &n, h, &tb->n2.w, &tb->n2.b, eps));
    SD_TRY(sd_attn_fwd(r, &tb->a2, h, &n, ctx, false));
    SD_OP(r, rb_layer_norm(r->be, &n, h, &tb->n3.w, &tb->n3.b, eps));
    rb_tensor p = sd_stack(r, 2 * F, T, B, 1), g = sd_stack(r, F, T, B, 1);
    SD_TRY(sd_linear_fwd(r, &tb->ff1, &p, &n));
    rb_tensor val = sd_slice(&p, 0, 0, F), gate = sd_slice(&p, 0, F, F); /* GEGLU: value * gelu(gate) */
    SD_OP(r, rb_glu(r->be, &g, &gate, &val, RB_UNARY_GELU));
    const rb_linear_epilogue ep = sd_ep_res(h);
    SD_TRY(sd_linear_fwd_ep(r, &tb->ff2, h, &g, &ep));
    sd_release(r, m);
    return RB_OK;
}

rb_status sd_t2d_fwd(sd_run *r, const sd_t2d *t, rb_tensor *x, const rb_tensor *ctx) {
    const int64_t W = x->ne[0], H = x->ne[1], C = x->ne[2], B = x->ne[3];
    const size_t m = sd_mark(r);
    rb_tensor g = sd_stack(r, W, H, C, B);
    SD_TRY(sd_group_norm(r, &g, x, &t->norm, t->groups, 1e-6f, false));
    rb_tensor h = sd_stack(r, C, W * H, B, 1);
    rb_tensor gv = sd_img_as_tokens(&g); /* proj_in reads the tokens through the strided view */
    SD_TRY(sd_linear_fwd(r, &t->proj_in, &h, &gv));
    for (int i = 0; i < t->n_blocks; i++) SD_TRY(tblock_fwd(r, &t->blocks[i], &h, ctx));
    /* proj_out adds into the image through its token view (the residual in
     * place; on the GPU a tiled transposing epilogue, where a plain add
     * through the strided view ran slower than a transposing copy and a
     * row-wise add) */
    rb_tensor xv = sd_img_as_tokens(x);
    const rb_linear_epilogue ep = sd_ep_res(&xv);
    SD_TRY(sd_linear_fwd_ep(r, &t->proj_out, &xv, &h, &ep));
    sd_release(r, m);
    return RB_OK;
}

rb_status sd_vae_attn_fwd(sd_run *r, const sd_vae_attn *a, rb_tensor *x) {
    const int64_t W = x->ne[0], H = x->ne[1], C = x->ne[2], B = x->ne[3];
    const size_t m = sd_mark(r);
    rb_tensor g = sd_stack(r, W, H, C, B), tok = sd_stack(r, C, W * H, B, 1);
    SD_TRY(sd_group_norm(r, &g, x, &a->norm, a->groups, a->eps, false));
    rb_tensor gv = sd_img_as_tokens(&g);
    SD_OP(r, rb_cast(r->be, &tok, &gv));
    rb_tensor xv = sd_img_as_tokens(x);
    SD_TRY(sd_attn_fwd(r, &a->attn, &xv, &tok, NULL, false));
    sd_release(r, m);
    return RB_OK;
}

int64_t sd_down_size(int64_t n, int pad) { return pad ? (n - 1) / 2 + 1 : (n - 2) / 2 + 1; }

rb_status sd_downsample_fwd(sd_run *r, const sd_conv *c, int pad, rb_tensor *y, const rb_tensor *x) {
    if (pad) return sd_conv_fwd(r, c, y, x, 2, pad);
    const int64_t W = x->ne[0], H = x->ne[1], C = x->ne[2], B = x->ne[3];
    const size_t m = sd_mark(r);
    rb_tensor p = sd_stack(r, W + 1, H + 1, C, B);
    rb_tensor in = sd_slice(&p, 0, 0, W);
    in = sd_slice(&in, 1, 0, H);
    SD_OP(r, rb_fill(r->be, &p, 0.0f));
    SD_OP(r, rb_cast(r->be, &in, x));
    SD_TRY(sd_conv_fwd(r, c, y, &p, 2, 0));
    sd_release(r, m);
    return RB_OK;
}

rb_status sd_upsample_fwd(sd_run *r, const sd_conv *c, rb_tensor *y, const rb_tensor *x) {
    const size_t m = sd_mark(r);
    rb_tensor u = sd_stack(r, y->ne[0], y->ne[1], x->ne[2], x->ne[3]);
    SD_OP(r, rb_upsample(r->be, &u, x, RB_UPSAMPLE_NEAREST));
    SD_TRY(sd_conv_fwd(r, c, y, &u, 1, c->k / 2));
    sd_release(r, m);
    return RB_OK;
}

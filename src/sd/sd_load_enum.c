/* Every tensor a diffusers UNet2DConditionModel, SD3Transformer2DModel,
 * AutoencoderKL, CLIPTextModel(WithProjection) or transformers
 * T5EncoderModel of a given config holds, by its diffusers / transformers
 * name and torch shape, in the order the networks bind them: what random
 * weights are made for (sd_load_random.c). The tests check the lists
 * against the fixtures' files, name for name and shape for shape, and the
 * published models' parameter counts. */
#include "sd/sd_pipeline_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct emit {
    sd_tensor_fn fn;
    void *ctx;
    rb_error *err;
    char name[256];
} emit;

#define EM_TRY(expr)                                                                                           \
    do {                                                                                                       \
        rb_status em_s_ = (expr);                                                                              \
        if (em_s_ != RB_OK) return em_s_;                                                                      \
    } while (0)

/* One tensor "<prefix>.<leaf>" of shape (a, b, c, d)[:nd]. */
static rb_status put(emit *e, const char *prefix, const char *leaf, int nd, int64_t a, int64_t b, int64_t c,
                     int64_t d) {
    int n = snprintf(e->name, sizeof e->name, "%s%s%s", prefix, prefix[0] ? "." : "", leaf);
    if (n < 0 || (size_t)n >= sizeof e->name) return rb_error_set(e->err, RB_E_INVALID, "tensor name too long");
    const int64_t shape[4] = {a, b, c, d};
    return e->fn(e->ctx, e->name, nd, shape, e->err);
}

static rb_status put_linear(emit *e, const char *p, int64_t in, int64_t out, bool bias) {
    EM_TRY(put(e, p, "weight", 2, out, in, 0, 0));
    return bias ? put(e, p, "bias", 1, out, 0, 0, 0) : RB_OK;
}

static rb_status put_conv(emit *e, const char *p, int64_t cin, int64_t cout, int64_t k) {
    EM_TRY(put(e, p, "weight", 4, cout, cin, k, k));
    return put(e, p, "bias", 1, cout, 0, 0, 0);
}

static rb_status put_norm(emit *e, const char *p, int64_t ch) {
    EM_TRY(put(e, p, "weight", 1, ch, 0, 0, 0));
    return put(e, p, "bias", 1, ch, 0, 0, 0);
}

static rb_status put_resnet(emit *e, const char *p, int64_t cin, int64_t cout, int64_t temb) {
    char n[256];
    snprintf(n, sizeof n, "%s.norm1", p);
    EM_TRY(put_norm(e, n, cin));
    snprintf(n, sizeof n, "%s.conv1", p);
    EM_TRY(put_conv(e, n, cin, cout, 3));
    if (temb > 0) {
        snprintf(n, sizeof n, "%s.time_emb_proj", p);
        EM_TRY(put_linear(e, n, temb, cout, true));
    }
    snprintf(n, sizeof n, "%s.norm2", p);
    EM_TRY(put_norm(e, n, cout));
    snprintf(n, sizeof n, "%s.conv2", p);
    EM_TRY(put_conv(e, n, cout, cout, 3));
    if (cin == cout) return RB_OK;
    snprintf(n, sizeof n, "%s.conv_shortcut", p);
    return put_conv(e, n, cin, cout, 1);
}

/* to_q / to_k / to_v (bias optional) and to_out.0 (bias). */
static rb_status put_attn(emit *e, const char *p, int64_t dim, int64_t ctx, bool qkv_bias) {
    char n[256];
    static const char *const qkv[3] = {"to_q", "to_k", "to_v"};
    for (int i = 0; i < 3; i++) {
        snprintf(n, sizeof n, "%s.%s", p, qkv[i]);
        EM_TRY(put_linear(e, n, i == 0 ? dim : ctx, dim, qkv_bias));
    }
    snprintf(n, sizeof n, "%s.to_out.0", p);
    return put_linear(e, n, dim, dim, true);
}

/* proj_in / proj_out: linear [C, C] or 1x1 convolution [C, C, 1, 1]. */
static rb_status put_proj(emit *e, const char *p, int64_t ch, bool linear) {
    return linear ? put_linear(e, p, ch, ch, true) : put_conv(e, p, ch, ch, 1);
}

static rb_status put_t2d(emit *e, const char *p, int64_t ch, int64_t ctx, int depth, bool linear) {
    char n[256];
    snprintf(n, sizeof n, "%s.norm", p);
    EM_TRY(put_norm(e, n, ch));
    snprintf(n, sizeof n, "%s.proj_in", p);
    EM_TRY(put_proj(e, n, ch, linear));
    for (int k = 0; k < depth; k++) {
        static const char *const norms[3] = {"norm1", "norm2", "norm3"};
        for (int i = 0; i < 3; i++) {
            snprintf(n, sizeof n, "%s.transformer_blocks.%d.%s", p, k, norms[i]);
            EM_TRY(put_norm(e, n, ch));
        }
        snprintf(n, sizeof n, "%s.transformer_blocks.%d.attn1", p, k);
        EM_TRY(put_attn(e, n, ch, ch, false));
        snprintf(n, sizeof n, "%s.transformer_blocks.%d.attn2", p, k);
        EM_TRY(put_attn(e, n, ch, ctx, false));
        snprintf(n, sizeof n, "%s.transformer_blocks.%d.ff.net.0.proj", p, k);
        EM_TRY(put_linear(e, n, ch, 8 * ch, true));
        snprintf(n, sizeof n, "%s.transformer_blocks.%d.ff.net.2", p, k);
        EM_TRY(put_linear(e, n, 4 * ch, ch, true));
    }
    snprintf(n, sizeof n, "%s.proj_out", p);
    return put_proj(e, n, ch, linear);
}

#define MAX_SKIPS (1 + RB_SD_MAX_LEVELS * 9)

rb_status sd_enum_unet(const rb_unet_config *c, sd_tensor_fn fn, void *ctx, rb_error *err) {
    emit e = {.fn = fn, .ctx = ctx, .err = err};
    const int n = c->n_levels;
    const int64_t T = c->time_embed_dim, X = c->cross_attention_dim;
    const bool lin = c->use_linear_projection;
    char p[256];
    EM_TRY(put_linear(&e, "time_embedding.linear_1", c->block_out_channels[0], T, true));
    EM_TRY(put_linear(&e, "time_embedding.linear_2", T, T, true));
    if (c->add_text_time) {
        EM_TRY(put_linear(&e, "add_embedding.linear_1", c->projection_class_embeddings_input_dim, T, true));
        EM_TRY(put_linear(&e, "add_embedding.linear_2", T, T, true));
    }
    EM_TRY(put_conv(&e, "conv_in", c->in_channels, c->block_out_channels[0], c->conv_in_kernel));
    int64_t skips[MAX_SKIPS], ch = c->block_out_channels[0];
    int ns = 0;
    skips[ns++] = ch;
    for (int l = 0; l < n; l++) {
        const int64_t out = c->block_out_channels[l];
        for (int j = 0; j < c->layers_per_block[l]; j++) {
            snprintf(p, sizeof p, "down_blocks.%d.resnets.%d", l, j);
            EM_TRY(put_resnet(&e, p, ch, out, T));
            if (c->down_cross_attn[l]) {
                snprintf(p, sizeof p, "down_blocks.%d.attentions.%d", l, j);
                EM_TRY(put_t2d(&e, p, out, X, c->transformer_layers[l], lin));
            }
            ch = out;
            if (ns < MAX_SKIPS) skips[ns++] = ch;
        }
        if (l < n - 1) {
            snprintf(p, sizeof p, "down_blocks.%d.downsamplers.0.conv", l);
            EM_TRY(put_conv(&e, p, out, out, 3));
            if (ns < MAX_SKIPS) skips[ns++] = ch;
        }
    }
    if (c->mid_block) {
        EM_TRY(put_resnet(&e, "mid_block.resnets.0", ch, ch, T));
        EM_TRY(put_t2d(&e, "mid_block.attentions.0", ch, X, c->transformer_layers[n - 1], lin));
        EM_TRY(put_resnet(&e, "mid_block.resnets.1", ch, ch, T));
    }
    for (int l = n - 1; l >= 0; l--) {
        const int i = n - 1 - l;
        const int64_t out = c->block_out_channels[l];
        for (int j = 0; j <= c->layers_per_block[l]; j++) {
            if (ns == 0) return rb_error_set(err, RB_E_INVALID, "unet config: more up resnets than skips");
            const int64_t skip = skips[--ns];
            snprintf(p, sizeof p, "up_blocks.%d.resnets.%d", i, j);
            EM_TRY(put_resnet(&e, p, ch + skip, out, T));
            if (c->up_cross_attn[l]) {
                snprintf(p, sizeof p, "up_blocks.%d.attentions.%d", i, j);
                EM_TRY(put_t2d(&e, p, out, X, c->transformer_layers[l], lin));
            }
            ch = out;
        }
        if (l > 0) {
            snprintf(p, sizeof p, "up_blocks.%d.upsamplers.0.conv", i);
            EM_TRY(put_conv(&e, p, out, out, 3));
        }
    }
    EM_TRY(put_norm(&e, "conv_norm_out", ch));
    return put_conv(&e, "conv_out", ch, c->out_channels, c->conv_out_kernel);
}

static rb_status put_vae_mid(emit *e, const char *part, const rb_vae_config *c, int64_t ch) {
    char p[256];
    snprintf(p, sizeof p, "%s.mid_block.resnets.0", part);
    EM_TRY(put_resnet(e, p, ch, ch, 0));
    if (c->mid_block_attention) {
        snprintf(p, sizeof p, "%s.mid_block.attentions.0.group_norm", part);
        EM_TRY(put_norm(e, p, ch));
        snprintf(p, sizeof p, "%s.mid_block.attentions.0", part);
        EM_TRY(put_attn(e, p, ch, ch, true));
    }
    snprintf(p, sizeof p, "%s.mid_block.resnets.1", part);
    return put_resnet(e, p, ch, ch, 0);
}

rb_status sd_enum_vae(const rb_vae_config *c, sd_tensor_fn fn, void *ctx, rb_error *err) {
    emit e = {.fn = fn, .ctx = ctx, .err = err};
    const int n = c->n_levels, nl = c->layers_per_block;
    const int64_t L = c->latent_channels;
    char p[256];
    int64_t ch;
    if (!c->decoder_only) {
        EM_TRY(put_conv(&e, "encoder.conv_in", c->in_channels, c->block_out_channels[0], 3));
        ch = c->block_out_channels[0];
        for (int i = 0; i < n; i++) {
            const int64_t out = c->block_out_channels[i];
            for (int j = 0; j < nl; j++) {
                snprintf(p, sizeof p, "encoder.down_blocks.%d.resnets.%d", i, j);
                EM_TRY(put_resnet(&e, p, ch, out, 0));
                ch = out;
            }
            if (i < n - 1) {
                snprintf(p, sizeof p, "encoder.down_blocks.%d.downsamplers.0.conv", i);
                EM_TRY(put_conv(&e, p, out, out, 3));
            }
        }
        EM_TRY(put_vae_mid(&e, "encoder", c, ch));
        EM_TRY(put_norm(&e, "encoder.conv_norm_out", ch));
        EM_TRY(put_conv(&e, "encoder.conv_out", ch, 2 * L, 3));
        if (c->use_quant_conv) EM_TRY(put_conv(&e, "quant_conv", 2 * L, 2 * L, 1));
    }
    if (c->use_post_quant_conv) EM_TRY(put_conv(&e, "post_quant_conv", L, L, 1));
    ch = c->block_out_channels[n - 1];
    EM_TRY(put_conv(&e, "decoder.conv_in", L, ch, 3));
    EM_TRY(put_vae_mid(&e, "decoder", c, ch));
    for (int i = 0; i < n; i++) {
        const int64_t out = c->block_out_channels[n - 1 - i];
        for (int j = 0; j <= nl; j++) {
            snprintf(p, sizeof p, "decoder.up_blocks.%d.resnets.%d", i, j);
            EM_TRY(put_resnet(&e, p, ch, out, 0));
            ch = out;
        }
        if (i < n - 1) {
            snprintf(p, sizeof p, "decoder.up_blocks.%d.upsamplers.0.conv", i);
            EM_TRY(put_conv(&e, p, out, out, 3));
        }
    }
    EM_TRY(put_norm(&e, "decoder.conv_norm_out", ch));
    return put_conv(&e, "decoder.conv_out", ch, c->out_channels, 3);
}

rb_status sd_enum_clip(const rb_clip_text_config *c, sd_tensor_fn fn, void *ctx, rb_error *err) {
    emit e = {.fn = fn, .ctx = ctx, .err = err};
    const int64_t D = c->hidden_size, F = c->intermediate_size;
    char p[256];
    EM_TRY(put(&e, "", "text_model.embeddings.token_embedding.weight", 2, c->vocab_size, D, 0, 0));
    EM_TRY(put(&e, "", "text_model.embeddings.position_embedding.weight", 2, c->max_positions, D, 0, 0));
    for (int64_t i = 0; i < c->n_layers; i++) {
        static const char *const proj[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
        for (int k = 0; k < 4; k++) {
            snprintf(p, sizeof p, "text_model.encoder.layers.%lld.self_attn.%s", (long long)i, proj[k]);
            EM_TRY(put_linear(&e, p, D, D, true));
        }
        snprintf(p, sizeof p, "text_model.encoder.layers.%lld.layer_norm1", (long long)i);
        EM_TRY(put_norm(&e, p, D));
        snprintf(p, sizeof p, "text_model.encoder.layers.%lld.layer_norm2", (long long)i);
        EM_TRY(put_norm(&e, p, D));
        snprintf(p, sizeof p, "text_model.encoder.layers.%lld.mlp.fc1", (long long)i);
        EM_TRY(put_linear(&e, p, D, F, true));
        snprintf(p, sizeof p, "text_model.encoder.layers.%lld.mlp.fc2", (long long)i);
        EM_TRY(put_linear(&e, p, F, D, true));
    }
    EM_TRY(put_norm(&e, "text_model.final_layer_norm", D));
    if (c->with_projection) EM_TRY(put_linear(&e, "text_projection", D, c->projection_dim, false));
    return RB_OK;
}

/* SD3Transformer2DModel: every linear has a bias; the last block is
 * context_pre_only (2-chunk norm1_context, no to_add_out, no ff_context);
 * dual-attention blocks have 9 norm1 chunks and attn2; qk_norm adds the
 * RMSNorm weights (no bias) of every attention. */
rb_status sd_enum_mmdit(const rb_mmdit_config *c, sd_tensor_fn fn, void *ctx, rb_error *err) {
    emit e = {.fn = fn, .ctx = ctx, .err = err};
    const int64_t D = (int64_t)c->heads * c->head_dim, P = c->patch_size, M = c->pos_embed_max_size, hd = c->head_dim;
    char p[256];
    EM_TRY(put(&e, "pos_embed.proj", "weight", 4, D, c->in_channels, P, P));
    EM_TRY(put(&e, "pos_embed.proj", "bias", 1, D, 0, 0, 0));
    EM_TRY(put(&e, "pos_embed", "pos_embed", 3, 1, M * M, D, 0));
    EM_TRY(put_linear(&e, "time_text_embed.timestep_embedder.linear_1", 256, D, true));
    EM_TRY(put_linear(&e, "time_text_embed.timestep_embedder.linear_2", D, D, true));
    EM_TRY(put_linear(&e, "time_text_embed.text_embedder.linear_1", c->pooled_projection_dim, D, true));
    EM_TRY(put_linear(&e, "time_text_embed.text_embedder.linear_2", D, D, true));
    EM_TRY(put_linear(&e, "context_embedder", c->joint_attention_dim, D, true));
    for (int i = 0; i < c->num_layers; i++) {
        const bool last = i == c->num_layers - 1, dual = c->dual_attention[i];
        static const char *const sq[] = {"to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj",
                                         "to_add_out"};
        static const char *const norms[] = {"norm_q", "norm_k", "norm_added_q", "norm_added_k"};
        snprintf(p, sizeof p, "transformer_blocks.%d.norm1.linear", i);
        EM_TRY(put_linear(&e, p, D, (dual ? 9 : 6) * D, true));
        snprintf(p, sizeof p, "transformer_blocks.%d.norm1_context.linear", i);
        EM_TRY(put_linear(&e, p, D, (last ? 2 : 6) * D, true));
        for (int k = 0; k < (last ? 7 : 8); k++) {
            snprintf(p, sizeof p, "transformer_blocks.%d.attn.%s", i, sq[k]);
            EM_TRY(put_linear(&e, p, D, D, true));
        }
        for (int k = 0; c->qk_norm && k < 4; k++) {
            snprintf(p, sizeof p, "transformer_blocks.%d.attn.%s", i, norms[k]);
            EM_TRY(put(&e, p, "weight", 1, hd, 0, 0, 0));
        }
        for (int k = 0; dual && k < 4; k++) {
            snprintf(p, sizeof p, "transformer_blocks.%d.attn2.%s", i, sq[k]);
            EM_TRY(put_linear(&e, p, D, D, true));
        }
        for (int k = 0; dual && c->qk_norm && k < 2; k++) {
            snprintf(p, sizeof p, "transformer_blocks.%d.attn2.%s", i, norms[k]);
            EM_TRY(put(&e, p, "weight", 1, hd, 0, 0, 0));
        }
        static const char *const ffs[2] = {"ff", "ff_context"};
        for (int k = 0; k < (last ? 1 : 2); k++) {
            snprintf(p, sizeof p, "transformer_blocks.%d.%s.net.0.proj", i, ffs[k]);
            EM_TRY(put_linear(&e, p, D, 4 * D, true));
            snprintf(p, sizeof p, "transformer_blocks.%d.%s.net.2", i, ffs[k]);
            EM_TRY(put_linear(&e, p, 4 * D, D, true));
        }
    }
    EM_TRY(put_linear(&e, "norm_out.linear", D, 2 * D, true));
    return put_linear(&e, "proj_out", D, P * P * c->out_channels, true);
}

/* T5EncoderModel as saved: the tied embedding once (shared.weight), layer
 * 0's relative position table, no biases anywhere. */
rb_status sd_enum_t5(const rb_t5_config *c, sd_tensor_fn fn, void *ctx, rb_error *err) {
    emit e = {.fn = fn, .ctx = ctx, .err = err};
    const int64_t D = c->d_model, I = c->d_kv * c->n_heads, F = c->d_ff;
    char p[256];
    EM_TRY(put(&e, "", "shared.weight", 2, c->vocab_size, D, 0, 0));
    EM_TRY(put(&e, "", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 2, c->rel_buckets,
               c->n_heads, 0, 0));
    for (int64_t i = 0; i < c->n_layers; i++) {
        const long long li = (long long)i;
        static const char *const qkv[3] = {"q", "k", "v"};
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "encoder.block.%lld.layer.%d.layer_norm", li, k);
            EM_TRY(put(&e, p, "weight", 1, D, 0, 0, 0));
        }
        for (int k = 0; k < 3; k++) {
            snprintf(p, sizeof p, "encoder.block.%lld.layer.0.SelfAttention.%s", li, qkv[k]);
            EM_TRY(put_linear(&e, p, D, I, false));
        }
        snprintf(p, sizeof p, "encoder.block.%lld.layer.0.SelfAttention.o", li);
        EM_TRY(put_linear(&e, p, I, D, false));
        for (int k = 0; k < (c->gated ? 2 : 1); k++) {
            snprintf(p, sizeof p, "encoder.block.%lld.layer.1.DenseReluDense.%s", li,
                     c->gated ? (k ? "wi_1" : "wi_0") : "wi");
            EM_TRY(put_linear(&e, p, D, F, false));
        }
        snprintf(p, sizeof p, "encoder.block.%lld.layer.1.DenseReluDense.wo", li);
        EM_TRY(put_linear(&e, p, F, D, false));
    }
    return put(&e, "", "encoder.final_layer_norm.weight", 1, D, 0, 0, 0);
}

/* Seeds of the Stable Diffusion fuzz targets (called by gen_seeds.c): into
 * OUTDIR/sd_config the UNet, VAE, CLIP and scheduler configs (first byte:
 * which reader), into OUTDIR/sd_ldm small but complete single-file
 * checkpoints (SD 1.x names; SDXL names with OpenCLIP's fused projection),
 * into OUTDIR/sd_gguf the same as GGUF files: with rbee.sd.* configs, as a
 * ComfyUI-GGUF UNet (no prefix, a flattened tensor with its
 * comfy.gguf.orig_shape, a q8_0 weight), with stable-diffusion.cpp's
 * internal text-encoder names; into OUTDIR/sd3 a small SD3.5-like single file
 * and GGUF files of it (rbee's, with rbee.sd3.* keys; ComfyUI-GGUF's,
 * without keys or prefix). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rbee/gguf.h"
#include "rbee/quant.h"
#include "sd/sd_gguf.h"

int sd_seeds(const char *dir);

static int put(const char *dir, const char *sub, const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", dir, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static int config_seeds(const char *dir) {
    static const char *const cfgs[] = {
        ("\x00{\"_class_name\":\"UNet2DConditionModel\",\"in_channels\":4,\"out_channels\":4,\"block_out_channels\":"
        "[16,32,32],\"down_block_types\":[\"DownBlock2D\",\"CrossAttnDownBlock2D\",\"CrossAttnDownBlock2D\"],"
        "\"up_block_types\":[\"CrossAttnUpBlock2D\",\"CrossAttnUpBlock2D\",\"UpBlock2D\"],\"layers_per_block\":2,"
        "\"attention_head_dim\":[2,4,4],\"transformer_layers_per_block\":[1,1,2],\"cross_attention_dim\":40,"
        "\"use_linear_projection\":true,\"norm_num_groups\":8,\"addition_embed_type\":\"text_time\","
        "\"addition_time_embed_dim\":8,\"projection_class_embeddings_input_dim\":68,\"mid_block_type\":"
        "\"UNetMidBlock2DCrossAttn\",\"time_embedding_act_fn\":null,\"upcast_attention\":false}"),
        ("\x01{\"_class_name\":\"AutoencoderKL\",\"block_out_channels\":[16,32,32,32],\"down_block_types\":["
        "\"DownEncoderBlock2D\",\"DownEncoderBlock2D\",\"DownEncoderBlock2D\",\"DownEncoderBlock2D\"],"
        "\"layers_per_block\":2,\"latent_channels\":4,\"norm_num_groups\":8,\"scaling_factor\":0.13025,"
        "\"shift_factor\":null,\"force_upcast\":true,\"mid_block_add_attention\":true}"),
        ("\x02{\"architectures\":[\"CLIPTextModelWithProjection\"],\"model_type\":\"clip_text_model\","
        "\"hidden_size\":24,"
        "\"intermediate_size\":48,\"num_hidden_layers\":3,\"num_attention_heads\":2,\"projection_dim\":20,"
        "\"hidden_act\":\"gelu\",\"layer_norm_eps\":1e-05,\"bos_token_id\":49406,\"eos_token_id\":49407}"),
        ("\x03{\"_class_name\":\"EulerDiscreteScheduler\",\"beta_start\":0.00085,\"beta_end\":0.012,\"beta_schedule\":"
        "\"scaled_linear\",\"num_train_timesteps\":1000,\"prediction_type\":\"epsilon\",\"timestep_spacing\":"
        "\"leading\",\"steps_offset\":1,\"use_karras_sigmas\":true,\"_use_default_values\":[\"sigma_min\"]}"),
        ("\x07{\"_class_name\":\"DPMSolverMultistepScheduler\",\"beta_schedule\":\"squaredcos_cap_v2\","
        "\"prediction_type\":\"v_prediction\",\"lambda_min_clipped\":-Infinity,\"final_sigmas_type\":\"zero\","
        "\"solver_type\":\"midpoint\",\"rescale_betas_zero_snr\":true,\"timestep_spacing\":\"trailing\"}"),
        ("\x0b{\"_class_name\":\"DDIMScheduler\",\"set_alpha_to_one\":false,\"clip_sample\":true,"
        "\"clip_sample_range\":1.5,\"prediction_type\":\"sample\",\"timestep_spacing\":\"linspace\"}"),
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "seed%zu.bin", i);
        bad |= put(dir, "sd_config", name, cfgs[i], 1 + strlen(cfgs[i] + 1));
    }
    return bad;
}

/* A tiny but complete checkpoint: 2 UNet levels with 1 resnet each and
 * attention at level 0, a 1-level VAE, a 1-layer CLIP (and for SDXL an
 * OpenCLIP encoder and the text_time embedding). torch shapes. */
typedef struct tdesc {
    const char *name;
    int nd;
    int64_t s[4];
} tdesc;

static const tdesc k_unet[] = {
    {"input_blocks.0.0.weight", 4, {8, 4, 3, 3}},
    {"input_blocks.0.0.bias", 1, {8}},
    {"input_blocks.1.0.in_layers.2.weight", 4, {8, 8, 3, 3}},
    {"input_blocks.1.0.out_layers.3.weight", 4, {8, 8, 3, 3}},
    {"input_blocks.1.1.norm.weight", 1, {8}},
    {"input_blocks.1.1.proj_in.weight", 2, {8, 8}},
    {"input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", 2, {8, 8}},
    {"input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight", 2, {8, 8}},
    {"input_blocks.2.0.op.weight", 4, {8, 8, 3, 3}},
    {"input_blocks.3.0.in_layers.2.weight", 4, {8, 8, 3, 3}},
    {"input_blocks.3.0.out_layers.3.weight", 4, {8, 8, 3, 3}},
    {"middle_block.1.transformer_blocks.0.attn1.to_q.weight", 2, {8, 8}},
    {"output_blocks.2.1.conv.weight", 4, {8, 8, 3, 3}},
    {"time_embed.0.weight", 2, {32, 8}},
    {"out.2.weight", 4, {4, 8, 3, 3}},
};

static const tdesc k_vae[] = {
    {"first_stage_model.decoder.conv_in.weight", 4, {2, 4, 3, 3}},
    {"first_stage_model.decoder.up.0.block.0.conv1.weight", 4, {2, 2, 3, 3}},
    {"first_stage_model.decoder.up.0.block.0.conv2.weight", 4, {2, 2, 3, 3}},
    {"first_stage_model.decoder.up.0.block.1.conv2.weight", 4, {2, 2, 3, 3}},
    {"first_stage_model.decoder.mid.attn_1.q.weight", 4, {2, 2, 1, 1}},
    {"first_stage_model.encoder.down.0.block.0.conv1.weight", 4, {2, 2, 3, 3}},
    {"first_stage_model.post_quant_conv.weight", 4, {4, 4, 1, 1}},
    {"first_stage_model.decoder.conv_out.weight", 4, {3, 2, 3, 3}},
};

static const tdesc k_clip[] = {
    {"text_model.embeddings.token_embedding.weight", 2, {10, 64}},
    {"text_model.embeddings.position_embedding.weight", 2, {4, 64}},
    {"text_model.encoder.layers.0.self_attn.q_proj.weight", 2, {64, 64}},
    {"text_model.encoder.layers.0.mlp.fc1.weight", 2, {3, 64}},
    {"text_model.final_layer_norm.weight", 1, {64}},
};

static const tdesc k_open_clip[] = {
    {"token_embedding.weight", 2, {10, 2}},
    {"positional_embedding", 2, {4, 2}},
    {"transformer.resblocks.0.attn.in_proj_weight", 2, {6, 2}},
    {"transformer.resblocks.0.mlp.c_fc.weight", 2, {3, 2}},
    {"ln_final.weight", 1, {2}},
    {"text_projection", 2, {2, 2}},
};

/* safetensors image builder */
typedef struct img {
    char json[16384];
    size_t jn;
    uint8_t data[131072];
    size_t dn;
} img;

static void st_add(img *b, const char *prefix, const tdesc *t) {
    size_t n = 1;
    for (int d = 0; d < t->nd; d++) n *= (size_t)t->s[d];
    if (b->dn + 4 * n > sizeof b->data || b->jn + 400 > sizeof b->json) return;
    b->jn += (size_t)snprintf(b->json + b->jn, sizeof b->json - b->jn, "%s\"%s%s\":{\"dtype\":\"F32\",\"shape\":[",
                              b->jn > 1 ? "," : "", prefix, t->name);
    for (int d = 0; d < t->nd; d++)
        b->jn += (size_t)snprintf(b->json + b->jn, sizeof b->json - b->jn, "%s%lld", d ? "," : "", (long long)t->s[d]);
    b->jn += (size_t)snprintf(b->json + b->jn, sizeof b->json - b->jn, "],\"data_offsets\":[%zu,%zu]}", b->dn,
                              b->dn + 4 * n);
    for (size_t i = 0; i < n; i++) {
        const float v = 0.125f * (float)((b->dn / 4 + i) % 17) - 1.0f;
        memcpy(b->data + b->dn + 4 * i, &v, 4);
    }
    b->dn += 4 * n;
}

static int st_write_to(const char *dir, const char *sub, const char *name, img *b) {
    b->json[b->jn++] = '}';
    const size_t hl = (b->jn + 7) / 8 * 8, total = 8 + hl + b->dn;
    uint8_t *p = calloc(1, total);
    if (!p) return -1;
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memset(p + 8, ' ', hl);
    memcpy(p + 8, b->json, b->jn);
    memcpy(p + 8 + hl, b->data, b->dn);
    int r = put(dir, sub, name, p, total);
    free(p);
    return r;
}

static int st_write(const char *dir, const char *name, img *b) { return st_write_to(dir, "sd_ldm", name, b); }

#define N(a) (sizeof a / sizeof a[0])

static int ldm_seeds(const char *dir) {
    img *b = calloc(1, sizeof *b);
    if (!b) return -1;
    int bad = 0;
    for (int xl = 0; xl < 2; xl++) {
        memset(b, 0, sizeof *b);
        b->json[b->jn++] = '{';
        for (size_t i = 0; i < N(k_unet); i++) st_add(b, "model.diffusion_model.", &k_unet[i]);
        for (size_t i = 0; i < N(k_vae); i++) st_add(b, "", &k_vae[i]);
        for (size_t i = 0; i < N(k_clip); i++)
            st_add(b, xl ? "conditioner.embedders.0.transformer." : "cond_stage_model.transformer.", &k_clip[i]);
        if (xl) {
            for (size_t i = 0; i < N(k_open_clip); i++) st_add(b, "conditioner.embedders.1.model.", &k_open_clip[i]);
            const tdesc adm = {"label_emb.0.0.weight", 2, {8, 18}};
            st_add(b, "model.diffusion_model.", &adm);
        }
        bad |= st_write(dir, xl ? "sdxl.safetensors" : "sd1.safetensors", b);
    }
    free(b);
    return bad;
}

/* ---- GGUF seeds ---- */

static void gg_add(rb_gguf_writer *w, const char *prefix, const tdesc *t, rb_dtype dt) {
    int64_t ne[4] = {1, 1, 1, 1}, n = 1;
    for (int d = 0; d < t->nd; d++) {
        ne[d] = t->s[t->nd - 1 - d];
        n *= t->s[d];
    }
    static float x[8192];
    if (n > 8192) return;
    for (int64_t i = 0; i < n; i++) x[i] = 0.25f * (float)(i % 9) - 1.0f;
    char name[256];
    snprintf(name, sizeof name, "%s%s", prefix, t->name);
    static uint8_t enc[4 * 8192];
    const size_t bytes = rb_dtype_row_size(dt, ne[0]) * (size_t)(n / ne[0]);
    if (rb_quantize_rows(dt, x, enc, n / ne[0], ne[0]) == RB_OK)
        (void)rb_gguf_writer_add_tensor(w, name, dt, t->nd, ne, enc, bytes);
}

static int gg_write(rb_gguf_writer *w, const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/sd_gguf/%s", dir, name);
    rb_error err;
    rb_status s = rb_gguf_writer_write(w, path, 0, &err);
    rb_gguf_writer_free(w);
    return s == RB_OK ? 0 : -1;
}

static int gguf_seeds(const char *dir) {
    int bad = 0;
    rb_gguf_writer *w = NULL;
    /* a checkpoint with rbee.sd.* configs */
    if (rb_gguf_writer_create(&w, NULL) != RB_OK) return -1;
    sd_gguf_configs c;
    memset(&c, 0, sizeof c);
    c.family = SD_FAMILY_SD1;
    c.has_unet = c.has_vae = c.has_text = true;
    c.unet = (rb_unet_config){.in_channels = 4, .out_channels = 4, .n_levels = 2, .block_out_channels = {8, 8},
                              .down_cross_attn = {true, false}, .up_cross_attn = {true, false}, .n_heads = {1, 1},
                              .transformer_layers = {1, 1}, .layers_per_block = {1, 1}, .mid_block = true,
                              .cross_attention_dim = 8, .norm_num_groups = 1, .norm_eps = 1e-5f,
                              .flip_sin_to_cos = true, .time_embed_dim = 32, .conv_in_kernel = 3,
                              .conv_out_kernel = 3, .downsample_padding = 1, .mid_block_scale_factor = 1.0f,
                              .resnet_out_scale_factor = 1.0f};
    c.vae = (rb_vae_config){.in_channels = 3, .out_channels = 3, .latent_channels = 4, .n_levels = 1,
                            .block_out_channels = {2}, .layers_per_block = 1, .norm_num_groups = 1,
                            .scaling_factor = 0.18215f, .force_upcast = true, .mid_block_attention = true,
                            .use_quant_conv = true, .use_post_quant_conv = true};
    c.text = (rb_clip_text_config){.vocab_size = 10, .hidden_size = 64, .intermediate_size = 3, .n_layers = 1,
                                   .n_heads = 1, .max_positions = 4, .projection_dim = 2, .eps = 1e-5f,
                                   .bos_id = 8, .eos_id = 9};
    c.scheduler_json = "{\"_class_name\":\"PNDMScheduler\",\"beta_schedule\":\"scaled_linear\"}";
    c.pad_token[0] = "<|endoftext|>";
    (void)rb_gguf_writer_set_str(w, "general.architecture", "sd1");
    if (sd_gguf_write_configs(w, &c, NULL) != RB_OK) bad = -1;
    for (size_t i = 0; i < N(k_unet); i++) gg_add(w, "model.diffusion_model.", &k_unet[i], RB_F16);
    for (size_t i = 0; i < N(k_vae); i++) gg_add(w, "", &k_vae[i], RB_F32);
    for (size_t i = 0; i < N(k_clip); i++) gg_add(w, "cond_stage_model.transformer.", &k_clip[i], RB_F32);
    bad |= gg_write(w, dir, "rbee.gguf");
    /* a ComfyUI-GGUF UNet */
    if (rb_gguf_writer_create(&w, NULL) != RB_OK) return -1;
    (void)rb_gguf_writer_set_str(w, "general.architecture", "sdxl");
    (void)rb_gguf_writer_set_u32(w, "general.quantization_version", 2);
    for (size_t i = 0; i < N(k_unet); i++) gg_add(w, "", &k_unet[i], RB_F32);
    const int32_t orig[4] = {8, 8, 3, 3};
    (void)rb_gguf_writer_set_arr(w, "comfy.gguf.orig_shape.output_blocks.0.0.in_layers.2.weight", RB_GGUF_INT32, orig,
                                 4);
    const tdesc flat = {"output_blocks.0.0.in_layers.2.weight", 2, {2, 288}};
    gg_add(w, "", &flat, RB_F32);
    const tdesc q = {"input_blocks.1.1.transformer_blocks.0.ff.net.0.proj.weight", 2, {64, 32}};
    gg_add(w, "", &q, RB_Q8_0);
    const tdesc adm = {"label_emb.0.0.weight", 2, {8, 18}};
    gg_add(w, "", &adm, RB_F32);
    bad |= gg_write(w, dir, "comfyui.gguf");
    /* stable-diffusion.cpp's internal names, no metadata */
    if (rb_gguf_writer_create(&w, NULL) != RB_OK) return -1;
    for (size_t i = 0; i < N(k_unet); i++) gg_add(w, "model.diffusion_model.", &k_unet[i], RB_F32);
    for (size_t i = 0; i < N(k_vae); i++) gg_add(w, "", &k_vae[i], RB_F32);
    for (size_t i = 0; i < N(k_clip); i++) gg_add(w, "cond_stage_model.transformer.", &k_clip[i], RB_F32);
    static const tdesc g[] = {
        {"text_model.embeddings.token_embedding.weight", 2, {10, 32}},
        {"text_model.embeddings.position_embedding.weight", 2, {4, 32}},
        {"text_model.encoder.layers.0.self_attn.in_proj.weight", 2, {96, 32}},
        {"text_model.encoder.layers.0.mlp.fc1.weight", 2, {3, 32}},
        {"text_model.final_layer_norm.weight", 1, {32}},
        {"text_model.text_projection", 2, {32, 32}},
    };
    for (size_t i = 0; i < N(g); i++)
        gg_add(w, "cond_stage_model.1.transformer.", &g[i], i == 2 || i == 5 ? RB_Q8_0 : RB_F32);
    bad |= gg_write(w, dir, "sdcpp.gguf");
    return bad;
}

/* ---- SD3 seeds: a two-block MMDiT 8 wide (one head of 8 with qk-norm, a
 * dual-attention first block) and a one-block T5, as a single file and as
 * GGUF files with and without rbee.sd3.* keys ---- */

static const tdesc k_sd3[] = {
    {"pos_embed", 3, {1, 4, 8}},
    {"x_embedder.proj.weight", 4, {8, 4, 2, 2}},
    {"x_embedder.proj.bias", 1, {8}},
    {"t_embedder.mlp.0.weight", 2, {8, 256}},
    {"t_embedder.mlp.0.bias", 1, {8}},
    {"t_embedder.mlp.2.weight", 2, {8, 8}},
    {"t_embedder.mlp.2.bias", 1, {8}},
    {"y_embedder.mlp.0.weight", 2, {8, 6}},
    {"y_embedder.mlp.0.bias", 1, {8}},
    {"y_embedder.mlp.2.weight", 2, {8, 8}},
    {"y_embedder.mlp.2.bias", 1, {8}},
    {"context_embedder.weight", 2, {8, 8}},
    {"context_embedder.bias", 1, {8}},
    {"final_layer.linear.weight", 2, {16, 8}},
    {"final_layer.linear.bias", 1, {16}},
    {"final_layer.adaLN_modulation.1.weight", 2, {16, 8}},
    {"final_layer.adaLN_modulation.1.bias", 1, {16}},
};

/* block b's tensors (last: the context stream's reduced form; dual: attn2) */
static size_t sd3_block(tdesc *out, char names[][96], int b, bool last, bool dual) {
    static const struct { const char *part; int nd; int64_t s0, s1; } x[] = {
        {"x_block.attn.qkv.weight", 2, 24, 8}, {"x_block.attn.qkv.bias", 1, 24, 0},
        {"x_block.attn.ln_q.weight", 1, 8, 0}, {"x_block.attn.ln_k.weight", 1, 8, 0},
        {"x_block.attn.proj.weight", 2, 8, 8}, {"x_block.attn.proj.bias", 1, 8, 0},
        {"x_block.mlp.fc1.weight", 2, 32, 8},  {"x_block.mlp.fc1.bias", 1, 32, 0},
        {"x_block.mlp.fc2.weight", 2, 8, 32},  {"x_block.mlp.fc2.bias", 1, 8, 0},
        {"context_block.attn.qkv.weight", 2, 24, 8}, {"context_block.attn.qkv.bias", 1, 24, 0},
        {"context_block.attn.ln_q.weight", 1, 8, 0}, {"context_block.attn.ln_k.weight", 1, 8, 0},
    };
    static const struct { const char *part; int nd; int64_t s0, s1; } ctx[] = {
        {"context_block.attn.proj.weight", 2, 8, 8}, {"context_block.attn.proj.bias", 1, 8, 0},
        {"context_block.mlp.fc1.weight", 2, 32, 8},  {"context_block.mlp.fc1.bias", 1, 32, 0},
        {"context_block.mlp.fc2.weight", 2, 8, 32},  {"context_block.mlp.fc2.bias", 1, 8, 0},
    };
    static const struct { const char *part; int nd; int64_t s0, s1; } a2[] = {
        {"x_block.attn2.qkv.weight", 2, 24, 8}, {"x_block.attn2.qkv.bias", 1, 24, 0},
        {"x_block.attn2.ln_q.weight", 1, 8, 0}, {"x_block.attn2.ln_k.weight", 1, 8, 0},
        {"x_block.attn2.proj.weight", 2, 8, 8}, {"x_block.attn2.proj.bias", 1, 8, 0},
    };
    size_t n = 0;
#define SD3_ADD(p, nd_, a, b_)                                                                                        \
    do {                                                                                                              \
        snprintf(names[n], 96, "joint_blocks.%d.%s", b, p);                                                           \
        out[n] = (tdesc){names[n], nd_, {a, b_, 0, 0}};                                                               \
        n++;                                                                                                          \
    } while (0)
    for (size_t i = 0; i < N(x); i++) SD3_ADD(x[i].part, x[i].nd, x[i].s0, x[i].s1);
    for (size_t i = 0; !last && i < N(ctx); i++) SD3_ADD(ctx[i].part, ctx[i].nd, ctx[i].s0, ctx[i].s1);
    for (size_t i = 0; dual && i < N(a2); i++) SD3_ADD(a2[i].part, a2[i].nd, a2[i].s0, a2[i].s1);
    SD3_ADD("x_block.adaLN_modulation.1.weight", 2, dual ? 72 : 48, 8);
    SD3_ADD("x_block.adaLN_modulation.1.bias", 1, dual ? 72 : 48, 0);
    SD3_ADD("context_block.adaLN_modulation.1.weight", 2, last ? 16 : 48, 8);
    SD3_ADD("context_block.adaLN_modulation.1.bias", 1, last ? 16 : 48, 0);
#undef SD3_ADD
    return n;
}

static const tdesc k_t5[] = {
    {"shared.weight", 2, {10, 8}},
    {"encoder.block.0.layer.0.SelfAttention.q.weight", 2, {8, 8}},
    {"encoder.block.0.layer.0.SelfAttention.k.weight", 2, {8, 8}},
    {"encoder.block.0.layer.0.SelfAttention.v.weight", 2, {8, 8}},
    {"encoder.block.0.layer.0.SelfAttention.o.weight", 2, {8, 8}},
    {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 2, {4, 1}},
    {"encoder.block.0.layer.0.layer_norm.weight", 1, {8}},
    {"encoder.block.0.layer.1.DenseReluDense.wi_0.weight", 2, {16, 8}},
    {"encoder.block.0.layer.1.DenseReluDense.wi_1.weight", 2, {16, 8}},
    {"encoder.block.0.layer.1.DenseReluDense.wo.weight", 2, {8, 16}},
    {"encoder.block.0.layer.1.layer_norm.weight", 1, {8}},
    {"encoder.final_layer_norm.weight", 1, {8}},
};

static int sd3_seeds(const char *dir) {
    img *b = calloc(1, sizeof *b);
    tdesc blk[2][40];
    static char names[2][40][96];
    size_t nb[2];
    if (!b) return -1;
    for (int k = 0; k < 2; k++) nb[k] = sd3_block(blk[k], names[k], k, k == 1, k == 0);
    b->json[b->jn++] = '{';
    for (size_t i = 0; i < N(k_sd3); i++) st_add(b, "model.diffusion_model.", &k_sd3[i]);
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < nb[k]; i++) st_add(b, "model.diffusion_model.", &blk[k][i]);
    for (size_t i = 0; i < N(k_t5); i++) st_add(b, "text_encoders.t5xxl.transformer.", &k_t5[i]);
    int bad = st_write_to(dir, "sd3", "sd35.safetensors", b);
    free(b);
    for (int keys = 0; keys < 2; keys++) {
        rb_gguf_writer *w = NULL;
        if (rb_gguf_writer_create(&w, NULL) != RB_OK) return -1;
        (void)rb_gguf_writer_set_str(w, "general.architecture", "sd3");
        if (keys) { /* the values rbee convert writes for this model */
            static const struct { const char *k; int64_t v; } kv[] = {
                {"rbee.sd3.transformer.num_layers", 2}, {"rbee.sd3.transformer.num_attention_heads", 1},
                {"rbee.sd3.transformer.attention_head_dim", 8}, {"rbee.sd3.transformer.caption_projection_dim", 8},
                {"rbee.sd3.transformer.joint_attention_dim", 8}, {"rbee.sd3.transformer.pooled_projection_dim", 6},
                {"rbee.sd3.transformer.pos_embed_max_size", 2}, {"rbee.sd3.transformer.patch_size", 2},
                {"rbee.sd3.transformer.in_channels", 4}, {"rbee.sd3.transformer.out_channels", 4},
                {"rbee.sd3.transformer.sample_size", 128}, {"rbee.sd3.text_encoder_3.num_layers", 1},
                {"rbee.sd3.text_encoder_3.d_model", 8}, {"rbee.sd3.text_encoder_3.d_ff", 16},
                {"rbee.sd3.text_encoder_3.d_kv", 8}, {"rbee.sd3.text_encoder_3.num_heads", 1},
                {"rbee.sd3.text_encoder_3.vocab_size", 10},
                {"rbee.sd3.text_encoder_3.relative_attention_num_buckets", 4},
                {"rbee.sd3.text_encoder_3.relative_attention_max_distance", 128},
            };
            for (size_t i = 0; i < N(kv); i++) (void)rb_gguf_writer_set_i64(w, kv[i].k, kv[i].v);
            (void)rb_gguf_writer_set_str(w, "rbee.sd3.transformer.qk_norm", "rms_norm");
            const int32_t dual[1] = {0};
            (void)rb_gguf_writer_set_arr(w, "rbee.sd3.transformer.dual_attention_layers", RB_GGUF_INT32, dual, 1);
            (void)rb_gguf_writer_set_str(w, "rbee.sd3.text_encoder_3.feed_forward_proj", "gated-gelu");
        }
        const char *pre = keys ? "model.diffusion_model." : ""; /* ComfyUI-GGUF: no prefix */
        for (size_t i = 0; i < N(k_sd3); i++) gg_add(w, pre, &k_sd3[i], RB_F32);
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < nb[k]; i++)
                gg_add(w, pre, &blk[k][i], blk[k][i].nd == 2 && blk[k][i].s[1] % 32 == 0 ? RB_Q8_0 : RB_F32);
        for (size_t i = 0; i < N(k_t5); i++) gg_add(w, "text_encoders.t5xxl.transformer.", &k_t5[i], RB_F32);
        char path[4096];
        snprintf(path, sizeof path, "%s/sd3/%s", dir, keys ? "sd35-rbee.gguf" : "sd35-comfy.gguf");
        rb_error err;
        if (rb_gguf_writer_write(w, path, 0, &err) != RB_OK) bad = -1;
        rb_gguf_writer_free(w);
    }
    return bad;
}

int sd_seeds(const char *dir) {
    static const char *const sub[] = {"sd_config", "sd_ldm", "sd_gguf", "sd3"};
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, sub[i]);
        mkdir(p, 0755);
    }
    bad |= config_seeds(dir);
    bad |= ldm_seeds(dir);
    bad |= gguf_seeds(dir);
    bad |= sd3_seeds(dir);
    return bad ? -1 : 0;
}

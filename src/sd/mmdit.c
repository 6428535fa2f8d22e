/* Loading the MMDiT (SD3Transformer2DModel): its config.json, and binding
 * every tensor by diffusers name with its shape checked. Structure by block
 * i of L: norm1 has 6 modulation chunks (9 with dual attention, SD3.5's
 * SD35AdaLayerNormZeroX); norm1_context has 6, except in the last block,
 * which is "context_pre_only": 2 chunks (an AdaLayerNormContinuous, scale
 * then shift) and no text output projection or feed-forward. */
#include "sd/mmdit_internal.h"
#include "sd/sd_cfg.h"
#include "sd/sd_nets.h"

#include <stdlib.h>
#include <string.h>

static rb_status parse(const sd_cfg *j, rb_mmdit_config *c) {
    memset(c, 0, sizeof *c);
    const char *s;
    SD_TRY_J(sd_cfg_str(j, "_class_name", &s));
    if (s && strcmp(s, "SD3Transformer2DModel") != 0) return sd_cfg_unsupported(j, "_class_name", "SD3Transformer2DModel");
    int64_t v;
    SD_TRY_J(sd_cfg_int(j, "sample_size", 128, &c->sample_size));
    SD_TRY_J(sd_cfg_int(j, "patch_size", 2, &c->patch_size));
    SD_TRY_J(sd_cfg_int(j, "in_channels", 16, &c->in_channels));
    SD_TRY_J(sd_cfg_int(j, "out_channels", 16, &c->out_channels));
    SD_TRY_J(sd_cfg_int(j, "num_layers", 18, &v));
    if (v < 1 || v > RB_MMDIT_MAX_LAYERS) return sd_cfg_unsupported(j, "num_layers", "1 to 128");
    c->num_layers = (int)v;
    SD_TRY_J(sd_cfg_int(j, "attention_head_dim", 64, &c->head_dim));
    SD_TRY_J(sd_cfg_int(j, "num_attention_heads", 18, &v));
    if (v < 1 || v > 1024) return sd_cfg_unsupported(j, "num_attention_heads", "1 to 1024");
    c->heads = (int)v;
    SD_TRY_J(sd_cfg_int(j, "joint_attention_dim", 4096, &c->joint_attention_dim));
    SD_TRY_J(sd_cfg_int(j, "caption_projection_dim", 1152, &c->caption_projection_dim));
    SD_TRY_J(sd_cfg_int(j, "pooled_projection_dim", 2048, &c->pooled_projection_dim));
    SD_TRY_J(sd_cfg_int(j, "pos_embed_max_size", 96, &c->pos_embed_max_size));
    SD_TRY_J(sd_cfg_str(j, "qk_norm", &s));
    if (s && strcmp(s, "rms_norm") != 0) return sd_cfg_unsupported(j, "qk_norm", "null or rms_norm");
    c->qk_norm = s != NULL;
    if (sd_cfg_has(j, "dual_attention_layers")) {
        json_t *a = json_object_get(j->root, "dual_attention_layers");
        if (!json_is_array(a))
            return rb_error_set(j->err, RB_E_FORMAT, "%s: field 'dual_attention_layers' is not a list", j->path);
        for (size_t i = 0; i < json_array_size(a); i++) {
            json_t *e = json_array_get(a, i);
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= c->num_layers)
                return rb_error_set(j->err, RB_E_FORMAT, "%s: dual_attention_layers[%zu] is not a layer index below %d",
                                    j->path, i, c->num_layers);
            c->dual_attention[json_integer_value(e)] = true;
        }
    }
    const struct { const char *key; int64_t v, max; } dims[] = {
        {"patch_size", c->patch_size, 16},          {"in_channels", c->in_channels, 4096},
        {"out_channels", c->out_channels, 4096},    {"attention_head_dim", c->head_dim, 4096},
        {"joint_attention_dim", c->joint_attention_dim, 1 << 16},
        {"caption_projection_dim", c->caption_projection_dim, 1 << 16},
        {"pooled_projection_dim", c->pooled_projection_dim, 1 << 16},
        {"pos_embed_max_size", c->pos_embed_max_size, 4096}, {"sample_size", c->sample_size, 1 << 16}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v < 1 || dims[i].v > dims[i].max)
            return rb_error_set(j->err, RB_E_FORMAT, "%s: field '%s' = %lld is out of range", j->path, dims[i].key,
                                (long long)dims[i].v);
    if (c->caption_projection_dim != c->heads * c->head_dim)
        return rb_error_set(j->err, RB_E_UNSUPPORTED, "%s: caption_projection_dim %lld differs from the model width "
                            "%d x %lld", j->path, (long long)c->caption_projection_dim, c->heads, (long long)c->head_dim);
    return RB_OK;
}

rb_status rb_mmdit_config_load(const char *path, rb_mmdit_config *cfg, rb_error *err) {
    if (!path || !cfg) return rb_error_set(err, RB_E_INVALID, "mmdit config: NULL argument");
    sd_cfg j;
    rb_status s = sd_cfg_open(&j, path, err);
    if (s != RB_OK) return s;
    s = parse(&j, cfg);
    sd_cfg_close(&j);
    return s;
}

#define NAME(buf, ...)                                                                                         \
    do {                                                                                                       \
        if (!sd_name(buf, sizeof buf, __VA_ARGS__))                                                            \
            return rb_error_set(err, RB_E_INVALID, "mmdit: tensor name too long");                             \
    } while (0)

static rb_status bind_lin(sd_weights *ws, const char *pre, int i, const char *name, int64_t in, int64_t out,
                          sd_linear *l, rb_error *err) {
    char n[SD_NAME_MAX];
    if (i >= 0) NAME(n, "%s.%d.%s", pre, i, name);
    else NAME(n, "%s%s", pre, name);
    return sd_bind_linear(ws, n, in, out, true, l, err);
}

static rb_status bind_qk_norm(sd_weights *ws, int i, const char *attn, const char *q, const char *k, int64_t hd,
                              mmdit_attn *a, rb_error *err) {
    char n[SD_NAME_MAX];
    const int64_t ne[1] = {hd};
    NAME(n, "transformer_blocks.%d.%s.%s.weight", i, attn, q);
    SD_TRY(sd_weights_get(ws, n, SD_W_F32, 1, ne, true, &a->nq, NULL, err));
    NAME(n, "transformer_blocks.%d.%s.%s.weight", i, attn, k);
    return sd_weights_get(ws, n, SD_W_F32, 1, ne, true, &a->nk, NULL, err);
}

static rb_status bind_block(rb_mmdit *m, int i, rb_error *err) {
    sd_weights *ws = &m->ws;
    const rb_mmdit_config *c = &m->cfg;
    const int64_t D = m->dim, hd = c->head_dim;
    mmdit_block *b = &m->blocks[i];
    const char *T = "transformer_blocks";
    b->pre_only = i == c->num_layers - 1;
    b->dual = c->dual_attention[i];
    SD_TRY(bind_lin(ws, T, i, "norm1.linear", D, (b->dual ? 9 : 6) * D, &b->mod_x, err));
    SD_TRY(bind_lin(ws, T, i, "norm1_context.linear", D, (b->pre_only ? 2 : 6) * D, &b->mod_c, err));
    SD_TRY(bind_lin(ws, T, i, "attn.to_q", D, D, &b->x.q, err));
    SD_TRY(bind_lin(ws, T, i, "attn.to_k", D, D, &b->x.k, err));
    SD_TRY(bind_lin(ws, T, i, "attn.to_v", D, D, &b->x.v, err));
    SD_TRY(bind_lin(ws, T, i, "attn.to_out.0", D, D, &b->x.o, err));
    SD_TRY(bind_lin(ws, T, i, "attn.add_q_proj", D, D, &b->c.q, err));
    SD_TRY(bind_lin(ws, T, i, "attn.add_k_proj", D, D, &b->c.k, err));
    SD_TRY(bind_lin(ws, T, i, "attn.add_v_proj", D, D, &b->c.v, err));
    if (!b->pre_only) SD_TRY(bind_lin(ws, T, i, "attn.to_add_out", D, D, &b->c.o, err));
    if (c->qk_norm) {
        SD_TRY(bind_qk_norm(ws, i, "attn", "norm_q", "norm_k", hd, &b->x, err));
        SD_TRY(bind_qk_norm(ws, i, "attn", "norm_added_q", "norm_added_k", hd, &b->c, err));
    }
    if (b->dual) {
        SD_TRY(bind_lin(ws, T, i, "attn2.to_q", D, D, &b->x2.q, err));
        SD_TRY(bind_lin(ws, T, i, "attn2.to_k", D, D, &b->x2.k, err));
        SD_TRY(bind_lin(ws, T, i, "attn2.to_v", D, D, &b->x2.v, err));
        SD_TRY(bind_lin(ws, T, i, "attn2.to_out.0", D, D, &b->x2.o, err));
        if (c->qk_norm) SD_TRY(bind_qk_norm(ws, i, "attn2", "norm_q", "norm_k", hd, &b->x2, err));
    }
    SD_TRY(bind_lin(ws, T, i, "ff.net.0.proj", D, 4 * D, &b->ff1, err));
    SD_TRY(bind_lin(ws, T, i, "ff.net.2", 4 * D, D, &b->ff2, err));
    if (!b->pre_only) {
        SD_TRY(bind_lin(ws, T, i, "ff_context.net.0.proj", D, 4 * D, &b->cff1, err));
        SD_TRY(bind_lin(ws, T, i, "ff_context.net.2", 4 * D, D, &b->cff2, err));
    }
    return RB_OK;
}

static rb_status bind_all(rb_mmdit *m, rb_error *err) {
    sd_weights *ws = &m->ws;
    const rb_mmdit_config *c = &m->cfg;
    const int64_t D = m->dim, P = c->patch_size, M = c->pos_embed_max_size;
    SD_TRY(sd_bind_conv(ws, "pos_embed.proj", c->in_channels, D, (int)P, &m->patch, err));
    const int64_t pne[3] = {D, M * M, 1};
    SD_TRY(sd_weights_get(ws, "pos_embed.pos_embed", SD_W_F32, 3, pne, true, &m->pos, NULL, err));
    SD_TRY(bind_lin(ws, "time_text_embed.timestep_embedder.", -1, "linear_1", 256, D, &m->t1, err));
    SD_TRY(bind_lin(ws, "time_text_embed.timestep_embedder.", -1, "linear_2", D, D, &m->t2, err));
    SD_TRY(bind_lin(ws, "time_text_embed.text_embedder.", -1, "linear_1", c->pooled_projection_dim, D, &m->p1, err));
    SD_TRY(bind_lin(ws, "time_text_embed.text_embedder.", -1, "linear_2", D, D, &m->p2, err));
    SD_TRY(bind_lin(ws, "context_embedder", -1, "", c->joint_attention_dim, D, &m->ctx_emb, err));
    m->blocks = calloc((size_t)c->num_layers, sizeof *m->blocks);
    if (!m->blocks) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (int i = 0; i < c->num_layers; i++) SD_TRY(bind_block(m, i, err));
    SD_TRY(bind_lin(ws, "norm_out.linear", -1, "", D, 2 * D, &m->norm_out, err));
    return bind_lin(ws, "proj_out", -1, "", D, P * P * c->out_channels, &m->proj_out, err);
}

/* The ranges parse() enforces, for configs a loader of another layout filled. */
static bool config_ok(const rb_mmdit_config *c) {
    return c->num_layers >= 1 && c->num_layers <= RB_MMDIT_MAX_LAYERS && c->heads >= 1 && c->heads <= 1024 &&
           c->head_dim >= 1 && c->head_dim <= 4096 && c->patch_size >= 1 && c->patch_size <= 16 &&
           c->in_channels >= 1 && c->in_channels <= 4096 && c->out_channels >= 1 && c->out_channels <= 4096 &&
           c->joint_attention_dim >= 1 && c->joint_attention_dim <= (1 << 16) && c->pooled_projection_dim >= 1 &&
           c->pooled_projection_dim <= (1 << 16) && c->pos_embed_max_size >= 1 && c->pos_embed_max_size <= 4096 &&
           c->caption_projection_dim == c->heads * c->head_dim;
}

rb_status sd_mmdit_create(const rb_mmdit_config *cfg, sd_weights *ws, rb_mmdit **out, rb_error *err) {
    *out = NULL;
    if (!config_ok(cfg)) {
        sd_weights_close(ws);
        return rb_error_set(err, RB_E_INVALID, "mmdit: config values out of range");
    }
    rb_mmdit *m = calloc(1, sizeof *m);
    if (!m) {
        sd_weights_close(ws);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    m->cfg = *cfg;
    m->be = ws->be;
    m->ws = *ws;
    m->dim = (int64_t)cfg->heads * cfg->head_dim;
    rb_status s = bind_all(m, err);
    if (s != RB_OK) {
        rb_mmdit_free(m);
        return s;
    }
    sd_weights_release_files(&m->ws);
    *out = m;
    return RB_OK;
}

rb_status rb_mmdit_load(const char *dir, rb_backend *be, const rb_sd_load_opts *opts, rb_mmdit **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "mmdit: out is NULL");
    *out = NULL;
    if (!dir || !be) return rb_error_set(err, RB_E_INVALID, "mmdit: NULL argument");
    char path[1024];
    if (!sd_name(path, sizeof path, "%s/config.json", dir)) return rb_error_set(err, RB_E_INVALID, "path too long: %s", dir);
    if (opts) SD_TRY(sd_act_check(opts->act_dtype, "mmdit", err));
    rb_mmdit_config cfg;
    SD_TRY(rb_mmdit_config_load(path, &cfg, err));
    sd_weights ws;
    SD_TRY(sd_weights_open(&ws, dir, "diffusion_pytorch_model", be, opts, err));
    SD_TRY(sd_mmdit_create(&cfg, &ws, out, err));
    return opts ? rb_mmdit_set_act_dtype(*out, opts->act_dtype, err) : RB_OK;
}

void rb_mmdit_free(rb_mmdit *m) {
    if (!m) return;
    sd_scratch_free(&m->scratch);
    sd_weights_close(&m->ws);
    free(m->blocks);
    free(m);
}

const rb_mmdit_config *rb_mmdit_get_config(const rb_mmdit *m) { return m ? &m->cfg : NULL; }
size_t rb_mmdit_weight_bytes(const rb_mmdit *m) { return m ? m->ws.bytes : 0; }

rb_status rb_mmdit_set_act_dtype(rb_mmdit *m, rb_dtype dt, rb_error *err) {
    if (!m) return rb_error_set(err, RB_E_INVALID, "mmdit: NULL model");
    SD_TRY(sd_act_check(dt, "mmdit", err));
    m->scratch.act = dt;
    return RB_OK;
}

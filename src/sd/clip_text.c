/* The CLIP text encoder of the SD pipelines (transformers' CLIPTextModel and
 * CLIPTextModelWithProjection): token + position embeddings, pre-LayerNorm
 * layers with causal self-attention and a quick_gelu/gelu MLP, the final
 * LayerNorm, the pooled output at each sequence's EOS and its projection.
 * Any hidden state can be read out (SDXL uses the penultimate layer). */
#include "rbee/sd_model.h"
#include "sd/sd_blocks.h"
#include "sd/sd_nets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct clip_layer {
    sd_norm ln1, ln2;
    sd_attn attn;
    sd_linear fc1, fc2;
} clip_layer;

struct rb_clip_text {
    rb_clip_text_config cfg;
    rb_backend *be;
    sd_weights ws;
    rb_tensor tok_emb, pos_emb;
    clip_layer *layers;
    sd_norm final_ln;
    sd_linear proj;
    sd_scratch scratch;
};

#define NAMEF(buf, ...)                                                                                        \
    do {                                                                                                       \
        if (!sd_name(buf, sizeof buf, __VA_ARGS__)) return rb_error_set(err, RB_E_INVALID, "name too long");   \
    } while (0)

static rb_status bind(rb_clip_text *m, rb_error *err) {
    const rb_clip_text_config *c = &m->cfg;
    const int64_t D = c->hidden_size, F = c->intermediate_size;
    sd_weights *ws = &m->ws;
    char n[SD_NAME_MAX];
    const int64_t tne[2] = {D, c->vocab_size}, pne[2] = {D, c->max_positions};
    SD_TRY(sd_weights_get(ws, "text_model.embeddings.token_embedding.weight", SD_W_EMB, 2, tne, true, &m->tok_emb,
                          NULL, err));
    SD_TRY(sd_weights_get(ws, "text_model.embeddings.position_embedding.weight", SD_W_F32, 2, pne, true, &m->pos_emb,
                          NULL, err));
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < c->n_layers; i++) {
        clip_layer *L = &m->layers[i];
        const char *p = "text_model.encoder.layers";
        NAMEF(n, "%s.%lld.layer_norm1", p, (long long)i);
        SD_TRY(sd_bind_norm(ws, n, D, &L->ln1, err));
        NAMEF(n, "%s.%lld.layer_norm2", p, (long long)i);
        SD_TRY(sd_bind_norm(ws, n, D, &L->ln2, err));
        L->attn.heads = (int)c->n_heads;
        NAMEF(n, "%s.%lld.self_attn.q_proj", p, (long long)i);
        SD_TRY(sd_bind_linear(ws, n, D, D, true, &L->attn.q, err));
        NAMEF(n, "%s.%lld.self_attn.k_proj", p, (long long)i);
        SD_TRY(sd_bind_linear(ws, n, D, D, true, &L->attn.k, err));
        NAMEF(n, "%s.%lld.self_attn.v_proj", p, (long long)i);
        SD_TRY(sd_bind_linear(ws, n, D, D, true, &L->attn.v, err));
        NAMEF(n, "%s.%lld.self_attn.out_proj", p, (long long)i);
        SD_TRY(sd_bind_linear(ws, n, D, D, true, &L->attn.o, err));
        NAMEF(n, "%s.%lld.mlp.fc1", p, (long long)i);
        SD_TRY(sd_bind_linear(ws, n, D, F, true, &L->fc1, err));
        NAMEF(n, "%s.%lld.mlp.fc2", p, (long long)i);
        SD_TRY(sd_bind_linear(ws, n, F, D, true, &L->fc2, err));
    }
    SD_TRY(sd_bind_norm(ws, "text_model.final_layer_norm", D, &m->final_ln, err));
    if (c->with_projection) SD_TRY(sd_bind_linear(ws, "text_projection", D, c->projection_dim, false, &m->proj, err));
    return RB_OK;
}

rb_status sd_clip_text_create(const rb_clip_text_config *cfg, sd_weights *ws, rb_clip_text **out, rb_error *err) {
    *out = NULL;
    if (cfg->hidden_size < 1 || cfg->n_heads < 1 || cfg->hidden_size % cfg->n_heads || cfg->n_layers < 1 ||
        cfg->n_layers > 1024 || cfg->intermediate_size < 1 || cfg->vocab_size < 1 || cfg->max_positions < 1 ||
        (cfg->with_projection && cfg->projection_dim < 1) || !(cfg->eps > 0.0f)) {
        sd_weights_close(ws);
        return rb_error_set(err, RB_E_INVALID, "clip text: config values out of range");
    }
    rb_clip_text *m = calloc(1, sizeof *m);
    if (!m) {
        sd_weights_close(ws);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    m->cfg = *cfg;
    m->be = ws->be;
    m->ws = *ws;
    rb_status s = bind(m, err);
    if (s != RB_OK) {
        rb_clip_text_free(m);
        return s;
    }
    sd_weights_release_files(&m->ws);
    *out = m;
    return RB_OK;
}

rb_status rb_clip_text_load(const char *dir, rb_backend *be, const rb_sd_load_opts *opts, rb_clip_text **out,
                            rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "clip text: out is NULL");
    *out = NULL;
    if (!dir || !be) return rb_error_set(err, RB_E_INVALID, "clip text: NULL argument");
    char path[1024];
    if (!sd_name(path, sizeof path, "%s/config.json", dir)) return rb_error_set(err, RB_E_INVALID, "path too long: %s", dir);
    rb_clip_text_config cfg;
    if (opts) SD_TRY(sd_act_check(opts->act_dtype, "clip text", err));
    SD_TRY(rb_clip_text_config_load(path, &cfg, err));
    sd_weights ws;
    SD_TRY(sd_weights_open(&ws, dir, "model", be, opts, err));
    SD_TRY(sd_clip_text_create(&cfg, &ws, out, err));
    if (opts) (*out)->scratch.act = opts->act_dtype;
    return RB_OK;
}

rb_status rb_clip_text_set_act_dtype(rb_clip_text *m, rb_dtype dt, rb_error *err) {
    if (!m) return rb_error_set(err, RB_E_INVALID, "clip text: NULL model");
    SD_TRY(sd_act_check(dt, "clip text", err));
    m->scratch.act = dt;
    return RB_OK;
}

rb_dtype rb_clip_text_act_dtype(const rb_clip_text *m) { return m ? m->scratch.act : RB_F32; }

void rb_clip_text_free(rb_clip_text *m) {
    if (!m) return;
    sd_scratch_free(&m->scratch);
    sd_weights_close(&m->ws);
    free(m->layers);
    free(m);
}

const rb_clip_text_config *rb_clip_text_get_config(const rb_clip_text *m) { return m ? &m->cfg : NULL; }
size_t rb_clip_text_weight_bytes(const rb_clip_text *m) { return m ? m->ws.bytes : 0; }

/* ---- forward ---- */

typedef struct enc_ctx {
    rb_clip_text *m;
    const int32_t *ids;
    const int64_t *eos_pos; /* per sequence */
    int64_t T, B;
    int hidden_index; /* resolved, 0..n_layers, or -1 when not requested */
    int n_run;        /* layers to run */
    const rb_clip_text_outputs *out;
} enc_ctx;

static rb_status act_fwd(sd_run *r, rb_clip_act act, rb_tensor *h) {
    if (act == RB_CLIP_ACT_GELU) {
        SD_OP(r, rb_unary(r->be, RB_UNARY_GELU, h, h));
    } else if (act == RB_CLIP_ACT_GELU_TANH) {
        SD_OP(r, rb_unary(r->be, RB_UNARY_GELU_TANH, h, h));
    } else { /* quick_gelu: x * sigmoid(1.702 x) */
        const size_t mk = sd_mark(r);
        rb_tensor s = sd_stack(r, h->ne[0], h->ne[1], h->ne[2], 1);
        SD_OP(r, rb_affine(r->be, &s, h, 1.702f, 0.0f));
        SD_OP(r, rb_unary(r->be, RB_UNARY_SIGMOID, &s, &s));
        SD_OP(r, rb_binary(r->be, RB_BINARY_MUL, h, h, &s));
        sd_release(r, mk);
    }
    return RB_OK;
}

static rb_status layer_fwd(sd_run *r, const rb_clip_text_config *c, const clip_layer *L, rb_tensor *x) {
    const int64_t D = x->ne[0], T = x->ne[1], B = x->ne[2];
    const size_t mk = sd_mark(r);
    rb_tensor n = sd_stack(r, D, T, B, 1), h = sd_stack(r, c->intermediate_size, T, B, 1);
    SD_OP(r, rb_layer_norm(r->be, &n, x, &L->ln1.w, &L->ln1.b, c->eps));
    SD_TRY(sd_attn_fwd(r, &L->attn, x, &n, NULL, true));
    SD_OP(r, rb_layer_norm(r->be, &n, x, &L->ln2.w, &L->ln2.b, c->eps));
    if (c->act == RB_CLIP_ACT_GELU || c->act == RB_CLIP_ACT_GELU_TANH) { /* the activation in fc1's epilogue */
        const rb_linear_epilogue ep = sd_ep_act(c->act == RB_CLIP_ACT_GELU ? RB_UNARY_GELU : RB_UNARY_GELU_TANH);
        SD_TRY(sd_linear_fwd_ep(r, &L->fc1, &h, &n, &ep));
    } else {
        SD_TRY(sd_linear_fwd(r, &L->fc1, &h, &n));
        SD_TRY(act_fwd(r, c->act, &h));
    }
    const rb_linear_epilogue res = sd_ep_res(x);
    SD_TRY(sd_linear_fwd_ep(r, &L->fc2, x, &h, &res));
    sd_release(r, mk);
    return RB_OK;
}

/* o->hidden = x, or final_layer_norm(x) when o->hidden_final_norm. */
static rb_status put_hidden(sd_run *r, const rb_clip_text *m, const rb_clip_text_outputs *o, const rb_tensor *x) {
    if (!o->hidden_final_norm) {
        SD_OP(r, rb_cast(r->be, o->hidden, x));
        return RB_OK;
    }
    const size_t mk = sd_mark(r);
    rb_tensor f = sd_stack(r, x->ne[0], x->ne[1], x->ne[2], 1);
    SD_OP(r, rb_layer_norm(r->be, &f, x, &m->final_ln.w, &m->final_ln.b, m->cfg.eps));
    SD_OP(r, rb_cast(r->be, o->hidden, &f));
    sd_release(r, mk);
    return RB_OK;
}

static rb_status encode_pass(sd_run *r, void *arg) {
    enc_ctx *e = arg;
    rb_clip_text *m = e->m;
    const rb_clip_text_config *c = &m->cfg;
    const int64_t D = c->hidden_size, T = e->T, B = e->B;
    const rb_clip_text_outputs *o = e->out;
    rb_tensor ids = sd_stack_i32(r, T, B), x = sd_stack(r, D, T, B, 1);
    SD_TRY(sd_upload(r, &ids, e->ids, sizeof(int32_t) * (size_t)(T * B)));
    SD_OP(r, rb_get_rows(r->be, &x, &m->tok_emb, &ids));
    rb_tensor pos = sd_slice(&m->pos_emb, 1, 0, T);
    SD_OP(r, rb_binary(r->be, RB_BINARY_ADD, &x, &x, &pos));
    if (e->hidden_index == 0) SD_TRY(put_hidden(r, m, o, &x));
    for (int l = 0; l < e->n_run; l++) {
        SD_TRY(layer_fwd(r, c, &m->layers[l], &x));
        if (e->hidden_index == l + 1) SD_TRY(put_hidden(r, m, o, &x));
    }
    if (!o->last_hidden && !o->pooled && !o->text_embeds) return RB_OK;
    rb_tensor f = sd_stack(r, D, T, B, 1), pooled = sd_stack(r, D, B, 1, 1);
    SD_OP(r, rb_layer_norm(r->be, &f, &x, &m->final_ln.w, &m->final_ln.b, c->eps));
    if (o->last_hidden) SD_OP(r, rb_cast(r->be, o->last_hidden, &f));
    if (!o->pooled && !o->text_embeds) return RB_OK;
    for (int64_t b = 0; b < B; b++) {
        rb_tensor src = sd_slice(&f, 1, e->eos_pos[b], 1);
        src = sd_slice(&src, 2, b, 1);
        rb_tensor dst = sd_reshape(&pooled, D, B, 1, 1);
        dst = sd_slice(&dst, 1, b, 1);
        SD_OP(r, rb_cast(r->be, &dst, &src));
    }
    if (o->pooled) SD_OP(r, rb_cast(r->be, o->pooled, &pooled));
    if (o->text_embeds) SD_TRY(sd_linear_fwd(r, &m->proj, o->text_embeds, &pooled));
    return RB_OK;
}

static rb_status check_out(const rb_tensor *t, const char *what, int64_t ne0, int64_t ne1, int64_t ne2,
                           rb_error *err) {
    if (!t) return RB_OK;
    if (t->dtype != RB_F32 || t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1) {
        char d[96];
        return rb_error_set(err, RB_E_INVALID, "clip text: %s is %s, expected f32[%lld,%lld,%lld,1]", what,
                            rb_tensor_describe(t, d, sizeof d), (long long)ne0, (long long)ne1, (long long)ne2);
    }
    return RB_OK;
}

rb_status rb_clip_text_encode(rb_clip_text *m, const int32_t *ids, int64_t T, int64_t B,
                              const rb_clip_text_outputs *out, rb_error *err) {
    if (!m || !ids || !out) return rb_error_set(err, RB_E_INVALID, "clip text: NULL argument");
    const rb_clip_text_config *c = &m->cfg;
    if (T < 1 || T > c->max_positions || B < 1 || B > 4096)
        return rb_error_set(err, RB_E_INVALID, "clip text: %lld tokens x %lld sequences (1..%lld tokens)",
                            (long long)T, (long long)B, (long long)c->max_positions);
    const int64_t D = c->hidden_size;
    SD_TRY(check_out(out->hidden, "hidden", D, T, B, err));
    SD_TRY(check_out(out->last_hidden, "last_hidden", D, T, B, err));
    SD_TRY(check_out(out->pooled, "pooled", D, B, 1, err));
    SD_TRY(check_out(out->text_embeds, "text_embeds", c->projection_dim, B, 1, err));
    if (out->text_embeds && !c->with_projection)
        return rb_error_set(err, RB_E_INVALID, "clip text: text_embeds needs a CLIPTextModelWithProjection");
    enc_ctx e = {.m = m, .ids = ids, .T = T, .B = B, .hidden_index = -1, .out = out};
    if (out->hidden) {
        int64_t hi = out->hidden_index < 0 ? c->n_layers + 1 + out->hidden_index : out->hidden_index;
        if (hi < 0 || hi > c->n_layers)
            return rb_error_set(err, RB_E_RANGE, "clip text: hidden_index %d outside [%lld, %lld]", out->hidden_index,
                                (long long)-(c->n_layers + 1), (long long)c->n_layers);
        e.hidden_index = (int)hi;
        e.n_run = (int)hi;
    }
    if (out->last_hidden || out->pooled || out->text_embeds) e.n_run = (int)c->n_layers;
    int64_t *eos = malloc(sizeof(int64_t) * (size_t)B);
    if (!eos) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (int64_t b = 0; b < B; b++) {
        const int32_t *row = ids + b * T;
        int64_t best = 0, first_eos = -1;
        for (int64_t t = 0; t < T; t++) {
            if (row[t] < 0 || row[t] >= c->vocab_size) {
                free(eos);
                return rb_error_set(err, RB_E_RANGE, "clip text: token id %d (sequence %lld, position %lld) outside "
                                    "the vocabulary of %lld", (int)row[t], (long long)b, (long long)t,
                                    (long long)c->vocab_size);
            }
            if (row[t] > row[best]) best = t;
            if (first_eos < 0 && row[t] == c->eos_id) first_eos = t;
        }
        /* transformers: argmax(ids) for the legacy eos id 2, else the first eos (position 0 if none) */
        eos[b] = c->eos_id == 2 ? best : (first_eos < 0 ? 0 : first_eos);
    }
    e.eos_pos = eos;
    rb_status s = sd_run_passes(m->be, &m->scratch, encode_pass, &e, err);
    free(eos);
    return s;
}

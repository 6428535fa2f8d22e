/* The T5 encoder of SD3 (transformers' T5EncoderModel) on the core ops:
 * token embedding (not scaled), per layer RMSNorm -> self-attention with
 * no 1/sqrt(d) scaling plus a bidirectional relative position bias (layer
 * 0's table, shared by every layer) -> residual, RMSNorm -> gated-GELU
 * (wo(gelu_tanh(wi_0 x) * wi_1 x)) or ReLU (wo(relu(wi x))) feed-forward ->
 * residual, then the final RMSNorm. Every position attends to every other
 * (no padding mask, as the SD3 pipeline calls it). */
#include "rbee/sd_t5.h"
#include "sd/sd_blocks.h"
#include "sd/sd_nets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct t5_layer {
    rb_tensor ln0, ln1; /* RMSNorm weights [d_model] */
    sd_linear q, k, v, o;
    sd_linear wi0, wi1, wo; /* gated: wi_0, wi_1; relu: wi in wi0 */
} t5_layer;

struct rb_t5 {
    rb_t5_config cfg;
    rb_backend *be;
    sd_weights ws;
    rb_tensor emb, rel_bias; /* emb [d_model, vocab]; rel_bias [heads, buckets] f32 */
    t5_layer *layers;
    rb_tensor final_ln;
    sd_scratch scratch;
};

#define NAMEF(buf, ...)                                                                                        \
    do {                                                                                                       \
        if (!sd_name(buf, sizeof buf, __VA_ARGS__)) return rb_error_set(err, RB_E_INVALID, "name too long");   \
    } while (0)

static rb_status bind_vec(sd_weights *ws, const char *name, int64_t n, rb_tensor *t, rb_error *err) {
    const int64_t ne[1] = {n};
    return sd_weights_get(ws, name, SD_W_F32, 1, ne, true, t, NULL, err);
}

static rb_status bind(rb_t5 *m, rb_error *err) {
    const rb_t5_config *c = &m->cfg;
    const int64_t D = c->d_model, I = c->d_kv * c->n_heads, F = c->d_ff;
    sd_weights *ws = &m->ws;
    char n[SD_NAME_MAX];
    const int64_t ene[2] = {D, c->vocab_size}, rne[2] = {c->n_heads, c->rel_buckets};
    bool present = false;
    SD_TRY(sd_weights_get(ws, "shared.weight", SD_W_EMB, 2, ene, false, &m->emb, &present, err));
    if (!present) SD_TRY(sd_weights_get(ws, "encoder.embed_tokens.weight", SD_W_EMB, 2, ene, true, &m->emb, NULL, err));
    SD_TRY(sd_weights_get(ws, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", SD_W_F32, 2, rne,
                          true, &m->rel_bias, NULL, err));
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < c->n_layers; i++) {
        t5_layer *L = &m->layers[i];
        const long long li = (long long)i;
        NAMEF(n, "encoder.block.%lld.layer.0.layer_norm.weight", li);
        SD_TRY(bind_vec(ws, n, D, &L->ln0, err));
        NAMEF(n, "encoder.block.%lld.layer.1.layer_norm.weight", li);
        SD_TRY(bind_vec(ws, n, D, &L->ln1, err));
        NAMEF(n, "encoder.block.%lld.layer.0.SelfAttention.q", li);
        SD_TRY(sd_bind_linear(ws, n, D, I, false, &L->q, err));
        NAMEF(n, "encoder.block.%lld.layer.0.SelfAttention.k", li);
        SD_TRY(sd_bind_linear(ws, n, D, I, false, &L->k, err));
        NAMEF(n, "encoder.block.%lld.layer.0.SelfAttention.v", li);
        SD_TRY(sd_bind_linear(ws, n, D, I, false, &L->v, err));
        NAMEF(n, "encoder.block.%lld.layer.0.SelfAttention.o", li);
        SD_TRY(sd_bind_linear(ws, n, I, D, false, &L->o, err));
        if (c->gated) {
            NAMEF(n, "encoder.block.%lld.layer.1.DenseReluDense.wi_0", li);
            SD_TRY(sd_bind_linear(ws, n, D, F, false, &L->wi0, err));
            NAMEF(n, "encoder.block.%lld.layer.1.DenseReluDense.wi_1", li);
            SD_TRY(sd_bind_linear(ws, n, D, F, false, &L->wi1, err));
        } else {
            NAMEF(n, "encoder.block.%lld.layer.1.DenseReluDense.wi", li);
            SD_TRY(sd_bind_linear(ws, n, D, F, false, &L->wi0, err));
        }
        NAMEF(n, "encoder.block.%lld.layer.1.DenseReluDense.wo", li);
        SD_TRY(sd_bind_linear(ws, n, F, D, false, &L->wo, err));
    }
    return bind_vec(ws, "encoder.final_layer_norm.weight", D, &m->final_ln, err);
}

static bool cfg_ok(const rb_t5_config *c) {
    return c->vocab_size >= 1 && c->d_model >= 1 && c->d_kv >= 1 && c->d_ff >= 1 && c->n_layers >= 1 &&
           c->n_layers <= 1024 && c->n_heads >= 1 && c->n_heads <= 1024 && c->rel_buckets >= 4 &&
           c->rel_max_distance >= 1 && c->eps > 0.0f;
}

rb_status sd_t5_create(const rb_t5_config *cfg, sd_weights *ws, rb_t5 **out, rb_error *err) {
    *out = NULL;
    if (!cfg_ok(cfg)) {
        sd_weights_close(ws);
        return rb_error_set(err, RB_E_INVALID, "t5: config values out of range");
    }
    rb_t5 *m = calloc(1, sizeof *m);
    if (!m) {
        sd_weights_close(ws);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    m->cfg = *cfg;
    m->be = ws->be;
    m->ws = *ws;
    rb_status s = bind(m, err);
    if (s != RB_OK) {
        rb_t5_free(m);
        return s;
    }
    sd_weights_release_files(&m->ws);
    *out = m;
    return RB_OK;
}

rb_status rb_t5_load(const char *dir, rb_backend *be, const rb_sd_load_opts *opts, rb_t5 **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "t5: out is NULL");
    *out = NULL;
    if (!dir || !be) return rb_error_set(err, RB_E_INVALID, "t5: NULL argument");
    char path[1024];
    if (!sd_name(path, sizeof path, "%s/config.json", dir)) return rb_error_set(err, RB_E_INVALID, "path too long: %s", dir);
    if (opts) SD_TRY(sd_act_check(opts->act_dtype, "t5", err));
    rb_t5_config cfg;
    SD_TRY(rb_t5_config_load(path, &cfg, err));
    sd_weights ws;
    SD_TRY(sd_weights_open(&ws, dir, "model", be, opts, err));
    SD_TRY(sd_t5_create(&cfg, &ws, out, err));
    if (opts) (*out)->scratch.act = opts->act_dtype;
    return RB_OK;
}

void rb_t5_free(rb_t5 *m) {
    if (!m) return;
    sd_scratch_free(&m->scratch);
    sd_weights_close(&m->ws);
    free(m->layers);
    free(m);
}

const rb_t5_config *rb_t5_get_config(const rb_t5 *m) { return m ? &m->cfg : NULL; }
size_t rb_t5_weight_bytes(const rb_t5 *m) { return m ? m->ws.bytes : 0; }

rb_status rb_t5_set_act_dtype(rb_t5 *m, rb_dtype dt, rb_error *err) {
    if (!m) return rb_error_set(err, RB_E_INVALID, "t5: NULL model");
    SD_TRY(sd_act_check(dt, "t5", err));
    m->scratch.act = dt;
    return RB_OK;
}

/* ---- forward ---- */

/* T5's bidirectional bucket of a relative position (key - query): half the
 * buckets for positive offsets; in each half, exact buckets below
 * max_exact = n/2, then logarithmic bins up to max_distance (computed in
 * float32 as transformers does, then truncated). */
static int32_t rel_bucket(int64_t rel, int64_t num_buckets, int64_t max_distance) {
    int64_t nb = num_buckets / 2, b = 0;
    if (rel > 0) b += nb;
    const int64_t a = rel < 0 ? -rel : rel;
    const int64_t max_exact = nb / 2;
    if (a < max_exact) return (int32_t)(b + a);
    const float x = logf((float)a / (float)max_exact) / (float)log((double)max_distance / (double)max_exact) *
                    (float)(nb - max_exact);
    int64_t large = max_exact + (int64_t)x;
    if (large > nb - 1) large = nb - 1;
    return (int32_t)(b + large);
}

typedef struct enc_ctx {
    rb_t5 *m;
    const int32_t *ids, *buckets;
    int64_t T, B;
    rb_tensor *out;
} enc_ctx;

/* res += o(attention(q(n), k(n), v(n)) + bias), head by head (each head has its own bias plane). */
static rb_status attn_fwd(sd_run *r, const rb_t5_config *c, const t5_layer *L, rb_tensor *x, const rb_tensor *n,
                          const rb_tensor *bias) {
    const int64_t T = x->ne[1], B = x->ne[2], H = c->n_heads, dk = c->d_kv, I = dk * H;
    const size_t mk = sd_mark(r);
    rb_tensor q = sd_stack(r, I, T, B, 1), k = sd_stack(r, I, T, B, 1), v = sd_stack(r, I, T, B, 1);
    rb_tensor o = sd_stack(r, I, T, B, 1), oh = sd_stack(r, dk, 1, T, B);
    SD_TRY(sd_linear_fwd(r, &L->q, &q, n));
    SD_TRY(sd_linear_fwd(r, &L->k, &k, n));
    SD_TRY(sd_linear_fwd(r, &L->v, &v, n));
    /* [H*dk, T, B] seen as [dk, T, H, B] */
    const rb_tensor *src[3] = {&q, &k, &v};
    rb_tensor hv[3];
    for (int i = 0; i < 3; i++) {
        rb_tensor t = *src[i];
        t.ne[0] = dk;
        t.ne[1] = H;
        t.ne[2] = T;
        t.ne[3] = B;
        t.nb[1] = src[i]->nb[0] * (size_t)dk;
        t.nb[2] = src[i]->nb[1];
        t.nb[3] = src[i]->nb[2];
        hv[i] = sd_permute(&t, 0, 2, 1, 3);
    }
    rb_tensor ov = o; /* [dk, H, T, B] */
    ov.ne[0] = dk;
    ov.ne[1] = H;
    ov.ne[2] = T;
    ov.ne[3] = B;
    ov.nb[1] = o.nb[0] * (size_t)dk;
    ov.nb[2] = o.nb[1];
    ov.nb[3] = o.nb[2];
    rb_attn_params p;
    memset(&p, 0, sizeof p);
    p.scale = 1.0f;
    for (int64_t h = 0; h < H; h++) {
        rb_tensor qh = sd_slice(&hv[0], 2, h, 1), kh = sd_slice(&hv[1], 2, h, 1), vh = sd_slice(&hv[2], 2, h, 1);
        rb_tensor mask = sd_slice(bias, 2, h, 1);
        p.mask = &mask;
        SD_OP(r, rb_attention(r->be, &oh, &qh, &kh, &vh, &p));
        rb_tensor dst = sd_slice(&ov, 1, h, 1);
        SD_OP(r, rb_cast(r->be, &dst, &oh));
    }
    const rb_linear_epilogue res = sd_ep_res(x);
    SD_TRY(sd_linear_fwd_ep(r, &L->o, x, &o, &res));
    sd_release(r, mk);
    return RB_OK;
}

static rb_status ff_fwd(sd_run *r, const rb_t5_config *c, const t5_layer *L, rb_tensor *x, const rb_tensor *n) {
    const int64_t T = x->ne[1], B = x->ne[2], F = c->d_ff;
    const size_t mk = sd_mark(r);
    rb_tensor g = sd_stack(r, F, T, B, 1);
    if (c->gated) {
        rb_tensor u = sd_stack(r, F, T, B, 1);
        SD_TRY(sd_linear_fwd(r, &L->wi0, &g, n));
        SD_TRY(sd_linear_fwd(r, &L->wi1, &u, n));
        SD_OP(r, rb_glu(r->be, &g, &g, &u, RB_UNARY_GELU_TANH)); /* gelu_tanh(wi_0 x) * wi_1 x */
    } else {
        const rb_linear_epilogue relu = sd_ep_act(RB_UNARY_RELU);
        SD_TRY(sd_linear_fwd_ep(r, &L->wi0, &g, n, &relu));
    }
    const rb_linear_epilogue res = sd_ep_res(x);
    SD_TRY(sd_linear_fwd_ep(r, &L->wo, x, &g, &res));
    sd_release(r, mk);
    return RB_OK;
}

static rb_status encode_pass(sd_run *r, void *arg) {
    enc_ctx *e = arg;
    rb_t5 *m = e->m;
    const rb_t5_config *c = &m->cfg;
    const int64_t D = c->d_model, T = e->T, B = e->B, H = c->n_heads;
    rb_tensor ids = sd_stack_i32(r, T, B), x = sd_stack(r, D, T, B, 1), n = sd_stack(r, D, T, B, 1);
    SD_TRY(sd_upload(r, &ids, e->ids, sizeof(int32_t) * (size_t)(T * B)));
    SD_OP(r, rb_get_rows(r->be, &x, &m->emb, &ids));
    /* the position bias [Tk, Tq, H] (f32): table rows gathered by bucket, then transposed */
    rb_tensor bias = sd_stack_f32(r, T, T, H, 1);
    {
        const size_t mk = sd_mark(r);
        rb_tensor bids = sd_stack_i32(r, T * T, 1), rows = sd_stack_f32(r, H, T * T, 1, 1);
        SD_TRY(sd_upload(r, &bids, e->buckets, sizeof(int32_t) * (size_t)(T * T)));
        SD_OP(r, rb_get_rows(r->be, &rows, &m->rel_bias, &bids));
        rb_tensor rv = sd_reshape(&rows, H, T, T, 1); /* [H, Tk, Tq] */
        rb_tensor pv = sd_permute(&rv, 1, 2, 0, 3);   /* [Tk, Tq, H] */
        SD_OP(r, rb_cast(r->be, &bias, &pv));
        sd_release(r, mk);
    }
    for (int64_t l = 0; l < c->n_layers; l++) {
        const t5_layer *L = &m->layers[l];
        SD_OP(r, rb_rms_norm(r->be, &n, &x, &L->ln0, c->eps));
        SD_TRY(attn_fwd(r, c, L, &x, &n, &bias));
        SD_OP(r, rb_rms_norm(r->be, &n, &x, &L->ln1, c->eps));
        SD_TRY(ff_fwd(r, c, L, &x, &n));
    }
    SD_OP(r, rb_rms_norm(r->be, &n, &x, &m->final_ln, c->eps));
    SD_OP(r, rb_cast(r->be, e->out, &n));
    return RB_OK;
}

rb_status rb_t5_encode(rb_t5 *m, const int32_t *ids, int64_t T, int64_t B, rb_tensor *last_hidden, rb_error *err) {
    if (!m || !ids || !last_hidden) return rb_error_set(err, RB_E_INVALID, "t5: NULL argument");
    const rb_t5_config *c = &m->cfg;
    if (T < 1 || T > 8192 || B < 1 || B > 4096)
        return rb_error_set(err, RB_E_INVALID, "t5: %lld tokens x %lld sequences (1..8192 tokens)", (long long)T,
                            (long long)B);
    const rb_tensor *t = last_hidden;
    if (t->dtype != RB_F32 || t->ne[0] != c->d_model || t->ne[1] != T || t->ne[2] != B || t->ne[3] != 1) {
        char d[96];
        return rb_error_set(err, RB_E_INVALID, "t5: last_hidden is %s, expected f32[%lld,%lld,%lld,1]",
                            rb_tensor_describe(t, d, sizeof d), (long long)c->d_model, (long long)T, (long long)B);
    }
    for (int64_t i = 0; i < T * B; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return rb_error_set(err, RB_E_RANGE, "t5: token id %d (position %lld) outside the vocabulary of %lld",
                                (int)ids[i], (long long)i, (long long)c->vocab_size);
    int32_t *buckets = malloc(sizeof(int32_t) * (size_t)(T * T));
    if (!buckets) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (int64_t q = 0; q < T; q++)
        for (int64_t k = 0; k < T; k++) buckets[q * T + k] = rel_bucket(k - q, c->rel_buckets, c->rel_max_distance);
    enc_ctx e = {.m = m, .ids = ids, .buckets = buckets, .T = T, .B = B, .out = last_hidden};
    rb_status s = sd_run_passes(m->be, &m->scratch, encode_pass, &e, err);
    free(buckets);
    return s;
}

/* Binds a model's weight tensors by name from a GGUF file (llama.cpp names)
 * or a safetensors set (Hugging Face names), checking every shape against the
 * config, and places them on the model's backend: wrapped in place on the
 * CPU (the file stays memory-mapped), uploaded elsewhere.
 *
 * Where weights are uploaded anyway (the backend's buffers are not host
 * memory: GPUs), separate q/k/v and gate/up projections are uploaded as one
 * matrix each (wqkv = [q rows | k rows | v rows], w_gate_up = [gate | up],
 * biases likewise) and the config's fused_qkv / fused_gate_up set, so a layer
 * runs two matrix products and launches fewer. This needs the parts to share
 * one dtype (the bytes then concatenate into a well-formed matrix, block
 * formats included): q/k/v are joined layer by layer where they do (a k-quant
 * mix promotes attn_v in some layers only), gate/up only if they do in every
 * layer. The CPU keeps
 * the mapped, unfused tensors (no copies). The load option fuse_proj
 * (rb_model_load_opts) forces the fusion (on the CPU too: for tests) or
 * turns it off. */
#include "models/model_internal.h"
#include "rbee/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CAT 3 /* parts of one fused tensor: q, k, v */

rb_status rb_model_own_buffer(rb_model *m, rb_buffer *buf) {
    if (m->n_bufs == m->cap_bufs) {
        size_t cap = m->cap_bufs ? m->cap_bufs * 2 : 64;
        rb_buffer **nb = realloc(m->bufs, cap * sizeof *nb);
        if (!nb) return RB_E_NOMEM;
        m->bufs = nb;
        m->cap_bufs = cap;
    }
    m->bufs[m->n_bufs++] = buf;
    return RB_OK;
}

/* A weight found in a file: dtype, ggml-order shape, data. */
typedef struct found_weight {
    rb_dtype dtype;
    int n_dims;
    int64_t ne[RB_MAX_DIMS];
    const void *data;
    size_t nbytes;
} found_weight;

static bool find_weight(const rb_model *m, const char *name, found_weight *fw) {
    if (m->gguf) {
        const rb_gguf_tensor_info *ti = rb_gguf_find_tensor(m->gguf, name);
        if (!ti) return false;
        fw->dtype = ti->dtype;
        fw->n_dims = ti->n_dims;
        memcpy(fw->ne, ti->ne, sizeof fw->ne);
        fw->data = ti->data;
        fw->nbytes = ti->nbytes;
        return true;
    }
    const rb_st_tensor *t = rb_st_find(m->st, name);
    if (!t) return false;
    fw->dtype = t->dtype;
    fw->n_dims = t->n_dims;
    memcpy(fw->ne, t->ne, sizeof fw->ne);
    fw->data = t->data;
    fw->nbytes = t->nbytes;
    return true;
}

static rb_status place(rb_model *m, const found_weight *fw, rb_tensor *out, rb_error *err) {
    rb_buffer *buf = NULL;
    rb_status s = rb_buffer_from_host(m->be, (void *)fw->data, fw->nbytes, &buf);
    if (s != RB_OK)
        return rb_error_set(err, s, "cannot place weights on %s: %s", rb_backend_name(m->be),
                            rb_backend_last_error(m->be));
    if ((s = rb_model_own_buffer(m, buf)) != RB_OK) {
        rb_buffer_free(buf);
        return rb_error_set(err, s, "out of memory");
    }
    int nd = fw->n_dims < 1 ? 1 : fw->n_dims;
    s = rb_tensor_init(out, fw->dtype, nd, fw->ne, buf, 0);
    if (s != RB_OK) return rb_error_set(err, RB_E_FORMAT, "bad tensor shape");
    m->weight_bytes += fw->nbytes;
    return RB_OK;
}

/* Checks a found weight's dtype and that its shape is {ne0, ne1}. */
static rb_status check_found(const char *name, const found_weight *fw, int64_t ne0, int64_t ne1, rb_error *err) {
    const rb_dtype_traits *tr = rb_dtype_info((int)fw->dtype);
    if (!tr || fw->dtype == RB_I8 || fw->dtype == RB_I16 || fw->dtype == RB_I32 || fw->dtype == RB_I64 ||
        fw->dtype == RB_F64 || fw->dtype == RB_Q8_K)
        return rb_error_set(err, RB_E_UNSUPPORTED, "tensor '%s' has unsupported dtype %s", name,
                            rb_dtype_name(fw->dtype));
    if (fw->ne[0] != ne0 || fw->ne[1] != ne1 || fw->ne[2] != 1 || fw->ne[3] != 1)
        return rb_error_set(err, RB_E_FORMAT, "tensor '%s' has shape [%lld,%lld,%lld,%lld], expected [%lld,%lld]",
                            name, (long long)fw->ne[0], (long long)fw->ne[1], (long long)fw->ne[2],
                            (long long)fw->ne[3], (long long)ne0, (long long)ne1);
    return RB_OK;
}

/* Finds `name` and checks its shape is {ne0, ne1} (ne1 = 1 for vectors). */
static rb_status bind(rb_model *m, const char *name, int64_t ne0, int64_t ne1, bool required, rb_tensor *out,
                      bool *present, rb_error *err) {
    found_weight fw;
    if (present) *present = false;
    if (!find_weight(m, name, &fw)) {
        if (!required) return RB_OK;
        return rb_error_set(err, RB_E_FORMAT, "missing tensor '%s'", name);
    }
    rb_status s = check_found(name, &fw, ne0, ne1, err);
    if (s == RB_OK) s = place(m, &fw, out, err);
    if (s == RB_OK && present) *present = true;
    return s;
}

/* Replaces vector t by an f32 copy of w + add: gemma's HF norms compute
 * x * (1 + w) where GGUF stores 1 + w (add 1); attention sinks, which the
 * attention op reads as f32, from bf16/f16 checkpoints (add 0). */
static rb_status f32_copy_plus(rb_model *m, rb_tensor *t, float add, rb_error *err) {
    int64_t n = t->ne[0];
    float *tmp = malloc(sizeof(float) * (size_t)n);
    if (!tmp) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    void *src = NULL;
    rb_status s = RB_OK;
    size_t nbytes = rb_dtype_row_size(t->dtype, n);
    src = malloc(nbytes);
    if (!src) { free(tmp); return rb_error_set(err, RB_E_NOMEM, "out of memory"); }
    if ((s = rb_tensor_get(t, src, nbytes)) == RB_OK) s = rb_dequantize_row(t->dtype, src, tmp, n);
    free(src);
    if (s != RB_OK) { free(tmp); return rb_error_set(err, s, "cannot read norm weights"); }
    for (int64_t i = 0; i < n; i++) tmp[i] += add;
    rb_tensor nt;
    const int64_t ne[1] = {n};
    if ((s = rb_tensor_alloc(m->be, RB_F32, 1, ne, &nt)) != RB_OK) { free(tmp); return rb_error_set(err, s, "out of memory"); }
    s = rb_tensor_set(&nt, tmp, sizeof(float) * (size_t)n);
    free(tmp);
    if (s == RB_OK) s = rb_model_own_buffer(m, nt.buf);
    if (s != RB_OK) { rb_tensor_free(&nt); return rb_error_set(err, s, "cannot upload norm weights"); }
    *t = nt;
    return RB_OK;
}

typedef struct name_table {
    const char *tok_embd, *out_norm, *output;
    const char *attn_norm, *wq, *wk, *wv, *wqkv, *wo, *bq, *bk, *bv, *bqkv, *bo;
    const char *post_attn_norm, *ffn_norm, *post_ffn_norm, *w_gate, *w_up, *w_gate_up, *w_down;
    const char *q_norm, *k_norm, *sinks;
} name_table;

static const name_table k_gguf_names = {
    "token_embd.weight", "output_norm.weight", "output.weight",
    "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
    "attn_qkv.weight", "attn_output.weight", "attn_q.bias", "attn_k.bias",
    "attn_v.bias", "attn_qkv.bias", "attn_output.bias",
    "post_attention_norm.weight", "ffn_norm.weight", "post_ffw_norm.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_up.weight", "ffn_down.weight",
    "attn_q_norm.weight", "attn_k_norm.weight", "attn_sinks.weight",
};

static const name_table k_hf_names = {
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
    "input_layernorm.weight", "self_attn.q_proj.weight",
    "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.qkv_proj.weight", "self_attn.o_proj.weight",
    "self_attn.q_proj.bias", "self_attn.k_proj.bias",
    "self_attn.v_proj.bias", "self_attn.qkv_proj.bias",
    "self_attn.o_proj.bias",
    "post_attention_layernorm.weight", /* gemma2 only; else it is the ffn norm */
    "post_attention_layernorm.weight", "post_feedforward_layernorm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.gate_up_proj.weight", "mlp.down_proj.weight",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight", "self_attn.sinks",
};

/* ---- fused projections (see the top of the file) ---- */

static void layer_name(char *buf, size_t n, bool hf, int il, const char *sfx) {
    snprintf(buf, n, hf ? "model.layers.%d.%s" : "blk.%d.%s", il, sfx);
}

/* Weights are fused where the backend copies them anyway (not host memory),
 * unless the load options say otherwise. */
static bool want_fusion(const rb_model *m) {
    if (m->fuse_proj != RB_FUSE_PROJ_AUTO) return m->fuse_proj == RB_FUSE_PROJ_ON;
    return rb_buffer_host_ptr(m->tok_embd.buf) == NULL;
}

/* Found, a concatenable dtype, and stored as whole rows back to back. */
static bool cat_ok(const rb_model *m, const char *name, found_weight *fw) {
    if (!find_weight(m, name, fw)) return false;
    const rb_dtype_traits *tr = rb_dtype_info((int)fw->dtype);
    if (!tr || fw->dtype == RB_Q8_K || fw->ne[0] <= 0 || fw->ne[0] % tr->block_size) return false;
    const int64_t rows = fw->ne[1] * fw->ne[2] * fw->ne[3];
    return rows > 0 && fw->nbytes == rb_dtype_row_size(fw->dtype, fw->ne[0]) * (size_t)rows;
}

/* True when in every layer the n weights sfx exist with one dtype and the n
 * biases bsfx (nullable) are either all absent or all present with one
 * dtype: then each group's bytes concatenate into one well-formed tensor.
 * Shapes are checked when binding, with the usual messages. */
/* Layer il's tensors sfx[0..n) (and biases bsfx, all or none) can be joined
 * into one matrix: present, one dtype, whole rows. */
static bool can_concat_layer(const rb_model *m, bool hf, int il, const char *const *sfx, const char *const *bsfx,
                             int n) {
    char name[256];
    found_weight fw, first;
    for (int i = 0; i < n; i++) {
        layer_name(name, sizeof name, hf, il, sfx[i]);
        if (!cat_ok(m, name, i ? &fw : &first) || (i && fw.dtype != first.dtype)) return false;
    }
    if (!bsfx) return true;
    int found = 0;
    for (int i = 0; i < n; i++) {
        layer_name(name, sizeof name, hf, il, bsfx[i]);
        if (!find_weight(m, name, &fw)) continue;
        if (!cat_ok(m, name, found ? &fw : &first) || (found && fw.dtype != first.dtype)) return false;
        found++;
    }
    return found == 0 || found == n;
}

/* The same for every layer. */
static bool can_concat(const rb_model *m, bool hf, const char *const *sfx, const char *const *bsfx, int n) {
    for (int il = 0; il < m->cfg.n_layer; il++)
        if (!can_concat_layer(m, hf, il, sfx, bsfx, n)) return false;
    return true;
}

typedef struct cat_part {
    const char *sfx;
    int64_t ne0, ne1; /* expected shape; ne1 = 1: a vector */
} cat_part;

/* Uploads the n parts of layer il back to back into one backend buffer: a
 * [ne0, sum of ne1] matrix, or for vectors one [sum of ne0] vector. Parts
 * that are all missing leave *present false (optional biases). */
static rb_status bind_cat(rb_model *m, bool hf, int il, const cat_part *parts, int n, bool vector, rb_tensor *out,
                          bool *present, rb_error *err) {
    char name[MAX_CAT][256];
    found_weight fw[MAX_CAT];
    bool have[MAX_CAT];
    int found = 0;
    if (present) *present = false;
    for (int i = 0; i < n; i++) {
        layer_name(name[i], sizeof name[i], hf, il, parts[i].sfx);
        found += have[i] = find_weight(m, name[i], &fw[i]);
    }
    if (found == 0 && present) return RB_OK;
    size_t total = 0;
    int64_t ne[2] = {vector ? 0 : parts[0].ne0, vector ? 1 : 0};
    for (int i = 0; i < n; i++) {
        if (!have[i]) return rb_error_set(err, RB_E_FORMAT, "missing tensor '%s'", name[i]);
        rb_status s = check_found(name[i], &fw[i], parts[i].ne0, parts[i].ne1, err);
        if (s != RB_OK) return s;
        if (fw[i].dtype != fw[0].dtype || !cat_ok(m, name[i], &fw[i]))
            return rb_error_set(err, RB_E_FORMAT, "tensor '%s' (%s) cannot be concatenated with '%s' (%s)", name[i],
                                rb_dtype_name(fw[i].dtype), name[0], rb_dtype_name(fw[0].dtype));
        total += fw[i].nbytes;
        ne[vector ? 0 : 1] += vector ? parts[i].ne0 : parts[i].ne1;
    }
    rb_buffer *buf = NULL;
    rb_status s = rb_buffer_alloc(m->be, total, &buf);
    if (s != RB_OK)
        return rb_error_set(err, s, "cannot allocate %zu bytes for the fused '%s': %s", total, name[0],
                            rb_backend_last_error(m->be));
    if ((s = rb_model_own_buffer(m, buf)) != RB_OK) {
        rb_buffer_free(buf);
        return rb_error_set(err, s, "out of memory");
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if ((s = rb_buffer_set(buf, off, fw[i].data, fw[i].nbytes)) != RB_OK)
            return rb_error_set(err, s, "cannot upload '%s': %s", name[i], rb_backend_last_error(m->be));
        off += fw[i].nbytes;
    }
    if (rb_tensor_init(out, fw[0].dtype, vector ? 1 : 2, ne, buf, 0) != RB_OK)
        return rb_error_set(err, RB_E_FORMAT, "bad fused tensor shape for '%s'", name[0]);
    m->weight_bytes += total;
    if (present) *present = true;
    return RB_OK;
}

static rb_status bind_all(rb_model *m, const name_table *nt, bool hf, rb_error *err) {
    const rb_model_config *c = &m->cfg;
    const int64_t E = c->n_embd, D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv, F = c->n_ff, V = c->n_vocab;
    rb_status s;
    if ((s = bind(m, nt->tok_embd, E, V, true, &m->tok_embd, NULL, err)) != RB_OK) return s;
    if ((s = bind(m, nt->out_norm, E, 1, true, &m->out_norm, NULL, err)) != RB_OK) return s;
    bool has_out = false;
    if ((s = bind(m, nt->output, E, V, false, &m->output, &has_out, err)) != RB_OK) return s;
    if (!has_out) {
        if (!c->tied_embeddings && hf)
            return rb_error_set(err, RB_E_FORMAT, "missing tensor '%s' (embeddings are not tied)", nt->output);
        m->output = m->tok_embd;
    }
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    const bool gemma2_hf = hf && c->post_norms, fuse = want_fusion(m);
    const char *const qkv_w[3] = {nt->wq, nt->wk, nt->wv}, *const qkv_b[3] = {nt->bq, nt->bk, nt->bv};
    const char *const gu_w[2] = {nt->w_gate, nt->w_up};
    int n_qkv_one = 0;
    const bool cat_gu = fuse && !c->fused_gate_up && can_concat(m, hf, gu_w, NULL, 2);
    for (int il = 0; il < c->n_layer; il++) {
        rb_layer_weights *L = &m->layers[il];
        char name[256];
#define NAME(sfx) (snprintf(name, sizeof name, hf ? "model.layers.%d.%s" : "blk.%d.%s", il, (sfx)), name)
        if (c->pre_norms && (s = bind(m, NAME(nt->attn_norm), E, 1, true, &L->attn_norm, NULL, err)) != RB_OK)
            return s;
        if (c->qk_norm) { /* per head ([D]) or over the whole projection */
            const int64_t nq = c->qk_norm == 1 ? D : Hq * D, nk = c->qk_norm == 1 ? D : Hkv * D;
            if ((s = bind(m, NAME(nt->q_norm), nq, 1, true, &L->q_norm, NULL, err)) != RB_OK) return s;
            if ((s = bind(m, NAME(nt->k_norm), nk, 1, true, &L->k_norm, NULL, err)) != RB_OK) return s;
            L->has_qk_norm = true;
            if (hf && c->embd_scale) { /* gemma3: (1 + w) */
                if ((s = f32_copy_plus(m, &L->q_norm, 1.0f, err)) != RB_OK) return s;
                if ((s = f32_copy_plus(m, &L->k_norm, 1.0f, err)) != RB_OK) return s;
            }
        }
        if (c->attn_sinks) {
            if ((s = bind(m, NAME(nt->sinks), Hq, 1, true, &L->sinks, NULL, err)) != RB_OK) return s;
            if (L->sinks.dtype != RB_F32 && (s = f32_copy_plus(m, &L->sinks, 0.0f, err)) != RB_OK) return s;
            L->has_sinks = true;
        }
        const bool cat_qkv = fuse && !c->fused_qkv && can_concat_layer(m, hf, il, qkv_w, qkv_b, 3);
        L->qkv_one = c->fused_qkv || cat_qkv;
        n_qkv_one += L->qkv_one;
        if (c->fused_qkv) {
            if ((s = bind(m, NAME(nt->wqkv), E, (Hq + 2 * Hkv) * D, true, &L->wqkv, NULL, err)) != RB_OK) return s;
            if ((s = bind(m, NAME(nt->bqkv), (Hq + 2 * Hkv) * D, 1, false, &L->bqkv, &L->has_bqkv, err)) != RB_OK)
                return s;
        } else if (cat_qkv) {
            const cat_part w[3] = {{nt->wq, E, Hq * D}, {nt->wk, E, Hkv * D}, {nt->wv, E, Hkv * D}};
            const cat_part bias[3] = {{nt->bq, Hq * D, 1}, {nt->bk, Hkv * D, 1}, {nt->bv, Hkv * D, 1}};
            if ((s = bind_cat(m, hf, il, w, 3, false, &L->wqkv, NULL, err)) != RB_OK) return s;
            if ((s = bind_cat(m, hf, il, bias, 3, true, &L->bqkv, &L->has_bqkv, err)) != RB_OK) return s;
            if (c->qkv_bias && !L->has_bqkv)
                return rb_error_set(err, RB_E_FORMAT, "missing tensor '%s'", NAME(nt->bq));
        } else {
            if ((s = bind(m, NAME(nt->wq), E, Hq * D, true, &L->wq, NULL, err)) != RB_OK) return s;
            if ((s = bind(m, NAME(nt->wk), E, Hkv * D, true, &L->wk, NULL, err)) != RB_OK) return s;
            if ((s = bind(m, NAME(nt->wv), E, Hkv * D, true, &L->wv, NULL, err)) != RB_OK) return s;
            if ((s = bind(m, NAME(nt->bq), Hq * D, 1, c->qkv_bias, &L->bq, &L->has_bq, err)) != RB_OK) return s;
            if ((s = bind(m, NAME(nt->bk), Hkv * D, 1, c->qkv_bias, &L->bk, &L->has_bk, err)) != RB_OK) return s;
            if ((s = bind(m, NAME(nt->bv), Hkv * D, 1, c->qkv_bias, &L->bv, &L->has_bv, err)) != RB_OK) return s;
        }
        if ((s = bind(m, NAME(nt->wo), Hq * D, E, true, &L->wo, NULL, err)) != RB_OK) return s;
        if ((s = bind(m, NAME(nt->bo), E, 1, false, &L->bo, &L->has_bo, err)) != RB_OK) return s;
        if (c->post_norms) {
            if ((s = bind(m, NAME(nt->post_attn_norm), E, 1, true, &L->post_attn_norm, NULL, err)) != RB_OK)
                return s;
            if ((s = bind(m, NAME(nt->post_ffn_norm), E, 1, true, &L->post_ffn_norm, NULL, err)) != RB_OK)
                return s;
        }
        /* the MLP's input norm: HF gemma2/3 call it pre_feedforward_layernorm; llama.cpp's gpt-oss
         * stores it as post_attention_norm (what the HF file calls post_attention_layernorm) */
        const char *ffn_norm_name = gemma2_hf                           ? "pre_feedforward_layernorm.weight"
                                    : !hf && c->arch == RB_ARCH_GPTOSS ? "post_attention_norm.weight"
                                                                        : nt->ffn_norm;
        if (c->pre_norms && (s = bind(m, NAME(ffn_norm_name), E, 1, true, &L->ffn_norm, NULL, err)) != RB_OK)
            return s;
        if ((s = rb_model_bind_experts(m, hf, il, L, &L->moe, err)) != RB_OK) return s;
        if (L->moe) {
            /* the experts replace the dense MLP */
        } else if (c->fused_gate_up) {
            if ((s = bind(m, NAME(nt->w_gate_up), E, 2 * F, true, &L->w_gate_up, NULL, err)) != RB_OK) return s;
        } else if (cat_gu) {
            const cat_part w[2] = {{nt->w_gate, E, F}, {nt->w_up, E, F}};
            if ((s = bind_cat(m, hf, il, w, 2, false, &L->w_gate_up, NULL, err)) != RB_OK) return s;
        } else {
            if ((s = bind(m, NAME(nt->w_gate), E, F, true, &L->w_gate, NULL, err)) != RB_OK) return s;
            if ((s = bind(m, NAME(nt->w_up), E, F, true, &L->w_up, NULL, err)) != RB_OK) return s;
        }
        if (!L->moe && (s = bind(m, NAME(nt->w_down), F, E, true, &L->w_down, NULL, err)) != RB_OK) return s;
#undef NAME
        if (hf && c->embd_scale) { /* gemma family: (1 + w) norms */
            if ((s = f32_copy_plus(m, &L->attn_norm, 1.0f, err)) != RB_OK) return s;
            if ((s = f32_copy_plus(m, &L->ffn_norm, 1.0f, err)) != RB_OK) return s;
            if (c->post_norms) {
                if ((s = f32_copy_plus(m, &L->post_attn_norm, 1.0f, err)) != RB_OK) return s;
                if ((s = f32_copy_plus(m, &L->post_ffn_norm, 1.0f, err)) != RB_OK) return s;
            }
        }
    }
    if (hf && c->embd_scale && (s = f32_copy_plus(m, &m->out_norm, 1.0f, err)) != RB_OK) return s;
    /* the forward pass now takes the fused paths (the layouts above are theirs) */
    m->cfg.n_layer_qkv_one = n_qkv_one;
    if (n_qkv_one == c->n_layer) m->cfg.fused_qkv = true;
    if (cat_gu) m->cfg.fused_gate_up = true;
    return RB_OK;
}

static void count_main_dtype(rb_model *m) {
    /* the dtype of the first attention projection is representative */
    const rb_layer_weights *L = &m->layers[0];
    m->main_dtype = L->qkv_one ? L->wqkv.dtype : L->wq.dtype;
}

rb_status rb_model_bind_gguf(rb_model *m, rb_error *err) {
    rb_status s = bind_all(m, &k_gguf_names, false, err);
    if (s != RB_OK) return s;
    if (m->cfg.has_rope_factors && m->cfg.rope_yarn_factor <= 0) { /* yarn: computed by the loader */
        const int64_t half = m->cfg.n_rot / 2;
        bool present = false;
        s = bind(m, "rope_freqs.weight", half, 1, false, &m->rope_factors, &present, err);
        if (s == RB_OK && !present) /* phi3 longrope: short factors for contexts within the original length */
            s = bind(m, "rope_factors_short.weight", half, 1, true, &m->rope_factors, NULL, err);
        if (s != RB_OK) return s;
        if (m->rope_factors.dtype != RB_F32)
            return rb_error_set(err, RB_E_FORMAT, "rope frequency factors must be f32");
        if (m->cfg.has_rope_long) {
            if ((s = bind(m, "rope_factors_long.weight", half, 1, true, &m->rope_factors_long, NULL, err)) != RB_OK)
                return s;
            if (m->rope_factors_long.dtype != RB_F32)
                return rb_error_set(err, RB_E_FORMAT, "rope frequency factors must be f32");
            if (m->cfg.rope_orig_ctx <= 0)
                return rb_error_set(err, RB_E_FORMAT, "longrope factors without rope.scaling.original_context_length");
        }
    }
    count_main_dtype(m);
    return RB_OK;
}

rb_status rb_model_bind_hf(rb_model *m, rb_error *err) {
    rb_status s = bind_all(m, &k_hf_names, true, err);
    if (s == RB_OK) count_main_dtype(m);
    return s;
}

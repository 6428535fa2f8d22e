/* Binds a model's weight tensors by name from a GGUF file (llama.cpp names)
 * or a safetensors set (Hugging Face names), checking every shape against the
 * config, and places them on the model's backend: wrapped in place on the
 * CPU (the file stays memory-mapped), uploaded elsewhere. */
#include "models/model_internal.h"
#include "rbee/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Finds `name` and checks its shape is {ne0, ne1} (ne1 = 1 for vectors). */
static rb_status bind(rb_model *m, const char *name, int64_t ne0, int64_t ne1, bool required, rb_tensor *out,
                      bool *present, rb_error *err) {
    found_weight fw;
    if (present) *present = false;
    if (!find_weight(m, name, &fw)) {
        if (!required) return RB_OK;
        return rb_error_set(err, RB_E_FORMAT, "missing tensor '%s'", name);
    }
    const rb_dtype_traits *tr = rb_dtype_info((int)fw.dtype);
    if (!tr || fw.dtype == RB_I8 || fw.dtype == RB_I16 || fw.dtype == RB_I32 || fw.dtype == RB_I64 ||
        fw.dtype == RB_F64 || fw.dtype == RB_Q8_K)
        return rb_error_set(err, RB_E_UNSUPPORTED, "tensor '%s' has unsupported dtype %s", name,
                            rb_dtype_name(fw.dtype));
    if (fw.ne[0] != ne0 || fw.ne[1] != ne1 || fw.ne[2] != 1 || fw.ne[3] != 1)
        return rb_error_set(err, RB_E_FORMAT, "tensor '%s' has shape [%lld,%lld,%lld,%lld], expected [%lld,%lld]",
                            name, (long long)fw.ne[0], (long long)fw.ne[1], (long long)fw.ne[2],
                            (long long)fw.ne[3], (long long)ne0, (long long)ne1);
    rb_status s = place(m, &fw, out, err);
    if (s == RB_OK && present) *present = true;
    return s;
}

/* Gemma's HF norms compute x * (1 + w); GGUF stores 1 + w. Make an f32 copy with +1. */
static rb_status make_plus_one(rb_model *m, rb_tensor *t, rb_error *err) {
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
    for (int64_t i = 0; i < n; i++) tmp[i] += 1.0f;
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
} name_table;

static const name_table k_gguf_names = {
    "token_embd.weight", "output_norm.weight", "output.weight",
    "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
    "attn_qkv.weight", "attn_output.weight", "attn_q.bias", "attn_k.bias",
    "attn_v.bias", "attn_qkv.bias", "attn_output.bias",
    "post_attention_norm.weight", "ffn_norm.weight", "post_ffw_norm.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_up.weight", "ffn_down.weight",
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
};

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
    const bool gemma2_hf = hf && c->post_norms;
    for (int il = 0; il < c->n_layer; il++) {
        rb_layer_weights *L = &m->layers[il];
        char name[256];
#define NAME(sfx) (snprintf(name, sizeof name, hf ? "model.layers.%d.%s" : "blk.%d.%s", il, (sfx)), name)
        if ((s = bind(m, NAME(nt->attn_norm), E, 1, true, &L->attn_norm, NULL, err)) != RB_OK) return s;
        if (c->fused_qkv) {
            if ((s = bind(m, NAME(nt->wqkv), E, (Hq + 2 * Hkv) * D, true, &L->wqkv, NULL, err)) != RB_OK) return s;
            if ((s = bind(m, NAME(nt->bqkv), (Hq + 2 * Hkv) * D, 1, false, &L->bqkv, &L->has_bqkv, err)) != RB_OK)
                return s;
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
        const char *ffn_norm_name = gemma2_hf ? "pre_feedforward_layernorm.weight" : nt->ffn_norm;
        if ((s = bind(m, NAME(ffn_norm_name), E, 1, true, &L->ffn_norm, NULL, err)) != RB_OK) return s;
        if (c->fused_gate_up) {
            if ((s = bind(m, NAME(nt->w_gate_up), E, 2 * F, true, &L->w_gate_up, NULL, err)) != RB_OK) return s;
        } else {
            if ((s = bind(m, NAME(nt->w_gate), E, F, true, &L->w_gate, NULL, err)) != RB_OK) return s;
            if ((s = bind(m, NAME(nt->w_up), E, F, true, &L->w_up, NULL, err)) != RB_OK) return s;
        }
        if ((s = bind(m, NAME(nt->w_down), F, E, true, &L->w_down, NULL, err)) != RB_OK) return s;
#undef NAME
        if (hf && c->embd_scale) { /* gemma family: (1 + w) norms */
            if ((s = make_plus_one(m, &L->attn_norm, err)) != RB_OK) return s;
            if ((s = make_plus_one(m, &L->ffn_norm, err)) != RB_OK) return s;
            if (c->post_norms) {
                if ((s = make_plus_one(m, &L->post_attn_norm, err)) != RB_OK) return s;
                if ((s = make_plus_one(m, &L->post_ffn_norm, err)) != RB_OK) return s;
            }
        }
    }
    if (hf && c->embd_scale && (s = make_plus_one(m, &m->out_norm, err)) != RB_OK) return s;
    return RB_OK;
}

static void count_main_dtype(rb_model *m) {
    /* the dtype of the first attention projection is representative */
    const rb_layer_weights *L = &m->layers[0];
    m->main_dtype = m->cfg.fused_qkv ? L->wqkv.dtype : L->wq.dtype;
}

rb_status rb_model_bind_gguf(rb_model *m, rb_error *err) {
    rb_status s = bind_all(m, &k_gguf_names, false, err);
    if (s != RB_OK) return s;
    if (m->cfg.has_rope_factors) {
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

/* A T5 encoder from a GGUF file in llama.cpp's T5 layout (token_embd.weight,
 * enc.blk.N.attn_{q,k,v,o}/attn_rel_b/attn_norm/ffn_{gate,up,down}/ffn_norm,
 * enc.output_norm.weight; general.architecture "t5" or "t5encoder" with its
 * <arch>.* hyperparameters). The tensors are seen through transformers'
 * names (sd_weights lookup), so they may be f32, f16, bf16 or any
 * ggml-quantized type the SD weights layer takes. llama.cpp records no
 * relative_attention_max_distance (it assumes T5's 128); a transformers
 * config.json may be given to take every value from it instead. */
#include "rbee/gguf.h"
#include "rbee/sd_t5.h"
#include "sd/sd_blocks.h"
#include "sd/sd_nets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct t5_gguf {
    sd_tensor_owner src; /* first member */
    rb_gguf *g;
    rb_st_tensor *t; /* mapped tensors, named as transformers names them */
    char **names;
    size_t n;
} t5_gguf;

static void destroy(sd_tensor_owner *s) {
    t5_gguf *f = (t5_gguf *)s;
    for (size_t i = 0; i < f->n; i++) free(f->names[i]);
    free(f->names);
    free(f->t);
    rb_gguf_close(f->g);
    free(f);
}

static const rb_st_tensor *lookup(const sd_weights *w, const char *name) {
    const t5_gguf *f = w->lookup_ctx;
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

/* transformers' name of a llama.cpp T5 tensor name (s, len bytes), or false
 * for a tensor the encoder does not use (the decoder's, the LM head). */
static bool map_name(const char *s, size_t len, bool gated, char *out, size_t cap) {
    char n[256];
    if (len >= sizeof n) return false;
    memcpy(n, s, len);
    n[len] = 0;
    if (!strcmp(n, "token_embd.weight")) return snprintf(out, cap, "shared.weight") < (int)cap;
    if (!strcmp(n, "enc.output_norm.weight")) return snprintf(out, cap, "encoder.final_layer_norm.weight") < (int)cap;
    if (strncmp(n, "enc.blk.", 8) != 0) return false;
    char *end;
    const long b = strtol(n + 8, &end, 10);
    if (end == n + 8 || *end != '.' || b < 0 || b > 100000) return false;
    static const struct { const char *ll, *hf; } tab[] = {
        {"attn_q.weight", "layer.0.SelfAttention.q.weight"},
        {"attn_k.weight", "layer.0.SelfAttention.k.weight"},
        {"attn_v.weight", "layer.0.SelfAttention.v.weight"},
        {"attn_o.weight", "layer.0.SelfAttention.o.weight"},
        {"attn_rel_b.weight", "layer.0.SelfAttention.relative_attention_bias.weight"},
        {"attn_norm.weight", "layer.0.layer_norm.weight"},
        {"ffn_norm.weight", "layer.1.layer_norm.weight"},
        {"ffn_gate.weight", "layer.1.DenseReluDense.wi_0.weight"},
        {"ffn_down.weight", "layer.1.DenseReluDense.wo.weight"},
    };
    const char *suf = end + 1;
    if (!strcmp(suf, "ffn_up.weight"))
        return snprintf(out, cap, "encoder.block.%ld.layer.1.DenseReluDense.%s.weight", b, gated ? "wi_1" : "wi") <
               (int)cap;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(suf, tab[i].ll)) return snprintf(out, cap, "encoder.block.%ld.%s", b, tab[i].hf) < (int)cap;
    return false;
}

static rb_status meta_int(const rb_gguf *g, const char *arch, const char *key, int64_t def, int64_t *out,
                          rb_error *err) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    rb_status s = rb_gguf_get_i64(g, k, out);
    if (s == RB_E_NOT_FOUND && def >= 0) {
        *out = def;
        return RB_OK;
    }
    if (s == RB_E_NOT_FOUND) return rb_error_set(err, RB_E_FORMAT, "t5 gguf: metadata '%s' missing", k);
    if (s != RB_OK) return rb_error_set(err, RB_E_FORMAT, "t5 gguf: metadata '%s' is not an integer", k);
    return RB_OK;
}

static rb_status meta_config(const rb_gguf *g, const t5_gguf *f, bool gated, rb_t5_config *c, rb_error *err) {
    memset(c, 0, sizeof *c);
    char *arch = NULL;
    if (rb_gguf_get_str(g, "general.architecture", &arch) != RB_OK || (strcmp(arch, "t5") && strcmp(arch, "t5encoder"))) {
        rb_status s = rb_error_set(err, RB_E_UNSUPPORTED, "t5 gguf: general.architecture is %s, not t5 / t5encoder",
                                   arch ? arch : "(absent)");
        free(arch);
        return s;
    }
    rb_status s = meta_int(g, arch, "embedding_length", -1, &c->d_model, err);
    if (s == RB_OK) s = meta_int(g, arch, "feed_forward_length", -1, &c->d_ff, err);
    if (s == RB_OK) s = meta_int(g, arch, "block_count", -1, &c->n_layers, err);
    if (s == RB_OK) s = meta_int(g, arch, "attention.head_count", -1, &c->n_heads, err);
    if (s == RB_OK && c->n_heads > 0)
        s = meta_int(g, arch, "attention.key_length", c->d_model / c->n_heads, &c->d_kv, err);
    if (s == RB_OK) s = meta_int(g, arch, "attention.relative_buckets_count", 32, &c->rel_buckets, err);
    c->rel_max_distance = 128;
    char k[128];
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", arch);
    double eps = 1e-6;
    if (s == RB_OK && rb_gguf_get_f64(g, k, &eps) == RB_E_FORMAT)
        s = rb_error_set(err, RB_E_FORMAT, "t5 gguf: metadata '%s' is not a number", k);
    c->eps = (float)eps;
    free(arch);
    if (s != RB_OK) return s;
    const rb_st_tensor *emb = NULL;
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, "shared.weight")) emb = &f->t[i];
    if (!emb) return rb_error_set(err, RB_E_FORMAT, "t5 gguf: token_embd.weight missing");
    c->vocab_size = emb->ne[1];
    c->gated = gated;
    return RB_OK;
}

rb_status rb_t5_load_gguf(const char *path, const char *config_json, rb_backend *be, const rb_sd_load_opts *opts,
                          rb_t5 **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "t5 gguf: out is NULL");
    *out = NULL;
    if (!path || !be) return rb_error_set(err, RB_E_INVALID, "t5 gguf: NULL argument");
    if (opts) SD_TRY(sd_act_check(opts->act_dtype, "t5", err));
    t5_gguf *f = calloc(1, sizeof *f);
    if (!f) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    f->src.refs = 1;
    f->src.destroy = destroy;
    rb_status s = rb_gguf_open(path, &f->g, err);
    if (s != RB_OK) {
        free(f);
        return s;
    }
    const int64_t nt = rb_gguf_n_tensors(f->g);
    f->t = calloc(nt > 0 ? (size_t)nt : 1, sizeof *f->t);
    f->names = calloc(nt > 0 ? (size_t)nt : 1, sizeof *f->names);
    if (!f->t || !f->names) s = rb_error_set(err, RB_E_NOMEM, "out of memory");
    const bool gated = rb_gguf_find_tensor(f->g, "enc.blk.0.ffn_gate.weight") != NULL;
    for (int64_t i = 0; i < nt && s == RB_OK; i++) {
        const rb_gguf_tensor_info *ti = rb_gguf_tensor_at(f->g, i);
        char hf[SD_NAME_MAX];
        if (!map_name(ti->name.ptr, (size_t)ti->name.len, gated, hf, sizeof hf)) continue;
        for (size_t j = 0; j < f->n; j++)
            if (!strcmp(f->names[j], hf)) s = rb_error_set(err, RB_E_FORMAT, "t5 gguf: %s: tensor %s twice", path, hf);
        if (s != RB_OK) break;
        char *nm = malloc(strlen(hf) + 1);
        if (!nm) {
            s = rb_error_set(err, RB_E_NOMEM, "out of memory");
            break;
        }
        memcpy(nm, hf, strlen(hf) + 1);
        f->names[f->n] = nm;
        rb_st_tensor *t = &f->t[f->n++];
        t->name = nm;
        t->dtype = ti->dtype;
        t->n_dims = ti->n_dims;
        memcpy(t->ne, ti->ne, sizeof t->ne);
        t->nbytes = ti->nbytes;
        t->data = ti->data;
    }
    rb_t5_config cfg;
    if (s == RB_OK) s = config_json ? rb_t5_config_load(config_json, &cfg, err) : meta_config(f->g, f, gated, &cfg, err);
    if (s == RB_OK && cfg.gated != gated)
        s = rb_error_set(err, RB_E_FORMAT, "t5 gguf: %s: the config says %s, the tensors %s", path,
                         cfg.gated ? "gated-gelu" : "relu", gated ? "have ffn_gate" : "have no ffn_gate");
    sd_weights ws;
    if (s == RB_OK) {
        s = sd_weights_init_source(&ws, &f->src, lookup, f, path, be, opts, err);
        if (s != RB_OK) sd_weights_close(&ws);
    }
    if (s == RB_OK) {
        s = sd_t5_create(&cfg, &ws, out, err);
        if (s == RB_OK && opts) s = rb_t5_set_act_dtype(*out, opts->act_dtype, err);
    }
    sd_owner_unref(&f->src);
    return s;
}

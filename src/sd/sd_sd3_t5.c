/* The T5 encoder of an SD3 single file (or of a separate t5xxl file) in
 * transformers' T5EncoderModel names: the single file stores exactly those
 * names under its prefix, so mapping is stripping the prefix. The config
 * comes from the shapes: shared [vocab, d_model], the first block's
 * relative_attention_bias [buckets, heads], q [heads * d_kv, d_model],
 * wi_0 / wi_1 (gated-gelu, T5 v1.1 as SD3 uses) or wi [d_ff, d_model], and
 * every block is checked against it. A file with only encoder.embed_tokens
 * (the tied copy of shared) gets it under shared.weight as well. */
#include "sd/sd_sd3.h"

#include <stdio.h>
#include <string.h>

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static int64_t dim(const sd_name_map *m, const char *name, int nd, int d) {
    const rb_st_tensor *t = sd_name_map_find(m, name);
    return t && t->n_dims == nd ? t->ne[d] : 0;
}

static rb_status shape(const sd_name_map *m, sd_t5_shape *sh, rb_error *err) {
    static const char rel[] = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight";
    sh->present = true;
    sh->d_model = dim(m, "shared.weight", 2, 0);
    sh->vocab = dim(m, "shared.weight", 2, 1);
    sh->n_buckets = (int)dim(m, rel, 2, 1);
    sh->n_heads = (int)dim(m, rel, 2, 0);
    const int64_t inner = dim(m, "encoder.block.0.layer.0.SelfAttention.q.weight", 2, 1);
    sh->gated = sd_name_map_find(m, "encoder.block.0.layer.1.DenseReluDense.wi_0.weight") != NULL;
    sh->d_ff = dim(m, sh->gated ? "encoder.block.0.layer.1.DenseReluDense.wi_0.weight"
                                : "encoder.block.0.layer.1.DenseReluDense.wi.weight", 2, 1);
    sh->max_distance = 128;
    char n[160];
    sh->n_layers = 0;
    for (;;) {
        snprintf(n, sizeof n, "encoder.block.%d.layer.0.SelfAttention.q.weight", sh->n_layers);
        if (!sd_name_map_find(m, n)) break;
        sh->n_layers++;
    }
    if (sh->d_model <= 0 || sh->vocab <= 0 || sh->n_heads <= 0 || sh->n_buckets <= 0 || inner <= 0 ||
        inner % sh->n_heads != 0 || sh->d_ff <= 0 || sh->n_layers == 0)
        return rb_error_set(err, RB_E_FORMAT, "T5 encoder: shared.weight, the first block's attention (q, "
                            "relative_attention_bias) or its feed-forward is missing or misshapen");
    sh->d_kv = inner / sh->n_heads;
    const int64_t D = sh->d_model, F = sh->d_ff;
    rb_status s;
    if ((s = sd_sd3_need(m, "T5 encoder", "encoder.final_layer_norm.weight", 1, D, 0, 0, err)) != RB_OK) return s;
    for (int b = 0; b < sh->n_layers; b++) {
        static const char *const qkv[] = {"q", "k", "v"};
        for (int k = 0; k < 3; k++) {
            snprintf(n, sizeof n, "encoder.block.%d.layer.0.SelfAttention.%s.weight", b, qkv[k]);
            if ((s = sd_sd3_need(m, "T5 encoder", n, 2, D, inner, 0, err)) != RB_OK) return s;
        }
        snprintf(n, sizeof n, "encoder.block.%d.layer.0.SelfAttention.o.weight", b);
        if ((s = sd_sd3_need(m, "T5 encoder", n, 2, inner, D, 0, err)) != RB_OK) return s;
        for (int k = 0; k < 2; k++) {
            snprintf(n, sizeof n, "encoder.block.%d.layer.%d.layer_norm.weight", b, k);
            if ((s = sd_sd3_need(m, "T5 encoder", n, 1, D, 0, 0, err)) != RB_OK) return s;
        }
        static const char *const wi[] = {"wi_0", "wi_1"};
        for (int k = 0; k < (sh->gated ? 2 : 1); k++) {
            snprintf(n, sizeof n, "encoder.block.%d.layer.1.DenseReluDense.%s.weight", b, sh->gated ? wi[k] : "wi");
            if ((s = sd_sd3_need(m, "T5 encoder", n, 2, D, F, 0, err)) != RB_OK) return s;
        }
        snprintf(n, sizeof n, "encoder.block.%d.layer.1.DenseReluDense.wo.weight", b);
        if ((s = sd_sd3_need(m, "T5 encoder", n, 2, F, D, 0, err)) != RB_OK) return s;
    }
    return RB_OK;
}

rb_status sd_sd3_map_t5(const sd_tensor_list *ckpt, const char *prefix, sd_name_map *m, sd_t5_shape *sh,
                        rb_error *err) {
    memset(sh, 0, sizeof *sh);
    const size_t pl = strlen(prefix);
    const rb_st_tensor *embed = NULL;
    bool shared = false;
    for (int64_t i = 0; i < ckpt->n; i++) {
        const rb_st_tensor *t = &ckpt->t[i];
        if (strncmp(t->name, prefix, pl) != 0) continue;
        const char *p = t->name + pl;
        if (!starts(p, "encoder.") && strcmp(p, "shared.weight") != 0) continue; /* decoder, lm_head: not used */
        if (!strcmp(p, "shared.weight")) shared = true;
        if (!strcmp(p, "encoder.embed_tokens.weight")) embed = t;
        rb_status s = sd_name_map_add(m, p, t, err);
        if (s != RB_OK) return s;
    }
    if (!shared && embed) {
        rb_status s = sd_name_map_add(m, "shared.weight", embed, err);
        if (s != RB_OK) return s;
    }
    return shape(m, sh, err);
}
